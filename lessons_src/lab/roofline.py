"""Arithmetic intensity of attention steps: FLOPs counted by PyTorch, bytes from ``nbytes``, and machines' ridges.

A step that does ``F`` floating-point operations and moves ``Q`` bytes needs at least ``max(F / P, Q / W)`` seconds on
a machine that does ``P`` FLOP/s and moves ``W`` bytes/s (Williams, Waterman and Patterson 2009, "Roofline"). Its
arithmetic intensity ``F / Q`` decides which term wins: below the machine's ridge ``P / W`` the step waits on
memory, above it on arithmetic.

**FLOPs** are counted by ``torch.utils.flop_counter.FlopCounterMode``, which counts matrix products only, 2 FLOPs per
multiply-add (softmax, ``exp``, masking, concatenation and gathers count 0: their cost is the bytes they move). It
has no formula for the fused CPU attention kernel and reports 0 FLOPs for it, so :func:`counted` runs the course's
explicit code: ``MultiHeadAttention(implementation="eager")``, and MLA's ``F.scaled_dot_product_attention`` under
``sdpa_kernel(SDPBackend.MATH)``. It runs on the ``meta`` device, where PyTorch works out every shape and allocates
and computes nothing, so a 32K-token prefill of a 4,096-wide layer is counted in milliseconds.

**Bytes** are the ``nbytes`` of what a step must move at least once: the layer's weights (read once per step,
whatever the batch), and per sequence the cache it reads (with the new positions it writes), its input and its
output. Intermediate tensors are not counted: a kernel can keep them on chip.

:func:`formula` gives the same two counts in closed form; ``tests/lab/test_roofline.py`` holds them equal to
:func:`counted`, variant by variant, for decoding and prefill.

>>> c = counted("GQA-8", Sizes(d_model=64, num_heads=8), 16)
>>> c == formula("GQA-8", Sizes(d_model=64, num_heads=8), 16, bytes_per_number=2)
True
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from ..kv_cache import KVCache, LatentCache, LayerCache
from ..layer import MultiHeadAttention
from ..mla import MultiHeadLatentAttention
from ..quantized_cache import TileFormat, TileQuantizedCache
from ..sparse_selection import lightning_indexer_scores
from . import data_file

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from matplotlib.figure import Figure

__all__ = [
    "PREFILL_VARIANTS",
    "VARIANTS",
    "Cost",
    "Machine",
    "Sizes",
    "count_flops",
    "counted",
    "formula",
    "gpus",
    "ridge_figure",
]

VARIANTS = ("MHA", "GQA-8", "GQA-2", "MQA", "GQA-8 window", "MLA naive", "MLA absorbed", "V3.2 top-k")
"""The lesson's variants: ``GQA-<K>`` has ``K`` KV heads; ``<variant> window`` caches its last ``window``
positions; ``V3.2 top-k`` is absorbed MLA over the ``top_k`` rows a lightning indexer picks (DeepSeek-V3.2's sparse
attention, DSA)."""

TOP_K = VARIANTS[-1]

PREFILL_VARIANTS = ("MHA", "GQA-8", "GQA-2", "MQA", "MLA naive", "MLA absorbed")
"""The variants whose prefill :func:`counted` runs (a window's or a selection's prefill, in the course's eager code,
computes every score and masks them: the prefill of the variant it is built on)."""


@dataclass(frozen=True)
class Sizes:
    """One attention layer's sizes (default: 32 heads of 128, d_model 4,096, as LLaMA 7B, Llama 3 8B and Mistral
    7B; MLA's latent and RoPE widths, DeepSeek-V3.2's indexer and top-k, Mistral 7B's window).

    ``head_dim`` is ``d_model // num_heads`` unless given (MLA only: DeepSeek-V3 has 128 heads of 128 in a
    7,168-wide model); its values are as wide as its keys.
    """

    d_model: int = 4096
    num_heads: int = 32
    kv_latent_dim: int = 512
    rope_dim: int = 64
    window: int = 4096
    top_k: int = 2048
    indexer_heads: int = 64
    indexer_dim: int = 128
    head_dim: int | None = None

    @property
    def E(self) -> int:
        """The head size."""
        return self.d_model // self.num_heads if self.head_dim is None else self.head_dim


@dataclass(frozen=True)
class Cost:
    """One step's FLOPs and bytes for one sequence; ``weight_bytes`` are shared by every sequence of a batch.

    >>> Cost(flops=100, weight_bytes=40, seq_bytes=10).intensity(batch=4)
    5.0
    """

    flops: int
    weight_bytes: int
    seq_bytes: int

    def bytes(self, batch: int = 1) -> int:
        """Bytes a step of ``batch`` sequences moves: the weights once, each sequence's cache and activations."""
        return self.weight_bytes + batch * self.seq_bytes

    def intensity(self, batch: int = 1) -> float:
        """FLOPs per byte of a step of ``batch`` sequences."""
        return batch * self.flops / self.bytes(batch)

    @property
    def limit(self) -> float:
        """The intensity as the batch grows without end: the weights' bytes vanish next to the caches'."""
        return self.flops / self.seq_bytes

    def batch_to_reach(self, ridge: float) -> int | None:
        """The smallest batch whose step reaches ``ridge`` FLOPs per byte, or None if no batch does.

        ``B F / (W + B s) >= ridge`` holds from ``B = ridge W / (F - ridge s)`` on, when ``F > ridge s``.

        >>> Cost(flops=100, weight_bytes=40, seq_bytes=10).batch_to_reach(5.0), Cost(10, 40, 10).batch_to_reach(5.0)
        (4, None)
        """
        if self.flops <= ridge * self.seq_bytes:
            return None
        return max(1, math.ceil(ridge * self.weight_bytes / (self.flops - ridge * self.seq_bytes) - 1e-9))


@dataclass(frozen=True)
class Machine:
    """A machine's two roofs: its matmul FLOP/s and its memory bandwidth in bytes/s."""

    name: str
    flops_per_s: float
    bytes_per_s: float
    source: str = ""

    @property
    def ridge(self) -> float:
        """FLOPs per byte at which compute and memory take the same time."""
        return self.flops_per_s / self.bytes_per_s


def gpus() -> dict[str, Machine]:
    """The GPUs of ``data/gpus.json``: dense BF16 Tensor Core FLOP/s and memory bandwidth, each with its source.

    >>> round(gpus()["H100 SXM"].ridge)
    295
    """
    raw: dict[str, Any] = json.loads(data_file("gpus.json").read_text(encoding="utf-8"))["gpus"]
    return {name: Machine(name, float(g["bf16_flops_per_s"]), float(g["bytes_per_s"]), g["source"])
            for name, g in raw.items()}


def count_flops(fn: Callable[[], Any]) -> tuple[int, Any]:
    """``(FLOPs, result)`` of ``fn()`` as ``FlopCounterMode`` counts them, with SDPA's math kernel (countable)."""
    counter = FlopCounterMode(display=False)
    with counter, sdpa_kernel(SDPBackend.MATH), torch.no_grad():
        result = fn()
    return int(counter.get_total_flops()), result


def _kv_heads(name: str, H: int) -> int:
    base = name.removesuffix(" window")
    if base == "MHA":
        return H
    if base == "MQA":
        return 1
    if base.startswith("GQA-") and base[4:].isdigit():
        return int(base[4:])
    raise ValueError(f"unknown variant {name!r}; the variants are {', '.join(VARIANTS)} (any GQA-<K>)")


def counted(name: str, sizes: Sizes = Sizes(), context: int = 32768, *, prefill: bool = False,
            dtype: torch.dtype = torch.bfloat16, cache_format: TileFormat | None = None) -> Cost:
    """One step of one sequence through the course's layer ``name``, counted on the ``meta`` device.

    Decoding (default): one new token after ``context - 1`` cached ones (a window keeps ``window`` positions, the
    top-k step attends to ``top_k`` latent rows and its indexer scores all ``context`` keys). Prefill: ``context``
    tokens into an empty cache, causal (the eager code computes every score of the square, then masks half).

    ``cache_format``: keys and values cached in that format (:class:`lessons_src.quantized_cache.TileQuantizedCache`,
    dequantized as they are read) instead of ``dtype``: the same FLOPs over fewer bytes, for the variants with a
    key-value cache (not MLA's latent).

    Raises:
        ValueError: an unknown variant, a prefill of one not in :data:`PREFILL_VARIANTS`, or a cache format for MLA.
    """
    if prefill and name not in PREFILL_VARIANTS:
        raise ValueError(f"prefill is counted for {', '.join(PREFILL_VARIANTS)}; got {name!r}")
    if cache_format is not None and (name.startswith("MLA") or name == TOP_K):
        raise ValueError(f"cache_format is for the key-value caches; {name!r} caches a latent")
    D, H, E, C, R = sizes.d_model, sizes.num_heads, sizes.E, sizes.kv_latent_dim, sizes.rope_dim
    new = context if prefill else 1
    with torch.device("meta"):
        x = torch.empty(1, new, D, dtype=dtype)
        extra: list[torch.Tensor] = []
        if name.startswith("MLA") or name == TOP_K:
            layer: torch.nn.Module = MultiHeadLatentAttention(D, H, kv_latent_dim=C, rope_dim=R, head_dim=E).to(dtype)
            held = min(context, sizes.top_k) if name == TOP_K else context
            latent = LatentCache(1, C, R, held, dtype=dtype, device="meta")
            if not prefill and held > 1:
                latent.update(torch.empty(1, held - 1, C, dtype=dtype), torch.empty(1, held - 1, R, dtype=dtype))
            cache: LayerCache | LatentCache = latent
            mode = "naive" if name == "MLA naive" else "absorbed"
            steps: list[Callable[[], Any]] = [lambda: layer(x, cache=latent, mode=mode)]
            if name == TOP_K:  # the indexer: its queries against every cached position's key
                Hi, Di = sizes.indexer_heads, sizes.indexer_dim
                keys = torch.empty(1, context, Di, dtype=dtype)
                q, w = torch.empty(1, Hi, 1, Di, dtype=dtype), torch.empty(1, Hi, 1, dtype=dtype)
                steps.append(lambda: lightning_indexer_scores(q, keys, w))
                extra.append(keys)
        else:
            K = _kv_heads(name, H)
            if H * E != D:
                raise ValueError(f"{name} needs head_dim = d_model // num_heads; got {sizes}")
            layer = MultiHeadAttention(D, H, num_kv_heads=K, implementation="eager").to(dtype)
            held = min(context, sizes.window) if name.endswith(" window") else context
            kv: LayerCache = KVCache(1, K, E, held, dtype=dtype, device="meta") if cache_format is None else \
                TileQuantizedCache(1, K, E, held, cache_format, dtype=dtype, device="meta")
            if not prefill and held > 1:
                kv.update(*(torch.empty(1, K, held - 1, E, dtype=dtype) for _ in range(2)))
            cache = kv
            steps = [lambda: layer(x, cache=kv, is_causal=True)]
    # run outside the device context: every tensor is on meta already, and ops under the context cost an import
    # of torch._dynamo (about 2 CPU seconds) the first time
    flops, outputs = count_flops(lambda: [step() for step in steps])
    weights = sum(p.nbytes for p in layer.parameters())
    seq = cache.nbytes + x.nbytes + outputs[0].nbytes + sum(t.nbytes for t in extra)
    return Cost(flops=flops, weight_bytes=weights, seq_bytes=seq)


def formula(name: str, sizes: Sizes = Sizes(), context: int = 32768, *, prefill: bool = False,
            bytes_per_number: int = 2) -> Cost:
    """The same counts as :func:`counted`, in closed form (``T`` new tokens attend to ``S`` positions).

    MHA, GQA, MQA: weights ``P = D H E + 2 D K E + H E D``; FLOPs ``2 P T + 4 H T S E`` (each weight one
    multiply-add per token; scores and weighted sum, ``E`` each); per sequence ``2 K S E + 2 T D`` numbers (keys
    and values cached, input and output). A window attends to ``min(S, window)`` positions.

    MLA (values as wide as keys, ``E``): ``P = D H (E + R) + D (C + R) + 2 C H E + H E D``. Absorbed: FLOPs
    ``2 P T + 4 H T S (C + R)``: the course's code uses the whole cached row ``[latent | rope key]`` as the value
    and drops its last ``R`` columns after. Naive: ``2 (P - 2 C H E) T + 4 S C H E + 4 H T S (E + R)``: every
    cached latent up-projected to keys and values (``2 C H E`` multiply-adds a row), values padded to the keys'
    width ``E + R``. Per sequence ``S (C + R) + 2 T D`` numbers. Top-k: absorbed over ``top_k`` rows, plus the
    indexer's ``2 Hi (Di + 1) S`` FLOPs and its ``S Di`` cached key numbers.
    """
    if prefill and name not in PREFILL_VARIANTS:
        raise ValueError(f"prefill is counted for {', '.join(PREFILL_VARIANTS)}; got {name!r}")
    D, H, E, C, R = sizes.d_model, sizes.num_heads, sizes.E, sizes.kv_latent_dim, sizes.rope_dim
    T, S, b = (context if prefill else 1), context, bytes_per_number
    if name.startswith("MLA") or name == TOP_K:
        P = D * H * (E + R) + D * (C + R) + 2 * C * H * E + H * E * D
        if name == "MLA naive":
            flops = 2 * (P - 2 * C * H * E) * T + 4 * S * C * H * E + 4 * H * T * S * (E + R)
            numbers = S * (C + R) + 2 * T * D
        elif name == "MLA absorbed":
            flops, numbers = 2 * P * T + 4 * H * T * S * (C + R), S * (C + R) + 2 * T * D
        elif name == TOP_K:
            k, Hi, Di = min(S, sizes.top_k), sizes.indexer_heads, sizes.indexer_dim
            flops = 2 * P + 4 * H * k * (C + R) + 2 * Hi * (Di + 1) * S
            numbers = k * (C + R) + S * Di + 2 * D
        else:
            raise ValueError(f"unknown variant {name!r}; the variants are {', '.join(VARIANTS)} (any GQA-<K>)")
    else:
        K = _kv_heads(name, H)
        held = min(S, sizes.window) if name.endswith(" window") else S
        P = D * H * E + 2 * D * K * E + H * E * D
        flops, numbers = 2 * P * T + 4 * H * T * held * E, 2 * K * held * E + 2 * T * D
    return Cost(flops=flops, weight_bytes=P * b, seq_bytes=numbers * b)


def _decade(d: int) -> str:
    """``10**d`` as plain text: 0.1, 1, 10, 100, 1K, 10K, 100K, 1M."""
    if d < 0:
        return f"{10.0**d:g}"
    return f"{10**d // 1000**(d // 3)}" + ("", "K", "M", "G")[d // 3]


def ridge_figure(points: Mapping[str, tuple[float, float | None]], machines: Mapping[str, float], *,
                 size: tuple[float, float], font: float) -> Figure:
    """Each variant's decoding and prefill intensity on a log axis, against each machine's ridge.

    A roofline draws a machine's attainable rate, ``min(peak, intensity x bandwidth)``: a slope, then a flat roof,
    bending at the ridge. This figure keeps what decides which side of the bend a step falls on: each variant's
    intensity (a dot for decoding, a square for prefill, ``None`` for no prefill point) and each machine's ridge
    (a vertical line). Left of a machine's line, the step waits on that machine's memory.

    Args:
        points: ``variant -> (decode intensity, prefill intensity or None)``, top row first.
        machines: ``name -> ridge`` in FLOPs per byte (the legend names each line by its machine).
        size: the figure's size in inches; font: its type size in points.
    """
    from .plotting import figure

    fig = figure(figsize=size)
    ax = fig.subplots()
    names = list(points)
    ys = range(len(names), 0, -1)
    ax.scatter([points[n][0] for n in names], list(ys), marker="o", s=30, color="C0", label="decoding", zorder=3)
    pre = [(p, y) for n, y in zip(names, ys, strict=True) if (p := points[n][1]) is not None]
    ax.scatter([x for x, _ in pre], [y for _, y in pre], marker="s", s=30, facecolors="none", edgecolors="C3",
               label="prefill", zorder=3)
    styles = ["-", "--", "-.", ":"]
    for i, (machine, ridge) in enumerate(machines.items()):
        ax.axvline(ridge, color="0.35", linestyle=styles[i % len(styles)], linewidth=1.2, label=machine)
    ax.set_xscale("log")
    values = [v for pair in points.values() for v in pair if v is not None] + list(machines.values())
    low, high = min(values) / 2, max(values) * 2
    decades = range(math.ceil(math.log10(low)), math.floor(math.log10(high)) + 1)
    ax.set_xticks([10.0**d for d in decades], labels=[_decade(d) for d in decades])  # plain type, no superscripts
    ax.set_xlim(low, high)
    ax.minorticks_off()
    ax.set_yticks(list(ys), labels=names)
    ax.set_ylim(0.4, len(names) + 0.6)
    ax.set_xlabel("FLOPs per byte (log scale)", fontsize=font)
    ax.tick_params(labelsize=font)
    ax.grid(axis="x", color="0.9")
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncols=2, fontsize=font, frameon=False)
    return fig
