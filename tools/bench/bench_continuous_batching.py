"""Benchmark: the course's text model serving 16 requests one at a time, in a padded static batch, and by continuous
batching over a shared page pool.

The mix (:data:`PROMPTS`, :data:`OUTPUTS`): 16 requests, prompts of 8 to 96 bytes cut from the course's corpus at
fixed places, outputs of 8 to 64 bytes, each request within the model's 128-byte context; all arrive at once, and
each is decoded greedily. Three ways, on one thread, timed in turn round after round (``rounds.py``):

* ``one_at_a_time``: each request alone with its own KV cache (``batching.generate_batch`` of one prompt);
* ``padded_static``: all 16 in one left-padded batch, one ``KVCache`` per layer of ``T + N - 1`` slots (the longest
  prompt and the most tokens any request writes), decoded until the request with the most tokens is done; a row
  whose request is done keeps computing (its tokens are thrown away, its position held at the context's last);
* ``continuous``: :func:`lessons_src.lab.continuous_batching.serve`, pages of 16 positions, 64 tokens per step.

Every way's tokens are checked against the first's. Reported: tokens written per second (the requests' own tokens,
not the thrown-away ones) and each way's ratio to one at a time (the median over rounds of the baseline's CPU time
over the way's in the same round); the tokens each way put through the model and the fraction that were useful (a
prompt's or a fed-back token, not padding or a done row's); the peak bytes of the caches (every layer): the padded
batch's slots, the pool's pages in use. Goals (the issue's): continuous at least 3x one at a time; more useful
tokens and fewer peak bytes than the padded batch.

    python tools/bench/bench_continuous_batching.py          # writes docs/_data/bench/continuous_batching.json
    python tools/bench/bench_continuous_batching.py --quick  # one round: check the script (writes nothing)
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import rounds
import torch
from rounds import Runs, round_robin

from lessons_src.kv_cache import KVCache, kv_bytes_per_token
from lessons_src.lab.batching import generate_batch, left_pad, padded_positions
from lessons_src.lab.continuous_batching import Request, Served, serve
from lessons_src.lab.text_model import TextGPT, corpus_bytes, load_text_model
from lessons_src.masks import key_mask

OUT = Path(__file__).resolve().parents[2] / "docs" / "_data" / "bench" / "continuous_batching.json"
PROMPTS = (8, 96, 24, 64, 16, 80, 40, 56, 12, 88, 32, 72, 20, 48, 28, 60)  # bytes of each request's prompt
OUTPUTS = (64, 8, 56, 16, 48, 24, 64, 32, 40, 8, 64, 16, 56, 40, 32, 24)  # bytes each request writes
STRIDE = 1000  # request i's prompt starts at byte STRIDE * i of the corpus
BLOCK_SIZE, NUM_BLOCKS, MAX_BATCH_TOKENS = 16, 128, 64
WAYS = ("one_at_a_time", "padded_static", "continuous")
REPEATS = 5
GOAL_OVER_ONE = 3.0  # the goal: continuous batching at least 3x the one-at-a-time rate


def mix() -> list[torch.Tensor]:
    """The 16 prompts, cut from the corpus."""
    data = corpus_bytes()
    return [data[STRIDE * i : STRIDE * i + n] for i, n in enumerate(PROMPTS)]


def one_at_a_time(model: TextGPT, prompts: list[torch.Tensor]) -> list[torch.Tensor]:
    return [generate_batch(model, [p], n).tokens[0] for p, n in zip(prompts, OUTPUTS, strict=True)]


@torch.no_grad()
def padded_static(model: TextGPT, prompts: list[torch.Tensor]) -> tuple[list[torch.Tensor], int]:
    """One left-padded batch decoded until the longest output is written; each row's own tokens, and the caches'
    bytes at the end (their peak)."""
    tokens, keep = left_pad(prompts)
    (B, T), N, cfg = tokens.shape, max(OUTPUTS), model.cfg
    caches = [KVCache(B, cfg.num_heads, cfg.d_model // cfg.num_heads, T + N - 1) for _ in range(cfg.num_layers)]
    pos = padded_positions(keep)  # (B, T)
    logits, _ = model(tokens, caches=caches, positions=pos, attn_mask=key_mask(keep))
    out = []
    for step in range(N):
        out.append(logits[:, -1].argmax(-1))  # (B,)
        if step == N - 1:
            break
        keep = torch.cat([keep, keep.new_ones(B, 1)], dim=1)
        pos = (pos[:, -1:] + 1).clamp(max=cfg.max_len - 1)  # a done row's position held: its tokens are waste
        logits, _ = model(out[-1][:, None], caches=caches, positions=pos, attn_mask=key_mask(keep))
    rows = torch.stack(out, dim=1)  # (B, N)
    return [rows[b, :n] for b, n in enumerate(OUTPUTS)], sum(c.nbytes for c in caches)


def continuous(model: TextGPT, prompts: list[torch.Tensor]) -> Served:
    return serve(model, [Request(p, n) for p, n in zip(prompts, OUTPUTS, strict=True)], num_blocks=NUM_BLOCKS,
                 block_size=BLOCK_SIZE, max_batch_tokens=MAX_BATCH_TOKENS)


def counts(model: TextGPT, served: Served) -> dict[str, dict[str, float]]:
    """Tokens each way puts through the model, the useful fraction, and the caches' peak bytes (every layer)."""
    cfg = model.cfg
    per_token = kv_bytes_per_token(cfg.num_heads, cfg.d_model // cfg.num_heads, torch.float32) * cfg.num_layers
    useful = sum(PROMPTS) + sum(OUTPUTS) - len(OUTPUTS)  # each prompt token, each token fed back
    slots = max(PROMPTS) + max(OUTPUTS) - 1
    computed = {"one_at_a_time": useful, "padded_static": len(PROMPTS) * slots, "continuous": served.computed}
    peak = {"one_at_a_time": max(p + n - 1 for p, n in zip(PROMPTS, OUTPUTS, strict=True)) * per_token,
            "padded_static": len(PROMPTS) * slots * per_token, "continuous": served.peak_bytes}
    return {"computed_tokens": computed, "useful_fraction": {w: useful / c for w, c in computed.items()},
            "peak_cache_bytes": peak}


def ratios(runs: Runs) -> dict[str, float]:
    """One at a time's CPU time over each other way's in the same round, the median over rounds."""
    return rounds.ratios(runs, "one_at_a_time", key="cpu_seconds")


def goals(over_one: dict[str, float], c: dict[str, dict[str, float]]) -> dict[str, bool]:
    useful, peak = c["useful_fraction"], c["peak_cache_bytes"]
    return {"continuous_over_one_at_a_time": over_one["continuous"] >= GOAL_OVER_ONE,
            "more_useful_than_padded": useful["continuous"] > useful["padded_static"],
            "fewer_peak_bytes_than_padded": peak["continuous"] < peak["padded_static"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="one round: check the script")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    torch.set_num_threads(1)
    model, prompts = load_text_model(), mix()
    want = one_at_a_time(model, prompts)
    padded, served = padded_static(model, prompts)[0], continuous(model, prompts)
    for way, got in (("padded_static", padded), ("continuous", served.tokens)):
        assert all(torch.equal(a, b) for a, b in zip(want, got, strict=True)), f"{way} wrote other tokens"
    load_before = os.getloadavg()
    started = time.perf_counter()
    repeats = 1 if args.quick else REPEATS
    runs = round_robin({"one_at_a_time": lambda: one_at_a_time(model, prompts),
                        "padded_static": lambda: padded_static(model, prompts),
                        "continuous": lambda: continuous(model, prompts)}, repeats)
    over_one, c = ratios(runs), counts(model, served)
    written = sum(OUTPUTS)
    tokens_per_second = {w: written / min(x["cpu_seconds"] for x in r) for w, r in runs.items()}
    report = {
        "config": {"prompts": list(PROMPTS), "outputs": list(OUTPUTS), "stride": STRIDE, "block_size": BLOCK_SIZE,
                   "num_blocks": NUM_BLOCKS, "max_batch_tokens": MAX_BATCH_TOKENS, "repeats": repeats,
                   "threads": 1, "model": "the course's text model (lessons_src/lab/artifacts)", "dtype": "float32",
                   "goal_continuous_over_one_at_a_time": GOAL_OVER_ONE},
        "full_run": not args.quick,
        "machine": rounds.machine(1, os.cpu_count(), load_before),
        "method": "the ways in turn (round-robin) after a warm-up call each, one thread; ratio: the median over rounds "
                  "of one at a time's CPU time over the way's in the same round; tokens per second: the requests' "
                  "own tokens over the way's fastest round",
        "steps": len(served.steps),
        "runs": runs,
        "tokens_per_second": tokens_per_second,
        "over_one_at_a_time": over_one,
        **c,
        "goals_met": goals(over_one, c),
        "total_seconds": time.perf_counter() - started,
    }
    if not args.quick:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"16 requests, {written} tokens written, one thread, load {load_before[0]:.1f}")
    print(f"  {'way':14s} {'tokens/s':>9s} {'x one':>6s} {'useful':>7s} {'peak KiB':>9s}")
    for w in WAYS:
        print(f"  {w:14s} {tokens_per_second[w]:9.0f} {over_one.get(w, 1.0):6.2f} {c['useful_fraction'][w]:7.2f} "
              f"{c['peak_cache_bytes'][w] / 1024:9.0f}")
    print(f"goals met: {report['goals_met']}; {report['total_seconds']:.0f} s"
          + (f"; wrote {args.out}" if not args.quick else ""))


if __name__ == "__main__":
    main()
