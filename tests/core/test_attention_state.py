"""Attention states ``(output, lse)`` and their merge (``score_mods.merge_states``), and what is built on it
(``lessons_src/split_kv.py``): split-KV decoding and shared-prefix attention equal attention over the whole cache;
a merge with fixed per-request shapes is bitwise batch-invariant, a split count chosen from the batch is not.

Every equality here fails when the merge's reweighting ``exp(lse_i - lse)`` is removed (issue 81).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.testing import assert_close

from lessons_src.functional import attention
from lessons_src.masks import sliding_window
from lessons_src.score_mods import Sinks, SoftCap, merge_states
from lessons_src.split_kv import shared_prefix_attention, split_bounds, split_kv_attention

F64 = {"atol": 1e-12, "rtol": 1e-12}
F32 = {"atol": 1e-5, "rtol": 1e-4}


def _part(s: torch.Tensor, v: torch.Tensor, a: int, b: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The state of scores ``s (..., S)`` over keys ``a:b`` with values ``v (S, Ev)``."""
    return torch.softmax(s[..., a:b], dim=-1) @ v[a:b], torch.logsumexp(s[..., a:b], dim=-1)


# --------------------------------------------------------------------------- the merge


@pytest.mark.parametrize("cuts", [(0, 3, 7), (0, 1, 2, 5, 7), (0, 6, 7)])
def test_merged_states_equal_the_state_over_all_keys(cuts: tuple[int, ...]) -> None:
    g = torch.Generator().manual_seed(0)
    s = torch.randn(2, 3, 7, generator=g, dtype=torch.float64) * 4  # (2, 3, S): scores over 7 keys
    v = torch.randn(7, 5, generator=g, dtype=torch.float64)
    o, lse = merge_states([_part(s, v, a, b) for a, b in itertools.pairwise(cuts)])
    assert_close(o, torch.softmax(s, dim=-1) @ v, **F64)
    assert_close(lse, torch.logsumexp(s, dim=-1), **F64)


def test_the_empty_state_is_the_identity_and_two_empty_states_give_zero_not_nan() -> None:
    g = torch.Generator().manual_seed(1)
    o, lse = torch.randn(4, 3, generator=g), torch.randn(4, generator=g)
    empty = (torch.full((4, 3), math.nan), torch.full((4,), -math.inf))  # an empty state's output is never read
    for states in ([(o, lse), empty], [empty, (o, lse)]):
        got_o, got_lse = merge_states(states)
        assert torch.equal(got_o, o) and torch.equal(got_lse, lse)
    got_o, got_lse = merge_states([empty, empty])
    assert torch.equal(got_o, torch.zeros(4, 3)) and torch.isneginf(got_lse).all()


def test_half_outputs_merge_with_float32_lse() -> None:
    g = torch.Generator().manual_seed(2)
    s, v = torch.randn(3, 8, generator=g), torch.randn(8, 4, generator=g)
    parts = [(o.half(), lse) for o, lse in (_part(s, v, 0, 5), _part(s, v, 5, 8))]
    o, lse = merge_states(parts)
    assert o.dtype == torch.float16 and lse.dtype == torch.float32
    assert_close(o.float(), torch.softmax(s, dim=-1) @ v, atol=2e-3, rtol=2e-3)


def test_the_merge_is_differentiable() -> None:
    g = torch.Generator().manual_seed(3)
    states = [(torch.randn(2, 3, generator=g, dtype=torch.float64, requires_grad=True),
               torch.randn(2, generator=g, dtype=torch.float64, requires_grad=True)) for _ in range(2)]
    assert torch.autograd.gradcheck(lambda o1, l1, o2, l2: merge_states([(o1, l1), (o2, l2)]),
                                    [t for st in states for t in st])


def test_a_sink_is_a_state_with_no_value() -> None:
    g = torch.Generator().manual_seed(4)
    q = torch.randn(1, 2, 3, 4, generator=g, dtype=torch.float64)
    kv = torch.randn(1, 2, 5, 4, generator=g, dtype=torch.float64)
    sinks = torch.randn(2, generator=g, dtype=torch.float64)
    keys = attention(q, kv, kv, implementation="eager")
    assert keys.lse is not None
    sink = (torch.zeros_like(keys.output), sinks.view(1, 2, 1).expand_as(keys.lse))
    o, lse = merge_states([(keys.output, keys.lse), sink])
    ref = attention(q, kv, kv, implementation="eager", score_mods=Sinks(sinks))
    assert_close(o, ref.output, **F64)
    assert_close(lse, ref.lse, **F64)


# --------------------------------------------------------------------------- split-KV decoding


def _qkv(B: int, H: int, K: int, T: int, S: int, dtype: torch.dtype, seed: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, H, T, 8, generator=g).to(dtype), torch.randn(B, K, S, 8, generator=g).to(dtype),
            torch.randn(B, K, S, 6, generator=g).to(dtype), torch.randn(H, generator=g).to(dtype))


SPLIT_CASES = [  # (name, T, split, keywords)
    ("decode", 1, {"split_size": 4}, {}),
    ("decode, splits by count", 1, {"num_splits": 3}, {}),
    ("causal bottom-right", 3, {"split_size": 5}, {"is_causal": True}),
    ("window", 2, {"split_size": 4}, {"attn_mask": sliding_window(6)}),
    ("sinks, causal", 2, {"num_splits": 4}, {"is_causal": True, "sinks": True}),
    ("window, sinks, cap", 1, {"split_size": 3}, {"attn_mask": sliding_window(5), "sinks": True, "cap": 5.0}),
]


@pytest.mark.parametrize("implementation", ["eager", "tiled"])
@pytest.mark.parametrize(("name", "T", "split", "kw"), SPLIT_CASES, ids=[c[0] for c in SPLIT_CASES])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_split_kv_equals_attention_over_the_whole_cache(implementation, name, T, split, kw, dtype) -> None:
    q, k, v, sinks = _qkv(2, 4, 2, T, 17, dtype, seed=len(name))  # GQA: 4 query heads, 2 KV heads
    kw = dict(kw)
    mods = [*([Sinks(sinks)] if kw.pop("sinks", False) else []), *([SoftCap(kw.pop("cap"))] if "cap" in kw else [])]
    ref = attention(q, k, v, implementation="eager", score_mods=mods, **kw)
    got = split_kv_attention(q, k, v, implementation=implementation, score_mods=mods, **split, **kw)
    tol = F64 if dtype == torch.float64 else F32
    assert got.output.dtype == dtype
    assert_close(got.output, ref.output, **tol)
    assert_close(got.lse, ref.lse, **tol)


def test_split_kv_refuses_a_backend_without_the_log_sum_exp() -> None:
    q, k, v, _ = _qkv(1, 2, 2, 1, 4, torch.float32, seed=0)
    with pytest.raises(ValueError, match=r"implementation='sdpa' cannot return the log-sum-exp .*'eager'"):
        split_kv_attention(q, k, v, split_size=2, implementation="sdpa")


def test_split_bounds_cut_every_key_once() -> None:
    assert split_bounds(10, split_size=4) == [(0, 4), (4, 8), (8, 10)]
    assert split_bounds(10, num_splits=3) == [(0, 3), (3, 6), (6, 10)]
    assert split_bounds(2, num_splits=5) == [(0, 1), (1, 2)]  # empty splits dropped
    assert split_bounds(0, split_size=4) == []


def test_split_kv_over_an_empty_cache_gives_the_empty_state() -> None:
    q, k, v, _ = _qkv(1, 2, 1, 1, 0, torch.float32, seed=0)
    out, _, lse = split_kv_attention(q, k, v, split_size=4)
    assert torch.equal(out, torch.zeros(1, 2, 1, 6)) and torch.isneginf(lse).all()


# --------------------------------------------------------------------------- shared-prefix (cascade) attention


@pytest.mark.parametrize(("T", "causal", "sinks"), [(1, True, False), (2, True, True), (3, False, False)])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_shared_prefix_equals_each_requests_full_attention(T: int, causal: bool, sinks: bool, dtype) -> None:
    B, P = 3, 9
    q, k, v, s = _qkv(B, 4, 2, T, 4, dtype, seed=T)
    _, pk, pv, _ = _qkv(1, 2, 2, 1, P, dtype, seed=10 + T)  # one copy of the shared prefix: (1, K, P, E)
    mods = Sinks(s) if sinks else None
    got = shared_prefix_attention(q, pk, pv, k, v, is_causal=causal, score_mods=mods)
    whole_k = torch.cat([pk.expand(B, -1, -1, -1), k], dim=2)  # each request's own copy of the prefix
    whole_v = torch.cat([pv.expand(B, -1, -1, -1), v], dim=2)
    ref = attention(q, whole_k, whole_v, is_causal=causal, implementation="eager", score_mods=mods)
    tol = F64 if dtype == torch.float64 else F32
    assert_close(got.output, ref.output, **tol)
    assert_close(got.lse, ref.lse, **tol)


# --------------------------------------------------------------------------- batch invariance, bitwise


_CHILD = r"""
import json, os, sys, torch
torch.set_num_threads(1)
sys.path.insert(0, sys.argv[1])
from lessons_src.split_kv import split_kv_attention
g = torch.Generator().manual_seed(0)
pool = [(torch.randn(1, 4, 1, 16, generator=g), torch.randn(1, 2, 96, 16, generator=g),
         torch.randn(1, 2, 96, 16, generator=g)) for _ in range(8)]  # request 0 first in every batch

def per_request(batch):  # fixed per-request shapes: a request's computation never sees the batch
    return torch.cat([split_kv_attention(q, k, v, split_size=32).output for q, k, v in batch])

def by_heuristic(batch):  # as FlashAttention's num_splits heuristic: fewer splits when the batch is larger
    q, k, v = (torch.cat(t) for t in zip(*batch))
    return split_kv_attention(q, k, v, num_splits=max(1, 8 // len(batch))).output

sizes = [1, 2, 3, 5, 8]
inv = [torch.equal(per_request(pool[:b])[0], per_request(pool[:1])[0]) for b in sizes]
heur = [torch.equal(by_heuristic(pool[:b])[0], by_heuristic(pool[:1])[0]) for b in sizes]
print(json.dumps({"capability": torch.backends.cpu.get_cpu_capability(), "invariant": inv, "heuristic": heur}))
"""


def _capabilities() -> list[str]:
    """The ATEN_CPU_CAPABILITY values this machine supports: default, and avx2/avx512 up to what it has."""
    have = torch.backends.cpu.get_cpu_capability().lower()
    ladder = ["default", "avx2", "avx512"]
    return ladder[: ladder.index(have) + 1] if have in ladder else ["default"]


@pytest.mark.slow
@pytest.mark.parametrize("capability", _capabilities())
def test_batch_invariance_both_ways(capability: str) -> None:
    """A merge of fixed per-request shapes gives a request the same bits in any batch; a split count chosen from
    the batch size does not (a fresh process per capability: torch reads ATEN_CPU_CAPABILITY once)."""
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "ATEN_CPU_CAPABILITY": capability, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", _CHILD, root], env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got["capability"].lower() == capability
    assert all(got["invariant"]), got  # torch.equal for every batch size
    assert got["heuristic"][0] and not all(got["heuristic"]), got  # batch 1 equals itself; another batch does not
