"""The core on a CUDA GPU, in float32, float16 and bfloat16: ``make test-gpu`` (``pytest -m gpu``).

Each result is compared with a float64 reference computed on the CPU, and its error must be at most twice
the error of PyTorch's own ``F.scaled_dot_product_attention`` on the same low-precision inputs (plus one
unit in the last place of the dtype, for when SDPA happens to be exact). Skipped without CUDA.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import lessons_src.flash  # noqa: F401  (registers the "tiled" implementation)
from lessons_src.functional import attention
from lessons_src.kv_cache import KVCache, RollingKVCache
from lessons_src.layer import MultiHeadAttention
from lessons_src.masks import causal_mask, padding_mask, sliding_window
from lessons_src.paged_cache import PagedKVCache, paged_attention

DEVICE = "cuda"
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]

# name: (H, K, T, S, window, extra mask): causal prefill, chunked GQA prefill into a cache, more queries than
# keys, a sliding window, and a padding mask combined with the causal one
CASES = {
    "causal": (4, 4, 16, 16, None, False),
    "gqa chunk T < S": (4, 2, 5, 21, None, False),
    "T > S": (2, 2, 9, 6, None, False),
    "window": (4, 2, 16, 16, 5, False),
    "padding": (2, 1, 12, 12, None, True),
}


def _inputs(case: str, dtype: torch.dtype, seed: int = 0):
    H, K, T, S, window, padded = CASES[case]
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, n, L, 16, generator=g, dtype=torch.float64) for n, L in ((H, T), (K, S), (K, S)))
    extra = padding_mask(torch.tensor([S, S - 3])) if padded else None  # (2, 1, 1, S)
    keep = causal_mask(T, S, window=window) if extra is None else causal_mask(T, S) & extra  # (.., T, S)
    masks = [m for m in (extra, None if window is None else sliding_window(window)) if m is not None]
    return (q, k, v), keep, dict(attn_mask=masks, is_causal=True)


def _sdpa(q, k, v, keep):
    """PyTorch's SDPA with our explicit mask; rows that see no key are set to 0, as ours are."""
    n_rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(n_rep, 1), v.repeat_interleave(n_rep, 1)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
    return torch.where(keep.any(-1, keepdim=True), out, torch.zeros((), dtype=out.dtype, device=out.device))


def _err(x: torch.Tensor, ref: torch.Tensor) -> float:
    return (x.double().cpu() - ref).abs().max().item()


def _assert_within_sdpa(err: float, sdpa_err: float, dtype: torch.dtype, what: str) -> None:
    bound = 2 * sdpa_err + torch.finfo(dtype).eps
    assert err <= bound, f"{what}: error {err:.3g} against float64 is above 2 x SDPA's {sdpa_err:.3g} ({dtype})"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("impl", ["sdpa", "eager", "tiled"])
def test_attention_on_gpu_is_as_accurate_as_sdpa(impl, case, dtype):
    (q, k, v), keep, kwargs = _inputs(case, dtype)
    ref = _sdpa(q, k, v, keep)  # float64, CPU
    low = [t.to(DEVICE, dtype) for t in (q, k, v)]
    sdpa_err = _err(_sdpa(*low, keep.to(DEVICE)), ref)
    kwargs["attn_mask"] = [m.to(DEVICE) if isinstance(m, torch.Tensor) else m for m in kwargs["attn_mask"]]
    out = attention(*low, implementation=impl, **kwargs).output
    assert out.device.type == "cuda" and out.dtype == dtype
    _assert_within_sdpa(_err(out, ref), sdpa_err, dtype, f"{impl} {case}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("impl", ["eager", "tiled"])
def test_gradients_on_gpu_are_as_accurate_as_sdpa(impl, dtype):
    (q, k, v), keep, kwargs = _inputs("window", dtype)
    grad_out = torch.randn(q.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)

    def grads(fn, tensors):
        tensors = [t.detach().requires_grad_() for t in tensors]
        fn(*tensors).backward(grad_out.to(tensors[0].device, tensors[0].dtype))
        return [t.grad for t in tensors]

    ref = grads(lambda *t: _sdpa(*t, keep), (q, k, v))
    low = [t.to(DEVICE, dtype) for t in (q, k, v)]
    base = grads(lambda *t: _sdpa(*t, keep.to(DEVICE)), low)
    ours = grads(lambda *t: attention(*t, implementation=impl, **kwargs).output, low)
    for name, got, want, sdpa in zip("qkv", ours, ref, base, strict=True):
        _assert_within_sdpa(_err(got, want), _err(sdpa, want), dtype, f"{impl} d{name}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@torch.no_grad()
def test_module_and_caches_on_gpu(dtype):
    """MultiHeadAttention with weights, a cached decode, a rolling cache and paged attention, all on the GPU."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(32, 4, num_kv_heads=2).double().eval()
    gpu = copy.deepcopy(mha).to(DEVICE, dtype)
    x = torch.randn(2, 12, 32, dtype=torch.float64)
    xl = x.to(DEVICE, dtype)
    (q, k, v), (ql, kl, vl) = mha.project_qkv(x), gpu.project_qkv(xl)  # (2, 4, 12, 8), 2 x (2, 2, 12, 8)

    def merged(m, y):  # heads back to (B, T, D), then W_O
        return m.out_proj(y.transpose(1, 2).reshape(2, -1, 32))

    for window in (None, 4):
        keep = causal_mask(12, window=window)
        ref, base = merged(mha, _sdpa(q, k, v, keep)), merged(gpu, _sdpa(ql, kl, vl, keep.to(DEVICE)))
        rule = None if window is None else sliding_window(window)
        out, w = gpu.with_weights(xl, is_causal=True, attn_mask=rule)
        assert w.device.type == "cuda" and torch.equal((w[0, 0] > 0).cpu(), keep)
        _assert_within_sdpa(_err(out, ref), _err(base, ref), dtype, f"MultiHeadAttention window={window}")
    cache = KVCache(2, 2, 8, 12, dtype=dtype, device=DEVICE)
    steps = [gpu(xl[:, :7], is_causal=True, cache=cache)]  # prefill 7, then decode 5 one by one
    steps += [gpu(xl[:, t : t + 1], is_causal=True, cache=cache) for t in range(7, 12)]
    causal_ref = merged(mha, _sdpa(q, k, v, causal_mask(12)))
    causal_base = merged(gpu, _sdpa(ql, kl, vl, causal_mask(12, device=DEVICE)))
    _assert_within_sdpa(_err(torch.cat(steps, 1), causal_ref), _err(causal_base, causal_ref), dtype, "KV cache")

    rolling = RollingKVCache(2, 2, 8, window=4, dtype=dtype, device=DEVICE)
    first = rolling.update(kl[:, :, :7], vl[:, :, :7])
    assert first.mask is not None and torch.equal(first.mask.cpu(), causal_mask(7, window=4))
    last = [rolling.update(kl[:, :, t : t + 1], vl[:, :, t : t + 1]) for t in range(7, 12)][-1]
    assert last.k.device.type == "cuda" and sorted(last.positions.tolist()) == [8, 9, 10, 11]

    paged = PagedKVCache(num_blocks=8, block_size=4, num_kv_heads=2, head_dim=8, dtype=dtype, device=DEVICE)
    for b in range(2):
        paged.add_sequence(b)
        paged.append(b, kl[b], vl[b])
    want = _sdpa(q[:, :, -1:], k, v, causal_mask(1, 12))  # the last query sees all 12 keys
    base = _sdpa(ql[:, :, -1:], kl, vl, causal_mask(1, 12, device=DEVICE))
    got = paged_attention(ql[:, :, -1:], paged, [0, 1])
    _assert_within_sdpa(_err(got, want), _err(base, want), dtype, "paged attention")
