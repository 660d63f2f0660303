"""The sink path's layouts and derivatives (`lessons_src.score_mods`).

The fused CPU path (:func:`sink_flash_cpu`) hands its tensors to a private torch kernel that reads them as if
each row of features were contiguous; these tests give it every layout a caller can produce, and ask for second
derivatives, which that kernel does not have.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import pytest
import torch

from lessons_src.functional import ATTENTION_FUNCTIONS, attention
from lessons_src.score_mods import Sinks, sdpa_with_sinks, sink_flash_cpu

if TYPE_CHECKING:
    from collections.abc import Callable

B, H, T, S, E = 2, 2, 5, 6, 8

# Each layout gives the same numbers as ``x`` with other strides, the way a caller's code produces them.
LAYOUTS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "contiguous": lambda x: x,
    "last dim transposed": lambda x: x.mT.contiguous().mT,  # stride(-1) = rows
    "every other feature": lambda x: torch.stack([x, torch.full_like(x, math.nan)], -1).flatten(-2)[..., ::2],
    "heads transposed": lambda x: x.transpose(1, 2).contiguous().transpose(1, 2),  # (B, T, H, E) storage
    "a cache slice": lambda x: torch.cat([x, torch.full_like(x, math.nan)], 2)[:, :, : x.shape[2]],
    "a step in T": lambda x: x.repeat_interleave(2, dim=2)[:, :, ::2],
    "an expanded batch": lambda x: x[:1].expand_as(x),
}


def _inputs(dtype: torch.dtype, Ev: int = E, seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, T, E, generator=g, dtype=torch.float64)
    k = torch.randn(B, H, S, E, generator=g, dtype=torch.float64)
    v = torch.randn(B, H, S, Ev, generator=g, dtype=torch.float64)
    sinks = torch.randn(H, generator=g, dtype=torch.float64)
    q[1], k[1], v[1] = q[0], k[0], v[0]  # so that "an expanded batch" is the same numbers
    return tuple(t.to(dtype) for t in (q, k, v, sinks))


def _run(fn: Callable[..., torch.Tensor], ins: list[torch.Tensor], up: torch.Tensor) -> list[torch.Tensor]:
    """Output and the gradients of every input, for the upstream gradient ``up``."""
    leaves = [t.detach().requires_grad_() if t.is_leaf else t for t in ins]
    out = fn(*leaves)
    return [out.detach(), *torch.autograd.grad((out * up).sum(), leaves)]


def _laid_out(ins: tuple[torch.Tensor, ...], layout: str) -> list[torch.Tensor]:
    """``q``, ``k`` and ``v`` in ``layout``, built from leaves so their gradients come back contiguous."""
    return [LAYOUTS[layout](t) for t in ins[:3]] + [ins[3]]


TOL = {torch.float32: {"atol": 1e-5, "rtol": 1e-5}, torch.float64: {"atol": 1e-12, "rtol": 1e-12},
       torch.bfloat16: {"atol": 1e-2, "rtol": 1e-2}}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("Ev", [E, 3])
def test_every_layout_gives_the_contiguous_answer(dtype: torch.dtype, Ev: int) -> None:
    """Through ``attention()`` with every implementation, causal or not, with a mask or none, and through
    ``sdpa_with_sinks`` and ``sink_flash_cpu`` directly: outputs and gradients as for contiguous inputs
    (``Ev = 3`` takes the sink-as-a-key path, ``E = 8`` the CPU flash kernel in float32 and float64)."""
    q, k, v, sinks = _inputs(dtype, Ev)
    up = torch.randn(B, H, T, Ev, generator=torch.Generator().manual_seed(9), dtype=torch.float64).to(dtype)
    keep = torch.rand(T, S, generator=torch.Generator().manual_seed(3)) > 0.3
    calls: dict[str, Callable[..., torch.Tensor]] = {}
    for impl in sorted(ATTENTION_FUNCTIONS):
        for causal in (False, True):
            for mask in (None, keep):
                calls[f"{impl} causal={causal} mask={mask is not None}"] = (
                    lambda q, k, v, s, i=impl, c=causal, m=mask: attention(
                        q, k, v, score_mods=Sinks(s), is_causal=c, attn_mask=m, implementation=i).output)
    calls["sdpa_with_sinks"] = lambda q, k, v, s: sdpa_with_sinks(q, k, v, s, mask=keep, is_causal=True, scale=0.3)
    if Ev == E and dtype != torch.bfloat16:
        calls["sink_flash_cpu"] = lambda q, k, v, s: sink_flash_cpu(q, k, v, s, is_causal=False, mask=keep, scale=0.3)
    failures = []
    for name, fn in calls.items():
        want = _run(fn, [q, k, v, sinks], up)
        for layout in LAYOUTS:
            got = _run(fn, _laid_out((q, k, v, sinks), layout), up)
            for what, a, b in zip(["output", "dq", "dk", "dv", "dsinks"], got, want, strict=True):
                if not torch.allclose(a.double(), b.double(), **TOL[dtype]):
                    failures.append(f"{name}, {layout}: {what} off by {(a.double() - b.double()).abs().max():.3g}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("layout", ["last dim transposed", "every other feature", "an expanded batch"])
def test_a_mask_in_any_layout_gives_the_contiguous_answer(layout: str) -> None:
    """The kernel reads a mask's rows as contiguous too: bool and float masks, laid out as the tensors above."""
    q, k, v, sinks = _inputs(torch.float64)
    keep = (torch.rand(1, H, T, S, generator=torch.Generator().manual_seed(4)) > 0.3).expand(B, H, T, S)
    for mask in (keep, torch.zeros(B, H, T, S, dtype=torch.float64).masked_fill(~keep, -math.inf)):
        want = attention(q, k, v, score_mods=Sinks(sinks), attn_mask=mask.contiguous()).output
        for fn in (lambda m: attention(q, k, v, score_mods=Sinks(sinks), attn_mask=m).output,
                   lambda m: sink_flash_cpu(q, k, v, sinks, is_causal=False, mask=m, scale=E**-0.5)):
            torch.testing.assert_close(fn(LAYOUTS[layout](mask)), want, atol=1e-12, rtol=1e-12)


def _definition(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sinks: torch.Tensor) -> torch.Tensor:
    """Causal attention with a sink column, from the definition (plain ops: every derivative exists)."""
    s = (q @ k.mT / math.sqrt(q.shape[-1])).masked_fill(~torch.ones(T, S, dtype=torch.bool).tril(S - T), -math.inf)
    col = sinks.view(1, -1, 1, 1).expand(*s.shape[:3], 1)
    return torch.cat([s, col], -1).softmax(-1)[..., :-1] @ v


@pytest.mark.parametrize("impl", sorted(ATTENTION_FUNCTIONS))
def test_second_derivatives_through_the_sinks_are_exact(impl: str) -> None:
    """A Hessian-vector product in the sinks and in the queries, against the definition's (fp64). The fused CPU
    path's backward used values computed without a graph: its sink Hessian was off, its query one raised."""
    q, k, v, sinks = _inputs(torch.float64)
    up = torch.randn(B, H, T, E, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    for wrt in (3, 0, 1, 2):  # the sinks, then q, k and v
        results = []
        for fn in (lambda *a: attention(*a[:3], score_mods=Sinks(a[3]), is_causal=True, implementation=impl).output,
                   _definition):
            ins = [t.clone().requires_grad_() for t in (q, k, v, sinks)]
            (g,) = torch.autograd.grad((fn(*ins) * up).sum(), ins[wrt], create_graph=True)
            second = torch.autograd.grad((g * g).sum(), ins, allow_unused=True)  # d/d(all) of |grad|^2
            results.append([torch.zeros_like(t) if d is None else d for d, t in zip(second, ins, strict=True)])
        for n, (a, b) in enumerate(zip(*results, strict=True)):
            torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-9,
                                       msg=lambda m, n=n, w=wrt: f"d/d{'qkvs'[n]} of |d/d{'qkvs'[w]}|^2: {m}")


@pytest.mark.parametrize("impl", sorted(ATTENTION_FUNCTIONS))
def test_a_sink_at_minus_infinity_over_no_key_has_zero_gradient(impl: str) -> None:
    """A head whose sink logit is ``-inf`` and a query that sees no key: zero output, zero gradients, no NaN."""
    q, k, v, _ = _inputs(torch.float64)
    sinks = torch.tensor([-math.inf, 0.3], dtype=torch.float64)
    keep = torch.ones(T, S, dtype=torch.bool)
    keep[2] = False  # query 2 sees nothing
    ins = [t.clone().requires_grad_() for t in (q, k, v, sinks)]
    out = attention(*ins[:3], score_mods=Sinks(ins[3]), attn_mask=keep, implementation=impl).output
    assert (out[:, :, 2] == 0).all()
    grads = torch.autograd.grad(out.sum(), ins)
    for name, grad in zip("qkvs", grads, strict=True):
        assert torch.isfinite(grad).all(), f"{impl}: d{name} has {grad.isnan().sum()} NaN"
    assert grads[3][0] == 0  # the -inf sink takes no weight from any query
