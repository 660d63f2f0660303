"""The site report of `make bench` (docs/_data/bench/site.json) is well formed and shown as written."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
REPORT = ROOT / "docs" / "_data" / "bench" / "site.json"
PAGE = ROOT / "site" / "reference" / "benchmarks" / "index.html"
CATEGORIES = ["performance", "accessibility", "best-practices", "seo"]


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    if not REPORT.exists():
        pytest.skip("no site report yet: `make bench` writes docs/_data/bench/site.json")
    return dict(json.loads(REPORT.read_text(encoding="utf-8")))


def test_report_is_well_formed(report: dict[str, Any]) -> None:
    assert report["pages"], "the report lists no page"
    for measured in [*(p["lighthouse"]["mobile"] for p in report["pages"]), report["yardstick"]]:
        assert list(measured["scores"]) == CATEGORIES
        assert all(0 <= s <= 100 for s in measured["scores"].values())
        runs = measured["performance_runs"]
        assert len(runs) == len(measured["benchmark_index"]) == report["repeats"]
        assert measured["scores"]["performance"] == round(sorted(runs)[len(runs) // 2]) or len(runs) % 2 == 0
        assert all(i > 0 for i in measured["benchmark_index"])
    for page in report["pages"]:
        assert page["bytes"] > 0
    if report["build"] is not None:
        assert report["build"]["warm_s"] > 0 and report["build"]["cold_s"] > 0


def test_benchmarks_page_shows_the_report(report: dict[str, Any]) -> None:
    text = re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", PAGE.read_text(encoding="utf-8"))))
    yard = report["yardstick"]["scores"]
    assert f"Yardstick (stock page): {yard['performance']} (" + " / ".join(str(yard[c]) for c in CATEGORIES) in text
    for page in report["pages"]:
        mobile = page["lighthouse"]["mobile"]["scores"]
        row = f"{page['page']} {page['bytes'] / 1000:.0f} kB " + " / ".join(str(mobile[c]) for c in CATEGORIES)
        row += f" {mobile['performance'] - yard['performance']:+d}"
        assert row in text, f"the benchmarks page does not show {row!r}"
    if report["build"] is not None:
        assert f"cold {report['build']['cold_s']:.1f} s, warm {report['build']['warm_s']:.1f} s" in text
