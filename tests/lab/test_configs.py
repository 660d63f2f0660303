"""lessons_src.lab.configs: the published configurations file is complete, sourced and self-consistent."""

from __future__ import annotations

import re

import pytest

from lessons_src.lab.configs import ModelConfig, load_configs

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


def test_optional_published_fields() -> None:
    c = load_configs()
    # Jiang et al. 2023, Table 1 (window_size 4096); the others attend to every position.
    assert c["Mistral 7B"].sliding_window == 4096
    assert c["Llama 3 8B"].sliding_window is None
    # Touvron et al. 2023, Table 2: LLaMA 7B has 6.7B parameters; Brown et al. 2020, Table 2.1: 175.0B.
    assert c["LLaMA 7B"].params_billions == 6.7
    assert c["GPT-3 175B"].params_billions == 175.0
    for cfg in c.values():  # every optional number is named in the entry's source text
        if cfg.sliding_window is not None:
            assert str(cfg.sliding_window) in cfg.source
        if cfg.params_billions is not None:
            assert f"{cfg.params_billions}B" in cfg.source


def test_cache_of_a_windowed_model_is_bounded_by_its_window() -> None:
    c = load_configs()
    mistral, llama = c["Mistral 7B"], c["Llama 3 8B"]
    assert mistral.cached_positions(100) == 100
    assert mistral.cached_positions(131072) == mistral.sliding_window
    assert llama.cached_positions(131072) == 131072
    with pytest.raises(ValueError, match="context must be a non-negative int"):
        mistral.cached_positions(-1)


def test_bad_optional_fields_are_rejected() -> None:
    from lessons_src.lab.configs import _parse

    entry = {"name": "x", "year": 2024, "d_model": 64, "num_heads": 4, "num_kv_heads": 4, "num_layers": 2,
             "source": "a made-up entry, 2024"}
    assert _parse(entry).sliding_window is None
    with pytest.raises(ValueError, match="sliding_window=0"):
        _parse({**entry, "sliding_window": 0})
    with pytest.raises(ValueError, match="params_billions=-1"):
        _parse({**entry, "params_billions": -1})


def published(cfg: ModelConfig, field: str) -> object:
    """The value of one of our fields: ``"linear.key_heads"`` reads inside ``linear``; MLA sizes live in ``mla``."""
    if "." in field:
        group, key = field.split(".")
        return getattr(cfg, group)[key]
    return cfg.mla[field] if cfg.mla and field in cfg.mla else getattr(cfg, field)


@pytest.mark.parametrize("name", list(load_configs()))
def test_card_names_are_the_sources_own_with_their_values(name: str) -> None:
    # "card_names" claims to be what the source calls each field: the source text must name it beside its value
    # (BERT's paper says H=768, A=12; Gemma 2's table says head size 128; a config.json says hidden_size=4096).
    cfg = load_configs()[name]
    assert {"d_model", "num_heads", "num_layers"} <= set(cfg.card_names)
    for field, card_name in cfg.card_names.items():
        value = published(cfg, field)
        named = re.search(rf"(?<!\w){re.escape(card_name)}\s*[=: ]\s*{value}\b", cfg.source)
        assert named, f"{name}: the source does not name {card_name!r} = {value}: {cfg.source}"
    if cfg.head_dim_published is not None and not cfg.mla:
        assert "head_dim" in cfg.card_names, f"{name} states its own head size: the card must show that field"


def unsourced_numbers(cfg: ModelConfig) -> list[object]:
    """The row's window, chunk, cap, rotary, indexer, linear and shared-layer numbers its source does not state."""
    numbers = [cfg.sliding_window, cfg.chunk_size, cfg.attn_softcap, cfg.nope_every,
               cfg.kv_shared_layers or None, *(cfg.sparse or {}).values(), *(cfg.global_layers or {}).values()]
    numbers += [value for key, value in (cfg.linear or {}).items() if key != "kind"]
    numbers += [*(cfg.native_sparse or {}).values(), cfg.value_dim_published]
    numbers += [value for setting in (cfg.rope or {}).values() for key, value in (setting or {}).items()
                if key in ("theta", "factor", "original_context")]
    return [n for n in numbers if n is not None and not isinstance(n, bool)
            and not re.search(rf"(?<![\w.]){n}(?![\w])", cfg.source)]


@pytest.mark.parametrize("name", list(load_configs()))
def test_every_recipe_number_is_in_the_source(name: str) -> None:
    assert unsourced_numbers(load_configs()[name]) == []


def test_the_recipe_check_refuses_a_number_its_source_does_not_state() -> None:
    import dataclasses

    gpt = load_configs()["gpt-oss-20b"]  # its window, 128, is in its source; 1280 and 12 are not
    assert unsourced_numbers(dataclasses.replace(gpt, sliding_window=1280)) == [1280]
    assert unsourced_numbers(dataclasses.replace(gpt, sliding_window=12)) == [12]
    qwen = load_configs()["Qwen3-Next-80B-A3B"]
    assert unsourced_numbers(dataclasses.replace(qwen, linear={**(qwen.linear or {}), "value_heads": 33})) == [33]


# The families of 2025-26 that issue 52 asks the atlas for (DeepSeek-V3 appeared on 26 December 2024).
TODAYS_FAMILIES = {"Qwen3", "Qwen3-Next", "Qwen3.5", "gpt-oss", "Gemma 3", "Gemma 4", "OLMo 3", "Llama 4",
                   "DeepSeek-V3", "DeepSeek-V3.2", "DeepSeek-V4", "Kimi K2", "Kimi Linear", "MiniMax M2"}


def test_todays_families_are_all_in_the_file() -> None:
    families = {cfg.family for cfg in load_configs().values()}
    assert families >= TODAYS_FAMILIES, TODAYS_FAMILIES - families
    assert all(cfg.family for cfg in load_configs().values())


def test_recipes_of_todays_models() -> None:
    """Each mechanism sits on the rows whose sources show it, and nowhere else (see the sources in the file)."""
    c = load_configs().values()
    assert {x.name for x in c if x.sinks} == {"gpt-oss-20b", "gpt-oss-120b"}
    assert {x.family for x in c if x.output_gate} == {"Qwen3-Next", "Qwen3.5", "Kimi Linear"}
    assert {x.family for x in c if x.attn_softcap} == {"Gemma 2"}
    assert {x.family for x in c if x.sparse} == {"DeepSeek-V3.2", "DeepSeek-V4"}
    assert {x.family for x in c if x.linear} == {"Qwen3-Next", "Qwen3.5", "Kimi Linear"}
    assert {x.name for x in c if x.kv_shared_layers} == {"Gemma 4 E2B"}
    assert {x.name for x in c if x.qk_norm == "projection"} == {"OLMo 3 7B", "MiniMax-M2"}
    assert {x.name for x in c if x.nope_every} == {"Llama 4 Scout"}


def test_derived_sizes_of_todays_models() -> None:
    c = load_configs()
    assert c["OLMo 3 7B"].head_dim == 4096 // 32 and c["OLMo 3 7B"].head_dim_published is None  # derived, as OLMo-core
    assert c["gpt-oss-20b"].head_dim == 64 and c["gpt-oss-20b"].head_dim * c["gpt-oss-20b"].num_heads != 2880
    assert c["gpt-oss-120b"].n_rep == 8 and c["Gemma 3 1B"].attention_kind == "MQA"
    assert c["Qwen3-Next-80B-A3B"].layer_kinds().count("full") == 48 // 4
    assert c["Kimi Linear 48B-A3B"].layer_kinds().count("linear") == 20
    assert c["DeepSeek-V3.2"].attention_kind == "MLA" and c["DeepSeek-V3.2"].sparse == {
        "indexer_heads": 64, "indexer_head_dim": 128, "top_k": 2048}


def test_context_lengths_are_published_and_sourced() -> None:
    c = load_configs()
    # Touvron et al. 2023 (Llama 2), Table 1: LLaMA 1 2k, Llama 2 4k; the Llama 3 configs: 8192; DeepSeek-V2: 128K.
    expected = {"LLaMA 7B": 2048, "Llama 2 70B": 4096, "Mistral 7B": 8192, "Llama 3 8B": 8192, "Llama 3 70B": 8192,
                "Gemma 2 27B": 8192, "Gemma 3 27B": 131072, "DeepSeek-V2": 131072}
    assert {name: c[name].context_length for name in expected} == expected
    for cfg in c.values():
        if cfg.context_length is not None:
            assert str(cfg.context_length) in cfg.source, cfg.name


# Each row's rotary setting by kind of layer, as (base, fraction of each head rotated, scaling), from the sources the
# file quotes: Gemma 3 and 4 rotate their local layers at base 10,000 over the whole head
# (google-deepmind/gemma@7691fd4e local_base_frequency; Gemma 4's rope_parameters.sliding_attention); DeepSeek-V4 its
# compressed layers at compress_rope_theta=160000 with YaRN and its window-only layers at rope_theta=10000 unscaled
# (transformers 5.23, configuration_deepseek_v4.py and rope_layer_type in modeling_deepseek_v4.py); OLMo 3 stretches
# its full layers only (OLMo-core@fa6c5014, with_rope_scaling(full_attn_layers_only=True)); Llama 4 leaves its full
# layers unrotated.
V4_COMPRESSED = (160000, 0.125, "yarn")
GEMMA3_GLOBAL = (1000000, 1, "linear")
ROPE_BY_KIND = {
    "DeepSeek-V4-Flash": {"sliding": (10000, 0.125, None), "compressed_sparse": V4_COMPRESSED,
                          "heavily_compressed": V4_COMPRESSED},
    "DeepSeek-V4-Pro": {"compressed_sparse": V4_COMPRESSED, "heavily_compressed": V4_COMPRESSED},
    "Gemma 3 1B": {"sliding": (10000, 1, None), "full": (1000000, 1, None)},
    "Gemma 3 4B": {"sliding": (10000, 1, None), "full": GEMMA3_GLOBAL},
    "Gemma 3 12B": {"sliding": (10000, 1, None), "full": GEMMA3_GLOBAL},
    "Gemma 3 27B": {"sliding": (10000, 1, None), "full": GEMMA3_GLOBAL},
    "Gemma 4 E2B": {"sliding": (10000, 1, None), "full": (1000000, 0.25, None)},
    "Gemma 4 26B-A4B": {"sliding": (10000, 1, None), "full": (1000000, 0.25, None)},
    "Gemma 4 31B": {"sliding": (10000, 1, None), "full": (1000000, 0.25, None)},
    "OLMo 3 7B": {"sliding": (500000, 1, None), "full": (500000, 1, "yarn")},
    "gpt-oss-20b": {"sliding": (150000, 1, "yarn"), "full": (150000, 1, "yarn")},
    "Llama 4 Scout": {"chunked": (500000, 1, "llama3"), "full": None},
    "Qwen3-Next-80B-A3B": {"full": (10000000, 0.25, None)},  # its linear layers have no positions
}


@pytest.mark.parametrize("name", ROPE_BY_KIND)
def test_each_kind_of_layer_has_its_own_rope(name: str) -> None:
    cfg = load_configs()[name]
    got = {}
    for kind in dict.fromkeys(cfg.layer_kinds()):
        setting = cfg.rope_for(kind)
        if kind != "linear":
            got[kind] = setting and (setting["theta"], setting.get("fraction", 1), setting.get("scaling"))
    assert got == ROPE_BY_KIND[name]
    assert cfg.rope_for("linear") is None


def test_gemma_3_27b_has_its_siblings_recipe() -> None:
    """Google DeepMind's Gemma3_27B sets QK-norm and the same bases as the 4B and 12B models (issue 72)."""
    c = load_configs()
    assert c["Gemma 3 27B"].qk_norm == c["Gemma 3 12B"].qk_norm == "per_head"
    assert c["Gemma 3 27B"].rope == c["Gemma 3 12B"].rope
    assert "class Gemma3_27B" in c["Gemma 3 27B"].source and "1/sqrt(5376/32)" in c["Gemma 3 27B"].source


def test_a_rope_without_every_kind_of_layer_is_refused() -> None:
    from lessons_src.lab.configs import _parse

    entry = {"name": "x", "year": 2025, "d_model": 64, "num_heads": 4, "num_kv_heads": 4, "num_layers": 4,
             "sliding_window": 8, "layer_pattern": ["sliding", "full"], "source": "a made-up entry, 2025"}
    both = {"sliding": {"theta": 10000}, "full": {"theta": 1000000, "scaling": "linear", "factor": 8.0}}
    assert _parse({**entry, "rope": both}).rope_for("sliding") == {"theta": 10000}
    with pytest.raises(ValueError, match=r"layer kinds \['full'\]; it needs exactly .*\['full', 'sliding'\]"):
        _parse({**entry, "rope": {"full": both["full"]}})  # the local layers' base lost
    with pytest.raises(ValueError, match=r"rope gives the layer kinds \['theta'\]"):
        _parse({**entry, "rope": {"theta": 10000}})  # one setting for every layer: not a setting per kind
    with pytest.raises(ValueError, match=r"rope gives the layer kinds \['chunked', 'full', 'sliding'\]"):
        _parse({**entry, "rope": {**both, "chunked": {"theta": 10000}}})  # a kind the model does not have
    bad = [{"theta": 0}, {"theta": 10000, "fraction": 1.5}, {"theta": 10000, "scaling": "ntk", "factor": 2.0},
           {"theta": 10000, "scaling": "yarn", "factor": 8.0}, {"theta": 10000, "factor": 8.0},
           {"theta": 10000, "scaling": "linear", "factor": 8.0, "original_context": 4096}, {"base": 10000}]
    for setting in bad:
        with pytest.raises(ValueError, match=r"rope\['sliding'\]=.* needs a positive theta"):
            _parse({**entry, "rope": {**both, "sliding": setting}})
    with pytest.raises(ValueError, match="kind='global' is not a layer kind"):
        _parse({**entry, "rope": both}).rope_for("global")


def test_nope_every_and_the_unrotated_kind_agree() -> None:
    from lessons_src.lab.configs import _parse

    scout = load_configs()["Llama 4 Scout"]
    entry = {"name": "x", "year": 2025, "d_model": 64, "num_heads": 4, "num_kv_heads": 4, "num_layers": 8,
             "chunk_size": 8, "layer_pattern": ["chunked", "chunked", "chunked", "full"], "nope_every": 4,
             "source": "a made-up entry, 2025"}
    assert _parse({**entry, "rope": scout.rope}).rope_for("full") is None
    with pytest.raises(ValueError, match=r"nope_every=4 leaves layers \[4, 8\]\.\.\. unrotated, but rope leaves \[\]"):
        _parse({**entry, "rope": {**(scout.rope or {}), "full": {"theta": 500000.0}}})
