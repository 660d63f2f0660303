"""The atlas page's two parts: a card per model family and the KV-cache calculator's markup and data.

Both read ``lessons_src.lab.configs`` only. The calculator's data is each row's published sizes, not its cache
figures: the page's script computes the cache itself, and ``tests/browser/test_atlas.py`` compares its figures
with :meth:`ModelConfig.cache_bytes`, which ``tests/lab/test_configs_cache.py`` checks against real caches.
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass
from typing import Any

from site_links import relative_link

from lessons_src.lab.configs import ModelConfig, load_configs

# The families of 2025-26 the atlas shows, in this order (DeepSeek-V3, of December 2024, is the base of V3.2 and V4).
FAMILIES = ("Qwen3", "Qwen3-Next", "Qwen3.5", "gpt-oss", "Gemma 3", "Gemma 4", "OLMo 3", "Llama 4", "DeepSeek-V3",
            "DeepSeek-V3.2", "DeepSeek-V4", "Kimi K2", "Kimi Linear", "MiniMax M2")

# Where the course teaches each mechanism: the lesson (its source under docs/) and the section, if one. A
# mechanism no lesson teaches yet has no key, and its phrase no link.
LESSONS = {
    "mha": "lessons/split-run-concatenate.md",
    "gqa": "lessons/gqa-mqa.md#grouped-query-and-multi-query-attention",
    "mla": "lessons/mla.md#multi-head-latent-attention-deepseek-v2",
    "sliding": "lessons/sliding-windows.md",
    "chunks": "lessons/positions-at-scale.md#llama-4s-chunked-layers",
    "linear": "lessons/linear-attention.md",
    "indexer": "lessons/choosing-keys.md#a-cheap-score-picks-for-every-head",
    "compress": "lessons/choosing-keys.md#compress-first-then-choose-nsa-and-deepseek-v4",
    "qk-norm": "lessons/scores-in-range.md#qk-norm-bounds-the-scores-by-its-weights",
    "soft-cap": "lessons/scores-in-range.md#a-soft-cap-bends-the-large-scores",
    "sinks": "lessons/sinks-and-gates.md#a-sink-you-can-learn",
    "gate": "lessons/sinks-and-gates.md#a-gate-a-head-that-can-output-nothing",
    "rope": "lessons/positions.md",
    "rope-at-scale": "lessons/positions-at-scale.md",  # partial RoPE and RoPE scaling
    "nope": "lessons/positions-at-scale.md#nope-a-layer-without-positions",
    "k-eq-v": "lessons/shared-kv.md",
}
ATLAS = "reference/atlas.md"
LINEAR_NAMES = {"Gated DeltaNet": "Gated DeltaNet", "KDA": "Kimi Delta Attention"}
KIND_WORDS = {"full": "full", "sliding": "sliding-window", "chunked": "chunked", "linear": "linear",
              "compressed_sparse": "compressed sparse", "heavily_compressed": "heavily compressed",
              "native_sparse": "NSA"}
# A cached number's size: bytes per number, a fraction where scales are shared (llama.cpp's ggml-common.h: block_q8_0
# is 32 int8 and a float16 scale, 34 bytes; block_q4_0 16 bytes of 4-bit codes and the scale, 18), and, after
# "+rope", an MLA cache's RoPE part apart (FlashMLA's FP8 cache for DeepSeek-V3.2: 512 e4m3, four float32 scales,
# 64 bfloat16 RoPE numbers, 656 bytes). lessons_src.quantized_cache's TileFormat.bytes_per_number are these.
DTYPES = (("bfloat16", "2"), ("float32", "4"), ("float8, no scale", "1"),
          ("float8 + float32 scale per 128", "33/32"), ("q8_0: int8 + float16 scale per 32", "34/32"),
          ("q4_0: 4 bits + float16 scale per 32", "18/32"),
          ("DeepSeek-V3.2 FP8: float8 latent, bfloat16 RoPE", "33/32+rope2"))
# What the calculator opens on: a model many readers run on one GPU or a laptop, with two kinds of layer (so the
# first view shows the breakdown), at a context an everyday chat fills, not the model's longest.
DEFAULT_MODEL = "gpt-oss-20b"
DEFAULT_CONTEXT = 8192


def families() -> dict[str, list[ModelConfig]]:
    """The :data:`FAMILIES`, each with all its rows in the file's order (Gemma 3 27B too)."""
    rows = sorted(load_configs().values(), key=lambda c: c.params_billions or 0)  # smallest first, unstated first
    return {family: [c for c in rows if c.family == family] for family in FAMILIES}


def card_id(name: str) -> str:
    """The id of a family's card (``gpt-oss``, ``qwen35``), or of a model's entry (``gemma-3-27b``)."""
    return html.escape(name.lower().replace(" ", "-").replace(".", ""))


def pattern_phrase(cfg: ModelConfig) -> str:
    """``3 linear : 1 full`` for a repeated pattern, ``every layer full`` for one kind, counts for an irregular list."""
    kinds = cfg.layer_kinds()
    if len(set(kinds)) == 1:
        return f"every layer {KIND_WORDS[kinds[0]]}"
    if cfg.layer_pattern and len(cfg.layer_pattern) < cfg.num_layers:
        period = list(cfg.layer_pattern)
        return " : ".join(f"{period.count(k)} {KIND_WORDS[k]}" for k in dict.fromkeys(period))
    return layer_summary(cfg)


def layer_summary(cfg: ModelConfig) -> str:
    """``36 linear, 12 full`` for the row's layers, most common kind first."""
    kinds = cfg.layer_kinds()
    counts = {kind: kinds.count(kind) for kind in dict.fromkeys(kinds)}
    return ", ".join(f"{n} {KIND_WORDS[kind]}" for kind, n in sorted(counts.items(), key=lambda kv: -kv[1]))


def rope_words(setting: dict[str, Any] | None, fraction: bool = True) -> str:
    """``base 160,000, on 12.5% of each head, yarn ×16`` for one kind of layer's setting, ``none`` for no rotation."""
    if setting is None:
        return "none"
    bits = [f"base {setting['theta']:,.0f}"]
    if fraction and setting.get("fraction", 1) != 1:
        bits.append(f"on {setting['fraction'] * 100:g}% of each head")
    if setting.get("scaling"):
        bits.append(f"{setting['scaling']} ×{setting['factor']:g}")
    return ", ".join(bits)


def rope_phrase(cfg: ModelConfig) -> str:
    """The row's rotary positions by kind of layer (plain text): one setting for all, or each with its layers.

    ``base 1,000,000, on 25% of each head`` where every attention layer rotates alike; ``base 10,000 in
    sliding-window layers and base 1,000,000, linear ×8 in full layers`` where they differ (Gemma 3). Layers a
    ``nope_every`` leaves unrotated are left to that phrase; ``""`` where the row records no RoPE.
    """
    if not cfg.rope:
        return ""
    kinds = [kind for kind in dict.fromkeys(cfg.layer_kinds()) if kind != "linear"]
    shown = [kind for kind in kinds if cfg.rope_for(kind) is not None or not cfg.nope_every]
    fractions = {(cfg.rope_for(kind) or {}).get("fraction", 1) for kind in shown if cfg.rope_for(kind)}
    common = len(fractions) == 1 and len(shown) > 1  # said once, before the kinds
    groups: dict[str, list[str]] = {}  # the setting's words: the kinds of layer that use it
    for kind in shown:
        groups.setdefault(rope_words(cfg.rope_for(kind), fraction=not common), []).append(kind)
    if len(groups) == 1 and shown == kinds:
        return rope_words(cfg.rope_for(kinds[0]))
    head = f"on {fractions.pop() * 100:g}% of each head, " if common and fractions != {1} else ""
    return head + " and ".join(f"{words} in {' and '.join(KIND_WORDS[k] for k in ks)} layers"
                               for words, ks in groups.items())


@dataclass(frozen=True)
class Part:
    """One mechanism of a model, as a phrase (plain text) whose ``word`` links to the lesson that teaches it."""

    before: str
    word: str
    after: str
    lesson: str | None  # a key of LESSONS; None: no lesson teaches it yet

    @property
    def text(self) -> str:
        return self.before + self.word + self.after

    def html(self, page: str) -> str:
        """The phrase with its word linked from ``page`` (a source under docs/) to the lesson, when one teaches it."""
        e = html.escape
        if self.lesson is None:
            return e(self.text)
        target, _, anchor = LESSONS[self.lesson].partition("#")
        return f'{e(self.before)}<a href="{relative_link(target, page, anchor)}">{e(self.word)}</a>{e(self.after)}'


def parts(cfg: ModelConfig) -> list[Part]:
    """The row's mechanisms, one :class:`Part` each, in the order a card lists them."""
    out = []
    if cfg.mla:
        key = f"a RoPE key of {cfg.mla['rope_dim']}" if cfg.rope else (
            f"a key of {cfg.mla['rope_dim']}, not rotated (mla_use_nope),")
        out.append(Part("", "MLA", f": a latent of {cfg.mla['kv_latent_dim']} plus {key} cached per token", "mla"))
    else:
        kv = f"{cfg.num_kv_heads} KV head{'s' if cfg.num_kv_heads > 1 else ''}"
        out.append(Part("", cfg.attention_kind, f": {cfg.num_heads} query heads, {kv}",
                        "mha" if cfg.attention_kind == "MHA" else "gqa"))
    if cfg.sliding_window and cfg.compress:  # DeepSeek-V4: a compressed layer keeps a window as well
        out.append(Part("", "windows", f" of {cfg.sliding_window:,} positions in every layer", "sliding"))
    elif cfg.sliding_window and "sliding" in cfg.layer_kinds():
        out.append(Part("", "windows", f" of {cfg.sliding_window:,} positions", "sliding"))
    if cfg.chunk_size:
        out.append(Part("", "chunks", f" of {cfg.chunk_size:,} positions", "chunks"))
    if cfg.global_layers:
        g = cfg.global_layers
        out.append(Part("", "full layers", f": {g.get('num_kv_heads', cfg.num_kv_heads)} KV heads of {g['head_dim']}"
                        + (", keys and values from one projection" if g.get("k_eq_v") else ""), None))
    if cfg.kv_shared_layers:
        out.append(Part(f"the last {cfg.kv_shared_layers} layers reuse earlier layers' keys and values", "", "",
                        None))
    if cfg.linear:
        out.append(Part("", LINEAR_NAMES[cfg.linear["kind"]], f" layers: {cfg.linear['value_heads']} heads, a "
                        f"{cfg.linear['key_dim']}×{cfg.linear['value_dim']} state each", "linear"))
    if cfg.sparse:  # DeepSeek-V4's indexer ranks the pooled entries of its compressed sparse layers
        picked = "compressed entries" if cfg.compress else "keys"
        out.append(Part("a ", "lightning indexer", f": {cfg.sparse['indexer_heads']} heads of "
                        f"{cfg.sparse['indexer_head_dim']}, top {cfg.sparse['top_k']:,} {picked} per query", "indexer"))
    if cfg.compress:  # DeepSeek-V4: shared-KV MQA, its RoPE turned back on the output
        out.append(Part("", "one key that is also the value", ", rotated back on the output", "k-eq-v"))
        out.append(Part("", "keys pooled", " every " + " or ".join(f"{r}" for r in cfg.compress.values())
                        + " positions", "compress"))
    if cfg.qk_norm:
        kind = {"per_head": "per head", "per_head_weightless": "per head, no scale",
                "projection": "over the projection"}[cfg.qk_norm]
        out.append(Part("", "QK-norm", f" ({kind})", "qk-norm"))
    if cfg.attn_softcap:
        out.append(Part("", "soft-cap", f" {cfg.attn_softcap:g}", "soft-cap"))
    if cfg.sinks:
        out.append(Part("", "learned sinks", "", "sinks"))
    if cfg.output_gate:
        out.append(Part("", "output gate", f" ({cfg.output_gate})", "gate"))
    if cfg.rope:
        settings = [cfg.rope_for(kind) or {} for kind in cfg.layer_kinds() if kind != "linear"]
        stretched = any(r.get("scaling") or r.get("fraction", 1) != 1 for r in settings)
        out.append(Part("", "RoPE", f" {rope_phrase(cfg)}", "rope-at-scale" if stretched else "rope"))
    if cfg.nope_every:
        out.append(Part("no rotation in ", f"every {cfg.nope_every}th layer", "", "nope"))
    return out


def recipe(cfg: ModelConfig, page: str = ATLAS) -> list[str]:
    """One phrase (HTML) per mechanism of the row, each linked from ``page`` to the lesson that teaches it."""
    return [part.html(page) for part in parts(cfg)]


def render_cards() -> str:
    """One collapsible card per family: its rows' sizes, each row's recipe, and the sources."""
    e = html.escape
    cards = []
    for family, rows in families().items():
        year, largest = min(c.year for c in rows), rows[-1]  # the summary describes the family's largest model
        head = ("<table><thead><tr><th>model</th><th>heads, KV</th><th>head size</th><th>layers</th>"
                "<th>context</th></tr></thead><tbody>")
        body = "".join(
            f"<tr><td>{e(c.name)}</td><td>{c.num_heads}, {c.num_kv_heads}</td><td>{c.head_dim}</td>"
            f"<td>{layer_summary(c)}</td><td>{f'{c.context_length:,}' if c.context_length else '—'}</td></tr>"
            for c in rows)
        recipes = "".join(f"<li><strong>{e(c.name)}</strong>: {'; '.join(recipe(c))}.</li>" for c in rows)
        sources = "".join(f"<li>{e(c.name)}: {e(c.source)}</li>" for c in rows)
        cards.append(
            f'<details class="abstract" id="{card_id(family)}">'
            f"<summary>{e(family)}, {year}: {largest.attention_kind}, {e(pattern_phrase(largest))}</summary>"
            f"{head}{body}</tbody></table><ul>{recipes}</ul>"
            f'<details class="quote"><summary>Sources</summary><ul>{sources}</ul></details></details>')
    # A line break after each cell, item and title: the search index reads text across tags without a space
    # ("...1 fullmodelheads, KV"), and the break keeps the words apart.
    return re.sub(r"</(summary|th|td|tr|li|table|details)>", r"</\1>\n", "".join(cards))


def calculator_rows() -> list[dict[str, Any]]:
    """Each row's published cache sizes, as the calculator's script reads them."""
    out = []
    for c in load_configs().values():
        out.append({
            "name": c.name, "family": c.family, "context": c.context_length, "kinds": c.layer_kinds(),
            "shared": c.kv_shared_layers, "kv_heads": c.num_kv_heads, "head_dim": c.head_dim,
            "global": c.global_layers, "mla": c.mla, "sparse": c.sparse, "linear": c.linear,
            "compress": c.compress, "window": c.sliding_window, "chunk": c.chunk_size,
            "value_dim": c.value_dim, "native_sparse": c.native_sparse,
            "rope": {kind: f"RoPE {rope_words(c.rope_for(kind))}" if c.rope_for(kind) else "no RoPE"
                     for kind in dict.fromkeys(c.layer_kinds()) if c.rope and kind != "linear"},
        })
    return out


def render_calculator() -> str:
    """The calculator's form, its output region and its data (a hidden element's text, as the live models do)."""
    e = html.escape
    payload = e(json.dumps({"models": calculator_rows()}, separators=(",", ":")), quote=False)
    groups: dict[str, list[str]] = {}
    for c in load_configs().values():
        groups.setdefault(c.family or c.name, []).append(c.name)
    options = "".join(
        f'<optgroup label="{e(family)}">'
        + "".join(f"<option{' selected' if n == DEFAULT_MODEL else ''}>{e(n)}</option>" for n in names)
        + "</optgroup>" for family, names in groups.items())
    dtypes = "".join(f'<option value="{b}">{e(name)}, {e(b.split("+")[0])} B</option>' for name, b in DTYPES)
    return (
        '<div class="kv-calculator" data-kv-calculator>'
        '<div class="kv-inputs" data-search-exclude>'  # controls stay out of the search index and its previews
        f'<label>Model <select name="model">{options}</select></label>'
        '<label>Context, tokens <input name="context" type="number" min="1" step="1" inputmode="numeric" '
        f'value="{DEFAULT_CONTEXT}"></label>'
        '<label>Batch <input name="batch" type="number" min="1" step="1" value="1" inputmode="numeric"></label>'
        f'<label>Cache numbers <select name="dtype">{dtypes}</select></label>'
        "</div>"
        '<div class="kv-output" aria-live="polite"></div>'
        f'<div class="kv-data" hidden data-search-exclude>{payload}</div>'
        "</div>"
    )
