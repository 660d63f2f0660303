"""Benchmark: tiled attention (lessons_src.flash, FlashAttention-2 in plain PyTorch) against eager and SDPA.

B=1, 12 heads, head size 64, causal, float32 on CPU, T=S=8192 by default (the eager path builds
12 x 8192 x 8192 scores: gigabytes, and each call takes tens of seconds). Every measurement is one call in
a fresh subprocess, which reports its wall time and the growth of its peak resident set size (VmHWM, Linux
only) during the call; the variants are run round-robin (one of each in turn, repeated), so a busy machine
slows all of them alike. The report keeps every run, so the spread is visible, and gives the ratios of the
medians: tiled / eager for forward time, forward peak memory and forward+backward time.

    python tools/bench/bench_flash.py                 # writes docs/_data/bench/flash.json, prints a table
    python tools/bench/bench_flash.py --t 2048 --repeats 1 --out /tmp/flash.json   # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

OUT = Path(__file__).resolve().parents[2] / "docs" / "_data" / "bench" / "flash.json"
B, H, E = 1, 12, 64
VARIANTS = ("eager", "tiled", "sdpa")
MODES = ("forward", "forward_backward")
TARGETS = {"forward_memory": 0.1, "forward_time": 1.5, "forward_backward_time": 2.0}  # tiled / eager, at most


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def child(variant: str, mode: str, t: int, block: int) -> None:
    """One call, in this fresh process: print its wall time and peak memory growth as JSON."""
    from lessons_src.flash import tiled_attention
    from lessons_src.functional import attention

    def run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if variant == "tiled":
            return tiled_attention(q, k, v, is_causal=True, block_q=block, block_k=block).output
        return attention(q, k, v, is_causal=True, implementation=variant).output

    grad = mode == "forward_backward"
    torch.manual_seed(0)
    small = [torch.randn(B, H, 2 * block, E, requires_grad=grad) for _ in range(3)]
    out = run(*small)  # load kernels, warm the allocator's code paths
    if grad:
        out.sum().backward()
    q, k, v = (torch.randn(B, H, t, E, requires_grad=grad) for _ in range(3))
    del out, small
    before = _status_kib("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    start = time.perf_counter()
    if grad:
        run(q, k, v).sum().backward()
    else:
        with torch.no_grad():
            run(q, k, v)
    seconds = time.perf_counter() - start
    peak = _status_kib("VmHWM")
    print(json.dumps({"seconds": seconds, "peak_bytes": (peak - before) * 1024}))


def measure(variant: str, mode: str, t: int, block: int, threads: int) -> dict[str, float]:
    # Large blocks go straight to mmap and back to the OS when freed, so resident memory tracks live tensors.
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    cmd = [sys.executable, __file__, "--child", variant, mode, "--t", str(t), "--block", str(block),
           "--threads", str(threads)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def analytic_bytes(t: int, block: int) -> dict[str, int]:
    """What each forward holds at its largest, from the shapes: eager's scores and weights; tiled's tile."""
    f = 4  # float32
    return {
        "eager_scores_and_weights": 2 * B * H * t * t * f,  # (B, H, T, S) scores, then the weights
        "tiled_per_tile": 2 * B * H * block * block * f,  # one tile of scores and its exponentials
        "output_and_lse": B * H * t * (E + 1) * f,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--t", type=int, default=8192)
    ap.add_argument("--block", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--threads", type=int, default=0, help="torch threads in each measurement (0: torch's default)")
    ap.add_argument("--child", nargs=2, metavar=("VARIANT", "MODE"))
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.child:
        child(args.child[0], args.child[1], args.t, args.block)
        return

    load_before = os.getloadavg()
    runs: dict[str, dict[str, list[dict[str, float]]]] = {v: {m: [] for m in MODES} for v in VARIANTS}
    started = time.perf_counter()
    for rep in range(args.repeats):
        for mode in MODES:
            for variant in VARIANTS:  # round-robin: one call of each in turn
                r = measure(variant, mode, args.t, args.block, args.threads)
                runs[variant][mode].append(r)
                print(f"[{rep + 1}/{args.repeats}] {variant:5s} {mode:16s} {r['seconds']:8.2f} s "
                      f"{r['peak_bytes'] / 2**30:7.3f} GiB", flush=True)

    def med(variant: str, mode: str, key: str) -> float:
        return statistics.median(x[key] for x in runs[variant][mode])

    ratios = {
        "forward_memory": med("tiled", "forward", "peak_bytes") / med("eager", "forward", "peak_bytes"),
        "forward_time": med("tiled", "forward", "seconds") / med("eager", "forward", "seconds"),
        "forward_backward_time": med("tiled", "forward_backward", "seconds")
        / med("eager", "forward_backward", "seconds"),
    }
    report = {
        "config": {"B": B, "num_heads": H, "head_dim": E, "T": args.t, "S": args.t, "dtype": "float32",
                   "causal": True, "block_q": args.block, "block_k": args.block, "device": "cpu"},
        "machine": {"torch": torch.__version__, "threads": torch.get_num_threads(), "cpus": os.cpu_count(),
                    "processor": platform.processor() or platform.machine(),
                    "load_average_before": [round(x, 2) for x in load_before],
                    "load_average_after": [round(x, 2) for x in os.getloadavg()]},
        "repeats": args.repeats,
        "method": "one call per fresh subprocess, round-robin; wall time and VmHWM growth during the call",
        "runs": runs,
        "median_seconds": {v: {m: med(v, m, "seconds") for m in MODES} for v in VARIANTS},
        "median_peak_bytes": {v: {m: med(v, m, "peak_bytes") for m in MODES} for v in VARIANTS},
        "ratios_tiled_to_eager": ratios,
        "targets_at_most": TARGETS,
        "met": {name: ratios[name] <= TARGETS[name] for name in TARGETS},
        "analytic_bytes": analytic_bytes(args.t, args.block),
        "total_seconds": time.perf_counter() - started,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nT={args.t}, blocks {args.block}, {args.repeats} runs each; median (min-max)")
    for v in VARIANTS:
        for m in MODES:
            s = [x["seconds"] for x in runs[v][m]]
            g = [x["peak_bytes"] / 2**30 for x in runs[v][m]]
            print(f"  {v:5s} {m:16s} {statistics.median(s):8.2f} s ({min(s):.2f}-{max(s):.2f})  "
                  f"{statistics.median(g):7.3f} GiB ({min(g):.3f}-{max(g):.3f})")
    for name, value in ratios.items():
        print(f"  tiled / eager {name:22s} {value:6.3f}  (target <= {TARGETS[name]}: "
              f"{'met' if value <= TARGETS[name] else 'MISSED'})")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
