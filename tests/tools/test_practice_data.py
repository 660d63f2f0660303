"""The practice data files (flashcards, quiz) and their build-time renderers in tools/site_build/practice_pages.py."""

from __future__ import annotations

import json
import re
from html import unescape
from html.parser import HTMLParser
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from lessons_src import MultiHeadAttention
from lessons_src.functional import attention
from lessons_src.kv_cache import KVCache, LatentCache
from lessons_src.lab.configs import load_configs
from lessons_src.lab.lesson_tools import attention_flops
from lessons_src.masks import causal_mask
from lessons_src.mla import MultiHeadLatentAttention

ROOT = Path(__file__).resolve().parents[2]
import practice_pages as pp  # noqa: E402


def test_flashcards_file_is_valid() -> None:
    cards = pp.load_flashcards()
    assert len(cards) >= 12
    assert len({c["id"] for c in cards}) == len(cards)
    for c in cards:
        assert c["front"].strip() and c["back"].strip()
        assert "{" not in c["back"] and "{" not in c["front"], "a placeholder was left unfilled"


def test_quiz_file_is_valid() -> None:
    questions = pp.load_quiz()
    assert len(questions) >= 8
    for q in questions:
        assert sum(o["correct"] for o in q["options"]) == 1, q["id"]
        assert all(len(o["explanation"]) >= 15 for o in q["options"]), q["id"]


def test_quiz_includes_the_quick_check() -> None:
    ids = {q["id"] for q in pp.load_quiz()}
    assert "why-heads" in ids


def _correct(qid: str) -> str:
    (q,) = [q for q in pp.load_quiz() if q["id"] == qid]
    (text,) = [o["text"] for o in q["options"] if o["correct"]]
    return text


def test_numeric_answers_agree_with_the_code() -> None:
    assert _correct("head-dim-1024-16") == str(MultiHeadAttention(1024, 16).head_dim)
    p16 = sum(p.numel() for p in MultiHeadAttention(1024, 16).parameters())
    p32 = sum(p.numel() for p in MultiHeadAttention(1024, 32).parameters())
    assert p16 == p32 == 4 * 1024**2
    assert f"{p16:,}" in _correct("params-vs-heads")
    bert = load_configs()["BERT-base"]
    assert _correct("maps-per-pass") == str(bert.num_layers * bert.num_heads)
    mistral = load_configs()["Mistral 7B"]
    assert _correct("gqa").startswith(f"{mistral.num_heads // mistral.num_kv_heads} query heads share")


# ---- the quiz cannot be passed by position or by length ----

def _positions_and_lengths(questions: list[dict[str, object]]) -> tuple[list[int], list[list[int]]]:
    positions, lengths = [], []
    for q in questions:
        opts = q["options"]
        assert isinstance(opts, list)
        positions.append([o["correct"] for o in opts].index(True))
        lengths.append([len(o["text"]) for o in opts])
    return positions, lengths


def check_positions_spread(questions: list[dict[str, object]]) -> None:
    """In the data's order (what a reader without JavaScript sees), every place holds the right answer about
    equally often: no place more than a quarter of the questions plus one, none fewer than minus one."""
    positions, _ = _positions_and_lengths(questions)
    n_options = {len(q["options"]) for q in questions}  # type: ignore[arg-type]
    assert n_options == {4}, f"every question should have 4 options; found {n_options}"
    counts = [positions.count(i) for i in range(4)]
    fair = len(questions) / 4
    assert all(fair - 1.5 <= c <= fair + 1.5 for c in counts), f"correct answers per position A-D: {counts}"


def check_lengths_do_not_tell(questions: list[dict[str, object]]) -> None:
    """The correct option is the strictly longest in at most a third of the questions, and likewise the shortest."""
    positions, lengths = _positions_and_lengths(questions)
    longest = shortest = 0
    for pos, lens in zip(positions, lengths, strict=True):
        others = lens[:pos] + lens[pos + 1 :]
        longest += lens[pos] > max(others)
        shortest += lens[pos] < min(others)
    limit = len(questions) / 3
    assert longest <= limit, f"the correct option is the longest in {longest} of {len(questions)} questions"
    assert shortest <= limit, f"the correct option is the shortest in {shortest} of {len(questions)} questions"


def test_correct_answers_are_spread_over_the_positions() -> None:
    check_positions_spread(pp.load_quiz())


def test_correct_answer_is_not_given_away_by_its_length() -> None:
    check_lengths_do_not_tell(pp.load_quiz())


def test_quiz_covers_the_advanced_material() -> None:
    ids = {q["id"] for q in pp.load_quiz()}
    assert {"kv-cache-bytes", "mask-with-cache", "mask-polarity", "gqa-head-mapping", "mla-absorbed"} <= ids


def test_score_line_reads_the_same_before_and_after_answers() -> None:
    assert pp.score_text(0, 15, 0) == "0 of 15 answered, 0 correct"
    assert pp.score_text(3, 15, 2) == "3 of 15 answered, 2 correct"
    js = (ROOT / "docs" / "assets" / "js" / "practice.js").read_text(encoding="utf-8")
    assert '" of " + questions.length + " answered, " + correct + " correct"' in js  # the same words


# ---- the advanced questions' answers, against the package ----

def test_kv_cache_answer_is_what_a_kv_cache_holds() -> None:
    cfg = load_configs()[pp.KV_MODEL]
    cache = KVCache(batch_size=1, num_kv_heads=cfg.num_kv_heads, head_dim=cfg.head_dim, max_len=pp.KV_CONTEXT,
                    dtype=torch.bfloat16)
    k = torch.zeros(1, cfg.num_kv_heads, pp.KV_CONTEXT, cfg.head_dim, dtype=torch.bfloat16)
    cache.update(k, k)
    per_sequence = cache.nbytes * cfg.num_layers  # one layer's cache, measured, times the layers
    assert _correct("kv-cache-bytes") == pp.format_bytes(per_sequence)
    v = pp.computed_values()
    assert v["kv_cache_as_mha"] == pp.format_bytes(per_sequence * cfg.n_rep)
    assert v["kv_cache_one_layer"] == pp.format_bytes(cache.nbytes)


def test_format_bytes() -> None:
    assert pp.format_bytes(1.25 * 2**30) == "1.25 GiB"
    assert pp.format_bytes(640 * 2**20) == "640 MiB"
    assert pp.format_bytes(1152) == "1.12 KiB"
    assert pp.format_bytes(100) == "100 bytes"


def test_gqa_mapping_answer_is_what_grouped_attention_computes() -> None:
    cfg = load_configs()[pp.GQA_MODEL]
    torch.manual_seed(0)
    H, K, E, S = cfg.num_heads, cfg.num_kv_heads, 4, 5
    q, k, v = torch.randn(1, H, 1, E), torch.randn(1, K, S, E), torch.randn(1, K, S, E)
    out = attention(q, k, v).output  # (1, H, 1, E)
    h = pp.GQA_QUERY_HEAD
    matches = [j for j in range(K) if torch.allclose(
        out[:, h], F.scaled_dot_product_attention(q[:, h], k[:, j], v[:, j]), atol=1e-6)]
    assert matches == [int(_correct("gqa-head-mapping").removeprefix("KV head "))]


def test_mask_answers_are_what_the_masks_do() -> None:
    T, S = pp.MASK_T, pp.MASK_S
    first_row = causal_mask(T, S)[0].nonzero().flatten().tolist()
    assert _correct("mask-with-cache") == f"Keys 0 to {first_row[-1]}" and first_row == list(range(first_row[-1] + 1))
    # The "key 0 only" option: SDPA's is_causal=True with T != S lets the first query see key 0 alone.
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 1, T, 4), torch.randn(1, 1, S, 4), torch.randn(1, 1, S, 4)
    top_left = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(top_left[0, 0, 0], v[0, 0, 0])
    # Polarity: nn.MultiheadAttention reads True as blocked, so our causal mask lets each query see only
    # later keys and the last none (its weights are NaN), as the correct option says.
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    x = torch.randn(1, 4, 8)
    with torch.no_grad():
        _, w = mha(x, x, x, attn_mask=causal_mask(4), need_weights=True)
    assert w is not None
    for i in range(3):
        assert (w[0, i, : i + 1] == 0).all() and (w[0, i, i + 1 :] > 0).all()
    assert w[0, 3].isnan().all()
    assert "only later keys" in _correct("mask-polarity")


def test_mla_answer_is_the_width_absorbed_attention_uses(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = load_configs()[pp.MLA_MODEL]
    assert cfg.mla is not None
    C, R = cfg.mla["kv_latent_dim"], cfg.mla["rope_dim"]
    assert _correct("mla-absorbed") == str(C + R)
    # On a tiny MLA, record the key width each mode hands to SDPA: C + R absorbed, E + R naive.
    widths: dict[str, int] = {}
    sdpa = F.scaled_dot_product_attention
    mode = ""

    def spy(q: torch.Tensor, k: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        widths[mode] = k.shape[-1]
        return sdpa(q, k, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    torch.manual_seed(0)
    mla = MultiHeadLatentAttention(32, 4, kv_latent_dim=12, rope_dim=4, head_dim=6).eval()
    x = torch.randn(1, 3, 32)
    for mode in ("naive", "absorbed"):
        cache = LatentCache(batch_size=1, kv_latent_dim=12, rope_dim=4, max_len=4)
        with torch.no_grad():
            mla(x, cache=cache, mode=mode)  # type: ignore[arg-type]
    assert widths == {"absorbed": 12 + 4, "naive": 6 + 4}


def test_flash_attention_answer_counts_the_same_flops() -> None:
    d, h, T = 16, 4, 8
    assert attention_flops(d, h, T)["attention"] == 4 * T * T * d  # what the correct option's explanation says
    (q,) = [q for q in pp.load_quiz() if q["id"] == "flash-attention"]
    assert "4 · T² · d_model FLOPs" in next(o["explanation"] for o in q["options"] if o["correct"])


def test_computed_values_match_lessons_src() -> None:
    v = pp.computed_values()
    assert v["bert_head_dim"] == str(MultiHeadAttention(768, 12).head_dim)
    assert v["hd_1024_32"] == str(MultiHeadAttention(1024, 32).head_dim)
    assert v["wq_all_1024_16"] == v["wq_all_1024_32"] == f"{1024 * 1024:,}"
    assert v["mha768_params"] == f"{4 * 768 * 768:,}"


def _write(tmp_path: Path, name: str, payload: object) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(payload), encoding="utf-8")
    return path


def _quiz_with(options: list[dict[str, object]]) -> dict[str, object]:
    good = json.loads((pp.DATA / "quiz.json").read_text())["questions"]
    return {"questions": [{"id": "bad", "part": "lessons", "prompt": "p", "options": options}, *good]}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ([{"text": "a", "correct": True, "explanation": "long enough text"},
          {"text": "b", "correct": True, "explanation": "long enough text"}], "2 correct options"),
        ([{"text": "a", "correct": False, "explanation": "long enough text"},
          {"text": "b", "correct": False, "explanation": "long enough text"}], "0 correct options"),
        ([{"text": "a", "correct": True, "explanation": "long enough text"},
          {"text": "b", "correct": False}], "keys"),
        ([{"text": "a", "correct": True, "explanation": "long enough text"},
          {"text": "b", "correct": False, "explanation": "short"}], "explanation too short"),
        ([{"text": "{nope}", "correct": True, "explanation": "long enough text"},
          {"text": "b", "correct": False, "explanation": "long enough text"}], "unknown placeholders"),
    ],
)
def test_bad_quiz_is_rejected(tmp_path: Path, options: list[dict[str, object]], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        pp.load_quiz(_write(tmp_path, "quiz.json", _quiz_with(options)))


def test_too_few_flashcards_is_rejected(tmp_path: Path) -> None:
    cards = [{"id": str(i), "part": "lessons", "front": "q", "back": "a"} for i in range(11)]
    with pytest.raises(ValueError, match="11 cards; at least 12"):
        pp.load_flashcards(_write(tmp_path, "f.json", {"cards": cards}))


def test_duplicate_flashcard_ids_are_rejected(tmp_path: Path) -> None:
    cards = [{"id": "same" if i < 2 else str(i), "part": "lessons", "front": "q", "back": "a"} for i in range(12)]
    with pytest.raises(ValueError, match="duplicate card ids"):
        pp.load_flashcards(_write(tmp_path, "f.json", {"cards": cards}))


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def _parse(html: str) -> list[tuple[str, dict[str, str | None]]]:
    p = _Tags()
    p.feed(html)
    return p.tags


def test_rendered_flashcards_have_the_documented_hooks() -> None:
    cards = pp.load_flashcards()
    tags = _parse(pp.render_flashcards(cards))
    buttons = [a for t, a in tags if t == "button" and "flashcard" in (a.get("class") or "").split()]
    assert len(buttons) == len(cards)
    assert all(a.get("aria-pressed") == "false" and a.get("type") == "button" for a in buttons)
    for hook in ("data-print-flashcards", "data-shuffle-flashcards", "data-flip-all", "data-study-again",
                 "data-reset-marks"):
        assert sum(hook in a for t, a in tags if t == "button") == 1, hook
    assert any("data-flashcards" in a for _, a in tags)
    assert any("data-flashcards-status" in a and a.get("aria-live") == "polite" for _, a in tags)
    items = [a.get("data-card-id") for t, a in tags if t == "li"]
    assert items == [c["id"] for part in pp.PARTS for c in cards if c["part"] == part]  # grouped by part
    parts = [a.get("data-flashcard-part") for t, a in tags if t == "details"]
    assert parts == [p for p in pp.PARTS if any(c["part"] == p for c in cards)]
    assert [t for t, a in tags if t == "details" and "open" in a] == ["details"]  # only the first part is open
    marks = [a.get("data-mark") for t, a in tags if t == "button" and "data-mark" in a]
    assert marks == ["known", "again"] * len(cards)


def test_flashcards_cover_the_advanced_material() -> None:
    cards = {c["id"]: c for c in pp.load_flashcards()}
    assert {"kv-cache-size", "gqa-mapping", "mla-absorb", "mla-cache", "flash-memory", "mask-alignment",
            "mask-polarity"} <= set(cards)
    v = pp.computed_values()
    assert v["kv_cache"] in cards["kv-cache-size"]["back"]
    assert f"KV head {v['gqa_kv_of_head']}" in cards["gqa-mapping"]["back"]


def test_rendered_quiz_has_one_correct_radio_per_question() -> None:
    questions = pp.load_quiz()
    tags = _parse(pp.render_quiz(questions))
    radios = [a for t, a in tags if t == "input" and a.get("type") == "radio"]
    assert len(radios) == sum(len(q["options"]) for q in questions)
    for q in questions:
        mine = [a for a in radios if a.get("name") == f"quiz-{q['id']}"]
        assert [a.get("data-correct") for a in mine].count("true") == 1
        assert all(a.get("data-explanation") for a in mine)
    feedback = [a for t, a in tags if "quiz-feedback" in (a.get("class") or "")]
    assert len(feedback) == len(questions) and all(a.get("aria-live") == "polite" for a in feedback)
    assert any("data-quiz-score" in a for _, a in tags)


def test_rendered_quiz_is_grouped_by_part_and_numbered_through() -> None:
    questions = pp.load_quiz()
    html_ = pp.render_quiz(questions)
    tags = _parse(html_)
    parts = [a.get("data-quiz-part") for t, a in tags if t == "details"]
    assert parts == [p for p in pp.QUIZ_PARTS if any(q["part"] == p for q in questions)]
    assert [t for t, a in tags if t == "details" and "open" in a] == ["details"]  # only the first part is open
    numbers = [int(n) for n in re.findall(r'<span class="quiz-number">Question (\d+)\.</span>', html_)]
    assert numbers == list(range(1, len(questions) + 1))
    order = [a.get("data-question-id") for t, a in tags if t == "fieldset"]
    by_part = [q["id"] for p in pp.QUIZ_PARTS for q in questions if q["part"] == p]
    assert order == by_part


def test_quiz_question_with_an_unknown_part_is_rejected(tmp_path: Path) -> None:
    quiz = _quiz_with([{"text": "a", "correct": True, "explanation": "long enough text"},
                       {"text": "b", "correct": False, "explanation": "long enough text"}])
    quiz["questions"][0]["part"] = "nowhere"  # type: ignore[index]
    with pytest.raises(ValueError, match="part 'nowhere' is not one of"):
        pp.load_quiz(_write(tmp_path, "quiz.json", quiz))


def test_pack_attention_rounds_and_checks() -> None:
    torch.manual_seed(0)
    w = torch.randn(2, 3, 4, 4).softmax(-1)
    packed = pp.pack_attention(w, ["a", "b", "c", "d"])
    got = torch.tensor(packed["weights"], dtype=torch.float64) / packed["scale"]
    torch.testing.assert_close(got, w.double(), atol=0.005, rtol=0)
    with pytest.raises(ValueError, match="T=3 tokens"):
        pp.pack_attention(w, ["a", "b", "c"])
    with pytest.raises(ValueError, match="rows must sum to 1"):
        pp.pack_attention(w * 2, ["a", "b", "c", "d"])


def test_explorer_source_checks_its_inputs() -> None:
    torch.manual_seed(0)
    a = torch.randn(2, 3, 4, 4).softmax(-1)
    b = torch.randn(2, 4, 5, 5).softmax(-1)
    src = pp.explorer_source("x", "X", "note", [("one", list("abcd"), a)])
    assert (src["num_layers"], src["num_heads"]) == (2, 3) and src["sentences"][0]["tokens"] == list("abcd")
    with pytest.raises(ValueError, match="disagree on"):
        pp.explorer_source("x", "X", "note", [("one", list("abcd"), a), ("two", list("abcde"), b)])
    with pytest.raises(ValueError, match="no inputs"):
        pp.explorer_source("x", "X", "note", [])


def test_explorer_shows_the_running_sentence_and_trained_repeats() -> None:
    from lessons_src.lab import read_artifact_json
    from lessons_src.lab.minilm import EXAMPLE_SENTENCES
    from lessons_src.lab.toy_models import load_induction_model

    sentences = pp.explorer_sentences()
    assert sentences[0] == EXAMPLE_SENTENCES[0] and "animal" in sentences[0] and "tired" in sentences[0]
    log = read_artifact_json("induction_training.json")
    model = load_induction_model()
    for _, ids in pp.toy_inputs(model.cfg.vocab_size):
        n = len(ids) // 2
        assert ids[:n] == ids[n:] and log["min_seg"] <= n <= log["max_seg"] and len(ids) <= model.cfg.max_len


def test_rendered_explorer_embeds_its_data() -> None:
    torch.manual_seed(0)
    w = torch.randn(2, 3, 4, 4).softmax(-1)
    src = pp.explorer_source("x", "X </script> note", "n", [("a </script> b", list("abcd"), w)])
    html = pp.render_head_explorer([src])
    payload = html.split('<div class="hx-data" hidden data-search-exclude>', 1)[1].split("</div>", 1)[0]
    assert "<" not in payload  # text only: no markup in the data can end the element early
    assert json.loads(unescape(payload))["sources"][0]["label"] == "X </script> note"
    names = {a.get("name") for t, a in _parse(html) if t == "select"}
    assert names == {"model", "sentence", "layer", "head"}


def _option(qid: str, *, correct: bool) -> list[str]:
    (question,) = [q for q in pp.load_quiz() if q["id"] == qid]
    return [o["text"] for o in question["options"] if o["correct"] is correct]


def _sdpa_kernel(**kwargs: object) -> str:
    """The aten operator F.scaled_dot_product_attention dispatched to, as the profiler names it."""
    from torch.profiler import profile

    torch.manual_seed(0)
    q, k = torch.randn(1, 2, 8, 16), torch.randn(1, 2, 8, 16)
    v = kwargs.pop("v", torch.randn(1, 2, 8, 16))
    with profile() as prof:
        F.scaled_dot_product_attention(q, k, v, **kwargs)  # type: ignore[arg-type]
    names = {e.key for e in prof.key_averages()} - {"aten::scaled_dot_product_attention"}
    (kernel,) = [n for n in names if "scaled_dot_product" in n]
    return kernel


def test_sdpa_math_path_answer_is_what_the_profiler_shows() -> None:
    calls = {  # each option's text, and the call it describes (8 query positions, key width 16)
        "A causal call on only eight query positions.": {"is_causal": True},
        "A call with a float attn_mask of zeros.": {"attn_mask": torch.zeros(8, 8)},
        "A causal call with values narrower than keys.": {"is_causal": True, "v": torch.randn(1, 2, 8, 8)},
        "A call with a boolean mask that keeps every key.": {"attn_mask": torch.ones(8, 8, dtype=torch.bool)},
    }
    on_math = {text for text, kwargs in calls.items() if _sdpa_kernel(**kwargs).endswith("_math")}
    assert on_math == set(_option("sdpa-math-path", correct=True))
    assert set(calls) == set(_option("sdpa-math-path", correct=True) + _option("sdpa-math-path", correct=False))


def test_flash_backward_answer_is_what_the_tiled_function_saves() -> None:
    from lessons_src.flash import tiled_attention

    B, H, T, S, E = 1, 2, 6, 10, 4
    q = torch.randn(B, H, T, E, requires_grad=True)
    k, v = torch.randn(B, H, S, E), torch.randn(B, H, S, E)
    result = tiled_attention(q, k, v, block_q=4, block_k=4)
    saved = [t for t in result.output.grad_fn.saved_tensors if t is not None]  # type: ignore[union-attr]
    beyond_qkv = [t for t in saved if not any(t is x for x in (q, k, v))]
    assert [tuple(t.shape) for t in beyond_qkv] == [(B, H, T, E), (B, H, T)]  # the output, one lse per query row
    torch.testing.assert_close(beyond_qkv[1], torch.logsumexp(q.detach() @ k.transpose(-2, -1) / E**0.5, dim=-1))
    assert max(t.numel() for t in saved) < T * S * H  # nothing of size T x S per head is kept
    assert _option("flash-backward-saves", correct=True) == ["The output and one log-sum-exp per query row."]


def test_online_softmax_card_rescale_is_needed() -> None:
    """The card says the running sum must be rescaled when the maximum moves: without it the result is wrong."""
    from lessons_src.flash import online_softmax

    x = torch.tensor([[0.0, 1.0, 5.0, 2.0]])  # the maximum moves at the third entry
    m, total = torch.tensor(float("-inf")), torch.tensor(0.0)
    for s in x[0]:  # running sum WITHOUT the rescale: each term measured against the max of its own time
        m = torch.maximum(m, s)
        total = total + torch.exp(s - m)
    wrong = torch.exp(x - m) / total
    assert not torch.allclose(wrong, torch.softmax(x, -1))
    torch.testing.assert_close(online_softmax(x), torch.softmax(x, -1))
    (card,) = [c for c in pp.load_flashcards() if c["id"] == "online-softmax-rescale"]
    assert "exp(m − m')" in card["back"]
