"""RoPE's frequencies, plain and scaled, against ``transformers``' own initialisation.

Llama 3.1's rule and YaRN each against ``ROPE_INIT_FUNCTIONS["llama3"]`` and ``["yarn"]`` of the pinned
``transformers`` on configs where every branch of the rule is taken (pairs kept, slowed and blended), then
against the model's rotary module (its cosines and sines, attention factor included) at positions beyond the
original context, where scaling matters. ``transformers`` computes in float32, this package in float64:
the frequencies agree to float32's rounding.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lessons_src.rope import RopeScaling, llama3_scaling, rope_cos_sin, rope_frequencies, yarn_scaling

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
