"""ModelConfig.layer_cache_numbers against real caches: the package's own, and transformers' where the package has none.

Every row's attention layers are measured with the package's caches at the row's own sizes and a small context
(the formula is linear in the context up to a window or chunk, so a context past the window is measured too).
Linear layers (Gated DeltaNet, KDA), the lightning indexer's keys and DeepSeek-V4's compressed layers are measured
in transformers' caches, in tiny models built with the row's cache sizes.
"""

from __future__ import annotations

import dataclasses
import warnings

import pytest
import torch

from lessons_src.kv_cache import ChunkedKVCache, KVCache, LatentCache, RollingKVCache
from lessons_src.lab.configs import ModelConfig, load_configs

NUMBER = 4  # bytes per float32 number, the caches' default dtype


def numbers_held(cfg: ModelConfig, kind: str, context: int) -> int:
    """Numbers the package's cache for one layer of ``kind`` holds after ``context`` tokens, one sequence."""
    g = cfg.global_layers or {}
    if kind == "full" and cfg.mla:
        cache = LatentCache(1, cfg.mla["kv_latent_dim"], cfg.mla["rope_dim"], max_len=context)
        cache.update(torch.zeros(1, context, cfg.mla["kv_latent_dim"]), torch.zeros(1, context, cfg.mla["rope_dim"]))
        return cache.nbytes // NUMBER
    K, E = (g.get("num_kv_heads", cfg.num_kv_heads), g.get("head_dim", cfg.head_dim)) if kind == "full" else (
        cfg.num_kv_heads, cfg.head_dim)
    kv = (torch.zeros(1, K, context, E), torch.zeros(1, K, context, E))
    if kind == "full":
        full = KVCache(1, K, E, max_len=context)
        full.update(*kv)
        return full.nbytes // NUMBER
    if kind == "sliding":
        rolling = RollingKVCache(1, K, E, window=cfg.sliding_window or 0)
        rolling.update(*kv)
        return rolling.nbytes // NUMBER // (2 if cfg.compress else 1)  # DeepSeek-V4 keeps one tensor as key and value
    chunked = ChunkedKVCache(1, K, E, chunk=cfg.chunk_size or 0)
    chunked.update(*kv)
    return chunked.nbytes // NUMBER


CASES = [(name, kind) for name, cfg in load_configs().items()
         for kind in sorted(set(cfg.layer_kinds()) & {"full", "sliding", "chunked"})]


@pytest.mark.parametrize(("name", "kind"), CASES)
def test_attention_layers_match_the_package_caches(name: str, kind: str) -> None:
    cfg = load_configs()[name]
    span = {"sliding": cfg.sliding_window, "chunked": cfg.chunk_size}.get(kind)
    contexts = [37] if span is None else [min(37, span), span]  # below the span, and at it (the most a layer holds)
    n = cfg.layer_kinds()[: cfg.num_layers - cfg.kv_shared_layers].index(kind)  # the first such layer that caches
    indexer = (cfg.sparse or {}).get("indexer_head_dim", 0) if kind == "full" and cfg.mla else 0
    for context in contexts:
        ours = cfg.layer_cache_numbers(context)[n]
        assert ours == (kind, numbers_held(cfg, kind, context) + context * indexer), (name, kind, context)
    if span is not None:  # past the span the layer holds no more
        assert cfg.layer_cache_numbers(3 * span)[n] == cfg.layer_cache_numbers(span)[n]


def test_shared_layers_hold_nothing_and_the_others_are_counted_once() -> None:
    e2b = load_configs()["Gemma 4 E2B"]
    held = e2b.layer_cache_numbers(100)
    assert [kind for kind, _ in held[-e2b.kv_shared_layers:]] == ["shared"] * e2b.kv_shared_layers
    assert all(kind != "shared" and n > 0 for kind, n in held[: -e2b.kv_shared_layers])
    unshared = dataclasses.replace(e2b, kv_shared_layers=0)
    assert unshared.cache_bytes(100)["total"] > e2b.cache_bytes(100)["total"]


def test_cache_bytes_totals_and_bad_arguments() -> None:
    llama = load_configs()["Llama 3 8B"]  # 32 layers x 8 KV heads x 128 x (K and V) x 2 bytes = 128 KiB per token
    assert llama.cache_bytes(1)["total"] == 32 * 8 * 128 * 2 * 2 == 128 * 2**10
    assert llama.cache_bytes(10, batch=3, bytes_per_number=1)["total"] == 3 * 10 * 64 * 2**10
    with pytest.raises(ValueError, match="batch must be a positive int; got 0"):
        llama.cache_bytes(10, batch=0)
    with pytest.raises(ValueError, match="context must be a non-negative int"):
        llama.cache_bytes(-1)


def tiny(config_class: type, **sizes: object) -> torch.nn.Module:
    """A tiny transformers model: the row's cache sizes, a width of 64 and few experts, everything else default."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return config_class(vocab_size=64, hidden_size=64, intermediate_size=32, moe_intermediate_size=16, **sizes)


def run_cache(model_class: type, config: object, context: int) -> object:
    torch.manual_seed(0)
    model = model_class(config).eval()
    with torch.no_grad():
        return model(torch.randint(3, 64, (1, context)), use_cache=True).past_key_values


def numel(*tensors: torch.Tensor) -> int:
    return sum(t.numel() for t in tensors)


@pytest.mark.parametrize("name", ["Qwen3-Next-80B-A3B", "Kimi Linear 48B-A3B"])
def test_linear_layers_match_transformers_state(name: str) -> None:
    """The row's formula, at small sizes of its own kind (Kimi's KDA ties keys and values to one head count and size),
    against the conv and recurrent states transformers' torch implementation keeps."""
    from transformers import KimiLinearConfig, KimiLinearForCausalLM, Qwen3NextConfig, Qwen3NextForCausalLM

    cfg = load_configs()[name]
    if name.startswith("Qwen3"):
        lin = {"kind": "Gated DeltaNet", "key_heads": 2, "value_heads": 4, "key_dim": 8, "value_dim": 12,
               "conv_kernel": 4}
        config = tiny(Qwen3NextConfig, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=8,
                      linear_num_key_heads=lin["key_heads"], linear_num_value_heads=lin["value_heads"],
                      linear_key_head_dim=lin["key_dim"], linear_value_head_dim=lin["value_dim"],
                      linear_conv_kernel_dim=lin["conv_kernel"], layer_types=["linear_attention", "full_attention"],
                      num_experts=2, num_experts_per_tok=1, shared_expert_intermediate_size=16)
        cache = run_cache(Qwen3NextForCausalLM, config, 9)
    else:
        lin = {"kind": "KDA", "key_heads": 3, "value_heads": 3, "key_dim": 8, "value_dim": 8, "conv_kernel": 3}
        config = tiny(KimiLinearConfig, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                      kv_lora_rank=8, q_lora_rank=None, qk_rope_head_dim=4, qk_nope_head_dim=8, v_head_dim=8,
                      num_experts=2, num_experts_per_token=1, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                      linear_attn_config={"full_attn_layers": [2], "kda_layers": [1], "num_heads": lin["value_heads"],
                                          "head_dim": lin["key_dim"], "short_conv_kernel_size": lin["conv_kernel"]})
        cache = run_cache(KimiLinearForCausalLM, config, 9)
    assert set(lin) == set(cfg.linear or {}) and lin["kind"] == (cfg.linear or {})["kind"]
    layer = cache.layers[0]  # type: ignore[attr-defined]  (the second layer, a full one, only lets the cache run)
    assert type(layer).__name__ == "LinearAttentionLayer"
    theirs = numel(*layer.conv_states.values(), *layer.recurrent_states.values())
    small = dataclasses.replace(cfg, linear=lin)
    n = small.layer_kinds().index("linear")
    assert small.layer_cache_numbers(9)[n] == small.layer_cache_numbers(90_000)[n] == ("linear", theirs)


def test_the_lightning_indexers_keys_match_transformers() -> None:
    from transformers import DeepseekV32Config, DeepseekV32ForCausalLM

    cfg = load_configs()["DeepSeek-V3.2"]
    mla, sparse = cfg.mla or {}, cfg.sparse or {}
    config = tiny(DeepseekV32Config, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                  kv_lora_rank=mla["kv_latent_dim"], q_lora_rank=16, qk_rope_head_dim=mla["rope_dim"],
                  qk_nope_head_dim=8, v_head_dim=8, n_routed_experts=2, num_experts_per_tok=1, n_group=1,
                  topk_group=1, first_k_dense_replace=1, index_n_heads=2,
                  index_head_dim=sparse["indexer_head_dim"], index_topk=4)
    layer = run_cache(DeepseekV32ForCausalLM, config, 11).layers[0]  # type: ignore[attr-defined]
    assert cfg.layer_cache_numbers(11)[0] == ("full", numel(layer.keys, layer.values, layer.indexer_keys))


def test_deepseek_v4_layers_match_transformers() -> None:
    """The window, the pooled entries and the indexer's pooled keys, as transformers' V4 caches hold them.

    transformers keeps ``sliding_window - 1`` past positions (the next query brings its own); the package's rolling
    cache, and so the formula, counts ``sliding_window``, one position more. The pooling's pending inputs and the
    compressed sparse layer's overlap state (a few positions' worth, whatever the context) are left out.
    """
    from transformers import DeepseekV4Config, DeepseekV4ForCausalLM

    cfg = load_configs()["DeepSeek-V4-Flash"]
    rates, sparse = cfg.compress or {}, cfg.sparse or {}
    context = 2 * rates["heavily_compressed"]  # a whole number of pooled windows of both kinds
    config = tiny(DeepseekV4Config, num_hidden_layers=3, num_attention_heads=2, num_key_value_heads=cfg.num_kv_heads,
                  head_dim=cfg.head_dim, qk_rope_head_dim=8, q_lora_rank=16, o_lora_rank=16, o_groups=2,
                  n_routed_experts=2, num_experts_per_tok=1, num_hash_layers=0, sliding_window=cfg.sliding_window,
                  index_n_heads=2, index_head_dim=sparse["indexer_head_dim"], index_topk=4,
                  compress_ratios=[0, rates["compressed_sparse"], rates["heavily_compressed"]])
    layers = run_cache(DeepseekV4ForCausalLM, config, context).layers  # type: ignore[attr-defined]
    row = dataclasses.replace(cfg, num_layers=3, layer_pattern=("sliding", "compressed_sparse", "heavily_compressed"))
    ours = row.layer_cache_numbers(context)
    one_position = cfg.num_kv_heads * cfg.head_dim
    for (kind, n), layer in zip(ours, layers, strict=True):
        # One tensor serves as key and value: the compressed layers' caches hold one; the window-only layer's
        # generic sliding cache stores both, equal, so one is counted.
        assert torch.equal(layer.keys, layer.values)
        theirs = numel(layer.keys) + numel(*getattr(layer, "compressed_kv", {}).values())
        assert (kind, n) == (kind, theirs + one_position), kind
        assert all(t.shape[1] == 0 for t in getattr(layer, "buffer_kv", {}).values())


def test_an_nsa_layer_holds_its_three_branches() -> None:
    """NSA gives each branch keys and values of its own: every position's for the selection, the window's, and one
    pooled pair per block that unfold cuts (the paper's equation 6), each a key of d_k and a value of d_v per group."""
    cfg = load_configs()["NSA 27B"]
    nsa = cfg.native_sparse
    assert nsa is not None and (cfg.head_dim, cfg.value_dim) == (192, 128)
    per_position = cfg.num_kv_heads * (cfg.head_dim + cfg.value_dim)
    for context in (1, 31, 32, 47, 48, 600, 5000):
        blocks = len(range(0, context - nsa["compress_block"] + 1, nsa["compress_stride"]))
        held = context + min(context, nsa["window"]) + blocks
        assert cfg.layer_cache_numbers(context) == [("native_sparse", held * per_position)] * cfg.num_layers
