# ruff: noqa: E501  (tables of cases: one row per call reads better than wrapped rows)
"""PagedKVCache and paged_attention: equal to each sequence's own contiguous cache, for ragged batches.

The reference is the package's attention over one ``KVCache`` per sequence (bottom-right causal), and
PyTorch's SDPA; the cases include sequences freed and their blocks handed to new ones.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lessons_src.functional import attention
from lessons_src.kv_cache import KVCache, kv_bytes_per_token
from lessons_src.paged_cache import PagedKVCache, block_runs, paged_attention

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


def _filled() -> PagedKVCache:
    cache = PagedKVCache(4, 2, 1, 4)
    cache.add_sequence(0)
    with torch.no_grad():
        cache.append(0, torch.zeros(1, 3, 4), torch.zeros(1, 3, 4))
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
])
def test_bad_input_gets_a_clear_error(call, error, match) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(error, match=match):
        call()
