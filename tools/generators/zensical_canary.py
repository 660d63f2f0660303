"""The Zensical canary: build the site with the pinned Zensical, then count what survives in its HTML.

    make canary-zensical      # after make build: site/ is the reference

Zensical reads mkdocs.yml and supports markdown-exec, but runs no ``hooks:`` and no mkdocs-jupyter, and skips
what it does not support without failing. So the verdict is read from the HTML it writes, against the site
MkDocs built (site/), never from its exit status. For each page in mkdocs.yml's nav:

* present: Zensical wrote the page;
* results: the printed results of executed blocks (each ``text`` block MkDocs' page shows) found in the page;
* figures: lesson figures in the page (``<figure class="lesson-figure">``);
* formulas: formulas in the page (arithmatex elements, as Zensical leaves them; MkDocs' site typesets them);
* widgets: the practice widgets' markup (flashcards, quiz, head explorer, live models) and, for the live
  models, the weights file the page points at;
* failed blocks: blocks whose code raised (markdown-exec shows the traceback in the page; the build goes on).

Then the post-build step (tools/site_build/postbuild.py) runs over a copy of Zensical's site, and the formulas it
typeset and figures it moved to files are counted: the part of the build that needs no generator. The report is
JSON (docs/_data/generators/zensical.json); a summary is printed.

The verdict (:func:`verdict`, the exit status) is the counts': every page in the nav but those Zensical cannot
render (:data:`KNOWN_MISSING`), every executed block ran but those that read what MkDocs' hooks set up
(:data:`KNOWN_FAILING`), and every printed result MkDocs' pages show is in Zensical's (numbers masked).
"""

from __future__ import annotations

import argparse
import html
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / ".zensical-canary.yml"  # Zensical wants the site and docs folders inside the config's folder
SITE = ".cache/site-zensical"
WIDGETS = {
    "flashcards": 'class="flashcard"',
    "quiz": 'class="quiz-question"',
    "head explorer": 'class="hx-data"',
    "live model": "data-live-model",
    "live text model": 'class="ltm-data"',
}
# What Zensical cannot do, each with its reason; anything more fails the canary.
KNOWN_MISSING = {"practice/lab.ipynb": "mkdocs-jupyter is not supported"}
KNOWN_FAILING = {  # page -> blocks that raise: they read the site's addresses and the built wheel (MkDocs hooks)
    "index.md": 1, "get-the-code.md": 4, "practice/exercises.md": 1,
}
_MODEL_REF = re.compile(r'(?:\.\./)*assets/models/[\w.-]+\.json')
_MODEL_PLACEHOLDER = re.compile(r"@live-(?:text-)?model-json@")  # the live pages' hooks put the address there
_TRACEBACK = re.compile(r"Traceback \(most recent call last\):.*?^(\w+(?:Error|Exception)\b[^\n]*)", re.S | re.M)
_EXEC = re.compile(r'^\s*(?:```|~~~)\w+\b[^\n]*\bexec="(?:on|1|true)"', re.M)
_DIGITS = re.compile(r"\d+(?:\.\d+)?")
_RESULT = re.compile(r'<div class="language-text highlight result">.*?<code>(.*?)</code>', re.S)
_PRE = re.compile(r"<pre\b.*?</pre>", re.S)
_TAG = re.compile(r"<[^>]+>")


class _TolerantLoader(yaml.SafeLoader):
    """mkdocs.yml's plain values; tags MkDocs resolves itself (!ENV, !!python/name:...) become None."""


_TolerantLoader.add_multi_constructor("", lambda loader, suffix, node: None)


def nav_pages(nav: Any) -> list[str]:
    """The source files the nav lists, in reading order."""
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [p for item in nav for p in nav_pages(item)]
    if isinstance(nav, dict):
        return [p for value in nav.values() for p in nav_pages(value)]
    return []


def built_path(src: str) -> str:
    stem = src.rsplit(".", 1)[0]
    if stem == "index":
        return "index.html"
    return (stem[: -len("/index")] if stem.endswith("/index") else stem) + "/index.html"


def _text(fragment: str) -> str:
    return " ".join(html.unescape(_TAG.sub("", fragment)).split())


def page_counts(page: str, reference: str, site: Path, page_path: str) -> dict[str, Any]:
    results = [r for r in (_text(m) for m in _RESULT.findall(reference)) if r]
    shown = " ".join(_text(m) for m in _PRE.findall(page))
    shown_digitless = _DIGITS.sub("#", shown)
    models = _MODEL_REF.findall(page)
    text = html.unescape(_TAG.sub("", page))
    return {
        "results": [sum(1 for r in results if r in shown), len(results)],
        # timings are measured anew by every build: a result found once its numbers are masked was printed too
        "results_numbers_masked": [sum(1 for r in results if _DIGITS.sub("#", r) in shown_digitless), len(results)],
        "figures": [page.count('<figure class="lesson-figure">'), reference.count('<figure class="lesson-figure">')],
        "formulas": [page.count('class="arithmatex"'), len(re.findall(r'<(?:span|div) class="math"', reference))],
        "widgets": {
            name: [marker in page, marker in reference] for name, marker in WIDGETS.items()
            if marker in reference or marker in page
        },
        "model_files": [(site / Path(page_path).parent / m).resolve().is_file() for m in models] if models else None,
        "model_address_unresolved": bool(_MODEL_PLACEHOLDER.search(page)),
        "failed_blocks": [" ".join(m.group(1).split())[:160] for m in _TRACEBACK.finditer(text)],
    }


def build(zensical: str, log_path: Path) -> dict[str, Any]:
    CONFIG.write_text(yaml.safe_dump({"INHERIT": "mkdocs.yml", "site_dir": SITE}), encoding="utf-8")
    shutil.rmtree(ROOT / SITE, ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
    start = time.monotonic()
    try:
        proc = subprocess.run([zensical, "build", "--clean", "-f", str(CONFIG)], cwd=ROOT, env=env,
                              capture_output=True, text=True, check=False, timeout=3600)
    finally:
        CONFIG.unlink(missing_ok=True)
    log_path.write_text(proc.stdout + proc.stderr, encoding="utf-8")
    log = (proc.stdout + proc.stderr).splitlines()
    return {"exit_code": proc.returncode, "seconds": round(time.monotonic() - start, 1), "log_lines": len(log),
            "log_warnings": sum(1 for line in log if "warning" in line.lower()),
            "log_tail": [line.replace(str(ROOT), ".")[:200] for line in log[-5:]]}


def postbuild_counts(site: Path, python: str) -> dict[str, Any]:
    copy = site.with_name(site.name + "-postbuild")
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(site, copy)
    proc = subprocess.run([python, str(ROOT / "tools" / "site_build" / "postbuild.py"), str(copy)],
                          capture_output=True, text=True, check=False)
    pages = [p.read_text(encoding="utf-8") for p in copy.rglob("*.html")]
    return {
        "exit_code": proc.returncode,
        "message": (proc.stdout + proc.stderr).strip().replace(str(ROOT), ".")[-500:],
        "formulas_typeset": sum(len(re.findall(r'<(?:span|div) class="math"', p)) for p in pages),
        "formulas_left": sum(p.count('class="arithmatex"') for p in pages),
        "figures_moved_to_files": sum(p.count("<picture>") for p in pages),
        "figure_files": len(list((copy / "assets" / "figures").glob("*.svg"))),
        "katex_css_inlined_pages": sum(1 for p in pages if "<style>" in p and ".katex" in p),
    }


def verdict(summary: dict[str, Any]) -> list[str]:
    """What the canary's counts say went wrong beyond what is known ([]: the canary passes)."""
    problems = [f"{src}: not written" for src in summary["pages_missing"] if src not in KNOWN_MISSING]
    for src, failed in summary["failed_blocks"].items():
        if len(failed) > KNOWN_FAILING.get(src, 0):
            problems.append(f"{src}: {len(failed)} executed blocks raised, {KNOWN_FAILING.get(src, 0)} expected")
    found, shown = summary["results_found_numbers_masked"]
    if found < shown:
        problems.append(f"{shown - found} of the {shown} printed results MkDocs shows are missing")
    return problems


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--zensical", required=True, help="the zensical command of its own environment")
    parser.add_argument("--reference", type=Path, default=ROOT / "site", help="the site MkDocs built")
    parser.add_argument("--out", type=Path, required=True, help="where to write the JSON report")
    parser.add_argument("--reuse-build", action="store_true",
                        help=f"count again in the {SITE} of the last run (its build entry kept from --out)")
    args = parser.parse_args(argv)
    if not (args.reference / "index.html").is_file():
        parser.error(f"{args.reference} holds no built site: run make build first")
    version = subprocess.run([args.zensical, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    log_path = ROOT / ".cache" / "zensical-build.log"
    if args.reuse_build:
        run = json.loads(args.out.read_text(encoding="utf-8").replace(str(ROOT), "."))["build"]
    else:
        run = build(args.zensical, log_path)
    site = ROOT / SITE
    config = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=_TolerantLoader)
    pages: dict[str, Any] = {}
    for src in nav_pages(config["nav"]):
        path = built_path(src)
        reference = (args.reference / path).read_text(encoding="utf-8")
        built = site / path
        source = (ROOT / "docs" / src).read_text(encoding="utf-8") if src.endswith(".md") else ""
        entry: dict[str, Any] = {"present": built.is_file(), "exec_blocks": len(_EXEC.findall(source))}
        if built.is_file():
            entry.update(page_counts(built.read_text(encoding="utf-8"), reference, site, path))
        pages[src] = entry
    present = [p for p in pages.values() if p["present"]]

    def total(key: str) -> list[int]:
        return [sum(p[key][0] for p in present), sum(p[key][1] for p in present)]

    widgets = {name: [any(p.get("widgets", {}).get(name, [False])[0] for p in present),
                      any(p.get("widgets", {}).get(name, [False, False])[1] for p in present)] for name in WIDGETS}
    summary = {
        "generator_tag": sorted(set(re.findall(r'<meta name="generator" content="([^"]*)">',
                                               (site / "index.html").read_text(encoding="utf-8")))),
        "pages_present": [len(present), len(pages)],
        "pages_missing": [src for src, p in pages.items() if not p["present"]],
        "exec_blocks_in_sources": sum(p["exec_blocks"] for p in pages.values()),
        "exec_blocks_failed": sum(len(p.get("failed_blocks", [])) for p in pages.values()),
        "results_found": total("results"),
        "results_found_numbers_masked": total("results_numbers_masked"),
        "figures_found": total("figures"),
        "formulas_found": total("formulas"),
        "formulas_typeset": sum(len(re.findall(r'<(?:span|div) class="math"', p.read_text(encoding="utf-8")))
                                for p in site.rglob("*.html")),
        "widgets_found": widgets,
        "live_model_address_unresolved": [src for src, p in pages.items() if p.get("model_address_unresolved")],
        "model_files_in_site": sorted(p.name for p in (site / "assets" / "models").glob("*"))
        if (site / "assets" / "models").exists() else [],
        "failed_blocks": {src: p["failed_blocks"] for src, p in pages.items() if p.get("failed_blocks")},
        "wheel_published": bool(list((site / "downloads").glob("*.whl"))) if (site / "downloads").exists() else False,
        "search_index": (site / "search.json").is_file() or (site / "search" / "search_index.json").is_file(),
    }
    report = {"zensical": version, "build": run, "summary": summary,
              "postbuild_step_on_zensical_output": postbuild_counts(site, sys.executable), "pages": pages}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"Zensical {version}: build exit {run['exit_code']} in {run['seconds']} s; " + json.dumps(summary, indent=1))
    print("post-build step on its output:", json.dumps(report["postbuild_step_on_zensical_output"]))
    problems = verdict(summary)
    for problem in problems:
        print(f"canary: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
