"""The atlas page's two parts: a card per model family and the KV-cache calculator's markup and data.

Both read ``lessons_src.lab.configs`` only. The calculator's data is each row's published sizes, not its cache
figures: the page's script computes the cache itself, and ``tests/browser/test_atlas.py`` compares its figures
with :meth:`ModelConfig.cache_bytes`, which ``tests/test_configs_cache.py`` checks against real caches.
"""

from __future__ import annotations

import html
import json
from typing import Any

from lessons_src.lab.configs import ModelConfig, load_configs

# The families of 2025-26 the atlas shows, in this order (DeepSeek-V3, of December 2024, is the base of V3.2 and V4).
FAMILIES = ("Qwen3", "Qwen3-Next", "Qwen3.5", "gpt-oss", "Gemma 3", "Gemma 4", "OLMo 3", "Llama 4", "DeepSeek-V3",
            "DeepSeek-V3.2", "DeepSeek-V4", "Kimi K2", "Kimi Linear", "MiniMax M2")

# Where the course teaches each mechanism, as links from the atlas's URL (reference/atlas/); a mechanism it does
# not teach yet cites its paper.
LESSONS = {
    "gqa": "../../lessons/gqa-mqa/",
    "mla": "../../lessons/mla/",
    "sliding": "../../lessons/sliding-windows/",
    "scores": "../../lessons/scores-in-range/",
    "sinks": "../../lessons/sinks-and-gates/",
    "positions": "../../lessons/positions-at-scale/",
}
PAPERS = {  # the link's text, and the paper (Yang et al. 2024; Kimi Team 2025; DeepSeek-AI 2025)
    "Gated DeltaNet": ("Gated DeltaNet", "https://arxiv.org/abs/2412.06464"),
    "KDA": ("Kimi Delta Attention", "https://arxiv.org/abs/2510.26692"),
    "indexer": ("lightning indexer", "https://arxiv.org/abs/2512.02556"),
}
KIND_WORDS = {"full": "full", "sliding": "sliding-window", "chunked": "chunked", "linear": "linear",
              "compressed_sparse": "compressed sparse", "heavily_compressed": "heavily compressed",
              "native_sparse": "NSA"}
DTYPES = (("bfloat16", 2), ("float32", 4), ("float8", 1))
DEFAULT_MODEL = "Qwen3-Next-80B-A3B"  # two kinds of layer, so the first view shows the breakdown


def families() -> dict[str, list[ModelConfig]]:
    """The :data:`FAMILIES`, each with all its rows in the file's order (Gemma 3 27B too)."""
    rows = sorted(load_configs().values(), key=lambda c: c.params_billions or 0)  # smallest first, unstated first
    return {family: [c for c in rows if c.family == family] for family in FAMILIES}


def pattern_phrase(cfg: ModelConfig) -> str:
    """``3 linear : 1 full`` for a repeated pattern, ``every layer full`` for one kind, counts for an irregular list."""
    kinds = cfg.layer_kinds()
    if len(set(kinds)) == 1:
        return f"every layer {KIND_WORDS[kinds[0]]}"
    if cfg.layer_pattern and len(cfg.layer_pattern) < cfg.num_layers:
        period = list(cfg.layer_pattern)
        return " : ".join(f"{period.count(k)} {KIND_WORDS[k]}" for k in dict.fromkeys(period))
    return layer_summary(cfg)


def link(text: str, key: str) -> str:
    return f'<a href="{LESSONS[key]}">{html.escape(text)}</a>'


def paper(key: str) -> str:
    title, url = PAPERS[key]
    return f'<a href="{url}">{html.escape(title)}</a>'


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


def recipe(cfg: ModelConfig) -> list[str]:
    """One phrase (HTML) per mechanism of the row, each linked to the lesson that teaches it or to its paper."""
    out = []
    if cfg.mla:
        key = f"a RoPE key of {cfg.mla['rope_dim']}" if cfg.rope else (
            f"a key of {cfg.mla['rope_dim']}, not rotated (mla_use_nope),")
        out.append(f"{link('MLA', 'mla')}: a latent of {cfg.mla['kv_latent_dim']} plus {key} cached per token")
    else:
        kv = f"{cfg.num_kv_heads} KV head{'s' if cfg.num_kv_heads > 1 else ''}"
        out.append(f"{link(cfg.attention_kind, 'gqa')}: {cfg.num_heads} query heads, {kv}")
    if cfg.sliding_window and cfg.compress:  # DeepSeek-V4: a compressed layer keeps a window as well
        out.append(f"{link('windows', 'sliding')} of {cfg.sliding_window:,} positions in every layer")
    elif cfg.sliding_window and "sliding" in cfg.layer_kinds():
        out.append(f"{link('windows', 'sliding')} of {cfg.sliding_window:,} positions")
    if cfg.chunk_size:
        out.append(f"{link('chunks', 'positions')} of {cfg.chunk_size:,} positions")
    if cfg.global_layers:
        g = cfg.global_layers
        out.append(f"full layers: {g.get('num_kv_heads', cfg.num_kv_heads)} KV heads of {g['head_dim']}"
                   + (", keys and values from one projection" if g.get("k_eq_v") else ""))
    if cfg.kv_shared_layers:
        out.append(f"the last {cfg.kv_shared_layers} layers reuse earlier layers' keys and values")
    if cfg.linear:
        out.append(f"{paper(cfg.linear['kind'])} layers: {cfg.linear['value_heads']} heads, a "
                   f"{cfg.linear['key_dim']}×{cfg.linear['value_dim']} state each")
    if cfg.sparse:  # DeepSeek-V4's indexer ranks the pooled entries of its compressed sparse layers
        picked = "compressed entries" if cfg.compress else "keys"
        out.append(f"a {paper('indexer')}: {cfg.sparse['indexer_heads']} heads of "
                   f"{cfg.sparse['indexer_head_dim']}, top {cfg.sparse['top_k']:,} {picked} per query")
    if cfg.compress:
        out.append("keys pooled every " + " or ".join(f"{r}" for r in cfg.compress.values()) + " positions")
    if cfg.qk_norm:
        kind = {"per_head": "per head", "per_head_weightless": "per head, no scale",
                "projection": "over the projection"}[cfg.qk_norm]
        out.append(f"{link('QK-norm', 'scores')} ({kind})")
    if cfg.attn_softcap:
        out.append(f"{link('soft-cap', 'scores')} {cfg.attn_softcap:g}")
    if cfg.sinks:
        out.append(link("learned sinks", "sinks"))
    if cfg.output_gate:
        out.append(f"{link('output gate', 'sinks')} ({cfg.output_gate})")
    if cfg.rope:
        out.append(f"{link('RoPE', 'positions')} {html.escape(rope_phrase(cfg))}")
    if cfg.nope_every:
        out.append(f"no rotation in every {cfg.nope_every}th layer")
    return out


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
            f'<details class="abstract" id="{e(family.lower().replace(" ", "-").replace(".", ""))}">'
            f"<summary>{e(family)}, {year}: {largest.attention_kind}, {e(pattern_phrase(largest))}</summary>"
            f"{head}{body}</tbody></table><ul>{recipes}</ul>"
            f'<details class="quote"><summary>Sources</summary><ul>{sources}</ul></details></details>')
    return "".join(cards)


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
    dtypes = "".join(f'<option value="{b}">{name}, {b} B</option>' for name, b in DTYPES)
    return (
        '<div class="kv-calculator" data-kv-calculator>'
        '<div class="kv-inputs" data-search-exclude>'  # controls stay out of the search index and its previews
        f'<label>Model <select name="model">{options}</select></label>'
        '<label>Context, tokens <input name="context" type="number" min="1" step="1" inputmode="numeric"></label>'
        '<label>Batch <input name="batch" type="number" min="1" step="1" value="1" inputmode="numeric"></label>'
        f'<label>Cache numbers <select name="dtype">{dtypes}</select></label>'
        "</div>"
        '<div class="kv-output" aria-live="polite"></div>'
        f'<div class="kv-data" hidden data-search-exclude>{payload}</div>'
        "</div>"
    )
