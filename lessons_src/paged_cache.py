"""A paged KV cache: one pool of fixed-size blocks shared by many sequences, and attention through it.

A server decoding many sequences at once cannot know how long each will grow. A contiguous cache
(:class:`lessons_src.kv_cache.KVCache`) reserves ``max_len`` positions per sequence up front, so a batch
of ragged lengths wastes everything between each sequence's length and the longest. PagedAttention
(Kwon et al. 2023, the idea behind vLLM) borrows from virtual memory instead:

* the cache is one **pool** of ``num_blocks`` blocks of ``block_size`` positions each;
* each sequence owns a **block table**: the list of pool blocks holding its positions ``0..bs-1``,
  ``bs..2bs-1``, and so on, in order; its blocks need not be adjacent in the pool;
* a sequence takes a new block only when its last one is full, and gives all of them back when it ends,
  so at most ``block_size - 1`` positions per sequence are reserved and unused;
* a block may be **shared**: sequences that begin with the same tokens (one system prompt, a forked
  sampling) hold the same blocks for that prefix (:meth:`PagedKVCache.fork`). Each block has a reference
  count, the number of block tables naming it; it goes back to the pool when the count reaches 0, and a
  shared block is **copied on write**: a sequence about to write into a block another also holds gets
  its own copy first. :meth:`PagedKVCache.truncate` shortens a sequence (speculative decoding's rejected
  tokens) and gives back the blocks it no longer needs.

``block 7 of the pool`` ... ``block table of sequence 3: [7, 2, 9]`` means positions 0-15 are in block 7,
16-31 in block 2, 32-47 in block 9 (with ``block_size = 16``).

:func:`paged_attention` computes attention for a batch of sequences of different lengths straight from
the pool: it walks each block table as runs of consecutive blocks, each run a view of the pool, so a
sequence's long runs are never copied; only the few blocks taken one at a time are. It equals
attention over each sequence's own contiguous cache (the tests check it, including after sequences are
freed and their blocks reused).

The pool is laid out head-major, ``(K, num_blocks, block_size, E)``, so that for each head a run of
consecutive blocks is one contiguous stretch of keys: the scores of a run are then one matrix product
per head, the same as over a contiguous cache. vLLM's GPU kernel lays its pool out block-major and
reads it block by block; plain PyTorch pays per call, and the long contiguous reads are what keep a
paged decode step close to a contiguous one (``make bench-long-context`` measures both).

:class:`PagedView` is a :class:`lessons_src.kv_cache.LayerCache` over some of the pool's sequences, so a model's
cached decode (``TextGPT(..., caches=[one view per layer])``) runs on the pool's pages: the sequences' new tokens
are packed into one row, and each query sees its own sequence's keys only (:meth:`PagedView.documents`).

Needs ``kv_cache.py`` (with ``masks.py``) and ``_checks.py``.

References:
    Kwon et al., "Efficient Memory Management for Large Language Model Serving with PagedAttention",
    SOSP 2023 (arXiv:2309.06180); section 4.4 shares blocks between sequences with reference counts and
    copy-on-write.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ._checks import integer, size
from .kv_cache import LayerCache

__all__ = ["PagedKVCache", "PagedView", "block_runs", "paged_attention"]

_NEG_INF = float("-inf")


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
        pool ``k``: ``(K, num_blocks, block_size, E)``, ``v``: ``(K, num_blocks, block_size, Ev)``: one head's
        block is one contiguous piece of memory, and so is one head's run of consecutive blocks;
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
        num_blocks, num_kv_heads = size("num_blocks", num_blocks), size("num_kv_heads", num_kv_heads)
        head_dim, v_head_dim = size("head_dim", head_dim), size("v_head_dim", v_head_dim)
        block_size = integer("block_size", block_size)
        if not isinstance(dtype, torch.dtype):
            raise TypeError(f"dtype must be a torch.dtype such as torch.float32; got {dtype!r}")
        if not dtype.is_floating_point:
            raise ValueError(f"dtype={dtype} cannot hold keys and values; use a floating dtype such as torch.float32")
        if block_size < 1:
            raise ValueError(f"block_size must be at least 1 position (vLLM uses 16); got block_size={block_size}")
        self.num_blocks, self.block_size = num_blocks, block_size
        self.num_kv_heads, self.head_dim, self.v_head_dim = num_kv_heads, head_dim, v_head_dim
        # (K, num_blocks, block_size, E), head-major: a run of consecutive blocks is contiguous for each head
        self.k = torch.zeros(num_kv_heads, num_blocks, block_size, head_dim, dtype=dtype, device=device)
        self.v = torch.zeros(num_kv_heads, num_blocks, block_size, v_head_dim, dtype=dtype, device=device)
        self._free = list(range(num_blocks - 1, -1, -1))  # a stack: pop() hands out block 0 first
        self.refcounts = [0] * num_blocks  # block tables naming each block; 0: free
        self.block_tables: dict[int, list[int]] = {}
        self.lengths: dict[int, int] = {}
        # block_runs of each table as last checked, with the table it was made from: reused while the table
        # is unchanged (compared by value on every call), so a decode step does not split the table again.
        self._runs: dict[int, tuple[tuple[int, ...], list[tuple[int, int]]]] = {}

    @property
    def num_free_blocks(self) -> int:
        """Blocks not owned by any sequence."""
        return len(self._free)

    def _take(self) -> int:
        """A free block, now held once."""
        block = self._free.pop()
        self.refcounts[block] = 1
        return block

    def _release(self, blocks: list[int]) -> None:
        """Drop one reference to each block; a block no table names any more goes back to the pool."""
        for block in reversed(blocks):  # the stack then hands out a sequence's first block first again
            self.refcounts[block] -= 1
            if self.refcounts[block] == 0:
                self._free.append(block)

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

    def fork(self, source: int, seq_id: int, length: int | None = None) -> None:
        """Start sequence ``seq_id`` holding the first ``length`` positions of ``source`` (all of them by default),
        by sharing its blocks: no key or value is copied, and each shared block's reference count goes up by one.

        The last shared block may be partly filled (``length`` not a multiple of ``block_size``), or hold more of
        ``source``'s positions than ``seq_id`` keeps: whichever sequence next writes into it copies it first
        (:meth:`append`), so neither ever sees the other's new tokens.

        Raises:
            ValueError: if ``source`` is not in the cache, ``seq_id`` already is, or ``length`` is negative or more
                than ``source`` holds.
        """
        self._known(source)
        held = self.lengths[source]
        length = held if length is None else size("length", length, minimum=0, hint="positions to share")
        if length > held:
            raise ValueError(f"length={length} but sequence {source} holds only {held} positions; share at most "
                             f"length={held}")
        self.add_sequence(seq_id)
        shared = self.block_tables[source][: math.ceil(length / self.block_size)]
        for block in shared:
            self.refcounts[block] += 1
        self.block_tables[seq_id], self.lengths[seq_id] = list(shared), length

    def truncate(self, seq_id: int, length: int) -> None:
        """Keep the first ``length`` positions of sequence ``seq_id`` (a rollback: rejected draft tokens, a failed
        step) and drop its reference to every block it no longer needs; a block no sequence holds is free again.

        Raises:
            ValueError: if ``seq_id`` is not in the cache, or ``length`` is negative or more than it holds.
        """
        self._known(seq_id)
        length = size("length", length, minimum=0, hint="positions to keep")
        if length > self.lengths[seq_id]:
            raise ValueError(f"length={length} but sequence {seq_id} holds only {self.lengths[seq_id]} positions; "
                             "truncate keeps a prefix and cannot add positions")
        table, keep = self.block_tables[seq_id], math.ceil(length / self.block_size)
        self._release(table[keep:])
        del table[keep:]
        self.lengths[seq_id] = length

    def free(self, seq_id: int) -> None:
        """End a sequence and drop its reference to each of its blocks; a block no other sequence holds goes back
        to the pool (its contents are left to be overwritten).

        Raises:
            ValueError: if ``seq_id`` is not in the cache (never added, or freed already).
        """
        self._known(seq_id)
        self._release(self.block_tables.pop(seq_id))
        del self.lengths[seq_id]
        self._runs.pop(seq_id, None)

    def blocks_needed(self, seq_id: int, new: int) -> int:
        """Free blocks sequence ``seq_id`` takes to append ``new`` positions: the blocks past its last one, and a
        copy of its last block if that is partly filled and shared (copy-on-write)."""
        self._known(seq_id)
        start, table, bs = self.lengths[seq_id], self.block_tables[seq_id], self.block_size
        copy = start % bs != 0 and new > 0 and self.refcounts[table[-1]] > 1
        return math.ceil((start + new) / bs) - len(table) + int(copy)

    def append(self, seq_id: int, k: Tensor, v: Tensor) -> None:
        """Append ``T`` positions to one sequence, taking new blocks from the pool as its last one fills.

        If its last block is partly filled and shared with another sequence (:meth:`fork`), it first takes a copy
        of that block for itself (copy-on-write), so the other sequence's positions are never overwritten.

        Raises:
            ValueError: on an unknown or freed sequence; if the pool has too few free blocks (nothing is
                written then); if ``k``/``v`` are not ``(K, T, E)``/``(K, T, Ev)`` of the pool's dtype and
                device, add no position, or require grad while autograd records.
        """
        self._known(seq_id)
        self._check(k, v)
        T, bs = k.shape[1], self.block_size
        start, table = self._grow(seq_id, T), self.block_tables[seq_id]
        if T == 1:  # decoding: one position, written with plain indexing
            self.k[:, table[start // bs], start % bs] = k[:, 0]
            self.v[:, table[start // bs], start % bs] = v[:, 0]
            return
        pos = torch.arange(start, start + T, device=self.k.device)
        blocks = torch.tensor(table, dtype=torch.long, device=self.k.device)[pos // bs]  # (T,) block of each position
        self.k[:, blocks, pos % bs] = k  # (K, T, E): one position per (block, offset)
        self.v[:, blocks, pos % bs] = v

    def _grow(self, seq_id: int, T: int) -> int:
        """Make room for ``T`` more positions of a known sequence: copy its last block if that is partly filled and
        shared (copy-on-write), take the blocks past it; return where the new positions start. Writes no key."""
        bs, start, table = self.block_size, self.lengths[seq_id], self.block_tables[seq_id]
        needed = self.blocks_needed(seq_id, T)
        if needed > len(self._free):
            raise ValueError(
                f"the pool is exhausted: sequence {seq_id} needs {needed} more blocks of {bs} positions for "
                f"{T} new tokens but only {len(self._free)} of {self.num_blocks} are free; free finished "
                "sequences or make the cache with more num_blocks"
            )
        if start % bs != 0 and self.refcounts[table[-1]] > 1:  # copy-on-write: the last block is shared
            shared, own = table[-1], self._take()
            self.k[:, own], self.v[:, own] = self.k[:, shared], self.v[:, shared]
            self._release([shared])
            table[-1] = own
        table.extend(self._take() for _ in range(math.ceil((start + T) / bs) - len(table)))
        self.lengths[seq_id] = start + T
        return start

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

    def table(self, seq_id: int) -> list[int]:
        """Sequence ``seq_id``'s block table, checked: every id a block of the pool, as many as its length needs.

        :attr:`block_tables` is the one record of where a sequence's positions are (:meth:`gather` and
        :func:`paged_attention` both read it through here), so a caller may edit it (to move blocks).

        Raises:
            ValueError: on an unknown sequence, an id outside ``0 .. num_blocks - 1``, or a table whose
                length does not fit the sequence's.
        """
        self.runs(seq_id)
        return self.block_tables[seq_id]

    def runs(self, seq_id: int) -> list[tuple[int, int]]:
        """:func:`block_runs` of sequence ``seq_id``'s checked block table (see :meth:`table`); computed again
        only when the table has changed since the last call."""
        self._known(seq_id)
        table, L = self.block_tables[seq_id], self.lengths[seq_id]
        if len(table) != math.ceil(L / self.block_size):
            raise ValueError(
                f"sequence {seq_id} holds {L} positions, which take {math.ceil(L / self.block_size)} blocks of "
                f"{self.block_size}; its block table {table} has {len(table)}"
            )
        key = tuple(table)
        memo = self._runs.get(seq_id)
        if memo is None or memo[0] != key:
            bad = [b for b in table if isinstance(b, bool) or not isinstance(b, int) or not 0 <= b < self.num_blocks]
            if bad:
                raise ValueError(
                    f"sequence {seq_id}'s block table {table} names block {bad[0]!r}; "
                    f"the pool has 0..{self.num_blocks - 1}"
                )
            memo = self._runs[seq_id] = key, block_runs(table)
        return memo[1]

    def gather(self, seq_id: int) -> tuple[Tensor, Tensor]:
        """One sequence's keys and values as contiguous tensors ``(K, L, E)``, ``(K, L, Ev)`` (a copy).

        :func:`paged_attention` does not need this; it is here to look at, and to test against.
        """
        blocks = torch.tensor(self.table(seq_id), dtype=torch.long, device=self.k.device)
        L = self.lengths[seq_id]
        k = self.k[:, blocks].reshape(self.num_kv_heads, -1, self.head_dim)[:, :L]  # (K, L, E)
        v = self.v[:, blocks].reshape(self.num_kv_heads, -1, self.v_head_dim)[:, :L]
        return k, v


class PagedView(LayerCache):
    """One layer's cache for a step of some of a pool's sequences: a :class:`~lessons_src.kv_cache.LayerCache`, so
    a model's cached decode runs on the pool's pages (one view per layer, each on that layer's pool).

    The step's new tokens are packed into one row, sequence after sequence, ``new_tokens[i]`` of them for
    ``seq_ids[i]``. :meth:`update` appends each sequence's new keys and values to its pages and returns the
    keys and values the packed queries attend to: every sequence's cached positions, read from the pool (a
    copy), then the new ones, ``S = length + T`` in all. A query may see only its own sequence's keys: pass
    ``same_document(view.documents())`` (:func:`lessons_src.masks.same_document`) with the causal rule, and
    each token's position in its own sequence (:meth:`positions`). With one sequence and ``new_tokens=None``,
    the view is that sequence's cache across many calls (any ``T`` per call), like a ``KVCache`` of batch 1.

    Args:
        pool: the layer's :class:`PagedKVCache`.
        seq_ids: the sequences of the step, each in the pool, no repeats.
        new_tokens: how many new tokens each brings (each at least 1); ``None`` for one sequence: every update's.

    Shapes:
        :meth:`update` takes ``(1, K, T, E)`` and ``(1, K, T, Ev)`` with ``T = sum(new_tokens)`` and returns
        ``(1, K, S, E)`` and ``(1, K, S, Ev)``.

    Raises:
        ValueError: on an unknown or repeated sequence, or ``new_tokens`` not one count of at least 1 per sequence
            (``None`` with several sequences); in :meth:`update` and :meth:`truncate`, see there.

    Example:
        >>> pool = PagedKVCache(num_blocks=8, block_size=4, num_kv_heads=1, head_dim=2)
        >>> for s, n in ((0, 5), (1, 2)):
        ...     pool.add_sequence(s)
        ...     pool.append(s, torch.randn(1, n, 2), torch.randn(1, n, 2))
        >>> view = PagedView(pool, [0, 1], [1, 3])  # a decode step of sequence 0, a prefill chunk of 1
        >>> view.length, view.positions().tolist(), view.documents().tolist()
        (7, [[5, 2, 3, 4]], [0, 0, 0, 0, 0, 1, 1, 0, 1, 1, 1])
        >>> k, v = view.update(torch.randn(1, 1, 4, 2), torch.randn(1, 1, 4, 2))
        >>> tuple(k.shape), pool.lengths
        ((1, 1, 11, 2), {0: 6, 1: 5})
    """

    def __init__(self, pool: PagedKVCache, seq_ids: list[int], new_tokens: list[int] | None = None) -> None:
        if not isinstance(pool, PagedKVCache):
            raise TypeError(f"pool must be a PagedKVCache; got {type(pool).__name__}")
        if not isinstance(seq_ids, list | tuple) or not seq_ids:
            raise TypeError(f"seq_ids must be a non-empty list of sequence ids; got {seq_ids!r}")
        for seq in seq_ids:
            pool._known(seq)
        if len(set(seq_ids)) != len(seq_ids):
            raise ValueError(f"seq_ids {list(seq_ids)} name a sequence twice; a step has each sequence once")
        if new_tokens is None:
            if len(seq_ids) != 1:
                raise ValueError(f"new_tokens=None is for one sequence; {len(seq_ids)} sequences need one count each")
        elif not isinstance(new_tokens, list | tuple) or len(new_tokens) != len(seq_ids):
            raise ValueError(f"new_tokens must be a list of one count per sequence ({len(seq_ids)}); "
                             f"got {new_tokens!r}")
        else:
            new_tokens = [size(f"new_tokens[{i}]", n, hint="a sequence in a step brings a token")
                          for i, n in enumerate(new_tokens)]
        self.pool, self.seq_ids, self.new_tokens = pool, list(seq_ids), new_tokens
        self._before: list[int] | None = None  # each sequence's length before the last update

    @property
    def length(self) -> int:
        """Positions the step's sequences hold together: the cached keys the packed queries are shown."""
        return sum(self.pool.lengths[s] for s in self.seq_ids)

    @length.setter
    def length(self, value: int) -> None:
        self.truncate(value)  # the pool holds the lengths: setting one is a truncate

    def _counts(self, T: int) -> list[int]:
        return [T] if self.new_tokens is None else self.new_tokens

    def positions(self) -> Tensor:
        """Each new token's position in its own sequence, ``(1, T)``: sequence ``i``'s continue from its length."""
        if self.new_tokens is None:
            raise ValueError("positions() needs new_tokens; with one sequence and new_tokens=None the cache's length "
                             "is the next position (pass no positions)")
        at = self.pool.k.device
        starts = [self.pool.lengths[s] for s in self.seq_ids]
        pos = [torch.arange(a, a + n, device=at) for a, n in zip(starts, self.new_tokens, strict=True)]
        return torch.cat(pos)[None]  # (1, T)

    def documents(self) -> Tensor:
        """The sequence (its index in ``seq_ids``) of each of the ``S`` key slots :meth:`update` will return: the
        cached ones, sequence after sequence, then the new ones; for :func:`lessons_src.masks.same_document`."""
        if self.new_tokens is None:
            raise ValueError("documents() needs new_tokens; with one sequence every key is its own")
        cached = [self.pool.lengths[s] for s in self.seq_ids]
        ids = [i for i, n in enumerate(cached) for _ in range(n)] + \
              [i for i, n in enumerate(self.new_tokens) for _ in range(n)]
        return torch.tensor(ids, dtype=torch.long, device=self.pool.k.device)  # (S,)

    def _slots(self, start: list[int], end: list[int]) -> Tensor:
        """Where positions ``start[i] .. end[i] - 1`` of each sequence ``i`` are, in order, in the pool seen as one row
        of ``num_blocks * block_size`` slots per head."""
        pool, bs = self.pool, self.pool.block_size
        tables = [pool.table(s) for s in self.seq_ids]
        at = pool.k.device
        blocks = torch.tensor([b for t in tables for b in t], dtype=torch.long, device=at)  # every block, in order
        first = torch.tensor([i * bs for t in tables for i in range(len(t))], device=at)  # its first position
        low = torch.tensor([a for t, a in zip(tables, start, strict=True) for _ in t], device=at)
        high = torch.tensor([b for t, b in zip(tables, end, strict=True) for _ in t], device=at)
        pos = first[:, None] + torch.arange(bs, device=at)  # (blocks, bs): each slot's position in its sequence
        keep = (pos >= low[:, None]) & (pos < high[:, None])
        return (blocks[:, None] * bs + torch.arange(bs, device=at))[keep]  # (n,), sequence by sequence

    def update(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Append each sequence's new keys and values to its pages; return every cached position's, then the new.

        Raises:
            ValueError: if ``k``/``v`` are not ``(1, K, T, E)``/``(1, K, T, Ev)`` with ``T = sum(new_tokens)`` (see
                :meth:`PagedKVCache.append` for dtype, device and grad), or the pool has too few free blocks for the
                step (nothing is written then).
        """
        pool = self.pool
        for name, t in (("k", k), ("v", v)):
            if not isinstance(t, Tensor) or t.ndim != 4 or t.shape[0] != 1:
                raise ValueError(f"{name} must be one packed row (1, K, T, E); got "
                                 f"{tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__}")
        counts = self._counts(k.shape[2])
        if sum(counts) != k.shape[2]:
            raise ValueError(f"k holds T={k.shape[2]} new positions but the step's sequences bring "
                             f"sum(new_tokens)={sum(counts)}")
        pool._check(k[0], v[0])
        needed = sum(pool.blocks_needed(s, n) for s, n in zip(self.seq_ids, counts, strict=True))  # at most
        if needed > pool.num_free_blocks:
            raise ValueError(f"the pool is exhausted: the step needs up to {needed} more blocks of {pool.block_size} "
                             f"positions but only {pool.num_free_blocks} of {pool.num_blocks} are free; finish or "
                             "free sequences first, or make the pool with more num_blocks")
        self._before = [pool._grow(s, n) for s, n in zip(self.seq_ids, counts, strict=True)]  # blocks taken
        after = [pool.lengths[s] for s in self.seq_ids]
        K, n = pool.num_kv_heads, pool.num_blocks * pool.block_size
        keys, values = pool.k.view(K, n, pool.head_dim), pool.v.view(K, n, pool.v_head_dim)  # one row of slots
        new = self._slots(self._before, after)
        keys[:, new], values[:, new] = k[0], v[0]  # every sequence's new positions, in one write
        old = self._slots([0] * len(after), self._before)
        return torch.cat([keys[:, old], k[0]], dim=1)[None], torch.cat([values[:, old], v[0]], dim=1)[None]

    def truncate(self, length: int) -> None:
        """Keep the first ``length`` positions. One sequence: :meth:`PagedKVCache.truncate`. Several: only the
        length before the last :meth:`update` (that step undone, as a failed layer step asks) or the present one.

        Raises:
            ValueError: if ``length`` is negative or more than the sequences hold, or, for several sequences, any
                other length (which of their positions to drop would be ambiguous).
        """
        length = size("length", length, minimum=0, hint="positions to keep")
        if len(self.seq_ids) == 1:
            self.pool.truncate(self.seq_ids[0], length)
            return
        if length == self.length:
            return
        if self._before is None or length != sum(self._before):
            before = "no update yet" if self._before is None else f"{sum(self._before)} before the last update"
            raise ValueError(f"length={length}: a view of {len(self.seq_ids)} sequences can go back only to the "
                             f"length before its last update ({before}) or stay at {self.length}; truncate each "
                             "sequence in the pool with PagedKVCache.truncate(seq_id, length)")
        for s, n in zip(self.seq_ids, self._before, strict=True):
            self.pool.truncate(s, n)

    @property
    def nbytes(self) -> int:
        """Bytes of the blocks the view's sequences hold, each shared block counted once."""
        blocks = {b for s in self.seq_ids for b in self.pool.block_tables[s]}
        return len(blocks) * self.pool.block_nbytes


def block_runs(table: list[int], *, num_blocks: int | None = None) -> list[tuple[int, int]]:
    """A block table as runs of consecutive pool blocks: ``(first block, number of blocks)``, in order.

    A run is one slice of the pool, so it can be read in place (a view, no copy).

    Args:
        table: pool block ids, in the order of the sequence's positions.
        num_blocks: the pool's size, if known: every id must be below it.

    Raises:
        TypeError: if an id is not an int.
        ValueError: if an id is negative, or not below ``num_blocks``.

    Example:
        >>> block_runs([4, 5, 6, 0, 1, 9])
        [(4, 3), (0, 2), (9, 1)]
    """
    for b in table:
        if isinstance(b, bool) or not isinstance(b, int):
            raise TypeError(f"block ids must be ints; got {b!r} of type {type(b).__name__} in {table}")
        if b < 0:
            raise ValueError(f"block ids must be at least 0; got {b} in {table}")
        if num_blocks is not None and b >= num_blocks:
            raise ValueError(f"block ids must be below num_blocks={num_blocks}; got {b} in {table}")
    return _extend_runs([], table)


def _extend_runs(runs: list[tuple[int, int]], blocks: list[int]) -> list[tuple[int, int]]:
    """Add ``blocks`` at the end of a table already split into ``runs`` (changed in place, and returned)."""
    for block in blocks:
        if runs and block == runs[-1][0] + runs[-1][1]:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((block, 1))
    return runs


def _pieces(cache: PagedKVCache, seq_id: int, min_run: int) -> list[tuple[Tensor, Tensor, list[int] | range]]:
    """A sequence's keys and values in pieces: each run of at least ``min_run`` consecutive blocks as a view
    of the pool (no copy), then every other block gathered into one tensor (a small copy). The piece
    holding the table's last block ends at the sequence's last position: the unused rest of that block
    is cut off. Returns ``(k (K, n, E), v (K, n, Ev), the table indices of its blocks)`` per piece."""
    K, bs, E, Ev = cache.num_kv_heads, cache.block_size, cache.head_dim, cache.v_head_dim
    runs, table = cache.runs(seq_id), cache.block_tables[seq_id]
    unused = len(table) * bs - cache.lengths[seq_id]  # positions past the end, all in the table's last block
    pieces: list[tuple[Tensor, Tensor, list[int] | range]] = []
    scattered: list[int] = []
    i = 0
    for start, n in runs:
        if n >= min_run:
            keep = n * bs - (unused if i + n == len(table) else 0)
            k = cache.k[:, start : start + n].view(K, n * bs, E)[:, :keep]  # for each head, one stretch
            v = cache.v[:, start : start + n].view(K, n * bs, Ev)[:, :keep]
            pieces.append((k, v, range(i, i + n)))
        else:
            scattered.extend(range(i, i + n))
        i += n
    if scattered:
        keep = len(scattered) * bs - (unused if scattered[-1] == len(table) - 1 else 0)
        blocks = torch.tensor([table[j] for j in scattered], device=cache.k.device)
        k = cache.k.index_select(1, blocks).view(K, -1, E)[:, :keep]
        v = cache.v.index_select(1, blocks).view(K, -1, Ev)[:, :keep]
        pieces.append((k, v, scattered))
    return pieces


def paged_attention(
    q: Tensor,
    cache: PagedKVCache,
    seq_ids: list[int],
    *,
    scale: float | None = None,
    min_run: int = 4,
) -> Tensor:
    """Attention of each sequence's newest ``T`` queries to its own cached keys, read through the block tables.

    Query ``t`` of sequence ``b`` (of length ``L_b``, its new tokens already appended) is at position
    ``L_b - T + t`` and sees keys ``0..L_b - T + t`` (bottom-right causal, per sequence). PagedAttention's
    kernel reads every block in place. Plain PyTorch can read in place only a slice of the pool, so each
    block table is split into runs of consecutive blocks (:func:`block_runs`; the allocator hands out
    consecutive blocks while it can): a run of at least ``min_run`` blocks is read as a view of the pool,
    and the scattered blocks left over are gathered into one tensor (a small copy), so a sequence costs a
    few pieces, not one per block. The scores of all pieces are laid side by side, one softmax normalises
    them, and the output sums each piece's values weighted by its share (as vLLM's first PagedAttention
    kernel does with the scores of all blocks; the order of the pieces does not matter).

    Args:
        q: ``(B, H, T, E)``, ``H`` a multiple of the cache's ``K`` (GQA without repeating keys).
        cache: the :class:`PagedKVCache` holding the sequences.
        seq_ids: the ``B`` sequences, in the order of ``q``'s batch.
        scale: score multiplier, default ``1 / sqrt(E)``.
        min_run: the shortest run of consecutive blocks read in place; shorter ones are gathered.

    Returns:
        ``(B, H, T, Ev)``.

    Raises:
        ValueError: if ``q`` does not match the cache or ``seq_ids`` (shape, heads, width, dtype, device),
            a sequence is unknown or freed, or holds fewer than ``T`` positions, its block table names a
            block outside the pool (see :meth:`PagedKVCache.table`), or ``min_run < 1``.

    Example:
        >>> cache = PagedKVCache(num_blocks=4, block_size=2, num_kv_heads=1, head_dim=4)
        >>> for s, n in ((0, 3), (1, 1)):
        ...     cache.add_sequence(s)
        ...     cache.append(s, torch.randn(1, n, 4), torch.randn(1, n, 4))
        >>> paged_attention(torch.randn(2, 2, 1, 4), cache, [0, 1]).shape
        torch.Size([2, 2, 1, 4])
    """
    min_run = size("min_run", min_run)
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
    for seq in seq_ids:
        cache._known(seq)
    short = [seq for seq in seq_ids if cache.lengths[seq] < T]
    if short:
        raise ValueError(f"sequences {short} hold fewer than T={T} positions; append the new tokens first")
    for seq in seq_ids:
        cache.table(seq)  # every block id in the pool
    if T == 0:
        return q.new_zeros(B, H, 0, Ev)
    scale = 1.0 / math.sqrt(E) if scale is None else float(scale)
    n_rep, R = H // K, (H // K) * T
    t = torch.arange(T, device=q.device).view(1, 1, T, 1)  # new query t
    offsets = torch.arange(bs, device=q.device)
    out = torch.empty(B, K, R, Ev, dtype=q.dtype, device=q.device)
    q = (q * scale).reshape(B, K, R, E)  # row r * T + t of KV head k is query head k * n_rep + r, token t
    for b, seq in enumerate(seq_ids):
        L = cache.lengths[seq]
        pieces = _pieces(cache, seq, min_run)
        scores = [q[b] @ k.transpose(-2, -1) for k, _, _ in pieces]  # (K, R, n) each: one product per head
        s = scores[0] if len(scores) == 1 else torch.cat(scores, dim=-1)  # (K, R, L), keys in piece order
        if T > 1:  # hide the keys after each new query: key positions, in the same order
            pos = torch.cat([  # the positions of each piece's blocks, cut like its keys
                (torch.tensor(list(where), device=q.device)[:, None] * bs + offsets).flatten()[: k.shape[1]]
                for k, _, where in pieces
            ])  # (L,)
            s = s.view(K, n_rep, T, L).masked_fill(pos > L - T + t, _NEG_INF).view(K, R, L)
        p = torch.softmax(s, dim=-1)  # every query sees at least key 0
        i = 0
        for _, v, _ in pieces:  # the weighted sum of values, piece by piece
            n = v.shape[1]
            out[b] = p[..., i : i + n] @ v if i == 0 else torch.baddbmm(out[b], p[..., i : i + n], v)
            i += n
    return out.reshape(B, H, T, Ev)
