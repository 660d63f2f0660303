"""Checks on the built "What heads learn" pages: their numbers come from the code and artifacts."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

SITE = Path(__file__).resolve().parents[2] / "site"
LESSONS = ["what-heads-learn", "induction-heads", "ablation", "one-vs-many-heads"]


def text_of(name: str) -> str:
    return re.sub(r"<[^>]+>", "", (SITE / "lessons" / name / "index.html").read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", LESSONS)
def test_page_is_small_and_figures_are_named(name: str) -> None:
    html = (SITE / "lessons" / name / "index.html").read_text(encoding="utf-8")
    assert len(html.encode()) < 1_000_000
    figures = html.count('<figure class="lesson-figure">')
    named = len(re.findall(r'<figure class="lesson-figure"><a href="[^"]+"><picture>.*?<img [^>]*alt="[^"]+"', html))
    assert figures >= 1 and named == figures, f"{name}: {figures} figures, {named} with an accessible name"
    assert "What to remember" in html and "Exercises" in html


def test_minilm_card_numbers_come_from_config() -> None:
    from lessons_src.lab import minilm

    cfg = json.loads((minilm.model_dir() / "config.json").read_text())
    D, H = cfg["hidden_size"], cfg["num_attention_heads"]
    text = text_of("what-heads-learn")
    assert f"d_k = d_model / h = {D} / {H} = {D // H}" in text
    assert f"in our MultiHeadAttention: {4 * D * D + 4 * D:,}" in text


def test_induction_page_shows_the_checkpoint_heads() -> None:
    from lessons_src.lab import toy_models

    found = toy_models.find_circuit(toy_models.induction_scores(toy_models.load_induction_model()))
    assert str(found) in text_of("induction-heads")
