# ruff: noqa: E501  (tables of cases: one row per call reads better than wrapped rows)
"""Sliding-window attention: the mask against its definition, every implementation against the explicit mask.

The reference mask is written here from the definition (query ``i`` of the last ``T`` of ``S`` positions
sees key ``j`` when ``i + S - T - window < j <= i + S - T``, or ``j < sinks`` and ``j <= i + S - T``), not
with the package's ``causal_mask``; the implementations are compared with PyTorch's SDPA fed that mask.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lessons_src import MultiHeadAttention
from lessons_src.flash import block_kind, tile_plan, tiled_attention
from lessons_src.functional import ATTENTION_FUNCTIONS, attention
from lessons_src.masks import by_distance, causal, causal_mask, check_window, prepare_mask, sliding_window


def reference_mask(T: int, S: int, window: int | None, sinks: int = 0) -> torch.Tensor:
    m = torch.zeros(T, S, dtype=torch.bool)
    for i in range(T):
        p = i + S - T  # the query's position among the S keys
        for j in range(S):
            m[i, j] = j <= p and (window is None or j > p - window or j < sinks)
    return m


@pytest.mark.parametrize(("T", "S", "window", "sinks"), [
    (6, 6, 1, 0), (6, 6, 3, 0), (3, 9, 2, 0), (1, 8, 4, 0), (8, 8, 20, 0), (7, 7, 2, 1), (2, 10, 3, 2), (5, 3, 2, 0),
])
def test_window_mask_is_the_definition(T: int, S: int, window: int, sinks: int) -> None:
    assert torch.equal(causal_mask(T, S, window=window, sink_tokens=sinks), reference_mask(T, S, window, sinks))


def test_window_mask_decodes_like_the_full_square() -> None:
    """The last T rows of the square windowed mask are what T new tokens after S - T cached ones see."""
    assert torch.equal(causal_mask(3, 10, window=4), causal_mask(10, window=4)[-3:])
    assert torch.equal(causal_mask(1, 10, window=4, sink_tokens=2), causal_mask(10, window=4, sink_tokens=2)[-1:])


def test_a_window_at_least_s_is_the_causal_mask() -> None:
    assert torch.equal(causal_mask(4, 6, window=6), causal_mask(4, 6))
    assert torch.equal(causal_mask(4, 6, window=100), causal_mask(4, 6))


def sdpa_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    n_rep = q.shape[1] // k.shape[1]
    return F.scaled_dot_product_attention(q, k.repeat_interleave(n_rep, 1), v.repeat_interleave(n_rep, 1), attn_mask=mask)


@pytest.mark.parametrize("implementation", ["sdpa", "eager", "tiled"])
@pytest.mark.parametrize(("T", "S", "window", "heads"), [
    (9, 9, 3, (4, 4)), (4, 11, 2, (4, 2)), (1, 12, 5, (4, 1)), (7, 7, 1, (2, 2)), (6, 6, 50, (4, 2)),
])
def test_every_implementation_equals_sdpa_with_the_explicit_mask(
    implementation: str, T: int, S: int, window: int, heads: tuple[int, int]
) -> None:
    H, K = heads
    g = torch.Generator().manual_seed(T * 100 + S)
    q = torch.randn(2, H, T, 8, generator=g, dtype=torch.float64)
    k = torch.randn(2, K, S, 8, generator=g, dtype=torch.float64)
    v = torch.randn(2, K, S, 6, generator=g, dtype=torch.float64)
    want = sdpa_reference(q, k, v, reference_mask(T, S, window))
    got = attention(q, k, v, attn_mask=sliding_window(window), implementation=implementation).output
    torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-10)


def test_window_combines_with_a_padding_mask_and_gradients_agree() -> None:
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 2, 6, 4, generator=g, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 2, 6, 4, generator=g, dtype=torch.float64, requires_grad=True)
    v = torch.randn(2, 2, 6, 4, generator=g, dtype=torch.float64)
    pad = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])[:, None, None, :]
    want = sdpa_reference(q, k, v, pad & reference_mask(6, 6, 2))
    for name in ATTENTION_FUNCTIONS:
        got = attention(q, k, v, attn_mask=[pad, sliding_window(2)], implementation=name).output
        torch.testing.assert_close(got, want)
        gq, gk = torch.autograd.grad(got.sum(), (q, k))
        rq, rk = torch.autograd.grad(want.sum(), (q, k), retain_graph=True)
        torch.testing.assert_close((gq, gk), (rq, rk))


def test_tiled_skips_the_tiles_before_the_window() -> None:
    """A window of 4 over 32 positions in blocks of 4: tiles wholly before the window are never computed."""
    plan = tile_plan(32, 32, 4, 4, causal=True, window=4)
    for r, row in enumerate(plan):
        for c, kind in enumerate(row):
            visible = reference_mask(32, 32, 4)[4 * r : 4 * r + 4, 4 * c : 4 * c + 4]
            expected = "skip" if not visible.any() else "full" if visible.all() else "partial"
            assert kind == expected, (r, c)
    computed = sum(kind != "skip" for row in plan for kind in row)
    assert computed == 8 + 7  # the diagonal and the one just before it: linear in T, not quadratic
    assert block_kind(8, 12, 0, 4, 32, 32, causal=True, window=4) == "skip"


@pytest.mark.parametrize(("T", "S"), [(5, 9), (9, 9), (9, 5), (1, 6)])
@pytest.mark.parametrize("window", [None, 1, 2, 3, 7])
def test_every_tile_kind_is_what_the_mask_says(T: int, S: int, window: int | None) -> None:
    """The tile plan (read from the rule by distance) against the definition, tile by tile, for T <, = and > S."""
    visible = reference_mask(T, S, window)
    rule = causal() if window is None else sliding_window(window)
    i, j = torch.arange(T)[:, None], torch.arange(S)[None, :]
    assert torch.equal(torch.tensor(by_distance(rule, T, S))[j - i + T - 1], visible)
    for bq, bk in ((1, 2), (3, 4), (4, 3), (9, 9)):
        for r, row in enumerate(tile_plan(T, S, bq, bk, causal=True, window=window)):
            for c, kind in enumerate(row):
                tile = visible[r * bq : (r + 1) * bq, c * bk : (c + 1) * bk]
                assert kind == ("skip" if not tile.any() else "full" if tile.all() else "partial"), (bq, bk, r, c)


def test_tiled_with_a_window_equals_the_mask_with_small_blocks() -> None:
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 2, 13, 4, generator=g, dtype=torch.float64) for _ in range(3))
    got = tiled_attention(q, k, v, attn_mask=sliding_window(3), block_q=2, block_k=3).output
    torch.testing.assert_close(got, sdpa_reference(q, k, v, reference_mask(13, 13, 3)))


def test_module_decodes_with_a_window_through_a_cache() -> None:
    from lessons_src.kv_cache import KVCache

    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, num_kv_heads=2).eval()
    x = torch.randn(1, 9, 16)
    with torch.no_grad():
        full = mha(x, attn_mask=sliding_window(3))
        cache = KVCache(1, 2, 4, 9)
        steps = [mha(x[:, :5], attn_mask=sliding_window(3), cache=cache)]
        steps += [mha(x[:, t : t + 1], attn_mask=sliding_window(3), cache=cache) for t in range(5, 9)]
    torch.testing.assert_close(torch.cat(steps, 1), full)
    assert not torch.allclose(full, mha(x, is_causal=True))  # the window changed something


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: causal_mask(4, window=0), ValueError, r"window must be at least 1 \(the query itself\); got window=0"),
    (lambda: causal_mask(4, window=2.0), TypeError, r"window must be an int or None; got 2.0"),
    (lambda: causal_mask(4, sink_tokens=1), ValueError, r"sink_tokens=1 only means something with a window"),
    (lambda: causal_mask(4, window=2, sink_tokens=-1), ValueError, r"sink_tokens must be at least 0; got sink_tokens=-1"),
    (lambda: check_window(-3), ValueError, r"got window=-3"),
    (lambda: sliding_window(2.0), TypeError, r"window must be an int or None; got 2.0"),
    (lambda: prepare_mask(sliding_window(0), is_causal=True, shape=(1, 1, 2, 2), dtype=torch.float32,
                          device=torch.device("cpu")), ValueError, r"window must be at least 1"),
    (lambda: MultiHeadAttention(8, 2)(torch.randn(1, 3, 8), attn_mask=sliding_window(-1)), ValueError, r"got window=-1"),
    (lambda: sliding_window(True), TypeError, r"window must be an int or None; got True"),
])
def test_bad_windows_get_clear_errors(call, error, match) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(error, match=match):
        call()
