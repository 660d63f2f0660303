"""MkDocs hook and page helpers for "Run the model yourself" (docs/practice/live-model.md).

The page runs the committed induction model (``lessons_src/lab/artifacts/induction_model.safetensors``) in
the reader's browser (``docs/assets/js/live-model.js``). This module:

* exports the checkpoint's tensors as one little-endian float32 file plus a small JSON of names, shapes,
  offsets and the model's config: ``site/assets/models/induction-<hash>.bin`` and ``.json``, where
  ``<hash>`` is the start of the SHA-256 of both (a new checkpoint gets a new name, so no browser keeps a
  stale copy). The bytes depend only on the checkpoint, so two builds are identical;
* renders the page's widget (:func:`render_widget`): controls, an empty stage the script fills, and the
  presets, with the lesson's findings (previous-token and induction heads) computed at build time by
  ``lessons_src.lab.toy_models.induction_scores`` and ``find_circuit``, never typed;
* replaces the placeholder :data:`MODEL_URL_PLACEHOLDER` in the page with the model's URL relative to the
  page, so the site works under any base path (GitHub Pages' sub-path included).

``tests/site/test_live_model_export.py`` reads the exported files back and compares them with the checkpoint.
"""

from __future__ import annotations

import hashlib
import html
import json
import math
import struct
import sys
from functools import cache
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling modules

import model_files

MODEL_URL_PLACEHOLDER = "@live-model-json@"


@cache
def export() -> tuple[bytes, dict[str, Any], str]:
    """The checkpoint as ``(float32 bytes, metadata, file stem)``.

    Every tensor of the state dict is written row-major, in the state dict's order; the metadata lists
    each tensor's name, shape and offset (in float32 elements) and the model's config.
    """
    import torch

    from lessons_src.lab.toy_models import load_induction_model

    model = load_induction_model()
    cfg = model.cfg
    if cfg.d_ff != 0 or cfg.num_outputs is not None:
        raise ValueError(f"the browser model is attention-only next-token prediction; got {cfg}")
    state = model.state_dict()
    expected = [
        "embed.weight",
        "pos_embed.weight",
        *[f"attns.{i}.{p}.weight" for i in range(cfg.num_layers) for p in ("qkv_proj", "out_proj")],
        "unembed.weight",
    ]
    if list(state) != expected:
        raise ValueError(f"unexpected tensors in the checkpoint: {list(state)}; the browser model reads {expected}")
    chunks, tensors, offset = [], [], 0
    for name, t in state.items():
        values = t.detach().to("cpu", torch.float32).flatten().tolist()  # row-major
        chunks.append(struct.pack(f"<{len(values)}f", *values))  # float32 values: packed exactly
        tensors.append({"name": name, "shape": list(t.shape), "offset": offset})
        offset += len(values)
    data = b"".join(chunks)
    meta: dict[str, Any] = {
        "format": "float32 little-endian, row-major, tensors concatenated",
        "config": {
            "vocab_size": cfg.vocab_size,
            "d_model": cfg.d_model,
            "num_heads": cfg.num_heads,
            "num_layers": cfg.num_layers,
            "max_len": cfg.max_len,
            "causal": cfg.causal,
            "head_dim": cfg.d_model // cfg.num_heads,
        },
        "tensors": tensors,
        "num_floats": offset,
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    digest = hashlib.sha256(data + json.dumps(meta, sort_keys=True).encode()).hexdigest()[:12]
    stem = f"induction-{digest}"
    meta["weights"] = f"{stem}.bin"
    return data, meta, stem


def meta_bytes() -> bytes:
    _, meta, _ = export()
    return (json.dumps(meta, sort_keys=True, separators=(",", ":")) + "\n").encode()


@cache
def findings() -> dict[str, Any]:
    """The lesson's circuit, found by its own scores on the committed model."""
    from lessons_src.lab import read_artifact_json, toy_models

    model = toy_models.load_induction_model()
    scores = toy_models.induction_scores(model)
    circuit = toy_models.find_circuit(scores)
    log = read_artifact_json("induction_training.json")
    return {
        "previous": circuit["previous-token heads"],
        "induction": circuit["induction heads"],
        "previous_scores": [round(float(s), 2) for s in scores["previous"][0]],
        "prefix_scores": [round(float(s), 2) for s in scores["prefix matching"][1]],
        "best_induction": int(scores["prefix matching"][1].argmax()),
        "min_seg": int(log["min_seg"]),
        "max_seg": int(log["max_seg"]),
    }


def head_name(layer: int, head: int) -> str:
    return f"L{layer}H{head}"


@cache
def presets() -> list[dict[str, Any]]:
    """Token sequences and switched-off heads for the preset buttons, computed from the model and its log."""
    import torch

    from lessons_src.lab.toy_models import load_induction_model, repeated_random_tokens

    cfg = load_induction_model().cfg
    f = findings()
    V, T_max = cfg.vocab_size, cfg.max_len
    trained = (f["min_seg"] + f["max_seg"]) // 2  # a segment length in the middle of the trained range
    repeat = repeated_random_tokens(trained, V, seed=1)[0].tolist()
    short_n = max(2, f["min_seg"] // 2)
    short = repeated_random_tokens(short_n, V, seed=2)[0].tolist()
    short = (short[:short_n] * (T_max // short_n))[:T_max]
    long_n = f["max_seg"] + (T_max - f["max_seg"]) // 4  # longer than any trained segment
    g = torch.Generator().manual_seed(3)
    first = torch.randint(0, V, (long_n,), generator=g).tolist()
    long = (first + first)[:T_max]
    no_repeat = torch.randperm(V, generator=torch.Generator().manual_seed(4))[: min(V, 2 * trained)].tolist()
    prev = [head_name(0, h) for h in f["previous"]]
    ind = [head_name(1, h) for h in f["induction"]]
    best = head_name(1, f["best_induction"])
    return [
        {"id": "induction", "label": f"Repeat, {trained} tokens twice", "tokens": repeat, "off": [],
         "text": f"{trained} random tokens, then the same {trained} again: a segment length inside the trained "
                 f"range ({f['min_seg']} to {f['max_seg']}). Every head on."},
        {"id": "no-previous-token-head", "label": f"Switch off the previous-token head ({', '.join(prev)})",
         "tokens": repeat, "off": prev,
         "text": f"The same repeat with the previous-token head{'s' if len(prev) != 1 else ''} "
                 f"{', '.join(prev)} switched off: the induction heads lose what they match on."},
        {"id": "no-induction-heads", "label": f"Switch off the induction heads ({', '.join(ind)})",
         "tokens": repeat, "off": ind,
         "text": f"The same repeat with every induction head of layer 1 ({', '.join(ind)}) switched off."},
        {"id": "one-induction-head-off", "label": f"Switch off one induction head ({best})",
         "tokens": repeat, "off": [best],
         "text": f"Only {best}, the head with the highest prefix-matching score, switched off: "
                 "the others share the copying."},
        {"id": "no-repeat", "label": f"No repeats, {len(no_repeat)} distinct tokens", "tokens": no_repeat, "off": [],
         "text": f"{len(no_repeat)} different tokens, none repeated: nothing to copy."},
        {"id": "short-repeat", "label": f"Short segment: {short_n} tokens, repeated", "tokens": short, "off": [],
         "text": f"A segment of {short_n} tokens, shorter than any trained one, repeated up to the maximum "
                 f"length {T_max}."},
        {"id": "long-repeat", "label": f"Long segment: {long_n} tokens, then its start", "tokens": long, "off": [],
         "text": f"A segment of {long_n} tokens, longer than any trained one ({f['max_seg']}), then its first "
                 f"{T_max - long_n} tokens again, up to the maximum length {T_max}."},
    ]


def copyable_positions(tokens: list[int]) -> list[bool]:
    """Position ``i`` predicts ``tokens[i + 1]``; it is copyable when an earlier ``j < i`` has the same token
    followed by the same next token (what an induction head can copy). The page uses the same rule."""
    return [
        any(tokens[j] == tokens[i] and tokens[j + 1] == tokens[i + 1] for j in range(i)) for i in range(len(tokens) - 1)
    ]


@cache
def _outcome(tokens: tuple[int, ...], off: tuple[str, ...]) -> dict[str, Any]:
    import torch

    from lessons_src.lab.heads import ablate_heads
    from lessons_src.lab.toy_models import load_induction_model, next_token_loss

    model = load_induction_model()
    keep = torch.ones(model.cfg.num_layers, model.cfg.num_heads)
    for name in off:
        layer, head = (int(v) for v in name[1:].split("H"))
        keep[layer, head] = 0.0
    t = torch.tensor([tokens])
    mask = torch.tensor(copyable_positions(list(tokens)))
    with torch.no_grad(), ablate_heads(model.attentions, keep):
        loss = next_token_loss(model, t)[0]  # (T - 1,)
        hits = model(t[:, :-1])[0][0].argmax(-1) == t[0, 1:]  # (T - 1,)
    return {"n": int(mask.sum()), "loss": float(loss[mask].mean()), "hits": int(hits[mask].sum())}


def outcome(preset_id: str) -> dict[str, Any]:
    """Loss (nats) and right top guesses on the ``n`` copyable positions of a preset, by PyTorch through lessons_src."""
    p = next(p for p in presets() if p["id"] == preset_id)
    return _outcome(tuple(p["tokens"]), tuple(p["off"]))


def render_widget() -> str:
    """The widget's HTML: the page's hidden markdown-exec block prints it."""
    from lessons_src.lab.toy_models import load_induction_model

    cfg = load_induction_model().cfg
    e = html.escape
    data = {
        "presets": presets(),
        "findings": findings(),
        "uniform_loss": round(math.log(cfg.vocab_size), 4),
    }
    # Embedded as the text of a hidden <div>, not a <script>: Material's instant navigation re-creates a new
    # page's scripts and would run JSON as JavaScript (see practice_pages.render_head_explorer).
    payload = e(json.dumps(data, separators=(",", ":")), quote=False)
    buttons = "".join(
        f'<button type="button" class="md-button lm-preset" data-preset="{e(p["id"])}">{e(p["label"])}</button>'
        for p in presets()
    )
    f = findings()

    def role(layer: int, h: int) -> str:
        if layer == 0 and h in f["previous"]:
            return " (previous-token)"
        if layer == 1 and h in f["induction"]:
            return " (induction)"
        return ""

    def figure(layer: int, h: int) -> str:  # one head: its map (drawn by the page's script) and its switch
        name = head_name(layer, h)
        return (
            f'<figure class="lm-map"><div class="lm-map-wrap"><canvas data-head="{name}" role="img" '
            f'aria-label="Attention of {name}"></canvas><div class="lm-map-row" aria-hidden="true"></div></div>'
            f'<figcaption><label class="lm-head"><input type="checkbox" data-head="{name}" checked> {name}'
            f'<span class="lm-role">{role(layer, h)}</span></label></figcaption></figure>'
        )

    maps = "".join(figure(layer, h) for layer in range(cfg.num_layers) for h in range(cfg.num_heads))
    return (
        f'<div class="live-model" data-live-model data-model-src="{MODEL_URL_PLACEHOLDER}">'
        '<div class="lm-input">'
        f'<label for="lm-tokens">Token ids, 0 to {cfg.vocab_size - 1}, separated by spaces or commas '
        f"(at most {cfg.max_len})</label>"
        '<textarea id="lm-tokens" class="lm-tokens-input" rows="3" spellcheck="false" autocomplete="off" '
        'aria-describedby="lm-message"></textarea>'
        '<p id="lm-message" class="lm-message" role="status" aria-live="polite">'
        "Loading the model (it needs JavaScript; the weights are a file of this site).</p>"
        "</div>"
        f'<div class="lm-presets" role="group" aria-label="Presets">{buttons}</div>'
        '<p class="lm-preset-text" aria-live="polite"></p>'
        '<p class="lm-legend">Green tokens were predicted right (the model\'s top guess at the position '
        "before); underlined tokens can be copied from earlier in the sequence. Point at a token, or tab to "
        "the sequence and use the arrow keys, to see where each head looks from there.</p>"
        '<div class="lm-tokens" role="group" aria-label="Query position: focus or point at a token"></div>'
        '<p class="lm-readout" aria-live="polite" aria-atomic="true"></p>'
        '<fieldset class="lm-heads"><legend>The heads: untick one to switch it off</legend>'
        '<p class="lm-summary" aria-live="polite" aria-atomic="true"></p>'
        '<p class="lm-legend lm-map-legend">Each map is one head, a row of maps per layer: row <var>i</var> '
        "of a map is query position <var>i</var>, a column the position it attends to, darker = more weight; "
        "the outlined row is the position you point at, and a head switched off is faded.</p>"
        f'<div class="lm-maps" style="--lm-heads: {cfg.num_heads}">{maps}</div>'
        '<button type="button" class="md-button lm-restore">Restore all heads</button></fieldset>'
        '<details class="lm-table-box"><summary>The weights of one query, as a table</summary>'
        '<label>Head <select class="lm-table-head"></select></label>'
        '<div class="lm-table"></div></details>'
        '<button type="button" class="md-button lm-share">Copy a link to this view</button>'
        '<span class="lm-share-status" aria-live="polite"></span>'
        f'<div class="lm-data" hidden data-search-exclude>{payload}</div>'
        "</div>"
    )


def on_page_content(html: str, page: Any, **kwargs: Any) -> str:
    return model_files.link(html, page, MODEL_URL_PLACEHOLDER, lambda: export()[2])


def on_post_build(config: Any, **kwargs: Any) -> None:
    data, _, stem = export()
    model_files.write(config, stem, data, meta_bytes())
