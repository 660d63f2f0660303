"""The committed report of tools/bench/bench_mha_ways.py is complete and consistent with itself.

Timings cannot be recomputed in a test; what can be checked is that every way was measured in every
mode, that the ratios are the medians' ratios, that the FLOP count is the shapes' and that the share
of the matmul rate follows from them.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "docs" / "_data" / "bench" / "mha_ways.json"
from bench_mha_ways import build  # noqa: E402


@pytest.fixture(scope="module")
def report() -> dict:
    if not REPORT.exists():
        pytest.skip("docs/_data/bench/mha_ways.json not measured yet: run `make bench-mha-ways`")
    return json.loads(REPORT.read_text())


def test_raschka_setup(report: dict) -> None:
    s = report["setup"]
    got = (s["batch"], s["tokens"], s["d_model"], s["heads"], s["dtype"], s["causal"])
    assert got == (8, 1024, 768, 12, "float32", True)


@pytest.mark.parametrize("mode", ["forward", "forward_backward"])
def test_every_way_measured_and_ratios_are_the_medians(report: dict, mode: str) -> None:
    ways = set(build(24, 12, 4))
    kinds = {"eager", "compiled"} if report["setup"]["compiled"] else {"eager"}
    rows = report["results"][mode]["rows"]
    assert set(rows) == {f"{w}|{k}" for w in ways for k in kinds}
    fastest = min(r["median_s"] for r in rows.values())
    assert rows[report["results"][mode]["fastest"]]["median_s"] == fastest
    for row in rows.values():
        assert row["min_s"] <= row["median_s"] <= row["max_s"]
        assert math.isclose(row["ratio_to_fastest"], row["median_s"] / fastest)
        assert math.isclose(row["spread"], (row["max_s"] - row["min_s"]) / row["median_s"])


def test_flops_and_share_of_matmul_rate(report: dict) -> None:
    B, T, D = 8, 1024, 768
    projections = 2 * B * T * D * 4 * D  # x @ [W_Q; W_K; W_V], then y @ W_O
    attention = 2 * (2 * B * T * T * D)  # Q K^T and P V over all heads, full T x T
    assert report["flops_per_forward"] == projections + attention
    ours = report["results"]["forward"]["rows"]["ours|eager"]["median_s"]
    assert math.isclose(report["ours_forward_flops_per_s"], report["flops_per_forward"] / ours)
    share = report["ours_forward_flops_per_s"] / report["matmul"]["flops_per_s"]
    assert math.isclose(report["ours_share_of_matmul_peak"], share)


def test_ours_runs_the_fused_kernel(report: dict) -> None:
    assert report["sdpa_kernels"]["ours"] == report["sdpa_kernels"]["sdpa_is_causal"] != []
    assert report["sdpa_kernels"]["ours_eager"] == [] and report["sdpa_kernels"]["fused_qkv"] == []
