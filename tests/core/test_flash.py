"""Online softmax and tiled (FlashAttention-2) attention, against torch.softmax, SDPA and the eager formula.

Block sizes are chosen small so that every case runs several query and key blocks, with the last block
shorter than the others, a block larger than the whole sequence, and T != S both ways.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from lessons_src import MultiHeadAttention, online_softmax, padding_mask, tiled_attention
from lessons_src.flash import TiledAttention, block_kind, softmax_statistics, tile_plan
from lessons_src.functional import ATTENTION_FUNCTIONS, attention

TOL = {torch.float64: {"atol": 1e-12, "rtol": 1e-10}, torch.float32: {"atol": 2e-5, "rtol": 1e-4}}
GRAD_TOL = {torch.float64: {"atol": 1e-10, "rtol": 1e-9}, torch.float32: {"atol": 1e-4, "rtol": 1e-3}}

# (T, S, block_q, block_k): several blocks with a short last one, T != S both ways, a block larger than T
SHAPES = [(7, 7, 3, 2), (5, 11, 2, 4), (9, 4, 4, 3), (6, 6, 16, 16), (1, 9, 4, 2), (8, 8, 4, 4)]
HEADS = [(4, 4), (4, 2), (4, 1)]  # MHA, GQA, MQA
CASES = [(shape, HEADS[n % 3]) for n, shape in enumerate(SHAPES)] + [(SHAPES[0], (4, 2)), (SHAPES[1], (4, 4))]


def inputs(B: int, H: int, K: int, T: int, S: int, dtype: torch.dtype, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, T, 8, generator=g, dtype=torch.float64).to(dtype)
    k = torch.randn(B, K, S, 8, generator=g, dtype=torch.float64).to(dtype)
    v = torch.randn(B, K, S, 5, generator=g, dtype=torch.float64).to(dtype)  # Ev != E
    return q, k, v


def mask_of(kind: str, B: int, T: int, S: int, dtype: torch.dtype) -> torch.Tensor | None:
    g = torch.Generator().manual_seed(1)
    if kind == "none":
        return None
    if kind == "bool":
        return torch.rand(B, 1, T, S, generator=g) > 0.3
    if kind == "padding":
        return padding_mask([S, max(1, S - 3)][:B], S)
    if kind == "float":
        f = torch.randn(T, S, generator=g, dtype=torch.float64).to(dtype)
        return f.masked_fill(torch.rand(T, S, generator=g) > 0.7, float("-inf"))
    raise AssertionError(kind)


def sdpa_reference(q, k, v, mask, causal):
    """PyTorch's own SDPA on repeated K/V and the full (bottom-right) mask; rows that see nothing -> 0."""
    T, S = q.shape[2], k.shape[2]
    n_rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(n_rep, 1), v.repeat_interleave(n_rep, 1)
    bias = torch.zeros(T, S, dtype=q.dtype)
    if mask is not None:
        is_bool = mask.dtype == torch.bool
        bias = bias + (torch.zeros_like(mask, dtype=q.dtype).masked_fill(~mask, float("-inf")) if is_bool else mask)
    if causal:
        i, j = torch.arange(T)[:, None], torch.arange(S)[None, :]
        bias = bias.masked_fill(j > i + S - T, float("-inf"))
    bias = bias.expand(q.shape[0], q.shape[1], T, S)
    dead = torch.isinf(bias).all(-1, keepdim=True)  # SDPA gives NaN there; the interface defines 0
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias.masked_fill(dead, 0.0))
    return out.masked_fill(dead, 0.0)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kind", ["none", "bool", "padding", "float"])
@pytest.mark.parametrize(("shape", "H_K"), CASES)
def test_tiled_equals_sdpa_and_eager_forward_and_backward(shape, H_K, kind, causal, dtype) -> None:
    T, S, bq, bk = shape
    H, K = H_K
    q, k, v = inputs(2, H, K, T, S, dtype)
    mask = mask_of(kind, 2, T, S, dtype)
    up = torch.randn(2, H, T, 5, generator=torch.Generator().manual_seed(3), dtype=torch.float64).to(dtype)

    results = {}
    for name in ("tiled", "eager", "sdpa", "reference"):
        leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        if name == "tiled":
            out = tiled_attention(*leaves, attn_mask=mask, is_causal=causal, block_q=bq, block_k=bk).output
        elif name == "reference":
            out = sdpa_reference(*leaves, mask, causal)
        else:
            out = attention(*leaves, attn_mask=mask, is_causal=causal, implementation=name).output
        (out * up).sum().backward()
        results[name] = (out.detach(), *(t.grad for t in leaves))
    for name in ("eager", "sdpa", "reference"):
        for got, want, what in zip(results["tiled"], results[name], ("out", "dq", "dk", "dv"), strict=True):
            tol = TOL[dtype] if what == "out" else GRAD_TOL[dtype]
            torch.testing.assert_close(got, want, **tol, msg=lambda m, n=name, w=what: f"tiled vs {n}, {w}: {m}")


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", [(5, 7, 2, 3), (7, 4, 3, 2)])
def test_gradcheck_fp64_with_a_float_mask_and_the_lse(shape, causal) -> None:
    T, S, bq, bk = shape
    q, k, v = (t.requires_grad_() for t in inputs(1, 2, 1, T, S, torch.float64))
    bias = torch.randn(T, S, dtype=torch.float64, requires_grad=True)  # a learned bias gets its gradient too
    keep = torch.ones(1, 1, T, S, dtype=torch.bool)
    keep[..., 0, :] = False  # query 0 sees nothing

    def out_only(q, k, v, bias):
        return tiled_attention(q, k, v, attn_mask=bias, is_causal=causal, block_q=bq, block_k=bk).output

    def with_dead_row(q, k, v):
        return tiled_attention(q, k, v, attn_mask=keep, is_causal=causal, block_q=bq, block_k=bk).output

    def lse(q, k, v, bias):  # only rows that see a key: log(0) has no derivative
        return tiled_attention(q, k, v, attn_mask=bias, block_q=bq, block_k=bk).lse

    assert torch.autograd.gradcheck(out_only, (q, k, v, bias), fast_mode=True)
    assert torch.autograd.gradcheck(with_dead_row, (q, k, v))
    assert torch.autograd.gradcheck(lse, (q, k, v, bias), fast_mode=True)
    assert (with_dead_row(q, k, v)[:, :, 0] == 0).all()


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kind", ["none", "bool", "float"])
@pytest.mark.parametrize("shape", [(7, 7, 3, 2), (5, 11, 2, 4), (9, 4, 4, 3)])
def test_lse_is_logsumexp_of_the_scaled_masked_scores(shape, kind, causal) -> None:
    T, S, bq, bk = shape
    q, k, v = inputs(2, 4, 2, T, S, torch.float64)
    mask = mask_of(kind, 2, T, S, torch.float64)
    scale = 0.3
    lse = tiled_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=scale, block_q=bq, block_k=bk).lse
    scores = q @ k.repeat_interleave(2, 1).transpose(-2, -1) * scale  # (B, H, T, S)
    if mask is not None and mask.dtype == torch.bool:
        scores = scores.masked_fill(~mask, float("-inf"))
    elif mask is not None:
        scores = scores + mask
    if causal:
        i, j = torch.arange(T)[:, None], torch.arange(S)[None, :]
        scores = scores.masked_fill(j > i + S - T, float("-inf"))
    assert lse is not None
    torch.testing.assert_close(lse, torch.logsumexp(scores, dim=-1), atol=1e-12, rtol=1e-12)


def test_registered_as_tiled_with_its_lse_and_used_by_the_module() -> None:
    assert ATTENTION_FUNCTIONS["tiled"].__name__ == "tiled_attention_function"
    q, k, v = inputs(1, 4, 2, 300, 300, torch.float32)  # larger than the default blocks: several tiles
    res = attention(q, k, v, is_causal=True, implementation="tiled")
    torch.testing.assert_close(res.output, attention(q, k, v, is_causal=True).output, atol=2e-5, rtol=1e-4)
    assert res.weights is None and res.lse is not None and res.lse.shape == (1, 4, 300)
    torch.manual_seed(0)
    mha = MultiHeadAttention(32, 4, num_kv_heads=2, implementation="tiled").eval()
    x = torch.randn(2, 6, 32)
    torch.testing.assert_close(mha(x, is_causal=True), mha(x, is_causal=True, implementation="sdpa"))


def test_half_precision_is_accumulated_in_float32() -> None:
    q, k, v = inputs(1, 2, 2, 33, 33, torch.float64)
    want = attention(q, k, v, is_causal=True).output
    res = tiled_attention(*(t.bfloat16() for t in (q, k, v)), is_causal=True, block_q=8, block_k=8)
    assert res.output.dtype == torch.bfloat16 and res.lse is not None and res.lse.dtype == torch.float32
    torch.testing.assert_close(res.output.double(), want, atol=3e-2, rtol=3e-2)


def test_autocast_does_not_lower_the_tiles() -> None:
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, implementation="tiled").eval()
    x = torch.randn(2, 9, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = mha(x, is_causal=True)
        want = mha(x, is_causal=True, implementation="eager")
    torch.testing.assert_close(got.float(), want.float(), atol=3e-2, rtol=3e-2)


def test_causal_tiles_are_skipped_and_never_computed() -> None:
    """The plan matches the mask, and the forward computes exactly the tiles the plan keeps."""
    T, S, bq, bk = 10, 13, 3, 4
    plan = tile_plan(T, S, bq, bk, causal=True)
    i, j = torch.arange(T)[:, None], torch.arange(S)[None, :]
    visible = j <= i + S - T
    for r, row in enumerate(plan):
        for c, kind in enumerate(row):
            tile = visible[r * bq : (r + 1) * bq, c * bk : (c + 1) * bk]
            want = "skip" if not tile.any() else "full" if tile.all() else "partial"
            assert kind == want, (r, c)
    assert any("skip" in row for row in plan) and any("full" in row for row in plan)
    # count the score matmuls the forward runs: one per computed tile (plus one p @ v each)
    calls = 0
    q, k, v = inputs(1, 2, 2, T, S, torch.float32)

    class Count(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            nonlocal calls
            calls += getattr(func, "__name__", "") in ("__matmul__", "matmul")
            return func(*args, **(kwargs or {}))

    with Count():
        tiled_attention(q, k, v, is_causal=True, block_q=bq, block_k=bk)
    kept = sum(kind != "skip" for row in plan for kind in row)
    assert calls == 2 * kept
    assert block_kind(0, 3, 0, 4, 3, 4, causal=False) == "full"


def test_gqa_does_not_repeat_keys_and_values() -> None:
    """No tensor shaped like K or V repeated for every query head is made (repeat_kv would make one)."""
    q, k, v = inputs(1, 8, 1, 16, 64, torch.float32)
    repeated = {(1, 8, 64, 8), (1, 8, 64, 5)}  # (B, H, S, E), (B, H, S, Ev)

    def shapes_made(fn) -> set[tuple[int, ...]]:
        seen: set[tuple[int, ...]] = set()

        class Shapes(torch.overrides.TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                if isinstance(out, torch.Tensor):
                    seen.add(tuple(out.shape))
                return out

        with Shapes():
            fn()
        return seen

    assert repeated <= shapes_made(lambda: attention(q, k, v, implementation="eager"))  # the check can see it
    assert not repeated & shapes_made(lambda: tiled_attention(q, k, v, block_q=4, block_k=16))


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"block_q": 0}, ValueError, r"block_q must be at least 1 \(a number of positions per block\); got block_q=0"),
        ({"block_k": -4}, ValueError, r"block_k must be at least 1 \(a number of positions .*\); got block_k=-4"),
        ({"block_q": 64.0}, TypeError, r"block_q must be an int; got 64.0 of type float"),
        ({"block_k": True}, TypeError, r"block_k must be an int; got True of type bool"),
    ],
)
def test_bad_block_sizes_are_clear_errors(kwargs, error, match) -> None:
    q, k, v = inputs(1, 2, 2, 4, 4, torch.float32)
    with pytest.raises(error, match=match):
        tiled_attention(q, k, v, **kwargs)
    with pytest.raises(error, match=match.replace("block_q", "block_size").replace("block_k", "block_size")):
        online_softmax(torch.randn(3), block_size=next(iter(kwargs.values())))


def test_dropout_is_refused_by_the_tiled_implementation() -> None:
    q, k, v = inputs(1, 2, 2, 4, 4, torch.float32)
    with pytest.raises(ValueError, match=r"'tiled' implementation does not implement dropout; got dropout_p=0.5"):
        attention(q, k, v, dropout_p=0.5, implementation="tiled")


# ----------------------------------------------------------------------------- online softmax


@pytest.mark.parametrize("block_size", [1, 2, 3, 100])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_online_softmax_equals_torch_softmax(block_size: int, dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(4, 3, 9, generator=g, dtype=torch.float64) * 30).to(dtype)  # large: exp would overflow
    x[0, 0, ::2] = float("-inf")  # masked entries
    torch.testing.assert_close(online_softmax(x, block_size=block_size), torch.softmax(x, dim=-1))


def test_online_softmax_of_a_fully_masked_row_is_zero() -> None:
    x = torch.tensor([[float("-inf")] * 4, [0.0, float("-inf"), 1.0, 2.0]])
    out = online_softmax(x, block_size=3)
    assert (out[0] == 0).all()
    torch.testing.assert_close(out[1], torch.softmax(x[1], dim=-1))
    assert online_softmax(torch.zeros(2, 0)).shape == (2, 0)


def test_softmax_statistics_end_at_the_max_and_the_two_pass_sum() -> None:
    x = torch.randn(5, 17, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    steps = list(softmax_statistics(x, block_size=4))
    assert len(steps) == math.ceil(17 / 4)
    m, l = steps[-1]
    torch.testing.assert_close(m, x.amax(-1))
    torch.testing.assert_close(l, torch.exp(x - x.amax(-1, keepdim=True)).sum(-1))
    assert all((a[0] <= b[0]).all() for a, b in itertools.pairwise(steps))  # the max only grows


def test_tiled_function_saves_nothing_of_size_t_times_s() -> None:
    T = S = 64
    q, k, v = (t.requires_grad_() for t in inputs(1, 2, 2, T, S, torch.float32))
    out, _ = TiledAttention.apply(q, k, v, None, True, 0.35, 16, 16)
    saved = out.grad_fn.saved_tensors  # type: ignore[union-attr]
    assert max(t.numel() for t in saved if t is not None) < T * S


def test_conditional_rescaling_gives_the_same_answer_and_skips_rescales() -> None:
    """FlashAttention-4's rule: a stale running max (at most 2**threshold below the true one) changes nothing."""
    from lessons_src.flash import count_rescales
    from lessons_src.masks import causal_mask

    torch.manual_seed(0)
    q, kv = torch.randn(2, 4, 70, 16) * 3, torch.randn(2, 2, 90, 16)  # spiky scores: the max keeps rising
    q.requires_grad_()
    plain = tiled_attention(q, kv, kv, is_causal=True, block_q=16, block_k=8)
    lazy = tiled_attention(q, kv, kv, is_causal=True, block_q=16, block_k=8, rescale_threshold=8)
    torch.testing.assert_close(lazy.output, plain.output, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(lazy.lse, plain.lse, atol=1e-5, rtol=1e-6)
    (g_plain,) = torch.autograd.grad(plain.output.sum(), q)
    (g_lazy,) = torch.autograd.grad(lazy.output.sum(), q)
    torch.testing.assert_close(g_lazy, g_plain)

    scores = (q.detach() @ kv.repeat_interleave(2, 1).transpose(-2, -1)) / 4
    scores = scores.masked_fill(~causal_mask(70, 90), float("-inf"))
    every = count_rescales(scores, block_size=8, threshold=0)
    lazy_count = count_rescales(scores, block_size=8, threshold=8)
    assert every.rescales == every.rises > 0 and every.steps == lazy_count.steps
    assert 0 < lazy_count.rescales < every.rescales, (every, lazy_count)
    # a row whose first keys are hidden starts its statistics at its first visible block
    assert count_rescales(torch.tensor([[float("-inf"), 1.0, 0.0]]), block_size=1, threshold=0) == (1, 0, 0)
    with pytest.raises(ValueError, match=r"rescale_threshold must be a number of powers of two in \[0, 64\]"):
        tiled_attention(q, kv, kv, rescale_threshold=-1)
