"""Caches for incremental decoding: keep what past tokens contributed so each new token costs one step.

A decoder generates one token at a time, and every new query attends to the keys and values of all the
tokens before it. Those keys and values never change, so they are computed once and kept: that is the
KV cache. It is preallocated to ``max_len`` positions, filled by a *prefill* (the prompt, all at once),
then grown by one or more new tokens per decoding step.

* :class:`KVCache` holds per-head keys and values, ``(B, K, S, E)`` each: MHA (``K = H``), GQA, MQA
  (``K = 1``). Bytes per token per layer: ``K * (E + Ev) * bytes_per_element``.
* :class:`LatentCache` holds what multi-head latent attention (MLA) needs: one compressed latent of size
  ``C`` and one RoPE key of size ``R`` per token, shared by all heads, stored side by side as
  ``(B, S, C + R)``. Bytes per token per layer: ``(C + R) * bytes_per_element``.
* :class:`RollingKVCache` is a fixed-size cache for sliding-window attention: the last ``window``
  tokens, plus optionally the first ``sink_tokens`` tokens (StreamingLLM's attention sinks). Its memory stops
  growing at ``sink_tokens + window`` positions, however long the sequence.
* :class:`ChunkedKVCache` is the cache for chunked attention (Llama 4): a query sees only the keys of its own
  chunk of ``chunk`` positions, so the cache keeps the current chunk and empties when the next one starts.

The ``nbytes`` of a cache is measured from its tensors; :func:`kv_bytes_per_token` and
:func:`latent_bytes_per_token` are the formulas. The tests and the lesson check that the two agree.

References:
    Pope et al., "Efficiently Scaling Transformer Inference", 2022 (arXiv:2211.05102), on why the KV
    cache dominates decoding memory.
    DeepSeek-AI, "DeepSeek-V2", 2024 (arXiv:2405.04434), section 2.1.
    Jiang et al., "Mistral 7B", 2023 (arXiv:2310.06825), section 2 (rolling buffer cache).
    Xiao et al., "Efficient Streaming Language Models with Attention Sinks", ICLR 2024 (arXiv:2309.17453),
    section 3.2 (rolling KV cache with attention sinks).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import NamedTuple

import torch
from torch import Tensor

from ._checks import size
from .masks import sliding_window

__all__ = [
    "ChunkedKVCache",
    "KVCache",
    "LatentCache",
    "LayerCache",
    "RollingKVCache",
    "RollingUpdate",
    "kv_bytes_per_token",
    "latent_bytes_per_token",
]


def kv_bytes_per_token(num_kv_heads: int, head_dim: int, dtype: torch.dtype, v_head_dim: int | None = None) -> int:
    """Bytes one token adds to a layer's K/V cache: ``K * (E + Ev) * bytes_per_element``.

    Example:
        >>> kv_bytes_per_token(num_kv_heads=8, head_dim=128, dtype=torch.bfloat16)  # Llama 3 8B, one layer
        4096
    """
    v_head_dim = head_dim if v_head_dim is None else v_head_dim
    size("num_kv_heads", num_kv_heads), size("head_dim", head_dim), size("v_head_dim", v_head_dim)
    return num_kv_heads * (head_dim + v_head_dim) * _element_size(dtype)


def latent_bytes_per_token(kv_latent_dim: int, rope_dim: int, dtype: torch.dtype) -> int:
    """Bytes one token adds to a layer's MLA cache: ``(C + R) * bytes_per_element``.

    Example:
        >>> latent_bytes_per_token(kv_latent_dim=512, rope_dim=64, dtype=torch.bfloat16)  # DeepSeek-V2
        1152
    """
    size("kv_latent_dim", kv_latent_dim), size("rope_dim", rope_dim)
    return (kv_latent_dim + rope_dim) * _element_size(dtype)


def _float_dtype(dtype: object) -> torch.dtype:
    """A cache stores keys and values: a floating ``torch.dtype``, or a ``TypeError``/``ValueError`` naming it."""
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype such as torch.float32; got {dtype!r}")
    if not dtype.is_floating_point:
        raise ValueError(f"dtype={dtype} cannot hold keys and values; use a floating dtype such as torch.float32")
    return dtype


def _element_size(dtype: object) -> int:
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype such as torch.bfloat16; got {dtype!r}")
    return torch.empty((), dtype=dtype).element_size()


def _sizes(sizes: dict[str, object]) -> dict[str, int]:
    """Every size checked by :func:`lessons_src._checks.size`: an int of at least 1, or an error naming it."""
    return {name: size(name, n) for name, n in sizes.items()}


def _check_new(name: str, t: Tensor, expected: tuple[int | None, ...], names: str, buf: Tensor) -> None:
    """Raise a ValueError unless ``t`` fits: ``expected`` shape (``None`` = any length), ``buf``'s dtype and device.

    Caches are for inference: appending tensors that require gradients while autograd records would
    write them in place into the buffers (the backward pass fails, and the graph stays alive after
    :meth:`reset`), so that is refused too.
    """
    if not isinstance(t, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor; got {type(t).__name__}")
    if t.requires_grad and torch.is_grad_enabled():
        raise ValueError(
            f"{name} requires grad: KV caches are for inference; run decoding under torch.no_grad() or "
            "torch.inference_mode() (to train, run the full sequence without a cache)"
        )
    if t.device != buf.device:
        raise ValueError(f"{name} is on {t.device} but the cache is on {buf.device}; make the cache with device=")
    ok = t.ndim == len(expected) and all(e is None or e == n for e, n in zip(expected, t.shape, strict=False))
    if not ok:
        want = tuple("T" if e is None else e for e in expected)
        raise ValueError(
            f"{name} of shape {tuple(t.shape)} does not fit this cache: expected {names} = {want}"
            " (batch size and widths are fixed when the cache is made)"
        )
    if t.dtype != buf.dtype:
        raise ValueError(f"{name} has dtype {t.dtype} but the cache stores {buf.dtype}; convert one of them")


class LayerCache(ABC):
    """What an attention layer asks of the cache it decodes with: ``length``, ``update``, ``truncate``.

    :class:`lessons_src.layer.MultiHeadAttention` takes any subclass: it reads ``length`` (the new tokens'
    first position), hands the new keys and values to :meth:`update` and attends to what comes back, and on a
    failed step calls :meth:`truncate` to forget what it appended. A cache with another layout or storage
    (contiguous, a sequence in a page pool, quantized) is a subclass with its own :meth:`update`. Rolling,
    chunked and latent caches are not: they return something else from their ``update``, and a layer that
    uses them calls it itself.
    """

    length: int  # positions held: the next token's position

    @abstractmethod
    def update(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Append ``(B, K, T, E)`` keys and ``(B, K, T, Ev)`` values; return every cached position's, ``S`` long."""

    @property
    @abstractmethod
    def nbytes(self) -> int:
        """Bytes the cached positions occupy, measured from the tensors that hold them."""

    def truncate(self, length: int) -> None:
        """Keep the first ``length`` positions and forget the rest (a failed step, rejected draft tokens).

        Raises:
            TypeError: if ``length`` is not an int.
            ValueError: if ``length`` is negative or more than the cache holds.
        """
        length = size("length", length, minimum=0, hint="positions to keep")
        if length > self.length:
            raise ValueError(f"length={length} but the cache holds only {self.length} positions; truncate keeps a "
                             "prefix of what is cached and cannot add positions")
        self.length = length


class _Preallocated:
    """Shared bookkeeping: a fixed number of positions, of which the first ``length`` are filled."""

    max_len: int
    length: int

    def _reserve(self, T: int) -> tuple[int, int]:
        if T < 1:
            raise ValueError(f"nothing to append: got {T} new positions (T must be at least 1)")
        if self.length + T > self.max_len:
            raise ValueError(
                f"cache is full: it holds {self.length} of max_len={self.max_len} positions and cannot take "
                f"{T} more; make it with max_len >= {self.length + T}"
            )
        start, self.length = self.length, self.length + T
        return start, self.length

    def reset(self) -> None:
        """Forget every cached token (the memory stays allocated)."""
        self.length = 0


class KVCache(_Preallocated, LayerCache):
    """Keys and values of past tokens for one attention layer (MHA, GQA or MQA), preallocated.

    Args:
        batch_size: ``B``.
        num_kv_heads: ``K`` (``num_heads`` for MHA, ``1`` for MQA).
        head_dim: ``E``, the key width per head.
        max_len: positions to preallocate (prompt + every token to be generated).
        v_head_dim: ``Ev``, the value width per head (default ``E``).
        dtype: element type.
        device: where to allocate.

    Shapes:
        k: ``(B, K, max_len, E)``, v: ``(B, K, max_len, Ev)``; :meth:`update` takes ``(B, K, T, E)`` and
        ``(B, K, T, Ev)`` and returns the filled part, ``(B, K, S, E)`` and ``(B, K, S, Ev)``.

    Caches are for inference: :meth:`update` refuses tensors that require gradients while autograd is
    recording (decode under ``torch.no_grad()`` or ``torch.inference_mode()``).

    Raises:
        TypeError: if a size is not an int.
        ValueError: if a size is below 1, and in :meth:`update` (see there).

    Example:
        >>> cache = KVCache(batch_size=2, num_kv_heads=1, head_dim=4, max_len=10)
        >>> k, v = cache.update(torch.randn(2, 1, 3, 4), torch.randn(2, 1, 3, 4))
        >>> k.shape, cache.nbytes == 3 * 2 * kv_bytes_per_token(1, 4, torch.float32)
        (torch.Size([2, 1, 3, 4]), True)
    """

    def __init__(
        self,
        batch_size: int,
        num_kv_heads: int,
        head_dim: int,
        max_len: int,
        *,
        v_head_dim: int | None = None,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        v_head_dim = head_dim if v_head_dim is None else v_head_dim
        dtype = _float_dtype(dtype)
        _sizes({"batch_size": batch_size, "num_kv_heads": num_kv_heads, "head_dim": head_dim,
                "max_len": max_len, "v_head_dim": v_head_dim})
        self.batch_size, self.num_kv_heads = batch_size, num_kv_heads
        self.head_dim, self.v_head_dim = head_dim, v_head_dim
        self.max_len, self.length = max_len, 0
        self.k = torch.zeros(batch_size, num_kv_heads, max_len, head_dim, dtype=dtype, device=device)  # (B, K, L, E)
        self.v = torch.zeros(batch_size, num_kv_heads, max_len, v_head_dim, dtype=dtype, device=device)  # (B, K, L, Ev)

    def update(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Append ``T`` new positions and return all cached keys and values (views, no copy).

        Raises:
            ValueError: if the batch size, head count or width of ``k``/``v`` differs from the cache's,
                ``k`` and ``v`` have different lengths, the dtype or device differs, they require grad
                while autograd records, or the cache would grow past ``max_len``.
        """
        B, K = self.batch_size, self.num_kv_heads
        _check_new("k", k, (B, K, None, self.head_dim), "(B, K, T, E)", self.k)
        _check_new("v", v, (B, K, None, self.v_head_dim), "(B, K, T, Ev)", self.v)
        if k.shape[2] != v.shape[2]:
            raise ValueError(
                f"k and v must add the same number of positions; got k {tuple(k.shape)}, v {tuple(v.shape)}"
            )
        start, end = self._reserve(k.shape[2])
        self.k[:, :, start:end] = k
        self.v[:, :, start:end] = v
        return self.k[:, :, :end], self.v[:, :, :end]  # (B, K, S, E), (B, K, S, Ev)

    @property
    def nbytes(self) -> int:
        """Bytes held by the cached tokens, measured from the tensors (not the preallocated total)."""
        k, v = self.k[:, :, : self.length], self.v[:, :, : self.length]
        return k.numel() * k.element_size() + v.numel() * v.element_size()


class LatentCache(_Preallocated):
    """What multi-head latent attention caches for one layer: a latent and a RoPE key per token.

    Both are shared by all heads and stored side by side in one tensor, ``kv = [latent | k_rope]``, so
    that absorbed MLA can use the same tensor as the key and (its first ``C`` columns) as the value.

    Args:
        batch_size: ``B``.
        kv_latent_dim: ``C`` (the paper's ``d_c``).
        rope_dim: ``R`` (the paper's ``d_h^R``).
        max_len: positions to preallocate.
        dtype: element type.
        device: where to allocate.

    Shapes:
        kv: ``(B, max_len, C + R)``; :meth:`update` takes ``(B, T, C)`` and ``(B, T, R)`` and returns
        ``(B, S, C + R)``.

    For inference only, like :class:`KVCache`.

    Raises:
        TypeError: if a size is not an int.
        ValueError: if a size is below 1 (``rope_dim`` too, as in :class:`lessons_src.mla.MultiHeadLatentAttention`),
            and in :meth:`update` (see there).

    Example:
        >>> cache = LatentCache(batch_size=1, kv_latent_dim=8, rope_dim=2, max_len=4)
        >>> cache.update(torch.randn(1, 3, 8), torch.randn(1, 3, 2)).shape
        torch.Size([1, 3, 10])
    """

    def __init__(
        self,
        batch_size: int,
        kv_latent_dim: int,
        rope_dim: int,
        max_len: int,
        *,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        # rope_dim >= 1, as MultiHeadLatentAttention requires (its decoupled RoPE key is never empty)
        dtype = _float_dtype(dtype)
        _sizes({"batch_size": batch_size, "kv_latent_dim": kv_latent_dim, "rope_dim": rope_dim, "max_len": max_len})
        self.batch_size, self.kv_latent_dim, self.rope_dim = batch_size, kv_latent_dim, rope_dim
        self.max_len, self.length = max_len, 0
        self.kv = torch.zeros(batch_size, max_len, kv_latent_dim + rope_dim, dtype=dtype, device=device)  # (B, L, C+R)

    def update(self, latent: Tensor, k_rope: Tensor) -> Tensor:
        """Append ``T`` new positions and return everything cached, ``[latent | k_rope]`` (a view).

        Raises:
            ValueError: if the batch size or width differs from the cache's, the two lengths differ,
                the dtype differs, or the cache would grow past ``max_len``.
        """
        B = self.batch_size
        _check_new("latent", latent, (B, None, self.kv_latent_dim), "(B, T, C)", self.kv)
        _check_new("k_rope", k_rope, (B, None, self.rope_dim), "(B, T, R)", self.kv)
        if latent.shape[1] != k_rope.shape[1]:
            raise ValueError(
                f"latent and k_rope must add the same number of positions; got {tuple(latent.shape)}, "
                f"{tuple(k_rope.shape)}"
            )
        start, end = self._reserve(latent.shape[1])
        self.kv[:, start:end, : self.kv_latent_dim] = latent
        self.kv[:, start:end, self.kv_latent_dim :] = k_rope
        return self.kv[:, :end]  # (B, S, C + R)

    @property
    def nbytes(self) -> int:
        """Bytes held by the cached tokens, measured from the tensor (not the preallocated total)."""
        kv = self.kv[:, : self.length]
        return kv.numel() * kv.element_size()


class RollingUpdate(NamedTuple):
    """What :meth:`RollingKVCache.update` returns: the keys and values to attend to, and who may see what.

    Attributes:
        k: ``(B, K, S, E)``, keys of every position a new query may need (in storage order, not time order).
        v: ``(B, K, S, Ev)``.
        mask: bool ``(T, S)``, ``True`` where new query ``t`` may attend to key ``s``; ``None`` when every
            query may see every key (one new token into a full cache: the common decoding step).
        positions: ``(S,)``, the original position of each key (``-1`` for a slot not filled yet).
    """

    k: Tensor
    v: Tensor
    mask: Tensor | None
    positions: Tensor


class RollingKVCache:
    """A fixed-size KV cache for sliding-window attention: the last ``window`` tokens and ``sink_tokens`` first ones.

    A sliding window of ``W`` lets a query see ``W`` keys, its own included (Hugging Face's count, in
    ``transformers``' ``sliding_window_overlay``: key ``j`` when ``j > p - W``), so no key more than ``W - 1``
    positions back, and older keys can be dropped: Mistral's *rolling buffer* stores position ``p`` in slot
    ``p mod W``, overwriting the key that just left the window. The Mistral 7B paper (section 2) counts its
    window differently: position ``i`` attends to ``i - W .. i``, ``W + 1`` keys, as its reference
    implementation's ``triu(mask, diagonal=-W)`` does; its ``W`` (Mistral 7B: 4,096) is ``window=W + 1``
    here, and a cache of that many slots. ``sink_tokens = n`` also keeps the first
    ``n`` tokens for good (Xiao et al.'s attention sinks: many heads park attention on the first tokens,
    and evicting them hurts a window-only cache). So the cache holds ``sink_tokens + window`` positions at most,
    and decoding costs the same per token at position 1,000 or 1,000,000.

    Keys are cached **after** RoPE, each rotated by its **original** position, and a query at position
    ``p`` is rotated by ``p``. Attention is then exactly what a full forward pass computes with
    ``causal_mask(..., window=W, sink_tokens=n)`` (the tests check it), and the order of the slots does not
    matter: a rotated key carries its position with it. StreamingLLM does something else: it caches keys
    *before* RoPE and, at every step, rotates them by their position *inside the cache* (sinks at
    ``0..n-1``, the window right after), so the distance from a query to the sinks stays small. That keeps
    every relative distance within what the model saw in training, which is how StreamingLLM runs a model
    far beyond its training length, but it changes the computation: it no longer equals any masked full
    pass, and every key is re-rotated at every step. This course keeps original positions so that the
    cache is a pure memory saving, testable against the full computation; with a model trained with a
    window (Mistral), original positions are also what its training used.

    Args:
        batch_size: ``B``.
        num_kv_heads: ``K``.
        head_dim: ``E``.
        window: ``W``, positions each query sees, its own included (``>= 1``; the Mistral paper's ``W`` + 1).
        sink_tokens: first positions kept for good (``>= 0``).
        spare: slots beyond the window (``>= 0``), for speculative decoding: draft tokens written and then
            rejected (:meth:`truncate`) must not have overwritten a key the next query still sees, so a cache
            that checks drafts of up to ``d`` tokens needs ``spare >= d``.
        v_head_dim: ``Ev`` (default ``E``).
        dtype: element type.
        device: where to allocate.

    Shapes:
        k: ``(B, K, sink_tokens + window + spare, E)``; :meth:`update` takes ``(B, K, T, E)`` and ``(B, K, T, Ev)``.

    For inference only, like :class:`KVCache`.

    Raises:
        TypeError: if a size is not an int.
        ValueError: if ``window`` or another size is below 1, ``sink_tokens`` is negative, and in :meth:`update`.

    Example:
        >>> cache = RollingKVCache(batch_size=1, num_kv_heads=1, head_dim=2, window=3, sink_tokens=1)
        >>> for _ in range(6):
        ...     step = cache.update(torch.randn(1, 1, 1, 2), torch.randn(1, 1, 1, 2))
        >>> sorted(step.positions.tolist()), step.mask is None  # token 5 sees 0 (a sink) and 3, 4, 5
        ([0, 3, 4, 5], True)
    """

    def __init__(
        self,
        batch_size: int,
        num_kv_heads: int,
        head_dim: int,
        window: int,
        *,
        sink_tokens: int = 0,
        spare: int = 0,
        v_head_dim: int | None = None,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        v_head_dim = head_dim if v_head_dim is None else v_head_dim
        if isinstance(window, int) and not isinstance(window, bool) and window < 1:
            raise ValueError(f"window must be at least 1 (the query itself); got window={window}")
        dtype = _float_dtype(dtype)
        sizes = _sizes({"batch_size": batch_size, "num_kv_heads": num_kv_heads, "head_dim": head_dim,
                        "window": window, "v_head_dim": v_head_dim})
        batch_size, num_kv_heads, head_dim, window, v_head_dim = sizes.values()
        sink_tokens = size("sink_tokens", sink_tokens, 0, hint="0: a window-only cache")
        self.batch_size, self.num_kv_heads = batch_size, num_kv_heads
        self.head_dim, self.v_head_dim = head_dim, v_head_dim
        self.window, self.sink_tokens = window, sink_tokens
        self.spare = size("spare", spare, 0, hint="slots for draft tokens; 0 without speculation")
        self.ring = window + self.spare  # the slots that turn over
        self.max_len = sink_tokens + self.ring  # slots
        self.rule = sliding_window(window, sink_tokens=sink_tokens)  # which keys a new token sees
        self.length = 0  # tokens seen so far: the next token's position
        self.k = torch.zeros(batch_size, num_kv_heads, self.max_len, head_dim, dtype=dtype, device=device)
        self.v = torch.zeros(batch_size, num_kv_heads, self.max_len, v_head_dim, dtype=dtype, device=device)
        self.positions = torch.full((self.max_len,), -1, dtype=torch.long, device=device)  # -1: empty slot

    def slot(self, position: int) -> int:
        """The slot that holds ``position``: its own for a kept first token, else ``n + (position - n) mod ring``
        (``ring = window + spare``)."""
        n = self.sink_tokens
        return position if position < n else n + (position - n) % self.ring

    def update(self, k: Tensor, v: Tensor) -> RollingUpdate:
        """Add ``T`` new tokens (keys already rotated by their positions ``length .. length + T - 1``).

        Returns what the new queries attend to: with ``T == 1`` the buffer itself after the new token
        overwrote the one leaving the window (every slot visible once the cache is full, so ``mask`` is
        ``None``); with ``T > 1`` (a prompt, or a chunk of one) the kept keys followed by the new ones,
        with the window-and-sink mask, since early queries of the chunk still see keys that later ones
        push out. Afterwards the cache keeps the sinks and the last ``window`` positions.

        Raises:
            ValueError: if ``k``/``v`` do not fit the cache (batch, heads, widths, dtype, device), have
                different lengths, add no position, or require grad while autograd records.
        """
        B, K = self.batch_size, self.num_kv_heads
        _check_new("k", k, (B, K, None, self.head_dim), "(B, K, T, E)", self.k)
        _check_new("v", v, (B, K, None, self.v_head_dim), "(B, K, T, Ev)", self.v)
        T = k.shape[2]
        if v.shape[2] != T or T < 1:
            raise ValueError(
                f"k and v must add the same number (>= 1) of positions; got {tuple(k.shape)}, {tuple(v.shape)}"
            )
        start, end = self.length, self.length + T
        if T == 1:  # decoding: write, then attend to the buffer
            slot = self.slot(start)
            self.k[:, :, slot], self.v[:, :, slot], self.positions[slot] = k[:, :, 0], v[:, :, 0], start
            self.length = end
            filled = self.positions >= 0
            if self.spare:  # more slots than the window: the window rule decides, on positions
                zero = self.positions.new_zeros(())
                filled = filled & self.rule(zero, zero, self.positions.new_tensor(start), self.positions)
            mask = None if bool(filled.all()) else filled[None, :]  # (1, S): hide the empty slots
            return RollingUpdate(self.k, self.v, mask, self.positions.clone())
        kept = (self.positions >= 0).nonzero().flatten()  # slots in use, before this chunk
        new_pos = torch.arange(start, end, device=self.positions.device)  # (T,)
        pos = torch.cat([self.positions[kept], new_pos])  # (S,) with S = kept + T
        k_all = torch.cat([self.k[:, :, kept], k], dim=2)  # (B, K, S, E)
        v_all = torch.cat([self.v[:, :, kept], v], dim=2)  # (B, K, S, Ev)
        p, j = new_pos[:, None], pos[None, :]  # query and key positions
        zero = p.new_zeros(())
        mask = self.rule(zero, zero, p, j)  # (T, S): the window rule of masks.py, on positions
        survive = (new_pos < self.sink_tokens) | (new_pos >= end - self.ring)  # the new tokens the cache keeps
        slots = torch.tensor([self.slot(int(q)) for q in new_pos[survive]], dtype=torch.long, device=pos.device)
        self.k[:, :, slots], self.v[:, :, slots] = k[:, :, survive], v[:, :, survive]
        self.positions[slots] = new_pos[survive]
        self.length = end
        return RollingUpdate(k_all, v_all, mask, pos)

    def reset(self) -> None:
        """Forget every cached token (the memory stays allocated)."""
        self.length = 0
        self.positions.fill_(-1)

    def truncate(self, length: int) -> None:
        """Forget the positions from ``length`` on (rejected draft tokens): the next token goes at ``length``.

        Raises:
            TypeError: if ``length`` is not an int.
            ValueError: if ``length`` is negative or more than the cache has seen, or the forgotten tokens had
                overwritten keys the token at ``length`` would see (a draft longer than ``spare``).
        """
        length = size("length", length, minimum=0, hint="positions to keep")
        if length > self.length:
            raise ValueError(f"length={length} but the cache has seen only {self.length} positions; truncate keeps a "
                             "prefix of what is cached and cannot add positions")
        self.positions[self.positions >= length] = -1
        self.length = length
        first = max(self.sink_tokens, length - self.window + 1)  # the oldest window key the next token sees
        needed = set(range(min(self.sink_tokens, length))) | set(range(first, length))
        lost = sorted(needed - set(self.positions.tolist()))
        if lost:
            raise ValueError(f"positions {lost[0]}..{lost[-1]} were overwritten by draft tokens now dropped (more "
                             f"than spare={self.spare} of them), and the token at {length} sees them: make the cache "
                             "with spare >= the longest draft")

    @property
    def nbytes(self) -> int:
        """Bytes held by the filled slots, measured from the tensors (at most ``sink_tokens + window + spare``
        positions)."""
        used = int((self.positions >= 0).sum())
        k, v = self.k[:, :, :1], self.v[:, :, :1]  # one slot
        per_position = k.numel() * k.element_size() + v.numel() * v.element_size()
        return used * per_position


class ChunkedKVCache:
    """A KV cache for chunked attention (Llama 4): the keys and values of the current chunk, at most ``chunk``.

    With chunks of ``C`` a query at position ``p`` sees keys ``C * (p // C) .. p`` only, so everything before
    the current chunk's start can go. Unlike a rolling window, the cache empties each time a chunk starts: its
    memory is at most ``C`` positions, and on average half that. Keys are cached after RoPE, rotated by their
    original positions, so attention equals the full pass with ``causal_mask(..., chunk=C)`` (the tests check it).

    Args:
        batch_size: ``B``.
        num_kv_heads: ``K``.
        head_dim: ``E``.
        chunk: ``C``, positions per chunk (``>= 1``; Llama 4: 8,192).
        v_head_dim: ``Ev`` (default ``E``).
        dtype: element type.
        device: where to allocate.

    Shapes:
        k: ``(B, K, chunk, E)``; :meth:`update` takes ``(B, K, T, E)`` and ``(B, K, T, Ev)`` and returns a
        :class:`RollingUpdate` with ``S`` keys (those of the current chunk up to the new tokens, or, when the new
        tokens cross a chunk boundary, those of every chunk they touch).

    For inference only, like :class:`KVCache`.

    Raises:
        TypeError: if a size is not an int.
        ValueError: if a size is below 1, and in :meth:`update`.

    Example:
        >>> cache = ChunkedKVCache(batch_size=1, num_kv_heads=1, head_dim=2, chunk=4)
        >>> for _ in range(6):
        ...     step = cache.update(torch.randn(1, 1, 1, 2), torch.randn(1, 1, 1, 2))
        >>> step.positions.tolist(), cache.nbytes == 2 * kv_bytes_per_token(1, 2, torch.float32)  # token 5: 4, 5
        ([4, 5], True)
    """

    def __init__(
        self,
        batch_size: int,
        num_kv_heads: int,
        head_dim: int,
        chunk: int,
        *,
        v_head_dim: int | None = None,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        v_head_dim = head_dim if v_head_dim is None else v_head_dim
        dtype = _float_dtype(dtype)
        sizes = _sizes({"batch_size": batch_size, "num_kv_heads": num_kv_heads, "head_dim": head_dim,
                        "chunk": chunk, "v_head_dim": v_head_dim})
        self.batch_size, self.num_kv_heads, self.head_dim, self.chunk, self.v_head_dim = sizes.values()
        self.max_len = self.chunk  # slots
        self.length = 0  # tokens seen so far: the next token's position
        shape = (self.batch_size, self.num_kv_heads, self.chunk)
        self.k = torch.zeros(*shape, self.head_dim, dtype=dtype, device=device)  # (B, K, C, E)
        self.v = torch.zeros(*shape, self.v_head_dim, dtype=dtype, device=device)  # (B, K, C, Ev)

    @property
    def held(self) -> int:
        """Positions the cache holds: those of the current chunk seen so far (``length mod chunk``, or ``chunk``)."""
        return self.length - self.chunk * ((self.length - 1) // self.chunk) if self.length else 0

    def update(self, k: Tensor, v: Tensor) -> RollingUpdate:
        """Add ``T`` new tokens (keys already rotated by their positions ``length .. length + T - 1``).

        Returns what the new queries attend to. New tokens that stay in the current chunk are written into
        the buffer and attend to it (``mask`` is ``None`` for one token, causal among the new ones for more);
        a block that crosses into a new chunk attends to the kept keys followed by its own, with the
        chunk-and-causal mask, and the cache then keeps only the last chunk's tokens.

        Raises:
            ValueError: if ``k``/``v`` do not fit the cache (batch, heads, widths, dtype, device), have
                different lengths, add no position, or require grad while autograd records.
        """
        B, K, C = self.batch_size, self.num_kv_heads, self.chunk
        _check_new("k", k, (B, K, None, self.head_dim), "(B, K, T, E)", self.k)
        _check_new("v", v, (B, K, None, self.v_head_dim), "(B, K, T, Ev)", self.v)
        T = k.shape[2]
        if v.shape[2] != T or T < 1:
            raise ValueError(
                f"k and v must add the same number (>= 1) of positions; got {tuple(k.shape)}, {tuple(v.shape)}"
            )
        start, end = self.length, self.length + T
        first = C * (start // C)  # the current chunk's first position
        kept = start - first  # its positions already cached, in slots 0 .. kept - 1
        new_pos = torch.arange(start, end, device=self.k.device)  # (T,)
        if (end - 1) // C == start // C:  # the new tokens stay in this chunk: write, then attend to the buffer
            self.k[:, :, kept : kept + T], self.v[:, :, kept : kept + T] = k, v
            self.length = end
            pos = torch.arange(first, end, device=self.k.device)  # (S,)
            mask = None if T == 1 else pos[None, :] <= new_pos[:, None]  # (T, S): causal among the new ones
            return RollingUpdate(self.k[:, :, : kept + T], self.v[:, :, : kept + T], mask, pos)
        pos = torch.arange(first, end, device=self.k.device)  # (S,): the kept keys, then the new ones
        k_all = torch.cat([self.k[:, :, :kept], k], dim=2)  # (B, K, S, E)
        v_all = torch.cat([self.v[:, :, :kept], v], dim=2)  # (B, K, S, Ev)
        p, j = new_pos[:, None], pos[None, :]
        mask = (j <= p) & (j // C == p // C)  # (T, S): causal, same chunk
        last = C * ((end - 1) // C)  # the last chunk's first position: the cache keeps from here
        n = end - last
        self.k[:, :, :n], self.v[:, :, :n] = k[:, :, T - n :], v[:, :, T - n :]
        self.length = end
        return RollingUpdate(k_all, v_all, mask, pos)

    def reset(self) -> None:
        """Forget every cached token (the memory stays allocated)."""
        self.length = 0

    @property
    def nbytes(self) -> int:
        """Bytes held by the current chunk's tokens, measured from the tensors (at most ``chunk`` positions)."""
        k, v = self.k[:, :, : self.held], self.v[:, :, : self.held]
        return k.numel() * k.element_size() + v.numel() * v.element_size()
