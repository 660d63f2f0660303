"""Today's mechanisms, each against the attention module of a model that ships it, and the kernels against a reference.

For each mechanism an oracle test builds the pinned ``transformers``' own attention module for a model family
that ships it (a tiny random config, eager attention), copies its weights into a
:class:`lessons_src.layer.MultiHeadAttention` given the matching pieces, and compares outputs and gradients.
Every weight is drawn at random, the norms' weights too (Gemma's ``1 + w`` norms start at ``w = 0``, where a
moved norm would go unseen), and the cap is small enough to change the scores, so that each test fails
when its mechanism is removed or moved (the changes that were tried, and the failures, are listed in the
closing notes of issue 48). RoPE angles come from :func:`lessons_src.rope.rope_cos_sin` for both sides:
the frequencies are not under test, where the rotation sits is.

Then the kernels: ``softcap`` and ``sinks`` in every implementation of :func:`attention` against an fp64
reference written from the definition, forward and backward, on drawn shapes, heads and masks.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lessons_src.flash import tiled_attention_function
from lessons_src.functional import ATTENTION_FUNCTIONS, attention
from lessons_src.layer import MultiHeadAttention
from lessons_src.masks import causal, causal_mask, same_chunk, sliding_window
from lessons_src.mechanisms import (
    ElementwiseGate,
    HeadwiseGate,
    PerHeadRMSNorm,
    ProjectionRMSNorm,
    Rotary,
    ValueRMSNorm,
    WeightlessRMSNorm,
)
from lessons_src.rope import rope_cos_sin
from lessons_src.score_mods import Sinks, SoftCap, soft_cap

transformers = pytest.importorskip("transformers")

B, T, D, H, K = 2, 6, 32, 4, 2
E = D // H
TOL32 = {"atol": 1e-5, "rtol": 1e-5}
TOL64 = {"atol": 1e-10, "rtol": 1e-9}


def _config(cls: type, **extra: object) -> object:
    cfg = cls(hidden_size=D, num_attention_heads=H, num_key_value_heads=K, head_dim=E, num_hidden_layers=1,
              intermediate_size=16, vocab_size=16, **extra)
    cfg._attn_implementation = "eager"
    return cfg


def _randomise(module: torch.nn.Module, seed: int) -> None:
    """Every parameter drawn: projections at ``1/sqrt(D)`` (scores of order 1), vectors (norm weights, sinks,
    biases) at 0.5 around their start, so a ``1 + w`` norm's ``w`` is not zero."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            std = D**-0.5 if p.ndim == 2 else 0.5
            p.copy_(p + torch.randn(p.shape, generator=g, dtype=p.dtype) * std)


def _copy_projections(ours: MultiHeadAttention, ref: torch.nn.Module, w_q: torch.Tensor | None = None) -> None:
    with torch.no_grad():
        w_q = ref.q_proj.weight if w_q is None else w_q
        ours.qkv_proj.weight.copy_(torch.cat([w_q, ref.k_proj.weight, ref.v_proj.weight]))
        if ours.qkv_proj.bias is not None:
            ours.qkv_proj.bias.copy_(torch.cat([ref.q_proj.bias, ref.k_proj.bias, ref.v_proj.bias]))
        ours.out_proj.load_state_dict(ref.o_proj.state_dict())


def _inputs(dtype: torch.dtype, rotary: int | None) -> tuple[torch.Tensor, torch.Tensor, tuple | None]:
    """``x``, the additive causal mask HF's eager path takes, and RoPE's ``(cos, sin)`` as HF takes them."""
    x = torch.randn(B, T, D, generator=torch.Generator().manual_seed(1), dtype=dtype)
    mask = torch.zeros(B, 1, T, T, dtype=dtype).masked_fill(~causal_mask(T), float("-inf"))
    if rotary is None:  # no rotation: cos = 1, sin = 0
        return x, mask, (torch.ones(B, T, E, dtype=dtype), torch.zeros(B, T, E, dtype=dtype))
    cos, sin = rope_cos_sin(torch.arange(T), rotary, dtype=dtype)  # (T, R)
    return x, mask, (cos.expand(B, T, rotary), sin.expand(B, T, rotary))


def _compare(ours: MultiHeadAttention, ref: torch.nn.Module, x: torch.Tensor, call_ref, pairs, tol,
             window: int | None = None) -> None:
    """Outputs and the gradients of ``x`` and of each ``(our parameter, its parameter)`` pair."""
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    got, want = ours(xa, is_causal=True, attn_mask=None if window is None else sliding_window(window)), call_ref(xb)
    torch.testing.assert_close(got, want, **tol)
    upstream = torch.randn(got.shape, generator=torch.Generator().manual_seed(2), dtype=got.dtype)
    mine = torch.autograd.grad((got * upstream).sum(), [xa, *(a for a, _ in pairs)])
    theirs = torch.autograd.grad((want * upstream).sum(), [xb, *(b for _, b in pairs)])
    for i, (a, b) in enumerate(zip(mine, theirs, strict=True)):
        torch.testing.assert_close(a, b, **tol, msg=lambda s, i=i: f"gradient {i} (0: x, then the pieces'): {s}")


# ---------------------------------------------------------------- QK-norm with a weight (Qwen3, Gemma 3, OLMo 3)


def _norm_oracle(ref: torch.nn.Module, norm: torch.nn.Module) -> None:
    """``ref``'s q_norm and k_norm against ``norm``, with RoPE: outputs, gradients of x and of the weights."""
    _randomise(ref, 0)
    ours = MultiHeadAttention(D, H, num_kv_heads=K, qk_norm=norm, rope=Rotary(E))
    _copy_projections(ours, ref)
    with torch.no_grad():
        norm.q_weight.copy_(ref.q_norm.weight)
        norm.k_weight.copy_(ref.k_norm.weight)
    x, mask, pe = _inputs(torch.float32, rotary=E)
    pairs = [(norm.q_weight, ref.q_norm.weight), (norm.k_weight, ref.k_norm.weight)]
    _compare(ours, ref, x, lambda x: ref(x, position_embeddings=pe, attention_mask=mask)[0], pairs, TOL32)


def test_per_head_rms_norm_is_qwen3s() -> None:
    """Qwen3: RMSNorm of each head's q and k with a weight ``w`` (``offset=0``), before RoPE."""
    from transformers.models.qwen3.modeling_qwen3 import Qwen3Attention

    ref = Qwen3Attention(_config(transformers.Qwen3Config, rms_norm_eps=1e-6), layer_idx=0)
    _norm_oracle(ref, PerHeadRMSNorm(E, eps=1e-6))


def test_per_head_rms_norm_is_gemma3s() -> None:
    """Gemma 3: the same norm with the multiplier ``1 + w`` (``offset=1``); its scale is ``query_pre_attn_scalar``."""
    from transformers.models.gemma3.modeling_gemma3 import Gemma3Attention

    cfg = _config(transformers.Gemma3TextConfig, rms_norm_eps=1e-6, query_pre_attn_scalar=E)
    _norm_oracle(Gemma3Attention(cfg, layer_idx=0), PerHeadRMSNorm(E, eps=1e-6, offset=1.0))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_per_head_rms_norm_in_half_precision_is_gemma3s_to_the_bit(dtype: torch.dtype) -> None:
    """Gemma 3 forms ``1 + w`` in float32; formed in half precision it rounds, and about a quarter of the
    outputs came out one unit in the last place apart."""
    from transformers.models.gemma3.modeling_gemma3 import Gemma3RMSNorm

    g = torch.Generator().manual_seed(0)
    ref = Gemma3RMSNorm(16, eps=1e-6).to(dtype)
    ours = PerHeadRMSNorm(16, eps=1e-6, offset=1.0).to(dtype)
    with torch.no_grad():
        ref.weight.copy_(torch.randn(16, generator=g) * 0.5)
        ours.q_weight.copy_(ref.weight)
        ours.k_weight.copy_(-ref.weight)
        ref_k = Gemma3RMSNorm(16, eps=1e-6).to(dtype)
        ref_k.weight.copy_(-ref.weight)
    x = torch.randn(2, 4, 64, 16, generator=g).to(dtype)
    q, k = ours(x, x)
    assert torch.equal(q, ref(x)) and torch.equal(k, ref_k(x))


def test_projection_rms_norm_is_olmo3s() -> None:
    """OLMo 3 (as OLMo 2): RMSNorm over the whole query and key projections, before they split into heads."""
    from transformers.models.olmo3.modeling_olmo3 import Olmo3Attention

    ref = Olmo3Attention(_config(transformers.Olmo3Config, rms_norm_eps=1e-6), layer_idx=0)
    _norm_oracle(ref, ProjectionRMSNorm(H, K, E, eps=1e-6))


# --------------------------------------------------------------------------- weightless norm after RoPE (Llama 4)


def test_weightless_rms_norm_is_llama4s() -> None:
    """Llama 4, a RoPE layer: a weightless norm after RoPE (ours before it: a rotation keeps lengths).

    Llama 4 rotates interleaved pairs ``(2i, 2i + 1)``, :mod:`lessons_src.rope` the halves ``(i, i + E/2)``:
    the same rotation once each head's query and key features are reordered, which the copy does to the rows
    of ``W_Q`` and ``W_K`` (scores are dot products, unchanged by reordering both).
    """
    from transformers.models.llama4.modeling_llama4 import Llama4TextAttention

    cfg = _config(transformers.Llama4TextConfig, rms_norm_eps=1e-6, use_qk_norm=True, no_rope_layers=[1],
                  attn_temperature_tuning=False)
    ref = Llama4TextAttention(cfg, layer_idx=0)
    assert ref.use_rope and hasattr(ref, "qk_norm")
    _randomise(ref, 0)
    ours = MultiHeadAttention(D, H, num_kv_heads=K, qk_norm=WeightlessRMSNorm(eps=1e-6), rope=Rotary(E))
    halves = torch.cat([torch.arange(0, E, 2), torch.arange(1, E, 2)])  # interleaved -> rotate-half order
    rows = lambda w, n: w.view(n, E, D)[:, halves].reshape(n * E, D)  # noqa: E731
    _copy_projections(ours, ref)
    with torch.no_grad():
        ours.qkv_proj.weight[: H * E].copy_(rows(ref.q_proj.weight, H))
        ours.qkv_proj.weight[H * E : (H + K) * E].copy_(rows(ref.k_proj.weight, K))
    x, mask, _ = _inputs(torch.float32, rotary=None)
    cos, sin = rope_cos_sin(torch.arange(T), E)
    freqs_cis = torch.polar(torch.ones(T, E // 2), torch.atan2(sin[:, : E // 2], cos[:, : E // 2]))[None]  # (1, T, E/2)
    _compare(ours, ref, x, lambda x: ref(x, position_embeddings=freqs_cis, attention_mask=mask)[0], [], TOL32)


# --------------------------------------------------------------------------- soft-cap (Gemma 2)


@pytest.mark.parametrize("impl", ["eager", "tiled"])
def test_soft_cap_is_gemma2s(impl: str) -> None:
    """Gemma 2: ``c tanh(s / c)`` on the scaled scores, before the mask; a cap of 0.5 changes every score here."""
    from transformers.models.gemma2.modeling_gemma2 import Gemma2Attention

    cap = 0.5
    cfg = _config(transformers.Gemma2Config, query_pre_attn_scalar=E, attn_logit_softcapping=cap)
    ref = Gemma2Attention(cfg, layer_idx=0)  # the mask is ours: no sliding window at T = 6
    _randomise(ref, 0)
    ours = MultiHeadAttention(D, H, num_kv_heads=K, softcap=cap, implementation=impl, rope=Rotary(E))
    _copy_projections(ours, ref)
    x, mask, pe = _inputs(torch.float32, rotary=E)
    _compare(ours, ref, x, lambda x: ref(x, position_embeddings=pe, attention_mask=mask)[0], [], TOL32)


def test_query_pre_attn_scalar_is_gemma2s() -> None:
    """Gemma 2 27B scales by ``query_pre_attn_scalar ** -0.5`` (144, where ``head_dim`` is 128): the layer's
    ``scale=``. Here the scalar is ``3 E``, with Gemma 2's own cap of 50; the default ``1/sqrt(E)`` is far off."""
    from transformers.models.gemma2.modeling_gemma2 import Gemma2Attention

    cfg = _config(transformers.Gemma2Config, query_pre_attn_scalar=3 * E)
    ref = Gemma2Attention(cfg, layer_idx=0)
    _randomise(ref, 0)
    layers = [MultiHeadAttention(D, H, num_kv_heads=K, softcap=cfg.attn_logit_softcapping, implementation="eager",
                                 rope=Rotary(E), scale=s) for s in ((3 * E) ** -0.5, None)]
    for layer in layers:
        _copy_projections(layer, ref)
    x, mask, pe = _inputs(torch.float32, rotary=E)
    _compare(layers[0], ref, x, lambda x: ref(x, position_embeddings=pe, attention_mask=mask)[0], [], TOL32)
    with torch.no_grad():
        want = ref(x, position_embeddings=pe, attention_mask=mask)[0]
        assert (layers[1](x, is_causal=True) - want).abs().max() > 0.01  # the default scale, 1/sqrt(E)


# --------------------------------------------------------------------------- learned sinks (gpt-oss)


@pytest.mark.parametrize("impl", ["sdpa", "eager", "tiled"])
def test_sinks_are_gpt_oss(impl: str) -> None:
    """gpt-oss: a learned logit per head joins the softmax and takes no value; in float64, every implementation."""
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssAttention

    cfg = _config(transformers.GptOssConfig, attention_bias=True)
    ref = GptOssAttention(cfg, layer_idx=0).double()
    with torch.no_grad():
        ref.sinks.zero_()  # left uninitialised by the module (torch.empty)
    _randomise(ref, 0)
    ours = MultiHeadAttention(D, H, num_kv_heads=K, bias=True, sinks=True, implementation=impl,
                              rope=Rotary(E)).double()
    _copy_projections(ours, ref)
    with torch.no_grad():
        ours.sinks.copy_(ref.sinks)
    x, mask, (cos, sin) = _inputs(torch.float64, rotary=E)
    pe = (cos[..., : E // 2], sin[..., : E // 2])  # gpt-oss takes one angle per pair (i, i + E/2)
    pairs = [(ours.sinks, ref.sinks)]
    _compare(ours, ref, x, lambda x: ref(x, position_embeddings=pe, attention_mask=mask)[0], pairs, TOL64)


# --------------------------------------------------------------------------- whole layers, read line by line (issue 78)


def _windowed(window: int | None) -> torch.Tensor:
    """The additive mask HF's eager path takes: causal, and the last ``window`` keys if given."""
    return torch.zeros(B, 1, T, T).masked_fill(~causal_mask(T, window=window), float("-inf"))


@pytest.mark.parametrize("left_out", [None, "sinks", "window"])
@pytest.mark.parametrize("layer_idx", [0, 1])  # a "sliding_attention" layer, then a "full_attention" one
def test_the_layer_is_gpt_oss_on_each_layer_type(layer_idx: int, left_out: str | None) -> None:
    """gpt-oss's whole attention (biases, YaRN RoPE, a window on its sliding layers, sinks) is the course's layer
    given those pieces; with the sinks or the window left out it is not (on the full layer the window is none)."""
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssAttention, GptOssRotaryEmbedding

    from lessons_src.rope import yarn_scaling

    cfg = transformers.GptOssConfig(hidden_size=D, num_attention_heads=H, num_key_value_heads=K, head_dim=E,
                                    num_hidden_layers=2, intermediate_size=16, vocab_size=16, attention_bias=True,
                                    sliding_window=3)
    cfg._attn_implementation = "eager"
    ref = GptOssAttention(cfg, layer_idx=layer_idx).eval()
    with torch.no_grad():
        ref.sinks.zero_()  # left uninitialised by the module (torch.empty)
    _randomise(ref, 0)
    r = cfg.rope_parameters
    yarn = yarn_scaling(E, base=r["rope_theta"], factor=r["factor"], beta_fast=r["beta_fast"], beta_slow=r["beta_slow"],
                        original_max_positions=r["original_max_position_embeddings"], truncate=r["truncate"])
    ours = MultiHeadAttention(D, H, num_kv_heads=K, bias=True, sinks=left_out != "sinks",
                              rope=Rotary(E, base=r["rope_theta"], scaling=yarn))
    _copy_projections(ours, ref)
    if ours.sinks is not None:
        with torch.no_grad():
            ours.sinks.copy_(ref.sinks)
    window = cfg.sliding_window if cfg.layer_types[layer_idx] == "sliding_attention" else None
    x = torch.randn(B, T, D, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = ref(x, position_embeddings=GptOssRotaryEmbedding(cfg)(x, torch.arange(T)[None]),
                   attention_mask=_windowed(window))[0]
        mine = None if window is None or left_out == "window" else sliding_window(window)
        got = ours(x, is_causal=True, attn_mask=mine)
    gap = (got - want).abs().max().item()
    if left_out is None or (left_out == "window" and window is None):
        torch.testing.assert_close(got, want, **TOL32)
    else:
        assert gap > 1e-2, f"{left_out} left out, layer {layer_idx}: still gpt-oss (max |diff| {gap:.1e})"


@pytest.mark.parametrize("change", [None, "norm after rope", "no offset", "default scale"])
@pytest.mark.parametrize("layer_idx", [0, 5])  # a local layer (base 10k), then the global one (base 1M)
def test_the_layer_is_gemma3_on_each_layer_type(layer_idx: int, change: str | None) -> None:
    """Gemma 3's whole attention (QK-norm with ``1 + w`` before RoPE, ``query_pre_attn_scalar``'s scale, a window
    and a RoPE base per layer type) is the course's layer given those pieces; with the norm moved after RoPE, its
    ``1 +`` dropped, or the default scale, it is not."""
    from transformers.models.gemma3.modeling_gemma3 import Gemma3Attention, Gemma3RotaryEmbedding

    cfg = transformers.Gemma3TextConfig(hidden_size=D, num_attention_heads=H, num_key_value_heads=K, head_dim=E,
                                        num_hidden_layers=6, intermediate_size=16, vocab_size=16, rms_norm_eps=1e-6,
                                        sliding_window=3)
    cfg._attn_implementation = "eager"
    ref = Gemma3Attention(cfg, layer_idx=layer_idx).eval()
    _randomise(ref, 0)
    kind = cfg.layer_types[layer_idx]
    norm = PerHeadRMSNorm(E, eps=1e-6, offset=0.0 if change == "no offset" else 1.0)
    scale = None if change == "default scale" else cfg.query_pre_attn_scalar**-0.5
    ours = MultiHeadAttention(D, H, num_kv_heads=K, qk_norm=norm, scale=scale,
                              rope=Rotary(E, base=cfg.rope_parameters[kind]["rope_theta"]))
    _copy_projections(ours, ref)
    with torch.no_grad():
        norm.q_weight.copy_(ref.q_norm.weight)
        norm.k_weight.copy_(ref.k_norm.weight)
    window = cfg.sliding_window if kind == "sliding_attention" else None
    x = torch.randn(B, T, D, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = ref(x, position_embeddings=Gemma3RotaryEmbedding(cfg)(x, torch.arange(T)[None], kind),
                   attention_mask=_windowed(window))[0]
        if change == "norm after rope":
            q, k, v = ours.project_qkv(x)
            q, k = ours.qk_norm(*ours.rope(q, k, start=0))
            out = attention(q, k, v, attn_mask=None if window is None else sliding_window(window), is_causal=True,
                            scale=scale).output
            got = ours.out_proj(out.transpose(1, 2).reshape(B, T, D))
        else:
            got = ours(x, is_causal=True, attn_mask=None if window is None else sliding_window(window))
    if change is None:
        torch.testing.assert_close(got, want, **TOL32)
    else:
        gap = (got - want).abs().max().item()
        assert gap > 1e-2, f"{change}, layer {layer_idx}: still Gemma 3 (max |diff| {gap:.1e})"


# --------------------------------------------------------------------------- output gate (Qwen3-Next)


def _qwen3_next_ours(ref: torch.nn.Module, rope: Rotary) -> tuple[MultiHeadAttention, PerHeadRMSNorm]:
    """Ours with a Qwen3-Next attention's weights: ``1 + w`` QK-norm, the given RoPE, the gate's rows from ``q_proj``
    (per head: E query rows, then E gate rows)."""
    norm, gate = PerHeadRMSNorm(E, eps=1e-6, offset=1.0), ElementwiseGate(D, H, E)
    ours = MultiHeadAttention(D, H, num_kv_heads=K, qk_norm=norm, rope=rope, gate=gate)
    w = ref.q_proj.weight.view(H, 2, E, D)  # type: ignore[operator]
    _copy_projections(ours, ref, w_q=w[:, 0].reshape(H * E, D))
    with torch.no_grad():
        gate.proj.weight.copy_(w[:, 1].reshape(H * E, D))
        norm.q_weight.copy_(ref.q_norm.weight)  # type: ignore[arg-type]
        norm.k_weight.copy_(ref.k_norm.weight)  # type: ignore[arg-type]
    return ours, norm


def test_elementwise_gate_is_qwen3_nexts() -> None:
    """Qwen3-Next: an elementwise sigmoid gate from the layer's input before ``W_O``, with ``1 + w`` QK-norm and
    RoPE on a quarter of each head; its gate's rows sit in ``q_proj``, after each head's query rows."""
    from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextAttention

    cfg = _config(transformers.Qwen3NextConfig, rms_norm_eps=1e-6, partial_rotary_factor=0.25)
    ref = Qwen3NextAttention(cfg, layer_idx=3)
    _randomise(ref, 0)
    R = E // 4
    ours, norm = _qwen3_next_ours(ref, Rotary(R))
    x, mask, pe = _inputs(torch.float32, rotary=R)
    pairs = [(norm.q_weight, ref.q_norm.weight)]
    _compare(ours, ref, x, lambda x: ref(x, position_embeddings=pe, attention_mask=mask)[0], pairs, TOL32)
    # the gate's gradient is the gate rows' part of q_proj's
    got, want = ours(x, is_causal=True), ref(x, position_embeddings=pe, attention_mask=mask)[0]
    (g_ours,) = torch.autograd.grad(got.square().sum(), ours.gate.proj.weight)
    (g_ref,) = torch.autograd.grad(want.square().sum(), ref.q_proj.weight)
    torch.testing.assert_close(g_ours, g_ref.view(H, 2, E, D)[:, 1].reshape(H * E, D), **TOL32)


def test_headwise_gate_is_the_papers() -> None:
    """Qiu et al.'s headwise gate (no pinned model ships it): head ``h``'s output times ``sigmoid(x w_h)``."""
    torch.manual_seed(0)
    gate = HeadwiseGate(D, H)
    layer = MultiHeadAttention(D, H, num_kv_heads=K, gate=gate)
    plain = MultiHeadAttention(D, H, num_kv_heads=K)
    plain.load_state_dict(layer.state_dict(), strict=False)
    x = torch.randn(B, T, D)
    q, k, v = plain.project_qkv(x)
    heads = attention(q, k, v, is_causal=True).output  # (B, H, T, E)
    g = torch.sigmoid(x @ gate.proj.weight.T)  # (B, T, H)
    want = plain.out_proj((heads * g.transpose(1, 2)[..., None]).transpose(1, 2).reshape(B, T, D))
    torch.testing.assert_close(layer(x, is_causal=True), want)


# --------------------------------------------------------------------------- the kernels, from the definition


def _reference(q, k, v, visible, softcap, sinks):
    """fp64 attention from the definition: scale, cap, hide, softmax with the sink column, drop it, values."""
    n_rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(n_rep, dim=1), v.repeat_interleave(n_rep, dim=1)
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, T, S)
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    s = s.masked_fill(~visible, float("-inf"))
    if sinks is None:
        rows = visible.any(-1, keepdim=True)  # a query that sees nothing: zeros
        w = torch.where(rows, s, 0.0).softmax(-1) * rows
    else:
        col = sinks.view(1, -1, 1, 1).expand(*s.shape[:3], 1)
        w = torch.cat([s, col], -1).softmax(-1)[..., :-1]
    return w @ v


@settings(max_examples=40, deadline=None)
@given(
    T_=st.integers(1, 4), S=st.integers(1, 5), H_K=st.sampled_from([(1, 1), (2, 2), (4, 2), (2, 1)]),
    kind=st.sampled_from(["none", "bool", "float"]), causal=st.booleans(),
    softcap=st.sampled_from([None, 0.3, 2.0]), sinks=st.booleans(), Ev=st.sampled_from([3, 4]),
    seed=st.integers(0, 2**16),
)
def test_every_implementation_caps_and_sinks_as_the_definition(T_, S, H_K, kind, causal, softcap, sinks, Ev, seed):
    """Ev = 4 = E takes SDPA's fused sink path on the CPU, Ev = 3 the extra key (the kernel needs Ev = E)."""
    Hq, Kv = H_K
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, Hq, T_, 4, generator=g, dtype=torch.float64) * 2  # scores large enough for the cap to bite
    k = torch.randn(2, Kv, S, 4, generator=g, dtype=torch.float64) * 2
    v = torch.randn(2, Kv, S, Ev, generator=g, dtype=torch.float64)
    s = torch.randn(Hq, generator=g, dtype=torch.float64) if sinks else None
    keep = torch.rand(T_, S, generator=g) > 0.3
    mask = {"none": None, "bool": keep, "float": torch.zeros(T_, S, dtype=torch.float64).masked_fill(~keep, -math.inf)}
    visible = (torch.ones(T_, S, dtype=torch.bool) if kind == "none" else keep).expand(2, Hq, T_, S)
    if causal:
        visible = visible & (torch.arange(S)[None] <= torch.arange(T_)[:, None] + S - T_)
    up = torch.randn(2, Hq, T_, Ev, generator=g, dtype=torch.float64)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)] + ([s.clone().requires_grad_()] if sinks else [])
    want = _reference(*leaves[:3], visible, softcap, leaves[3] if sinks else None)
    want_grads = torch.autograd.grad((want * up).sum(), leaves)
    for impl in sorted(ATTENTION_FUNCTIONS):
        if impl == "sdpa" and softcap is not None:
            continue
        ins = [t.clone().requires_grad_() for t in (q, k, v)] + ([s.clone().requires_grad_()] if sinks else [])
        mods = ([] if softcap is None else [SoftCap(softcap)]) + ([Sinks(ins[3])] if sinks else [])
        out = attention(*ins[:3], attn_mask=mask[kind], is_causal=causal, implementation=impl, score_mods=mods).output
        torch.testing.assert_close(out, want, **TOL64, msg=lambda m, i=impl: f"{i}: {m}")
        for n, (a, b) in enumerate(zip(torch.autograd.grad((out * up).sum(), ins), want_grads, strict=True)):
            torch.testing.assert_close(a, b, **TOL64, msg=lambda m, i=impl, n=n: f"{i} grad {'qkvs'[n]}: {m}")


@pytest.mark.parametrize("impl", [*sorted(ATTENTION_FUNCTIONS), "sdpa-as-a-key"])
def test_sink_gradients_pass_gradcheck(impl: str) -> None:
    """Queries, keys, values and sinks: finite differences agree, GQA, causal, with a query that sees nothing
    (a rescaling by ``sigmoid(lse - sink)`` on a log-sum-exp without gradient gets the queries' wrong).
    ``"sdpa"`` takes the fused CPU path here; ``"sdpa-as-a-key"`` is the path for other devices."""
    from unittest import mock

    import lessons_src.score_mods as sm

    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 2, 3, 2, generator=g, dtype=torch.float64, requires_grad=True)
    k, v = (torch.randn(1, 1, 4, 2, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(2))
    s = torch.randn(2, generator=g, dtype=torch.float64, requires_grad=True)
    keep = torch.tensor([[False] * 4, [True, False, True, True], [True] * 4])  # query 0 sees nothing

    def f(q, k, v, s):
        if impl == "sdpa-as-a-key":  # a float mask that needs a gradient: the CPU flash kernel cannot take it
            float_keep = torch.zeros(3, 4, dtype=q.dtype).masked_fill(~keep, float("-inf")).requires_grad_()
            with mock.patch.object(sm, "sink_flash_cpu", side_effect=AssertionError("took the CPU flash path")):
                return attention(q, k, v, attn_mask=float_keep, is_causal=True, implementation="sdpa",
                                 score_mods=Sinks(s)).output
        return attention(q, k, v, attn_mask=keep, is_causal=True, implementation=impl, score_mods=Sinks(s)).output

    assert torch.autograd.gradcheck(f, (q, k, v, s))
    assert (f(q, k, v, s)[:, :, 0] == 0).all()  # all its weight on the sink, whose value is zero


def test_tiled_caps_and_sinks_across_many_tiles() -> None:
    """Small tiles: the sink starts every query block's online softmax; the cap's derivative in every tile."""
    from lessons_src.functional import eager_attention
    from lessons_src.masks import prepare_mask

    g = torch.Generator().manual_seed(3)
    q = torch.randn(2, 4, 7, 4, generator=g, dtype=torch.float64, requires_grad=True)
    k, v = (torch.randn(2, 2, 9, 4, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(2))
    s = torch.randn(4, generator=g, dtype=torch.float64, requires_grad=True)
    prep = prepare_mask(sliding_window(4), is_causal=True, shape=(2, 4, 7, 9), dtype=q.dtype, device=q.device)
    got = tiled_attention_function(q, k, v, prep, scale=0.5, dropout_p=0.0, block_q=2, block_k=3,
                                   softcap=0.7, sinks=s).output
    want = eager_attention(q, k, v, prep, scale=0.5, dropout_p=0.0, softcap=0.7, sinks=s).output
    torch.testing.assert_close(got, want, **TOL64)
    for a, b in zip(torch.autograd.grad(got.sum(), (q, k, v, s)), torch.autograd.grad(want.sum(), (q, k, v, s)),
                    strict=True):
        torch.testing.assert_close(a, b, **TOL64)


@pytest.mark.parametrize("impl", ["eager", "tiled"])
def test_a_masked_key_never_comes_back_through_the_cap(impl: str) -> None:
    """A cap applied after the mask would turn ``-inf`` into ``-c``: the hidden key would get weight again."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, 3, 4, generator=g) for _ in range(3))
    keep = torch.tensor([[True, False, False], [True, True, False], [False, False, False]])  # last sees nothing
    out = attention(q, k, v, attn_mask=keep, implementation=impl, score_mods=SoftCap(0.1)).output
    want = _reference(q.double(), k.double(), v.double(), keep.expand(1, 1, 3, 3), 0.1, None)
    torch.testing.assert_close(out.double(), want, **TOL32)
    torch.testing.assert_close(out[0, 0, 0], v[0, 0, 0])  # only key 0 visible: its value exactly
    assert (out[0, 0, 2] == 0).all()
    assert soft_cap(torch.tensor(float("-inf")), 0.1) == -0.1  # why the order matters


def test_sdpa_refuses_a_cap_by_name() -> None:
    q = torch.randn(1, 1, 2, 4)
    with pytest.raises(ValueError, match=r"implementation='sdpa' cannot soft-cap .* softcap=50.0.*'eager'.*'tiled'"):
        attention(q, q, q, score_mods=SoftCap(50.0))
    with pytest.raises(ValueError, match=r"implementation='sdpa' cannot soft-cap the scores \(got softcap=50.0\)"):
        MultiHeadAttention(8, 2, softcap=50.0)


def test_mechanisms_decode_with_a_cache_as_the_full_pass() -> None:
    """RoPE positions follow the cache; the norm, sinks and gate act on each new token as on the whole prompt."""
    from lessons_src.kv_cache import KVCache

    torch.manual_seed(0)
    layer = MultiHeadAttention(D, H, num_kv_heads=K, qk_norm=PerHeadRMSNorm(E, offset=1.0), rope=Rotary(E),
                               gate=HeadwiseGate(D, H), sinks=True).eval()
    _randomise(layer, 5)
    x = torch.randn(1, T, D)
    cache = KVCache(1, K, E, max_len=T)
    with torch.no_grad():
        full = layer(x, is_causal=True)
        steps = [layer(x[:, :3], is_causal=True, cache=cache)] + [
            layer(x[:, t : t + 1], is_causal=True, cache=cache) for t in range(3, T)
        ]
    torch.testing.assert_close(torch.cat(steps, dim=1), full)


# --------------------------------------------------------------------------- positions: partial, scaled, NoPE, chunks


def test_partial_scaled_rope_is_qwen3_nexts() -> None:
    """Qwen3-Next rotates a quarter of each head, with YaRN frequencies here: its own rotary module's cosines and
    sines against :meth:`Rotary.partial` with :func:`yarn_scaling`; the other three quarters pass through."""
    from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextAttention, Qwen3NextRotaryEmbedding

    from lessons_src.rope import yarn_scaling

    rope = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 4,
            "partial_rotary_factor": 0.25}
    cfg = _config(transformers.Qwen3NextConfig, rms_norm_eps=1e-6, rope_parameters=rope, max_position_embeddings=16)
    ref = Qwen3NextAttention(cfg, layer_idx=3)
    _randomise(ref, 0)
    rotary = Rotary.partial(E, 0.25, scaling=yarn_scaling(E // 4, factor=4.0, original_max_positions=4))
    ours, _ = _qwen3_next_ours(ref, rotary)
    x, mask, _ = _inputs(torch.float32, rotary=None)
    pe = Qwen3NextRotaryEmbedding(cfg)(x, torch.arange(T)[None].expand(B, T))  # its own (cos, sin), (B, T, E/4)
    assert pe[0].shape[-1] == rotary.dim == E // 4
    _compare(ours, ref, x, lambda x: ref(x, position_embeddings=pe, attention_mask=mask)[0], [], TOL32)


def _llama4(no_rope: bool, **extra: object) -> tuple[torch.nn.Module, MultiHeadAttention]:
    """A Llama 4 text attention layer (RoPE with its weightless norm, or NoPE) and ours with its projections."""
    from transformers.models.llama4.modeling_llama4 import Llama4TextAttention

    cfg = _config(transformers.Llama4TextConfig, rms_norm_eps=1e-6, use_qk_norm=True, no_rope_layers=[int(not no_rope)],
                  **extra)
    ref = Llama4TextAttention(cfg, layer_idx=0)
    assert ref.use_rope != no_rope
    _randomise(ref, 0)
    return ref, cfg


def test_nope_temperature_is_llama4s() -> None:
    """Llama 4's NoPE layer: no RoPE, no QK-norm, each query times ``1 + a ln(1 + floor((p + 1) / f))``; with
    ``f = 2`` the scale changes at positions 1, 3 and 5 of the six."""
    from lessons_src.mechanisms import NoPETemperature

    ref, _ = _llama4(no_rope=True, attn_temperature_tuning=True, floor_scale=2, attn_scale=0.7)
    ours = MultiHeadAttention(D, H, num_kv_heads=K, rope=NoPETemperature(floor_scale=2, attn_scale=0.7))
    _copy_projections(ours, ref)
    x, mask, _ = _inputs(torch.float32, rotary=None)
    _compare(ours, ref, x, lambda x: ref(x, position_embeddings=None, attention_mask=mask)[0], [], TOL32)


def test_positions_per_row_are_qwen3s_on_a_left_padded_batch() -> None:
    """A left-padded batch through Qwen3's attention: its rotary module at ``position_ids`` counted from each row's
    first real token, its additive mask of the padding and the causal rule; ours with ``positions`` and
    ``key_mask``. The real tokens' outputs agree (a padding query sees no key: HF's eager softmax gives NaN there,
    ours 0); with the positions of a row that counts its padding, NoPE's temperature aside, RoPE alone agrees
    too: only distances reach the scores."""
    from transformers.models.qwen3.modeling_qwen3 import Qwen3Attention, Qwen3RotaryEmbedding

    from lessons_src.masks import key_mask

    cfg = _config(transformers.Qwen3Config, rms_norm_eps=1e-6)
    ref = Qwen3Attention(cfg, layer_idx=0)
    _randomise(ref, 3)
    norm = PerHeadRMSNorm(E, eps=1e-6)
    rope = Rotary(E, base=cfg.rope_parameters["rope_theta"])
    ours = MultiHeadAttention(D, H, num_kv_heads=K, qk_norm=norm, rope=rope)
    _copy_projections(ours, ref)
    with torch.no_grad():
        norm.q_weight.copy_(ref.q_norm.weight)
        norm.k_weight.copy_(ref.k_norm.weight)
    keep = torch.ones(B, T, dtype=torch.bool)
    keep[0, :2] = False  # row 0: two padding slots on the left
    position_ids = (keep.long().cumsum(-1) - 1).clamp(min=0)  # (B, T)
    x = torch.randn(B, T, D, generator=torch.Generator().manual_seed(1))
    visible = causal_mask(T) & keep[:, None, None, :]  # (B, 1, T, T)
    mask = torch.zeros(B, 1, T, T).masked_fill(~visible, float("-inf"))
    with torch.no_grad():
        want = ref(x, position_embeddings=Qwen3RotaryEmbedding(cfg)(x, position_ids), attention_mask=mask)[0]
        got = ours(x, is_causal=True, attn_mask=key_mask(keep), positions=position_ids)
        shifted = ours(x, is_causal=True, attn_mask=key_mask(keep))  # every row from slot 0
    torch.testing.assert_close(got[keep], want[keep], **TOL32)
    torch.testing.assert_close(shifted[keep], want[keep], **TOL32)
    assert torch.equal(got[~keep], torch.zeros_like(got[~keep]))  # a padding query sees no key: zero output


def test_rotary_at_any_positions_per_row_is_qwen3s() -> None:
    """Positions that are no shift of ``0 .. T-1`` (drawn per row and token): Qwen3's rotary module and
    ``apply_rotary_pos_emb`` at those ``position_ids``, and ours; a rotation at ``0 .. T-1`` is not it."""
    from transformers.models.qwen3.modeling_qwen3 import Qwen3RotaryEmbedding, apply_rotary_pos_emb

    cfg = _config(transformers.Qwen3Config)
    g = torch.Generator().manual_seed(4)
    q, k = torch.randn(B, H, T, E, generator=g), torch.randn(B, K, T, E, generator=g)
    position_ids = torch.randint(0, 40, (B, T), generator=g)
    cos, sin = Qwen3RotaryEmbedding(cfg)(q, position_ids)  # (B, T, E) each
    want = apply_rotary_pos_emb(q, k, cos, sin)
    got = Rotary(E, base=cfg.rope_parameters["rope_theta"])(q, k, positions=position_ids)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-5)  # HF's float32 angles up to 40 radians
    assert (Rotary(E)(q, k, start=0)[0] - want[0]).abs().max() > 0.1


@pytest.mark.parametrize("impl", ["sdpa", "eager", "tiled"])
def test_chunked_attention_is_llama4s(impl: str) -> None:
    """Llama 4's RoPE layers attend within chunks: ``transformers``' own chunked mask (chunks of 4 in 6 tokens)
    and its layer against ``chunk=4`` through the one mask preparation, in every implementation."""
    from transformers.masking_utils import create_chunked_causal_mask
    from transformers.models.llama4.modeling_llama4 import Llama4TextRotaryEmbedding

    ref, cfg = _llama4(no_rope=False, attention_chunk_size=4, attn_temperature_tuning=False,
                       rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    halves = torch.cat([torch.arange(0, E, 2), torch.arange(1, E, 2)])  # interleaved -> rotate-half order
    ours = MultiHeadAttention(D, H, num_kv_heads=K, qk_norm=WeightlessRMSNorm(eps=1e-6), rope=Rotary(E),
                              implementation=impl)
    _copy_projections(ours, ref)
    with torch.no_grad():
        ours.qkv_proj.weight[: H * E].copy_(ref.q_proj.weight.view(H, E, D)[:, halves].reshape(H * E, D))
        ours.qkv_proj.weight[H * E : (H + K) * E].copy_(ref.k_proj.weight.view(K, E, D)[:, halves].reshape(K * E, D))
    x, _, _ = _inputs(torch.float32, rotary=None)
    positions = torch.arange(T)[None].expand(B, T)
    mask = create_chunked_causal_mask(config=cfg, inputs_embeds=x, attention_mask=None, past_key_values=None,
                                      position_ids=positions)
    assert mask is not None
    freqs_cis = Llama4TextRotaryEmbedding(cfg)(x, positions)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    got, want = ours(xa, attn_mask=causal() & same_chunk(4)), ref(xb, position_embeddings=freqs_cis,
                                                                  attention_mask=mask)[0]
    torch.testing.assert_close(got, want, **TOL32)
    torch.testing.assert_close(*(torch.autograd.grad(o.square().sum(), i)[0] for o, i in ((got, xa), (want, xb))),
                               **TOL32)


def test_chunked_layer_decodes_with_a_full_cache_as_the_full_pass() -> None:
    """``chunk=`` with a :class:`KVCache` (every position kept): the chunks are counted from position 0, not from
    the cached length, so token-by-token and block decoding equal the full pass across chunk boundaries."""
    from lessons_src.kv_cache import KVCache
    from lessons_src.mechanisms import NoPETemperature

    torch.manual_seed(0)
    layer = MultiHeadAttention(D, H, num_kv_heads=K, rope=NoPETemperature(floor_scale=2, attn_scale=0.5)).eval()
    x = torch.randn(1, 11, D)
    cache = KVCache(1, K, E, max_len=11)
    with torch.no_grad():
        full = layer(x, attn_mask=causal() & same_chunk(3))
        steps, t = [], 0
        for n in (2, 1, 4, 1, 3):  # blocks inside a chunk, on its boundary and across two
            steps.append(layer(x[:, t : t + n], attn_mask=causal() & same_chunk(3), cache=cache, cache_position=t))
            t += n
    torch.testing.assert_close(torch.cat(steps, dim=1), full)


# ----------------------------------------------------------------- Gemma 4: value norm, scale 1, proportional RoPE

G4 = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "global_head_dim": 16}
G4_TYPES = ["sliding_attention", "full_attention"]


def gemma4_config(types: list[str], **extra: object) -> object:
    """A tiny Gemma 4 text config: ``E = 16`` on every layer (``MultiHeadAttention`` has ``E = D / H``, so
    ``global_head_dim`` is ``head_dim`` here), a window of 3, Gemma 4's own RoPE settings (10,000 on window
    layers; proportional, a quarter of the pairs, 1e6 on global ones), eager attention."""
    cfg = transformers.Gemma4TextConfig(**G4, num_hidden_layers=len(types), layer_types=types, sliding_window=3,
                                        intermediate_size=16, vocab_size=16, rms_norm_eps=1e-6, **extra)
    cfg._attn_implementation = "eager"
    return cfg


def gemma4_inputs(cfg, layer_type: str, dtype: torch.dtype, seed: int = 1) -> tuple[torch.Tensor, ...]:
    """``x`` (8 tokens, past the window), the additive mask from ``transformers``' own mask functions, and the
    ``(cos, sin)`` of Gemma 4's own rotary module for ``layer_type``."""
    from transformers.masking_utils import causal_mask_function, sliding_window_causal_mask_function
    from transformers.models.gemma4.modeling_gemma4 import Gemma4TextRotaryEmbedding

    T, D = 8, cfg.hidden_size
    x = torch.randn(B, T, D, generator=torch.Generator().manual_seed(seed), dtype=dtype)
    fn = sliding_window_causal_mask_function(cfg.sliding_window) if layer_type == "sliding_attention" else (
        causal_mask_function)
    keep = fn(torch.tensor(0), torch.tensor(0), torch.arange(T)[:, None], torch.arange(T)[None])  # (T, T)
    mask = torch.zeros(B, 1, T, T, dtype=dtype).masked_fill(~keep, float("-inf"))
    cos, sin = Gemma4TextRotaryEmbedding(cfg)(x, torch.arange(T)[None].expand(B, T), layer_type)  # (B, T, E)
    return x, mask, cos, sin


def gemma4_rope(layer_type: str, E: int) -> Rotary:
    """Gemma 4's positions: full RoPE on window layers, proportional RoPE (a quarter of the pairs) on global ones."""
    return Rotary(E) if layer_type == "sliding_attention" else Rotary.proportional(E, 0.25, base=1e6)


def _gemma4_ours(ref, layer_type: str, *, v_norm: bool = True, scale: float | None = 1.0) -> MultiHeadAttention:
    E = G4["head_dim"]
    ours = MultiHeadAttention(G4["hidden_size"], G4["num_attention_heads"], num_kv_heads=G4["num_key_value_heads"],
                              qk_norm=PerHeadRMSNorm(E, eps=1e-6), v_norm=ValueRMSNorm(eps=1e-6) if v_norm else None,
                              rope=gemma4_rope(layer_type, E), scale=scale, implementation="eager").double()
    _copy_projections(ours, ref)
    with torch.no_grad():
        ours.qk_norm.q_weight.copy_(ref.q_norm.weight)
        ours.qk_norm.k_weight.copy_(ref.k_norm.weight)
    return ours


@pytest.mark.parametrize("layer_type", G4_TYPES)
def test_gemma4_layer_is_gemma4s(layer_type: str) -> None:
    """Gemma 4's attention module (a window layer, and a global one with proportional RoPE) against ours with
    ``PerHeadRMSNorm`` (weight ``w``), ``ValueRMSNorm``, its RoPE and ``scale=1``: outputs and gradients, in
    float64 on both sides; the module's norms and rotary compute in float32 and cast back, so float32's
    tolerance. Every weight is drawn, the norms' too, and the same layer without the value norm, or with the
    scale back at ``1/sqrt(E)``, is far from the module's output."""
    from transformers.models.gemma4.modeling_gemma4 import Gemma4TextAttention

    cfg = gemma4_config(G4_TYPES)
    ref = Gemma4TextAttention(cfg, layer_idx=G4_TYPES.index(layer_type)).double()
    assert ref.scaling == 1.0 and ref.v_proj is not None and not hasattr(ref.v_norm, "weight")
    _randomise(ref, 0)
    ours = _gemma4_ours(ref, layer_type)
    x, mask, cos, sin = gemma4_inputs(cfg, layer_type, torch.float64)
    window = cfg.sliding_window if layer_type == "sliding_attention" else None
    pairs = [(ours.qk_norm.q_weight, ref.q_norm.weight), (ours.qk_norm.k_weight, ref.k_norm.weight),
             (ours.out_proj.weight, ref.o_proj.weight)]

    def call_ref(x: torch.Tensor) -> torch.Tensor:
        return ref(x, position_embeddings=(cos, sin), attention_mask=mask, shared_kv_states={})[0]

    _compare(ours, ref, x, call_ref, pairs, TOL32, window=window)
    with torch.no_grad():
        want = call_ref(x)
        for mutant in (_gemma4_ours(ref, layer_type, v_norm=False), _gemma4_ours(ref, layer_type, scale=None)):
            rule = None if window is None else sliding_window(window)
            assert (mutant(x, is_causal=True, attn_mask=rule) - want).abs().max() > 0.05, mutant.mechanisms


def test_proportional_rope_is_gemma4s() -> None:
    """The frequencies of Gemma 4's global layers (``transformers``' ``"proportional"`` rule) at Gemma 4's own
    sizes, a quarter of 512 features' pairs turning at ``1e6^(-2i/512)``, and at the test's 16."""
    from transformers.models.gemma4.modeling_gemma4 import Gemma4TextRotaryEmbedding

    from lessons_src.rope import proportional_scaling

    for head_dim in (512, 16):
        cfg = gemma4_config(G4_TYPES) if head_dim == 16 else transformers.Gemma4TextConfig(num_hidden_layers=6)
        want = Gemma4TextRotaryEmbedding(cfg).full_attention_inv_freq  # (E/2,), float32
        got = proportional_scaling(head_dim, 0.25, base=1e6).inv_freq
        assert want.shape == got.shape == (head_dim // 2,)
        torch.testing.assert_close(got.float(), want, atol=0.0, rtol=1e-6)
        assert int(got.count_nonzero()) == head_dim // 8
