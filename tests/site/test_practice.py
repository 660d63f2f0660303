"""Checks on the built practice pages and the summary (run after the site is built into site/).

They read the HTML readers get: the widgets carry the documented hooks, the embedded data is what the
data files and the models give, and every numeric answer is the one the code computes now.
"""

from __future__ import annotations

import itertools
import json
import re
from html import unescape
from html.parser import HTMLParser
from pathlib import Path

import pytest
import torch

from lessons_src import MultiHeadAttention
from lessons_src.lab.configs import LESSON_MODELS, load_configs

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "site"
import practice_pages as pp  # noqa: E402

if not (SITE / "index.html").exists():
    pytest.fail("site/ is not built: run `make build` first (make test does)", pytrace=False)

PAGES = {
    "questions": SITE / "practice" / "questions" / "index.html",
    "interview": SITE / "practice" / "interview" / "index.html",
    "flashcards": SITE / "practice" / "flashcards" / "index.html",
    "quiz": SITE / "practice" / "quiz" / "index.html",
    "explorer": SITE / "practice" / "head-explorer" / "index.html",
    "lab": SITE / "practice" / "lab" / "index.html",
    "summary": SITE / "summary" / "index.html",
}


def html_of(name: str) -> str:
    return PAGES[name].read_text(encoding="utf-8")


def text_of(name: str) -> str:
    return unescape(re.sub(r"<[^>]+>", "", html_of(name)))


class Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def tags_of(name: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = Tags()
    parser.feed(html_of(name))
    return parser.tags


def has_class(attrs: dict[str, str | None], cls: str) -> bool:
    return cls in (attrs.get("class") or "").split()


@pytest.mark.parametrize("name", list(PAGES))
def test_page_is_built_small_and_loads_the_widgets(name: str) -> None:
    assert PAGES[name].exists(), f"{name} was not built"
    html = html_of(name)
    assert "assets/js/practice.js" in html
    # the widgets' stylesheet is inlined into the pages that show a widget, and only there (not render-blocking)
    css = (ROOT / "docs" / "assets" / "practice.css").read_text(encoding="utf-8")
    assert (f"<style>{css}</style>" in html) == (name in {"flashcards", "quiz", "explorer", "lab"})
    assert "assets/practice.css" not in html
    assert len(html.encode()) < 1_000_000  # the lab is the largest: mkdocs-jupyter inlines its CSS
    assert "Traceback (most recent call last)" not in text_of(name)


def test_nav_has_the_practice_section_and_the_summary() -> None:
    home = (SITE / "index.html").read_text(encoding="utf-8")
    for href in ("summary/", "practice/questions/", "practice/interview/", "practice/flashcards/",
                 "practice/quiz/", "practice/head-explorer/", "practice/lab/"):
        assert f'href="{href}"' in home, href


def test_questions_page_has_seven_collapsible_answers() -> None:
    details = [a for t, a in tags_of("questions") if t == "details" and has_class(a, "question")]
    assert len(details) >= 7


def test_dimension_exercise_outcomes_come_from_the_code() -> None:
    text = text_of("questions")
    for h in (16, 32):
        mha = MultiHeadAttention(1024, h)
        E = mha.head_dim
        assert f"1. d_k = 1024 / {h} = {E}" in text
        assert f"concatenated {h} x {E} = {h * E} -> after W_O 1024" in text
        assert f"one head's W_Q: 1024 x {E} = {1024 * E:,}; all {h} heads: {1024 * 1024:,}" in text
        assert f"5. all projection weights: {sum(p.numel() for p in mha.parameters()):,}" in text
    assert "d_model=768, h=10 -> d_model=768 is not divisible by num_heads=10" in text


def test_config_exercise_prints_a_card_per_model_under_its_sources_names() -> None:
    # Each card lists the fields under the names the source uses, the head size (stated, or width / heads), and a
    # star where heads x head size is not the width: Gemma 2 and 3 state head_dim 128 with widths 4608 and 5376.
    text = text_of("questions")
    starred = []
    for cfg in load_configs(LESSON_MODELS).values():
        if cfg.mla:
            continue
        pattern = rf"{re.escape(cfg.name)} \((\w+)\)\n(.*?)\n  {cfg.num_heads} x (\d+) = (\d+)( \*)?"
        card = re.search(pattern, text, re.S)
        assert card is not None, cfg.name
        kind, fields, head_dim, product, star = card.groups()
        assert kind == cfg.attention_kind
        for field, name in cfg.card_names.items():
            if field in ("d_model", "num_heads", "num_kv_heads", "head_dim"):
                assert re.search(rf"^  {re.escape(name)} +{getattr(cfg, field)}$", fields, re.M), (cfg.name, name)
        assert (int(head_dim), int(product)) == (cfg.head_dim, cfg.num_heads * cfg.head_dim)
        if star:
            starred.append(cfg.name)
    assert starred == ["Gemma 2 27B", "Gemma 3 27B"]
    assert "4608 / 32" not in text and "5376 / 32" not in text  # the instructed sum is not applied to them
    bert = load_configs()["BERT-base"]
    assert f"= {bert.num_layers * bert.num_heads} attention maps" in text


def test_interview_gives_a_common_wrong_answer_for_every_question() -> None:
    tags = tags_of("interview")
    questions = [a for t, a in tags if t == "details" and has_class(a, "question")]
    wrong = [a for t, a in tags if t == "div" and has_class(a, "failure")]
    assert len(questions) >= 8 and len(wrong) == len(questions)
    text = text_of("interview")
    assert text.count("Common wrong answer") == len(questions)
    for h in (1, 8, 16, 64):
        assert f"h={h:>2}  d_k={1024 // h:>4}  n={4 * 1024**2:,}" in text


def test_interview_advanced_answers_are_printed_by_the_code() -> None:
    from lessons_src.kv_cache import kv_bytes_per_token, latent_bytes_per_token
    from lessons_src.lab.lesson_tools import attention_flops

    text = text_of("interview")
    questions = [a for t, a in tags_of("interview") if t == "details" and has_class(a, "question")]
    assert len(questions) >= 14  # the ten basics and the four on inference
    for name in ("LLaMA 7B", "Llama 3 8B", "Llama 2 70B", "DeepSeek-V2"):
        cfg = load_configs()[name]
        if cfg.mla:
            per_layer = latent_bytes_per_token(cfg.mla["kv_latent_dim"], cfg.mla["rope_dim"], torch.bfloat16)
        else:
            per_layer = kv_bytes_per_token(cfg.num_kv_heads, cfg.head_dim, torch.bfloat16)
        total = per_layer * cfg.num_layers * 32_768
        # fmt_table's narrow form (the answer is in a collapsible): the model's name, then its numbers below
        row = [cfg.attention_kind, f"{per_layer:,}", str(cfg.num_layers), f"{total / 2**30:.2f}"]
        lines = [line.strip() for line in text.splitlines()]
        assert any(a == name and b.split() == row for a, b in itertools.pairwise(lines)), name
    for line in ("formula == bytes a cache holds: yes", "bottom-right == the full pass: yes",
                 "is_causal=True differs from it: yes", "translated back: yes"):
        assert line in text
    for T in (64, 128, 256):
        assert re.search(rf"\n *{T} +{attention_flops(64, 4, T)['attention'] / 1e6:.1f} +", text), T
    assert re.search(r"MLA, absorbed\n +[\d.]+% +[\d,.]+ +[\d.]+x", text)


def test_flashcards_are_rendered_from_the_data_file() -> None:
    cards = pp.load_flashcards()
    tags = tags_of("flashcards")
    buttons = [a for t, a in tags if t == "button" and has_class(a, "flashcard")]
    assert len(buttons) == len(cards) >= 12
    assert all(a.get("aria-pressed") == "false" for a in buttons)
    assert any("data-print-flashcards" in a for t, a in tags if t == "button")
    assert sum("data-flashcards" in a for _, a in tags) == 1
    text = text_of("flashcards")
    for card in cards:
        assert card["front"] in text and card["back"] in text
    assert f"{4 * 768 * 768:,}" in text  # the parameter-count card was filled in by the code
    assert pp.computed_values()["kv_cache"] in text  # so was the cache-size card
    marks = [a.get("data-mark") for t, a in tags if t == "button" and "data-mark" in a]
    assert marks == ["known", "again"] * len(cards)
    for hook in ("data-shuffle-flashcards", "data-study-again", "data-reset-marks", "data-flip-all"):
        assert sum(hook in a for t, a in tags if t == "button") == 1, hook


def test_print_stylesheet_puts_one_card_per_page() -> None:
    css = (ROOT / "docs" / "assets" / "practice.css").read_text(encoding="utf-8")
    assert css in html_of("flashcards")  # inlined into the page that prints
    media_print = css[css.index("@media print") :]
    assert "break-after: page" in media_print
    assert ".flashcard-back" in media_print and "display: block !important" in media_print


def test_quiz_is_rendered_from_the_data_file() -> None:
    questions = pp.load_quiz()
    tags = tags_of("quiz")
    fieldsets = [a for t, a in tags if t == "fieldset" and has_class(a, "quiz-question")]
    assert len(fieldsets) == len(questions) >= 8
    radios = [a for t, a in tags if t == "input" and a.get("type") == "radio"]
    for q in questions:
        mine = [a for a in radios if a.get("name") == f"quiz-{q['id']}"]
        assert len(mine) == len(q["options"])
        assert [a.get("data-correct") for a in mine].count("true") == 1
        assert all(a.get("data-explanation") for a in mine)
    assert sum(1 for _, a in tags if "data-quiz-score" in a) == 1
    feedback = [a for _, a in tags if has_class(a, "quiz-feedback")]
    assert len(feedback) == len(questions) and all(a.get("aria-live") == "polite" for a in feedback)
    text = text_of("quiz")
    assert str(MultiHeadAttention(1024, 16).head_dim) in text and f"{4 * 1024**2:,}" in text
    assert f"Score: {pp.score_text(0, len(questions), 0)}" in text  # the wording the script keeps
    assert pp.computed_values()["kv_cache"] in text


def explorer_data() -> dict[str, list[dict[str, object]]]:
    m = re.search(r'<div class="hx-data" hidden data-search-exclude>(.*?)</div>', html_of("explorer"), re.S)
    assert m is not None, "the head explorer's data is not embedded"
    data: dict[str, list[dict[str, object]]] = json.loads(unescape(m.group(1)))
    return data


def test_head_explorer_has_its_controls() -> None:
    tags = tags_of("explorer")
    assert sum("data-head-explorer" in a for _, a in tags) == 1
    names = {a.get("name") for t, a in tags if t == "select"}
    assert {"model", "sentence", "layer", "head"} <= names
    heads = [a.get("value") for t, a in tags if t == "option"]
    assert "all" in heads


def test_head_explorer_data_is_well_formed() -> None:
    for src in explorer_data()["sources"]:
        L, H = src["num_layers"], src["num_heads"]
        assert isinstance(L, int) and isinstance(H, int)
        for s in src["sentences"]:  # type: ignore[attr-defined]
            T = len(s["tokens"])
            w = torch.tensor(s["weights"], dtype=torch.float64) / s["scale"]
            assert tuple(w.shape) == (L, H, T, T)
            assert ((w.sum(-1) - 1).abs() <= 0.006 * T).all()  # rows sum to 1 up to rounding


def test_head_explorer_shows_the_real_pretrained_model() -> None:
    from lessons_src.lab import minilm

    (src,) = [s for s in explorer_data()["sources"] if s["id"] == "minilm"]
    assert (src["num_layers"], src["num_heads"]) == (6, 12)  # all-MiniLM-L6-v2's published shape
    assert src["sentences"][0]["text"] == minilm.EXAMPLE_SENTENCES[0]  # type: ignore[index]  # the running sentence
    for s in src["sentences"]:  # type: ignore[attr-defined]
        tokens, weights = minilm.attention_maps(s["text"])
        assert s["tokens"] == tokens
        got = torch.tensor(s["weights"], dtype=torch.float64) / s["scale"]
        torch.testing.assert_close(got, weights.double(), atol=0.0051, rtol=0)


def test_head_explorer_shows_the_trained_toy_model() -> None:
    from lessons_src.lab import toy_models

    (src,) = [s for s in explorer_data()["sources"] if s["id"] == "induction"]
    model = toy_models.load_induction_model()
    assert (src["num_layers"], src["num_heads"]) == (model.cfg.num_layers, model.cfg.num_heads)
    inputs = pp.toy_inputs(model.cfg.vocab_size)
    assert [s["text"] for s in src["sentences"]] == [text for text, _ in inputs]  # type: ignore[attr-defined]
    for s, (_, ids) in zip(src["sentences"], inputs, strict=True):  # type: ignore[call-overload]
        assert s["tokens"] == [str(i) for i in ids]
        got = torch.tensor(s["weights"], dtype=torch.float64) / s["scale"]
        torch.testing.assert_close(got, toy_models.attention_maps(ids, model).double(), atol=0.0051, rtol=0)


def test_lab_notebook_was_executed_and_can_be_downloaded() -> None:
    text = text_of("lab")
    for line in ("by hand == MultiHeadAttention: yes", "same as PyTorch's kernel: yes",
                 "values differ from concat: yes", "outputs == nn.MultiheadAttention: yes",
                 "weights == nn.MultiheadAttention: yes"):
        assert line in text, line  # printed by lessons_src.lab.checks, which raises instead of printing a failure
    assert f"4 * 768**2 = {4 * 768**2:,}" in text
    for h in (1, 4, 12, 48):  # each head count's row: h, head_dim, the parameters it counted
        assert re.search(rf"\n *{h} +{768 // h} +{4 * 768**2:,}\n", text), h
    assert (SITE / "practice" / "lab" / "lab.ipynb").exists()
    assert 'href="lab.ipynb"' in html_of("lab")
    nb = json.loads((ROOT / "docs" / "practice" / "lab.ipynb").read_text(encoding="utf-8"))
    code = "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    assert "import lessons_src" in code or "from lessons_src" in code
    assert all(c.get("outputs", []) == [] for c in nb["cells"] if c["cell_type"] == "code")  # stored clean


def test_summary_has_five_sections_with_one_figure_each() -> None:
    html = html_of("summary")
    body = html[html.index('class="md-content"') :]
    sections = re.split(r"<h2 ", body)[1:]
    assert len(sections) == 5
    for section in sections:
        assert len(re.findall(r'<figure class="lesson-figure">.*?<img [^>]*alt="[^"]+"', section)) == 1
    assert "summary-title" in html
