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

Then it opens "The text model, live" (practice/live-text-model/) and times, each repeat in turn:

* ``per_token_64``: writing 64 bytes greedily after a short prompt (``window.liveTextModel.bench``: one
  position of the byte-level GPT per byte, its KV cache kept), the time per byte, timed inside the Web Worker
  that runs the model; the goal is 16 ms;
* ``text_update``: the widget's whole update after the reader types, from the input event until the page has
  drawn the worker's answer (the typed text run, 64 bytes written, the answer passed back, bars and maps
  drawn, and the layout that follows). The page's thread is busy only for the drawing; the forward passes
  run in the worker. Its goal is 100 ms, RAIL's limit for a response to input that feels immediate
  (https://web.dev/articles/rail): 64 bytes of writing are not one frame's work.

It writes docs/_data/bench/live_text_model.json.

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
sys.path.insert(0, str(ROOT / "tests" / "helpers"))
from browser_support import BASE_PATH, CHROMIUM_ARGS, SITE, SiteHandler, chromium_path, open_context  # noqa: E402

OUT = ROOT / "docs" / "_data" / "bench" / "live_model.json"
PAGE = "practice/live-model/"
TEXT_OUT = ROOT / "docs" / "_data" / "bench" / "live_text_model.json"
TEXT_PAGE = "practice/live-text-model/"
TEXT_TOKENS = 64
FRAME_MS = 16.0  # one frame at 60 Hz
RESPONSE_MS = 100.0  # RAIL's goal for a response to input (web.dev/articles/rail): under it, it feels immediate
# The goal of each timing: what runs in one frame, and the typed text's whole round trip through the worker.
BUDGETS_MS = {"forward_64": FRAME_MS, "toggle_update": FRAME_MS, "per_token_64": FRAME_MS, "text_update": RESPONSE_MS}

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


_MEASURE_TEXT = """async ([repeats, warmup, n]) => {
  await window.liveTextModel.ready;
  const input = document.querySelector('.ltm-text');
  const prompts = ['Multi-head attention', 'The query looks at every key.'];
  const times = {per_token_64: [], text_update: []};
  for (let i = 0; i < warmup + repeats; i++) {
    const perToken = await window.liveTextModel.bench(prompts[0], n);
    input.value = prompts[i % 2];
    const t0 = performance.now();
    input.dispatchEvent(new Event('input', {bubbles: true}));
    await window.liveTextModel.idle;  // the worker's answer drawn
    void document.body.offsetHeight;  // include the layout the update causes
    const update = performance.now() - t0;
    if (i >= warmup) { times.per_token_64.push(perToken); times.text_update.push(update); }
  }
  if (document.querySelector('.ltm-generated').textContent === '') throw new Error('the widget wrote nothing');
  return {times, T: n};
}"""


def median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def measure(repeats: int, warmup: int, page_path: str = PAGE, script: str = _MEASURE) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    if not (SITE / page_path / "index.html").exists():
        raise SystemExit(f"{SITE / page_path} is not built: run `make build` first")
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(SiteHandler, directory=str(SITE)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{httpd.server_address[1]}{BASE_PATH}"
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
            context, watch = open_context(browser, base, real_search=True, viewport={"width": 1280, "height": 800})
            page = context.new_page()
            page.goto(base + page_path, wait_until="networkidle")
            args = [repeats, warmup] if script is _MEASURE else [repeats, warmup, TEXT_TOKENS]
            result: dict[str, Any] = page.evaluate(script, args)
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
    for out, page_path, script in ((OUT, PAGE, _MEASURE), (TEXT_OUT, TEXT_PAGE, _MEASURE_TEXT)):
        load_before = os.getloadavg()[0]
        raw = measure(args.repeats, args.warmup, page_path, script)
        medians = {k: round(median(v), 3) for k, v in raw["times"].items()}
        report = {
            "machine": {
                "cpus": os.cpu_count(),
                "load_average_at_start": round(load_before, 2),
                "python": platform.python_version(),
                "chromium": raw["browser_version"],
            },
            "page": page_path,
            "config": {"tokens": raw["T"], "repeats": args.repeats, "warmup": args.warmup},
            "budget_ms": {k: BUDGETS_MS[k] for k in medians},
            "median_ms": medians,
            "max_ms": {k: round(max(v), 3) for k, v in raw["times"].items()},
            "ratio_to_budget": {k: round(v / BUDGETS_MS[k], 3) for k, v in medians.items()},
        }
        out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
        for name, ms in medians.items():
            verdict = "within" if ms < BUDGETS_MS[name] else "OVER"
            print(f"{name:14} median {ms:7.2f} ms  ({verdict} the {BUDGETS_MS[name]:.0f} ms budget)")
        print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
