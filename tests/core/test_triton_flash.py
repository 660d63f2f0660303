"""FlashAttention-2 in Triton (lessons_src/triton_flash.py) against SDPA, the course's "tiled" version and float64.

Two ways to run: ``make test-triton`` sets ``TRITON_INTERPRET=1`` and runs the kernels through Triton's
interpreter on CPU tensors (float32); ``make test-gpu`` runs the cases marked ``gpu`` on a CUDA GPU in float32,
float16 and bfloat16. In float32 every result must be within 1e-4 of float64 (on an H200, dK and dV at T = 1000
summed 4,000 terms per entry and were 5 times further from float64 than SDPA's, 2e-5 against 4e-6: rounding of
sums taken in another order, not a ratio to hold); in half precision within twice SDPA's error on the same inputs.
Without Triton, or with neither the interpreter nor a GPU, the file is skipped.
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton", reason="needs Triton, the [triton] extra: `make test-triton` installs it")
if os.environ.get("TRITON_INTERPRET") != "1" and not torch.cuda.is_available():
    pytest.skip("needs TRITON_INTERPRET=1 (`make test-triton`) or a CUDA GPU (`make test-gpu`)",
                allow_module_level=True)

import lessons_src.flash  # noqa: F401  (registers "tiled")
from lessons_src import triton_flash
from lessons_src.functional import attention
from lessons_src.masks import causal_mask, same_document, sliding_window
from lessons_src.score_mods import Sinks, SoftCap
from lessons_src.triton_flash import triton_attention

# name: (B, H, K, T, S, E, Ev, causal, block_q, block_k). Odd lengths leave ragged last blocks; T < S is a chunk
# of queries after cached keys; T > S leaves the first T - S queries with no key to see (output 0)
CASES = {
    "square causal": (2, 4, 4, 64, 64, 64, 64, True, 32, 32),
    "square, not causal": (2, 4, 4, 64, 64, 64, 64, False, 32, 32),
    "GQA, odd T < S, causal": (1, 6, 2, 37, 53, 32, 32, True, 16, 16),
    "GQA, odd T < S, not causal": (1, 6, 2, 37, 53, 32, 32, False, 16, 32),
    "T > S, causal": (1, 2, 1, 50, 20, 16, 16, True, 16, 16),
    "one query (decoding)": (2, 4, 2, 1, 70, 64, 64, True, 16, 32),
    "one query, one key": (1, 2, 2, 1, 1, 16, 16, True, 16, 16),
    "head size 80, values 48": (1, 2, 2, 33, 33, 80, 48, True, 32, 16),
    "head size 128, MQA": (1, 4, 1, 40, 40, 128, 128, True, 64, 64),
}
GPU_CASES = {  # the default blocks, with the warps and pipelining a GPU compiles them with
    "long causal, head 128": (2, 8, 2, 1000, 1000, 128, 128, True, None, None),
    "long, not causal, head 64": (1, 4, 4, 777, 1029, 64, 64, False, None, None),
}
INTERPRETED = triton_flash.INTERPRETED
GPU = torch.cuda.is_available() and not INTERPRETED


def _runs():
    """(device, dtype, case) triples this machine runs: float32 on the interpreter; three dtypes on a GPU."""
    if INTERPRETED:
        return [pytest.param("cpu", torch.float32, c, id=f"interpreter-{c}") for c in CASES]
    marks = [pytest.mark.gpu]
    return [pytest.param("cuda", dt, c, id=f"cuda-{str(dt)[6:]}-{c}", marks=marks)
            for dt in (torch.float32, torch.float16, torch.bfloat16) for c in (*CASES, *GPU_CASES)]


def _inputs(case, device, dtype, seed=0):
    B, H, K, T, S, E, Ev, causal, bq, bk = {**CASES, **GPU_CASES}[case]
    g = torch.Generator().manual_seed(seed)
    shapes = ((H, T, E), (K, S, E), (K, S, Ev))
    q, k, v = (torch.randn(B, n, L, d, generator=g, dtype=torch.float64) for n, L, d in shapes)
    grad = torch.randn(B, H, T, Ev, generator=g, dtype=torch.float64)
    low = [t.to(device, dtype) for t in (q, k, v, grad)]
    return (q, k, v, grad), low, dict(is_causal=causal, block_q=bq, block_k=bk)


def _sdpa(q, k, v, causal):
    """PyTorch's SDPA with the bottom-right causal mask given explicitly; rows that see no key set to 0, as ours."""
    T, S = q.shape[2], k.shape[2]
    keep = causal_mask(T, S, device=q.device) if causal else torch.ones(T, S, dtype=torch.bool, device=q.device)
    n_rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(n_rep, 1), v.repeat_interleave(n_rep, 1)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
    return torch.where(keep.any(-1, keepdim=True), out, torch.zeros((), dtype=out.dtype, device=out.device))


def _with_grads(fn, tensors, grad):
    tensors = [t.detach().requires_grad_() for t in tensors]
    out = fn(*tensors)
    out.backward(grad)
    return [out.detach(), *(t.grad for t in tensors)]


def _err(x, ref):
    return (x.double().cpu() - ref).abs().max().item()


@pytest.mark.parametrize(("device", "dtype", "case"), _runs())
def test_forward_and_gradients_equal_sdpa_and_tiled(device, dtype, case):
    (q, k, v, grad), low, kw = _inputs(case, device, dtype)
    causal, blocks = kw["is_causal"], {"block_q": kw["block_q"], "block_k": kw["block_k"]}
    names = ["output", "dq", "dk", "dv"]
    ref = _with_grads(lambda *t: _sdpa(*t, causal), (q, k, v), grad)  # float64 on the CPU
    ours = _with_grads(lambda *t: triton_attention(*t, is_causal=causal, **blocks).output, low[:3], low[3])
    assert ours[0].dtype == dtype and ours[0].device.type == device
    if dtype == torch.float32:  # as exact as float32 allows, on the interpreter and on a GPU
        for name, got, want in zip(names, ours, ref, strict=True):
            assert _err(got, want) < 1e-4, f"{case} {name}: {_err(got, want):.3g} from float64"
    if device == "cpu":  # the interpreter: beside SDPA and the tiled loop too
        sdpa = _with_grads(lambda *t: _sdpa(*t, causal), low[:3], low[3])
        tiled = _with_grads(lambda *t: attention(*t, is_causal=causal, implementation="tiled").output, low[:3], low[3])
        for name, got, s, t in zip(names, ours, sdpa, tiled, strict=True):
            torch.testing.assert_close(got, s, atol=2e-5, rtol=1e-5, msg=lambda m, n=name: f"{case} {n} vs SDPA: {m}")
            torch.testing.assert_close(got, t, atol=2e-5, rtol=1e-5, msg=lambda m, n=name: f"{case} {n} vs tiled: {m}")
    elif dtype != torch.float32:  # float16, bfloat16 on a GPU: at most twice SDPA's error (plus one ulp)
        base = _with_grads(lambda *t: _sdpa(*t, causal), low[:3], low[3])
        for name, got, want, b in zip(names, ours, ref, base, strict=True):
            bound = 2 * _err(b, want) + torch.finfo(dtype).eps
            assert _err(got, want) <= bound, f"{case} {name}: {_err(got, want):.3g} > {bound:.3g} ({dtype})"


@pytest.mark.parametrize(("device", "dtype", "case"), [r for r in _runs() if "T > S" in r.id or "odd T < S, c" in r.id])
def test_log_sum_exp_and_its_gradient(device, dtype, case):
    """lse is each query's log-sum-exp (-inf where it sees nothing), and a loss on it reaches q and k."""
    (q, k, _, _), low, kw = _inputs(case, device, dtype)
    causal = kw["is_causal"]
    keep = causal_mask(q.shape[2], k.shape[2]) if causal else torch.ones(q.shape[2], k.shape[2], dtype=torch.bool)

    def lse_ref(q, k):
        s = (q @ k.repeat_interleave(q.shape[1] // k.shape[1], 1).transpose(-2, -1)) / q.shape[-1] ** 0.5
        return torch.logsumexp(s.masked_fill(~keep, float("-inf")), dim=-1)

    def loss(lse):
        return torch.where(lse.isfinite(), lse, 0).sum()

    want = lse_ref(q, k)
    qd, kd = q.detach().requires_grad_(), k.detach().requires_grad_()
    loss(lse_ref(qd, kd)).backward()
    ql, kl = low[0].detach().requires_grad_(), low[1].detach().requires_grad_()
    lse = triton_attention(ql, kl, low[2], is_causal=causal, block_q=16, block_k=16).lse
    assert lse.dtype == torch.float32 and torch.equal(lse.isinf().cpu(), want.isinf())
    loss(lse).backward()
    tol = 1e-4 if dtype == torch.float32 else 5e-2
    for got, ref in ((lse, want), (ql.grad, qd.grad), (kl.grad, kd.grad)):
        finite = ref.isfinite()
        assert _err(got.detach()[finite.to(got.device)], ref[finite]) < tol


@pytest.mark.parametrize(("device", "dtype"), sorted({(r.values[0], r.values[1]) for r in _runs()}, key=str))
def test_attention_interface_and_empty_sizes(device, dtype):
    """implementation="triton" in attention(); no query or no key gives empty or zero outputs and gradients."""
    g = torch.Generator().manual_seed(3)
    q, kv = torch.randn(1, 4, 9, 16, generator=g), torch.randn(1, 2, 12, 16, generator=g)
    q, kv = q.to(device, dtype), kv.to(device, dtype)
    out = attention(q, kv, kv, is_causal=True, implementation="triton").output
    torch.testing.assert_close(out, triton_attention(q, kv, kv, is_causal=True).output)
    for T, S in ((0, 12), (9, 0)):
        qe, kve = q[:, :, :T].detach().requires_grad_(), kv[:, :, :S].detach().requires_grad_()
        out, _, lse = triton_attention(qe, kve, kve, is_causal=True)
        assert out.shape == (1, 4, T, 16) and not out.any() and (lse == float("-inf")).all()
        out.sum().backward()
        assert qe.grad is not None and not qe.grad.any() and kve.grad is not None and not kve.grad.any()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"attn_mask": torch.ones(5, 5, dtype=torch.bool)}, r"take a mask besides is_causal \(got mask='a mask"),
        ({"attn_mask": sliding_window(2)}, r"take a mask besides is_causal \(got mask='window=2'\)"),
        ({"score_mods": SoftCap(30.0)}, r"soft-cap the scores \(got softcap=30.0\)"),
        ({"score_mods": Sinks(torch.zeros(2))}, r"add learned sinks \(got sinks given\)"),
        ({"dropout_p": 0.1}, r"apply dropout \(got dropout=0.1\)"),
        ({"attn_mask": same_document(torch.tensor([0, 0, 1, 1, 1]))}, r"take a mask besides is_causal"),
    ],
)
def test_refuses_what_the_kernels_do_not_have(kwargs, message):
    """What the 'triton' implementation declared it cannot do, refused once by attention(), naming the others."""
    q = torch.randn(1, 2, 5, 16)
    with pytest.raises(ValueError, match=f"implementation='triton' cannot {message}.*use one that can: .*'tiled'"):
        attention(q, q, q, implementation="triton", **kwargs)


def test_refuses_dtypes_head_sizes_blocks_and_devices(monkeypatch):
    q = torch.randn(1, 2, 5, 16)
    with pytest.raises(ValueError, match=r"float32, float16 or bfloat16; got torch\.float64"):
        triton_attention(q.double(), q.double(), q.double())
    for E in (8, 256):
        x = torch.randn(1, 2, 5, E)
        with pytest.raises(ValueError, match=f"head sizes 16 to 128; got E={E}"):
            triton_attention(x, x, x)
    with pytest.raises(ValueError, match="got Ev=200"):
        triton_attention(q, q, torch.randn(1, 2, 5, 200))
    for bad in (24, 8):
        with pytest.raises(ValueError, match=r"block_q must be .*(at least 16|power of two)"):
            triton_attention(q, q, q, block_q=bad)
    for bad in (64.0, True):  # not a size: the one rule for sizes refuses its type
        with pytest.raises(TypeError, match="block_q must be an int"):
            triton_attention(q, q, q, block_q=bad)
    monkeypatch.setattr(triton_flash, "INTERPRETED", False)
    with pytest.raises(ValueError, match=r"tensors are on cpu.*TRITON_INTERPRET=1"):
        triton_attention(q, q, q)
