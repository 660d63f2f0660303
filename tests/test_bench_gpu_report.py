"""The committed GPU report of tools/bench/bench_gpu.py is the issue's sweep and consistent with itself.

Timings cannot be recomputed without the GPU; what can be checked is that the report was taken on a named CUDA
GPU (not the CPU dry run), covers T = 1K-16K, head sizes 64 and 128, causal and not, both passes and all three
implementations, and that every median, TFLOP/s figure and the goal's verdict follow from the recorded runs.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "docs" / "_data" / "bench" / "gpu.json"
from bench_gpu import GOAL, HEADS, HIDDEN, IMPLEMENTATIONS, LENGTHS, MODES, TOKENS, flops  # noqa: E402


@pytest.fixture(scope="module")
def report() -> dict:
    return json.loads(REPORT.read_text())


def test_taken_on_a_named_gpu_over_the_whole_sweep(report: dict) -> None:
    c, m = report["config"], report["machine"]
    assert not c["dry_run"] and c["device"] == "cuda" and c["dtype"] == "bfloat16"
    assert m["gpu"] and m["triton"] and m["cuda"], "the hardware and versions are named"
    assert (c["tokens_per_batch"], c["hidden"]) == (TOKENS, HIDDEN)
    swept = {(r["T"], r["head_dim"], r["causal"]) for r in report["rows"]}
    assert swept == {(T, E, causal) for T in LENGTHS for E in HEADS for causal in (True, False)}


def test_medians_and_tflops_follow_from_the_runs(report: dict) -> None:
    for row in report["rows"]:
        assert (row["B"], row["H"]) == (TOKENS // row["T"], HIDDEN // row["head_dim"])
        for impl in IMPLEMENTATIONS:
            for mode in MODES:
                cell = row[f"{impl}.{mode}"]
                assert 1 <= len(cell["seconds"]) <= 5
                assert cell["median_seconds"] == pytest.approx(statistics.median(cell["seconds"]))
                want = flops(row["B"], row["H"], row["T"], row["head_dim"], row["causal"], mode)
                assert cell["tflops"] == pytest.approx(want / cell["median_seconds"] / 1e12)
        assert row["max_abs_diff_triton_vs_sdpa"] < 0.05, "Triton's and SDPA's bfloat16 outputs agree"


def test_the_goal_is_judged_from_the_rows(report: dict) -> None:
    row = next(r for r in report["rows"] if (r["T"], r["head_dim"], r["causal"]) == (GOAL["T"], GOAL["head_dim"], True))
    ratio = row["triton.forward"]["median_seconds"] / row["sdpa_flash.forward"]["median_seconds"]
    assert report["goal"]["ratio"] == pytest.approx(ratio)
    assert report["goal"]["met"] == (ratio <= GOAL["triton_over_sdpa_flash_at_most"])


def test_flops_count_the_papers_way() -> None:
    assert flops(1, 1, 1024, 64, False, "forward") == 4 * 1024 * 1024 * 64
    assert flops(1, 1, 1024, 64, True, "forward") == 2 * 1024 * 1024 * 64
    assert flops(2, 3, 8, 16, False, "forward_backward") == 3.5 * 4 * 2 * 3 * 8 * 8 * 16
