"""lessons_src.lab.lesson_tools: the worked example, counters and timer the lessons print from."""

from __future__ import annotations

import math
import re

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from lessons_src import MultiHeadAttention
from lessons_src.lab.lesson_tools import (
    FEATURES,
    TOKENS,
    AttentionStack,
    attention_entropy,
    attention_flops,
    count_attention_calls,
    count_parameters,
    data_flow_diagram,
    dimension_flow,
    fit_single_head,
    it_example,
    median_times,
    source_lines,
)


def test_it_example_two_heads_each_hold_one_relation() -> None:
    ex = it_example()
    assert ex.tokens == TOKENS and ex.x.shape == (1, len(TOKENS), len(FEATURES))
    with torch.no_grad():
        _, w2 = ex.two_heads.with_weights(ex.x)
        _, w1 = ex.one_head.with_weights(ex.x)
    animal, tired = TOKENS.index("animal"), TOKENS.index("tired")
    assert w2[0, 0, ex.it].argmax() == animal and w2[0, 1, ex.it].argmax() == tired
    assert w2[0, 0, ex.it, animal] > 0.9 and w2[0, 1, ex.it, tired] > 0.9
    # The single head splits its weight evenly (same score on both) and gives each less than half.
    torch.testing.assert_close(w1[0, 0, ex.it, animal], w1[0, 0, ex.it, tired])
    assert w1[0, 0, ex.it, animal] < 0.5


def test_it_example_matches_torch_attention() -> None:
    """The hand-set module is an ordinary MultiHeadAttention: nn.MultiheadAttention agrees with it."""
    ex = it_example()
    ref = torch.nn.MultiheadAttention(8, 2, bias=False, batch_first=True)
    with torch.no_grad():
        ref.in_proj_weight.copy_(ex.two_heads.qkv_proj.weight)
        ref.out_proj.weight.copy_(ex.two_heads.out_proj.weight)
        expected, _ = ref(ex.x, ex.x, ex.x)
        torch.testing.assert_close(ex.two_heads(ex.x), expected)


@pytest.mark.parametrize("strength", [1.0, 5.0, 20.0])
def test_single_head_never_gives_both_more_than_half(strength: float) -> None:
    ex = it_example(strength)
    with torch.no_grad():
        _, w = ex.one_head.with_weights(ex.x)
    row = w[0, 0, ex.it]
    assert row[TOKENS.index("animal")] + row[TOKENS.index("tired")] <= 1.0 + 1e-6
    assert row[TOKENS.index("animal")] <= 0.5


@pytest.mark.parametrize("head_dim", [4, 64])
def test_fit_single_head_reaches_half_and_two_heads_reach_one(head_dim: int) -> None:
    ex = it_example()
    targets = [TOKENS.index("animal"), TOKENS.index("tired")]
    one = fit_single_head(ex.x[0], ex.it, targets, head_dim=head_dim, steps=100)
    assert one.shape == (1, len(TOKENS))
    assert all(abs(float(one[0, j]) - 0.5) < 0.02 for j in targets)
    two = fit_single_head(ex.x[0], ex.it, targets, head_dim=4, num_heads=2, steps=100)
    assert float(two[0, targets[0]]) > 0.98 and float(two[1, targets[1]]) > 0.98


def test_fit_single_head_rejects_bad_head_count() -> None:
    with pytest.raises(ValueError, match=r"num_heads must be 1 or len\(targets\)=2; got num_heads=3"):
        fit_single_head(torch.randn(4, 8), 0, [1, 2], head_dim=4, num_heads=3)


@pytest.mark.parametrize(("d_model", "heads"), [(768, 12), (64, 4), (48, 1)])
def test_dimension_flow_shapes(d_model: int, heads: int) -> None:
    flow = dict(dimension_flow(MultiHeadAttention(d_model, heads), torch.randn(2, 5, d_model)))
    E = d_model // heads
    assert flow["input x"] == (2, 5, d_model) == flow["output (after W_O)"] == flow["concatenated heads"]
    assert flow["x @ [W_Q;W_K;W_V]^T"] == (2, 5, 3 * d_model)
    assert flow["queries Q"] == (2, heads, 5, E) == flow["weights @ V"]
    assert flow["softmax(scores)"] == (2, heads, 5, 5)


@pytest.mark.parametrize(("d_model", "heads"), [(768, 12), (1024, 16), (1024, 32), (256, 4)])
@pytest.mark.parametrize("bias", [False, True])
def test_parameter_count_is_4_d_squared(d_model: int, heads: int, bias: bool) -> None:
    expected = 4 * d_model**2 + (4 * d_model if bias else 0)
    assert count_parameters(MultiHeadAttention(d_model, heads, bias=bias)) == expected


@pytest.mark.parametrize("heads", [1, 2, 8, 32])
def test_flops_do_not_depend_on_head_count(heads: int) -> None:
    D, T = 64, 16
    f = attention_flops(D, heads, T, batch=2)
    assert f["projections"] == 8 * 2 * T * D**2
    assert f["attention"] == 4 * 2 * T**2 * D
    assert f["total"] == f["projections"] + f["attention"]


def test_flops_match_a_direct_count_of_torch_attention() -> None:
    """Cross-check against FlopCounterMode on nn.MultiheadAttention's math, independent of our module."""
    D, H, T = 32, 4, 8
    q, k, v = torch.randn(3, 1, H, T, D // H).unbind(0)
    counter = FlopCounterMode(display=False)
    with counter:
        torch.softmax(q @ k.transpose(-2, -1), -1) @ v
    assert attention_flops(D, H, T)["attention"] == counter.get_total_flops()


def test_attention_grows_with_t_squared() -> None:
    a, b = attention_flops(32, 4, 16), attention_flops(32, 4, 32)
    assert b["attention"] == 4 * a["attention"] and b["projections"] == 2 * a["projections"]


@pytest.mark.parametrize(("layers", "heads"), [(12, 12), (3, 2), (1, 1)])
def test_count_attention_calls(layers: int, heads: int) -> None:
    model = AttentionStack(layers, 4 * heads, heads)
    assert count_attention_calls(model, torch.randn(1, 3, 4 * heads)) == (layers, layers * heads)
    # The hooks are removed afterwards.
    assert all(not m._forward_hooks for m in model.modules())


def test_attention_entropy_bounds() -> None:
    S = 7
    assert math.isclose(float(attention_entropy(torch.full((3, S), 1 / S))), math.log(S), rel_tol=1e-6)
    assert float(attention_entropy(torch.eye(S))) == 0.0


def test_median_times() -> None:
    calls = {"a": 0, "b": 0}

    def a() -> None:
        calls["a"] += 1

    def b() -> None:
        calls["b"] += 1

    times = median_times({"a": a, "b": b}, repeats=5, warmup=1)
    assert set(times) == {"a", "b"} and all(t >= 0 for t in times.values())
    assert calls == {"a": 6, "b": 6}
    with pytest.raises(ValueError, match="repeats must be at least 1; got repeats=0"):
        median_times({"a": a}, repeats=0)


def test_data_flow_diagram_names_the_real_shapes() -> None:
    from lessons_src.lab.plotting import svg

    flow = dimension_flow(MultiHeadAttention(768, 12), torch.randn(1, 10, 768))
    text = svg(data_flow_diagram(flow, num_heads=12), title="flow")
    assert "(1, 10, 2304)" in text and "(1, 10, 64)" in text and "head 12" in text
    assert "8 more heads" in text
    assert text == svg(data_flow_diagram(flow, num_heads=12), title="flow")  # reproducible


def test_docstring_examples_run() -> None:
    import doctest

    import lessons_src.lab.lesson_tools as module

    result = doctest.testmod(module)
    assert result.attempted >= 8 and result.failed == 0


def test_source_lines_reads_a_part_of_a_function_from_the_file() -> None:
    """The lines from the first marker to the one before the second, dedented; the whole function without markers;
    a function or a line that is not there is named."""
    loop = source_lines("triton_flash", "_forward_kernel", "end = S", "saw = l > 0").splitlines()
    assert loop[0] == "end = S" and loop[1].startswith("if CAUSAL:") and not loop[-1].lstrip().startswith("saw")
    whole = source_lines("functional", "repeat_kv")
    assert whole.startswith("def repeat_kv(") and whole.endswith(".reshape(B, K * n_rep, S, E)")
    with pytest.raises(ValueError, match="no top-level function 'nowhere'"):
        source_lines("functional", "nowhere")
    with pytest.raises(ValueError, match="starts with 'never ='"):
        source_lines("functional", "repeat_kv", "n_rep =", "never =")


def test_fmt_vec_drops_trailing_zeros_and_rejects_bad_input() -> None:
    from lessons_src.lab.lesson_tools import fmt_vec

    assert fmt_vec(torch.tensor([0.625, 0.1, 0.0])) == "[0.625, 0.1, 0]"
    assert fmt_vec([1.23456], digits=2) == "[1.23]"
    with pytest.raises(ValueError, match="digits must be a non-negative int"):
        fmt_vec([1.0], digits=-1)
    with pytest.raises(ValueError, match="formats one vector"):
        fmt_vec(torch.zeros(2, 2))


def test_seed_hand_arithmetic_is_corrected_by_the_code() -> None:
    """Seed 003 printed o1 ~ [0.61, 0.20, 0.09, 0.21] and o2 ~ [0.33, 0.41, 0.08, 0.29]; its own numbers give others."""
    from lessons_src.lab.lesson_tools import SEED_WORKED_EXAMPLE as seed

    values = seed["values"]
    got = {
        head: [sum(w * values[word][i] for word, w in weights.items()) for i in range(4)]
        for head, weights in seed["weights"].items()
    }
    torch.testing.assert_close(torch.tensor(got["head 1"]), torch.tensor([0.62, 0.19, 0.085, 0.21]))
    torch.testing.assert_close(torch.tensor(got["head 2"]), torch.tensor([0.355, 0.41, 0.12, 0.275]))
    assert all(abs(sum(w.values()) - 1.0) < 1e-9 for w in seed["weights"].values())
    assert got["head 2"][0] - seed["claimed"]["head 2"][0] > 0.02  # the seed's o2 is off in its first entry


def test_two_head_example_weights_are_a_softmax_of_q_dot_k() -> None:
    from lessons_src.lab.lesson_tools import two_head_example

    ex = two_head_example()
    scores = ex.queries @ ex.keys.T / ex.keys.shape[-1] ** 0.5
    torch.testing.assert_close(ex.weights, torch.softmax(scores, dim=-1))
    torch.testing.assert_close(ex.outputs, ex.weights @ ex.values)
    assert (ex.weights > 0).all() and (ex.weights.max(-1).values < 0.95).all()  # soft, not one-hot
    assert ex.words[int(ex.weights[0].argmax())] == "animal" and ex.words[int(ex.weights[1].argmax())] == "tired"
    torch.testing.assert_close(ex.concat, torch.cat([ex.outputs[0], ex.outputs[1]]))
    with pytest.raises(ValueError, match="sharpness must be > 0"):
        two_head_example(0.0)


def test_fmt_table_aligns_columns_and_formats_cells() -> None:
    from lessons_src.lab.lesson_tools import fmt_table

    got = fmt_table(["heads", "params", "share", "x"], [[8, 1048576, "50.0%", 0.25], [16, torch.tensor(64), "5%", 2.0]])
    assert got.split("\n") == [
        "heads     params  share      x",
        "    8  1,048,576  50.0%  0.250",
        "   16         64     5%  2.000",
    ]
    assert fmt_table(["a"], [[1.23456]], digits=1) == "  a\n1.2"
    assert fmt_table(["name", "n"], [["one head", 1], ["two", -2]]).split("\n") == [
        "name       n", "one head   1", "two       -2"]


def test_fmt_table_narrow_form_puts_each_key_on_its_own_line() -> None:
    from lessons_src.lab.lesson_tools import PHONE_COLUMNS, fmt_table

    rows = [["one head", 0.5, 0.25, 0.75], ["two heads: attribute head", 0.125, 0.5, 0.625]]
    headers = ['weights of the query "it"', "animal", "tired", "sum"]
    assert max(len(line) for line in fmt_table(headers, rows).split("\n")) > PHONE_COLUMNS
    narrow = fmt_table(headers, rows, width=PHONE_COLUMNS).split("\n")
    assert narrow == [
        'weights of the query "it"',
        "  animal  tired    sum",
        "one head",
        "   0.500  0.250  0.750",
        "two heads: attribute head",
        "   0.125  0.500  0.625",
    ]
    assert max(len(line) for line in narrow) <= PHONE_COLUMNS
    assert fmt_table(["heads", "d_k"], [[8, 128]], width=PHONE_COLUMNS) == fmt_table(["heads", "d_k"], [[8, 128]])
    with pytest.raises(ValueError, match="width must be a positive int"):
        fmt_table(["a"], [[1]], width=0)


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([[1, 2]], "row 0 has 2 cells; the table has 1 columns"),
        ([[torch.ones(2)]], "one number; got a tensor of shape (2,)"),
        ([[None]], "a number or a string; got NoneType"),
    ],
)
def test_fmt_table_rejects_bad_rows(rows: list[list[object]], message: str) -> None:
    from lessons_src.lab.lesson_tools import fmt_table

    with pytest.raises((ValueError, TypeError), match=re.escape(message)):
        fmt_table(["a"], rows)
