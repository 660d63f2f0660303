"""shared_kv.py: DeepSeek-V4's attention against ``transformers``' ``DeepseekV4Attention`` with copied weights.

A tiny config with one layer of each kind (window only, heavily compressed, compressed sparse), float64. Each
comparison also runs with one piece removed (values that are not the rotated keys, no conjugate rotation, the
other layer kind's RoPE base) and must then fail.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from lessons_src import shared_kv
from lessons_src.functional import attention
from lessons_src.mechanisms import ConjugateRotation, Rotary
from lessons_src.rope import yarn_scaling
from lessons_src.shared_kv import GroupedOutput, OverlapCompressor, SharedKVAttention, SharedKVCache, WindowCompressor
from lessons_src.sparse_selection import CompressedIndexer

v4 = pytest.importorskip("transformers.models.deepseek_v4.modeling_deepseek_v4")

KINDS = ("sliding_attention", "heavily_compressed_attention", "compressed_sparse_attention")
D, H, E, R, W = 32, 4, 16, 8, 4  # d_model, heads, head_dim, rotated features, window
RATES = {"compressed_sparse_attention": 2, "heavily_compressed_attention": 3}


@pytest.fixture(scope="module")
def config() -> object:
    from transformers import DeepseekV4Config

    return DeepseekV4Config(
        hidden_size=D, num_attention_heads=H, head_dim=E, q_lora_rank=8, o_groups=2, o_lora_rank=4,
        num_hidden_layers=3, layer_types=list(KINDS), sliding_window=W, vocab_size=10, index_n_heads=2,
        index_head_dim=8, index_topk=2, qk_rope_head_dim=R, compress_rates=dict(RATES), max_position_embeddings=128,
        rope_parameters={"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 8,
                         "beta_fast": 32.0, "beta_slow": 1.0},
        attn_implementation="eager")


def rotary(config: object, kind: str) -> Rotary:
    """V4's RoPE for a layer kind: base 10,000 on window-only layers, 160,000 with YaRN on compressed ones."""
    if kind == "sliding_attention":
        return Rotary(R, base=config.rope_parameters["main"]["rope_theta"], layout="interleaved", features="trailing")
    p = config.rope_parameters["compress"]
    scaling = yarn_scaling(R, base=p["rope_theta"], factor=p["factor"], beta_fast=p["beta_fast"],
                           beta_slow=p["beta_slow"], original_max_positions=p["original_max_position_embeddings"],
                           attention_factor=p["attention_factor"])
    return Rotary(R, scaling=scaling, layout="interleaved", features="trailing")


def copied(ref: nn.Module, rope: Rotary, *, conjugate: bool = True) -> SharedKVAttention:
    kind = ref.layer_type
    comp = None
    if kind == "heavily_compressed_attention":
        comp = WindowCompressor(D, E, RATES[kind], rope)
        for name in ("kv_proj", "gate_proj", "kv_norm"):
            getattr(comp, name).load_state_dict(getattr(ref.compressor, name).state_dict())
        comp.position_bias.data.copy_(ref.compressor.position_bias)
    if kind == "compressed_sparse_attention":
        theirs = ref.compressor.indexer
        keys = OverlapCompressor(D, 8, RATES[kind], rope)
        indexer = CompressedIndexer(D, 8, 2, 8, 2, keys=keys, rope=rope)
        comp = OverlapCompressor(D, E, RATES[kind], rope, selector=indexer)
        for mine, their in ((comp, ref.compressor), (keys, theirs)):
            for name in ("kv_proj", "gate_proj", "kv_norm"):
                getattr(mine, name).load_state_dict(getattr(their, name).state_dict())
            mine.position_bias.data.copy_(their.position_bias)
        indexer.q_up.load_state_dict(theirs.q_b_proj.state_dict())
        indexer.weights_proj.load_state_dict(theirs.scorer.weights_proj.state_dict())
    out = GroupedOutput(H, E, D, groups=2, rank=4)
    layer = SharedKVAttention(D, H, E, q_rank=8, window=W, rope=rope, output=out, compressor=comp,
                              output_rotation=ConjugateRotation(rope) if conjugate else None).double()
    for mine, theirs in (("q_down", "q_a_proj"), ("q_norm", "q_a_norm"), ("q_up", "q_b_proj"), ("kv_proj", "kv_proj"),
                         ("kv_norm", "kv_norm")):
        getattr(layer, mine).load_state_dict(getattr(ref, theirs).state_dict())
    layer.sinks.data.copy_(ref.sinks)
    out.blocks.data.copy_(ref.o_a_proj.weight.view(2, 4, -1))  # (G * r, H*E/G) rows, group-major
    out.mix.weight.data.copy_(ref.o_b_proj.weight)
    return layer


def reference(config: object, kind: str, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    ref = v4.DeepseekV4Attention(config, KINDS.index(kind)).double().eval()
    with torch.no_grad():
        for p in ref.parameters():
            p.normal_(0.0, 0.3)
    return ref


def window_mask(B: int, T: int, S: int) -> torch.Tensor:
    """The float mask ``transformers`` builds for V4: causal, the last ``W`` positions (written here, not ours)."""
    i = torch.arange(T)[:, None] + S - T
    j = torch.arange(S)[None]
    hidden = (j > i) | (j <= i - W)
    return torch.zeros(T, S, dtype=torch.float64).masked_fill(hidden, float("-inf")).expand(B, 1, T, S)


def theirs(config: object, ref: nn.Module, x: torch.Tensor, start: int = 0, cache: object = None) -> torch.Tensor:
    B, T, _ = x.shape
    pos = torch.arange(start, start + T)[None].expand(B, -1)
    rot = v4.DeepseekV4RotaryEmbedding(config).double()
    pe = {k: rot(x, pos, layer_type=k) for k in ("main", "compress")}
    held = 0 if cache is None else min(start, W - 1)
    with torch.no_grad():
        return ref(x, pe, pos, window_mask(B, T, held + T), past_key_values=cache)[0]


def values_without_rope(monkeypatch: pytest.MonkeyPatch, rope: Rotary) -> None:
    """K != V: the values are the shared head before RoPE (as in MQA), the keys after it."""
    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kw: object) -> object:
        return attention(q, k, rope.rotate(v, -torch.arange(v.shape[2])), **kw)  # undo each key's turn
    monkeypatch.setattr(shared_kv, "attention", attend)


@pytest.mark.parametrize("kind", KINDS)
def test_full_pass_equals_transformers_and_fails_without_each_piece(config: object, kind: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    ref = reference(config, kind)
    x = torch.randn(2, 11, D, dtype=torch.float64)
    want = theirs(config, ref, x)
    with torch.no_grad():
        torch.testing.assert_close(copied(ref, rotary(config, kind))(x), want)
        assert not torch.allclose(copied(ref, rotary(config, kind), conjugate=False)(x), want, atol=1e-3)
        other = KINDS[1] if kind == KINDS[0] else KINDS[0]  # the other layer kind's RoPE base
        assert not torch.allclose(copied(ref, rotary(config, other))(x), want, atol=1e-3)
        if kind == "compressed_sparse_attention":  # every complete entry, not the indexer's pick
            unpicked = copied(ref, rotary(config, kind))
            unpicked.compressor.selector = None
            assert not torch.allclose(unpicked(x), want, atol=1e-3)
        if kind == "sliding_attention":  # the keys' positions are 0 .. S - 1 here
            rope = rotary(config, kind)
            values_without_rope(monkeypatch, rope)
            assert not torch.allclose(copied(ref, rope)(x), want, atol=1e-3)


def test_rotary_turns_the_trailing_features_as_transformers_does(config: object) -> None:
    """The class docstring says "first rope_head_dim"; the code, which this follows, turns the last."""
    x = torch.randn(1, 2, 5, E, dtype=torch.float64)
    pos = torch.arange(3, 8)
    rot = v4.DeepseekV4RotaryEmbedding(config).double()
    cos, sin = rot(x, pos[None], layer_type="main")
    want = v4.apply_rotary_pos_emb(x, cos, sin)
    torch.testing.assert_close(rotary(config, KINDS[0]).rotate(x, pos), want)
    torch.testing.assert_close(want[..., : E - R], x[..., : E - R])  # the leading features stay
    torch.testing.assert_close(ConjugateRotation(rotary(config, KINDS[0]))(want, start=3), x)


@pytest.mark.parametrize("kind", KINDS[:2])
def test_cached_decoding_equals_the_full_pass_and_transformers_cache(config: object, kind: str) -> None:
    from transformers.cache_utils import DynamicCache

    ref = reference(config, kind, seed=1)
    layer = copied(ref, rotary(config, kind))
    x = torch.randn(1, 10, D, dtype=torch.float64)
    with torch.no_grad():
        full = layer(x)
    cache, their_cache = SharedKVCache(W), DynamicCache(config=config)
    steps, at = [], 0
    for n in (5, 1, 1, 1, 1, 1):  # a prompt of 5, then one token a step
        with torch.no_grad():
            steps.append(layer(x[:, at:at + n], cache=cache))
        mine_theirs = theirs(config, ref, x[:, at:at + n], start=at, cache=their_cache)
        torch.testing.assert_close(steps[-1], mine_theirs)
        at += n
    torch.testing.assert_close(torch.cat(steps, dim=1), full)
    assert cache.kv is not None and cache.kv.shape[2] == W - 1  # one tensor for keys and values


def test_shift_invariance_needs_the_conjugate_rotation(config: object) -> None:
    ref = reference(config, KINDS[0], seed=2)
    x = torch.randn(1, 6, D, dtype=torch.float64)
    with torch.no_grad():
        for conjugate, moved in ((True, False), (False, True)):
            layer = copied(ref, rotary(config, KINDS[0]), conjugate=conjugate)
            assert torch.allclose(layer(x), layer(x, start=100), atol=1e-9) is not moved


def test_grouped_output_is_a_block_diagonal_then_dense_projection() -> None:
    out = GroupedOutput(4, 3, 5, groups=2, rank=2).double()
    y = torch.randn(1, 4, 2, 3, dtype=torch.float64)
    dense = torch.block_diag(*out.blocks)  # (G*r, H*E)
    want = y.transpose(1, 2).reshape(1, 2, 12) @ dense.T @ out.mix.weight.T
    torch.testing.assert_close(out(y), want)
