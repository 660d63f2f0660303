"""Quantized KV caches: keys and values kept in 8, 4 or 2 bits with their scales, dequantized when read.

After GQA, MLA and windows, the next halving of a decoder's cache memory is storing each cached number in
fewer bits. A quantized number is a small code and a scale shared by a group of numbers: ``x ~ code * scale``.
The two caches here are :class:`lessons_src.kv_cache.LayerCache` subclasses, so
:class:`lessons_src.layer.MultiHeadAttention` and a model's cached decode take them unchanged: ``update`` stores
the codes and returns every cached position dequantized.

* :class:`TileQuantizedCache` keeps one scale per *tile* of each token's row of ``K * E`` numbers (every KV
  head's key of that token, as llama.cpp lays a cache row out), in one of three :class:`TileFormat` s:

  ==========  ====================  ===========================  ======================
  format      code                  scale                        bytes per number
  ==========  ====================  ===========================  ======================
  ``Q8_0``    int8                  float16 per 32 numbers       34/32 (llama.cpp q8_0)
  ``Q4_0``    4 bits (2 per byte)   float16 per 32 numbers       18/32 (llama.cpp q4_0)
  ``FP8``     float8 e4m3           float32 per 128 numbers      33/32 (DeepSeek-V3.2)
  ==========  ====================  ===========================  ======================

  Each scale is the tile's largest magnitude over the largest code (127, 7, 448), so nothing is clipped.
  llama.cpp's q4_0 divides by -8 with the sign of that largest value, one more level; this one is symmetric.
* :class:`KIVICache` is KIVI's asymmetric 2-bit cache: a code, a scale and a minimum, the **keys per channel**
  (one scale and minimum per channel for a block of tokens) and the **values per token** (one per token and
  head), and the latest tokens in full precision. Its residual buffer fills up, and when it holds ``residual``
  tokens it is quantized as one block and emptied, on the schedule of ``transformers``' ``QuantizedCache``.

* :class:`RotatedKeysCache` rotates the keys by an orthogonal matrix (:func:`hadamard`) before another cache
  quantizes them, and back when they are read: the same attention in exact arithmetic, an outlier channel spread
  over all of them before rounding.

:func:`quantize_tiles` and :func:`dequantize_tiles` are the tile rule on its own. ``nbytes`` of a cache is
measured from the tensors it holds; :func:`quantized_bytes_per_token` is the formula (the tests check both agree).

References:
    llama.cpp, ``ggml/src/ggml-quants.c`` (``quantize_row_q8_0_ref``, ``quantize_row_q4_0_ref``) and
    ``ggml-common.h`` (``block_q8_0``: 32 int8 and a float16 scale, 34 bytes; ``block_q4_0``: 18 bytes).
    Liu et al., "KIVI: A Tuning-Free Asymmetric 2bit Quantization for KV Cache", ICML 2024 (arXiv:2402.02750).
    DeepSeek-AI, FlashMLA's FP8 KV cache for DeepSeek-V3.2 (512 e4m3 latent numbers, a float32 scale per 128).
    Ashkboos et al., "QuaRot: Outlier-Free 4-Bit Inference in Rotated LLMs", 2024 (arXiv:2404.00456).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import torch
from torch import Tensor

from ._checks import device as check_device
from ._checks import flag, instance, size, tensor
from .kv_cache import LayerCache

__all__ = ["FP8", "Q4_0", "Q8_0", "KIVICache", "RotatedKeysCache", "TileFormat", "TileQuantizedCache",
           "dequantize_tiles", "hadamard", "quantize_tiles", "quantized_bytes_per_token"]

_FP8_MAX = torch.finfo(torch.float8_e4m3fn).max  # 448


@dataclass(frozen=True)
class TileFormat:
    """How a tile is stored: ``bits`` per code, ``tile`` numbers per scale, the scale's dtype, int or float8 codes.

    Example:
        >>> Q4_0.bytes_per_number, FP8.bytes_per_number
        (Fraction(9, 16), Fraction(33, 32))
    """

    name: str
    bits: int  # 8 or 4
    tile: int  # numbers sharing one scale
    scale_dtype: torch.dtype
    float8: bool = False  # codes are float8 e4m3 (else signed integers)

    def __post_init__(self) -> None:
        instance("name", self.name, str, "a str")
        object.__setattr__(self, "bits", size("bits", self.bits))  # a plain int (numpy's too)
        object.__setattr__(self, "tile", size("tile", self.tile, hint="numbers per scale"))
        flag("float8", self.float8)
        if self.bits not in (4, 8) or (self.float8 and self.bits != 8):
            raise ValueError(f"bits must be 8 or 4 (8 for float8 codes); got bits={self.bits}")
        if self.tile % 2:
            raise ValueError(f"tile must be even (4-bit codes are packed two to a byte); got tile={self.tile}")
        if not isinstance(self.scale_dtype, torch.dtype) or not self.scale_dtype.is_floating_point:
            raise TypeError(f"scale_dtype must be a floating torch.dtype such as torch.float16; got "
                            f"{self.scale_dtype!r}")

    @property
    def largest_code(self) -> float:
        """The largest code magnitude a tile's largest number maps to: 127, 7 or 448."""
        return _FP8_MAX if self.float8 else float(2 ** (self.bits - 1) - 1)

    @property
    def bytes_per_number(self) -> Fraction:
        """Bytes per cached number, its share of the scale included (exact: 34/32 is ``Fraction(17, 16)``)."""
        scale = torch.empty((), dtype=self.scale_dtype).element_size()
        return Fraction(self.bits, 8) + Fraction(scale, self.tile)


Q8_0 = TileFormat("q8_0", 8, 32, torch.float16)
Q4_0 = TileFormat("q4_0", 4, 32, torch.float16)
FP8 = TileFormat("fp8_e4m3", 8, 128, torch.float32, float8=True)


def _format(fmt: object) -> TileFormat:
    if not isinstance(fmt, TileFormat):
        raise TypeError(f"fmt must be a TileFormat such as Q8_0, Q4_0 or FP8; got {type(fmt).__name__}")
    return fmt


def _pack(codes: Tensor, bits: int) -> Tensor:
    """``(..., N)`` uint8 codes below ``2**bits`` -> ``(..., N * bits / 8)`` bytes, the first code in the low bits."""
    if bits == 8:
        return codes
    per = 8 // bits
    shifts = torch.arange(0, 8, bits, dtype=torch.uint8, device=codes.device)  # (per,)
    return (codes.reshape(*codes.shape[:-1], -1, per) << shifts).sum(-1, dtype=torch.uint8)  # (..., N / per)


def _unpack(packed: Tensor, bits: int) -> Tensor:
    """The inverse of :func:`_pack`: ``(..., M)`` bytes -> ``(..., M * 8 / bits)`` uint8 codes."""
    if bits == 8:
        return packed
    shifts = torch.arange(0, 8, bits, dtype=torch.uint8, device=packed.device)
    codes: Tensor = (packed[..., None] >> shifts) & (2**bits - 1)  # (..., M, 8 / bits)
    return codes.flatten(-2)


def quantize_tiles(x: Tensor, fmt: TileFormat) -> tuple[Tensor, Tensor]:
    """Codes and scales of ``x``, one scale per tile of ``fmt.tile`` numbers along the last dimension.

    The scale is the tile's largest magnitude over ``fmt.largest_code``; each code is ``x / scale`` rounded to the
    format's grid (to an integer, or to the nearest float8 e4m3), clamped to the code range.

    Shapes:
        x: ``(..., N)`` with ``N`` a multiple of ``fmt.tile``; returns codes ``(..., N * bits / 8)`` (int8, uint8
        holding two 4-bit codes, or float8) and scales ``(..., N / tile)`` in ``fmt.scale_dtype``.

    Raises:
        TypeError: if ``x`` is not a floating tensor or ``fmt`` not a :class:`TileFormat`.
        ValueError: if ``x`` is a scalar or its last dimension is not a multiple of the tile.

    Example:
        >>> codes, scales = quantize_tiles(torch.tensor([[1.0, -2.0] * 16]), Q8_0)
        >>> codes[0, :2].tolist(), scales.tolist(), dequantize_tiles(codes, scales, Q8_0)[0, :2].tolist()
        ([64, -127], [[0.0157470703125]], [1.0078125, -1.9998779296875])
    """
    fmt = _format(fmt)
    x = tensor("x", x, shape="(..., N)")
    if x.ndim == 0 or x.shape[-1] % fmt.tile:
        raise ValueError(f"x's last dimension must be a multiple of the tile, {fmt.tile} ({fmt.name}); got shape "
                         f"{tuple(x.shape)}")
    tiles = x.float().reshape(*x.shape[:-1], -1, fmt.tile)  # (..., N / tile, tile)
    largest = tiles.abs().amax(-1, keepdim=True)  # (..., N / tile, 1)
    if fmt.float8:  # the scale stays float32, as transformers' "fp8" cache and FlashMLA keep it
        scale = (largest / fmt.largest_code).clamp(min=torch.finfo(torch.float32).tiny)
        codes = (tiles / scale).clamp(-_FP8_MAX, _FP8_MAX).to(torch.float8_e4m3fn).flatten(-2)
        return codes, scale.squeeze(-1)
    scale = (largest / fmt.largest_code).to(fmt.scale_dtype)  # stored, so the codes use the rounded one
    s = scale.float()
    q = torch.where(s > 0, tiles / s.clamp(min=torch.finfo(torch.float32).tiny), 0.0)
    low = -(2 ** (fmt.bits - 1))
    q = q.round().clamp(low, -low - 1).flatten(-2)  # (..., N): integers in [-2^(b-1), 2^(b-1) - 1]
    if fmt.bits == 8:
        return q.to(torch.int8), scale.squeeze(-1)
    return _pack((q - low).to(torch.uint8), fmt.bits), scale.squeeze(-1)  # offset codes, two to a byte


def dequantize_tiles(codes: Tensor, scales: Tensor, fmt: TileFormat, dtype: torch.dtype = torch.float32) -> Tensor:
    """``codes * scale``, each tile by its scale: the inverse of :func:`quantize_tiles`, up to rounding.

    Shapes:
        codes: ``(..., N * bits / 8)``, scales: ``(..., N / tile)``; returns ``(..., N)`` in ``dtype``.

    Raises:
        TypeError: if ``codes``/``scales`` are not tensors, ``fmt`` not a :class:`TileFormat`.
        ValueError: if the shapes do not match each other.

    Example:
        >>> x = torch.randn(2, 64)
        >>> (dequantize_tiles(*quantize_tiles(x, Q4_0), Q4_0) - x).abs().max() < 0.1 * x.abs().max()
        tensor(True)
    """
    fmt = _format(fmt)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating torch.dtype such as torch.float32; got {dtype!r}")
    codes = tensor("codes", codes, shape="(..., N * bits / 8)", dtype="any")
    scales = tensor("scales", scales, shape="(..., N / tile)")
    if fmt.bits == 8:
        q = codes.float()
    else:
        q = _unpack(codes, fmt.bits).float() - 2 ** (fmt.bits - 1)  # (..., N)
    if codes.shape[:-1] != scales.shape[:-1] or q.shape[-1] != scales.shape[-1] * fmt.tile:
        raise ValueError(f"codes {tuple(codes.shape)} and scales {tuple(scales.shape)} must be one tile's scale for "
                         f"every {fmt.tile} codes ({fmt.name}); use the pair quantize_tiles returned")
    x = q.reshape(*q.shape[:-1], -1, fmt.tile) * scales.float()[..., None]  # (..., N / tile, tile)
    return x.flatten(-2).to(dtype)


def quantized_bytes_per_token(num_kv_heads: int, head_dim: int, fmt: TileFormat, v_head_dim: int | None = None) -> int:
    """Bytes one token adds to a :class:`TileQuantizedCache`: ``K * (E + Ev)`` numbers at ``fmt.bytes_per_number``.

    Example:
        >>> quantized_bytes_per_token(num_kv_heads=8, head_dim=128, fmt=Q4_0)  # Llama 3 8B, one layer: 4096 in bf16
        1152
    """
    fmt = _format(fmt)
    K, E = size("num_kv_heads", num_kv_heads), size("head_dim", head_dim)
    Ev = size("v_head_dim", head_dim if v_head_dim is None else v_head_dim)
    _whole_tiles(K, {"head_dim": E, "v_head_dim": Ev}, fmt)
    return int(K * (E + Ev) * fmt.bytes_per_number)


def _whole_tiles(num_kv_heads: int, widths: dict[str, int], fmt: TileFormat) -> None:
    """Each token's row of ``K * E`` numbers must cut into whole tiles, or a ValueError names the width."""
    for name, width in widths.items():
        if (num_kv_heads * width) % fmt.tile:
            raise ValueError(f"num_kv_heads * {name} = {num_kv_heads} * {width} must be a multiple of the tile, "
                             f"{fmt.tile} ({fmt.name}): each token's row is cut into whole tiles")


def _check_kv(cache: _CacheShape, k: object, v: object) -> tuple[Tensor, Tensor]:
    """``k`` and ``v`` if they fit ``cache`` (batch, heads, widths, dtype, device; no grad recorded), else an error."""
    for name, t, width in (("k", k, cache.head_dim), ("v", v, cache.v_head_dim)):
        t = tensor(name, t, ndim=4, shape="(B, K, T, E)")
        want = (cache.batch_size, cache.num_kv_heads, width)
        if (t.shape[0], t.shape[1], t.shape[3]) != want:
            raise ValueError(f"{name} of shape {tuple(t.shape)} does not fit this cache: expected (B, K, T, "
                             f"{'E' if name == 'k' else 'Ev'}) = ({want[0]}, {want[1]}, T, {want[2]})")
        if t.dtype != cache.dtype or t.device != cache.device:
            raise ValueError(f"{name} is {t.dtype} on {t.device} but the cache stores {cache.dtype} on "
                             f"{cache.device}; make the cache with dtype= and device=")
        if t.requires_grad and torch.is_grad_enabled():
            raise ValueError(f"{name} requires grad: KV caches are for inference; run decoding under torch.no_grad()")
    assert isinstance(k, Tensor) and isinstance(v, Tensor)
    if k.shape[2] != v.shape[2] or k.shape[2] < 1:
        raise ValueError(f"k and v must add the same number (>= 1) of positions; got {tuple(k.shape)}, "
                         f"{tuple(v.shape)}")
    if cache.length + k.shape[2] > cache.max_len:
        raise ValueError(f"cache is full: it holds {cache.length} of max_len={cache.max_len} positions and cannot "
                         f"take {k.shape[2]} more; make it with max_len >= {cache.length + k.shape[2]}")
    return k, v


class _CacheShape(LayerCache):
    """What both caches are made with, checked once."""

    def __init__(self, batch_size: int, num_kv_heads: int, head_dim: int, max_len: int, v_head_dim: int | None,
                 dtype: torch.dtype, device: torch.device | str | None) -> None:
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise TypeError(f"dtype must be a floating torch.dtype such as torch.float32; got {dtype!r}")
        self.batch_size, self.num_kv_heads = size("batch_size", batch_size), size("num_kv_heads", num_kv_heads)
        self.head_dim, self.max_len = size("head_dim", head_dim), size("max_len", max_len)
        self.v_head_dim = size("v_head_dim", head_dim if v_head_dim is None else v_head_dim)
        where = check_device("device", device)
        self.dtype, self.device = dtype, torch.empty(0, device=where).device
        self.length = 0

    def reset(self) -> None:
        """Forget every cached token (the memory stays allocated)."""
        self.truncate(0)


class TileQuantizedCache(_CacheShape):
    """A layer's keys and values in a :class:`TileFormat`: codes and one scale per tile of each token's row.

    Each token's keys, all ``K`` heads' ``E`` numbers, form one row of ``K * E`` numbers cut into tiles of
    ``fmt.tile`` (its values likewise); each tile is stored as codes and a scale. :meth:`update` returns every
    cached position dequantized, so the layer attends as it would over a :class:`~lessons_src.kv_cache.KVCache`.

    Args:
        batch_size: ``B``.
        num_kv_heads: ``K``.
        head_dim: ``E``.
        max_len: positions to preallocate.
        fmt: ``Q8_0``, ``Q4_0`` or ``FP8`` (``K * E`` and ``K * Ev`` multiples of its tile).
        v_head_dim: ``Ev`` (default ``E``).
        dtype: the dtype keys and values arrive and leave in.
        device: where to allocate.

    Shapes:
        :meth:`update` takes ``(B, K, T, E)`` and ``(B, K, T, Ev)`` and returns ``(B, K, S, E)``, ``(B, K, S, Ev)``.

    Raises:
        TypeError: if a size is not an int, ``fmt`` not a :class:`TileFormat`, ``dtype`` not a floating dtype.
        ValueError: if a size is below 1, a row is not a whole number of tiles, and in :meth:`update`.

    Example:
        >>> cache = TileQuantizedCache(batch_size=1, num_kv_heads=2, head_dim=16, max_len=8, fmt=Q8_0)
        >>> k, v = cache.update(torch.randn(1, 2, 3, 16), torch.randn(1, 2, 3, 16))
        >>> k.shape, cache.nbytes == 3 * quantized_bytes_per_token(2, 16, Q8_0)
        (torch.Size([1, 2, 3, 16]), True)
    """

    def __init__(self, batch_size: int, num_kv_heads: int, head_dim: int, max_len: int, fmt: TileFormat, *,
                 v_head_dim: int | None = None, dtype: torch.dtype = torch.float32,
                 device: torch.device | str | None = None) -> None:
        super().__init__(batch_size, num_kv_heads, head_dim, max_len, v_head_dim, dtype, device)
        self.fmt = _format(fmt)
        _whole_tiles(self.num_kv_heads, {"head_dim": self.head_dim, "v_head_dim": self.v_head_dim}, self.fmt)
        B, L, K = self.batch_size, self.max_len, self.num_kv_heads
        code = torch.float8_e4m3fn if fmt.float8 else torch.int8 if fmt.bits == 8 else torch.uint8
        self.k_codes, self.v_codes = (torch.zeros(B, L, K * w * fmt.bits // 8, dtype=code, device=self.device)
                                      for w in (self.head_dim, self.v_head_dim))  # (B, L, K*E*bits/8)
        self.k_scales, self.v_scales = (torch.zeros(B, L, K * w // fmt.tile, dtype=fmt.scale_dtype, device=self.device)
                                        for w in (self.head_dim, self.v_head_dim))  # (B, L, K*E/tile)

    def update(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Store ``T`` new positions as codes and scales; return every cached position dequantized.

        Raises:
            ValueError: if ``k``/``v`` do not fit (batch, heads, widths, dtype, device), add different numbers of
                positions, require grad while autograd records, or would grow the cache past ``max_len``.
        """
        k, v = _check_kv(self, k, v)
        start, end = self.length, self.length + k.shape[2]
        for new, codes, scales in ((k, self.k_codes, self.k_scales), (v, self.v_codes, self.v_scales)):
            rows = new.transpose(1, 2).flatten(2)  # (B, T, K*E): each token's row
            codes[:, start:end], scales[:, start:end] = quantize_tiles(rows, self.fmt)
        self.length = end
        return self._read(self.k_codes, self.k_scales), self._read(self.v_codes, self.v_scales)

    def _read(self, codes: Tensor, scales: Tensor) -> Tensor:
        rows = dequantize_tiles(codes[:, : self.length], scales[:, : self.length], self.fmt, self.dtype)  # (B, S, K*E)
        return rows.reshape(*rows.shape[:-1], self.num_kv_heads, -1).transpose(1, 2)  # (B, K, S, E)

    @property
    def nbytes(self) -> int:
        """Bytes of the cached positions' codes and scales, measured from the tensors."""
        parts = (self.k_codes, self.k_scales, self.v_codes, self.v_scales)
        return sum(t[:, : self.length].numel() * t.element_size() for t in parts)


def _quantize_min_max(x: Tensor, dim: int, bits: int) -> tuple[Tensor, Tensor, Tensor]:
    """Asymmetric codes of ``x`` over ``dim``: ``x ~ code * scale + minimum``, codes in ``0 .. 2**bits - 1``."""
    low, high = x.amin(dim, keepdim=True), x.amax(dim, keepdim=True)
    scale = ((high - low) / (2**bits - 1)).to(torch.float16)  # stored in float16, like the minimum
    low16 = low.to(torch.float16)
    s = scale.float()
    codes = torch.where(s > 0, (x - low16.float()) / s.clamp(min=torch.finfo(torch.float32).tiny), 0.0)
    return codes.round().clamp(0, 2**bits - 1).to(torch.uint8), scale, low16


class KIVICache(_CacheShape):
    """KIVI's cache: keys quantized per channel, values per token, the latest tokens in full precision.

    Keys have a few channels far larger than the rest (outlier channels), so a key's scale is taken per
    channel, over a block of tokens; values have no such channels and are quantized per token. New tokens
    wait in a full-precision residual buffer; when it holds ``residual`` tokens or more after an update, its
    tokens (the update's included) become one quantized block, with one scale and minimum per head and channel
    for the keys, and the buffer empties. The update that fills it still attends to those tokens in full
    precision. ``transformers``' ``QuantizedCache`` follows this schedule, but also quantizes its very first
    update whatever its length, quantizes keys and values on one axis, and re-quantizes the whole cache at
    each flush; this cache quantizes each block once.

    Args:
        batch_size: ``B``.
        num_kv_heads: ``K``.
        head_dim: ``E``.
        max_len: positions to preallocate.
        bits: 2, 4 or 8 bits per code (KIVI: 2).
        residual: ``R``, tokens gathered before a block is quantized (KIVI: 32 to 128).
        v_head_dim: ``Ev`` (default ``E``).
        dtype: the dtype keys and values arrive and leave in (and the residual's).
        device: where to allocate.

    Shapes:
        :meth:`update` takes ``(B, K, T, E)`` and ``(B, K, T, Ev)`` and returns ``(B, K, S, E)``, ``(B, K, S, Ev)``.

    Raises:
        TypeError: if a size is not an int or ``dtype`` not a floating dtype.
        ValueError: if a size is below 1, ``bits`` is not 2, 4 or 8, ``E * bits`` or ``Ev * bits`` is not a multiple
            of 8, and in :meth:`update`.

    Example:
        >>> cache = KIVICache(batch_size=1, num_kv_heads=1, head_dim=8, max_len=16, residual=4)
        >>> for _ in range(6):
        ...     k, v = cache.update(torch.randn(1, 1, 1, 8), torch.randn(1, 1, 1, 8))
        >>> cache.quantized, cache.length  # tokens 0-3 made one block when the fourth arrived
        (4, 6)
    """

    def __init__(self, batch_size: int, num_kv_heads: int, head_dim: int, max_len: int, *, bits: int = 2,
                 residual: int = 32, v_head_dim: int | None = None, dtype: torch.dtype = torch.float32,
                 device: torch.device | str | None = None) -> None:
        super().__init__(batch_size, num_kv_heads, head_dim, max_len, v_head_dim, dtype, device)
        self.bits, self.residual = size("bits", bits), size("residual", residual, hint="tokens kept in full precision")
        if self.bits not in (2, 4, 8):
            raise ValueError(f"bits must be 2, 4 or 8 (codes packed whole into bytes); got bits={bits}")
        if (self.head_dim * self.bits) % 8 or (self.v_head_dim * self.bits) % 8:
            raise ValueError(f"head_dim={self.head_dim} and v_head_dim={self.v_head_dim} must fill whole bytes at "
                             f"bits={self.bits}; use widths that are multiples of {8 // self.bits}")
        B, K, L, dev = self.batch_size, self.num_kv_heads, self.max_len, self.device
        E, Ev = self.head_dim, self.v_head_dim
        self.quantized, self.held = 0, 0  # quantized tokens, then full-precision ones: length = quantized + held
        self.k_codes = torch.zeros(B, K, L, E * self.bits // 8, dtype=torch.uint8, device=dev)
        self.v_codes = torch.zeros(B, K, L, Ev * self.bits // 8, dtype=torch.uint8, device=dev)
        half = torch.float16
        self.k_scale = torch.zeros(B, K, L, E, dtype=half, device=dev)  # per block (the first `blocks` in use)
        self.k_min = torch.zeros(B, K, L, E, dtype=half, device=dev)
        self.v_scale = torch.zeros(B, K, L, 1, dtype=half, device=dev)  # per token
        self.v_min = torch.zeros(B, K, L, 1, dtype=half, device=dev)
        self.block_of = torch.zeros(L, dtype=torch.long, device=dev)  # each quantized token's block
        self.blocks = 0
        self.k_held = torch.zeros(B, K, self.residual, E, dtype=dtype, device=dev)  # the residual, full precision
        self.v_held = torch.zeros(B, K, self.residual, Ev, dtype=dtype, device=dev)

    def _keys_values(self) -> tuple[Tensor, Tensor]:
        """Every quantized token dequantized, ``(B, K, quantized, E)`` and ``(B, K, quantized, Ev)``."""
        n, b = self.quantized, self.block_of[: self.quantized]  # b: each token's block
        k = _unpack(self.k_codes[:, :, :n], self.bits).float() * self.k_scale[:, :, b].float()  # (B, K, n, E)
        v = _unpack(self.v_codes[:, :, :n], self.bits).float() * self.v_scale[:, :, :n].float()  # (B, K, n, Ev)
        return (k + self.k_min[:, :, b].float()).to(self.dtype), (v + self.v_min[:, :, :n].float()).to(self.dtype)

    def update(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Add ``T`` new positions; return the quantized ones dequantized, then the residual and the new ones as given.

        Raises:
            ValueError: if ``k``/``v`` do not fit (batch, heads, widths, dtype, device), add different numbers of
                positions, require grad while autograd records, or would grow the cache past ``max_len``.
        """
        k, v = _check_kv(self, k, v)
        old_k, old_v = self._keys_values()
        h, T = self.held, k.shape[2]
        keys = torch.cat([old_k, self.k_held[:, :, :h], k], dim=2)  # (B, K, S, E)
        values = torch.cat([old_v, self.v_held[:, :, :h], v], dim=2)  # (B, K, S, Ev)
        if h + T < self.residual:  # the residual still has room: keep the new tokens as they are
            self.k_held[:, :, h : h + T], self.v_held[:, :, h : h + T] = k, v
            self.held += T
        else:  # the residual's tokens and the new ones become one quantized block
            a, b = self.quantized, self.quantized + h + T
            m = self.blocks
            codes, self.k_scale[:, :, m : m + 1], self.k_min[:, :, m : m + 1] = _quantize_min_max(
                keys[:, :, a:b].float(), 2, self.bits)  # per channel: over the block's tokens
            self.k_codes[:, :, a:b] = _pack(codes, self.bits)
            codes, self.v_scale[:, :, a:b], self.v_min[:, :, a:b] = _quantize_min_max(values[:, :, a:b].float(), 3,
                                                                                      self.bits)  # per token
            self.v_codes[:, :, a:b] = _pack(codes, self.bits)
            self.block_of[a:b] = self.blocks
            self.blocks, self.quantized, self.held = self.blocks + 1, b, 0
        self.length = self.quantized + self.held
        return keys, values

    def truncate(self, length: int) -> None:
        """Keep the first ``length`` positions (a block cut short keeps its scales).

        Raises:
            TypeError: if ``length`` is not an int.
            ValueError: if ``length`` is negative or more than the cache holds.
        """
        super().truncate(length)
        if self.length >= self.quantized:
            self.held = self.length - self.quantized
            return
        self.quantized, self.held = self.length, 0
        self.blocks = int(self.block_of[self.length - 1]) + 1 if self.length else 0

    @property
    def nbytes(self) -> int:
        """Bytes of the codes, scales and minimums of the quantized tokens and of the residual, from the tensors."""
        n, h, m = self.quantized, self.held, self.blocks
        parts = (self.k_codes[:, :, :n], self.v_codes[:, :, :n], self.v_scale[:, :, :n], self.v_min[:, :, :n],
                 self.k_scale[:, :, :m], self.k_min[:, :, :m], self.k_held[:, :, :h], self.v_held[:, :, :h])
        return sum(t.numel() * t.element_size() for t in parts)


def hadamard(n: int, *, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None) -> Tensor:
    """The ``n x n`` Hadamard matrix over ``sqrt(n)``: orthogonal, every entry ``+-1/sqrt(n)`` (Sylvester's build).

    Rotating a vector by it spreads each coordinate over all of them: a channel ``c`` times larger than the rest
    becomes ``n`` coordinates of similar size, which one scale suits better.

    Raises:
        TypeError: if ``n`` is not an int.
        ValueError: if ``n`` is not a power of two.

    Example:
        >>> H = hadamard(4)
        >>> torch.allclose(H @ H.T, torch.eye(4)), H[1].tolist()
        (True, [0.5, -0.5, 0.5, -0.5])
    """
    n = size("n", n)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating torch.dtype such as torch.float32; got {dtype!r}")
    if n & (n - 1):
        raise ValueError(f"n must be a power of two (Sylvester's construction); got n={n}")
    where = check_device("device", device)
    h = torch.ones(1, 1, dtype=dtype, device=where)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)  # (2m, 2m)
    out: Tensor = h / n**0.5
    return out


class RotatedKeysCache(LayerCache):
    """Keys rotated by an orthogonal ``R`` before another cache stores them, and rotated back when read.

    Attention reads keys only through scores ``q . k``, and ``q . k = (q R) . (k R)`` for an orthogonal ``R``: a
    rotation changes nothing in exact arithmetic. Quantized, it does: a Hadamard ``R`` spreads an outlier channel
    over every channel, so the per-token scales of the cache inside fit the rotated keys better. Engines rotate the
    queries too and keep the keys rotated (QuaRot, SpinQuant); rotating the keys back when read is the same
    attention and keeps the layer unchanged. Values pass through as they are.

    Args:
        inner: the cache that stores the rotated keys and the values (a ``TileQuantizedCache``, a ``KIVICache``).
        rotation: ``R``, ``(E, E)``, orthogonal (:func:`hadamard`, or ``torch.linalg.qr`` of a random matrix).

    Shapes:
        :meth:`update` takes ``(B, K, T, E)`` and ``(B, K, T, Ev)`` and returns ``(B, K, S, E)``, ``(B, K, S, Ev)``.

    Raises:
        TypeError: if ``inner`` is not a ``LayerCache`` or ``rotation`` not a floating tensor.
        ValueError: if ``rotation`` is not square or not orthogonal.

    Example:
        >>> cache = RotatedKeysCache(TileQuantizedCache(1, 1, 32, 4, Q4_0), hadamard(32))
        >>> k = torch.randn(1, 1, 2, 32)
        >>> keys, values = cache.update(k, k)
        >>> keys.shape, cache.nbytes == cache.inner.nbytes
        (torch.Size([1, 1, 2, 32]), True)
    """

    def __init__(self, inner: LayerCache, rotation: Tensor) -> None:
        instance("inner", inner, LayerCache, "a LayerCache such as TileQuantizedCache")
        R = tensor("rotation", rotation, ndim=2, shape="(E, E)")
        eye = torch.eye(R.shape[0], dtype=R.dtype, device=R.device)
        if R.shape[0] != R.shape[1] or (R.device.type != "meta" and not torch.allclose(R @ R.T, eye, atol=1e-4)):
            raise ValueError(f"rotation must be an orthogonal (E, E) matrix (R @ R.T == I), such as hadamard(E); "
                             f"got shape {tuple(R.shape)}")
        self.inner, self.rotation, self.length = inner, R, inner.length

    def update(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """The inner cache's update of ``k @ R`` and ``v``; its keys come back rotated by ``R.T``.

        Raises:
            ValueError: as the inner cache's update, and if ``k``'s width is not ``R``'s.
        """
        k = tensor("k", k, ndim=4, shape="(B, K, T, E)")
        if k.shape[-1] != self.rotation.shape[0]:
            raise ValueError(f"k's width {k.shape[-1]} must be the rotation's, {self.rotation.shape[0]}; use a "
                             "rotation of size head_dim")
        keys, values = self.inner.update(k @ self.rotation.to(k.dtype), v)  # (B, K, S, E): stored rotated
        self.length = self.inner.length
        return keys @ self.rotation.T.to(keys.dtype), values

    def truncate(self, length: int) -> None:
        """Keep the first ``length`` positions of the inner cache."""
        super().truncate(length)
        self.inner.truncate(length)

    @property
    def nbytes(self) -> int:
        """The inner cache's bytes (the rotation is one matrix per layer, not per token)."""
        return self.inner.nbytes
