"""Benchmark: what each of today's mechanisms costs, against plain multi-head attention, in one run.

B=8, T=512, d_model=512, 8 heads, causal self-attention, float32 on CPU: ``MultiHeadAttention`` with one
mechanism at a time (QK-norm of each kind, each output gate, learned sinks through each implementation, the
soft-cap through ``"eager"`` and ``"tiled"``), forward (under ``no_grad``) and forward+backward. The layers
are timed in one process on one thread, round-robin (one call of each in turn, repeated, after a warm-up call
of each), so a busy machine slows all of them alike. Each call's wall time and the process's CPU time are
recorded; the ratios use the CPU time, which another process on a shared machine inflates less than the
wall time (the report keeps every run of both, and the load average before and after). Each ratio is the
median over the rounds of a layer's time over its baseline's in the same round, the baseline being the
plain layer with the same implementation: plain ``"sdpa"`` for QK-norm, the
gates and the sinks through SDPA; plain ``"eager"`` and ``"tiled"`` for the cap and the sinks there (SDPA
cannot cap).

Beside the times, each layer's matmul FLOPs, counted by ``torch.utils.flop_counter.FlopCounterMode`` on the
meta device (nothing runs): the arithmetic a mechanism adds. Only matmuls count (not the norms, caps or
sigmoids), and the whole ``T x S`` score matrix does, though a causal kernel skips about half of it. It is not a
bound on the time ratio (a large projection runs at a better rate than the attention kernel), but it says what
to expect: the elementwise gate's ``D x D`` projection adds ``2/(8 + 4T/D)`` to the plain layer's forward,
1.17x here, more than its 1.15x goal.

    python tools/bench/bench_mechanisms.py              # writes docs/_data/bench/mechanisms.json, prints a table
    python tools/bench/bench_mechanisms.py --repeats 2 --out /tmp/m.json   # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch.utils.flop_counter import FlopCounterMode

from lessons_src.layer import MultiHeadAttention
from lessons_src.mechanisms import ElementwiseGate, HeadwiseGate, PerHeadRMSNorm, ProjectionRMSNorm, WeightlessRMSNorm

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

OUT = Path(__file__).resolve().parents[2] / "docs" / "_data" / "bench" / "mechanisms.json"
B, T, D, H = 8, 512, 512, 8
E = D // H
MODES = ("forward", "forward_backward")
CAP = 50.0  # Gemma 2's

# name: (baseline, how to build the layer); the baseline is the plain layer with the same implementation
VARIANTS: dict[str, tuple[str | None, Callable[[], MultiHeadAttention]]] = {
    "plain_sdpa": (None, lambda: MultiHeadAttention(D, H)),
    "plain_eager": (None, lambda: MultiHeadAttention(D, H, implementation="eager")),
    "plain_tiled": (None, lambda: MultiHeadAttention(D, H, implementation="tiled")),
    "qk_norm_per_head": ("plain_sdpa", lambda: MultiHeadAttention(D, H, qk_norm=PerHeadRMSNorm(E))),
    "qk_norm_projection": ("plain_sdpa", lambda: MultiHeadAttention(D, H, qk_norm=ProjectionRMSNorm(H, H, E))),
    "qk_norm_weightless": ("plain_sdpa", lambda: MultiHeadAttention(D, H, qk_norm=WeightlessRMSNorm())),
    "gate_headwise": ("plain_sdpa", lambda: MultiHeadAttention(D, H, gate=HeadwiseGate(D, H))),
    "gate_elementwise": ("plain_sdpa", lambda: MultiHeadAttention(D, H, gate=ElementwiseGate(D, H, E))),
    "sinks_sdpa": ("plain_sdpa", lambda: MultiHeadAttention(D, H, sinks=True)),
    "sinks_eager": ("plain_eager", lambda: MultiHeadAttention(D, H, sinks=True, implementation="eager")),
    "sinks_tiled": ("plain_tiled", lambda: MultiHeadAttention(D, H, sinks=True, implementation="tiled")),
    "cap_eager": ("plain_eager", lambda: MultiHeadAttention(D, H, softcap=CAP, implementation="eager")),
    "cap_tiled": ("plain_tiled", lambda: MultiHeadAttention(D, H, softcap=CAP, implementation="tiled")),
}
# the goals: mechanism / baseline, at most (the cap is reported, with no goal)
TARGETS = {name: 1.15 for name in ("qk_norm_per_head", "qk_norm_projection", "qk_norm_weightless",
                                   "gate_headwise", "gate_elementwise", "sinks_sdpa")}


def one_call(layer: MultiHeadAttention, x: torch.Tensor, mode: str) -> dict[str, float]:
    """Wall and CPU seconds for one forward (no_grad) or one forward + backward of ``layer`` on ``x``."""
    wall, cpu = time.perf_counter(), time.process_time()
    if mode == "forward":
        with torch.no_grad():
            layer(x, is_causal=True)
    else:
        layer(x, is_causal=True).sum().backward()
    return {"seconds": time.perf_counter() - wall, "cpu_seconds": time.process_time() - cpu}


def count_flops(names: Iterable[str] = VARIANTS) -> dict[str, dict[str, int]]:
    """Each layer's matmul FLOPs per mode (forward; forward + backward), counted on the meta device."""
    found: dict[str, dict[str, int]] = {}
    for name in names:
        layer, x = VARIANTS[name][1]().to("meta"), torch.empty(B, T, D, device="meta")
        counts = {}
        for mode in MODES:
            with FlopCounterMode(display=False) as counter:
                if mode == "forward":
                    with torch.no_grad():
                        layer(x, is_causal=True)
                else:
                    layer(x, is_causal=True).sum().backward()
            counts[mode] = counter.get_total_flops()
        found[name] = counts
    return found


def flop_ratios(flops: dict[str, dict[str, int]]) -> dict[str, dict[str, float]]:
    """Each mechanism's matmul FLOPs over its baseline's, per mode."""
    return {name: {m: flops[name][m] / flops[base][m] for m in MODES}
            for name, (base, _) in VARIANTS.items() if base is not None}


def ratios(runs: dict[str, dict[str, list[dict[str, float]]]]) -> dict[str, dict[str, float]]:
    """Each mechanism's CPU time over its baseline's in the same round, the median over the rounds, per mode.

    A round measures every layer once, one after the other, so a ratio within a round compares two calls made
    moments apart: drifts in the machine's load cancel, as they do not between medians taken separately.
    """
    return {
        name: {
            m: statistics.median(
                a["cpu_seconds"] / b["cpu_seconds"] for a, b in zip(runs[name][m], runs[base][m], strict=True)
            )
            for m in MODES
        }
        for name, (base, _) in VARIANTS.items() if base is not None
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    layers = {name: build() for name, (_, build) in VARIANTS.items()}
    x = torch.randn(B, T, D)
    for layer in layers.values():  # warm-up: load kernels, size the allocator
        for mode in MODES:
            one_call(layer, x, mode)
    load_before = os.getloadavg()
    runs: dict[str, dict[str, list[dict[str, float]]]] = {name: {m: [] for m in MODES} for name in VARIANTS}
    started = time.perf_counter()
    for rep in range(args.repeats):
        for mode in MODES:
            for name, layer in layers.items():  # round-robin: one call of each in turn
                runs[name][mode].append(one_call(layer, x, mode))
        print(f"[{rep + 1}/{args.repeats}] done", flush=True)
    medians = {name: {m: statistics.median(x["cpu_seconds"] for x in runs[name][m]) for m in MODES}
               for name in VARIANTS}
    wall = {name: {m: statistics.median(x["seconds"] for x in runs[name][m]) for m in MODES} for name in VARIANTS}
    r = ratios(runs)
    flops = count_flops()
    report = {
        "config": {"B": B, "T": T, "d_model": D, "num_heads": H, "head_dim": E, "dtype": "float32", "causal": True,
                   "softcap": CAP, "device": "cpu"},
        "machine": {"torch": torch.__version__, "threads": torch.get_num_threads(), "cpus": os.cpu_count(),
                    "processor": platform.processor() or platform.machine(),
                    "load_average_before": [round(v, 2) for v in load_before],
                    "load_average_after": [round(v, 2) for v in os.getloadavg()]},
        "repeats": args.repeats,
        "method": "one process, round-robin over the layers, after one warm-up call of each; wall and CPU time "
                  "per call; ratios: the median over rounds of CPU time over the baseline's in the same round",
        "baselines": {name: base for name, (base, _) in VARIANTS.items() if base is not None},
        "runs": runs,
        "median_cpu_seconds": medians,
        "median_seconds": wall,
        "ratios_to_baseline": r,
        "targets_at_most": TARGETS,
        "met": {name: all(r[name][m] <= TARGETS[name] for m in MODES) for name in TARGETS},
        "flops": flops,
        "flop_ratios_to_baseline": flop_ratios(flops),
        "total_seconds": time.perf_counter() - started,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nB={B}, T={T}, d_model={D}, H={H}, causal; {torch.get_num_threads()} thread(s); median CPU time of "
          f"{args.repeats}; load {load_before[0]:.1f}")
    print(f"  {'layer':20s} {'forward':>10s} {'fwd+bwd':>10s}   ratio fwd  ratio f+b  baseline")
    for name in VARIANTS:
        base = VARIANTS[name][0]
        rat = "" if base is None else f"   {r[name]['forward']:8.3f}  {r[name]['forward_backward']:8.3f}  {base}"
        met = "met" if report["met"].get(name) else "MISSED"
        goal = "" if name not in TARGETS else f"  (goal <= {TARGETS[name]}: {met})"
        if base is not None:
            fl = report["flop_ratios_to_baseline"][name]
            goal += f"  FLOPs {fl['forward']:.3f} / {fl['forward_backward']:.3f}"
        print(f"  {name:20s} {medians[name]['forward'] * 1e3:8.1f} ms {medians[name]['forward_backward'] * 1e3:8.1f} ms"
              f"{rat}{goal}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
