"""The practice data files (flashcards, quiz) and their build-time renderers in tools/site_build/practice_pages.py."""

from __future__ import annotations

import json
import re
import sys
from html import unescape
from html.parser import HTMLParser
from pathlib import Path

import pytest
import torch

from lessons_src import MultiHeadAttention
from lessons_src.lab.configs import load_configs

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools" / "site_build"))
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
    assert f"shared by {mistral.num_heads // mistral.num_kv_heads} query heads" in _correct("gqa")


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
    return {"questions": [{"id": "bad", "prompt": "p", "options": options}, *good]}


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
    cards = [{"id": str(i), "front": "q", "back": "a"} for i in range(11)]
    with pytest.raises(ValueError, match="11 cards; at least 12"):
        pp.load_flashcards(_write(tmp_path, "f.json", {"cards": cards}))


def test_duplicate_flashcard_ids_are_rejected(tmp_path: Path) -> None:
    cards = [{"id": "same" if i < 2 else str(i), "front": "q", "back": "a"} for i in range(12)]
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
    assert any("data-print-flashcards" in a for t, a in tags if t == "button")
    assert any("data-flashcards" in a for _, a in tags)


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


def test_rendered_explorer_embeds_its_data() -> None:
    torch.manual_seed(0)
    w = torch.randn(2, 3, 4, 4).softmax(-1)
    src = pp.explorer_source("x", "X </script> note", "n", [("a </script> b", list("abcd"), w)])
    html = pp.render_head_explorer([src])
    payload = html.split('<div class="hx-data" hidden>', 1)[1].split("</div>", 1)[0]
    assert "<" not in payload  # text only: no markup in the data can end the element early
    assert json.loads(unescape(payload))["sources"][0]["label"] == "X </script> note"
    names = {a.get("name") for t, a in _parse(html) if t == "select"}
    assert names == {"model", "sentence", "layer", "head"}
