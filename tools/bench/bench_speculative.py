"""Benchmark: the text model's greedy decoding with its KV caches, with and without prompt-lookup speculation.

The committed text model (``lessons_src/lab/artifacts/text_model.safetensors``), float32, one thread, on the CPU.
Three ways to write the same greedy tokens, each timed over every prompt of a set:

* ``greedy``: :func:`lessons_src.lab.speculation.greedy_cached`, one token per forward pass with the KV caches
  (not the window-recomputing ``TextGPT.generate``);
* ``chain``: :func:`~lessons_src.lab.speculation.speculative_greedy` with one prompt-lookup chain per pass;
* ``tree``: the same with up to ``TREE_DRAFTS`` chains from distinct matches, merged into a tree checked in one pass.

Two sets of ``PROMPTS`` prompts, each continued by ``NEW_TOKENS`` bytes:

* ``held_out``: evenly spaced windows of ``PROMPT`` bytes of the validation split (the corpus's last 10%);
* ``repeats``: validation text of ``HALF`` bytes written twice, as the model's training wrote its repeats
  (:func:`lessons_src.lab.text_model.probe_texts`), the prompt the first copy and the first ``LEAD`` bytes of the
  second: the rest of the second copy is what a model that copies would write.

Every row's tokens are compared with ``greedy``'s (the report keeps whether all were identical), and the tokens
each verification pass wrote are counted per prompt. The rows are timed round-robin after a warm-up call of each
(``tools/bench/rounds.py``); a speed-up is the median over rounds of ``greedy``'s CPU seconds over the row's in the
same round (one thread: CPU time is the work done, steadier than wall time on a shared machine).

    python tools/bench/bench_speculative.py            # writes docs/_data/bench/speculative.json, prints a table
    python tools/bench/bench_speculative.py --quick    # two prompts, two rounds: check the script (writes nothing)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import rounds
import torch
from rounds import round_robin

from lessons_src.lab.speculation import greedy_cached, speculative_greedy
from lessons_src.lab.text_model import corpus_bytes, load_text_model, probe_texts, spaced_windows, split_corpus

PROMPTS = 6  # prompts per set
PROMPT = 64  # bytes of a held-out prompt
HALF, LEAD = 64, 8  # a repeat: HALF bytes twice (the training's max_len / 2); the prompt ends LEAD bytes into copy 2
NEW_TOKENS = 56  # bytes written after each prompt (72 + 56 = 128, the model's context)
NGRAM, DRAFT_LEN, TREE_DRAFTS = 3, 8, 3  # prompt lookup: longest n-gram, tokens per chain, chains in a tree
ROWS = ("greedy", "chain", "tree")
REPEATS = 7
GOAL_REPEATS = 1.5  # the goal: the tree or the chain at least 1.5x greedy on the repeats set
OUT = Path(__file__).resolve().parents[2] / "docs" / "_data" / "bench" / "speculative.json"


def prompt_sets(count: int = PROMPTS) -> dict[str, list[torch.Tensor]]:
    """The two sets of prompts, from the validation split."""
    _, val = split_corpus(corpus_bytes(), 0.1)
    return {"held_out": list(spaced_windows(val, count, PROMPT)),
            "repeats": [row[: HALF + LEAD] for row in probe_texts(val, count, HALF)]}


def decoders(model: Any) -> dict[str, Any]:
    """Each row as ``prompt -> (tokens, stats or None)``."""
    return {"greedy": lambda p: (greedy_cached(model, p, NEW_TOKENS), None),
            "chain": lambda p: speculative_greedy(model, p, NEW_TOKENS, ngram=NGRAM, draft_len=DRAFT_LEN),
            "tree": lambda p: speculative_greedy(model, p, NEW_TOKENS, ngram=NGRAM, draft_len=DRAFT_LEN,
                                                 max_drafts=TREE_DRAFTS)}


def counts(model: Any, prompt: torch.Tensor) -> dict[str, Any]:
    """What a prompt's decodes do, timing nothing: identical to greedy, passes, tokens written per pass."""
    rows = {name: fn(prompt) for name, fn in decoders(model).items()}
    greedy = rows["greedy"][0]
    out: dict[str, Any] = {"identical": all(torch.equal(t, greedy) for t, _ in rows.values())}
    for name in ("chain", "tree"):
        stats = rows[name][1]
        out[name] = {"passes": stats.passes, "tokens_per_pass": round(stats.tokens_per_pass, 4),
                     "largest_tree": max(stats.nodes) + 1}
    return out


def speedups(runs: rounds.Runs) -> dict[str, float]:
    """``greedy``'s CPU seconds over each other row's, median over rounds."""
    return rounds.ratios(runs, "greedy", key="cpu_seconds")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="two prompts, two rounds: check the script")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    torch.set_num_threads(1)
    start, load_before = time.perf_counter(), os.getloadavg()
    model = load_text_model()
    repeats = 2 if args.quick else REPEATS
    report: dict[str, Any] = {
        "config": {"prompts": PROMPTS, "prompt": PROMPT, "half": HALF, "lead": LEAD, "new_tokens": NEW_TOKENS,
                   "ngram": NGRAM, "draft_len": DRAFT_LEN, "tree_drafts": TREE_DRAFTS, "repeats": REPEATS,
                   "rows": list(ROWS), "goal_repeats": GOAL_REPEATS},
        "full_run": not args.quick, "sets": {},
    }
    for name, prompts in prompt_sets(2 if args.quick else PROMPTS).items():
        per_prompt = [counts(model, p) for p in prompts]
        calls = {row: (lambda fn=fn, ps=prompts: [fn(p) for p in ps]) for row, fn in decoders(model).items()}
        with torch.no_grad():
            runs = round_robin(calls, repeats)
        tokens = len(prompts) * NEW_TOKENS
        report["sets"][name] = {
            "identical": all(c["identical"] for c in per_prompt),
            "per_prompt": per_prompt,
            "tokens_per_pass": {row: round(statistics.mean(c[row]["tokens_per_pass"] for c in per_prompt), 4)
                                for row in ("chain", "tree")},
            "runs": runs,
            "speedup": speedups(runs),
            "tokens_per_cpu_second": {row: tokens / statistics.median(r["cpu_seconds"] for r in runs[row])
                                      for row in ROWS},
        }
    best = max(report["sets"]["repeats"]["speedup"].values())
    report["goal_met"] = best >= GOAL_REPEATS
    report["machine"] = rounds.machine(1, os.cpu_count(), load_before)
    report["total_seconds"] = round(time.perf_counter() - start, 1)
    if not args.quick:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"text model, greedy with KV caches, {NEW_TOKENS} bytes per prompt, one thread, load {load_before[0]:.1f}")
    print(f"{'set':10} {'row':6} {'tokens/pass':>11} {'tokens/CPU-s':>12} {'speed-up':>8}")
    for name, s in report["sets"].items():
        for row in ROWS:
            tpp = s["tokens_per_pass"].get(row, 1.0)
            up = s["speedup"].get(row, 1.0)
            print(f"{name:10} {row:6} {tpp:11.2f} {s['tokens_per_cpu_second'][row]:12.0f} {up:8.2f}")
        print(f"{name:10} identical to greedy: {s['identical']}")
    print(f"goal (>= {GOAL_REPEATS}x on repeats) met: {report['goal_met']}; {report['total_seconds']:.0f} s"
          + (f"; wrote {args.out}" if not args.quick else ""))


if __name__ == "__main__":
    main()
