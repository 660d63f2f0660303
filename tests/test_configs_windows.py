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


@pytest.mark.parametrize(("name", "module", "config_class"), [
    ("Gemma 2 27B", "gemma2", "Gemma2Config"),
    ("Gemma 3 27B", "gemma3", "Gemma3TextConfig"),
])
def test_layer_pattern_matches_transformers(name: str, module: str, config_class: str) -> None:
    """transformers builds the same local/global layer list from the layer count (its default pattern)."""
    import importlib

    cfg = load_configs()[name]
    hf_class = getattr(importlib.import_module(f"transformers.models.{module}"), config_class)
    hf = hf_class(num_hidden_layers=cfg.num_layers)
    ours = ["full_attention" if w is None else "sliding_attention" for w in cfg.layer_windows()]
    assert ours == list(hf.layer_types)


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
    with pytest.raises(ValueError, match="global_every=2 needs a sliding_window"):
        _parse({**entry, "global_every": 2})
    with pytest.raises(ValueError, match="global_every=1 needs a sliding_window and must be at least 2"):
        _parse({**entry, "sliding_window": 8, "global_every": 1})
    with pytest.raises(ValueError, match="context_length=0 must be a positive"):
        _parse({**entry, "context_length": 0})
