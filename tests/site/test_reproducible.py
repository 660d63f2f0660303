"""Reproducible: building again with the same SOURCE_DATE_EPOCH gives byte-identical pages.

The site in site/ (built by `make build`) is compared file by file with a second build into a temporary
directory, with the same environment (SOURCE_DATE_EPOCH, PYTHONHASHSEED, MPLBACKEND as the Makefile
exports them). Anything that varies between runs (a timestamp, a random SVG id, set ordering in the search
index, the gzip header of sitemap.xml.gz) shows up as a differing file.
"""

from __future__ import annotations

import filecmp
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "site"
if not (SITE / "index.html").exists():
    pytest.fail("site/ is not built: run `make build` first (make test does)", pytrace=False)


def source_date_epoch() -> str:
    """The Makefile's value: the environment's, else the last commit's date."""
    if "SOURCE_DATE_EPOCH" in os.environ:
        return os.environ["SOURCE_DATE_EPOCH"]
    proc = subprocess.run(["git", "log", "-1", "--format=%ct"], cwd=ROOT, capture_output=True, text=True, check=False)
    return proc.stdout.strip() or "315532800"


def differing_files(a: Path, b: Path) -> list[str]:
    files_a = {p.relative_to(a) for p in a.rglob("*") if p.is_file()}
    files_b = {p.relative_to(b) for p in b.rglob("*") if p.is_file()}
    diffs = [f"only in one build: {p}" for p in sorted(files_a ^ files_b)]
    diffs += [str(p) for p in sorted(files_a & files_b) if not filecmp.cmp(a / p, b / p, shallow=False)]
    return diffs


def test_second_build_is_byte_identical(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "SOURCE_DATE_EPOCH": source_date_epoch(),
        "PYTHONHASHSEED": "0",
        "MPLBACKEND": "Agg",
        "NO_MKDOCS_2_WARNING": "1",
        "PYTHONPATH": str(ROOT),
    }
    again = tmp_path / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(again)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    diffs = differing_files(SITE, again)
    assert diffs == [], "the two builds differ (run `diff -r site <second build>`):\n" + "\n".join(diffs[:50])


def test_comparison_sees_a_changed_byte(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "x.html").write_bytes(b"<p>1</p>")
    (tmp_path / "b" / "x.html").write_bytes(b"<p>2</p>")
    (tmp_path / "b" / "y.html").write_bytes(b"")
    assert differing_files(tmp_path / "a", tmp_path / "b") == ["only in one build: y.html", "x.html"]
