"""Rotary position embedding (RoPE): rotate pairs of features by an angle proportional to the position.

Feature ``i`` of the first half and feature ``i`` of the second half form a pair (the "rotate half"
layout of GPT-NeoX and Hugging Face Llama); the pair at position ``m`` is rotated by ``m * base^(-2i/R)``.
A rotated query at position ``m`` dotted with a rotated key at position ``n`` depends only on ``m - n``,
which is how attention scores learn relative positions.

**Two layouts** pair the features differently: rotate-half pairs ``(i, i + R/2)`` (:func:`apply_rope`; GPT-NeoX,
Hugging Face Llama, this course), interleaved pairs ``(2i, 2i + 1)`` (:func:`apply_rope_interleaved`; Meta's
original Llama code, DeepSeek's MLA and V4). Pair ``i`` turns at the same frequency in both, so they are one
rotation of permuted features, and a checkpoint moves from one to the other by permuting the rows of ``W_Q`` and
``W_K`` (:func:`interleaved_to_rotate_half`).

**Multimodal RoPE** (M-RoPE) gives an image token a position per axis (time, height, width) and splits the
pairs into frequency sections, one per axis (:func:`mrope_pair_axes`, :func:`mrope_cos_sin`): Qwen3.5
interleaves the sections along the frequencies (t h w t h w ...), Qwen2-VL puts them in blocks. A text token has
the same position on every axis, and M-RoPE is then 1-D RoPE.

**Scaling** stretches a trained context by changing the frequencies ``base^(-2i/R)`` (and, for YaRN, the
size of the rotated vectors) without retraining from scratch. Each rule returns a :class:`RopeScaling`, the
frequencies and an attention factor, which :func:`rope_cos_sin` (and :class:`lessons_src.mechanisms.Rotary`)
take as ``scaling=``:

* :func:`llama3_scaling` (Llama 3.1): pairs that turn slowly (wavelength above
  ``original_max_positions / low_freq_factor``) are slowed ``factor`` times, pairs that turn fast (below
  ``original_max_positions / high_freq_factor``) are kept, and those between are blended smoothly;
* :func:`yarn_scaling` (YaRN: Qwen3, DeepSeek-V3, gpt-oss): each pair is interpolated (slowed ``factor``
  times) or kept by how many turns it makes over the original context, with a linear ramp between
  ``beta_slow`` and ``beta_fast`` turns, and the cosines and sines are multiplied by
  ``0.1 ln(factor) + 1`` so that scores keep their sharpness at long range;
* :func:`proportional_scaling` (Gemma 4's global layers, ``"proportional"`` in ``transformers``): a full-width
  RoPE whose slowest pairs are frozen, so that only a ``fraction`` of the pairs turn, at the frequencies they
  have in the full-width rule (partial RoPE as Qwen3-Next does it rotates the first features instead, at the
  frequencies of a narrower rule: :meth:`lessons_src.mechanisms.Rotary.partial`).

Where ``transformers`` and the papers differ, the course follows ``transformers`` (its tests compare with
``ROPE_INIT_FUNCTIONS``): YaRN's ramp bounds are rounded outwards (``floor``/``ceil``, its ``truncate``
default), and its attention factor multiplies the cosines and sines, so the scores grow by its square, as
in the paper's ``sqrt(1/t)`` on queries and keys.

References:
    Su et al., "RoFormer: Enhanced Transformer with Rotary Position Embedding", 2021 (arXiv:2104.09864).
    Peng et al., "YaRN: Efficient Context Window Extension of Large Language Models", 2023 (arXiv:2309.00071).
    Meta, "The Llama 3 Herd of Models", 2024 (arXiv:2407.21783), and its reference code: the 3.1 RoPE rule.
    Wang et al., "Qwen2-VL", 2024 (arXiv:2409.12191), section 2.1: M-RoPE; its interleaved sections as in
    ``transformers``' ``Qwen3_5TextRotaryEmbedding`` (Qwen3-VL and Qwen3.5).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

from ._checks import choice, instance, integer, number, positive, size, tensor
from ._checks import device as check_device

__all__ = [
    "RopeScaling",
    "apply_rope",
    "apply_rope_interleaved",
    "interleaved_to_rotate_half",
    "llama3_scaling",
    "mrope_cos_sin",
    "mrope_grid_positions",
    "mrope_pair_axes",
    "proportional_scaling",
    "rope_cos_sin",
    "rope_frequencies",
    "rotate_half_to_interleaved",
    "yarn_scaling",
]


class RopeScaling(NamedTuple):
    """Scaled RoPE: the frequency of each rotated pair, and the factor the cosines and sines are multiplied by.

    Attributes:
        inv_freq: float64 radians per position of pair ``i`` (its features ``i`` and ``i + R/2``), ``(R/2,)``.
        attention_factor: multiplies the cosines and sines (1 for Llama 3.1; YaRN's ``0.1 ln(factor) + 1``).
    """

    inv_freq: Tensor
    attention_factor: float = 1.0


def _rotated(dim: object) -> int:
    n = integer("dim", dim)
    if n < 2 or n % 2:
        raise ValueError(f"RoPE rotates pairs of features, so dim must be even and at least 2; got dim={n!r}")
    return n


def rope_frequencies(dim: int, *, base: float = 10000.0, device: torch.device | str | None = None) -> Tensor:
    """Radians per position of each rotated pair, unscaled: ``base^(-2i/R)`` for ``i = 0 .. R/2 - 1``, in float64.

    Shapes:
        output: ``(R/2,)``.

    Raises:
        ValueError: if ``dim`` is odd or below 2, or ``base`` is not above 1.

    Example:
        >>> rope_frequencies(4, base=100.0).tolist()
        [1.0, 0.1]
    """
    dim = _rotated(dim)
    base = number("base", base, low=1.0, low_ok=False, hint="rope_theta, 10000 in RoFormer")
    device = check_device("device", device)
    return base ** (-torch.arange(0, dim, 2, dtype=torch.float64, device=device) / dim)  # (R/2,)


def llama3_scaling(
    dim: int, *, base: float = 500000.0, factor: float = 8.0, low_freq_factor: float = 1.0,
    high_freq_factor: float = 4.0, original_max_positions: int = 8192, device: torch.device | str | None = None,
) -> RopeScaling:
    """Llama 3.1's frequencies: slow pairs slowed ``factor`` times, fast pairs kept, a smooth blend between.

    A pair of wavelength ``L = 2 pi / f`` (positions per turn) is slowed to ``f / factor`` when
    ``L > original_max_positions / low_freq_factor`` (it never made a whole turn in training, so
    stretching it only reaches angles it has seen), kept when ``L < original_max_positions / high_freq_factor``,
    and otherwise set to ``(1 - s) f / factor + s f`` with ``s = (original_max_positions / L - low_freq_factor)
    / (high_freq_factor - low_freq_factor)``. The attention factor is 1.

    Args:
        dim: rotated features per head ``R`` (even).
        base: ``rope_theta`` (500,000 in Llama 3).
        factor: how many times the slow pairs are slowed (8 in Llama 3.1); at least 1.
        low_freq_factor: the original context over the longest wavelength that is blended (1 in Llama 3.1).
        high_freq_factor: the original context over the shortest wavelength that is blended (4); above
            ``low_freq_factor``.
        original_max_positions: the context trained before scaling (8,192).
        device: where to make the frequencies.

    Returns:
        A :class:`RopeScaling`.

    Shapes:
        inv_freq: ``(R/2,)``.

    Raises:
        ValueError: if ``dim`` is odd, ``factor`` is below 1, ``low_freq_factor`` is not positive or not below
            ``high_freq_factor``, or ``original_max_positions`` is below 1.

    Example:
        >>> s = llama3_scaling(8, base=10000.0, factor=8.0, original_max_positions=1024)
        >>> (rope_frequencies(8) / s.inv_freq).round(decimals=3).tolist()  # fast kept, slow slowed 8 times, one blended
        [1.0, 1.0, 3.24, 8.0]
    """
    factor = number("factor", factor, low=1.0, low_ok=True, hint="1 keeps the frequencies, Llama 3.1 uses 8")
    low = number("low_freq_factor", low_freq_factor, low=0.0, low_ok=False, hint="Llama 3.1 uses 1")
    high = number("high_freq_factor", high_freq_factor, low=0.0, low_ok=False, hint="Llama 3.1 uses 4")
    if not low < high:
        raise ValueError(f"low_freq_factor={low_freq_factor!r} must be below high_freq_factor={high_freq_factor!r} "
                         "(Llama 3.1: 1 and 4)")
    context = size("original_max_positions", original_max_positions, hint="the trained context")
    inv_freq = rope_frequencies(dim, base=base, device=device)  # (R/2,)
    wavelength = 2 * math.pi / inv_freq  # positions per turn
    blend = ((context / wavelength - low) / (high - low)).clamp(0.0, 1.0)  # 0: slowed, 1: kept
    blended = (1 - blend) * inv_freq / factor + blend * inv_freq
    scaled = torch.where(wavelength > context / low, inv_freq / factor, blended)
    scaled = torch.where(wavelength < context / high, inv_freq, scaled)
    return RopeScaling(scaled, 1.0)


def yarn_scaling(
    dim: int, *, base: float = 10000.0, factor: float, original_max_positions: int, beta_fast: float = 32.0,
    beta_slow: float = 1.0, attention_factor: float | None = None, truncate: bool = True,
    device: torch.device | str | None = None,
) -> RopeScaling:
    """YaRN's frequencies and attention factor ("NTK-by-parts" interpolation plus a temperature).

    Pair ``i`` makes ``r_i = original_max_positions / (2 pi base^(2i/R))`` turns over the trained context.
    Pairs that make more than ``beta_fast`` turns keep their frequency, pairs that make fewer than
    ``beta_slow`` are interpolated (slowed ``factor`` times), and between them a linear ramp in ``i`` blends
    the two (the ramp's ends are the dims where ``r_i`` equals ``beta_fast`` and ``beta_slow``, rounded
    outwards as ``transformers`` does unless ``truncate=False``, as gpt-oss's config says). The cosines and
    sines are multiplied by ``attention_factor``, ``0.1 ln(factor) + 1`` unless given (the paper's ``sqrt(1/t)``).

    When every pair makes more than ``beta_fast`` turns (a very long ``original_max_positions`` or a small
    ``base``), every pair keeps its frequency; when every pair makes fewer than ``beta_slow``, every pair is
    slowed. There the ramp's two ends, each clipped to the dims, cross, and ``transformers`` (5.23,
    ``_compute_yarn_parameters``) does the opposite of both; this follows the rule above, the paper's.

    Args:
        dim: rotated features per head ``R`` (even).
        base: ``rope_theta``.
        factor: the context is stretched this many times (Qwen3: 4, gpt-oss: 32); at least 1.
        original_max_positions: the context trained before scaling (gpt-oss: 4,096).
        beta_fast: turns above which a pair keeps its frequency (32); above ``beta_slow``.
        beta_slow: turns below which a pair is interpolated (1); positive.
        attention_factor: the cosines' and sines' multiplier, ``None`` for the paper's; positive.
        truncate: round the ramp's ends outwards to whole dims (``transformers``' default); gpt-oss's config
            sets ``truncate: false``, a ramp between the fractional dims.
        device: where to make the frequencies.

    Returns:
        A :class:`RopeScaling`.

    Shapes:
        inv_freq: ``(R/2,)``.

    Raises:
        TypeError: if ``truncate`` is not a bool.
        ValueError: if ``dim`` is odd, ``factor`` is below 1, ``beta_slow`` is not positive or not below
            ``beta_fast``, ``attention_factor`` is not positive, or ``original_max_positions`` is below 1.

    Example:
        >>> s = yarn_scaling(8, factor=4.0, original_max_positions=64)
        >>> (rope_frequencies(8) / s.inv_freq).tolist(), round(s.attention_factor, 4)  # kept ... slowed 4 times
        ([1.0, 1.6, 4.0, 4.0], 1.1386)
    """
    factor = number("factor", factor, low=1.0, low_ok=True, hint="1 keeps the frequencies; gpt-oss uses 32")
    slow = number("beta_slow", beta_slow, low=0.0, low_ok=False, hint="YaRN uses 1")
    fast = number("beta_fast", beta_fast, low=0.0, low_ok=False, hint="YaRN uses 32")
    if not slow < fast:
        raise ValueError(f"beta_slow={beta_slow!r} must be below beta_fast={beta_fast!r} (YaRN: 1 and 32)")
    if attention_factor is None:
        attention_factor = 0.1 * math.log(factor) + 1.0
    attention_factor = number("attention_factor", attention_factor, low=0.0, low_ok=False,
                               hint="None for YaRN's 0.1 ln(factor) + 1")
    context = size("original_max_positions", original_max_positions, hint="the trained context")
    dim = _rotated(dim)
    inv_freq = rope_frequencies(dim, base=base, device=device)  # (R/2,)

    def dim_at(turns: float) -> float:  # the (fractional) feature index whose pair makes `turns` turns
        return dim * math.log(context / (turns * 2 * math.pi)) / (2 * math.log(base))

    if not isinstance(truncate, bool):
        raise TypeError(f"truncate must be True or False (gpt-oss: False); got {truncate!r}")
    base = number("base", base, low=1.0, low_ok=False, hint="rope_theta, 10000 in RoFormer")
    lo, hi = dim_at(fast), dim_at(slow)  # fractional dims
    if truncate:
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = float(max(lo, 0)), float(min(hi, dim - 1))
    i = torch.arange(dim // 2, dtype=torch.float64, device=device)  # (R/2,)
    if lo > hi:  # the ends crossed: every pair is fast (lo > 0, a long context) or slow (hi < 0, a short one)
        kept = torch.full_like(i, 1.0 if lo > 0 else 0.0)
    else:
        hi = hi + 0.001 if lo == hi else hi  # a ramp of width 0 would divide by 0
        kept = 1 - ((i - lo) / (hi - lo)).clamp(0.0, 1.0)  # 1: keep the frequency, 0: interpolate
    scaled = inv_freq / factor * (1 - kept) + inv_freq * kept
    return RopeScaling(scaled, attention_factor)


def proportional_scaling(
    dim: int, fraction: float, *, base: float = 10000.0, factor: float = 1.0,
    device: torch.device | str | None = None,
) -> RopeScaling:
    """Gemma 4's proportional RoPE: the first ``fraction`` of a full-width RoPE's pairs turn, the others stay still.

    Pair ``i`` (features ``i`` and ``i + dim/2``) turns at ``base^(-2i/dim) / factor`` radians per position for
    ``i < fraction * dim / 2``, and at 0 after: the fast pairs keep the frequencies a full-width RoPE gives
    them, and the slow pairs, whose angles barely move over a context anyway, carry no position at all. Gemma 4
    uses it on its global layers (``partial_rotary_factor=0.25``, ``rope_theta=1e6``). Unlike
    :meth:`lessons_src.mechanisms.Rotary.partial` (Qwen3-Next), which rotates the first ``R`` features at
    ``base^(-2i/R)``, the rotated features here are spread over both halves of the head, and the frequencies
    are the full-width rule's. ``transformers`` rounds ``fraction * dim / 2`` down; here a fraction that does
    not give a whole number of pairs is refused.

    Args:
        dim: the head's features ``E``, all of them passed to the rotation (even).
        fraction: the share of pairs that turn, in ``(0, 1]`` (Gemma 4: 0.25).
        base: ``rope_theta``.
        factor: divides every frequency (``transformers``' ``factor``, 1 unless the context is stretched); at
            least 1.
        device: where to make the frequencies.

    Returns:
        A :class:`RopeScaling` with ``dim/2`` frequencies, the last ones zero, and attention factor 1.

    Shapes:
        inv_freq: ``(dim/2,)``.

    Raises:
        ValueError: if ``dim`` is odd, ``fraction`` is not in ``(0, 1]`` or ``fraction * dim / 2`` is not a whole
            number (the message lists the fractions that are), or ``factor`` is below 1.

    Example:
        >>> proportional_scaling(8, 0.5, base=100.0).inv_freq.tolist()  # two pairs of four turn, at 100^(-2i/8)
        [1.0, 0.31622776601683794, 0.0, 0.0]
    """
    dim = _rotated(dim)
    fraction = number("fraction", fraction, low=0.0, low_ok=False, high=1.0, hint="Gemma 4: 0.25")
    turning = fraction * dim / 2
    if turning != int(turning):
        good = ", ".join(f"{2 * n / dim:g}" for n in range(1, dim // 2 + 1))
        raise ValueError(f"fraction={fraction!r} of dim={dim} turns {turning:g} of its {dim // 2} pairs; use a "
                         f"fraction giving a whole number of pairs, one of {good}")
    factor = number("factor", factor, low=1.0, low_ok=True, hint="1 keeps the frequencies")
    inv_freq = rope_frequencies(dim, base=base, device=device) / factor  # (dim/2,): the full-width rule
    inv_freq[int(turning):] = 0.0  # the slow pairs do not turn
    return RopeScaling(inv_freq, 1.0)


def rope_cos_sin(
    positions: Tensor, dim: int, *, base: float = 10000.0, dtype: torch.dtype = torch.float32,
    scaling: RopeScaling | None = None,
) -> tuple[Tensor, Tensor]:
    """Cosines and sines of the rotation angles for ``positions``.

    Args:
        positions: integer positions, e.g. ``torch.arange(start, start + T)``.
        dim: rotated features per head ``R``; must be even.
        base: the wavelength base (10000 in RoFormer and Llama 2); unused with ``scaling``.
        dtype: dtype of the result.
        scaling: scaled frequencies and attention factor (:func:`llama3_scaling`, :func:`yarn_scaling`,
            :func:`proportional_scaling`).

    Returns:
        ``(cos, sin)``.

    Shapes:
        positions: ``(T,)``; cos, sin: ``(T, R)``.

    Raises:
        ValueError: if ``dim`` is odd or below 2, or ``scaling`` has other than ``R/2`` frequencies.

    Example:
        >>> cos, sin = rope_cos_sin(torch.arange(3), 4)
        >>> cos.shape, cos[0].tolist()
        (torch.Size([3, 4]), [1.0, 1.0, 1.0, 1.0])
    """
    dim = _rotated(dim)
    if not isinstance(positions, Tensor):
        raise TypeError(f"positions must be a tensor of integer positions (T,); got {type(positions).__name__}")
    if positions.dtype.is_floating_point or positions.dtype == torch.bool or positions.ndim != 1:
        raise ValueError(
            f"positions must be integers of shape (T,); got dtype {positions.dtype}, shape {tuple(positions.shape)}"
        )
    instance("dtype", dtype, torch.dtype, "a floating torch.dtype such as torch.float32")
    if not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating dtype such as torch.float32; got {dtype}")
    if scaling is None:
        inv_freq, factor = rope_frequencies(dim, base=base, device=positions.device), 1.0  # (R/2,)
    else:
        instance("scaling", scaling, RopeScaling, "a RopeScaling (from llama3_scaling, yarn_scaling, ...) or None")
        tensor("inv_freq", scaling.inv_freq, ndim=1, shape="(R/2,), the scaling's frequencies")
        factor = positive("attention_factor", scaling.attention_factor, "1 unless YaRN's")
        inv_freq = scaling.inv_freq.to(positions.device, torch.float64)
        if inv_freq.shape != (dim // 2,):
            raise ValueError(f"scaling has {tuple(inv_freq.shape)} frequencies but dim={dim} rotates {dim // 2} "
                             f"pairs; make it with dim={dim}")
    angles = positions.to(torch.float64)[:, None] * inv_freq  # (T, R/2)
    angles = torch.cat([angles, angles], dim=-1)  # (T, R): pair i is (i, i + R/2)
    if factor == 1.0:
        return angles.cos().to(dtype), angles.sin().to(dtype)
    return (angles.cos() * factor).to(dtype), (angles.sin() * factor).to(dtype)


def _check_rotated(x: Tensor, cos: Tensor, sin: Tensor) -> None:
    for name, t in (("x", x), ("cos", cos), ("sin", sin)):
        tensor(name, t, shape="(..., T, R)" if name == "x" else "(T, R) from rope_cos_sin")
    if x.ndim < 2 or cos.shape != x.shape[-2:] or sin.shape != cos.shape:
        raise ValueError(
            f"x of shape {tuple(x.shape)} needs cos and sin of shape {tuple(x.shape[-2:])}; "
            f"got {tuple(cos.shape)} and {tuple(sin.shape)}"
        )
    if x.shape[-1] % 2:
        raise ValueError(f"x must have an even last dim R (RoPE rotates pairs of features); got shape {tuple(x.shape)}")


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate the last dim of ``x`` by the angles in ``cos``/``sin`` (from :func:`rope_cos_sin`).

    Shapes:
        x: ``(..., T, R)``; cos, sin: ``(T, R)``; output: like ``x``.

    Raises:
        ValueError: if ``cos`` or ``sin`` is not ``(T, R)`` for ``x``.

    Example:
        >>> cos, sin = rope_cos_sin(torch.arange(2), 2)
        >>> apply_rope(torch.tensor([[1.0, 0.0], [1.0, 0.0]]), cos, sin)  # position 1: rotated by 1 radian
        tensor([[1.0000, 0.0000],
                [0.5403, 0.8415]])
    """
    _check_rotated(x, cos, sin)
    x1, x2 = x.chunk(2, dim=-1)  # (..., T, R/2) each
    rotated = torch.cat([-x2, x1], dim=-1)  # (..., T, R)
    return x * cos + rotated * sin


# --------------------------------------------------------------------------- the interleaved layout of the pairs


def apply_rope_interleaved(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate the last dim of ``x`` in the interleaved layout: features ``2i`` and ``2i + 1`` form pair ``i``.

    Meta's original Llama code, DeepSeek's MLA and DeepSeek-V4 pair neighbours; :func:`apply_rope` pairs ``i``
    with ``i + R/2`` (rotate-half). Pair ``i`` turns by the same angle in both, taken from the same ``cos`` and
    ``sin`` (:func:`rope_cos_sin`: column ``i`` holds pair ``i``'s angle). The two are one rotation of permuted
    features: ``apply_rope_interleaved(x)[..., p] == apply_rope(x[..., p])`` with ``p =
    interleaved_to_rotate_half(R)``, exactly, so a checkpoint moves between the layouts by permuting the rows of
    ``W_Q`` and ``W_K`` (:func:`interleaved_to_rotate_half`).

    Shapes:
        x: ``(..., T, R)``; cos, sin: ``(T, R)``; output: like ``x``.

    Raises:
        ValueError: if ``cos`` or ``sin`` is not ``(T, R)`` for ``x``, or ``R`` is odd.

    Example:
        >>> cos, sin = rope_cos_sin(torch.arange(2), 4)
        >>> apply_rope_interleaved(torch.tensor([[1.0, 0.0, 0.0, 1.0]] * 2), cos, sin)[1]  # pair 0 turned 1 radian
        tensor([ 0.5403,  0.8415, -0.0100,  0.9999])
    """
    _check_rotated(x, cos, sin)
    c, s = cos[..., : x.shape[-1] // 2], sin[..., : x.shape[-1] // 2]  # (T, R/2): pair i's angle
    x1, x2 = x[..., 0::2], x[..., 1::2]  # (..., T, R/2): the first and second feature of each pair
    return torch.stack([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).flatten(-2)  # (..., T, R): pairs in place


def interleaved_to_rotate_half(dim: int, *, device: torch.device | str | None = None) -> Tensor:
    """The feature order that takes the interleaved layout to rotate-half: ``x_half = x_interleaved[..., p]``.

    Pair ``i`` is features ``(2i, 2i + 1)`` interleaved and ``(i, i + R/2)`` rotate-half, so ``p`` lists the
    even features, then the odd ones. Permute the rows of each head's rotated part of ``W_Q`` and ``W_K`` (and
    of their biases) by ``p`` and a rotate-half model computes what the interleaved checkpoint did: queries and
    keys are permuted alike, so every score is the same sum in another order. :func:`rotate_half_to_interleaved`
    goes back.

    Shapes:
        output: ``(R,)``, int64.

    Raises:
        ValueError: if ``dim`` is odd or below 2.

    Example:
        >>> interleaved_to_rotate_half(8).tolist()
        [0, 2, 4, 6, 1, 3, 5, 7]
    """
    dim, device = _rotated(dim), check_device("device", device)
    return torch.cat([torch.arange(0, dim, 2, device=device), torch.arange(1, dim, 2, device=device)])  # (R,)


def rotate_half_to_interleaved(dim: int, *, device: torch.device | str | None = None) -> Tensor:
    """The inverse of :func:`interleaved_to_rotate_half`: ``x_interleaved = x_half[..., p]``.

    Shapes:
        output: ``(R,)``, int64.

    Raises:
        ValueError: if ``dim`` is odd or below 2.

    Example:
        >>> rotate_half_to_interleaved(8).tolist()
        [0, 4, 1, 5, 2, 6, 3, 7]
    """
    return interleaved_to_rotate_half(dim, device=device).argsort()


# --------------------------------------------------------------------------- multimodal RoPE (M-RoPE)


def mrope_pair_axes(sections: tuple[int, ...], *, order: str = "interleaved_sections",
                    device: torch.device | str | None = None) -> Tensor:
    """Which position axis turns each rotated pair in multimodal RoPE: the frequency sections.

    An image token has a position per axis (time, height, width); M-RoPE gives each axis ``sections[a]`` of the
    ``R/2`` pairs, which turn by that axis' position. ``order`` says which pairs:

    * ``"interleaved_sections"`` (Qwen3-VL, Qwen3.5): the axes take turns along the frequencies, pair ``i``
      going to axis ``a = i % A`` while ``i < A * sections[a]`` and to axis 0 after, so every axis gets fast
      and slow pairs (Qwen3.5's ``(11, 11, 10)``: t h w t h w ... t h);
    * ``"contiguous_sections"`` (Qwen2-VL, Qwen2.5-VL): the first ``sections[0]`` pairs to axis 0, the next
      ``sections[1]`` to axis 1, and so on, so the width gets only the slowest pairs.

    This is about frequencies; the features of each pair are still ``(i, i + R/2)`` (rotate-half) in these
    models. The same rule with two axes (height, width) is Pixtral's 2-D RoPE, up to the order of its pairs.

    Args:
        sections: pairs per axis, axis 0 first (Qwen3.5: ``(11, 11, 10)`` for t, h, w); they sum to ``R/2``.
        order: ``"interleaved_sections"`` or ``"contiguous_sections"``.
        device: where to make the result.

    Returns:
        The axis of each pair, int64.

    Shapes:
        output: ``(R/2,)`` with ``R/2 = sum(sections)``.

    Raises:
        TypeError: if ``sections`` is not a tuple or list of ints.
        ValueError: if a section is below 1, or with ``"interleaved_sections"`` an axis ``a >= 1`` would not get
            its ``sections[a]`` pairs (a section far above axis 0's).

    Example:
        >>> mrope_pair_axes((3, 3, 2)).tolist()  # t h w t h w t h
        [0, 1, 2, 0, 1, 2, 0, 1]
        >>> mrope_pair_axes((3, 3, 2), order="contiguous_sections").tolist()
        [0, 0, 0, 1, 1, 1, 2, 2]
    """
    if not isinstance(sections, tuple | list) or not sections:
        raise TypeError(f"sections must be a tuple of pair counts per axis, such as (11, 11, 10); got {sections!r}")
    counts = [size(f"sections[{a}]", n, hint="pairs per axis") for a, n in enumerate(sections)]
    choice("order", order, ("interleaved_sections", "contiguous_sections"))
    device = check_device("device", device)
    A, pairs, per_axis = len(counts), sum(counts), torch.tensor(counts, device=device)  # per_axis: (A,)
    if order == "contiguous_sections":
        return torch.repeat_interleave(torch.arange(A, device=device), per_axis, output_size=pairs)  # (R/2,)
    i = torch.arange(pairs, device=device)  # (R/2,)
    axes = torch.where(i < A * per_axis[i % A], i % A, 0)  # (R/2,): axis i % A in its turn, else 0
    turns = [len(range(a, min(pairs, A * counts[a]), A)) for a in range(A)]  # the pairs each later axis gets
    got = [pairs - sum(turns[1:]), *turns[1:]]
    if got != counts:
        raise ValueError(f"sections={tuple(counts)} cannot be interleaved: an axis after the first gets at most "
                         f"one pair in {A}, so taking turns gives the axes {tuple(got)} pairs; give axis 0 the "
                         "largest section, as Qwen3.5's (11, 11, 10)")
    return axes


def mrope_cos_sin(
    positions: Tensor, dim: int, *, sections: tuple[int, ...], order: str = "interleaved_sections",
    base: float = 10000.0, dtype: torch.dtype = torch.float32, scaling: RopeScaling | None = None,
) -> tuple[Tensor, Tensor]:
    """Cosines and sines of multimodal RoPE: pair ``i`` turns by its axis' position (:func:`mrope_pair_axes`).

    Each axis' angles are :func:`rope_cos_sin`'s for that axis' positions; pair ``i`` (features ``i`` and
    ``i + R/2``) takes them from axis ``mrope_pair_axes(sections, order=order)[i]``. Text tokens have the same
    position on every axis, and then this is 1-D RoPE exactly. Rotate with :func:`apply_rope`.

    Args:
        positions: integer positions per axis, ``(A, T)`` (time, height, width for Qwen3.5: ``A = 3``);
            :func:`mrope_grid_positions` makes an image's.
        dim: rotated features per head ``R``, ``2 * sum(sections)``.
        sections: pairs per axis (Qwen3.5: ``(11, 11, 10)``).
        order: ``"interleaved_sections"`` (Qwen3.5) or ``"contiguous_sections"`` (Qwen2-VL).
        base: the wavelength base (Qwen3.5: 10,000,000).
        dtype: dtype of the result.
        scaling: scaled frequencies, as :func:`rope_cos_sin` takes them.

    Returns:
        ``(cos, sin)``.

    Shapes:
        positions: ``(A, T)``; cos, sin: ``(T, R)``.

    Raises:
        ValueError: if ``positions`` is not ``(A, T)`` integers with one row per section, or ``dim`` is not
            ``2 * sum(sections)``.

    Example:
        >>> text = torch.arange(5).expand(3, 5)  # a text token: one position on every axis
        >>> cos, _ = mrope_cos_sin(text, 8, sections=(2, 1, 1))
        >>> torch.equal(cos, rope_cos_sin(torch.arange(5), 8)[0])
        True
    """
    tensor("positions", positions, ndim=2, shape="(A, T), a row per axis", dtype="integer")
    axes = mrope_pair_axes(sections, order=order, device=positions.device)  # (R/2,)
    if positions.shape[0] != len(sections):
        raise ValueError(f"positions must have a row per section, {len(sections)} for sections={tuple(sections)}; "
                         f"got shape {tuple(positions.shape)}")
    if _rotated(dim) != 2 * len(axes):
        raise ValueError(f"dim={dim} rotates {dim // 2} pairs but sections={tuple(sections)} share {len(axes)}; "
                         f"use dim={2 * len(axes)}")
    per_axis = [rope_cos_sin(p, dim, base=base, dtype=dtype, scaling=scaling) for p in positions]  # A x (T, R)
    feature_axis = torch.cat([axes, axes])  # (R,): pair i is features i and i + R/2
    features = torch.arange(dim, device=positions.device)
    cos = torch.stack([c for c, _ in per_axis])[feature_axis, :, features].T  # (A, T, R) -> (T, R)
    sin = torch.stack([s for _, s in per_axis])[feature_axis, :, features].T
    return cos.contiguous(), sin.contiguous()


def mrope_grid_positions(grid: tuple[int, int, int], *, start: int = 0,
                         device: torch.device | str | None = None) -> Tensor:
    """Qwen3.5's positions of an image's (or a video's) tokens: ``start`` plus each token's index on each axis.

    The tokens are in row-major order (time, then rows, then columns, as the vision encoder emits them); token
    ``(t, h, w)`` has positions ``(start + t, start + h, start + w)``. The text after the image continues from
    one past the largest of them.

    Shapes:
        output: ``(3, t * h * w)``, int64.

    Raises:
        ValueError: if a side of ``grid`` is below 1 or ``start`` below 0.

    Example:
        >>> mrope_grid_positions((1, 2, 3), start=4).tolist()
        [[4, 4, 4, 4, 4, 4], [4, 4, 4, 5, 5, 5], [4, 5, 6, 4, 5, 6]]
    """
    if not isinstance(grid, tuple | list) or len(grid) != 3:
        raise TypeError(f"grid must be (t, h, w), the tokens per axis; got {grid!r}")
    sides = [size(f"grid[{a}]", n, hint="tokens on that axis") for a, n in enumerate(grid)]
    start = size("start", start, minimum=0, hint="the position of the first image token")
    device = check_device("device", device)
    t, h, w = torch.meshgrid(*(torch.arange(n, device=device) for n in sides), indexing="ij")  # (t, h, w) each
    return torch.stack([t, h, w]).reshape(3, -1) + start  # (3, t * h * w)
