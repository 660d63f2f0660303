"""Windowed and mixed local/global configurations: sourced, and laid out as transformers lays them out."""

from __future__ import annotations

import pytest

from lessons_src.lab.configs import _parse, load_configs

WINDOWED = ["Mistral 7B", "Gemma 2 27B", "Gemma 3 27B"]


@pytest.mark.parametrize("name", WINDOWED)
def test_every_window_number_is_named_in_the_source(name: str) -> None:
    cfg = load_configs()[name]
    assert cfg.sliding_window is not None and cfg.context_length is not None
    for number in (cfg.sliding_window, cfg.context_length, cfg.d_model, cfg.num_layers, cfg.head_dim):
        assert str(number) in cfg.source, (name, number)


OURS = {"full_attention": "full", "sliding_attention": "sliding", "chunked_attention": "chunked",
        "linear_attention": "linear", "compressed_sparse_attention": "compressed_sparse",
        "heavily_compressed_attention": "heavily_compressed"}


def hf_config(name: str) -> object:
    """transformers' config class for the row, given only the published arguments that choose its layer kinds."""
    from transformers import (
        DeepseekV4Config,
        Gemma2Config,
        Gemma3TextConfig,
        Gemma4TextConfig,
        GptOssConfig,
        KimiLinearConfig,
        Llama4TextConfig,
        Olmo3Config,
        Qwen3_5TextConfig,
        Qwen3NextConfig,
    )

    cfg = load_configs()[name]
    n = {"num_hidden_layers": cfg.num_layers}
    if cfg.family == "Kimi Linear":  # the published lists, counted from 1 as the checkpoint counts them
        full = [i + 1 for i, kind in enumerate(cfg.layer_kinds()) if kind == "full"]
        kda = [i + 1 for i, kind in enumerate(cfg.layer_kinds()) if kind == "linear"]
        return KimiLinearConfig(**n, linear_attn_config={"full_attn_layers": full, "kda_layers": kda})
    if cfg.family == "DeepSeek-V4":  # the published per-layer compress_ratios: 0, 4 or 128
        ratios = {"sliding": 0, **(cfg.compress or {})}
        return DeepseekV4Config(**n, compress_ratios=[ratios[kind] for kind in cfg.layer_kinds()])
    classes = {"Gemma 2": Gemma2Config, "Gemma 3": Gemma3TextConfig, "Gemma 4": Gemma4TextConfig,
               "gpt-oss": GptOssConfig, "Qwen3-Next": Qwen3NextConfig, "Qwen3.5": Qwen3_5TextConfig,
               "OLMo 3": Olmo3Config, "Llama 4": Llama4TextConfig}
    return classes[cfg.family or ""](**n)


# Rows whose layer list transformers cannot derive from its own rule, with the reason.
LIST_ONLY = {"Gemma 4 E2B": "Gemma4TextConfig's default is five sliding layers per full one; E2B's four per one is in "
                            "its "
                            "checkpoint's layer_types and in Google's JAX config, which the row's source quotes"}
MIXED = [name for name, cfg in load_configs().items() if len(set(cfg.layer_kinds())) > 1 and name not in LIST_ONLY]


def test_every_mixed_model_is_compared() -> None:
    mixed = {name for name, cfg in load_configs().items() if len(set(cfg.layer_kinds())) > 1}
    assert mixed == set(MIXED) | set(LIST_ONLY) and len(MIXED) >= 15
    e2b = load_configs()["Gemma 4 E2B"]
    assert e2b.layer_kinds() == (["sliding"] * 4 + ["full"]) * 7 and "four LOCAL_SLIDING then one GLOBAL" in e2b.source


@pytest.mark.parametrize("name", MIXED)
def test_layer_pattern_matches_transformers(name: str) -> None:
    """transformers lays out the same kinds of layer, from its own rule or from the published per-layer list."""
    cfg = load_configs()[name]
    hf = hf_config(name)
    assert cfg.layer_kinds() == [OURS[kind] for kind in hf.layer_types]  # type: ignore[attr-defined]
    if cfg.family == "Llama 4":  # no_rope_layers: 1 where a layer rotates, 0 where it does not
        nope = [n % cfg.nope_every == 0 for n in range(1, cfg.num_layers + 1)] if cfg.nope_every else []
        assert nope == [flag == 0 for flag in hf.no_rope_layers]  # type: ignore[attr-defined]
        assert cfg.chunk_size == hf.attention_chunk_size  # type: ignore[attr-defined]


def test_a_wrong_pattern_is_caught() -> None:
    """The comparison above fails on a pattern shifted by one layer, as a misread layer_types list would be."""
    import dataclasses

    cfg = load_configs()["gpt-oss-20b"]
    shifted = dataclasses.replace(cfg, layer_pattern=("full", "sliding"))
    hf = hf_config("gpt-oss-20b")
    assert shifted.layer_kinds() != [OURS[kind] for kind in hf.layer_types]  # type: ignore[attr-defined]
    assert cfg.layer_kinds() == [OURS[kind] for kind in hf.layer_types]  # type: ignore[attr-defined]


def test_cached_positions_per_layer() -> None:
    c = load_configs()
    gemma = c["Gemma 2 27B"]
    per_layer = gemma.cached_positions_per_layer(8192)
    assert per_layer[:2] == [4096, 8192] and len(per_layer) == gemma.num_layers
    assert c["Mistral 7B"].cached_positions_per_layer(8192) == [4096] * 32
    assert c["Llama 3 8B"].cached_positions_per_layer(100) == [100] * 32
    with pytest.raises(ValueError, match="Gemma 2 27B mixes windowed and global layers"):
        gemma.cached_positions(8192)


def test_bad_window_fields_are_rejected() -> None:
    entry = {"name": "x", "year": 2024, "d_model": 64, "num_heads": 4, "num_kv_heads": 4, "num_layers": 2,
             "source": "a made-up entry, 2024"}
    with pytest.raises(ValueError, match="'sliding' layers, which need sliding_window"):
        _parse({**entry, "layer_pattern": ["sliding", "full"]})
    with pytest.raises(ValueError, match="sliding_window=8 but no layer uses a window"):
        _parse({**entry, "sliding_window": 8, "layer_pattern": ["full"]})
    with pytest.raises(ValueError, match=r"unknown kinds \['global'\]"):
        _parse({**entry, "layer_pattern": ["global"]})
    with pytest.raises(ValueError, match="'chunked' layers, which need chunk_size"):
        _parse({**entry, "layer_pattern": ["chunked"]})
    with pytest.raises(ValueError, match="'linear' layers, which need linear"):
        _parse({**entry, "layer_pattern": ["linear", "full"]})
    with pytest.raises(ValueError, match="kv_shared_layers=2 must be from 0 to num_layers - 1 = 1"):
        _parse({**entry, "kv_shared_layers": 2})
    with pytest.raises(ValueError, match="context_length=0 must be a positive"):
        _parse({**entry, "context_length": 0})
    with pytest.raises(ValueError, match=r"unknown fields \['global_every'\]"):
        _parse({**entry, "sliding_window": 8, "global_every": 2})
    with pytest.raises(ValueError, match="qk_norm='layer'; expected one of"):
        _parse({**entry, "qk_norm": "layer"})
    with pytest.raises(ValueError, match="needs exactly indexer_heads, indexer_head_dim, top_k"):
        _parse({**entry, "sparse": {"top_k": 4}})
    with pytest.raises(ValueError, match=r"Qwen3-Next-80B-A3B has \['linear'\] layers, which are not windows"):
        load_configs()["Qwen3-Next-80B-A3B"].layer_windows()
