"""ChunkedKVCache: decoding through a one-chunk cache equals the chunked full forward pass (Llama 4), with RoPE."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rotated_qkv import B, E, K, rotated

from lessons_src.functional import attention
from lessons_src.kv_cache import ChunkedKVCache, kv_bytes_per_token
from lessons_src.masks import causal, causal_mask, same_chunk


@settings(max_examples=30, deadline=None)
@given(chunk=st.integers(1, 6), blocks=st.lists(st.integers(1, 9), min_size=1, max_size=8),
       implementation=st.sampled_from(["sdpa", "eager", "tiled"]))
def test_decoding_equals_the_chunked_full_forward(chunk: int, blocks: list[int], implementation: str) -> None:
    """Blocks of every size, inside a chunk, ending on its boundary, or crossing one or several."""
    N = sum(blocks)
    q, k, v = rotated(N, seed=chunk * 100 + N)
    full = attention(q, k, v, attn_mask=causal() & same_chunk(chunk), implementation="eager").output
    cache = ChunkedKVCache(B, K, E, chunk, v_head_dim=6, dtype=torch.float64)
    outs, start = [], 0
    with torch.no_grad():
        for T in blocks:
            step = cache.update(k[:, :, start : start + T], v[:, :, start : start + T])
            assert step.k.shape[2] == step.positions.numel() <= chunk * (1 + (T + chunk - 1) // chunk)
            outs.append(attention(q[:, :, start : start + T], step.k, step.v, attn_mask=step.mask,
                                  implementation=implementation).output)
            start += T
            assert cache.length == start and cache.held == start - chunk * ((start - 1) // chunk)
    torch.testing.assert_close(torch.cat(outs, dim=2), full, atol=1e-12, rtol=1e-10)


def test_memory_is_one_chunk_at_most_and_empties_at_each_start() -> None:
    cache = ChunkedKVCache(1, 1, 2, chunk=4)
    held = []
    with torch.no_grad():
        for _ in range(10):
            step = cache.update(torch.randn(1, 1, 1, 2), torch.randn(1, 1, 1, 2))
            held.append(cache.nbytes // kv_bytes_per_token(1, 2, torch.float32))
    assert held == [1, 2, 3, 4, 1, 2, 3, 4, 1, 2]
    assert step.mask is None and step.positions.tolist() == [8, 9]
    assert torch.equal(causal_mask(1, 10, chunk=4)[0], torch.arange(10) >= 8)  # what the full pass lets 9 see
    cache.reset()
    assert cache.length == 0 and cache.nbytes == 0


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: ChunkedKVCache(1, 1, 2, chunk=0), ValueError, r"chunk must be at least 1; got chunk=0"),
    (lambda: ChunkedKVCache(1, 1, 2, chunk=2.0), TypeError, r"chunk must be an int; got 2.0"),
    (lambda: ChunkedKVCache(1, 1, 2, chunk=2).update(torch.zeros(1, 1, 0, 2), torch.zeros(1, 1, 0, 2)), ValueError,
     r"k and v must add the same number \(>= 1\) of positions"),
    (lambda: ChunkedKVCache(1, 1, 2, chunk=2).update(torch.zeros(1, 2, 1, 2), torch.zeros(1, 2, 1, 2)), ValueError,
     r"k of shape \(1, 2, 1, 2\) does not fit this cache: expected \(B, K, T, E\) = \(1, 1, 'T', 2\)"),
])
def test_bad_input_gets_a_clear_error(call, error, match) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(error, match=match):
        call()
