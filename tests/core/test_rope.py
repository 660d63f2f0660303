"""RoPE's frequencies, plain and scaled, against ``transformers``' own initialisation; its two layouts and M-RoPE.

Llama 3.1's rule and YaRN each against ``ROPE_INIT_FUNCTIONS["llama3"]`` and ``["yarn"]`` of the pinned
``transformers`` on configs where every branch of the rule is taken (pairs kept, slowed and blended), then
against the model's rotary module (its cosines and sines, attention factor included) at positions beyond the
original context, where scaling matters. ``transformers`` computes in float32, this package in float64:
the frequencies agree to float32's rounding.

The two layouts: rotate-half (pairs ``(i, i + R/2)``) against Llama's ``apply_rotary_pos_emb``, interleaved
(pairs ``(2i, 2i + 1)``) against DeepSeek-V4's ``apply_rotary_pos_emb`` and DeepSeek-V3's
``apply_rotary_pos_emb_interleave``, and the one against the other through the whole layer with ``W_Q`` and
``W_K`` permuted by ``interleaved_to_rotate_half``. M-RoPE against Qwen3.5's rotary embedding (text positions, and
an image grid with the positions Qwen3.5 gives it), and Pixtral's 2-D RoPE as the same rule on two axes. Each
comparison also checks that the swapped layout or section order does not pass.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lessons_src import MultiHeadAttention
from lessons_src.mechanisms import Rotary
from lessons_src.rope import (
    RopeScaling,
    apply_rope,
    apply_rope_interleaved,
    interleaved_to_rotate_half,
    llama3_scaling,
    mrope_cos_sin,
    mrope_grid_positions,
    mrope_pair_axes,
    rope_cos_sin,
    rope_frequencies,
    rotate_half_to_interleaved,
    yarn_scaling,
)

transformers = pytest.importorskip("transformers")
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402

F32 = {"atol": 0.0, "rtol": 2e-6}  # float32 rounding of the reference


def _config(rope: dict[str, object], head_dim: int, cls: type | None = None, **extra: object) -> object:
    cls = cls or transformers.LlamaConfig
    return cls(hidden_size=4 * head_dim, num_attention_heads=4, head_dim=head_dim, rope_parameters=rope, **extra)


LLAMA3 = [  # (head_dim, base, factor, low_freq_factor, high_freq_factor, original context)
    (16, 10000.0, 8.0, 1.0, 4.0, 512),  # Llama 3.1's factors on a short context: kept, blended and slowed pairs
    (32, 500000.0, 8.0, 1.0, 4.0, 8192),  # Llama 3.1 itself, a narrower head
    (16, 10000.0, 2.0, 2.0, 8.0, 1024),
]


@pytest.mark.parametrize(("head_dim", "base", "factor", "low", "high", "context"), LLAMA3)
def test_llama3_scaling_is_transformers(head_dim, base, factor, low, high, context) -> None:
    cfg = _config({"rope_type": "llama3", "rope_theta": base, "factor": factor, "low_freq_factor": low,
                   "high_freq_factor": high, "original_max_position_embeddings": context}, head_dim)
    want, want_factor = ROPE_INIT_FUNCTIONS["llama3"](cfg, "cpu")
    got = llama3_scaling(head_dim, base=base, factor=factor, low_freq_factor=low, high_freq_factor=high,
                         original_max_positions=context)
    torch.testing.assert_close(got.inv_freq, want.double(), **F32)
    assert got.attention_factor == want_factor == 1.0
    ratio = rope_frequencies(head_dim, base=base) / got.inv_freq
    kinds = {"kept": bool((ratio == 1).any()), "slowed": bool((ratio == factor).any()),
             "blended": bool(((ratio > 1) & (ratio < factor)).any())}
    if head_dim == 16:  # the short contexts take every branch of the rule
        assert all(kinds.values()), kinds


YARN = [  # (head_dim, base, factor, original context, beta_fast, beta_slow, attention_factor, truncate)
    (16, 10000.0, 4.0, 512, 32.0, 1.0, None, True),  # Qwen3's factor 4
    (64, 150000.0, 32.0, 4096, 32.0, 1.0, None, True),  # gpt-oss's numbers, the ramp's ends rounded
    (64, 150000.0, 32.0, 4096, 32.0, 1.0, None, False),  # gpt-oss's settings: its config says truncate: false
    (16, 10000.0, 8.0, 256, 16.0, 2.0, 1.25, True),  # an explicit attention factor
    (8, 10000.0, 2.0, 64, 64.0, 32.0, None, True),  # the ramp's ends rounded onto one dim: width 0.001
]


@pytest.mark.parametrize(("head_dim", "base", "factor", "context", "fast", "slow", "attn", "truncate"), YARN)
def test_yarn_scaling_is_transformers(head_dim, base, factor, context, fast, slow, attn, truncate) -> None:
    rope = {"rope_type": "yarn", "rope_theta": base, "factor": factor, "original_max_position_embeddings": context,
            "beta_fast": fast, "beta_slow": slow, "truncate": truncate}
    if attn is not None:
        rope["attention_factor"] = attn
    cfg = _config(rope, head_dim, max_position_embeddings=int(context * factor))
    want, want_factor = ROPE_INIT_FUNCTIONS["yarn"](cfg, "cpu")
    got = yarn_scaling(head_dim, base=base, factor=factor, original_max_positions=context, beta_fast=fast,
                       beta_slow=slow, attention_factor=attn, truncate=truncate)
    torch.testing.assert_close(got.inv_freq, want.double(), **F32)
    assert math.isclose(got.attention_factor, want_factor, rel_tol=1e-12)
    assert got.attention_factor > 1.0  # the factor takes effect in every case here


@pytest.mark.parametrize(("context", "base", "every_pair"), [(1 << 36, 10000.0, "kept"), (1 << 12, 2.0, "kept"),
                                                          (1, 2.0, "slowed")])
def test_yarn_puts_every_pair_on_one_side_when_the_ramps_ends_cross(context: int, base: float,
                                                                    every_pair: str) -> None:
    """Every pair making more than beta_fast = 32 turns over the context keeps its frequency; every pair making fewer
    than beta_slow = 1 is slowed ``factor`` times. Clipped to the dims, the ramp's ends cross there, and
    transformers' ramp does the opposite of each (the docstring says which we follow)."""
    dim, factor = 8, 4.0
    plain = rope_frequencies(dim, base=base)
    turns = context * plain / (2 * math.pi)  # each pair's turns over the trained context
    assert bool((turns > 32).all()) if every_pair == "kept" else bool((turns < 1).all())
    got = yarn_scaling(dim, base=base, factor=factor, original_max_positions=context)
    torch.testing.assert_close(got.inv_freq, plain if every_pair == "kept" else plain / factor)
    rope = {"rope_type": "yarn", "rope_theta": base, "factor": factor, "original_max_position_embeddings": context}
    theirs, _ = ROPE_INIT_FUNCTIONS["yarn"](_config(rope, dim, max_position_embeddings=int(context * factor)), "cpu")
    torch.testing.assert_close(theirs.double(), plain / factor if every_pair == "kept" else plain, **F32)


@pytest.mark.parametrize("kind", ["llama3", "yarn"])
def test_scaled_cos_sin_are_the_rotary_modules(kind: str) -> None:
    """The model's rotary module at positions up to 4x the original context: cosines and sines, factor included."""
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    E, context = 16, 64
    if kind == "llama3":
        rope = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 4.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": context}
        ours = llama3_scaling(E, base=10000.0, factor=4.0, original_max_positions=context)
    else:
        rope = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": context}
        ours = yarn_scaling(E, base=10000.0, factor=4.0, original_max_positions=context)
    module = LlamaRotaryEmbedding(_config(rope, E, max_position_embeddings=4 * context))
    positions = torch.arange(0, 4 * context, 7)
    cos, sin = module(torch.zeros(1, dtype=torch.float32), positions[None])
    got_cos, got_sin = rope_cos_sin(positions, E, scaling=ours)
    torch.testing.assert_close(got_cos, cos[0], atol=2e-5, rtol=0)  # float32 angles up to 250 rad
    torch.testing.assert_close(got_sin, sin[0], atol=2e-5, rtol=0)
    plain_cos, _ = rope_cos_sin(positions, E)
    assert (got_cos - plain_cos).abs().max() > 0.1  # scaling changes the angles at these positions


@settings(max_examples=25, deadline=None)
@given(half=st.integers(1, 16), factor=st.floats(1.0, 64.0), context=st.integers(16, 1 << 16),
       base=st.sampled_from([10000.0, 500000.0, 1e6]))
def test_scaling_only_ever_slows_a_pair_and_factor_one_is_plain(half, factor, context, base) -> None:
    """Each rule keeps a pair or slows it at most ``factor`` times, never speeds it up; ``factor=1`` is plain RoPE."""
    dim = 2 * half
    plain = rope_frequencies(dim, base=base)
    for s in (llama3_scaling(dim, base=base, factor=factor, original_max_positions=context),
              yarn_scaling(dim, base=base, factor=factor, original_max_positions=context)):
        ratio = plain / s.inv_freq
        assert (ratio >= 1 - 1e-12).all() and (ratio <= factor * (1 + 1e-12)).all()
        assert (ratio[1:] >= ratio[:-1] - 1e-9).all()  # slower pairs are slowed as much or more
    for s in (llama3_scaling(dim, base=base, factor=1.0, original_max_positions=context),
              yarn_scaling(dim, base=base, factor=1.0, original_max_positions=context)):
        torch.testing.assert_close(s.inv_freq, plain)
        assert s.attention_factor == 1.0


def test_scaling_for_another_dim_is_refused() -> None:
    s = RopeScaling(rope_frequencies(8))
    with pytest.raises(ValueError, match=r"scaling has \(4,\) frequencies but dim=16 rotates 8 pairs"):
        rope_cos_sin(torch.arange(3), 16, scaling=s)


# --------------------------------------------------------------------------- the two layouts and the permutation


def _differs(a: torch.Tensor, b: torch.Tensor) -> bool:
    return bool((a - b).abs().max() > 0.01)


@pytest.mark.parametrize("R", [2, 4, 8, 16])
def test_interleaved_is_rotate_half_on_permuted_features_to_the_bit(R: int) -> None:
    """``apply_rope_interleaved(x)[..., p] == apply_rope(x[..., p])`` exactly in float64; ``p`` and its inverse."""
    p, back = interleaved_to_rotate_half(R), rotate_half_to_interleaved(R)
    assert torch.equal(p[back], torch.arange(R)) and torch.equal(back[p], torch.arange(R))
    x = torch.randn(2, 3, 7, R, generator=torch.Generator().manual_seed(R), dtype=torch.float64)  # (B, H, T, R)
    cos, sin = rope_cos_sin(torch.arange(3, 10), R, dtype=torch.float64)
    inter = apply_rope_interleaved(x, cos, sin)
    assert torch.equal(inter[..., p], apply_rope(x[..., p], cos, sin))
    assert torch.equal(inter, apply_rope(x[..., p], cos, sin)[..., back])
    if R > 2:  # with one pair the two layouts are the same
        assert _differs(inter, apply_rope(x, cos, sin))  # the layouts swapped: not the same rotation


def _permuted_rows(E: int, heads: int, offset: int) -> torch.Tensor:
    """Rows of ``heads`` stacked heads of ``E`` rows from ``offset``, each head's permuted to rotate-half."""
    p = interleaved_to_rotate_half(E)
    return torch.cat([offset + h * E + p for h in range(heads)])


@pytest.mark.parametrize(("H", "K"), [(4, 2), (2, 2)])
def test_interleaved_layer_is_rotate_half_layer_with_permuted_w_q_and_w_k(H: int, K: int) -> None:
    """A whole layer in float64: interleaved RoPE on a checkpoint's weights, rotate-half RoPE on its W_Q and W_K
    rows permuted head by head. Rotated queries and keys are the same numbers permuted (equal to the bit); the
    outputs differ only by the order of each score's sum."""
    E = 8
    D = H * E
    torch.manual_seed(0)
    inter = MultiHeadAttention(D, H, num_kv_heads=K, bias=True, rope=Rotary(E, layout="interleaved")).double()
    half = MultiHeadAttention(D, H, num_kv_heads=K, bias=True, rope=Rotary(E)).double()
    rows = torch.cat([_permuted_rows(E, H, 0), _permuted_rows(E, K, D), torch.arange(D + K * E, D + 2 * K * E)])
    with torch.no_grad():
        half.qkv_proj.weight.copy_(inter.qkv_proj.weight[rows])
        half.qkv_proj.bias.copy_(inter.qkv_proj.bias[rows])
        half.out_proj.load_state_dict(inter.out_proj.state_dict())
    x = torch.randn(2, 6, D, dtype=torch.float64)
    torch.testing.assert_close(half(x, is_causal=True), inter(x, is_causal=True), rtol=0, atol=1e-13)

    q, k = torch.randn(2, H, 6, E, dtype=torch.float64), torch.randn(2, K, 6, E, dtype=torch.float64)
    p = interleaved_to_rotate_half(E)
    qi, ki = inter.rope(q, k, start=3)
    qh, kh = half.rope(q[..., p], k[..., p], start=3)
    assert torch.equal(qi[..., p], qh) and torch.equal(ki[..., p], kh)

    with torch.no_grad():  # the layouts swapped: the permuted checkpoint run interleaved
        wrong = MultiHeadAttention(D, H, num_kv_heads=K, bias=True, rope=Rotary(E, layout="interleaved")).double()
        wrong.load_state_dict(half.state_dict())
        assert _differs(wrong(x, is_causal=True), inter(x, is_causal=True))


def test_each_layout_is_transformers() -> None:
    """Rotate-half: Llama's ``apply_rotary_pos_emb``; interleaved: DeepSeek-V4's ``apply_rotary_pos_emb`` (pairs kept
    in place) and DeepSeek-V3's ``apply_rotary_pos_emb_interleave`` (which returns them in rotate-half order), each
    with its model's own cosines and sines. Neither layout passes the other's comparison."""
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as v3
    from transformers.models.deepseek_v4 import modeling_deepseek_v4 as v4
    from transformers.models.llama import modeling_llama as llama

    R, T = 8, 9
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 3, T, R, generator=g), torch.randn(2, 1, T, R, generator=g)  # (B, H, T, R), (B, K, T, R)
    positions = torch.arange(T)[None].expand(2, T)  # (B, T)
    cos, sin = rope_cos_sin(torch.arange(T), R)
    half = (apply_rope(q, cos, sin), apply_rope(k, cos, sin))
    inter = (apply_rope_interleaved(q, cos, sin), apply_rope_interleaved(k, cos, sin))
    p = interleaved_to_rotate_half(R)

    hf_cos, hf_sin = llama.LlamaRotaryEmbedding(_config({"rope_type": "default", "rope_theta": 10000.0}, R))(
        q, positions)  # (B, T, R)
    theirs = llama.apply_rotary_pos_emb(q, k, hf_cos, hf_sin)
    cfg3 = transformers.DeepseekV3Config(hidden_size=32, num_attention_heads=4, qk_rope_head_dim=R, qk_nope_head_dim=4,
                                         v_head_dim=4, kv_lora_rank=8, q_lora_rank=8)
    v3_cos, v3_sin = v3.DeepseekV3RotaryEmbedding(cfg3)(q, positions)
    theirs_v3 = v3.apply_rotary_pos_emb_interleave(q, k, v3_cos, v3_sin)
    cfg4 = transformers.DeepseekV4Config(hidden_size=32, num_attention_heads=4, head_dim=R, qk_rope_head_dim=R)
    v4_cos, v4_sin = v4.DeepseekV4RotaryEmbedding(cfg4)(q, positions, layer_type="main")  # (B, T, R/2)
    theirs_v4 = tuple(v4.apply_rotary_pos_emb(t, v4_cos, v4_sin) for t in (q, k))
    for mine, other, hf, hf3, hf4 in zip(half, inter, theirs, theirs_v3, theirs_v4, strict=True):
        torch.testing.assert_close(mine, hf, atol=2e-6, rtol=0)
        torch.testing.assert_close(other, hf4, atol=2e-6, rtol=0)
        torch.testing.assert_close(other[..., p], hf3, atol=2e-6, rtol=0)
        assert _differs(other, hf) and _differs(mine, hf4) and _differs(other, hf3)  # swapped: refused


# --------------------------------------------------------------------------- M-RoPE: Qwen3.5, and Pixtral's 2-D RoPE


def _qwen35_rotary(R: int, sections: tuple[int, int, int]):
    from transformers.models.qwen3_5 import modeling_qwen3_5 as hf

    cfg = transformers.Qwen3_5TextConfig(
        hidden_size=64, num_attention_heads=2, num_key_value_heads=1, head_dim=4 * R,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
                         "mrope_section": list(sections), "mrope_interleaved": True},
    )
    return hf, hf.Qwen3_5TextRotaryEmbedding(cfg)


def test_mrope_for_text_is_1d_rope_and_qwen35s() -> None:
    """Text tokens: one position on every axis; M-RoPE is 1-D RoPE, and Qwen3.5's rotary embedding gives the same."""
    R, sections, T = 16, (3, 3, 2), 12
    _, rotary = _qwen35_rotary(R, sections)
    positions = torch.arange(5, 5 + T)
    cos, sin = mrope_cos_sin(positions.expand(3, T), R, sections=sections)
    plain = rope_cos_sin(positions, R)
    assert torch.equal(cos, plain[0]) and torch.equal(sin, plain[1])
    hf_cos, hf_sin = rotary(torch.zeros(1), positions[None])  # (1, T, R)
    torch.testing.assert_close(cos, hf_cos[0], atol=2e-6, rtol=0)
    torch.testing.assert_close(sin, hf_sin[0], atol=2e-6, rtol=0)


def test_mrope_on_an_image_grid_is_qwen35s() -> None:
    """Text, then an image of 1 x 3 x 4 tokens, then text, at the positions Qwen3.5's ``get_vision_position_ids``
    gives the image: the cosines and sines of Qwen3.5's rotary embedding. The sections in blocks (Qwen2-VL's order),
    or height and width swapped, do not pass."""
    R, sections = 16, (3, 3, 2)
    hf, rotary = _qwen35_rotary(R, sections)
    grid = (1, 3, 4)
    image = mrope_grid_positions(grid, start=4)  # (3, 12)
    theirs = hf.Qwen3_5Model.get_vision_position_ids(None, 4, torch.tensor(grid))  # its method reads no state
    assert torch.equal(image, theirs)
    after = int(image.max()) + 1
    positions = torch.cat([torch.arange(4).expand(3, 4), image, torch.arange(after, after + 3).expand(3, 3)], dim=1)
    hf_cos, hf_sin = rotary(torch.zeros(1), positions[:, None])  # positions (3, B=1, T)
    for order, rows in [("interleaved_sections", [0, 1, 2]), ("contiguous_sections", [0, 1, 2]),
                        ("interleaved_sections", [0, 2, 1])]:
        cos, sin = mrope_cos_sin(positions[rows], R, sections=sections, order=order)
        if (order, rows) == ("interleaved_sections", [0, 1, 2]):
            torch.testing.assert_close(cos, hf_cos[0], atol=2e-6, rtol=0)
            torch.testing.assert_close(sin, hf_sin[0], atol=2e-6, rtol=0)
        else:
            assert _differs(cos, hf_cos[0])  # another section order, or the axes swapped: refused


def test_pixtral_2d_rope_is_mrope_on_two_axes_with_its_pairs_reordered() -> None:
    """Pixtral's axial RoPE gives height the even frequencies and width the odd ones, each axis' pairs in a block:
    M-RoPE with interleaved sections ``(R/4, R/4)`` on (height, width), after Pixtral's pair order is sorted by
    frequency. Scores do not see the pair order (queries and keys are reordered alike)."""
    from transformers.models.pixtral import modeling_pixtral as hf

    R = 16
    cfg = transformers.PixtralVisionConfig(hidden_size=2 * R, num_attention_heads=2, head_dim=R,
                                           rope_parameters={"rope_type": "axial", "rope_theta": 10000.0})
    rows, cols = torch.meshgrid(torch.arange(3), torch.arange(4), indexing="ij")
    hw = torch.stack([rows.flatten(), cols.flatten()])  # (2, P): a 3 x 4 grid of patches
    hf_cos, _ = hf.PixtralVisionRotaryEmbedding(cfg)(torch.zeros(1), hw.T)  # (P, R)
    half = R // 2
    pair = torch.cat([torch.arange(0, half, 2), torch.arange(1, half, 2)])  # Pixtral's pair j is our pair pair[j]
    feature = torch.cat([pair, pair + half])
    for sections, order in [((R // 4, R // 4), "interleaved_sections"), ((R // 4, R // 4), "contiguous_sections")]:
        cos, _ = mrope_cos_sin(hw, R, sections=sections, order=order)
        if order == "interleaved_sections":
            torch.testing.assert_close(cos[:, feature], hf_cos, atol=2e-6, rtol=0)
        else:
            assert _differs(cos[:, feature], hf_cos)


def test_mrope_pair_axes_keep_their_counts_and_refuse_what_cannot_be_interleaved() -> None:
    for sections in [(11, 11, 10), (3, 3, 2), (4, 4), (1,), (24, 20, 20)]:
        for order in ("interleaved_sections", "contiguous_sections"):
            assert mrope_pair_axes(sections, order=order).bincount(minlength=len(sections)).tolist() == list(sections)
    with pytest.raises(ValueError, match=r"sections=\(2, 4, 4\) cannot be interleaved.*gives the axes \(4, 3, 3\)"):
        mrope_pair_axes((2, 4, 4))
    with pytest.raises(ValueError, match=r"dim=8 rotates 4 pairs but sections=.* share 8; use dim=16"):
        mrope_cos_sin(torch.zeros(3, 2, dtype=torch.long), 8, sections=(3, 3, 2))
    with pytest.raises(ValueError, match=r"positions must have a row per section, 3 for sections"):
        mrope_cos_sin(torch.zeros(2, 2, dtype=torch.long), 16, sections=(3, 3, 2))
