"""The committed report of tools/bench/bench_split_kv.py: taken at Llama 3 8B's attention shape with the script's
caches and requests, its bytes the formulas', its split counts right, every row's output equal to the baseline's,
its medians and ratios those of its own runs; and the split backend it registers is attention with its log-sum-exp.

Timings cannot be recomputed in a test; what the report says about them must follow from the runs it records.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
import torch
from bench_split_kv import (  # tools/bench, on pytest's pythonpath
    DECODE,
    DECODE_ROWS,
    PREFIX,
    PREFIX_ROWS,
    REPEATS,
    REQUESTS,
    SPLIT_SIZE,
    E,
    H,
    K,
    decode_bytes,
    prefix_bytes,
    ratios,
    sdpa_cpu_lse,
)

from lessons_src.functional import attention
from lessons_src.masks import prepare_mask

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "docs" / "_data" / "bench" / "split_kv.json"


@pytest.fixture(scope="module")
def report() -> dict:
    return json.loads(REPORT.read_text())


def test_taken_at_llama_3_8bs_shape_with_the_scripts_caches(report: dict) -> None:
    c = report["config"]
    assert (c["num_heads"], c["num_kv_heads"], c["head_dim"]) == (H, K, E) == (32, 8, 128) and report["full_run"]
    assert [tuple(x) for x in c["decode"]] == list(DECODE) and c["requests"] == list(REQUESTS)
    assert c["prefix"] == PREFIX and c["split_size"] == SPLIT_SIZE and c["repeats"] == REPEATS
    assert [(d["batch"], d["cached"]) for d in report["decode"]] == list(DECODE)
    assert [p["requests"] for p in report["shared_prefix"]] == list(REQUESTS)
    assert {"load_average_before", "load_average_after", "capability"} <= set(report["machine"])


def test_bytes_are_the_formulas_and_every_row_gave_the_baselines_answer(report: dict) -> None:
    for d in report["decode"]:
        assert d["bytes_measured"] == d["bytes_computed"] == decode_bytes(d["batch"], d["cached"])
        assert d["splits"] == {"split_2": 2, "split_4096": -(-d["cached"] // SPLIT_SIZE)}
        assert set(d["max_abs_difference"]) == set(DECODE_ROWS[1:]) and max(d["max_abs_difference"].values()) < 1e-4
    for p in report["shared_prefix"]:
        assert p["bytes_measured"] == p["bytes_computed"] == prefix_bytes(p["requests"])
        assert p["max_abs_difference"] < 1e-4


def test_medians_and_ratios_follow_from_the_runs(report: dict) -> None:
    for d in report["decode"]:
        assert set(d["runs"]) == set(DECODE_ROWS)
        for row, runs in d["runs"].items():
            assert len(runs) == REPEATS
            assert d["median_seconds"][row] == pytest.approx(statistics.median(x["seconds"] for x in runs))
        assert d["one_pass_over"] == pytest.approx(ratios(d["runs"], "one_pass"))
    for p in report["shared_prefix"]:
        assert set(p["runs"]) == set(PREFIX_ROWS)
        r = p["runs"]
        every = ratios({"own_copies": r["own_copies"], "shared_prefix": r["shared_prefix"]}, "own_copies")
        one = ratios({"own_copies": r["own_copies_1_thread"], "shared_prefix": r["shared_prefix_1_thread"]},
                     "own_copies")
        assert p["own_copies_over"] == pytest.approx({"every_core": every["shared_prefix"],
                                                      "one_thread": one["shared_prefix"]})


@pytest.mark.parametrize("masked", [False, True])
def test_the_split_backend_is_attention_with_its_log_sum_exp(masked: bool) -> None:
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 3, 8, generator=g)  # (B, H, T, E): two query heads per KV head
    k, v = torch.randn(2, 2, 5, 8, generator=g), torch.randn(2, 2, 5, 8, generator=g)  # (B, K, S, E)
    keep = torch.rand(3, 5, generator=g) > 0.3 if masked else None
    want = attention(q, k, v, attn_mask=keep, implementation="eager")
    mask = prepare_mask(keep, is_causal=False, shape=(2, 4, 3, 5), dtype=q.dtype, device=q.device)
    got = sdpa_cpu_lse(q, k, v, mask, scale=8**-0.5, dropout_p=0.0)
    torch.testing.assert_close(got.output, want.output)
    torch.testing.assert_close(got.lse, want.lse)
