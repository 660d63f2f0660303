# ruff: noqa: E501  (tables of cases: one row per call reads better than wrapped rows)
"""PagedKVCache and paged_attention: equal to each sequence's own contiguous cache, for ragged batches.

The reference is the package's attention over one ``KVCache`` per sequence (bottom-right causal), and
PyTorch's SDPA; the cases include sequences freed and their blocks handed to new ones. Shared blocks (``fork``),
copy-on-write and ``truncate`` are checked against a plain list of each sequence's keys and values over a whole
run of random operations, with every block counted after each one; ``PagedView`` against ``KVCache`` through the
package's attention layer.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lessons_src.functional import attention
from lessons_src.kv_cache import KVCache, kv_bytes_per_token
from lessons_src.layer import MultiHeadAttention
from lessons_src.masks import same_document
from lessons_src.mechanisms import Rotary
from lessons_src.paged_cache import PagedKVCache, PagedView, block_runs, paged_attention

K, E, EV = 2, 8, 6


def kv(n: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(K, n, E, generator=g, dtype=torch.float64), torch.randn(K, n, EV, generator=g, dtype=torch.float64)


def contiguous_reference(q: torch.Tensor, caches: list[KVCache]) -> torch.Tensor:
    """Attention of each sequence's queries to its own contiguous cache, one sequence at a time."""
    outs = []
    for b, cache in enumerate(caches):
        k, v = cache.k[:, :, : cache.length], cache.v[:, :, : cache.length]
        outs.append(attention(q[b : b + 1], k, v, is_causal=True).output)
        if q.shape[2] == 1:  # and PyTorch's own kernel, for decoding
            n_rep = q.shape[1] // K
            ref = F.scaled_dot_product_attention(q[b : b + 1], k.repeat_interleave(n_rep, 1), v.repeat_interleave(n_rep, 1))
            torch.testing.assert_close(outs[-1], ref)
    return torch.cat(outs)


@pytest.mark.parametrize("H", [2, 4])  # MHA and GQA (2 query heads per KV head)
@pytest.mark.parametrize("block_size", [1, 4, 5, 16])
@pytest.mark.parametrize("T", [1, 3])
def test_ragged_batch_equals_contiguous_caches_also_after_free_and_reuse(
    H: int, block_size: int, T: int
) -> None:
    g = torch.Generator().manual_seed(block_size * 10 + H + T)
    lengths = {0: 13, 1: 3, 2: 30, 3: 7, 4: 21}
    paged = PagedKVCache(200, block_size, K, E, v_head_dim=EV, dtype=torch.float64)
    own: dict[int, KVCache] = {}
    with torch.no_grad():
        for s, n in lengths.items():
            paged.add_sequence(s)
            own[s] = KVCache(1, K, E, 64, v_head_dim=EV, dtype=torch.float64)
            for part in (n // 2, n - n // 2):  # appended in two pieces
                if part:
                    k, v = kv(part, g)
                    paged.append(s, k, v)
                    own[s].update(k[None], v[None])
        freed = set(paged.block_tables[1]) | set(paged.block_tables[3])
        paged.free(1)
        paged.free(3)  # their blocks go back to the pool...
        for s, n in ((7, 11), (8, 2 * block_size + 1)):  # ...and new sequences take them
            paged.add_sequence(s)
            own[s] = KVCache(1, K, E, 64, v_head_dim=EV, dtype=torch.float64)
            k, v = kv(n, g)
            paged.append(s, k, v)
            own[s].update(k[None], v[None])
        ids = [2, 7, 0, 8, 4]
        for step in range(3):  # a few decoding steps: every sequence grows by T
            for s in ids:
                k, v = kv(T, g)
                paged.append(s, k, v)
                own[s].update(k[None], v[None])
            q = torch.randn(len(ids), H, T, E, generator=g, dtype=torch.float64)
            got = paged_attention(q, paged, ids)
            torch.testing.assert_close(got, contiguous_reference(q, [own[s] for s in ids]), atol=1e-12, rtol=1e-10)
            if step == 0:  # runs read in place, everything gathered, and the default split agree
                for min_run in (1, 1000):
                    torch.testing.assert_close(paged_attention(q, paged, ids, min_run=min_run), got)
                for s in ids:
                    k, v = paged.gather(s)
                    torch.testing.assert_close((k, v), (own[s].k[0, :, : own[s].length], own[s].v[0, :, : own[s].length]))
    assert freed <= set(paged.block_tables[7]) | set(paged.block_tables[8])  # every freed block was reused


@pytest.mark.parametrize("chunk", [4, 5], ids=["C divides 12", "C does not"])
def test_chunked_prefill_through_the_pool_equals_one_prefill(chunk: int) -> None:
    """Two prompts of 12 and 7 tokens, each appended ``chunk`` tokens at a time with its chunk's queries attending
    through the block tables: each prompt's outputs are causal attention over the whole prompt. SDPA's own causal
    flag on a chunk after cached keys (its triangle top-left) is not."""
    g = torch.Generator().manual_seed(5)
    cache = PagedKVCache(num_blocks=16, block_size=3, num_kv_heads=K, head_dim=E, v_head_dim=EV, dtype=torch.float64)
    for seq, L in ((0, 12), (1, 7)):
        cache.add_sequence(seq)
        q = torch.randn(1, 2 * K, L, E, generator=g, dtype=torch.float64)
        k, v = kv(L, g)  # (K, L, E), (K, L, Ev)
        outs, top_left = [], []
        for a in range(0, L, chunk):
            b = min(a + chunk, L)
            cache.append(seq, k[:, a:b], v[:, a:b])
            outs.append(paged_attention(q[:, :, a:b], cache, [seq], min_run=1))
            top_left.append(F.scaled_dot_product_attention(q[:, :, a:b], k[None, :, :b].repeat_interleave(2, 1),
                                                           v[None, :, :b].repeat_interleave(2, 1), is_causal=True))
        want = attention(q, k[None], v[None], is_causal=True).output  # (1, H, L, Ev)
        torch.testing.assert_close(torch.cat(outs, dim=2), want, atol=1e-10, rtol=1e-9)
        assert cache.lengths[seq] == L
        assert (torch.cat(top_left, dim=2) - want).abs().max() > 1e-2


def test_a_query_that_sees_no_key_of_the_first_piece() -> None:
    """Sequence 0 holds block 0, then a run of 5 blocks taken after sequence 1's block: the run is read
    first, and the first of T = 5 * bs + 1 new queries (at position bs - 1) sees none of its keys."""
    bs, g = 4, torch.Generator().manual_seed(3)
    paged = PagedKVCache(8, bs, K, E, v_head_dim=EV, dtype=torch.float64)
    own = KVCache(1, K, E, 64, v_head_dim=EV, dtype=torch.float64)
    with torch.no_grad():
        for s, n in ((0, bs), (1, bs), (0, 5 * bs)):
            k, v = kv(n, g)
            if s not in paged.block_tables:
                paged.add_sequence(s)
            paged.append(s, k, v)
            if s == 0:
                own.update(k[None], v[None])
        assert paged.block_tables[0] == [0, 2, 3, 4, 5, 6] and block_runs(paged.block_tables[0])[1] == (2, 5)
        q = torch.randn(1, 2 * K, 5 * bs + 1, E, generator=g, dtype=torch.float64)
        got = paged_attention(q, paged, [0])
    assert got.isfinite().all()
    torch.testing.assert_close(got, contiguous_reference(q, [own]), atol=1e-12, rtol=1e-10)


def test_runs_are_read_in_place_and_only_scattered_blocks_are_copied() -> None:
    from lessons_src.paged_cache import _pieces

    paged = PagedKVCache(16, 4, K, E)
    with torch.no_grad():
        for s, n in ((0, 20), (1, 4), (0, 4)):  # sequence 0: a run of 5 blocks, then block 6 alone
            if s not in paged.block_tables:
                paged.add_sequence(s)
            paged.append(s, torch.randn(K, n, E), torch.randn(K, n, E))
        run, scattered = _pieces(paged, 0, min_run=4)
    pool = paged.k.untyped_storage().data_ptr()
    assert run[0].untyped_storage().data_ptr() == pool and run[0].shape == (K, 20, E)  # a view of the pool
    assert scattered[0].untyped_storage().data_ptr() != pool and scattered[0].shape == (K, 4, E)  # a copy
    assert (list(run[2]), scattered[2]) == ([0, 1, 2, 3, 4], [5])  # the table indices of each piece's blocks


def test_blocks_are_taken_as_needed_and_returned() -> None:
    cache = PagedKVCache(num_blocks=6, block_size=4, num_kv_heads=1, head_dim=2)
    with torch.no_grad():
        cache.add_sequence(0)
        cache.append(0, torch.zeros(1, 4, 2), torch.zeros(1, 4, 2))
        assert cache.block_tables[0] == [0] and cache.num_free_blocks == 5
        cache.append(0, torch.zeros(1, 1, 2), torch.zeros(1, 1, 2))  # position 4 opens a second block
        assert cache.block_tables[0] == [0, 1] and cache.lengths[0] == 5
        cache.add_sequence(1)
        cache.append(1, torch.zeros(1, 9, 2), torch.zeros(1, 9, 2))
        assert cache.block_tables[1] == [2, 3, 4]
        cache.free(0)
        assert cache.num_free_blocks == 3
        cache.add_sequence(2)
        cache.append(2, torch.zeros(1, 2, 2), torch.zeros(1, 2, 2))
        assert cache.block_tables[2] == [0]  # the freed block is handed out again
    assert cache.nbytes == 4 * cache.block_nbytes == 4 * 4 * kv_bytes_per_token(1, 2, torch.float32)


def test_the_public_block_table_is_the_one_source_of_truth() -> None:
    """paged_attention reads the block table gather() reads: an edited table is followed, a bad id refused."""
    g = torch.Generator().manual_seed(0)
    cache = PagedKVCache(num_blocks=6, block_size=2, num_kv_heads=K, head_dim=E, v_head_dim=EV, dtype=torch.float64)
    cache.add_sequence(0)
    cache.append(0, *kv(5, g))  # blocks [0, 1, 2]
    cache.block_tables[0][1] = 4  # a caller moves block 1's positions to block 4 (copying them there)
    cache.k[:, 4], cache.v[:, 4] = torch.randn(K, 2, E, generator=g, dtype=torch.float64), cache.v[:, 1]
    q = torch.randn(1, 4, 1, E, generator=g, dtype=torch.float64)
    k, v = cache.gather(0)
    torch.testing.assert_close(paged_attention(q, cache, [0], min_run=1), attention(q, k[None], v[None]).output)
    cache.block_tables[0][1] = 99
    for call in (lambda: cache.gather(0), lambda: paged_attention(q, cache, [0])):
        with pytest.raises(ValueError, match=r"sequence 0's block table \[0, 99, 2\] names block 99; the pool has 0..5"):
            call()


def test_block_runs_refuse_ids_outside_the_pool() -> None:
    with pytest.raises(ValueError, match=r"block ids must be at least 0; got -1 in \[-1, 0, 99\]"):
        block_runs([-1, 0, 99])
    with pytest.raises(ValueError, match=r"block ids must be below num_blocks=8; got 99 in \[0, 99\]"):
        block_runs([0, 99], num_blocks=8)
    with pytest.raises(TypeError, match=r"block ids must be ints; got 1.0 of type float"):
        block_runs([0, 1.0])  # type: ignore[list-item]


def test_no_new_query_on_an_empty_sequence_gives_an_empty_output() -> None:
    cache = PagedKVCache(num_blocks=2, block_size=2, num_kv_heads=1, head_dim=4)
    cache.add_sequence(0)
    out = paged_attention(torch.randn(1, 2, 0, 4), cache, [0])
    assert out.shape == (1, 2, 0, 4)


def test_block_runs_split_a_table_into_slices_of_the_pool() -> None:
    assert block_runs([3, 4, 5, 9, 10, 2]) == [(3, 3), (9, 2), (2, 1)]
    assert block_runs([7]) == [(7, 1)] and block_runs([]) == []
    assert block_runs([5, 4, 3]) == [(5, 1), (4, 1), (3, 1)]  # descending ids are not one slice


def test_an_exhausted_pool_writes_nothing() -> None:
    cache = PagedKVCache(num_blocks=2, block_size=4, num_kv_heads=1, head_dim=2)
    cache.add_sequence(0)
    with torch.no_grad():
        cache.append(0, torch.ones(1, 6, 2), torch.ones(1, 6, 2))
        with pytest.raises(ValueError, match=r"the pool is exhausted: sequence 0 needs 1 more blocks of 4 positions "
                                              r"for 3 new tokens but only 0 of 2 are free"):
            cache.append(0, torch.ones(1, 3, 2), torch.ones(1, 3, 2))
    assert cache.lengths[0] == 6 and cache.block_tables[0] == [0, 1]


def count_blocks(pool: PagedKVCache) -> None:
    """Every block is free or held, never both, never lost: its reference count is the number of block tables
    naming it, the free list holds exactly the blocks of count 0, once each."""
    named = [0] * pool.num_blocks
    for table in pool.block_tables.values():
        for b in table:
            named[b] += 1
    assert pool.refcounts == named
    assert sorted(pool._free) == [b for b in range(pool.num_blocks) if named[b] == 0]
    assert len(set(pool._free)) == len(pool._free)
    for s, table in pool.block_tables.items():
        assert len(table) == -(-pool.lengths[s] // pool.block_size)
    assert pool.nbytes == sum(1 for n in named if n) * pool.block_nbytes


def test_a_whole_run_of_forks_appends_truncates_and_frees_loses_and_leaks_no_block() -> None:
    """Random operations on a small pool; after each, every block is counted and every sequence's keys and values
    are those it was given (a plain list per sequence is the reference): a forked sequence reads its source's
    prefix, and neither sees what the other appends later (copy-on-write). At the end every block is free."""
    rng = torch.Generator().manual_seed(0)
    pool = PagedKVCache(num_blocks=24, block_size=3, num_kv_heads=K, head_dim=E, v_head_dim=EV, dtype=torch.float64)
    want: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # seq -> its (K, L, E), (K, L, Ev)
    ops = {"add": 0, "fork": 0, "append": 0, "copy": 0, "truncate": 0, "free": 0}
    next_id = 0

    def pick() -> int:
        return sorted(want)[int(torch.randint(len(want), (1,), generator=rng))]

    for _ in range(300):
        r = float(torch.rand((), generator=rng))
        if not want or r < 0.1:
            pool.add_sequence(next_id)
            want[next_id] = (torch.zeros(K, 0, E, dtype=torch.float64), torch.zeros(K, 0, EV, dtype=torch.float64))
            next_id, ops["add"] = next_id + 1, ops["add"] + 1
        elif r < 0.25:
            src = pick()
            n = int(torch.randint(pool.lengths[src] + 1, (1,), generator=rng))
            pool.fork(src, next_id, n)
            want[next_id] = (want[src][0][:, :n], want[src][1][:, :n])
            next_id, ops["fork"] = next_id + 1, ops["fork"] + 1
        elif r < 0.7:
            s, n = pick(), int(torch.randint(1, 5, (1,), generator=rng))
            if pool.blocks_needed(s, n) > pool.num_free_blocks:
                continue
            shared_tail = pool.lengths[s] % 3 != 0 and pool.refcounts[pool.block_tables[s][-1]] > 1
            k, v = kv(n, rng)
            pool.append(s, k, v)
            want[s] = (torch.cat([want[s][0], k], dim=1), torch.cat([want[s][1], v], dim=1))
            ops["append"], ops["copy"] = ops["append"] + 1, ops["copy"] + shared_tail
        elif r < 0.85:
            s = pick()
            n = int(torch.randint(pool.lengths[s] + 1, (1,), generator=rng))
            pool.truncate(s, n)
            want[s] = (want[s][0][:, :n], want[s][1][:, :n])
            ops["truncate"] += 1
        else:
            s = pick()
            pool.free(s)
            del want[s]
            ops["free"] += 1
        count_blocks(pool)
        for s, (k, v) in want.items():
            torch.testing.assert_close(pool.gather(s), (k, v), rtol=0, atol=0)
    assert min(ops.values()) >= 5, ops  # every kind of operation, copies on write included, happened
    for s in list(want):
        pool.free(s)
    count_blocks(pool)
    assert pool.num_free_blocks == pool.num_blocks and pool.nbytes == 0


def test_a_fork_shares_full_blocks_and_copies_a_shared_partial_block_when_written() -> None:
    pool = PagedKVCache(num_blocks=8, block_size=4, num_kv_heads=1, head_dim=2)
    with torch.no_grad():
        pool.add_sequence(0)
        pool.append(0, torch.ones(1, 6, 2), torch.ones(1, 6, 2))  # blocks [0, 1], block 1 half full
        pool.fork(0, 1)  # all 6 positions
        assert pool.block_tables[1] == [0, 1] and pool.refcounts[:2] == [2, 2] and pool.num_free_blocks == 6
        assert pool.nbytes == 2 * pool.block_nbytes  # shared: counted once
        pool.append(1, 2 * torch.ones(1, 1, 2), 2 * torch.ones(1, 1, 2))  # writes into block 1: copied first
        assert pool.block_tables[1] == [0, 2] and pool.refcounts[:3] == [2, 1, 1]
        assert pool.gather(0)[0][0, :, 0].tolist() == [1] * 6  # the source did not see the fork's token
        assert pool.gather(1)[0][0, :, 0].tolist() == [1] * 6 + [2]
        pool.append(0, 3 * torch.ones(1, 2, 2), 3 * torch.ones(1, 2, 2))  # block 1 is its own again: no copy
        assert pool.block_tables[0] == [0, 1] and pool.gather(1)[0][0, :, 0].tolist() == [1] * 6 + [2]
        pool.fork(0, 2, 4)  # one full block: appending after it takes a new block, copies nothing
        pool.append(2, torch.zeros(1, 1, 2), torch.zeros(1, 1, 2))
        assert pool.block_tables[2] == [0, 3] and pool.refcounts[0] == 3
    count_blocks(pool)


def test_truncate_gives_back_the_blocks_a_sequence_no_longer_needs() -> None:
    pool = PagedKVCache(num_blocks=8, block_size=4, num_kv_heads=1, head_dim=2)
    with torch.no_grad():
        pool.add_sequence(0)
        pool.append(0, torch.ones(1, 10, 2), torch.ones(1, 10, 2))  # blocks [0, 1, 2]
        pool.fork(0, 1, 9)
        pool.truncate(0, 5)  # block 2 is still held by sequence 1
        assert pool.block_tables[0] == [0, 1] and pool.num_free_blocks == 5 and pool.refcounts[2] == 1
        pool.truncate(1, 3)  # blocks 1 and 2 leave sequence 1; block 2 is free
        assert pool.block_tables[1] == [0] and pool.num_free_blocks == 6 and pool.refcounts[:3] == [2, 1, 0]
        pool.truncate(0, 0)
        assert pool.block_tables[0] == [] and pool.lengths[0] == 0
        pool.append(0, torch.zeros(1, 1, 2), torch.zeros(1, 1, 2))  # starts again from an empty table
        assert pool.lengths[0] == 1
    count_blocks(pool)


def _layer_pair() -> tuple[MultiHeadAttention, int]:
    torch.manual_seed(0)
    return MultiHeadAttention(16, 4, num_kv_heads=2, rope=Rotary(4)).double().eval(), 2


def test_a_view_of_one_sequence_decodes_as_a_kv_cache_does_and_truncates_in_the_pool() -> None:
    layer, kv_heads = _layer_pair()
    pool = PagedKVCache(num_blocks=6, block_size=3, num_kv_heads=kv_heads, head_dim=4, dtype=torch.float64)
    pool.add_sequence(0)
    view, own = PagedView(pool, [0]), KVCache(1, kv_heads, 4, 16, dtype=torch.float64)
    x = torch.randn(1, 9, 16, dtype=torch.float64)
    with torch.no_grad():
        for a, b in ((0, 5), (5, 6), (6, 9)):  # a prompt, a token, a chunk of three
            at = None if a == 0 else a
            got = layer(x[:, a:b], is_causal=True, cache=view, cache_position=at)
            torch.testing.assert_close(got, layer(x[:, a:b], is_causal=True, cache=own, cache_position=at))
        assert view.length == pool.lengths[0] == 9 and view.nbytes == pool.nbytes
        view.truncate(4)  # a rollback of five positions: two blocks back to the pool
        assert pool.lengths[0] == 4 and pool.block_tables[0] == [0, 1] and pool.num_free_blocks == 4
        own.truncate(4)
        torch.testing.assert_close(layer(x[:, 4:5], is_causal=True, cache=view), layer(x[:, 4:5], is_causal=True, cache=own))


def test_a_packed_step_of_several_sequences_equals_each_one_alone() -> None:
    """Three sequences of the pool, one decoding a token, one prefilling a chunk, one starting its prompt, in one
    packed row: each sequence's outputs are those of its own KVCache; a fork shares its source's blocks. Without
    the mask of documents the queries would see other sequences' keys (checked to differ)."""
    layer, kv_heads = _layer_pair()
    g = torch.Generator().manual_seed(1)
    pool = PagedKVCache(num_blocks=12, block_size=4, num_kv_heads=kv_heads, head_dim=4, dtype=torch.float64)
    x = {s: torch.randn(1, 12, 16, generator=g, dtype=torch.float64) for s in range(3)}
    own = {s: KVCache(1, kv_heads, 4, 16, dtype=torch.float64) for s in range(3)}
    with torch.no_grad():
        for s, n in ((0, 7), (1, 2)):  # already cached
            pool.add_sequence(s)
            layer(x[s][:, :n], is_causal=True, cache=PagedView(pool, [s]))
            layer(x[s][:, :n], is_causal=True, cache=own[s])
        pool.add_sequence(2)
        new = {0: (7, 8), 1: (2, 6), 2: (0, 3)}
        views = PagedView(pool, [0, 1, 2], [b - a for a, b in new.values()])
        tokens = torch.cat([x[s][:, a:b] for s, (a, b) in new.items()], dim=1)  # (1, 8, 16)
        docs, pos = views.documents(), views.positions()
        got = layer(tokens, is_causal=True, cache=views, cache_position=views.length, positions=pos,
                    attn_mask=same_document(docs))
        want = torch.cat([layer(x[s][:, a:b], is_causal=True, cache=own[s], cache_position=a or None)
                          for s, (a, b) in new.items()], dim=1)
        torch.testing.assert_close(got, want)
        assert pool.lengths == {0: 8, 1: 6, 2: 3}
        views.truncate(sum(a for a, _ in new.values()))  # a failed step undone: each sequence back where it was
        assert pool.lengths == {0: 7, 1: 2, 2: 0}
        blind = layer(tokens, is_causal=True, cache=PagedView(pool, [0, 1, 2], [1, 4, 3]), cache_position=9,
                      positions=pos)
        assert (blind - want).abs().max() > 1e-3


def test_a_failing_layer_step_leaves_every_sequence_of_the_view_as_it_was() -> None:
    """The layer calls ``truncate(start)`` when a step fails after the cache was updated (a softcap the default
    backend refuses here stands for any failure): the view undoes the step in every sequence."""
    pool = PagedKVCache(num_blocks=6, block_size=2, num_kv_heads=1, head_dim=4)
    for s in (0, 1):
        pool.add_sequence(s)
    view = PagedView(pool, [0, 1], [2, 1])
    with torch.no_grad():
        view.update(torch.zeros(1, 1, 3, 4), torch.zeros(1, 1, 3, 4))
    blocks = pool.num_free_blocks
    view.truncate(3)  # the present length: nothing to do
    assert pool.lengths == {0: 2, 1: 1}
    view.truncate(0)
    assert pool.lengths == {0: 0, 1: 0} and pool.num_free_blocks == blocks + 2
    count_blocks(pool)


def _filled() -> PagedKVCache:
    cache = PagedKVCache(4, 2, 1, 4)
    cache.add_sequence(0)
    with torch.no_grad():
        cache.append(0, torch.zeros(1, 3, 4), torch.zeros(1, 3, 4))
    return cache


def _two() -> PagedKVCache:
    cache = _filled()
    cache.add_sequence(1)
    with torch.no_grad():
        cache.append(1, torch.zeros(1, 1, 4), torch.zeros(1, 1, 4))
    return cache


def _freed() -> PagedKVCache:
    cache = _filled()
    cache.free(0)
    return cache


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: PagedKVCache(4, 0, 1, 4), ValueError, r"block_size must be at least 1 position \(vLLM uses 16\); got block_size=0"),
    (lambda: PagedKVCache(4, 2.0, 1, 4), TypeError, r"block_size must be an int; got 2.0"),
    (lambda: PagedKVCache(0, 16, 1, 4), ValueError, r"num_blocks must be at least 1; got num_blocks=0"),
    (lambda: PagedKVCache(4, 16, 1, "4"), TypeError, r"head_dim must be an int; got '4'"),
    (lambda: _freed().append(0, torch.zeros(1, 1, 4), torch.zeros(1, 1, 4)), ValueError,
     r"sequence 0 is not in the cache \(never added, or already freed\); sequences in it: none"),
    (lambda: _freed().free(0), ValueError, r"sequence 0 is not in the cache"),
    (lambda: _filled().add_sequence(0), ValueError, r"sequence 0 is already in the cache"),
    (lambda: _filled().add_sequence("a"), TypeError, r"a sequence id must be an int; got 'a'"),
    (lambda: _filled().append(0, torch.zeros(2, 1, 4), torch.zeros(2, 1, 4)), ValueError,
     r"k of shape \(2, 1, 4\) does not fit: one sequence's \(K, T, E\) = \(1, T, 4\)"),
    (lambda: _filled().append(0, torch.zeros(1, 1, 4).double(), torch.zeros(1, 1, 4)), ValueError,
     r"k is torch.float64 on cpu but the pool is torch.float32 on cpu"),
    (lambda: _filled().append(0, torch.zeros(1, 2, 4), torch.zeros(1, 1, 4)), ValueError, r"k and v must add the same number"),
    (lambda: _filled().append(0, torch.zeros(1, 1, 4, requires_grad=True), torch.zeros(1, 1, 4)), ValueError,
     r"k requires grad"),
    (lambda: paged_attention(torch.randn(1, 1, 1, 4), _freed(), [0]), ValueError, r"sequence 0 is not in the cache"),
    (lambda: paged_attention(torch.randn(2, 1, 1, 4), _filled(), [0]), ValueError,
     r"q has a batch of 2 but 1 sequence ids were given"),
    (lambda: paged_attention(torch.randn(1, 1, 1, 8), _filled(), [0]), ValueError, r"E must be 4 and H a multiple of K=1"),
    (lambda: paged_attention(torch.randn(1, 1, 4, 4), _filled(), [0]), ValueError,
     r"sequences \[0\] hold fewer than T=4 positions"),
    (lambda: paged_attention(torch.randn(1, 1, 1, 4).double(), _filled(), [0]), ValueError, r"q is torch.float64"),
    (lambda: paged_attention(torch.randn(1, 1, 1, 4), _filled(), [0], min_run=0), ValueError, r"min_run must be at least 1"),
    (lambda: _filled().fork(5, 1), ValueError, r"sequence 5 is not in the cache"),
    (lambda: _filled().fork(0, 0), ValueError, r"sequence 0 is already in the cache"),
    (lambda: _filled().fork(0, 1, 4), ValueError, r"length=4 but sequence 0 holds only 3 positions; share at most length=3"),
    (lambda: _filled().fork(0, 1, -1), ValueError, r"length must be at least 0 \(positions to share\); got length=-1"),
    (lambda: _filled().fork(0, 1, 1.0), TypeError, r"length must be an int; got 1.0"),
    (lambda: _filled().truncate(0, 4), ValueError, r"length=4 but sequence 0 holds only 3 positions; truncate keeps a prefix"),
    (lambda: _filled().truncate(0, -1), ValueError, r"length must be at least 0 \(positions to keep\)"),
    (lambda: _filled().truncate(0, True), TypeError, r"length must be an int; got True"),
    (lambda: _freed().truncate(0, 0), ValueError, r"sequence 0 is not in the cache"),
    (lambda: PagedView("pool", [0]), TypeError, r"pool must be a PagedKVCache; got str"),  # type: ignore[arg-type]
    (lambda: PagedView(_filled(), []), TypeError, r"seq_ids must be a non-empty list of sequence ids; got \[\]"),
    (lambda: PagedView(_filled(), [1]), ValueError, r"sequence 1 is not in the cache"),
    (lambda: PagedView(_filled(), [0, 0], [1, 1]), ValueError, r"seq_ids \[0, 0\] name a sequence twice"),
    (lambda: PagedView(_two(), [0, 1]), ValueError, r"new_tokens=None is for one sequence; 2 sequences need one count each"),
    (lambda: PagedView(_two(), [0, 1], [1]), ValueError, r"new_tokens must be a list of one count per sequence \(2\); got \[1\]"),
    (lambda: PagedView(_two(), [0, 1], [1, 0]), ValueError, r"new_tokens\[1\] must be at least 1"),
    (lambda: PagedView(_two(), [0, 1], [1, 2.0]), TypeError, r"new_tokens\[1\] must be an int; got 2.0"),  # type: ignore[list-item]
    (lambda: PagedView(_two(), [0, 1], [1, 1]).update(torch.zeros(1, 1, 3, 4), torch.zeros(1, 1, 3, 4)), ValueError,
     r"k holds T=3 new positions but the step's sequences bring sum\(new_tokens\)=2"),
    (lambda: PagedView(_filled(), [0]).update(torch.zeros(1, 1, 4), torch.zeros(1, 1, 4)), ValueError,
     r"k must be one packed row \(1, K, T, E\); got \(1, 1, 4\)"),
    (lambda: PagedView(_filled(), [0]).update(torch.zeros(1, 1, 9, 4), torch.zeros(1, 1, 9, 4)), ValueError,
     r"the pool is exhausted: the step needs up to 4 more blocks of 2 positions but only 2 of 4 are free"),
    (lambda: PagedView(_filled(), [0]).update(torch.zeros(1, 1, 1, 4), torch.zeros(1, 1, 1, 2)), ValueError,
     r"v of shape \(1, 1, 2\) does not fit"),
    (lambda: PagedView(_two(), [0, 1], [1, 1]).truncate(1), ValueError,
     r"length=1: a view of 2 sequences can go back only to the length before its last update \(no update yet\) or stay at 4"),
    (lambda: PagedView(_filled(), [0]).truncate(5), ValueError, r"length=5 but sequence 0 holds only 3 positions"),
    (lambda: PagedView(_filled(), [0]).positions(), ValueError, r"positions\(\) needs new_tokens"),
    (lambda: PagedView(_filled(), [0]).documents(), ValueError, r"documents\(\) needs new_tokens"),
])
def test_bad_input_gets_a_clear_error(call, error, match) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(error, match=match):
        call()
