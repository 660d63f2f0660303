"""lessons_src.mla: naive and absorbed MLA against the paper's equations, cached decoding, the fused kernel."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hf_weights import copy_deepseek_weights
from torch.profiler import ProfilerActivity, profile

from lessons_src import causal_mask
from lessons_src.functional import explicit_attention
from lessons_src.kv_cache import LatentCache, latent_bytes_per_token
from lessons_src.mla import MultiHeadLatentAttention
from lessons_src.rope import apply_rope, rope_cos_sin

FUSED_CPU = "aten::_scaled_dot_product_flash_attention_for_cpu"
MATH = "aten::_scaled_dot_product_attention_math"
CONFIGS = [
    {},  # E = 8, Ev = 8
    {"v_head_dim": 5, "q_latent_dim": 12},
    {"head_dim": 6, "v_head_dim": 14},  # Ev > E + R: no padding needed
]


def make(dtype: torch.dtype = torch.float64, **kw: int) -> MultiHeadLatentAttention:
    torch.manual_seed(0)
    return MultiHeadLatentAttention(32, 4, kv_latent_dim=16, rope_dim=4, **kw).to(dtype).eval()


def paper_reference(m: MultiHeadLatentAttention, x: torch.Tensor) -> torch.Tensor:
    """DeepSeek-V2 section 2.1, equations (9)-(19), written out per head with the explicit formula."""
    B, T, _ = x.shape
    H, E, R, C, Ev = m.num_heads, m.head_dim, m.rope_dim, m.kv_latent_dim, m.v_head_dim
    w_dkv, w_kr = m.kv_down_proj.weight.split([C, R])
    c_kv = x @ w_dkv.T  # (9)  (B, T, C)
    k_c = (c_kv @ m.k_up_proj.weight.T).view(B, T, H, E)  # (10)
    cos, sin = rope_cos_sin(torch.arange(T), R, dtype=x.dtype)
    k_r = apply_rope((x @ w_kr.T).unsqueeze(1), cos, sin)  # (14) (B, 1, T, R), one per token
    c_q = x if m.q_down_proj is None else x @ m.q_down_proj.weight.T  # (12)
    q_all = (c_q @ m.q_proj.weight.T).view(B, T, H, E + R)
    q_c, q_r = q_all[..., :E].transpose(1, 2), apply_rope(q_all[..., E:].transpose(1, 2), cos, sin)  # (13), (15)
    q = torch.cat([q_c, q_r], -1)  # (16)
    k = torch.cat([k_c.transpose(1, 2), k_r.expand(B, H, T, R)], -1)  # (17)
    v = (c_kv @ m.v_up_proj.weight.T).view(B, T, H, Ev).transpose(1, 2)  # (11)
    o, _ = explicit_attention(q, k, v, attn_mask=causal_mask(T), scale=1 / math.sqrt(E + R))  # (18)
    return o.transpose(1, 2).reshape(B, T, H * Ev) @ m.out_proj.weight.T  # (19)


@pytest.mark.parametrize("kw", CONFIGS)
@pytest.mark.parametrize("mode", ["naive", "absorbed"])
def test_matches_paper_equations(kw: dict[str, int], mode: str) -> None:
    m = make(**kw)
    x = torch.randn(2, 7, 32, dtype=torch.float64)
    torch.testing.assert_close(m(x, mode=mode), paper_reference(m, x))  # type: ignore[arg-type]


@pytest.mark.parametrize("kw", CONFIGS)
def test_absorbed_equals_naive(kw: dict[str, int]) -> None:
    m = make(**kw)
    x = torch.randn(3, 6, 32, dtype=torch.float64)
    torch.testing.assert_close(m(x, mode="absorbed"), m(x, mode="naive"))
    m32 = make(torch.float32, **kw)
    torch.testing.assert_close(m32(x.float(), mode="absorbed"), m32(x.float(), mode="naive"), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("kw", CONFIGS)
@pytest.mark.parametrize("mode", ["naive", "absorbed"])
@pytest.mark.parametrize("steps", [[3, 1, 1, 1, 1], [1] * 7, [2, 5]])
@torch.no_grad()
def test_cached_decoding_equals_full_pass(kw: dict[str, int], mode: str, steps: list[int]) -> None:
    m = make(**kw)
    x = torch.randn(2, sum(steps), 32, dtype=torch.float64)
    full = m(x, mode="naive")
    cache = LatentCache(2, 16, 4, max_len=10, dtype=torch.float64)
    outs, t = [], 0
    for n in steps:
        outs.append(m(x[:, t : t + n], cache=cache, mode=mode, cache_position=t))  # type: ignore[arg-type]
        t += n
    torch.testing.assert_close(torch.cat(outs, dim=1), full)
    assert cache.kv.shape == (2, 10, 16 + 4)  # only the latent and the RoPE key, per token
    assert cache.nbytes == 2 * sum(steps) * latent_bytes_per_token(16, 4, torch.float64)


def test_rope_scores_depend_only_on_relative_position() -> None:
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(8, generator=g, dtype=torch.float64), torch.randn(8, generator=g, dtype=torch.float64)
    cos, sin = rope_cos_sin(torch.arange(20), 8, dtype=torch.float64)
    rq, rk = apply_rope(q.expand(20, 8), cos, sin), apply_rope(k.expand(20, 8), cos, sin)
    torch.testing.assert_close(rq[5] @ rk[2], rq[15] @ rk[12])
    torch.testing.assert_close(rq[0] @ rk[0], q @ k)  # position 0: no rotation
    torch.testing.assert_close(rq.norm(dim=-1), q.norm().expand(20))  # rotations keep lengths


def test_fast_paths_run_the_fused_kernel() -> None:
    """Naive prefill (values padded to the key width) and absorbed decoding stay on the fused SDPA kernel."""
    m = MultiHeadLatentAttention(64, 4, kv_latent_dim=32, rope_dim=8).eval()
    cache = LatentCache(2, 32, 8, max_len=40)

    def ops(fn) -> set[str]:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            fn()
        return {e.name for e in prof.events() if "scaled_dot_product" in e.name}

    with torch.inference_mode():
        prefill = ops(lambda: m(torch.randn(2, 32, 64), cache=cache, mode="naive"))
        decode = ops(lambda: m(torch.randn(2, 1, 64), cache=cache, mode="absorbed"))
        q, k, v = torch.randn(2, 4, 32, 24), torch.randn(2, 4, 32, 24), torch.randn(2, 4, 32, 16)
        unpadded = ops(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    assert FUSED_CPU in prefill and MATH not in prefill, prefill
    assert FUSED_CPU in decode and MATH not in decode, decode
    assert MATH in unpadded  # why the padding is there: value width != key width falls to the math kernel


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="rope_dim must be even"):
        MultiHeadLatentAttention(32, 4, kv_latent_dim=16, rope_dim=3)
    with pytest.raises(ValueError, match=r"kv_latent_dim must be at least 1; got kv_latent_dim=0"):
        MultiHeadLatentAttention(32, 4, kv_latent_dim=0, rope_dim=4)
    with pytest.raises(ValueError, match="d_model=30 is not divisible by num_heads=4; pass head_dim"):
        MultiHeadLatentAttention(30, 4, kv_latent_dim=16, rope_dim=4)
    m = make()
    with pytest.raises(ValueError, match=r"x must be \(B, T, d_model=32\); got shape \(2, 5, 16\)"):
        m(torch.randn(2, 5, 16, dtype=torch.float64))
    with pytest.raises(ValueError, match="mode must be 'naive' or 'absorbed'; got 'fast'"):
        m(torch.randn(2, 5, 32, dtype=torch.float64), mode="fast")  # type: ignore[arg-type]
    bad_rope = r"k_rope of shape \(2, 5, 4\) does not fit .* \(B, T, R\) = \(2, 'T', 2\)"
    with torch.no_grad(), pytest.raises(ValueError, match=bad_rope):
            m(torch.randn(2, 5, 32, dtype=torch.float64), cache=LatentCache(2, 16, 2, 8, dtype=torch.float64))
    with pytest.raises(ValueError, match="RoPE rotates pairs"):
        rope_cos_sin(torch.arange(3), 5)


# ------------------------------------------------------- against Hugging Face's DeepSeek-V2 attention


def hf_pair(q_latent_dim: int | None):
    """HF DeepseekV2Attention and our module with the same weights.

    HF applies RMSNorms to the latents (not part of section 2.1; replaced by identities here) and pairs
    RoPE features as (2i, 2i+1) where we pair (i, i + R/2): the same rotation on permuted features, so
    the RoPE rows are permuted when copying (``lessons_src.rope.interleaved_to_rotate_half``). Scores are
    unchanged since queries and keys get the same permutation.
    """
    transformers = pytest.importorskip("transformers")
    from transformers.models.deepseek_v2 import modeling_deepseek_v2 as hf

    H, D, C, R, E, Ev = 4, 32, 16, 4, 8, 6
    cfg = transformers.DeepseekV2Config(
        hidden_size=D, num_attention_heads=H, num_key_value_heads=H, q_lora_rank=q_latent_dim,
        kv_lora_rank=C, qk_rope_head_dim=R, qk_nope_head_dim=E, v_head_dim=Ev, attention_bias=False,
    )
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    ref = hf.DeepseekV2Attention(cfg, layer_idx=0).eval()
    ref.kv_a_layernorm = torch.nn.Identity()
    if q_latent_dim is not None:
        ref.q_a_layernorm = torch.nn.Identity()
    sizes = {"head_dim": E, "v_head_dim": Ev, "q_latent_dim": q_latent_dim}
    ours = MultiHeadLatentAttention(D, H, kv_latent_dim=C, rope_dim=R, **sizes)
    copy_deepseek_weights(ref, ours)
    return ref, ours.eval(), hf.DeepseekV2RotaryEmbedding(cfg)


@pytest.mark.parametrize("q_latent_dim", [None, 12])
@pytest.mark.parametrize("mode", ["naive", "absorbed"])
def test_matches_hugging_face_deepseek_v2(q_latent_dim: int | None, mode: str) -> None:
    ref, ours, rotary = hf_pair(q_latent_dim)
    B, T = 2, 7
    x = torch.randn(B, T, 32)
    positions = torch.arange(T)[None].expand(B, T)
    mask = torch.zeros(B, 1, T, T).masked_fill(~causal_mask(T), float("-inf"))  # HF eager: additive
    with torch.no_grad():
        expected, _ = ref(x, attention_mask=mask, position_embeddings=rotary(x, positions))
        torch.testing.assert_close(ours(x, mode=mode), expected, atol=1e-5, rtol=1e-4)  # type: ignore[arg-type]
