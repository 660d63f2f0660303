"""Quantized KV caches on the course's text model: what each format costs in accuracy, and why keys are harder.

The text model (:class:`~lessons_src.lab.text_model.TextGPT`) decodes the validation windows of the course's prose
byte by byte through its cached decode, once with float caches and once with each quantized cache of
:mod:`lessons_src.quantized_cache`; :func:`compare_formats` measures, against the float caches: the relative error
of every layer's attention output, the change of the next-byte loss, and how many greedily decoded bytes stay
the same from a prompt. :class:`MixedCache` quantizes the keys alone or the values alone, to see which half costs
more; :func:`channel_spread` says whether this model's keys have outlier channels (a few channels far larger than
the rest), what KIVI quantizes keys per channel for. ``make measure-quantized-cache`` runs them into the committed
artifact :data:`QUANTIZED_LOG`, which the lesson reads (:func:`read_quantized_log`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ..kv_cache import KVCache, LayerCache
from ..quantized_cache import FP8, Q4_0, Q8_0, KIVICache, RotatedKeysCache, TileQuantizedCache, hadamard
from . import read_artifact_json

if TYPE_CHECKING:
    from .text_model import TextGPT

__all__ = ["FORMATS", "QUANTIZED_LOG", "MixedCache", "channel_spread", "compare_formats", "format_caches",
           "read_quantized_log"]

QUANTIZED_LOG = "quantized_cache.json"

MakeCache = Callable[[int, int, int, int], LayerCache]  # (batch_size, num_kv_heads, head_dim, max_len) -> a cache


def _float(B: int, K: int, E: int, L: int) -> LayerCache:
    return KVCache(B, K, E, L)


FORMATS: dict[str, MakeCache] = {
    "float32": _float,
    "q8_0": lambda B, K, E, L: TileQuantizedCache(B, K, E, L, Q8_0),
    "fp8": lambda B, K, E, L: TileQuantizedCache(B, K, E, L, FP8),
    "q4_0": lambda B, K, E, L: TileQuantizedCache(B, K, E, L, Q4_0),
    "kivi-4": lambda B, K, E, L: KIVICache(B, K, E, L, bits=4, residual=32),
    "kivi-2": lambda B, K, E, L: KIVICache(B, K, E, L, bits=2, residual=32),
    "q4_0+hadamard": lambda B, K, E, L: RotatedKeysCache(TileQuantizedCache(B, K, E, L, Q4_0), hadamard(E)),
    "kivi-2+hadamard": lambda B, K, E, L: RotatedKeysCache(KIVICache(B, K, E, L, bits=2, residual=32), hadamard(E)),
}
"""Each cache measured, by name: how to make one layer's (the float cache first, the reference; ``+hadamard``: the
keys rotated by a Hadamard matrix before the cache quantizes them)."""


class MixedCache(LayerCache):
    """The keys of one cache and the values of another: ``MixedCache(q4_0, float)`` quantizes the keys alone.

    Both caches are given every update; the keys come back from ``keys``, the values from ``values``.
    ``nbytes`` counts half of each (exact when both hold keys and values of one width, as tile caches do).

    Example:
        >>> keys_only = MixedCache(TileQuantizedCache(1, 1, 32, 4, Q4_0), KVCache(1, 1, 32, 4))
        >>> k, v = torch.randn(1, 1, 2, 32), torch.randn(1, 1, 2, 32)
        >>> got_k, got_v = keys_only.update(k, v)
        >>> torch.equal(got_v, v), torch.equal(got_k, k)
        (True, False)
    """

    def __init__(self, keys: LayerCache, values: LayerCache) -> None:
        self.keys, self.values, self.length = keys, values, 0

    def update(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Both caches take ``k`` and ``v``; the keys of the first and the values of the second come back."""
        keys, _ = self.keys.update(k, v)
        _, values = self.values.update(k, v)
        self.length = self.keys.length
        return keys, values

    def truncate(self, length: int) -> None:
        """Keep the first ``length`` positions of both caches."""
        super().truncate(length)
        self.keys.truncate(length)
        self.values.truncate(length)

    @property
    def nbytes(self) -> int:
        """Half of each cache's bytes: the keys' part of the first and the values' part of the second."""
        return (self.keys.nbytes + self.values.nbytes) // 2


def format_caches(model: TextGPT, name: str, batch_size: int, part: str = "both") -> list[LayerCache]:
    """One cache per layer of ``model`` in the format ``name`` of :data:`FORMATS`, for ``part`` of the cache:
    ``"both"``, ``"keys"`` (the values in float) or ``"values"`` (the keys in float).

    Example:
        >>> from lessons_src.lab.text_model import TextConfig, TextGPT
        >>> caches = format_caches(TextGPT(TextConfig(d_model=64, num_heads=2, max_len=8, d_ff=32)), "q4_0", 1)
        >>> len(caches), type(caches[0]).__name__
        (2, 'TileQuantizedCache')
    """
    if name not in FORMATS:
        raise ValueError(f"name must be one of {', '.join(FORMATS)}; got {name!r}")
    if part not in ("both", "keys", "values"):
        raise ValueError(f"part must be 'both', 'keys' or 'values'; got {part!r}")
    cfg = model.cfg
    shape = (batch_size, cfg.num_heads, cfg.d_model // cfg.num_heads, cfg.max_len)
    caches = []
    for _ in range(cfg.num_layers):
        made = FORMATS[name](*shape)
        if part != "both":
            plain = _float(*shape)
            made = MixedCache(made, plain) if part == "keys" else MixedCache(plain, made)
        caches.append(made)
    return caches


@torch.no_grad()
def _decode(model: TextGPT, tokens: Tensor, caches: list[LayerCache]) -> tuple[Tensor, Tensor]:
    """Logits of every position of ``tokens``, decoded one byte at a time through ``caches``, and each layer's
    attention output at every position, ``(B, T, V)`` and ``(L, B, T, D)``."""
    outputs: list[list[Tensor]] = [[] for _ in model.attentions]
    hooks = [attn.register_forward_hook(lambda _m, _i, out, i=i: outputs[i].append(out))
             for i, attn in enumerate(model.attentions)]
    try:
        logits = torch.cat([model(tokens[:, t : t + 1], caches=caches)[0] for t in range(tokens.shape[1])], dim=1)
    finally:
        for h in hooks:
            h.remove()
    return logits, torch.stack([torch.cat(o, dim=1) for o in outputs])


@torch.no_grad()
def _greedy(model: TextGPT, prompt: Tensor, new: int, caches: list[LayerCache]) -> Tensor:
    """``new`` bytes after ``prompt`` (``(B, P)``), each the likeliest, through ``caches``: ``(B, new)``."""
    logits, _ = model(prompt, caches=caches)
    out = [logits[:, -1].argmax(-1)]
    for _ in range(new - 1):
        logits, _ = model(out[-1][:, None], caches=caches)
        out.append(logits[:, -1].argmax(-1))
    return torch.stack(out, dim=1)


def _relative(a: Tensor, b: Tensor, dims: tuple[int, ...]) -> Tensor:
    """``||a - b|| / ||b||`` over ``dims``."""
    return (a - b).pow(2).sum(dims).sqrt() / b.pow(2).sum(dims).sqrt()


@torch.no_grad()
def compare_formats(model: TextGPT, windows: Tensor, names: Sequence[str], *, prompt: int | None = 64,
                    parts: Sequence[str] = ("both",)) -> list[dict[str, Any]]:
    """Each format of ``names`` (and each ``part``) against the float caches, decoding ``windows`` byte by byte.

    For each, a row: ``format``, ``part``, ``bytes_per_token`` (per layer, from the caches' ``nbytes``), the
    attention outputs' relative error per layer (``output_error``, over all windows and positions), the mean
    next-byte loss (``loss``, nats) and its change from the float caches' (``loss_change``, and per window,
    ``loss_change_per_window``), and, greedy from the first ``prompt`` bytes of each window to the context's end
    (unless ``prompt`` is None): the share of bytes equal to the float caches' (``greedy_agreement``) and the
    share of windows whose continuation is the same throughout (``greedy_same``).

    Shapes:
        windows: ``(B, T + 1)`` bytes with ``T + 1 <= max_len + 1``; the last byte of each is only a target.
    """
    tokens, targets = windows[:, :-1], windows[:, 1:]
    B, T = tokens.shape

    def run(name: str, part: str) -> tuple[Tensor, Tensor, Tensor | None, list[LayerCache]]:
        caches = format_caches(model, name, B, part)
        logits, outs = _decode(model, tokens, caches)
        if prompt is None:
            return logits, outs, None, caches
        greedy = _greedy(model, tokens[:, :prompt], model.cfg.max_len - prompt, format_caches(model, name, B, part))
        return logits, outs, greedy, caches

    def losses(logits: Tensor) -> Tensor:  # (B,): each window's mean next-byte loss
        return F.cross_entropy(logits.transpose(1, 2), targets, reduction="none").mean(-1)

    ref_logits, ref_outs, ref_greedy, _ = run("float32", "both")
    ref_loss = losses(ref_logits)
    rows = []
    for name in names:
        for part in parts:
            logits, outs, greedy, caches = run(name, part)
            loss = losses(logits)
            row = {
                "format": name, "part": part, "bytes_per_token": caches[0].nbytes / (B * T),
                "output_error": _relative(outs, ref_outs, (1, 2, 3)).tolist(), "loss": loss.mean().item(),
                "loss_change": (loss - ref_loss).mean().item(),
                "loss_change_per_window": [round(x, 6) for x in (loss - ref_loss).tolist()],
            }
            if greedy is not None and ref_greedy is not None:
                same = greedy == ref_greedy
                row |= {"greedy_agreement": same.float().mean().item(),
                        "greedy_same": same.all(-1).float().mean().item()}
            rows.append(row)
    return rows


@torch.no_grad()
def channel_spread(model: TextGPT, windows: Tensor) -> list[dict[str, float]]:
    """Per layer, whether keys have outlier channels: each channel's RMS over the windows and positions (keys as
    cached, after RoPE), and the largest over the median, per head, the largest of the heads, for keys and values.

    Shapes:
        windows: ``(B, T)`` bytes.
    """
    caches = format_caches(model, "float32", windows.shape[0])
    model(windows[:, : model.cfg.max_len], caches=caches)
    out = []
    for c in caches:
        assert isinstance(c, KVCache)
        row = {}
        for name, t in (("keys", c.k[:, :, : c.length]), ("values", c.v[:, :, : c.length])):
            rms = t.pow(2).mean(dim=(0, 2)).sqrt()  # (H, E): each head's channels
            row[name] = (rms.amax(-1) / rms.median(-1).values).amax().item()
        out.append(row)
    return out


def read_quantized_log() -> dict[str, Any]:
    """The committed measurement (:data:`QUANTIZED_LOG`): settings, the rows of :func:`compare_formats` and
    :func:`channel_spread`'s."""
    log: dict[str, Any] = read_artifact_json(QUANTIZED_LOG)
    return log
