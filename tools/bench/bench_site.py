"""Benchmark report for the site: build time, page weight, Lighthouse scores, and the module speed ratios.

A report, not a test (`make bench` runs it). It measures:

* the cold and warm time of the site build (the `make build` recipe: `mkdocs build --strict --clean`); cold
  is the first build after removing site/, the notebook cache and the repository's __pycache__ folders,
  warm is the same build again right after it;
* for every page of the sitemap, Lighthouse (the npm package pinned in package-lock.json, driving Debian's
  Chromium through CHROME_PATH) against the site served locally under its GitHub Pages sub-path, gzipped
  as GitHub Pages serves it: the four category scores with the mobile preset (Lighthouse's default:
  simulated slow 4G and a 4x slower CPU) and the desktop preset, and the bytes transferred to load the page;
* the speed ratios the other benchmarks wrote to docs/_data/bench/*.json.

It writes docs/_data/bench/site.json (shown on the Benchmarks page at the next build) and prints a table.

    python tools/bench/bench_site.py                   # everything
    python tools/bench/bench_site.py --no-build        # reuse site/ (no build timing)
    python tools/bench/bench_site.py --presets mobile  # one Lighthouse preset
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import os
import platform
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "browser"))
from browser_support import BASE_PATH, SITE, SiteHandler, chromium_path, site_pages  # noqa: E402

OUT = ROOT / "docs" / "_data" / "bench" / "site.json"
LIGHTHOUSE = ROOT / "node_modules" / ".bin" / "lighthouse"
CATEGORIES = ["performance", "accessibility", "best-practices", "seo"]
BUDGET_BYTES = 1_000_000  # no page heavier than 1 MB transferred
BUILD_BUDGET_S = 90.0  # cold build on CI's 2 cores


def build_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("SOURCE_DATE_EPOCH", "315532800")
    env.update(PYTHONHASHSEED="0", MPLBACKEND="Agg", NO_MKDOCS_2_WARNING="1")
    return env


def timed_build() -> float:
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--clean", "--site-dir", "site", "--quiet"],
        cwd=ROOT,
        env=build_env(),
        check=True,
    )
    return time.perf_counter() - start


def build_times() -> dict[str, float]:
    shutil.rmtree(ROOT / "site", ignore_errors=True)
    shutil.rmtree(ROOT / ".cache", ignore_errors=True)
    for cache in ROOT.rglob("__pycache__"):
        if ".venv" not in cache.parts and "node_modules" not in cache.parts:
            shutil.rmtree(cache, ignore_errors=True)
    cold = timed_build()
    warm = timed_build()
    return {"cold_s": round(cold, 2), "warm_s": round(warm, 2)}


def serve() -> tuple[http.server.ThreadingHTTPServer, str]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(SiteHandler, directory=str(SITE)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}{BASE_PATH}"


def lighthouse(url: str, preset: str) -> dict[str, Any]:
    args = [
        str(LIGHTHOUSE),
        url,
        "--quiet",
        "--output=json",
        "--output-path=stdout",
        f"--only-categories={','.join(CATEGORIES)}",
        "--chrome-flags=--headless=new --no-sandbox --disable-gpu --disable-dev-shm-usage "
        "--disable-background-networking --disable-component-update --no-first-run --disable-sync",
        "--disable-full-page-screenshot",
    ]
    if preset == "desktop":
        args.append("--preset=desktop")
    env = {**os.environ, "CHROME_PATH": chromium_path()}
    proc = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"lighthouse failed on {url} ({preset}): {proc.stderr[-2000:]}")
    report = json.loads(proc.stdout)
    if report.get("runtimeError"):
        raise RuntimeError(f"lighthouse could not load {url}: {report['runtimeError']}")
    scores = {c: round(100 * (report["categories"][c]["score"] or 0)) for c in CATEGORIES}
    failing = sorted(
        {
            ref["id"]
            for c in CATEGORIES
            for ref in report["categories"][c]["auditRefs"]
            if ref.get("weight", 0) > 0 and (report["audits"][ref["id"]].get("score") is not None)
            and report["audits"][ref["id"]]["score"] < 0.9
        }
    )
    metrics = {
        k: round(report["audits"][k]["numericValue"])
        for k in ("first-contentful-paint", "largest-contentful-paint", "total-blocking-time")
    }
    metrics["cumulative-layout-shift"] = round(report["audits"]["cumulative-layout-shift"]["numericValue"], 3)
    return {
        "scores": scores,
        "metrics_ms": metrics,
        "below_0.9": failing,
        "bytes": int(report["audits"]["total-byte-weight"]["numericValue"]),
        "lighthouse": report["lighthouseVersion"],
    }


def module_ratios() -> dict[str, dict[str, float]]:
    """Every ratio table that the other benchmark reports hold (keys containing 'ratio')."""
    found: dict[str, dict[str, float]] = {}
    for path in sorted(OUT.parent.glob("*.json")):
        if path == OUT:
            continue
        report = json.loads(path.read_text(encoding="utf-8"))
        for key, value in report.items():
            if "ratio" in key and isinstance(value, dict):
                found[f"{path.stem}.{key}"] = {k: v for k, v in value.items() if isinstance(v, (int, float))}
    return found


def chromium_version() -> str:
    proc = subprocess.run([chromium_path(), "--version"], capture_output=True, text=True, check=False)
    return proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-build", action="store_true", help="reuse site/; do not time the build")
    parser.add_argument("--presets", nargs="+", default=["mobile", "desktop"], choices=["mobile", "desktop"])
    args = parser.parse_args()

    load_before = os.getloadavg()[0]
    build = None if args.no_build else build_times()
    httpd, base = serve()
    pages: list[dict[str, Any]] = []
    try:
        for path in site_pages():
            entry: dict[str, Any] = {"page": path or "/", "lighthouse": {}}
            for preset in args.presets:
                result = lighthouse(base + path, preset)
                entry["bytes"] = max(entry.get("bytes", 0), result.pop("bytes"))
                entry["lighthouse"][preset] = result
            pages.append(entry)
            print(f"measured {entry['page']}", file=sys.stderr)
    finally:
        httpd.shutdown()
    versions = {p["lighthouse"][k].pop("lighthouse") for p in pages for k in p["lighthouse"]}
    report = {
        "machine": {
            "cpus": os.cpu_count(),
            "load_average_at_start": round(load_before, 2),
            "python": platform.python_version(),
            "chromium": chromium_version(),
            "lighthouse": sorted(versions)[0] if versions else None,
        },
        "build": build,
        "budgets": {"page_bytes": BUDGET_BYTES, "cold_build_s": BUILD_BUDGET_S, "lighthouse": 100},
        "pages": pages,
        "module_ratios": module_ratios(),
    }
    OUT.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")

    if build:
        flag = "within" if build["cold_s"] < BUILD_BUDGET_S else "OVER"
        cold, warm = build["cold_s"], build["warm_s"]
        print(f"build: cold {cold:.1f} s ({flag} the {BUILD_BUDGET_S:.0f} s budget), warm {warm:.1f} s")
    header = f"{'page':32} {'KB':>6}" + "".join(f" {p + ' P/A/BP/SEO':>22}" for p in args.presets)
    print(header)
    for p in pages:
        cols = "".join(
            " {:>22}".format("/".join(str(p["lighthouse"][k]["scores"][c]) for c in CATEGORIES)) for k in args.presets
        )
        print(f"{p['page']:32} {p['bytes'] / 1000:6.0f}{cols}")
    for name, ratios in report["module_ratios"].items():
        print(f"{name}: " + ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items()))
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
