"""Layer patterns: the shipping models' patterns and masks, and cached decoding with a cache per layer type.

The patterns are compared with ``transformers``' configs (``layer_types``, Llama 4's ``no_rope_layers``, Gemma 4's
``kv_sharing_modes``), and the masks each layer attends with are compared with those the pinned models build
as they run (captured from their attention modules), at a sequence longer than their windows. Then decoding
with the caches each type needs equals the full pass for every type and pattern, token by token and in
blocks that cross window and chunk boundaries, in float64. Gemma 4's KV-sharing (consumer) attention module is
compared, weights copied, with :class:`SharedKVAttention`, the query-only layer a sharing layer here is.
"""

from __future__ import annotations

import pytest
import torch

from lessons_src.kv_cache import ChunkedKVCache, KVCache, RollingKVCache
from lessons_src.lab.pattern_model import (
    LayerType,
    PatternConfig,
    PatternGPT,
    SharedKVAttention,
    check_pattern,
    gemma3_pattern,
    gpt_oss_pattern,
    llama4_pattern,
    olmo3_pattern,
    share_kv,
)
from lessons_src.masks import causal_mask, sliding_window
from lessons_src.mechanisms import PerHeadRMSNorm, Rotary

HF_KIND = {"sliding_attention": "window", "full_attention": "global", "chunked_attention": "chunk"}

MIXED = (LayerType("window", 3), LayerType(), LayerType("chunk", 4), LayerType(rope=False),
         LayerType("window", 3, shares=0), LayerType("chunk", 4, shares=2), LayerType(shares=1))
PATTERNS = {
    "gpt-oss": gpt_oss_pattern(4, window=3),
    "gemma3": gemma3_pattern(6, window=4),
    "olmo3": olmo3_pattern(4, window=5),
    "llama4": llama4_pattern(4, chunk=4),
    "gemma4 shared": share_kv(gemma3_pattern(6, window=3, every=3), 2),
    "mixed": MIXED,
}


def _model(pattern, temperature=None) -> PatternGPT:
    torch.manual_seed(0)
    model = PatternGPT(PatternConfig(pattern, vocab_size=32, nope_temperature=temperature)).double().eval()
    with torch.no_grad():  # the norms' weights start at constants: draw them
        for p in model.parameters():
            if p.ndim == 1:
                p.add_(torch.randn_like(p) * 0.5)
    return model


@pytest.mark.parametrize("name", list(PATTERNS))
@pytest.mark.parametrize("blocks", [(1,), (5, 3, 1, 4, 2)], ids=["token by token", "in blocks"])
def test_cached_decoding_equals_the_full_pass(name: str, blocks: tuple[int, ...]) -> None:
    """A prompt of 3, then ``blocks`` repeated to 15 tokens: every window (3-5) and chunk (4) is crossed."""
    model = _model(PATTERNS[name], temperature=(2, 0.5) if name in ("llama4", "mixed") else None)
    tokens = torch.randint(0, 32, (2, 15), generator=torch.Generator().manual_seed(1))
    caches = model.make_caches(batch_size=2, max_len=15)
    with torch.no_grad():
        full = model(tokens)
        outs, t, i = [model(tokens[:, :3], caches=caches)], 3, 0
        while t < 15:
            n = min(blocks[i % len(blocks)], 15 - t)
            outs.append(model(tokens[:, t : t + n], caches=caches))
            t, i = t + n, i + 1
    torch.testing.assert_close(torch.cat(outs, dim=1), full, atol=1e-10, rtol=1e-9)
    kinds = {type(c).__name__ if c is not None else "none" for c in caches}
    for layer, cache in zip(model.pattern, caches, strict=True):  # each type's cache and what it holds
        if layer.shares is not None:
            assert cache is None
        elif layer.kind == "global":
            assert isinstance(cache, KVCache) and cache.length == 15
        elif layer.kind == "window":
            assert isinstance(cache, RollingKVCache) and cache.nbytes == layer.size * 2 * 2 * 8 * 8 * 2
        else:
            assert isinstance(cache, ChunkedKVCache) and cache.held == 15 - 4 * (14 // 4)
    assert kinds


def test_temperature_and_sharing_change_the_output() -> None:
    """The decoding test above would pass for a model that ignored them: these pieces take effect at T = 15."""
    tokens = torch.randint(0, 32, (1, 15), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        a = _model(llama4_pattern(4, chunk=4), temperature=(2, 0.5))(tokens)
        b = _model(llama4_pattern(4, chunk=4))(tokens)
        c = _model(gemma3_pattern(6, window=3, every=3))(tokens)
        d = _model(share_kv(gemma3_pattern(6, window=3, every=3), 2))(tokens)
    assert (a - b).abs().max() > 1e-3 and (c - d).abs().max() > 1e-3


# --------------------------------------------------------------------------- the shipping models' patterns

transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize(("model", "ours", "window"), [
    ("GptOssConfig", gpt_oss_pattern, 128), ("Gemma3TextConfig", gemma3_pattern, 512),
    ("Olmo3Config", olmo3_pattern, 4096),
])
def test_patterns_are_the_configs(model: str, ours, window: int) -> None:
    for n in (1, 5, 12, 13):
        cfg = getattr(transformers, model)(num_hidden_layers=n, sliding_window=window)
        assert [t.name for t in ours(n, window=window)] == [
            f"window:{window}" if k == "sliding_attention" else "global" for k in cfg.layer_types
        ]


def test_llama4_pattern_is_the_configs() -> None:
    """Llama 4: ``no_rope_layers[i] == 1`` means RoPE (and chunks); every fourth layer is NoPE and global."""
    for n in (4, 7, 12):
        cfg = transformers.Llama4TextConfig(num_hidden_layers=n, attention_chunk_size=16)
        got = llama4_pattern(n, chunk=16)
        assert [t.kind for t in got] == [HF_KIND[k] for k in cfg.layer_types]
        assert [int(t.rope) for t in got] == list(cfg.no_rope_layers)


def test_kv_sharing_is_gemma4s() -> None:
    """Gemma 4: the last ``num_kv_shared_layers`` reuse ("reuse") the last earlier layer of their type ("store")."""
    for n, shared in ((12, 4), (12, 6), (18, 1), (18, 9)):  # Gemma 4 makes its last layer global
        cfg = transformers.Gemma4TextConfig(num_hidden_layers=n, num_kv_shared_layers=shared)
        pattern = share_kv(gemma3_pattern(n, window=cfg.sliding_window), shared)
        assert [t.kind for t in pattern] == [HF_KIND[k] for k in cfg.layer_types]
        modes = cfg.kv_sharing_modes
        assert [t.shares is not None for t in pattern] == [m == "reuse" for m in modes]
        producer = {cfg.layer_types[i]: i for i, m in enumerate(modes) if m == "store"}  # one per type
        assert [t.shares for t in pattern] == [producer[k] if m == "reuse" else None
                                               for k, m in zip(cfg.layer_types, modes, strict=True)]
    with pytest.raises(ValueError, match="layer 5 \\(global\\) would share"):  # both refuse a type with no source
        share_kv(gemma3_pattern(6), 2)
    with pytest.raises(ValueError):
        _ = transformers.Gemma4TextConfig(num_hidden_layers=6, num_kv_shared_layers=2).kv_sharing_modes


def _hf_masks(model: torch.nn.Module, T: int) -> list[torch.Tensor]:
    """The mask each attention module of ``model`` is called with, as bool ``(T, T)`` (True = may attend)."""
    masks: list[torch.Tensor] = []
    hooks = [layer.self_attn.register_forward_pre_hook(
        lambda _m, _a, kw: masks.append(kw["attention_mask"][0, 0] == 0 if kw["attention_mask"].dtype != torch.bool
                                        else kw["attention_mask"][0, 0]), with_kwargs=True) for layer in model.layers]
    with torch.no_grad():
        model(input_ids=torch.arange(T)[None] % 16)
    for h in hooks:
        h.remove()
    return masks


def _tiny(cls: str, **extra: object) -> object:
    cfg = getattr(transformers, cls)(hidden_size=16, num_attention_heads=2, num_key_value_heads=1, head_dim=8,
                                     intermediate_size=16, vocab_size=16, **extra)
    cfg._attn_implementation = "eager"
    return cfg


@pytest.mark.parametrize(("name", "model", "config", "ours"), [
    ("gpt-oss", "GptOssModel", _tiny("GptOssConfig", num_hidden_layers=4, sliding_window=3, num_local_experts=2,
                                     num_experts_per_tok=1), gpt_oss_pattern(4, window=3)),
    ("gemma3", "Gemma3TextModel", _tiny("Gemma3TextConfig", num_hidden_layers=6, sliding_window=3),
     gemma3_pattern(6, window=3)),
    ("olmo3", "Olmo3Model", _tiny("Olmo3Config", num_hidden_layers=4, sliding_window=3), olmo3_pattern(4, window=3)),
    ("llama4", "Llama4TextModel", _tiny("Llama4TextConfig", num_hidden_layers=4, attention_chunk_size=3,
                                        num_local_experts=2, intermediate_size_mlp=16), llama4_pattern(4, chunk=3)),
], ids=lambda v: v if isinstance(v, str) else "")
def test_each_layer_masks_as_the_running_model(name: str, model: str, config: object, ours) -> None:
    """At 8 tokens, past a window (or chunk) of 3: each layer's mask in the pinned model is ours for its type."""
    T = 8
    hf = getattr(transformers, model)(config).eval()
    got = _hf_masks(hf, T)
    assert len(got) == len(ours)
    for i, (mask, t) in enumerate(zip(got, ours, strict=True)):
        want = causal_mask(T, window=t.size if t.kind == "window" else None,
                           chunk=t.size if t.kind == "chunk" else None)
        assert torch.equal(mask, want), f"{name} layer {i} ({t.name}): {mask.int().tolist()}"


# --------------------------------------------------------------------------- bad patterns


@pytest.mark.parametrize(("call", "match"), [
    (lambda: check_pattern(gpt_oss_pattern(3), 4), r"the pattern has 3 layer types but the model has num_layers=4"),
    (lambda: PatternGPT(PatternConfig(gemma3_pattern(5), num_layers=6)),
     r"the pattern has 5 layer types but the model has num_layers=6; the pattern must give one per layer"),
    (lambda: check_pattern((LayerType(), LayerType(shares=1)), 2), r"layer 1 shares the keys and values of itself"),
    (lambda: check_pattern((LayerType(shares=1), LayerType()), 2),
     r"layer 0 shares the keys and values of a later layer \(1\); it can only reuse an earlier layer's"),
    (lambda: check_pattern((LayerType(), LayerType("window", 4, shares=0)), 2),
     r"layer 1 \(window:4\) shares layer 0 \(global\): a layer reuses only the keys and values of a layer of its own"),
    (lambda: check_pattern((LayerType(), LayerType(shares=0), LayerType(shares=1)), 3),
     r"layer 2 shares layer 1, which shares layer 0: point it at shares=0"),
    (lambda: LayerType("window", 0), r"size must be at least 1 \(positions of a window\); got size=0"),
    (lambda: LayerType("chunk", -8), r"size must be at least 1 \(positions of a chunk\); got size=-8"),
    (lambda: LayerType("global", 8), r"a global layer sees every key: its size must be None; got size=8"),
    (lambda: LayerType("local", 8), r"kind must be one of 'global', 'window', 'chunk'; got kind='local'"),
    (lambda: share_kv(gpt_oss_pattern(4), 4), r"last must be in 0..3"),
    (lambda: share_kv(gemma3_pattern(6), 1), r"layer 5 \(global\) would share keys and values, but no layer before 5"),
    (lambda: ChunkedKVCache(1, 1, 4, 0), r"chunk must be at least 1; got chunk=0"),
    (lambda: SharedKVAttention(16, 4, qk_norm=PerHeadRMSNorm(4)),
     r"PerHeadRMSNorm has a key weight, but this layer computes no keys: make it with keys=False"),
    (lambda: SharedKVAttention(16, 4, qk_norm=PerHeadRMSNorm(8, keys=False)),
     r"qk_norm was made for head_dim=8 \(the layer has 4\)"),
    (lambda: SharedKVAttention(16, 4, rope=Rotary(8)), r"Rotary\(dim=8\) rotates more features than a head has"),
    (lambda: SharedKVAttention(16, 3), r"d_model=16 is not divisible by num_heads=3"),
])
def test_a_bad_pattern_gets_a_clear_error(call, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()


def _gemma4_inputs(cfg, layer_type: str, B: int, T: int, seed: int) -> tuple[torch.Tensor, ...]:
    """``x``, the additive mask from ``transformers``' own mask functions, and Gemma 4's rotary ``(cos, sin)``."""
    from transformers.masking_utils import causal_mask_function, sliding_window_causal_mask_function
    from transformers.models.gemma4.modeling_gemma4 import Gemma4TextRotaryEmbedding

    x = torch.randn(B, T, cfg.hidden_size, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    fn = sliding_window_causal_mask_function(cfg.sliding_window) if layer_type == "sliding_attention" else (
        causal_mask_function)
    keep = fn(torch.tensor(0), torch.tensor(0), torch.arange(T)[:, None], torch.arange(T)[None])  # (T, T)
    mask = torch.zeros(B, 1, T, T, dtype=x.dtype).masked_fill(~keep, float("-inf"))
    cos, sin = Gemma4TextRotaryEmbedding(cfg)(x, torch.arange(T)[None].expand(B, T), layer_type)  # (B, T, E)
    return x, mask, cos, sin


@pytest.mark.parametrize("layer", [3, 4], ids=["window consumer", "global consumer"])
def test_a_sharing_layer_is_gemma4s(layer: int) -> None:
    """Gemma 4's KV-sharing (consumer) attention module against :class:`SharedKVAttention`, weights copied, in
    float64 (the module's norms and rotary compute in float32: float32's tolerance). The keys and values it reuses
    come, on our side, from the core's layer with Gemma 4's pieces (value norm, scale 1, proportional RoPE on the
    global layer), read from its cache, and equal what Gemma 4's producer module stores; then the consumer's
    output and the gradients of ``x`` and of its three weights (``W_Q``, the query norm's, ``W_O``) equal the
    module's. Gemma 4 builds no key or value projection or norm for a consumer, and neither does ours."""
    from transformers.models.gemma4.modeling_gemma4 import Gemma4TextAttention

    from lessons_src.layer import MultiHeadAttention
    from lessons_src.mechanisms import ValueRMSNorm

    B, T, D, H, K, E, W = 2, 8, 64, 4, 2, 16, 3
    types = ["sliding_attention", "full_attention", "sliding_attention", "sliding_attention", "full_attention"]
    cfg = transformers.Gemma4TextConfig(num_hidden_layers=5, num_kv_shared_layers=2, hidden_size=D,
                                        num_attention_heads=H, num_key_value_heads=K, head_dim=E, global_head_dim=E,
                                        layer_types=types, sliding_window=W, intermediate_size=16, vocab_size=16,
                                        rms_norm_eps=1e-6)
    cfg._attn_implementation = "eager"
    assert cfg.kv_sharing_modes == [None, "store", "store", "reuse", "reuse"]
    pattern = share_kv([LayerType("window", W) if t == "sliding_attention" else LayerType() for t in types], 2)
    source = pattern[layer].shares
    assert source == {3: 2, 4: 1}[layer]
    kind = types[layer]
    window = W if kind == "sliding_attention" else None
    producer, consumer = Gemma4TextAttention(cfg, source).double(), Gemma4TextAttention(cfg, layer).double()
    assert not any(hasattr(consumer, name) for name in ("k_proj", "v_proj", "k_norm", "v_norm"))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():  # every weight drawn, the norms' too (they start at 1)
        for p in [*producer.parameters(), *consumer.parameters()]:
            p.add_(torch.randn(p.shape, generator=g, dtype=p.dtype) * (D**-0.5 if p.ndim == 2 else 0.5))
    rope = Rotary(E) if kind == "sliding_attention" else Rotary.proportional(E, 0.25, base=1e6)

    mine = MultiHeadAttention(D, H, num_kv_heads=K, qk_norm=PerHeadRMSNorm(E, eps=1e-6),
                              v_norm=ValueRMSNorm(eps=1e-6), rope=rope, scale=1.0).double()  # the producer
    ours = SharedKVAttention(D, H, qk_norm=PerHeadRMSNorm(E, eps=1e-6, keys=False), rope=rope, scale=1.0).double()
    assert sorted(ours.state_dict()) == ["out_proj.weight", "q_proj.weight", "qk_norm.q_weight"]
    with torch.no_grad():
        mine.qkv_proj.weight.copy_(torch.cat([producer.q_proj.weight, producer.k_proj.weight, producer.v_proj.weight]))
        mine.out_proj.weight.copy_(producer.o_proj.weight)
        mine.qk_norm.q_weight.copy_(producer.q_norm.weight)
        mine.qk_norm.k_weight.copy_(producer.k_norm.weight)
        ours.q_proj.weight.copy_(consumer.q_proj.weight)
        ours.out_proj.weight.copy_(consumer.o_proj.weight)
        ours.qk_norm.q_weight.copy_(consumer.q_norm.weight)

    x_source, mask, cos, sin = _gemma4_inputs(cfg, kind, B, T, seed=1)
    shared: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    cache = KVCache(B, K, E, T, dtype=torch.float64)
    with torch.no_grad():
        producer(x_source, position_embeddings=(cos, sin), attention_mask=mask, shared_kv_states=shared)
        mine(x_source, is_causal=True, attn_mask=None if window is None else sliding_window(window), cache=cache)
    k, v = cache.k, cache.v  # (B, K, T, E): normed, rotated and cached once, by the producer
    torch.testing.assert_close((k, v), shared[kind], atol=1e-5, rtol=1e-5)

    x = _gemma4_inputs(cfg, kind, B, T, seed=2)[0]
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    got = ours(xa, k, v, start=0, is_causal=True, window=window)
    want = consumer(xb, position_embeddings=(cos, sin), attention_mask=mask, shared_kv_states=shared)[0]
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    upstream = torch.randn(got.shape, generator=g, dtype=got.dtype)
    mine_grads = torch.autograd.grad((got * upstream).sum(), [xa, ours.q_proj.weight, ours.qk_norm.q_weight,
                                                              ours.out_proj.weight])
    theirs = torch.autograd.grad((want * upstream).sum(), [xb, consumer.q_proj.weight, consumer.q_norm.weight,
                                                           consumer.o_proj.weight])
    for i, (a, b) in enumerate(zip(mine_grads, theirs, strict=True)):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5,
                                   msg=lambda m, i=i: f"gradient {i} (x, W_Q, norm, W_O): {m}")


def test_a_sharing_layer_has_no_keys_or_values_of_its_own() -> None:
    """Each sharing layer of a :class:`PatternGPT` lacks exactly the key and value rows of ``W_K``, ``W_V`` (2 K E D)
    and the key norm's weight (E): the model with two sharing layers has that many parameters fewer."""
    D, K, E = 32, 2, 8
    plain, shared = gemma3_pattern(6, window=3, every=3), share_kv(gemma3_pattern(6, window=3, every=3), 2)
    count = [sum(w.numel() for w in _model(pattern).parameters()) for pattern in (plain, shared)]
    assert count[0] - count[1] == 2 * (2 * K * E * D + E)
    blocks = _model(shared).blocks
    assert [type(b.attn).__name__ for b in blocks] == ["MultiHeadAttention"] * 4 + ["SharedKVAttention"] * 2
