"""lessons_src.lab.configs: the published configurations file is complete, sourced and self-consistent."""

from __future__ import annotations

import pytest

from lessons_src.lab.configs import load_configs

REQUIRED = ["GPT-2 small", "GPT-2 medium", "GPT-3 175B", "LLaMA 7B", "Llama 2 70B", "Mistral 7B", "Llama 3 8B"]


def test_required_models_present() -> None:
    assert set(REQUIRED) <= set(load_configs())


@pytest.mark.parametrize("name", list(load_configs()))
def test_entry_is_sourced_and_consistent(name: str) -> None:
    cfg = load_configs()[name]
    assert len(cfg.source) > 20 and any(ch.isdigit() for ch in cfg.source)
    assert cfg.num_heads % cfg.num_kv_heads == 0
    assert cfg.head_dim * cfg.num_heads == cfg.d_model or cfg.head_dim_published is not None
    assert cfg.attention_kind in {"MHA", "GQA", "MQA", "MLA"}


def test_known_derived_values() -> None:
    c = load_configs()
    assert c["GPT-3 175B"].head_dim == 128  # stated as d_head in Brown et al. 2020, Table 2.1
    assert c["Mistral 7B"].head_dim == 128 and c["Mistral 7B"].n_rep == 4  # Jiang et al. 2023, Table 1
    assert c["Llama 2 70B"].attention_kind == "GQA" and c["GPT-2 small"].attention_kind == "MHA"
    assert c["DeepSeek-V2"].attention_kind == "MLA"
