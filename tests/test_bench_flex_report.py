"""The committed report of tools/bench/bench_flex.py is consistent with itself and with the masks it names.

Timings cannot be recomputed in a test. What can: the report's masks and sizes are the script's, every row was
timed for both kernels the same number of times, the medians and speed-ups follow from the recorded runs, and the
share of skipped tiles it records is the block mask's, recomputed here for each row's mask and length (cheap: a
block mask needs no attention). ``full_sweep`` says whether it covers every size of the script (T = 1K to 8K);
the page says so when it does not.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "docs" / "_data" / "bench" / "flex.json"
from bench_flex import BLOCK, MASKS, SIZES, masks, speedups  # noqa: E402

from lessons_src.flex import block_mask, block_sparsity  # noqa: E402


@pytest.fixture(scope="module")
def report() -> dict:
    if not REPORT.exists():
        pytest.skip("no report committed yet: `make bench-flex` writes docs/_data/bench/flex.json")
    return json.loads(REPORT.read_text())


def test_the_masks_and_sizes_are_the_scripts(report: dict) -> None:
    c = report["config"]
    assert c["masks"] == list(MASKS) and c["block_size"] == BLOCK
    assert set(c["sizes"]) <= set(SIZES) and c["sizes"]
    assert report["full_sweep"] == (tuple(c["sizes"]) == SIZES)
    assert set(report["rows"]) == {f"{m}@{T}" for m in MASKS for T in c["sizes"]}
    assert "load_average_before" in report["machine"] and "load_average_after" in report["machine"]


def test_medians_and_speedups_follow_from_the_runs(report: dict) -> None:
    for row, r in report["runs"].items():
        assert len(r["flex"]) == len(r["sdpa"]) == report["repeats"] >= 3, row
        for which in ("flex", "sdpa"):
            assert report["median_seconds"][row][which] == pytest.approx(statistics.median(r[which]))
    assert report["speedup_flex_over_sdpa"] == pytest.approx(speedups(report["runs"]))


def test_the_skipped_share_is_the_block_masks(report: dict) -> None:
    for row, info in report["rows"].items():
        T = info["T"]
        bm = block_mask(masks(T)[info["mask"]], T, block_size=BLOCK)
        assert info["tiles_skipped"] == pytest.approx(block_sparsity(bm)), row
