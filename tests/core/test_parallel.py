"""Tensor-parallel, Ulysses and ring attention, run in real processes (gloo) and checked against one process.

Starting processes costs seconds, so every check of one world size shares one launch: the fixture builds
all the cases, :func:`lessons_src.lab.launch.launch` runs them in 2 (then 4) processes, and the tests
compare what each rank returned with the single-process module computed here. The bytes the counting
wrapper recorded are compared with formulas written out here from the shapes.
"""

from __future__ import annotations

import itertools
import math
import os
import re
import time
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch.testing import assert_close

from lessons_src import MultiHeadAttention, MultiHeadLatentAttention
from lessons_src.functional import attention
from lessons_src.kv_cache import LatentCache
from lessons_src.lab.launch import launch
from lessons_src.lab.parallel_runs import combined_run, fails_beside_a_busy_rank_0, fresh_state, ranks_and_sizes
from lessons_src.parallel import TensorParallelAttention, tp_plan, ulysses_attention, valid_tp_degrees
from lessons_src.ring import ring_attention, sequence_chunks, shard_sequence, unshard_sequence

TOL = {torch.float32: {"rtol": 1e-5, "atol": 1e-6}, torch.float64: {"rtol": 1e-12, "atol": 1e-12}}
D, H, B, T = 32, 8, 2, 8  # T divisible by 2 * 4 for the zig-zag split over 4 ranks

# (num_kv_heads, bias, dtype, mask kind): MHA, GQA, MQA; with 4 ranks K=2 and K=1 replicate KV heads
TP_CASES = [
    (8, False, torch.float32, None),
    (2, True, torch.float32, "padding"),
    (1, False, torch.float32, "per-head"),
    (2, False, torch.float64, None),
]
ULYSSES_CASES = [(8, torch.float32), (2, torch.float32), (1, torch.float64)]
RING_CASES = [  # (H, K, causal, order, dtype)
    (4, 4, False, "contiguous", torch.float32),
    (4, 4, True, "contiguous", torch.float32),
    (4, 2, True, "zigzag", torch.float32),
    (4, 1, False, "zigzag", torch.float32),
    (2, 2, True, "zigzag", torch.float64),
]


def _mask(kind: str | None, dtype: torch.dtype) -> torch.Tensor | None:
    if kind == "padding":
        keep = torch.ones(B, 1, 1, T, dtype=torch.bool)
        keep[1, :, :, 5:] = False  # the second sequence is 5 tokens long
        return keep
    if kind == "per-head":
        return torch.randn(B, H, T, T, dtype=dtype)  # a different additive bias per head
    return None


def _tp_cases() -> list[dict[str, Any]]:
    cases = []
    for K, bias, dtype, mask in TP_CASES:
        full = MultiHeadAttention(D, H, num_kv_heads=K, bias=bias).to(dtype)
        cases.append({
            "config": {"d_model": D, "num_heads": H, "num_kv_heads": K, "bias": bias},
            "state": full.state_dict(), "x": torch.randn(B, T, D, dtype=dtype),
            "grad_out": torch.randn(B, T, D, dtype=dtype), "is_causal": True, "attn_mask": _mask(mask, dtype),
        })
    return cases


def _ulysses_cases() -> list[dict[str, Any]]:
    cases = []
    for K, dtype in ULYSSES_CASES:
        full = MultiHeadAttention(D, H, num_kv_heads=K).to(dtype)
        cases.append({
            "config": {"d_model": D, "num_heads": H, "num_kv_heads": K}, "state": full.state_dict(),
            "x": torch.randn(B, T, D, dtype=dtype), "grad_out": torch.randn(B, T, D, dtype=dtype), "is_causal": True,
        })
    return cases


def _ring_cases() -> list[dict[str, Any]]:
    E = 4
    return [
        {"q": torch.randn(B, h, T, E, dtype=dtype), "k": torch.randn(B, k, T, E, dtype=dtype),
         "v": torch.randn(B, k, T, E + 1, dtype=dtype), "is_causal": causal, "order": order, "keep_steps": True,
         "grad_out": torch.randn(B, h, T, E + 1, dtype=dtype), "grad_lse": torch.randn(B, h, T, dtype=dtype)}
        for h, k, causal, order, dtype in RING_CASES
    ]


MLA_CONFIG = {"d_model": D, "num_heads": H, "kv_latent_dim": 12, "rope_dim": 4, "head_dim": 6, "v_head_dim": 5,
              "q_latent_dim": 10}


def _mla_cases() -> list[dict[str, Any]]:
    cases = []
    for mode in ("naive", "absorbed"):
        cfg = dict(MLA_CONFIG)
        full = MultiHeadLatentAttention(cfg.pop("d_model"), cfg.pop("num_heads"), **cfg)  # type: ignore[arg-type]
        cases.append({"config": MLA_CONFIG, "state": full.state_dict(), "prompt": torch.randn(B, T, D),
                      "token": torch.randn(B, 1, D), "mode": mode})
    return cases


@pytest.fixture(scope="module", params=[2, 4], ids=lambda p: f"P={p}")
def run(request: pytest.FixtureRequest) -> tuple[int, dict[str, Any], list[dict[str, Any]]]:
    """(P, the cases, each rank's results): one launch per world size for every check in this file."""
    torch.manual_seed(0)
    work = {"tp": _tp_cases(), "ulysses": _ulysses_cases(), "ring": _ring_cases(), "mla": _mla_cases()}
    return request.param, work, launch(combined_run, request.param, work)


def _reference(case: dict[str, Any], **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    c = case["config"]
    full = MultiHeadAttention(c["d_model"], c["num_heads"], num_kv_heads=c["num_kv_heads"], bias=c.get("bias", False))
    full.load_state_dict(case["state"])
    full = full.to(case["x"].dtype)
    x = case["x"].clone().requires_grad_(True)
    y = full(x, is_causal=case["is_causal"], **kwargs)
    y.backward(case["grad_out"])
    assert x.grad is not None
    return y.detach(), x.grad, {n: p.grad for n, p in full.named_parameters() if p.grad is not None}


# --------------------------------------------------------------------------- tensor parallelism


def test_tensor_parallel_equals_one_process(run: tuple[int, dict[str, Any], list[dict[str, Any]]]) -> None:
    P, work, results = run
    for i, case in enumerate(work["tp"]):
        tol = TOL[case["x"].dtype]
        out, x_grad, grads = _reference(case, attn_mask=case["attn_mask"])
        for rank in range(P):
            got = results[rank]["tp"][i]
            assert_close(got["output"], out, **tol)
            assert_close(got["x_grad"], x_grad, **tol)
            assert set(got["grads"]) == set(grads)
            for name, g in grads.items():
                assert_close(got["grads"][name], g, **tol, msg=lambda m, n=name, r=rank: f"{n} rank {r}: {m}")


def test_tensor_parallel_sends_one_all_reduce_each_way(run: tuple[int, dict[str, Any], list[dict[str, Any]]]) -> None:
    P, work, results = run
    for i, case in enumerate(work["tp"]):
        x = case["x"]
        payload = x.shape[0] * x.shape[1] * x.shape[2] * x.element_size()  # the (B, T, D) partial output
        wire = payload * 2 * (P - 1) // P  # ring all-reduce: reduce-scatter + all-gather, (P-1)/P each
        for rank in range(P):
            got = results[rank]["tp"][i]
            for records in (got["forward"], got["backward"]):  # forward: W_O's sum; backward: x's gradient
                assert [(r.op, r.payload_bytes, r.sent_bytes) for r in records] == [("all_reduce", payload, wire)]


def test_tensor_parallel_replicates_kv_heads_beyond_their_count(
    run: tuple[int, dict[str, Any], list[dict[str, Any]]],
) -> None:
    P, work, results = run
    E = D // H
    for i, case in enumerate(work["tp"]):
        K = case["config"]["num_kv_heads"]
        holders: dict[int, list[int]] = {}
        for rank in range(P):
            got = results[rank]["tp"][i]
            assert got["query_heads"] == list(range(rank * H // P, (rank + 1) * H // P))
            for q in got["query_heads"]:  # every query head's KV head is on its rank
                assert q // (H // K) in got["kv_heads"]
            for kv in got["kv_heads"]:
                holders.setdefault(kv, []).append(rank)
            assert got["kv_bytes_per_token"]["bfloat16"] == len(got["kv_heads"]) * 2 * E * 2
        assert sorted(holders) == list(range(K))
        assert {len(ranks) for ranks in holders.values()} == {max(1, P // K)}


# --------------------------------------------------------------------------- Ulysses


def test_ulysses_equals_one_process(run: tuple[int, dict[str, Any], list[dict[str, Any]]]) -> None:
    P, work, results = run
    for i, case in enumerate(work["ulysses"]):
        tol = TOL[case["x"].dtype]
        out, x_grad, grads = _reference(case)
        assert_close(unshard_sequence([results[r]["ulysses"][i]["output"] for r in range(P)], dim=1), out, **tol)
        assert_close(unshard_sequence([results[r]["ulysses"][i]["x_grad"] for r in range(P)], dim=1), x_grad, **tol)
        for name, g in grads.items():
            assert_close(results[0]["ulysses"][i]["grads"][name], g, **tol)


def test_ulysses_sends_four_all_to_alls_each_way(run: tuple[int, dict[str, Any], list[dict[str, Any]]]) -> None:
    P, work, results = run
    for i, case in enumerate(work["ulysses"]):
        K, size = case["config"]["num_kv_heads"], case["x"].element_size()
        E, Tl = D // H, T // P
        q = B * H * Tl * E * size  # my positions of every query head (and, last, of the output)
        kv = B * max(K, P) * Tl * E * size  # KV heads, repeated to one per rank when there are fewer
        expected = [q, kv, kv, q]
        for rank in range(P):
            got = results[rank]["ulysses"][i]
            assert [r.payload_bytes for r in got["forward"]] == expected
            assert sorted(r.payload_bytes for r in got["backward"]) == sorted(expected)
            assert all(r.op == "all_to_all" and r.sent_bytes == r.payload_bytes * (P - 1) // P
                       for r in got["forward"] + got["backward"])


# --------------------------------------------------------------------------- ring attention


def test_ring_attention_equals_full_attention(run: tuple[int, dict[str, Any], list[dict[str, Any]]]) -> None:
    P, work, results = run
    for i, case in enumerate(work["ring"]):
        q, k, v = (case[n].clone().requires_grad_(True) for n in ("q", "k", "v"))
        tol = TOL[q.dtype]
        ref = attention(q, k, v, is_causal=case["is_causal"], implementation="eager").output
        scores = q @ k.repeat_interleave(q.shape[1] // k.shape[1], 1).transpose(-2, -1) / math.sqrt(q.shape[-1])
        if case["is_causal"]:
            scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        lse = scores.logsumexp(-1)
        torch.autograd.backward([ref, lse], [case["grad_out"], case["grad_lse"]])
        order = case["order"]

        def gathered(key: str, sub: str | None = None, i: int = i, order: str = order) -> torch.Tensor:
            parts = [results[r]["ring"][i][key] if sub is None else results[r]["ring"][i][key][sub] for r in range(P)]
            return unshard_sequence(parts, dim=2, order=order)  # type: ignore[arg-type]

        assert_close(gathered("output"), ref.detach(), **tol)
        assert_close(gathered("lse"), lse.detach(), **tol)
        for name, t in (("q", q), ("k", k), ("v", v)):  # the backward pass, through the ring again
            assert_close(gathered("grads", name), t.grad, **tol, msg=lambda m, n=name: f"d{n}: {m}")


def test_ring_passes_each_block_once_per_step(run: tuple[int, dict[str, Any], list[dict[str, Any]]]) -> None:
    P, work, results = run
    for i, case in enumerate(work["ring"]):
        k, v = case["k"], case["v"]
        block = B * k.shape[1] * (T // P) * (k.shape[-1] + v.shape[-1]) * k.element_size()  # my keys and values
        for rank in range(P):
            records = results[rank]["ring"][i]["records"]
            assert [(r.op, r.sent_bytes) for r in records] == [("send_recv", block)] * (P - 1)
            # backward: each block again with its gradient (as large), then the gradient's last hop home
            backward = results[rank]["ring"][i]["backward"]
            expected = [("send_recv", 2 * block)] * (P - 1) + [("send_recv", block)]
            assert [(r.op, r.sent_bytes) for r in backward] == expected


def test_ring_work_per_rank_and_zigzag_balance(run: tuple[int, dict[str, Any], list[dict[str, Any]]]) -> None:
    """Work = scores computed; a block of scores is skipped only when the causal mask hides all of it."""
    P, work, results = run
    visible = torch.ones(T, T, dtype=torch.bool).tril()
    for i, case in enumerate(work["ring"]):
        order, causal = case["order"], case["is_causal"]
        expected = []
        for rank in range(P):
            mine = sequence_chunks(T, P, rank, order)
            n = 0
            for source in range(P):
                for qa, qb in mine:
                    for ka, kb in sequence_chunks(T, P, source, order):
                        if not causal or visible[qa:qb, ka:kb].any():
                            n += (qb - qa) * (kb - ka)
            expected.append(n)
        got = [results[r]["ring"][i]["work"] for r in range(P)]
        assert got == expected
        assert sum(results[0]["ring"][i]["steps"][s]["work"] for s in range(P)) == got[0]
        if causal and order == "contiguous":  # rank r computes r + 1 blocks of (T/P)^2 scores
            assert got == [(r + 1) * (T // P) ** 2 for r in range(P)]
        if causal and order == "zigzag":  # every rank the same: 2P + 1 chunk pairs of (T/2P)^2
            assert got == [(2 * P + 1) * (T // (2 * P)) ** 2] * P


def test_ring_running_max_and_sum_end_at_the_log_sum_exp(run: tuple[int, dict[str, Any], list[dict[str, Any]]]) -> None:
    P, work, results = run
    for i in range(len(work["ring"])):
        for rank in range(P):
            got = results[rank]["ring"][i]
            steps = got["steps"]
            assert [s["source"] for s in steps] == [(rank - s) % P for s in range(P)]
            for a, b in itertools.pairwise(steps):
                assert (b["running_max"] >= a["running_max"]).all()  # the max only grows
            last = steps[-1]
            assert_close(last["running_max"] + last["running_sum"].log(), got["lse"], **TOL[got["lse"].dtype])


# --------------------------------------------------------------------------- MLA under tensor parallelism


def test_mla_split_by_heads_equals_one_process(run: tuple[int, dict[str, Any], list[dict[str, Any]]]) -> None:
    """Prefill and one decoded token through a latent cache, naive and absorbed: the ranks' sum is the full layer."""
    P, work, results = run
    for i, case in enumerate(work["mla"]):
        cfg = dict(case["config"])
        full = MultiHeadLatentAttention(cfg.pop("d_model"), cfg.pop("num_heads"), **cfg).eval()
        full.load_state_dict(case["state"])
        cache = LatentCache(batch_size=B, kv_latent_dim=full.kv_latent_dim, rope_dim=full.rope_dim, max_len=T + 1)
        with torch.no_grad():
            prefill = full(case["prompt"], cache=cache, mode=case["mode"])
            decode = full(case["token"], cache=cache, mode=case["mode"])
        replicated = sum(p.numel() for n, p in full.named_parameters() if n.startswith(("q_down", "kv_down")))
        sharded = sum(p.numel() for p in full.parameters()) - replicated
        payloads = [B * T * D * 4, B * 1 * D * 4]  # one all-reduce of the (B, T, D) output per step
        for rank in range(P):
            got = results[rank]["mla"][i]
            assert_close(got["prefill"], prefill, **TOL[torch.float32])
            assert_close(got["decode"], decode, **TOL[torch.float32])
            assert got["cache_bytes"] == cache.nbytes  # the whole latent on every rank
            assert got["parameters"] == replicated + sharded // P
            assert [(r.op, r.payload_bytes) for r in got["records"]] == [("all_reduce", n) for n in payloads]


# --------------------------------------------------------------------------- no processes needed


class _Stub:
    """A stand-in for Collectives where only the degree matters (the checks run before any collective)."""

    def __init__(self, world_size: int, rank: int = 0) -> None:
        self.world_size, self.rank = world_size, rank


def test_valid_degrees_and_the_error_that_lists_them() -> None:
    assert valid_tp_degrees(32, 8) == [1, 2, 4, 8, 16, 32]
    assert valid_tp_degrees(12, 4) == [1, 2, 4, 12]
    assert tp_plan(32, 8, 16).kv_copies == 2
    with pytest.raises(ValueError, match=r"degree 8 does not split num_heads=12 \(num_kv_heads=4\).*: 1, 2, 4, 12$"):
        tp_plan(12, 4, 8)
    with pytest.raises(ValueError, match=r"degree 3 does not split num_heads=8 \(num_kv_heads=8\).*: 1, 2, 4, 8$"):
        TensorParallelAttention(32, 8, comm=_Stub(3))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="degree 3 does not split"):
        ulysses_attention(MultiHeadAttention(24, 6, num_kv_heads=2), torch.randn(1, 2, 24), _Stub(3))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="degree must be an int"):
        tp_plan(8, 8, 2.0)  # type: ignore[arg-type]


def test_ring_attention_records_steps_of_the_forward_pass_only() -> None:
    q = torch.randn(1, 2, 4, 4, requires_grad=True)
    with pytest.raises(ValueError, match=r"keep_steps records the forward pass only; run it under torch\.no_grad"):
        ring_attention(q, q, q, _Stub(2), keep_steps=True)  # type: ignore[arg-type]


def test_sequence_split_round_trips_and_rejects_uneven_lengths() -> None:
    x = torch.arange(16).view(1, 16)
    for order in ("contiguous", "zigzag"):
        shards = [shard_sequence(x, 4, r, dim=1, order=order) for r in range(4)]  # type: ignore[arg-type]
        assert torch.equal(unshard_sequence(shards, dim=1, order=order), x)  # type: ignore[arg-type]
    assert shard_sequence(x, 4, 0, dim=1, order="zigzag").tolist() == [[0, 1, 14, 15]]
    with pytest.raises(ValueError, match="T=12 positions do not split into 8 equal zig-zag chunks"):
        sequence_chunks(12, 4, 0, "zigzag")
    with pytest.raises(ValueError, match="order must be 'contiguous' or 'zigzag'"):
        sequence_chunks(8, 2, 0, "striped")  # type: ignore[arg-type]


def test_collectives_need_an_initialised_process_group() -> None:
    from lessons_src.parallel import Collectives

    with pytest.raises(ValueError, match=r"torch\.distributed is not initialised"):
        Collectives()


def test_launch_needs_a_function_other_processes_can_import() -> None:
    with pytest.raises(ValueError, match="module-level function of an importable module"):
        launch(lambda comm: comm.rank, 2)
    with pytest.raises(ValueError, match="world_size must be an int of at least 1"):
        launch(ranks_and_sizes, 0)


def test_launch_reports_the_failing_rank_and_its_error() -> None:
    """Every process is polled each round: rank 1's failure is seen while rank 0 is still at work (for 90 s)."""
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"(?s)rank 1 of 2 running lessons_src.lab.parallel_runs."
                       r"fails_beside_a_busy_rank_0 failed.*ValueError: rank 1 fails on purpose"):
        launch(fails_beside_a_busy_rank_0, 2, 90.0, timeout_s=120)  # the time-out ends the test if this regresses
    assert time.monotonic() - start < 45, f"the failure was seen after {time.monotonic() - start:.0f} s"


def test_launch_refuses_a_backend_this_torch_lacks_at_once() -> None:
    """Only a failure that a new try may cure starts the processes again; a missing backend is named at once."""
    import lessons_src.lab.launch as launch_module

    for backend in ["bogus"] + ([] if dist.is_nccl_available() else ["nccl"]):
        with pytest.raises(ValueError, match=rf"backend='{backend}' is not available in this build of torch.*gloo"):
            launch(ranks_and_sizes, 2, backend=backend)
    assert launch_module._may_form_next_time(RuntimeError("Gloo connectFullMesh failed with [...] Connection refused"))
    assert launch_module._may_form_next_time(dist.DistStoreError("Timed out after 301 seconds waiting for clients"))
    assert not launch_module._may_form_next_time(RuntimeError("Distributed package doesn't have NCCL built in"))


def test_docstring_examples_run() -> None:
    import doctest

    import lessons_src.lab.launch as launch_module
    import lessons_src.parallel as parallel_module
    import lessons_src.ring as ring_module

    for module, at_least in ((parallel_module, 3), (ring_module, 1), (launch_module, 2)):
        result = doctest.testmod(module)
        assert result.attempted >= at_least and result.failed == 0, module.__name__


def test_mla_under_tensor_parallelism_replicates_the_down_projections_and_the_latent() -> None:
    from lessons_src.lab.configs import load_configs
    from lessons_src.lab.parallel_runs import mla_tensor_parallel

    cfg = load_configs()["DeepSeek-V2"]
    assert cfg.mla is not None
    D, Hh, E = cfg.d_model, cfg.num_heads, cfg.head_dim
    C, R, Ev, Cq = (cfg.mla[n] for n in ("kv_latent_dim", "rope_dim", "v_head_dim", "q_latent_dim"))
    replicated = D * Cq + D * (C + R)  # W_DQ, and [W_DKV; W_KR]
    sharded = Cq * Hh * (E + R) + C * Hh * E + C * Hh * Ev + Hh * Ev * D  # W_UQ/W_QR, W_UK, W_UV, W_O
    for P in (1, 8, 128):
        split = mla_tensor_parallel(cfg, P)
        assert split["replicated_parameters"] == replicated and split["sharded_parameters"] == sharded
        assert split["per_rank_parameters"] == replicated + sharded // P
        assert split["cache_bytes_per_token"] == (C + R) * 2  # the same on every rank, whatever P
    with pytest.raises(ValueError, match="degree must divide num_heads=128; got 3"):
        mla_tensor_parallel(cfg, 3)
    with pytest.raises(ValueError, match="no multi-head latent attention sizes"):
        mla_tensor_parallel(load_configs()["Llama 3 8B"], 8)
    from lessons_src.lab.parallel_runs import shard_mla

    with pytest.raises(ValueError, match=r"degree must divide num_heads=4; got 3; degrees that do: \[1, 2, 4\]"):
        shard_mla(MultiHeadLatentAttention(16, 4, kv_latent_dim=8, rope_dim=2), 0, 3)


def test_shards_of_different_lengths_raise_a_value_error_on_every_rank() -> None:
    """Different lengths on different ranks made gloo abort the processes (no Python exception): now every
    rank agrees on the lengths first (one small all-gather) and raises a ValueError naming each rank's."""
    from lessons_src.lab.parallel_runs import uneven_shards_run

    outcomes = launch(uneven_shards_run, 2, [4, 3], timeout_s=60)
    for rank, outcome in enumerate(outcomes):
        for method in ("ring", "ulysses"):
            assert re.match(r"ValueError: .*rank 0 holds 4 positions, rank 1 holds 3", outcome[method]), (
                f"{method}, rank {rank}: {outcome[method]}"
            )


@pytest.mark.parametrize(("x", "error", "match"), [
    ([[1.0]], TypeError, r"x must be a torch.Tensor; got list"),
    (torch.randn(4, 24), ValueError, r"x must be 3-D \(B, T, d_model=24\); got shape \(4, 24\)"),
    (torch.randn(1, 4, 12), ValueError, r"x's last dim must be d_model=24; got shape \(1, 4, 12\)"),
    (torch.randn(1, 4, 24).double(), ValueError, r"x has dtype torch.float64 but the module"),
])
def test_ulysses_checks_x_before_any_collective(x, error: type[Exception], match: str) -> None:
    mha = MultiHeadAttention(24, 6, num_kv_heads=2)
    with pytest.raises(error, match=match):
        ulysses_attention(mha, x, _Stub(2))  # type: ignore[arg-type]


class _Alone(_Stub):
    """Collectives that talk to no one: all-reduce and all-to-all return what they were given (one rank's view)."""

    def all_reduce(self, t: torch.Tensor) -> torch.Tensor:
        return t

    def all_to_all(self, chunks: list[torch.Tensor]) -> list[torch.Tensor]:
        return list(chunks)

    def all_gather_ints(self, values: list[int], *, device: Any = None) -> list[list[int]]:
        return [list(values)] * self.world_size


@pytest.mark.parametrize("mask_dims", [3, 4])
def test_tensor_parallel_cuts_a_per_head_mask_of_3_or_4_dims(mask_dims: int) -> None:
    """Each rank's output is its heads' share of W_O's sum: the shares of 2 ranks add up to the full layer."""
    torch.manual_seed(0)
    full = MultiHeadAttention(16, 4, num_kv_heads=2).double()
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    mask = torch.randn(4, 5, 5, dtype=torch.float64)  # (H, T, S): a different bias per head
    mask = mask if mask_dims == 3 else mask[None].expand(2, 4, 5, 5)
    shares = [TensorParallelAttention.from_module(full, _Alone(2, rank))(x, attn_mask=mask)  # type: ignore[arg-type]
              for rank in range(2)]
    assert_close(shares[0] + shares[1], full(x, attn_mask=mask), **TOL[torch.float64])


def test_tensor_parallel_and_ulysses_apply_the_modules_dropout_in_training() -> None:
    """On one rank both are the full layer, dropout included: the same seed gives the same output."""
    full = MultiHeadAttention(16, 4, dropout=0.5).train()
    x = torch.randn(1, 6, 16)
    torch.manual_seed(1)
    expected = full(x, is_causal=True)
    tp = TensorParallelAttention.from_module(full, _Alone(1)).train()  # type: ignore[arg-type]
    for name, run in (("tensor parallel", lambda: tp(x, is_causal=True)),
                      ("ulysses", lambda: ulysses_attention(full, x, _Alone(1), is_causal=True))):  # type: ignore[arg-type]
        torch.manual_seed(1)
        assert_close(run(), expected, msg=lambda m, n=name: f"{n}: {m}")
    torch.manual_seed(1)
    assert not torch.allclose(tp.eval()(x, is_causal=True), expected)  # eval: no dropout


def test_launch_tries_again_when_the_group_does_not_form(monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure inside init_process_group (gloo's mesh refused on a loaded machine) starts every process again;
    a failure of the function itself is reported at once (test_launch_reports_the_failing_rank_and_its_error)."""
    import lessons_src.lab.launch as launch_module
    from lessons_src.lab.parallel_runs import ranks_and_sizes

    tries: list[int] = []

    def flaky(*args: object) -> list[object]:
        tries.append(1)
        if len(tries) < launch_module._ATTEMPTS:
            raise launch_module._NoGroupError("Gloo connectFullMesh failed: Connection closed by peer")
        return ["ran"]

    monkeypatch.setattr(launch_module, "_run", flaky)
    assert launch(ranks_and_sizes, 2) == ["ran"] and len(tries) == launch_module._ATTEMPTS
    tries.clear()

    def never_forms(*args: object) -> list[object]:
        tries.append(1)
        raise launch_module._NoGroupError("Gloo connectFullMesh failed: Connection closed by peer")

    monkeypatch.setattr(launch_module, "_run", never_forms)
    with pytest.raises(RuntimeError, match=r"the process group did not form in 3 tries: Gloo connectFullMesh"):
        launch(ranks_and_sizes, 2)
    assert len(tries) == 3


def test_each_rank_starts_as_fresh_as_a_new_process() -> None:
    """Ranks are forked from one warm process (torch imported once), yet none shares the caller's state, an earlier
    launch's or another rank's: each seeds its random generator anew, as a new process does."""
    torch.manual_seed(123)  # the caller's state, which a new process would not have
    callers = torch.rand(3).tolist()
    torch.manual_seed(123)
    ranks = launch(fresh_state, 2) + launch(fresh_state, 2)
    draws = [tuple(r["draw"]) for r in ranks]
    assert len(set(draws)) == 4 and tuple(callers) not in draws, draws
    assert len({r["parent"] for r in ranks}) == 1, "one warm process forks the ranks of both launches"
    assert ranks[0]["parent"] != os.getpid(), "the ranks are not forks of the caller"


def test_without_fork_each_rank_is_a_new_python(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where ranks are not forked (macOS, Windows: FORK_RANKS is false), each is a new interpreter: results,
    failures and the caller's state kept out, as on the forked path."""
    import lessons_src.lab.launch as launch_module

    monkeypatch.setattr(launch_module, "FORK_RANKS", False)
    ranks = launch(fresh_state, 2)
    assert [r["rank"] for r in ranks] == [0, 1] and all(r["parent"] == os.getpid() for r in ranks)
    assert len({tuple(r["draw"]) for r in ranks}) == 2
    with pytest.raises(RuntimeError, match="rank 1 of 2"):
        launch(fails_beside_a_busy_rank_0, 2, 60.0, timeout_s=60)
