"""lessons_src.delta_rule against transformers' own PyTorch implementations of Gated DeltaNet and KDA.

transformers' functions take ``(B, T, H, D)`` and grouped key heads; ours take ``(B, H, T, D)`` with the key heads
already repeated, as the models' layers hand them over. The inputs make every term matter: the comparisons
fail with the gate removed, with the erase term removed, or with a per-channel gate read as one per head.
"""

from __future__ import annotations

import importlib.util
import warnings

import pytest
import torch
import torch.nn.functional as F

from lessons_src.delta_rule import delta_rule_chunked, delta_rule_recurrent

TOL = {"atol": 2e-5, "rtol": 1e-4}


def inputs(per_channel: bool, B: int = 2, Hk: int = 2, Hv: int = 4, T: int = 23, Dk: int = 8, Dv: int = 6,
           seed: int = 0) -> dict[str, torch.Tensor]:
    """Random inputs in transformers' layout: L2-normalised keys and queries, gates as the models make them."""
    gen = torch.Generator().manual_seed(seed)
    q = F.normalize(torch.randn(B, T, Hk, Dk, generator=gen), dim=-1)
    k = F.normalize(torch.randn(B, T, Hk, Dk, generator=gen), dim=-1)
    v = torch.randn(B, T, Hv, Dv, generator=gen)
    shape = (B, T, Hv, Dk) if per_channel else (B, T, Hv)
    g = -F.softplus(torch.randn(*shape, generator=gen)) * 0.5  # log decay <= 0
    beta = torch.rand(B, T, Hv, generator=gen).sigmoid()
    return {"query": q, "key": k, "value": v, "g": g, "beta": beta}


def ours(x: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """Our layout: heads before time; key heads repeated to the value heads (as transformers does inside)."""
    rep = x["value"].shape[2] // x["key"].shape[2]
    q, k = (x[n].repeat_interleave(rep, dim=2).transpose(1, 2) for n in ("query", "key"))
    g = x["g"].transpose(1, 2)
    return q, k, x["value"].transpose(1, 2), g, x["beta"].transpose(1, 2)


def qwen3_next() -> tuple[object, object]:
    from transformers.models.qwen3_next import modeling_qwen3_next as m

    return m.torch_recurrent_gated_delta_rule, m.torch_chunk_gated_delta_rule


def kimi_linear() -> tuple[object, object]:
    from transformers.models.kimi_linear import modeling_kimi_linear as m

    return m.recurrent_kimi_delta_attention, m.chunk_kimi_delta_attention


def test_transformers_runs_its_torch_implementations() -> None:
    """With flash-linear-attention installed transformers would run that package's kernels instead: not here."""
    assert importlib.util.find_spec("fla") is None
    for fn in (*qwen3_next(), *kimi_linear()):
        assert fn.__module__.startswith("transformers.models."), fn  # type: ignore[attr-defined]


@pytest.mark.parametrize("per_channel", [False, True], ids=["Gated DeltaNet", "KDA"])
def test_both_forms_match_transformers(per_channel: bool) -> None:
    x = inputs(per_channel, Hk=4 if per_channel else 2)  # KDA: a key head per value head
    recurrent, chunked = kimi_linear() if per_channel else qwen3_next()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref, ref_state = recurrent(**x, initial_state=None, output_final_state=True)  # type: ignore[operator]
        ref_c, ref_c_state = chunked(**x, chunk_size=8, output_final_state=True)  # type: ignore[operator]
    assert torch.allclose(ref, ref_c, **TOL) and torch.allclose(ref_state, ref_c_state, **TOL)
    q, k, v, g, beta = ours(x)
    out, state = delta_rule_recurrent(q, k, v, g, beta)
    assert torch.allclose(out.transpose(1, 2), ref, **TOL) and torch.allclose(state, ref_state, **TOL)
    for chunk in (1, 5, 8, 64):
        out_c, state_c = delta_rule_chunked(q, k, v, g, beta, chunk_size=chunk)
        assert torch.allclose(out_c.transpose(1, 2), ref, **TOL), chunk
        assert torch.allclose(state_c, ref_state, **TOL), chunk


@pytest.mark.parametrize("per_channel", [False, True], ids=["Gated DeltaNet", "KDA"])
def test_a_state_carried_over_continues_the_sequence(per_channel: bool) -> None:
    """Decoding: the state after the first tokens, fed back, gives the rest of the full pass (both forms)."""
    q, k, v, g, beta = ours(inputs(per_channel, seed=1))
    full, final = delta_rule_recurrent(q, k, v, g, beta)
    cut = 9
    head, state = delta_rule_chunked(q[:, :, :cut], k[:, :, :cut], v[:, :, :cut], g[:, :, :cut], beta[:, :, :cut],
                                     chunk_size=4)
    for step in (delta_rule_recurrent, delta_rule_chunked):
        tail, end = step(q[:, :, cut:], k[:, :, cut:], v[:, :, cut:], g[:, :, cut:], beta[:, :, cut:], state=state)
        assert torch.allclose(torch.cat([head, tail], dim=2), full, **TOL) and torch.allclose(end, final, **TOL)


def no_erase(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """The recurrence with the delta rule's erase term left out: S <- decay S + beta k v^T (gated linear attention)."""
    S = torch.zeros(*q.shape[:2], q.shape[-1], v.shape[-1])
    decay = g.exp()[..., None, None] if g.dim() == 3 else g.exp()[..., None]
    out = []
    for t in range(q.shape[2]):
        S = S * decay[:, :, t] + beta[:, :, t, None, None] * k[:, :, t, :, None] * v[:, :, t, None, :]
        out.append(torch.einsum("bhkv,bhk->bhv", S, q[:, :, t] * q.shape[-1] ** -0.5))
    return torch.stack(out, dim=2)


@pytest.mark.parametrize("per_channel", [False, True], ids=["Gated DeltaNet", "KDA"])
def test_each_term_changes_the_answer(per_channel: bool) -> None:
    """The comparisons above can fail: without the gate, the erase term, or the per-channel decay the outputs move
    by far more than the tolerance."""
    q, k, v, g, beta = ours(inputs(per_channel))
    right, _ = delta_rule_recurrent(q, k, v, g, beta)
    wrong = {
        "no gate": delta_rule_recurrent(q, k, v, torch.zeros_like(g), beta)[0],
        "no erase": no_erase(q, k, v, g, beta),
    }
    if per_channel:
        wrong["one gate per head"] = delta_rule_recurrent(q, k, v, g.mean(dim=-1), beta)[0]
    for name, out in wrong.items():
        assert (out - right).abs().max() > 100 * TOL["atol"], name


def test_bad_inputs_are_refused_with_the_values() -> None:
    q, k, v, g, beta = ours(inputs(False, Hk=4, T=5))
    with pytest.raises(ValueError, match=r"g is the log of the state's decay.*at most 0"):
        delta_rule_recurrent(q, k, v, -g, beta)
    with pytest.raises(ValueError, match=r"beta is the write strength: it must lie in \[0, 2\]"):
        delta_rule_chunked(q, k, v, g, beta + 2)
    with pytest.raises(ValueError, match=r"g must be \(2, 4, 5\) \(one gate per head"):
        delta_rule_recurrent(q, k, v, g[..., None].expand(2, 4, 5, 3), beta)
    with pytest.raises(ValueError, match=r"v must be \(B, H, T, Dv\) = \(2, 4, 5, Dv\)"):
        delta_rule_recurrent(q, k, v[:, :, :3], g, beta)
    with pytest.raises(ValueError, match=r"q and k must both be \(B, H, T, Dk\)"):
        delta_rule_recurrent(q, k[..., :4], v, g, beta)
    with pytest.raises(ValueError, match=r"state must be \(B, H, Dk, Dv\) = \(2, 4, 8, 6\)"):
        delta_rule_recurrent(q, k, v, g, beta, state=torch.zeros(2, 4, 6, 8))
    with pytest.raises(ValueError, match=r"chunk_size must be at least 1 \(tokens per chunk"):
        delta_rule_chunked(q, k, v, g, beta, chunk_size=0)
    with pytest.raises(TypeError, match=r"chunk_size must be an int; got 2.0 of type float"):
        delta_rule_chunked(q, k, v, g, beta, chunk_size=2.0)
    np = pytest.importorskip("numpy")  # an int from numpy counts as an int, as everywhere in the package
    torch.testing.assert_close(delta_rule_chunked(q, k, v, g, beta, chunk_size=np.int64(2)),
                               delta_rule_chunked(q, k, v, g, beta, chunk_size=2))
    with pytest.raises(ValueError, match="must be finite"):
        delta_rule_recurrent(q, k, v, g.masked_fill(g < -0.3, float("-inf")), beta)


def test_the_output_keeps_the_values_dtype() -> None:
    q, k, v, g, beta = (t.to(torch.bfloat16) for t in ours(inputs(False, Hk=4, T=7)))
    for fn in (delta_rule_recurrent, delta_rule_chunked):
        out, state = fn(q, k, v, g, beta)
        assert out.dtype == torch.bfloat16 and state.dtype == torch.float32
