"""The committed report of tools/bench/bench_roofline.py: taken at the script's sizes, one thread and every core, its
rates and ratios those of the samples it records, with the machine and its load named."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from bench_roofline import COPY_MIB, MATMUL_N, REPEATS  # tools/bench, on pytest's pythonpath

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "docs" / "_data" / "bench" / "roofline.json"


@pytest.fixture(scope="module")
def report() -> dict:
    return json.loads(REPORT.read_text())


def test_taken_at_the_scripts_sizes_on_one_thread_and_every_core(report: dict) -> None:
    assert report["config"] == {"matmul_n": MATMUL_N, "copy_mib": COPY_MIB, "dtype": "float32", "repeats": REPEATS}
    m = report["machine"]
    assert set(report["threads"]) == {"1", str(m["cpus"])}
    assert m["cpu"] and m["torch"] and {"load_average_before", "load_average_after"} <= set(m)


def test_rates_are_the_medians_of_the_recorded_samples(report: dict) -> None:
    for r in report["threads"].values():
        assert len(r["matmul_seconds"]) == len(r["copy_seconds"]) == REPEATS
        assert r["matmul_flops"] == 2 * MATMUL_N**3 and r["copy_bytes"] == 2 * COPY_MIB * 2**20  # read + write
        assert r["matmul_flops_per_s"] == pytest.approx(r["matmul_flops"] / statistics.median(r["matmul_seconds"]))
        assert r["copy_bytes_per_s"] == pytest.approx(r["copy_bytes"] / statistics.median(r["copy_seconds"]))
        assert r["flops_per_byte"] == pytest.approx(r["matmul_flops_per_s"] / r["copy_bytes_per_s"])
