"""lessons_src.ring without processes: the input checks, the same as attention()'s (ring.py keeps a copy).

Ring attention itself, in 2 and 4 processes, is checked against one process in ``test_parallel.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.testing import assert_close

from lessons_src.functional import attention
from lessons_src.ring import ring_attention


class _Stub:
    """Collectives where only the degree matters: the checks run before any collective."""

    def __init__(self, world_size: int = 2, rank: int = 0) -> None:
        self.world_size, self.rank = world_size, rank


Q = torch.randn(2, 4, 3, 5)
KV = torch.randn(2, 2, 3, 5)

# (case, q, k, v, is_causal): inputs that attention() refuses, and ring attention must refuse the same way
BAD: list[tuple[str, Any, Any, Any, Any]] = [
    ("k not a tensor", Q, [1.0], KV, False),
    ("q 3-D", Q[0], KV, KV, False),
    ("k/v batch 1 against q batch 2", Q, KV[:1], KV[:1], False),
    ("float64 k/v, float32 q", Q, KV.double(), KV.double(), False),
    ("integer q, k, v", Q.long(), KV.long(), KV.long(), False),
    ("q on another device", Q.to("meta"), KV, KV, False),
    ("k and v disagree on K", Q, KV, KV[:, :1], False),
    ("head sizes differ", Q, KV[..., :4], KV[..., :4], False),
    ("K = 0 key/value heads", Q, KV[:, :0], KV[:, :0], False),
    ("H not a multiple of K", Q[:, :3], KV, KV, False),
    ("is_causal a string", Q, KV, KV, "no"),
    ("is_causal an int", Q, KV, KV, 1),
]


def _error(call: Any) -> tuple[type[BaseException], str]:
    with pytest.raises((TypeError, ValueError)) as info:
        call()
    return info.type, str(info.value)


@pytest.mark.parametrize(("case", "q", "k", "v", "causal"), BAD, ids=[c[0] for c in BAD])
def test_ring_refuses_what_attention_refuses_with_the_same_error(case: str, q, k, v, causal) -> None:
    expected = _error(lambda: attention(q, k, v, is_causal=causal))
    assert _error(lambda: ring_attention(q, k, v, _Stub(), is_causal=causal)) == expected  # type: ignore[arg-type]


def test_ring_needs_queries_and_keys_over_the_same_positions() -> None:
    with pytest.raises(ValueError, match=r"same positions .* got q \(2, 4, 3, 5\), k \(2, 2, 4, 5\)"):
        ring_attention(Q, torch.randn(2, 2, 4, 5), torch.randn(2, 2, 4, 5), _Stub())  # type: ignore[arg-type]


@settings(max_examples=25, deadline=None)
@given(B=st.integers(1, 2), K=st.integers(1, 2), n_rep=st.integers(1, 2), T=st.integers(1, 5), E=st.integers(1, 4),
       causal=st.booleans())
def test_ring_on_one_rank_equals_attention(B: int, K: int, n_rep: int, T: int, E: int, causal: bool) -> None:
    """Drawn shapes, MHA to MQA, causal or not: one rank's ring is attention in float64, log-sum-exp included."""
    g = torch.Generator().manual_seed(B * 1000 + K * 100 + T * 10 + E)
    q = torch.randn(B, K * n_rep, T, E, generator=g, dtype=torch.float64)
    k, v = (torch.randn(B, K, T, E, generator=g, dtype=torch.float64) for _ in range(2))
    got = ring_attention(q, k, v, _Alone(), is_causal=causal)  # type: ignore[arg-type]
    assert_close(got.output, attention(q, k, v, is_causal=causal, implementation="eager").output)
    scores = q @ k.repeat_interleave(n_rep, 1).transpose(-2, -1) / E**0.5
    if causal:
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    assert_close(got.lse, scores.logsumexp(-1))


class _Alone(_Stub):
    def __init__(self) -> None:
        super().__init__(world_size=1)

    def all_gather_ints(self, values: list[int], *, device: Any = None) -> list[list[int]]:
        return [list(values)]
