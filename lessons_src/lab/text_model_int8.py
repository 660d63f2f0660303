"""The text model in int8, as its live page runs it in the browser (docs/practice/live-text-model.md).

The page's weights file is smaller than the committed float16 checkpoint: every weight matrix in int8 with one
float16 scale per group of :data:`GROUP` values of a row (symmetric: ``w = q * scale``, ``q`` in -127..127,
``scale = max |w| / 127`` over the group), the LayerNorms and biases in float16 as committed (:func:`export`).
:func:`exported_model` is PyTorch running those same weights, dequantized: the model the page's browser tests
compare the page with, and the one the page's shown blocks run. The site's hook
(``tools/site_build/live_text_model.py``) writes the file and draws the page's widget.

>>> export()[1]["tensors"][0]["dtype"]
'float16'
"""

from __future__ import annotations

import hashlib
import json
from functools import cache
from importlib import resources
from typing import Any

import numpy as np
import torch

from . import artifact, requires_extra
from .text_model import TEXT_CHECKPOINT, TextGPT, load_text_model

__all__ = [
    "GROUP",
    "INT8_PROB_BOUND",
    "PROB_ATOL",
    "TEXTS",
    "dequantize",
    "export",
    "exported_model",
    "exported_state",
    "quantize",
    "stored",
]

GROUP = 32  # values of a row sharing one int8 scale

# Largest difference the browser tests allow between the page's next-byte probabilities (and attention weights)
# and PyTorch's, on the same exported weights (PyTorch computes in float32, the page in float64).
PROB_ATOL = 1e-5
# Largest difference int8 may make to a next-byte probability, against the committed float16 weights, over
# TEXTS (the site hook's int8_error measures it; the browser tests and the page check it).
INT8_PROB_BOUND = 0.05
# The texts that bound is measured on (the browser tests' texts).
TEXTS = (
    "Multi-head attention",
    "The query looks at every key.",
    "The query looks at every key. The query looks at every key.",
    "héllo wörld, naïve café",
    "日本語のテキスト",
    "emoji 🙂 and €100 — «quotes»",
    "tab\tand\nnewline",
    "a" * 64,
    "x",
)


def stored() -> dict[str, torch.Tensor]:
    """The committed float16 checkpoint's tensors, as stored."""
    with requires_extra("toy"):
        from safetensors.torch import load_file

    with resources.as_file(artifact(TEXT_CHECKPOINT)) as file:
        return load_file(str(file))


def quantize(w: Any, group: int = GROUP) -> tuple[Any, Any]:
    """A float matrix ``(R, C)`` as int8 values ``(R, C)`` and float16 scales ``(R, C // group)`` (numpy).

    Each group of ``group`` consecutive values of a row is ``q * scale`` with ``scale = max |w| / 127``
    (rounded to float16) and ``q = round(w / scale)`` in -127..127; a group of zeros has scale 0.
    """
    rows, cols = w.shape
    if cols % group:
        raise ValueError(f"a row of {cols} values does not split into groups of {group}; use a divisor of {cols}")
    g = np.asarray(w, dtype=np.float32).reshape(rows, cols // group, group)
    scale = (np.abs(g).max(axis=-1, keepdims=True) / 127).astype(np.float16)
    s32 = scale.astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(s32 > 0, np.rint(g / s32), 0)
    q = np.clip(q, -127, 127).astype(np.int8)
    return q.reshape(rows, cols), scale.reshape(rows, cols // group)


def dequantize(q: Any, scale: Any) -> Any:
    """float32 ``q * scale`` (exact: an int8 times a float16 fits in float32), as the page computes it."""
    rows, cols = q.shape
    w = q.reshape(rows, scale.shape[1], -1).astype(np.float32) * scale.astype(np.float32)[..., None]
    return w.reshape(rows, cols)


@cache
def export() -> tuple[bytes, dict[str, Any], str]:
    """The checkpoint for the page as ``(bytes, metadata, file stem)``.

    The file holds first every float16 part (1-D tensors as stored, then each matrix's scales), then every
    matrix's int8 values, row-major in the model's state-dict order; the metadata gives each tensor's name,
    shape, dtype and byte offsets (``offset``; for int8 also ``scales`` and ``group``).
    """
    model = load_text_model()
    cfg = model.cfg
    if cfg.qk_norm:
        raise ValueError("the page's script runs no QK-norm, and would ignore the norm's weights: export a model "
                         "trained with TextConfig(qk_norm=False), not qk_norm=True")
    names = list(model.state_dict())
    checkpoint = stored()
    if sorted(checkpoint) != sorted(names):
        raise ValueError(f"the checkpoint holds {sorted(checkpoint)}; the model reads {sorted(names)}")
    halves: list[bytes] = []
    bytes8: list[bytes] = []
    specs: list[dict[str, Any]] = []
    for name in names:
        t = checkpoint[name]
        if str(t.dtype) != "torch.float16":
            raise ValueError(f"{name} is stored as {t.dtype}; the exporter reads float16 checkpoints")
        values = t.contiguous().numpy()
        if values.ndim == 2:
            q, scale = quantize(values)
            specs.append(
                {
                    "name": name,
                    "shape": list(values.shape),
                    "dtype": "int8",
                    "group": GROUP,
                    "int8": q.tobytes(order="C"),
                    "half": scale.astype("<f2").tobytes(order="C"),
                }
            )
        else:
            specs.append(
                {
                    "name": name,
                    "shape": list(values.shape),
                    "dtype": "float16",
                    "half": values.astype("<f2").tobytes(order="C"),
                }
            )
    tensors, offset = [], 0
    for spec in specs:
        entry = {k: spec[k] for k in ("name", "shape", "dtype")}
        entry["scales" if spec["dtype"] == "int8" else "offset"] = offset
        offset += len(spec["half"])
        halves.append(spec["half"])
        tensors.append(entry)
    for spec, entry in zip(specs, tensors, strict=True):
        if spec["dtype"] == "int8":
            entry["offset"] = offset
            entry["group"] = spec["group"]
            offset += len(spec["int8"])
            bytes8.append(spec["int8"])
    data = b"".join(halves + bytes8)
    meta: dict[str, Any] = {
        "format": "little-endian; float16 parts first, then int8 matrices; int8 value * its group's float16 scale",
        "config": {
            "vocab_size": cfg.vocab_size,
            "d_model": cfg.d_model,
            "num_heads": cfg.num_heads,
            "num_layers": cfg.num_layers,
            "max_len": cfg.max_len,
            "d_ff": cfg.d_ff,
            "rope_base": cfg.rope_base,
            "head_dim": cfg.d_model // cfg.num_heads,
            "layer_norm_eps": model.ln_f.eps,
        },
        "tensors": tensors,
        "num_bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    if offset != len(data):
        raise AssertionError(f"the offsets end at {offset}; the file has {len(data)} bytes")
    digest = hashlib.sha256(data + json.dumps(meta, sort_keys=True).encode()).hexdigest()[:12]
    stem = f"text-{digest}"
    meta["weights"] = f"{stem}.bin"
    return data, meta, stem


def exported_state() -> dict[str, torch.Tensor]:
    """The exported weights as the page reads them (float32 torch tensors, int8 matrices dequantized)."""
    data, meta, _ = export()
    state = {}
    for spec in meta["tensors"]:
        shape, n = spec["shape"], int(np.prod(spec["shape"]))
        if spec["dtype"] == "int8":
            q = np.frombuffer(data, dtype=np.int8, count=n, offset=spec["offset"]).reshape(shape)
            groups = shape[1] // spec["group"]
            scale = np.frombuffer(data, dtype="<f2", count=shape[0] * groups, offset=spec["scales"])
            values = dequantize(q, scale.reshape(shape[0], groups))
        else:
            values = np.frombuffer(data, dtype="<f2", count=n, offset=spec["offset"]).astype(np.float32)
        state[spec["name"]] = torch.from_numpy(np.array(values, dtype=np.float32).reshape(shape))
    return state


def exported_model() -> TextGPT:
    """The text model with the weights the page runs (int8 matrices dequantized), in eval mode, float32."""
    model = load_text_model()
    model.load_state_dict(exported_state())
    return model.eval()
