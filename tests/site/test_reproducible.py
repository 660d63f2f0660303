"""Reproducible: building again with the same SOURCE_DATE_EPOCH gives byte-identical pages.

The site in site/ (built by `make build`) is compared file by file with a second build (`make test-reproducible`,
which CI runs after `make test`, makes it beside the first, in .cache/site-again, and names it in $SITE_AGAIN;
alone, the test builds it into a temporary directory), with the same environment (SOURCE_DATE_EPOCH,
PYTHONHASHSEED, MPLBACKEND as the Makefile exports them). Anything that varies between runs (a timestamp, a random
SVG id, set ordering in the search index, the gzip header of sitemap.xml.gz) shows up as a differing file.

One kind of output cannot repeat: a lesson block that times code on the build machine (its shown source
calls a clock: `time.perf_counter`, `timeit`, `median_times`, ...) prints different microseconds on every
run. On pages with such a block, the numbers inside code/output blocks (<pre>) and in the page's search
index entries are masked before comparing; everything else on those pages, and every other page, must be
byte-identical.
"""

from __future__ import annotations

import filecmp
import json
import os
import re
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


_CLOCK = re.compile(r"\b(time\.perf_counter|time\.time|time\.monotonic|timeit|median_times|benchmark\.Timer)\b")
_PRE = re.compile(r"<pre\b.*?</pre>", re.S)
_NUMBER = re.compile(r"[ \t]*\d[\d.,]*")  # a number and the padding that aligns it


def timing_pages(site: Path) -> set[Path]:
    """Pages (relative to site/) where a shown code block reads a clock."""
    pages = set()
    for page in site.rglob("*.html"):
        code = " ".join(_PRE.findall(page.read_text(encoding="utf-8")))
        if _CLOCK.search(re.sub(r"<[^>]+>", "", code)):
            pages.add(page.relative_to(site))
    return pages


def masked(path: Path, rel: Path, timed: set[Path]) -> bytes:
    """The file's bytes, with the digits of timing output masked where the rule above allows it."""
    data = path.read_bytes()
    if rel in timed:
        text = _PRE.sub(lambda m: _NUMBER.sub("#", m.group(0)), data.decode("utf-8"))
        return text.encode("utf-8")
    if rel == Path("search/search_index.json") and timed:
        index = json.loads(data)
        locations = {"" if p.parent == Path(".") else p.parent.as_posix() + "/" for p in timed}
        for doc in index["docs"]:
            if doc["location"].split("#")[0] in locations:
                doc["text"] = _NUMBER.sub("#", doc["text"])
        return json.dumps(index, sort_keys=True).encode("utf-8")
    return data


def differing_files(a: Path, b: Path) -> list[str]:
    files_a = {p.relative_to(a) for p in a.rglob("*") if p.is_file()}
    files_b = {p.relative_to(b) for p in b.rglob("*") if p.is_file()}
    diffs = [f"only in one build: {p}" for p in sorted(files_a ^ files_b)]
    timed = timing_pages(a) & timing_pages(b)
    for p in sorted(files_a & files_b):
        if not filecmp.cmp(a / p, b / p, shallow=False) and masked(a / p, p, timed) != masked(b / p, p, timed):
            diffs.append(str(p))
    return diffs


def second_build(tmp_path: Path) -> Path:
    """A second build of the same source: `make test-reproducible` builds it beside site/ (its path in
    $SITE_AGAIN); run alone, this test builds it itself, with the environment the Makefile exports."""
    if ready := os.environ.get("SITE_AGAIN"):
        again = Path(ready)
        assert (again / "sitemap.xml").is_file(), f"SITE_AGAIN={ready} is not a finished build"
        return again
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
    return again


def test_second_build_is_byte_identical(tmp_path: Path) -> None:
    again = second_build(tmp_path)
    assert again.resolve() != SITE.resolve()
    diffs = differing_files(SITE, again)
    assert diffs == [], "the two builds differ:\n" + "\n".join(diffs[:50]) + first_difference(SITE, again, diffs)


def first_difference(a: Path, b: Path, diffs: list[str]) -> str:
    """The first differing lines of the first differing HTML page, so a flaky page can be diagnosed."""
    import difflib

    for rel in diffs:
        if rel.endswith(".html") and (a / rel).is_file() and (b / rel).is_file():
            split = [(x / rel).read_text(encoding="utf-8").replace("><", ">\n<").splitlines() for x in (a, b)]
            lines = list(difflib.unified_diff(*split, "first build", "second build", n=1, lineterm=""))
            return f"\n\n{rel}:\n" + "\n".join(line[:300] for line in lines[:40])
    return ""


def test_timing_output_is_masked_only_on_timing_pages(tmp_path: Path) -> None:
    timed_src = '<pre><code>t0 = time.perf_counter()</code></pre><pre><code>fused 61 µs</code></pre><p>h=12</p>'
    for build, (us, h) in {"a": ("61", "12"), "b": ("75", "12"), "c": ("61", "16")}.items():
        (tmp_path / build / "lesson").mkdir(parents=True)
        (tmp_path / build / "lesson" / "index.html").write_text(timed_src.replace("61", us).replace("12", h))
        (tmp_path / build / "plain.html").write_text(f"<pre>fused {us} µs</pre>")
    assert differing_files(tmp_path / "a", tmp_path / "b") == ["plain.html"]  # a timing page may differ in <pre>
    assert differing_files(tmp_path / "a", tmp_path / "c") == ["lesson/index.html"]  # ... but nowhere else


def test_comparison_sees_a_changed_byte(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "x.html").write_bytes(b"<p>1</p>")
    (tmp_path / "b" / "x.html").write_bytes(b"<p>2</p>")
    (tmp_path / "b" / "y.html").write_bytes(b"")
    assert differing_files(tmp_path / "a", tmp_path / "b") == ["only in one build: y.html", "x.html"]
