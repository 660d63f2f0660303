"""Checks on the core lessons as built in site/lessons/: their numbers agree with the code.

The pages print their numbers at build time; these tests recompute the same numbers from lessons_src and
look for them in the HTML a reader gets, and check the few numbers the prose states.
"""

from __future__ import annotations

import html
import inspect
import math
import re
from pathlib import Path

import pytest
import torch

from lessons_src import MultiHeadAttention
from lessons_src.lab.configs import LESSON_MODELS, load_configs
from lessons_src.lab.lesson_tools import TOKENS, attention_flops, dimension_flow, it_example

SITE = Path(__file__).resolve().parents[2] / "site"
LESSONS = [
    "why-multiple-heads", "three-rescues", "split-run-concatenate", "mixing-heads", "parameters-and-compute",
    "speed-and-real-models", "pitfalls", "pitfalls-in-code", "what-heads-learn", "classifying-heads",
]
if not (SITE / "lessons" / LESSONS[0] / "index.html").exists():
    pytest.fail("site/lessons is not built: run `make build` first (make test does)", pytrace=False)


def page_html(*names: str) -> str:
    """The built HTML of one lesson, or of a lesson split over several pages (concatenated in order)."""
    return "\n".join((SITE / "lessons" / name / "index.html").read_text(encoding="utf-8") for name in names)


def page_text(*names: str) -> str:
    """The articles' visible text, with figures and rendered math removed."""
    return "\n".join(_article_text(page_html(name)) for name in names)


def _article_text(raw: str) -> str:
    raw = raw[raw.index("<article") : raw.index("</article>")]
    raw = re.sub(r"<svg.*?</svg>", " ", raw, flags=re.S)
    raw = re.sub(r'<span class="katex">.*?</span></span></span>', " ", raw, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", "", raw))


def has_row(text: str, *cells: object) -> bool:
    """Whether a line of a printed table starts with these cells (numbers as fmt_table prints them)."""
    want = [f"{c:,}" if isinstance(c, int) else str(c) for c in cells]
    return any(line.split()[: len(want)] == want for line in text.splitlines())


def number_after(label: str, text: str) -> float:
    m = re.search(re.escape(label) + r"\s*([-0-9.e+]+)", text)
    assert m is not None, f"{label!r} not found"
    return float(m.group(1))


@pytest.mark.parametrize("name", LESSONS)
def test_lesson_is_complete_and_error_free(name: str) -> None:
    raw, text = page_html(name), page_text(name)
    assert "Traceback (most recent call last)" not in text
    # An exception's last traceback line starts a line ("RuntimeError: ..."); docstrings indent theirs.
    errors = re.findall(r"^(?:\w+\.)*(?:Name|Runtime|Type|Attribute|Syntax|Index|Key|Assertion)Error\b.*", text, re.M)
    assert errors == [], f"{name} shows {errors}"
    assert "What to remember" in text
    assert 2 <= raw.count('<details class="question"') <= 3
    assert len(raw.encode()) < 1_000_000


def test_lessons_are_in_nav_and_linked_from_home() -> None:
    home = (SITE / "index.html").read_text(encoding="utf-8")
    for name in LESSONS:
        assert f'href="lessons/{name}/"' in home
    nav = home[home.index('<nav class="md-nav md-nav--primary"') :]
    assert nav.index("lessons/why-multiple-heads/") < nav.index("reference/code/")


# --- 1. Why one head is not enough -------------------------------------------------------------------


def test_why_weights_table_matches_the_example() -> None:
    text = page_text("why-multiple-heads", "three-rescues")
    ex = it_example()
    with torch.no_grad():
        _, w2 = ex.two_heads.with_weights(ex.x)
        _, w1 = ex.one_head.with_weights(ex.x)
    a, t = TOKENS.index("animal"), TOKENS.index("tired")
    one, ref, att = w1[0, 0, ex.it], w2[0, 0, ex.it], w2[0, 1, ex.it]
    # fmt_table's narrow form (the page fits a phone): each row's name on its own line, its numbers on the next
    lines = [line.strip() for line in text.splitlines()]
    for name, row in (("one head", one), ("two heads: referent head", ref), ("two heads: attribute head", att)):
        assert name in lines, name
        assert lines[lines.index(name) + 1].split()[:2] == [f"{row[a]:.3f}", f"{row[t]:.3f}"], name


def test_why_prose_numbers_match_the_code() -> None:
    text = page_text("why-multiple-heads", "three-rescues")
    ex = it_example()
    assert f"{len(ex.tokens)} tokens, each embedded as {ex.x.shape[-1]} numbers" in text
    mha = ex.two_heads
    assert f"(d_model = {mha.d_model}, h = {mha.num_heads}, so each head has d_k = {mha.head_dim})" in text
    assert f"(h = {ex.one_head.num_heads}, d_k = {ex.one_head.head_dim})" in text
    assert MultiHeadAttention(96, 1).qkv_proj.weight.numel() == MultiHeadAttention(96, 12).qkv_proj.weight.numel()


def test_why_sweep_never_exceeds_one_and_rescues_are_measured() -> None:
    text = page_text("why-multiple-heads", "three-rescues")
    sums = [float(s) for s in re.findall(r"\d+° +[0-9.]+ +[0-9.]+ +([0-9.]+)", text)]
    assert len(sums) == 7 and all(s <= 1.0 for s in sums)
    halves = [float(x) for x in re.findall(r"\nd_k = +\d+ +([0-9.]+) +([0-9.]+)\n", text)[0]]
    assert all(abs(h - 0.5) < 0.02 for h in halves)
    assert number_after("change at 'it' after the FFN      :", text) == 0.0
    assert inspect.signature(it_example).parameters["strength"].default == 5.0  # exercise 3 uses 5.0
    dilution = re.findall(r"weight on 'animal' ([0-9.]+), e\^5 / \(e\^5 \+ \d+\) = ([0-9.]+)", text)
    assert len(dilution) == 3 and all(got == formula for got, formula in dilution)
    assert number_after("change at 'it' after the attention:", text) > 0.5
    assert number_after("head 1 moved by up to", text) == 0.0
    assert number_after("layer 2 moved by up to", text) > 0.0
    layer = MultiHeadAttention(16, 1)
    params = sum(p.numel() for p in layer.parameters())
    assert re.search(rf"two 1-head layers {2 * params:,}\s+one 2-head layer +{params:,}", text)


# --- 2. Split, run, concatenate ----------------------------------------------------------------------


def test_split_dimension_flow_is_printed_from_a_real_pass() -> None:
    text = page_text("split-run-concatenate", "mixing-heads")
    cfg = load_configs()["GPT-2 small"]
    for step, shape in dimension_flow(MultiHeadAttention(cfg.d_model, cfg.num_heads), torch.randn(2, 10, cfg.d_model)):
        assert re.search(re.escape(step) + r"\s+" + re.escape(str(shape)), text), step
    assert "per-head q == the module's: yes" in text


def test_split_wrong_reshape_is_wrong_and_right_one_is_exact() -> None:
    text = page_text("split-run-concatenate", "mixing-heads")
    assert number_after("largest difference from the module: right", text) < 1e-5
    wrong = re.search(r"wrong ([0-9.]+)\n", text)
    assert wrong is not None and float(wrong.group(1)) > 0.1
    assert "wrong, head 0: [[0, 1, 2], [3, 4, 5], [100, 101, 102], [103, 104, 105]]" in text
    assert number_after("right: change at position 0 after changing the last token:", text) == 0.0
    assert number_after("wrong: change at position 0 after changing the last token:", text) > 0.01


def test_split_worked_example_and_w_o() -> None:
    text = page_text("split-run-concatenate", "mixing-heads")
    assert "concatenation == module's output: yes" in text
    assert "fit error below 1e-4: yes" in text  # a bound, not the residual: its last digits vary between builds
    assert "animate=0.94, state=0.94, pronoun=0.00" in text
    assert "head 0 can change, W_O = I: xxxx...." in text and "head 1 can change, W_O = I: ....xxxx" in text
    assert "concat @ W_O == per-head writes: yes" in text
    # The prose says the learned W_O is zero except row 0 -> column 0 and row 4 -> column 1.
    start = text.rindex("output coordinates):\n")  # the printed output, after the code that prints it
    block = text[start : text.index("output at 'it', named", start)]
    rows = [[float(v) for v in re.findall(r"-?[0-9]+\.[0-9]+", line)] for line in block.splitlines()[1:9]]
    big = {(i, j) for i, row in enumerate(rows) for j, v in enumerate(row) if abs(v) > 0.05}
    assert len(rows) == 8 and big == {(0, 0), (4, 1)}


# --- 3. Parameters and compute -----------------------------------------------------------------------


@pytest.mark.parametrize(("d_model", "heads"), [(768, 12), (1024, 16), (1024, 32), (256, 4)])
def test_parameter_table_matches_the_module(d_model: int, heads: int) -> None:
    text = page_text("parameters-and-compute", "speed-and-real-models")
    plain = sum(p.numel() for p in MultiHeadAttention(d_model, heads).parameters())
    biased = sum(p.numel() for p in MultiHeadAttention(d_model, heads, bias=True).parameters())
    assert has_row(text, d_model, heads, plain, biased)
    assert "no bias == 4 D^2, every row: yes" in text and "biased == 4 D^2 + 4 D, every row: yes" in text


@pytest.mark.parametrize("heads", [8, 16, 32])
def test_partition_table_matches_the_module(heads: int) -> None:
    text = page_text("parameters-and-compute", "speed-and-real-models")
    mha = MultiHeadAttention(1024, heads)
    assert has_row(text, heads, mha.head_dim, mha.head_dim * 1024, 4 * 1024**2)
    assert "all of W_Q, W_O: D^2, every h: yes" in text


def test_flop_tables_match_the_counter() -> None:
    text = page_text("parameters-and-compute", "speed-and-real-models")
    for heads in (1, 2, 4, 8, 16, 32):
        f = attention_flops(512, heads, 128)
        assert has_row(text, heads, f["projections"], f["attention"])
    growth = re.findall(r"\d+ +[0-9,.]+ +[0-9,.]+ +[0-9.]+% +([0-9.]+)\n", text)
    assert growth == ["4.0"] * 4
    # The prose says the T^2 term overtakes the D^2 term at T = 2D: there the share is exactly half.
    assert re.search(r"\n +512 +[0-9,.]+ +[0-9,.]+ +50\.0% ", text)  # d_model = 256 in that table


def test_timings_are_shown_as_ratios() -> None:
    text = page_text("parameters-and-compute", "speed-and-real-models")
    assert "three separate == fused: yes" in text
    assert number_after("separate", re.sub(r"separate +[0-9]+ µs", "separate", text)) > 0
    assert re.search(r"textbook +[0-9.]+ ms +[0-9.]+x", text)
    assert "CPU timings vary" in text


def test_config_table_lists_every_lesson_model() -> None:
    raw = re.sub(r' data-label="[^"]*"', "", page_html("parameters-and-compute", "speed-and-real-models"))
    for c in load_configs(LESSON_MODELS).values():
        cells = (
            f"<td>{c.name}</td><td>{c.year}</td><td>{c.d_model:,}</td><td>{c.num_heads}</td>"
            f"<td>{c.num_kv_heads}</td><td>{c.head_dim}</td><td>{c.attention_kind}</td>"
        )
        assert cells in raw, c.name
        assert html.escape(c.source, quote=False) in raw or c.source in html.unescape(raw)
    dks = [c.head_dim for c in load_configs(LESSON_MODELS).values()]
    assert sum(d not in (64, 128) for d in dks) == 1  # the prose says "all but one"


# --- 4. Pitfalls -------------------------------------------------------------------------------------


def test_pitfalls_numbers() -> None:
    text = page_text("pitfalls", "pitfalls-in-code")
    assert "attention layers run: 12" in text
    assert f"(one softmax-weighted average per head per layer): {12 * 12}" in text
    assert "24 layers, 384 attention computations" in text
    assert number_after("mask flipped (~)  : largest difference", text) < 1e-5
    assert number_after("mask passed as is : largest difference", text) > 0.1
    assert number_after("largest output change", text) < 1e-5  # pruning the duplicate head
    assert "head counts that divide 100 are 1, 2, 4, 5, 10, 20, 25, 50, 100" in text
    assert "output == nn.MultiheadAttention: yes" in text
    assert number_after("rows where the most-attended token is not the largest contributor:", text) > 0
    assert number_after("change at token 0 after changing the last token:", text) == 0.0
    experts = re.search(r"parameters: (\d+) experts = ([0-9,]+); run per token: ([0-9,]+)", text)
    assert experts is not None
    n, total, each = (int(g.replace(",", "")) for g in experts.groups())
    assert total == n * each == n * (16 * 64 + 64 + 64 * 16 + 16)


def test_pitfalls_entropy_orders_the_scalings() -> None:
    text = page_text("pitfalls", "pitfalls-in-code")
    entropy = {
        name: float(m)
        for name, m in re.findall(r"(1 \(no scaling\)|sqrt\(d_model\)|sqrt\(d_k\)) +[0-9.]+ +([0-9.]+) +[0-9.]+", text)
    }
    assert entropy["1 (no scaling)"] < entropy["sqrt(d_k)"] < entropy["sqrt(d_model)"] < math.log(128)


def test_pitfalls_fully_masked_row_and_contiguous() -> None:
    text = page_text("pitfalls", "pitfalls-in-code")
    assert re.search(r"by hand, row 1: \[nan, nan, nan, nan\]", text)
    assert re.search(r"SDPA, +row 1: \[0\.0, 0\.0, 0\.0, 0\.0\]", text)
    assert "rows 0 and 2, fixed == SDPA: yes" in text
    assert "contiguous after transpose: False" in text and "token 1 of head 2 in place: yes" in text


# --- Inference variants: the KV cache page holds the cached-decoding pitfall ---------------------------


def test_kv_cache_page_numbers() -> None:
    text = page_text("inference-variants")
    assert "bottom-right (causal_mask): 4" in text and "top-left (is_causal=True): 1" in text
    assert number_after("causal_mask    : largest difference", text) < 1e-5
    assert number_after("is_causal=True : largest difference", text) > 0.1
    assert number_after("largest difference from the full pass:", text) < 1e-5
    cfg = load_configs()["LLaMA 7B"]
    assert cfg.params_billions is not None
    per_token = 2 * cfg.num_kv_heads * cfg.head_dim * 2 * cfg.num_layers
    weights = cfg.params_billions * 1e9 * 2
    assert f"{cfg.params_billions}B parameters" in text
    assert f"the cache outgrows the weights ({weights / 1e9:.1f} GB) after {weights / per_token:,.0f} tokens" in text


def test_compared_page_bounds_a_windowed_cache() -> None:
    text = page_text("inference-compared")
    mistral = load_configs()["Mistral 7B"]
    per_token = 2 * mistral.num_kv_heads * mistral.head_dim * 2 * mistral.num_layers
    window = mistral.sliding_window
    assert window is not None
    expected = f"Mistral 7BGQA: H={mistral.num_heads}, K={mistral.num_kv_heads}, E={mistral.head_dim}"
    expected += f"{mistral.num_layers}{per_token // 2 // mistral.num_layers:,}{per_token / 2**10:,.0f}"
    expected += f"{window:,} (sliding window){per_token * window / 2**30:,.1f}"
    assert expected in text


def test_gqa_page_repeat_bug_is_shown_wrong_then_right() -> None:
    text = page_text("gqa-mqa")
    assert "KV head of each query head, .repeat           : [0, 1, 0, 1]" in text
    assert "KV head of each query head, repeat_interleave : [0, 0, 1, 1]" in text
    assert number_after(".repeat           : largest difference from repeat_kv", text) > 0.01
    assert number_after("repeat_interleave : largest difference from repeat_kv", text) < 1e-5
