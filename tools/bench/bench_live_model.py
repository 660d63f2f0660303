"""Benchmark report for "Run the model yourself": how fast the induction model runs in the browser.

A report, not a test (`make bench` and `make bench-live-model` run it). The built site/ is served locally
under its GitHub Pages sub-path (as the browser tests serve it) and opened in Debian's Chromium with
Playwright; inside the page, round-robin (one of each in turn, repeated), it times with performance.now():

* ``forward_64``: one forward pass of the model on 64 tokens (``window.liveModel.forward``: logits and every
  head's attention weights);
* ``toggle_update``: the widget's whole update after a reader switches a head off or on, on a 64-token
  sequence: the click's handler (forward pass, heatmaps, tokens, summary) and the layout that follows.

The goal for each is under 16 ms, one frame at 60 Hz. It writes docs/_data/bench/live_model.json (shown on
the Benchmarks page at the next build) and prints the medians.

    python tools/bench/bench_live_model.py            # needs a built site/ (make build)
    python tools/bench/bench_live_model.py --repeats 50
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import os
import platform
import sys
import threading
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "browser"))
from browser_support import BASE_PATH, CHROMIUM_ARGS, SITE, SiteHandler, chromium_path, open_context  # noqa: E402

OUT = ROOT / "docs" / "_data" / "bench" / "live_model.json"
PAGE = "practice/live-model/"
BUDGET_MS = 16.0

_MEASURE = """async ([repeats, warmup]) => {
  const cfg = await window.liveModel.ready;
  const T = cfg.max_len;
  const tokens = Array.from({length: T}, (_, i) => (i * 7 + 3) % cfg.vocab_size);
  const box = document.querySelector('.lm-heads input[data-head="L0H0"]');
  const input = document.querySelector('.lm-tokens-input');
  input.value = tokens.join(' ');
  input.dispatchEvent(new Event('input', {bubbles: true}));
  if (document.querySelectorAll('.lm-token').length !== T) throw new Error('the widget did not take 64 tokens');
  const times = {forward_64: [], toggle_update: []};
  for (let i = 0; i < warmup + repeats; i++) {
    let t0 = performance.now();
    window.liveModel.forward(tokens, []);
    const forward = performance.now() - t0;
    t0 = performance.now();
    box.click();
    void document.body.offsetHeight;  // include the layout the update causes
    const toggle = performance.now() - t0;
    if (i >= warmup) { times.forward_64.push(forward); times.toggle_update.push(toggle); }
  }
  return {times, T};
}"""


def median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def measure(repeats: int, warmup: int) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    if not (SITE / PAGE / "index.html").exists():
        raise SystemExit(f"{SITE / PAGE} is not built: run `make build` first")
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(SiteHandler, directory=str(SITE)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{httpd.server_address[1]}{BASE_PATH}"
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
            context, watch = open_context(browser, base, viewport={"width": 1280, "height": 800})
            page = context.new_page()
            page.goto(base + PAGE, wait_until="networkidle")
            result: dict[str, Any] = page.evaluate(_MEASURE, [repeats, warmup])
            version = browser.version
            browser.close()
            if watch.problems():
                raise SystemExit(f"the browser reported problems: {watch.problems()}")
    finally:
        httpd.shutdown()
    result["browser_version"] = version
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    raw = measure(args.repeats, args.warmup)
    medians = {k: round(median(v), 3) for k, v in raw["times"].items()}
    report = {
        "machine": {
            "cpus": os.cpu_count(),
            "load_average_at_start": round(load_before, 2),
            "python": platform.python_version(),
            "chromium": raw["browser_version"],
        },
        "config": {"tokens": raw["T"], "repeats": args.repeats, "warmup": args.warmup},
        "budget_ms": BUDGET_MS,
        "median_ms": medians,
        "max_ms": {k: round(max(v), 3) for k, v in raw["times"].items()},
        "ratio_to_budget": {k: round(v / BUDGET_MS, 3) for k, v in medians.items()},
    }
    OUT.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    for name, ms in medians.items():
        verdict = "within" if ms < BUDGET_MS else "OVER"
        print(f"{name:14} median {ms:7.2f} ms  ({verdict} the {BUDGET_MS:.0f} ms budget)")
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
