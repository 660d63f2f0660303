"""The atlas page's KV-cache calculator against ModelConfig.cache_bytes, which tests/lab/test_configs_cache.py checks
against the package's own caches (and transformers' where the package has none).

The comparison runs the page's own script over every model of the configs file at contexts below, at and past
each window, chunk and pooling size; a copy of the script with one formula planted wrong must fail it.
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import atlas
from browser_support import goto

from lessons_src.lab.configs import load_configs

SCRIPT = Path(__file__).resolve().parents[2] / "docs" / "assets" / "js" / "kv-calculator.js"
CONTEXTS = (1, 100, 127, 128, 129, 4097, 8192, 131072, 1048576)
# bytes per number: whole, a quantized format's fraction, and DeepSeek-V3.2's layout (its RoPE part apart)
SIZES = ((1, 2), (3, 1), (2, 4), (1, "34/32"), (3, "18/32"), (2, "33/32+rope2"))
SETTINGS = [(context, batch, size) for context in CONTEXTS for batch, size in SIZES]


def package_size(size: int | str) -> dict[str, Any]:
    """The page's number format as ModelConfig.cache_bytes's arguments: "33/32+rope2" is Fraction(33, 32), 2."""
    if isinstance(size, int):
        return {"bytes_per_number": size}
    number, _, rope = size.partition("+rope")
    return {"bytes_per_number": Fraction(number), "rope_bytes": int(rope) if rope else None}


def mismatches(page: Any) -> list[str]:
    """Every (model, context, batch, bytes) where the page's cacheBytes differs from ModelConfig.cache_bytes."""
    models = json.loads(page.locator(".kv-data").text_content())["models"]
    theirs = page.evaluate(
        "([models, settings]) => models.map(m => settings.map(([c, b, s]) =>"
        " window.kvCalculator.cacheBytes(m, c, b, s)))", [models, SETTINGS])
    out = []
    for m, per_setting in zip(models, theirs, strict=True):
        cfg = load_configs()[m["name"]]
        for (context, batch, size), got in zip(SETTINGS, per_setting, strict=True):
            want = cfg.cache_bytes(context, batch=batch, **package_size(size))
            if got != want:
                out.append(f"{m['name']} at {context} tokens, batch {batch}, {size} B: page {got}, package {want}")
    return out


def open_atlas(page: Any, server: str, query: str = "") -> None:
    goto(page, server + "reference/atlas/" + query)
    page.wait_for_function("() => window.kvCalculator && document.querySelector('.kv-total')")


def test_the_calculator_agrees_with_the_package_and_a_planted_wrong_formula_does_not(page: Any, server: str) -> None:
    """Every model agrees; then a copy of the script whose window does not cap the cache (the commonest slip) must
    disagree, and on exactly the windowed and chunked models (one page load for both halves)."""
    open_atlas(page, server)
    opened = {name: page.locator(f".kv-calculator [name={name}]").input_value() for name in ("model", "context")}
    assert opened == {"model": atlas.DEFAULT_MODEL, "context": str(atlas.DEFAULT_CONTEXT)}  # an everyday model
    shown = page.locator(".kv-output").text_content()  # each figure says whether it is one layer's or all of them
    kinds = len(set(load_configs()[atlas.DEFAULT_MODEL].layer_kinds()))
    assert shown.count(": per layer, ") == shown.count("; in all ") == kinds > 1 and "Total, every layer: " in shown
    models = json.loads(page.locator(".kv-data").text_content())["models"]
    assert models == atlas.calculator_rows()  # the page's data is the configs file's, every row
    assert [m["name"] for m in models] == list(load_configs())
    assert mismatches(page) == []
    source = SCRIPT.read_text(encoding="utf-8")
    right = '(kind === "sliding" ? m.window : m.chunk) || context)'
    assert source.count(right) == 1
    page.add_script_tag(content=source.replace(right, "context)"))
    found = mismatches(page)
    windowed = {name for name, cfg in load_configs().items() if {"sliding", "chunked"} & set(cfg.layer_kinds())}
    assert {line.split(" at ")[0] for line in found} == windowed, found


def test_the_state_lives_in_the_url_and_the_page_shows_the_total(page: Any, server: str) -> None:
    open_atlas(page, server, "?model=gpt-oss-20b&context=5000&batch=2&dtype=4")
    form = {name: page.locator(f".kv-calculator [name={name}]").input_value()
            for name in ("model", "context", "batch", "dtype")}
    assert form == {"model": "gpt-oss-20b", "context": "5000", "batch": "2", "dtype": "4"}
    want = load_configs()["gpt-oss-20b"].cache_bytes(5000, batch=2, bytes_per_number=4)["total"]
    total = page.locator(".kv-total").text_content()
    assert f"({want:,} bytes" in total
    page.locator(".kv-calculator [name=model]").select_option("Qwen3-Next-80B-A3B")
    page.locator(".kv-calculator [name=context]").fill("65536")
    assert page.evaluate("location.search") == "?model=Qwen3-Next-80B-A3B&context=65536&batch=2&dtype=4"
    want = load_configs()["Qwen3-Next-80B-A3B"].cache_bytes(65536, batch=2, bytes_per_number=4)
    assert f"({want['total']:,} bytes" in page.locator(".kv-total").text_content()
    linear = load_configs()["Qwen3-Next-80B-A3B"].layer_kinds().count("linear")
    assert f"linear</strong>, {linear} layers" in page.locator(".kv-output").inner_html()
    rope = load_configs()["Qwen3-Next-80B-A3B"].rope_for("full") or {}  # each kind's line ends with its rotation
    assert f"; RoPE {atlas.rope_words(rope)}</li>" in page.locator(".kv-output").inner_html()
    page.locator(".kv-calculator [name=batch]").fill("0")
    assert "at least 1" in page.locator(".kv-output").text_content()
