"""The atlas page's cards and calculator data (tools/site_build/atlas.py), read from the configs file; no browser.

tests/browser/test_atlas.py runs the calculator's script on the built page; these check what the cards say.
"""

from __future__ import annotations

import re

import atlas

from lessons_src.lab.configs import load_configs


def words(name: str) -> str:
    """The row's recipe on its card, as plain text."""
    return re.sub(r"<[^>]+>", "", "; ".join(atlas.recipe(load_configs()[name])))


def test_a_card_names_each_kind_of_layer_s_rope_where_they_differ() -> None:
    assert "RoPE on 12.5% of each head, base 10,000 in sliding-window layers and base 160,000, yarn ×16 in " \
           "compressed sparse and heavily compressed layers" in words("DeepSeek-V4-Flash")
    assert "RoPE base 160,000, on 12.5% of each head, yarn ×16" in words("DeepSeek-V4-Pro")  # no window-only layer
    assert "RoPE base 10,000 in sliding-window layers and base 1,000,000, linear ×8 in full layers" in words(
        "Gemma 3 27B")
    assert "RoPE base 10,000 in sliding-window layers and base 1,000,000, on 25% of each head in full layers" in words(
        "Gemma 4 31B")
    assert "RoPE base 500,000 in sliding-window layers and base 500,000, yarn ×8 in full layers" in words("OLMo 3 7B")
    assert "RoPE base 150,000, yarn ×32;" in words("gpt-oss-20b") + ";"  # one setting for every layer: said once
    assert "RoPE base 500,000, llama3 ×16 in chunked layers; no rotation in every 4th layer" in words("Llama 4 Scout")


def test_gemma_3_27b_s_card_shows_its_qk_norm() -> None:
    assert "QK-norm (per head)" in words("Gemma 3 27B")


def test_deepseek_v4_s_cards_show_the_window_and_what_the_indexer_ranks() -> None:
    for name in ("DeepSeek-V4-Flash", "DeepSeek-V4-Pro"):  # every V4 layer keeps a window, compressed ones too
        assert "windows of 128 positions in every layer" in words(name)
    assert "top 512 compressed entries per query" in words("DeepSeek-V4-Flash")
    assert "top 2,048 keys per query" in words("DeepSeek-V3.2")


def test_the_calculator_data_gives_each_kind_its_rope() -> None:
    rows = {row["name"]: row for row in atlas.calculator_rows()}
    assert rows["DeepSeek-V4-Flash"]["rope"] == {
        "sliding": "RoPE base 10,000, on 12.5% of each head",
        "compressed_sparse": "RoPE base 160,000, on 12.5% of each head, yarn ×16",
        "heavily_compressed": "RoPE base 160,000, on 12.5% of each head, yarn ×16"}
    assert rows["Llama 4 Scout"]["rope"] == {"chunked": "RoPE base 500,000, llama3 ×16", "full": "no RoPE"}
    assert rows["Qwen3-Next-80B-A3B"]["rope"] == {"full": "RoPE base 10,000,000, on 25% of each head"}
    assert rows["GPT-2 small"]["rope"] == {}  # no rotary positions recorded


def test_the_calculator_offers_the_quantized_formats_at_their_exact_bytes() -> None:
    """Each quantized format the calculator offers is a TileFormat's bytes per number, scales included, and
    DeepSeek-V3.2's layout gives the 656 bytes a token and layer of FlashMLA's FP8 cache."""
    from fractions import Fraction

    from lessons_src.quantized_cache import FP8, Q4_0, Q8_0

    offered = dict(atlas.DTYPES)
    assert {f.bytes_per_number for f in (FP8, Q8_0, Q4_0)} <= {Fraction(v.split("+")[0]) for v in offered.values()}
    layout = next(v for v in offered.values() if "+rope" in v)
    number, rope = layout.split("+rope")
    v3 = load_configs()["DeepSeek-V3"]  # its MLA cache without V3.2's indexer: latent and RoPE only
    one_token = v3.cache_bytes(1, bytes_per_number=Fraction(number), rope_bytes=int(rope))["total"]
    assert one_token == v3.num_layers * (512 + 4 * 4 + 64 * 2) == v3.num_layers * 656
    html = atlas.render_calculator()
    assert all(f'<option value="{v}">' in html for _, v in atlas.DTYPES)
