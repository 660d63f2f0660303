"""The committed report of tools/bench/bench_linear.py: its sizes are Qwen3-Next's, its bytes the formula's, its
medians and ratios those of its own runs, and the linear step stays flat while attention's grows.

Timings cannot be recomputed in a test; what the report says about them must follow from the runs it records.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "docs" / "_data" / "bench" / "linear.json"
from bench_linear import LAYERS, MODEL, ratios, sizes, state_bytes  # noqa: E402


@pytest.fixture(scope="module")
def report() -> dict:
    return json.loads(REPORT.read_text())


def test_taken_at_the_models_sizes_from_1k_to_64k_tokens(report: dict) -> None:
    assert report["model"] == MODEL and {k: report["config"][k] for k in sizes()} == sizes()
    assert min(report["config"]["lengths"]) <= 1024 and max(report["config"]["lengths"]) >= 65536
    assert report["repeats"] >= 3 and set(report["runs"]) == set(LAYERS)


def test_bytes_measured_are_the_formulas(report: dict) -> None:
    for layer in LAYERS:
        for n in report["config"]["lengths"]:
            assert report["bytes_measured"][layer][str(n)] == report["bytes_computed"][layer][str(n)] == \
                state_bytes(n)[layer], (layer, n)
    linear = {report["bytes_measured"]["linear"][str(n)] for n in report["config"]["lengths"]}
    assert len(linear) == 1  # the state does not grow with the context


def test_medians_and_ratios_follow_from_the_runs(report: dict) -> None:
    for layer in LAYERS:
        for n, runs in report["runs"][layer].items():
            assert len(runs) == report["repeats"]
            assert report["median_cpu_seconds"][layer][n] == pytest.approx(
                statistics.median(r["cpu_seconds"] for r in runs))
    assert report["attention_over_linear"] == pytest.approx(ratios(report["runs"]))
