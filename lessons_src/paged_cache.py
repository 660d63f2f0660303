"""A paged KV cache: one pool of fixed-size blocks shared by many sequences, and attention through it.

A server decoding many sequences at once cannot know how long each will grow. A contiguous cache
(:class:`lessons_src.kv_cache.KVCache`) reserves ``max_len`` positions per sequence up front, so a batch
of ragged lengths wastes everything between each sequence's length and the longest. PagedAttention
(Kwon et al. 2023, the idea behind vLLM) borrows from virtual memory instead:

* the cache is one **pool** of ``num_blocks`` blocks of ``block_size`` positions each;
* each sequence owns a **block table**: the list of pool blocks holding its positions ``0..bs-1``,
  ``bs..2bs-1``, and so on, in order; its blocks need not be adjacent in the pool;
* a sequence takes a new block only when its last one is full, and gives all of them back when it ends,
  so at most ``block_size - 1`` positions per sequence are reserved and unused.

``block 7 of the pool`` ... ``block table of sequence 3: [7, 2, 9]`` means positions 0-15 are in block 7,
16-31 in block 2, 32-47 in block 9 (with ``block_size = 16``).

:func:`paged_attention` computes attention for a batch of sequences of different lengths straight from
the pool: it reads the block tables a chunk of blocks at a time and combines the chunks with the online
softmax of FlashAttention (the running max and sum of :mod:`lessons_src.flash`), so no sequence's keys
are ever copied into one contiguous tensor. It equals attention over each sequence's own contiguous
cache (the tests check it, including after sequences are freed and their blocks reused).

References:
    Kwon et al., "Efficient Memory Management for Large Language Model Serving with PagedAttention",
    SOSP 2023 (arXiv:2309.06180).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["PagedKVCache", "paged_attention"]

_NEG_INF = float("-inf")


def _positive(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int; got {value!r} of type {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be at least 1; got {name}={value}")
    return value


class PagedKVCache:
    """Keys and values of many sequences in one pool of fixed-size blocks, with a block table per sequence.

    Args:
        num_blocks: blocks in the pool.
        block_size: positions per block (vLLM's default is 16).
        num_kv_heads: ``K``.
        head_dim: ``E``.
        v_head_dim: ``Ev`` (default ``E``).
        dtype: element type.
        device: where to allocate the pool.

    Shapes:
        pool ``k``: ``(K, num_blocks, block_size, E)``, ``v``: ``(K, num_blocks, block_size, Ev)`` (head
        first, so that the blocks gathered for a batch line up as ``(K, B, L, E)`` without a transpose);
        :meth:`append` takes one sequence's ``(K, T, E)`` and ``(K, T, Ev)``.

    For inference only: :meth:`append` refuses tensors that require grad while autograd records.

    Raises:
        TypeError: if a size is not an int.
        ValueError: if a size is below 1; in the methods, on an unknown or freed sequence, an exhausted
            pool or tensors that do not fit (see each method).

    Example:
        >>> cache = PagedKVCache(num_blocks=8, block_size=4, num_kv_heads=1, head_dim=2)
        >>> cache.add_sequence(0); cache.add_sequence(1)
        >>> cache.append(0, torch.randn(1, 6, 2), torch.randn(1, 6, 2))  # 6 positions: 2 blocks
        >>> cache.append(1, torch.randn(1, 3, 2), torch.randn(1, 3, 2))  # 3 positions: 1 block
        >>> cache.block_tables, cache.num_free_blocks
        ({0: [0, 1], 1: [2]}, 5)
    """

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        num_kv_heads: int,
        head_dim: int,
        *,
        v_head_dim: int | None = None,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        v_head_dim = head_dim if v_head_dim is None else v_head_dim
        for name, n in (("num_blocks", num_blocks), ("num_kv_heads", num_kv_heads), ("head_dim", head_dim),
                        ("v_head_dim", v_head_dim)):
            _positive(name, n)
        if isinstance(block_size, bool) or not isinstance(block_size, int):
            raise TypeError(f"block_size must be an int; got {block_size!r} of type {type(block_size).__name__}")
        if block_size < 1:
            raise ValueError(f"block_size must be at least 1 position (vLLM uses 16); got block_size={block_size}")
        self.num_blocks, self.block_size = num_blocks, block_size
        self.num_kv_heads, self.head_dim, self.v_head_dim = num_kv_heads, head_dim, v_head_dim
        # (K, num_blocks, block_size, E): one pool per KV head
        self.k = torch.zeros(num_kv_heads, num_blocks, block_size, head_dim, dtype=dtype, device=device)
        self.v = torch.zeros(num_kv_heads, num_blocks, block_size, v_head_dim, dtype=dtype, device=device)
        self._free = list(range(num_blocks - 1, -1, -1))  # a stack: pop() hands out block 0 first
        self.block_tables: dict[int, list[int]] = {}
        self.lengths: dict[int, int] = {}

    @property
    def num_free_blocks(self) -> int:
        """Blocks not owned by any sequence."""
        return len(self._free)

    @property
    def block_nbytes(self) -> int:
        """Bytes of one block (keys and values)."""
        return (self.k[:, 0].numel() * self.k.element_size()) + (self.v[:, 0].numel() * self.v.element_size())

    @property
    def nbytes(self) -> int:
        """Bytes of the blocks in use: what the sequences occupy, rounded up to whole blocks."""
        return (self.num_blocks - self.num_free_blocks) * self.block_nbytes

    def _known(self, seq_id: int) -> None:
        if isinstance(seq_id, bool) or not isinstance(seq_id, int):
            raise TypeError(f"a sequence id must be an int; got {seq_id!r} of type {type(seq_id).__name__}")
        if seq_id not in self.block_tables:
            known = sorted(self.block_tables) or "none"
            raise ValueError(
                f"sequence {seq_id} is not in the cache (never added, or already freed); sequences in it: {known}"
            )

    def add_sequence(self, seq_id: int) -> None:
        """Start an empty sequence (no block is taken until it has positions).

        Raises:
            ValueError: if ``seq_id`` is already in the cache.
        """
        if isinstance(seq_id, bool) or not isinstance(seq_id, int):
            raise TypeError(f"a sequence id must be an int; got {seq_id!r} of type {type(seq_id).__name__}")
        if seq_id in self.block_tables:
            raise ValueError(f"sequence {seq_id} is already in the cache; free it first or use another id")
        self.block_tables[seq_id], self.lengths[seq_id] = [], 0

    def free(self, seq_id: int) -> None:
        """End a sequence and return its blocks to the pool (their contents are left to be overwritten).

        Raises:
            ValueError: if ``seq_id`` is not in the cache (never added, or freed already).
        """
        self._known(seq_id)
        self._free.extend(reversed(self.block_tables.pop(seq_id)))
        del self.lengths[seq_id]

    def append(self, seq_id: int, k: Tensor, v: Tensor) -> None:
        """Append ``T`` positions to one sequence, taking new blocks from the pool as its last one fills.

        Raises:
            ValueError: on an unknown or freed sequence; if the pool has too few free blocks (nothing is
                written then); if ``k``/``v`` are not ``(K, T, E)``/``(K, T, Ev)`` of the pool's dtype and
                device, add no position, or require grad while autograd records.
        """
        self._known(seq_id)
        self._check(k, v)
        T, bs = k.shape[1], self.block_size
        start = self.lengths[seq_id]
        table = self.block_tables[seq_id]
        needed = math.ceil((start + T) / bs) - len(table)
        if needed > len(self._free):
            raise ValueError(
                f"the pool is exhausted: sequence {seq_id} needs {needed} more blocks of {bs} positions for "
                f"{T} new tokens but only {len(self._free)} of {self.num_blocks} are free; free finished "
                "sequences or make the cache with more num_blocks"
            )
        table.extend(self._free.pop() for _ in range(needed))
        pos = torch.arange(start, start + T, device=self.k.device)
        blocks = torch.tensor(table, dtype=torch.long, device=self.k.device)[pos // bs]  # (T,) block of each position
        self.k[:, blocks, pos % bs] = k  # (K, T, E): one position per (block, offset)
        self.v[:, blocks, pos % bs] = v
        self.lengths[seq_id] = start + T

    def _check(self, k: Tensor, v: Tensor) -> None:
        for name, t, width in (("k", k, self.head_dim), ("v", v, self.v_head_dim)):
            if not isinstance(t, Tensor):
                raise TypeError(f"{name} must be a torch.Tensor; got {type(t).__name__}")
            if t.ndim != 3 or t.shape[0] != self.num_kv_heads or t.shape[2] != width:
                want = "(K, T, E)" if name == "k" else "(K, T, Ev)"
                raise ValueError(
                    f"{name} of shape {tuple(t.shape)} does not fit: one sequence's {want} = "
                    f"({self.num_kv_heads}, T, {width})"
                )
            if t.dtype != self.k.dtype or t.device != self.k.device:
                raise ValueError(
                    f"{name} is {t.dtype} on {t.device} but the pool is {self.k.dtype} on {self.k.device}"
                )
            if t.requires_grad and torch.is_grad_enabled():
                raise ValueError(f"{name} requires grad: KV caches are for inference; decode under torch.no_grad()")
        if k.shape[1] != v.shape[1] or k.shape[1] < 1:
            raise ValueError(
                f"k and v must add the same number (>= 1) of positions; got {tuple(k.shape)}, {tuple(v.shape)}"
            )

    def gather(self, seq_id: int) -> tuple[Tensor, Tensor]:
        """One sequence's keys and values as contiguous tensors ``(K, L, E)``, ``(K, L, Ev)`` (a copy).

        :func:`paged_attention` does not need this; it is here to look at, and to test against.
        """
        self._known(seq_id)
        L = self.lengths[seq_id]
        blocks = torch.tensor(self.block_tables[seq_id], dtype=torch.long, device=self.k.device)
        k = self.k[:, blocks].reshape(self.num_kv_heads, -1, self.head_dim)[:, :L]  # (K, L, E)
        v = self.v[:, blocks].reshape(self.num_kv_heads, -1, self.v_head_dim)[:, :L]
        return k, v

    def table_tensor(self, seq_ids: list[int]) -> tuple[Tensor, Tensor]:
        """The block tables of ``seq_ids`` padded into one tensor (padding: block 0), and their lengths.

        Shapes:
            tables ``(B, max_blocks)`` long; lengths ``(B,)`` long.
        """
        for s in seq_ids:
            self._known(s)
        width = max(len(self.block_tables[s]) for s in seq_ids)
        rows = [self.block_tables[s] + [0] * (width - len(self.block_tables[s])) for s in seq_ids]
        device = self.k.device
        return (torch.tensor(rows, dtype=torch.long, device=device),
                torch.tensor([self.lengths[s] for s in seq_ids], dtype=torch.long, device=device))


def paged_attention(
    q: Tensor,
    cache: PagedKVCache,
    seq_ids: list[int],
    *,
    scale: float | None = None,
    chunk_blocks: int = 8,
) -> Tensor:
    """Attention of each sequence's newest ``T`` queries to its own cached keys, read through the block tables.

    Query ``t`` of sequence ``b`` (of length ``L_b``, its new tokens already appended) is at position
    ``L_b - T + t`` and sees keys ``0..L_b - T + t`` (bottom-right causal, per sequence). The block tables
    are read ``chunk_blocks`` columns at a time; each chunk's scores update a running max, sum and weighted
    sum of values (the online softmax), and sequences with no block in a chunk skip it.

    Args:
        q: ``(B, H, T, E)``, ``H`` a multiple of the cache's ``K`` (GQA without repeating keys).
        cache: the :class:`PagedKVCache` holding the sequences.
        seq_ids: the ``B`` sequences, in the order of ``q``'s batch.
        scale: score multiplier, default ``1 / sqrt(E)``.
        chunk_blocks: block-table columns read per step.

    Returns:
        ``(B, H, T, Ev)``.

    Raises:
        ValueError: if ``q`` does not match the cache or ``seq_ids`` (shape, heads, width, dtype, device),
            a sequence is unknown or freed, holds fewer than ``T`` positions, or ``chunk_blocks < 1``.

    Example:
        >>> cache = PagedKVCache(num_blocks=4, block_size=2, num_kv_heads=1, head_dim=4)
        >>> for s, n in ((0, 3), (1, 1)):
        ...     cache.add_sequence(s)
        ...     cache.append(s, torch.randn(1, n, 4), torch.randn(1, n, 4))
        >>> paged_attention(torch.randn(2, 2, 1, 4), cache, [0, 1]).shape
        torch.Size([2, 2, 1, 4])
    """
    _positive("chunk_blocks", chunk_blocks)
    if not isinstance(q, Tensor) or q.ndim != 4:
        raise ValueError(f"q must be (B, H, T, E); got shape {tuple(getattr(q, 'shape', ()))}")
    B, H, T, E = q.shape
    K, bs, Ev = cache.num_kv_heads, cache.block_size, cache.v_head_dim
    if len(seq_ids) != B:
        raise ValueError(f"q has a batch of {B} but {len(seq_ids)} sequence ids were given: {seq_ids}")
    if cache.head_dim != E or H % K != 0:
        raise ValueError(
            f"q of shape {tuple(q.shape)} does not fit the cache: E must be {cache.head_dim} and H a multiple of K={K}"
        )
    if q.dtype != cache.k.dtype or q.device != cache.k.device:
        raise ValueError(f"q is {q.dtype} on {q.device} but the pool is {cache.k.dtype} on {cache.k.device}")
    tables, lengths = cache.table_tensor(seq_ids)  # (B, max_blocks), (B,)
    short = [s for s, n in zip(seq_ids, lengths.tolist(), strict=True) if n < T]
    if short:
        raise ValueError(f"sequences {short} hold fewer than T={T} positions; append the new tokens first")
    scale = 1.0 / math.sqrt(E) if scale is None else float(scale)
    n_rep, R = H // K, (H // K) * T
    qg = (q.reshape(B, K, R, E).transpose(0, 1) * scale).contiguous()  # (K, B, R, E); row r*T + t: head k*n_rep + r
    q_pos = lengths[:, None] - T + torch.arange(T, device=q.device)  # (B, T) position of each query
    n_blocks = (lengths + bs - 1) // bs  # (B,)
    m = torch.full((K, B, R), _NEG_INF, dtype=q.dtype, device=q.device)  # running max
    l = torch.zeros(K, B, R, dtype=q.dtype, device=q.device)  # running sum of exp(s - m)
    acc = torch.zeros(K, B, R, Ev, dtype=q.dtype, device=q.device)  # running sum of exp(s - m) v
    for c0 in range(0, tables.shape[1], chunk_blocks):
        c1 = min(c0 + chunk_blocks, tables.shape[1])
        rows = (n_blocks > c0).nonzero().flatten()  # the sequences with a block in this chunk
        every = rows.numel() == B
        ids = tables[:, c0:c1] if every else tables[rows, c0:c1]  # (b, cb) pool blocks
        b, cb = ids.shape
        k = cache.k.index_select(1, ids.flatten()).view(K, b, cb * bs, E)  # (K, b, L, E), L = cb * bs: one copy
        v = cache.v.index_select(1, ids.flatten()).view(K, b, cb * bs, Ev)
        s = (qg if every else qg[:, rows]) @ k.transpose(-2, -1)  # (K, b, R, L)
        key_pos = torch.arange(c0 * bs, c1 * bs, device=q.device)  # (L,)
        hidden = key_pos > (q_pos if every else q_pos[rows])[:, :, None]  # (b, T, L): after the query, or padding
        s = s.view(K, b, n_rep, T, cb * bs).masked_fill(hidden[:, None], _NEG_INF).view(K, b, R, cb * bs)
        m_old, l_old, acc_old = (m, l, acc) if every else (m[:, rows], l[:, rows], acc[:, rows])
        m_new = torch.maximum(m_old, s.amax(dim=-1))
        shift = torch.where(m_new == _NEG_INF, torch.zeros_like(m_new), m_new)
        p = torch.exp(s - shift[..., None])  # (K, b, R, L)
        alpha = torch.exp(m_old - shift)  # rescales what was summed under the old max
        l_new = alpha * l_old + p.sum(dim=-1)
        acc_new = alpha[..., None] * acc_old + p @ v  # (K, b, R, Ev)
        if every:
            m, l, acc = m_new, l_new, acc_new
        else:
            m[:, rows], l[:, rows], acc[:, rows] = m_new, l_new, acc_new
    out = acc / torch.where(l > 0, l, torch.ones_like(l))[..., None]  # (K, B, R, Ev)
    return out.transpose(0, 1).reshape(B, H, T, Ev)
