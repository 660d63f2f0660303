"""Benchmark report for the site: build time, page weight, Lighthouse scores, and the module speed ratios.

A report, not a test (`make bench` runs it). It measures:

* the cold and warm time of the site build (the `make build` recipe: `mkdocs build --strict --clean`); cold
  is the first build after removing site/, the notebook cache and the repository's __pycache__ folders,
  warm is the same build again right after it;
* for every page of the sitemap (or those named with --pages), Lighthouse (the npm package pinned in
  package-lock.json, driving Debian's Chromium through CHROME_PATH) against the site served locally under
  its GitHub Pages sub-path, gzipped as GitHub Pages serves it, with the mobile preset (Lighthouse's
  default: simulated slow 4G and a 4x slower CPU): the four category scores, each the median of --repeats
  runs, Lighthouse's benchmarkIndex (how fast this machine was during each run), and the bytes transferred;
* in the same run, round-robin with the pages, the yardstick: a stock one-paragraph page of the same theme
  (a tiny MkDocs project with this site's theme settings and nothing else), served the same way. A busy
  machine lowers every score; the distance of a page from the yardstick is what to read.
* the speed ratios the other benchmarks wrote to docs/_data/bench/*.json.

It writes docs/_data/bench/site.json (shown at the next build on the page The site, measured,
docs/reference/site-measured.md) and prints a table.

    python tools/bench/bench_site.py                                 # everything (make bench-site)
    python tools/bench/bench_site.py --no-build                      # reuse site/ (no build timing)
    python tools/bench/bench_site.py --pages "" lessons/pitfalls/ --repeats 1   # a quick look
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "helpers"))
from site_goals import misses  # noqa: E402

OUT = ROOT / "docs" / "_data" / "bench" / "site.json"
LIGHTHOUSE = ROOT / "node_modules" / ".bin" / "lighthouse"
CATEGORIES = ["performance", "accessibility", "best-practices", "seo"]
BUDGET_BYTES = 1_000_000  # no page heavier than 1 MB transferred
GOAL_SCORE = 95  # mobile performance, every page
GOAL_BELOW_YARDSTICK = 3  # on a busy machine: no page more than 3 points below the stock page
BUILD_BUDGET_S = 90.0  # cold build on CI's 2 cores
LOAD_SAMPLE_S = 15.0  # how often the load average is sampled while Lighthouse runs


def processes() -> dict[int, tuple[str, int, float]]:
    """Every live process: ``pid -> (name, parent pid, its own CPU seconds so far)`` (Linux /proc)."""
    table = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        fields = stat.rsplit(")", 1)[1].split()
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        table[int(entry.name)] = (name, int(fields[1]), (int(fields[11]) + int(fields[12])) / tick)  # utime, stime
    return table


def is_bench_process(pid: int, table: dict[int, tuple[str, int, float]], root: int) -> bool:
    """Whether ``pid`` is this bench's work: ``root`` or a descendant of it, or a Chromium process.

    Chromium's zygote leaves its parent, so its renderers and GPU process are children of init, not of the
    Lighthouse run that started them: they are recognised by name. Only processes' own time is counted
    (a process's reaped children's time would count Chromium's renderers again under init).
    """
    while pid > 1 and pid in table:
        name, parent, _ = table[pid]
        if pid == root or "chrom" in name:
            return True
        pid = parent
    return False


class OtherCpu:
    """Samples every process's own CPU time and splits what was used since the last sample: the bench's, others'."""

    def __init__(self, root: int) -> None:
        self.root, self.seen = root, {pid: cpu for pid, (_, _, cpu) in processes().items()}

    def sample(self) -> float:
        """CPU seconds used by processes that are not the bench's since the last sample (a process that started
        and ended between two samples is missed: sample often)."""
        table, other = processes(), 0.0
        for pid, (_, _, cpu) in table.items():
            if not is_bench_process(pid, table, self.root):
                other += max(0.0, cpu - self.seen.get(pid, 0.0))
        self.seen = {pid: cpu for pid, (_, _, cpu) in table.items()}
        return other


def build_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("SOURCE_DATE_EPOCH", "315532800")
    env.update(PYTHONHASHSEED="0", MPLBACKEND="Agg", NO_MKDOCS_2_WARNING="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
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


@functools.cache
def support() -> Any:
    """tests/helpers/browser_support, imported only once site/ is built: it reads the built sitemap on import."""
    import browser_support

    return browser_support


def serve(directory: Path | None = None) -> tuple[http.server.ThreadingHTTPServer, str]:
    handler = functools.partial(support().SiteHandler, directory=str(directory or support().SITE))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}{support().BASE_PATH}"


def build_yardstick(dest: Path) -> Path:
    """A stock page of the same theme: this site's theme settings, one paragraph, nothing else."""
    import yaml

    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8").split("\nhooks:")[0])
    docs = dest / "docs"
    docs.mkdir(parents=True)
    (docs / "index.md").write_text(
        "# A stock page\n\nOne paragraph of text on a page of the stock theme, with nothing added to it: the "
        "yardstick against which the site's pages are measured in the same run.\n",
        encoding="utf-8",
    )
    # mkdocs.yml names no site_url (site_links.py resolves it at build): the built site's own address, same sub-path
    url = config.get("site_url") or support().site_url()
    stock = {"site_name": "Yardstick", "site_url": url, "theme": config["theme"], "plugins": ["search"]}
    (dest / "mkdocs.yml").write_text(json.dumps(stock), encoding="utf-8")
    subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--quiet", "--site-dir", str(dest / "site")],
        cwd=dest,
        env=build_env(),
        check=True,
    )
    return dest / "site"


def lighthouse(url: str, preset: str = "mobile") -> dict[str, Any]:
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
    env = {**os.environ, "CHROME_PATH": support().chromium_path()}
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
        "benchmark_index": round(report["environment"]["benchmarkIndex"]),
    }


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median scores and metrics of several Lighthouse runs of one page, with every run's performance kept."""
    return {
        "scores": {c: round(statistics.median(r["scores"][c] for r in runs)) for c in CATEGORIES},
        "metrics_ms": {k: statistics.median(r["metrics_ms"][k] for r in runs) for k in runs[0]["metrics_ms"]},
        "below_0.9": sorted(set().union(*(r["below_0.9"] for r in runs))),
        "performance_runs": [r["scores"]["performance"] for r in runs],
        "benchmark_index": [r["benchmark_index"] for r in runs],
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
    proc = subprocess.run([support().chromium_path(), "--version"], capture_output=True, text=True, check=False)
    return proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-build", action="store_true", help="reuse site/; do not time the build")
    parser.add_argument("--pages", nargs="*", default=None, help="pages to measure, as sitemap paths ('' = home)")
    parser.add_argument("--repeats", type=int, default=3, help="Lighthouse runs per page (the median is reported)")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"--repeats={args.repeats}: need at least 1")

    load_before = os.getloadavg()[0]
    build = None if args.no_build else build_times()
    paths = support().site_pages()
    if args.pages:
        unknown = sorted(set(args.pages) - set(paths))
        if unknown:
            parser.error(f"--pages {unknown} are not in the sitemap; pages are: {paths}")
        paths = [p for p in paths if p in args.pages]
    runs: dict[str, list[dict[str, Any]]] = {p: [] for p in paths}
    yard_runs: list[dict[str, Any]] = []
    loads: list[float] = []  # the load average through the Lighthouse runs: other work lowers every score
    others: list[float] = []  # cores used by processes outside this bench, per interval
    stop = threading.Event()

    def sample_load() -> None:
        other, at, used = OtherCpu(os.getpid()), time.monotonic(), 0.0
        while not stop.wait(1.0):  # every second, so that short-lived processes are seen
            used += other.sample()
            if time.monotonic() - at >= LOAD_SAMPLE_S:
                loads.append(os.getloadavg()[0])
                others.append(used / (time.monotonic() - at))
                at, used = time.monotonic(), 0.0

    with tempfile.TemporaryDirectory() as tmp:
        yard_site = build_yardstick(Path(tmp) / "yardstick")
        threading.Thread(target=sample_load, daemon=True).start()
        httpd, base = serve()
        yard_httpd, yard_base = serve(yard_site)
        try:
            for repeat in range(args.repeats):
                yard_runs.append(lighthouse(yard_base))
                for path in paths:
                    runs[path].append(lighthouse(base + path))
                    print(f"run {repeat + 1}/{args.repeats}: {path or '/'}", file=sys.stderr)
        finally:
            stop.set()
            httpd.shutdown()
            yard_httpd.shutdown()
    pages = [
        {
            "page": path or "/",
            "bytes": max(r.pop("bytes") for r in runs[path]),
            "lighthouse": {"mobile": median_of(runs[path])},
        }
        for path in paths
    ]
    for r in yard_runs:
        r.pop("bytes")
    yardstick = median_of(yard_runs)
    versions = {r["lighthouse"] for rs in [*runs.values(), yard_runs] for r in rs}
    report = {
        "machine": {
            "cpus": os.cpu_count(),
            "load_average_at_start": round(load_before, 2),
            "load_average_max": round(max(loads, default=load_before), 2),  # sampled every LOAD_SAMPLE_S
            # cores used by every process that is not this bench's (its build, servers, Lighthouse and Chromium)
            "other_cpu_max": round(max(others, default=0.0), 2),
            "other_cpu_mean": round(sum(others) / len(others), 2) if others else 0.0,
            "load_sample_s": LOAD_SAMPLE_S,
            "python": platform.python_version(),
            "chromium": chromium_version(),
            "lighthouse": sorted(versions)[0] if versions else None,
        },
        "repeats": args.repeats,
        "build": build,
        "budgets": {
            "page_bytes": BUDGET_BYTES,
            "cold_build_s": BUILD_BUDGET_S,
            "performance": GOAL_SCORE,
            "below_yardstick": GOAL_BELOW_YARDSTICK,
        },
        "yardstick": yardstick,
        "site_pages": len(support().site_pages()),  # pages in the sitemap: the report covers every page or says not
        "pages": pages,
        "module_ratios": module_ratios(),
    }
    OUT.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")

    if build:
        flag = "within" if build["cold_s"] < BUILD_BUDGET_S else "OVER"
        cold, warm = build["cold_s"], build["warm_s"]
        print(f"build: cold {cold:.1f} s ({flag} the {BUILD_BUDGET_S:.0f} s budget), warm {warm:.1f} s")
    yard = yardstick["scores"]["performance"]
    print(f"yardstick (stock page): performance {yard} (runs {yardstick['performance_runs']}, "
          f"benchmarkIndex {yardstick['benchmark_index']})")
    print(f"{'page':34} {'KB':>6} {'P/A/BP/SEO':>16} {'vs yardstick':>12}  runs")
    for p in pages:
        m = p["lighthouse"]["mobile"]
        perf = m["scores"]["performance"]
        missed = misses(p, report)
        verdict = f"  MISSES: {'; '.join(missed)}" if missed else ""
        scores = "/".join(str(m["scores"][c]) for c in CATEGORIES)
        row = f"{p['page']:34} {p['bytes'] / 1000:6.0f} {scores:>16} {perf - yard:+12d}"
        print(f"{row}  {m['performance_runs']}{verdict}")
    for name, ratios in report["module_ratios"].items():
        print(f"{name}: " + ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items()))
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
