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
    for page in report["pages"]:
        assert page["bytes"] > 0
        for preset in page["lighthouse"].values():
            assert list(preset["scores"]) == CATEGORIES
            assert all(0 <= s <= 100 for s in preset["scores"].values())
    if report["build"] is not None:
        assert report["build"]["warm_s"] > 0 and report["build"]["cold_s"] > 0


def test_benchmarks_page_shows_the_report(report: dict[str, Any]) -> None:
    text = re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", PAGE.read_text(encoding="utf-8"))))
    for page in report["pages"]:
        row = f"{page['page']} {page['bytes'] / 1000:.0f} kB"
        assert row in text, f"the benchmarks page does not show {row!r}"
        for preset in page["lighthouse"].values():
            assert " / ".join(str(preset["scores"][c]) for c in CATEGORIES) in text
    if report["build"] is not None:
        assert f"cold {report['build']['cold_s']:.1f} s, warm {report['build']['warm_s']:.1f} s" in text
