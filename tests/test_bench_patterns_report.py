"""The committed report of tools/bench/bench_patterns.py is the one issue 49 asks for and consistent with itself.

Timings cannot be recomputed in a test; what can be checked is that the report covers 1K to 32K cached tokens,
that each pattern's bytes measured from its caches equal the bytes computed from its layer types, that the
memory and step ratios follow from the recorded numbers, and that the patterns are the script's.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "docs" / "_data" / "bench" / "patterns.json"
from bench_patterns import BASELINE, PATTERNS, expected_bytes, ratios  # noqa: E402


@pytest.fixture(scope="module")
def report() -> dict:
    return json.loads(REPORT.read_text())


def test_taken_from_1k_to_32k_cached_tokens(report: dict) -> None:
    lengths = report["config"]["lengths"]
    assert min(lengths) <= 1024 and max(lengths) >= 32768
    assert report["repeats"] >= 3, "at least three rounds, so the median means something"
    assert set(report["runs"]) == set(PATTERNS) and report["baseline"] == BASELINE
    assert report["patterns"] == {n: [t.name + ("" if t.shares is None else f">{t.shares}") for t in p]
                                  for n, p in PATTERNS.items()}


def test_bytes_measured_are_the_bytes_computed(report: dict) -> None:
    for name, pattern in PATTERNS.items():
        for n in report["config"]["lengths"]:
            assert report["bytes_measured"][name][str(n)] == report["bytes_computed"][name][str(n)] == \
                expected_bytes(pattern, n), (name, n)
            want = report["bytes_measured"][name][str(n)] / report["bytes_measured"][BASELINE][str(n)]
            if name != BASELINE:
                assert report["memory_ratio_to_baseline"][name][str(n)] == pytest.approx(want)


def test_medians_and_ratios_follow_from_the_runs(report: dict) -> None:
    for name in PATTERNS:
        for n, runs in report["runs"][name].items():
            assert len(runs) == report["repeats"], (name, n)
            assert report["median_cpu_seconds"][name][n] == pytest.approx(
                statistics.median(x["cpu_seconds"] for x in runs))
    expected = ratios(report["runs"])
    for name, by_length in expected.items():
        assert report["step_ratio_to_baseline"][name] == pytest.approx(by_length), name


def test_a_window_or_chunk_cache_stops_growing() -> None:
    """From the formula: past its window, a windowed layer's cache stays flat; the global layers' grow."""
    small, large = expected_bytes(PATTERNS["gpt_oss"], 4096), expected_bytes(PATTERNS["gpt_oss"], 8192)
    globals_ = sum(t.kind == "global" for t in PATTERNS["gpt_oss"])
    per_token = expected_bytes((PATTERNS["all_global"][0],), 1)
    assert large - small == globals_ * 4096 * per_token
