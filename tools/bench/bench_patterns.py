"""Benchmark: decoding memory and step time of mixed-pattern decoders against an all-global one, in one run.

Four ``PatternGPT`` decoders of 12 layers (d_model=512, 8 query heads, 2 KV heads, float32, CPU) that differ only
in their layer pattern: all global; gpt-oss's (a 128-token window on every other layer); Gemma 3's (five
1,024-token windows per global layer); Llama 4's (three 8,192-token chunks per NoPE global layer); and Gemma 3's
with Gemma 4's sharing (the last four layers reuse earlier layers' keys and values). At each cached length
(1K to 32K tokens) every layer's cache is filled as decoding would leave it, then one token is decoded.

Memory: the bytes each pattern's caches hold, computed from the layer types (``expected_bytes``) and measured
from the tensors (``nbytes``); the two must agree. Time: one decoding step, the decoders timed in one process
on one thread, round-robin, after a warm-up step each; each ratio is the median over the rounds of a
pattern's CPU time over the all-global decoder's in the same round.

    python tools/bench/bench_patterns.py              # writes docs/_data/bench/patterns.json, prints a table
    python tools/bench/bench_patterns.py --repeats 2 --lengths 1024 4096 --out /tmp/p.json   # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch

from lessons_src.kv_cache import ChunkedKVCache, KVCache, RollingKVCache, kv_bytes_per_token
from lessons_src.lab.pattern_model import (
    LayerType,
    PatternConfig,
    PatternGPT,
    gemma3_pattern,
    gpt_oss_pattern,
    llama4_pattern,
    share_kv,
)

OUT = Path(__file__).resolve().parents[2] / "docs" / "_data" / "bench" / "patterns.json"
LAYERS, D, H, K, D_FF = 12, 512, 8, 2, 1024
E = D // H
LENGTHS = (1024, 2048, 4096, 8192, 16384, 32768)
PATTERNS: dict[str, tuple[LayerType, ...]] = {
    "all_global": tuple(LayerType() for _ in range(LAYERS)),
    "gpt_oss": gpt_oss_pattern(LAYERS, window=128),
    "gemma3": gemma3_pattern(LAYERS, window=1024),
    "llama4": llama4_pattern(LAYERS, chunk=8192),
    "gemma3_shared_kv": share_kv(gemma3_pattern(LAYERS, window=1024), 4),
}
BASELINE = "all_global"


def expected_bytes(pattern: tuple[LayerType, ...], cached: int, dtype: torch.dtype = torch.float32) -> int:
    """What the caches of ``pattern`` hold after ``cached`` tokens, from the layer types alone."""
    per_token = kv_bytes_per_token(K, E, dtype)
    held = 0
    for t in pattern:
        if t.shares is not None:
            continue  # a sharing layer caches nothing
        if t.kind == "global":
            held += cached
        elif t.kind == "window":
            assert t.size is not None
            held += min(cached, t.size)
        else:
            assert t.size is not None
            held += cached - t.size * ((cached - 1) // t.size)  # the current chunk
    return held * per_token


def filled_caches(model: PatternGPT, cached: int, g: torch.Generator) -> list:
    """Each layer's cache as ``cached`` tokens of decoding leave it (random keys and values, right positions)."""
    caches = model.make_caches(batch_size=1, max_len=cached + 1)
    for cache in caches:
        if cache is None:
            continue
        if isinstance(cache, KVCache):
            n = cached
            cache.length = 0
        elif isinstance(cache, RollingKVCache):
            n = min(cached, cache.window)
            cache.length = cached - n
        else:
            assert isinstance(cache, ChunkedKVCache)
            cache.length = cache.chunk * ((cached - 1) // cache.chunk)
            n = cached - cache.length
        with torch.no_grad():
            cache.update(torch.randn(1, K, n, E, generator=g), torch.randn(1, K, n, E, generator=g))
    return caches


def step(model: PatternGPT, caches: list, token: torch.Tensor) -> dict[str, float]:
    """Wall and CPU seconds of one decoding step; the caches are rolled back after it."""
    saved = [(c.length, None if not isinstance(c, RollingKVCache) else c.positions.clone()) for c in caches
             if c is not None]
    wall, cpu = time.perf_counter(), time.process_time()
    with torch.no_grad():
        model(token, caches=caches)
    out = {"seconds": time.perf_counter() - wall, "cpu_seconds": time.process_time() - cpu}
    for c, (length, positions) in zip([c for c in caches if c is not None], saved, strict=True):
        c.length = length
        if positions is not None:
            c.positions.copy_(positions)  # the rolled-over slot is refilled by the next step, same position
    return out


def ratios(runs: dict[str, dict[str, list[dict[str, float]]]]) -> dict[str, dict[str, float]]:
    """Each pattern's step CPU time over the all-global decoder's in the same round, median over rounds, per length."""
    return {
        name: {
            n: statistics.median(a["cpu_seconds"] / b["cpu_seconds"]
                                 for a, b in zip(runs[name][n], runs[BASELINE][n], strict=True))
            for n in runs[name]
        }
        for name in PATTERNS if name != BASELINE
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS))
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    models = {name: PatternGPT(PatternConfig(p, d_model=D, num_heads=H, num_kv_heads=K, d_ff=D_FF)).eval()
              for name, p in PATTERNS.items()}
    g = torch.Generator().manual_seed(0)
    token = torch.tensor([[7]])
    load_before = os.getloadavg()
    started = time.perf_counter()
    runs: dict[str, dict[str, list[dict[str, float]]]] = {name: {} for name in PATTERNS}
    measured: dict[str, dict[str, int]] = {name: {} for name in PATTERNS}
    computed: dict[str, dict[str, int]] = {name: {} for name in PATTERNS}
    for n in args.lengths:
        caches = {name: filled_caches(m, n, g) for name, m in models.items()}
        for name in PATTERNS:
            measured[name][str(n)] = sum(c.nbytes for c in caches[name] if c is not None)
            computed[name][str(n)] = expected_bytes(PATTERNS[name], n)
            step(models[name], caches[name], token)  # warm-up
            runs[name][str(n)] = []
        for _ in range(args.repeats):
            for name, model in models.items():  # round-robin: one step of each in turn
                runs[name][str(n)].append(step(model, caches[name], token))
        del caches
        print(f"{n} cached tokens done", flush=True)
    r = ratios(runs)
    medians = {name: {n: statistics.median(x["cpu_seconds"] for x in v) for n, v in runs[name].items()}
               for name in PATTERNS}
    report = {
        "config": {"layers": LAYERS, "d_model": D, "num_heads": H, "num_kv_heads": K, "head_dim": E, "d_ff": D_FF,
                   "dtype": "float32", "device": "cpu", "batch_size": 1, "lengths": args.lengths},
        "patterns": {name: [t.name + ("" if t.shares is None else f">{t.shares}") for t in p]
                     for name, p in PATTERNS.items()},
        "machine": {"torch": torch.__version__, "threads": torch.get_num_threads(), "cpus": os.cpu_count(),
                    "processor": platform.processor() or platform.machine(),
                    "load_average_before": [round(v, 2) for v in load_before],
                    "load_average_after": [round(v, 2) for v in os.getloadavg()]},
        "repeats": args.repeats,
        "method": "caches filled as decoding leaves them; one decoding step per pattern in turn (round-robin), "
                  "after a warm-up step; ratios: the median over rounds of CPU time over the all-global "
                  "decoder's in the same round; bytes measured from the caches' tensors and computed from the "
                  "layer types",
        "baseline": BASELINE,
        "bytes_measured": measured,
        "bytes_computed": computed,
        "memory_ratio_to_baseline": {name: {n: measured[name][n] / measured[BASELINE][n] for n in measured[name]}
                                     for name in PATTERNS if name != BASELINE},
        "runs": runs,
        "median_cpu_seconds": medians,
        "step_ratio_to_baseline": r,
        "total_seconds": time.perf_counter() - started,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\n{LAYERS} layers, d_model={D}, H={H}, K={K}; {torch.get_num_threads()} thread(s); "
          f"{args.repeats} rounds; load {load_before[0]:.1f}")
    print(f"  {'pattern':18s} " + " ".join(f"{n:>14d}" for n in args.lengths))
    for name in PATTERNS:
        cells = []
        for n in map(str, args.lengths):
            mem = measured[name][n] / 2**20
            rat = "" if name == BASELINE else f" {r[name][n]:.2f}x"
            cells.append(f"{mem:7.1f}MiB{rat:>6s}")
        print(f"  {name:18s} " + " ".join(f"{c:>14s}" for c in cells))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
