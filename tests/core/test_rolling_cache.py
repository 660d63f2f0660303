# ruff: noqa: E501  (tables of cases: one row per call reads better than wrapped rows)
"""RollingKVCache: decoding through a window (+ sinks) cache equals the masked full forward pass, with RoPE."""

from __future__ import annotations

import pytest
import torch
from rotated_qkv import B, E, K, rotated

from lessons_src.functional import attention
from lessons_src.kv_cache import KVCache, RollingKVCache, kv_bytes_per_token
from lessons_src.masks import causal_mask


@pytest.mark.parametrize(("implementation", "spare"), [("sdpa", 0), ("eager", 0), ("tiled", 0), ("sdpa", 3)])
@pytest.mark.parametrize(("window", "sinks", "chunks"), [
    (5, 0, [1] * 20),  # token by token from the start
    (5, 2, [7] + [1] * 13),  # a prompt longer than the window, then decoding
    (4, 1, [3, 5, 1, 1, 6, 4]),  # chunks of every size, some longer than the window
    (1, 0, [2, 1, 17]),  # a window of one: each token sees only itself
    (30, 3, [10, 10]),  # a window longer than the sequence: plain causal attention
    (3, 4, [2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]),  # more sinks than the window
])
def test_decoding_equals_the_masked_full_forward(window: int, sinks: int, chunks: list[int], implementation: str,
                                                 spare: int) -> None:
    N = sum(chunks)
    q, k, v = rotated(N, seed=window * 10 + sinks)
    full = attention(q, k, v, attn_mask=causal_mask(N, window=window, sink_tokens=sinks), implementation="eager").output
    cache = RollingKVCache(B, K, E, window, sink_tokens=sinks, spare=spare, v_head_dim=6, dtype=torch.float64)
    outs, start = [], 0
    with torch.no_grad():
        for T in chunks:
            assert cache.length == start
            step = cache.update(k[:, :, start : start + T], v[:, :, start : start + T])
            outs.append(attention(q[:, :, start : start + T], step.k, step.v, attn_mask=step.mask,
                                  implementation=implementation).output)
            start += T
    torch.testing.assert_close(torch.cat(outs, dim=2), full, atol=1e-12, rtol=1e-10)


@pytest.mark.parametrize("sinks", [0, 2])
def test_drafts_rolled_back_leave_the_window_whole_with_spare_slots(sinks: int) -> None:
    """Speculative decoding: four drafts written, one kept (truncate), decoding goes on equal to the full pass; with
    no spare slots, truncate refuses (the drafts overwrote keys the next token sees)."""
    window, N = 4, 14
    q, k, v = rotated(N, seed=5)
    full = attention(q, k, v, attn_mask=causal_mask(N, window=window, sink_tokens=sinks), implementation="eager").output
    for spare in (4, 0):
        cache = RollingKVCache(B, K, E, window, sink_tokens=sinks, spare=spare, v_head_dim=6, dtype=torch.float64)
        cache.update(k[:, :, :8], v[:, :, :8])
        junk = torch.randn_like(k[:, :, :4])
        cache.update(junk, torch.randn(B, K, 4, 6, dtype=torch.float64))  # four drafts at 8..11, all wrong ...
        if spare < 4:
            with pytest.raises(ValueError, match="spare >= the longest draft"):
                cache.truncate(9)
            continue
        cache.truncate(8)  # ... so none is kept
        outs = []
        for t in range(8, N):
            step = cache.update(k[:, :, t : t + 1], v[:, :, t : t + 1])
            outs.append(attention(q[:, :, t : t + 1], step.k, step.v, attn_mask=step.mask).output)
        torch.testing.assert_close(torch.cat(outs, dim=2), full[:, :, 8:], atol=1e-12, rtol=1e-10)


def test_the_cache_keeps_the_sinks_and_the_last_window() -> None:
    cache = RollingKVCache(1, 1, 2, window=3, sink_tokens=2)
    with torch.no_grad():
        cache.update(torch.randn(1, 1, 4, 2), torch.randn(1, 1, 4, 2))  # positions 0..3
        assert sorted(cache.positions.tolist()) == [-1, 0, 1, 2, 3]
        for _ in range(6):  # positions 4..9
            step = cache.update(torch.randn(1, 1, 1, 2), torch.randn(1, 1, 1, 2))
    assert sorted(cache.positions.tolist()) == [0, 1, 7, 8, 9]
    assert step.mask is None and cache.length == 10
    assert cache.nbytes == 5 * kv_bytes_per_token(1, 2, torch.float32)  # stops growing at sinks + window


def test_memory_is_flat_while_a_full_cache_grows() -> None:
    rolling, full = RollingKVCache(1, 2, 4, window=8, sink_tokens=1), KVCache(1, 2, 4, max_len=64)
    sizes = []
    with torch.no_grad():
        for _ in range(64):
            k = torch.randn(1, 2, 1, 4)
            rolling.update(k, k)
            full.update(k, k)
            sizes.append((rolling.nbytes, full.nbytes))
    assert sizes[-1][0] == sizes[8][0] == 9 * kv_bytes_per_token(2, 4, torch.float32)
    assert sizes[-1][1] == 64 * kv_bytes_per_token(2, 4, torch.float32)


def test_evicting_the_sinks_changes_the_output() -> None:
    """A window-only cache (sinks=0) differs from a window + sinks cache once the first tokens leave it."""
    q, k, v = rotated(12, seed=5)
    with_sinks = attention(q, k, v, attn_mask=causal_mask(12, window=4, sink_tokens=1)).output
    without = attention(q, k, v, attn_mask=causal_mask(12, window=4)).output
    torch.testing.assert_close(with_sinks[:, :, :4], without[:, :, :4])  # the first token is still in the window
    assert not torch.allclose(with_sinks[:, :, 4:], without[:, :, 4:])


def test_reset_starts_over() -> None:
    cache = RollingKVCache(1, 1, 2, window=2)
    with torch.no_grad():
        cache.update(torch.randn(1, 1, 3, 2), torch.randn(1, 1, 3, 2))
        cache.reset()
        step = cache.update(torch.randn(1, 1, 1, 2), torch.randn(1, 1, 1, 2))
    assert cache.length == 1 and step.mask is not None and step.mask.tolist() == [[True, False]]


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: RollingKVCache(1, 1, 4, window=0), ValueError, r"window must be at least 1 \(the query itself\); got window=0"),
    (lambda: RollingKVCache(1, 1, 4, window=2.5), TypeError, r"window must be an int; got 2.5"),
    (lambda: RollingKVCache(1, 1, 4, window=4, sink_tokens=-1), ValueError, r"sink_tokens must be at least 0 .* got sink_tokens=-1"),
    (lambda: RollingKVCache(1, 1, 4, window=4, sink_tokens=1.0), TypeError, r"sink_tokens must be an int; got 1.0"),
    (lambda: RollingKVCache(0, 1, 4, window=4), ValueError, r"batch_size must be at least 1; got batch_size=0"),
    (lambda: RollingKVCache(1, 2, 4, window=4).update(torch.zeros(1, 1, 1, 4), torch.zeros(1, 1, 1, 4)), ValueError,
     r"k of shape \(1, 1, 1, 4\) does not fit this cache: expected \(B, K, T, E\) = \(1, 2, 'T', 4\)"),
    (lambda: RollingKVCache(1, 1, 4, window=4).update(torch.zeros(1, 1, 2, 4), torch.zeros(1, 1, 3, 4)), ValueError,
     r"k and v must add the same number"),
    (lambda: RollingKVCache(1, 1, 4, window=4).update(torch.zeros(1, 1, 1, 4).double(), torch.zeros(1, 1, 1, 4)),
     ValueError, r"k has dtype torch.float64 but the cache stores torch.float32"),
    (lambda: RollingKVCache(1, 1, 4, window=4).update(torch.zeros(1, 1, 0, 4), torch.zeros(1, 1, 0, 4)), ValueError,
     r"same number \(>= 1\) of positions"),
    (lambda: RollingKVCache(1, 1, 4, window=4).update(torch.zeros(1, 1, 1, 4, requires_grad=True),
                                                      torch.zeros(1, 1, 1, 4)), ValueError, r"k requires grad"),
])
def test_bad_input_gets_a_clear_error(call, error, match) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(error, match=match):
        call()
