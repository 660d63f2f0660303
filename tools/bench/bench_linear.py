"""Benchmark: one decoding step of a linear layer against a softmax-attention layer, as the context grows, in one run.

Qwen3-Next's two kinds of layer, at its published sizes (lessons_src.lab.configs): a full-attention layer (16 query
heads, 2 KV heads of 256) reads a KV cache of every earlier token, so its step grows with the context; a Gated
DeltaNet layer (32 value heads, a 128 x 128 state each) reads and writes a state of fixed size, so its step does
not. Only the token mixing is timed: the attention over the cache (``lessons_src.functional.attention``, SDPA) and
the delta rule's step (``lessons_src.delta_rule.delta_rule_recurrent`` on one token), no projections. float32, one
thread, batch 1; the two timed in one process, round-robin, after a warm-up step each; each ratio is the median over
the rounds of the attention step's CPU time over the linear step's in the same round. The bytes each holds are
measured from the tensors and checked against ModelConfig.layer_cache_numbers (the linear layer's recurrent state
only: the short convolution's few inputs are not part of this step).

    python tools/bench/bench_linear.py              # writes docs/_data/bench/linear.json, prints a table
    python tools/bench/bench_linear.py --repeats 2 --lengths 1024 4096 --out /tmp/l.json   # a quick look
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
import torch.nn.functional as F

from lessons_src.delta_rule import delta_rule_recurrent
from lessons_src.functional import attention
from lessons_src.lab.configs import load_configs

OUT = Path(__file__).resolve().parents[2] / "docs" / "_data" / "bench" / "linear.json"
MODEL = "Qwen3-Next-80B-A3B"
LENGTHS = (1024, 4096, 16384, 65536)
LAYERS = ("attention", "linear")


def sizes() -> dict[str, int]:
    cfg = load_configs()[MODEL]
    lin = cfg.linear or {}
    return {"num_heads": cfg.num_heads, "num_kv_heads": cfg.num_kv_heads, "head_dim": cfg.head_dim,
            "value_heads": lin["value_heads"], "key_dim": lin["key_dim"], "value_dim": lin["value_dim"]}


def state_bytes(context: int) -> dict[str, int]:
    """What each layer holds after ``context`` tokens, in float32, from ModelConfig.layer_cache_numbers."""
    cfg, s = load_configs()[MODEL], sizes()
    per_layer = dict(cfg.layer_cache_numbers(context))  # one of each kind
    conv = (cfg.linear or {})["conv_kernel"] * (2 * (cfg.linear or {})["key_heads"] * s["key_dim"]
                                                + s["value_heads"] * s["value_dim"])
    return {"attention": 4 * per_layer["full"], "linear": 4 * (per_layer["linear"] - conv)}


def inputs(context: int, g: torch.Generator) -> dict[str, tuple[torch.Tensor, ...]]:
    s = sizes()
    H, K, E = s["num_heads"], s["num_kv_heads"], s["head_dim"]
    Hv, Dk, Dv = s["value_heads"], s["key_dim"], s["value_dim"]
    attn = (torch.randn(1, H, 1, E, generator=g), torch.randn(1, K, context, E, generator=g),
            torch.randn(1, K, context, E, generator=g))
    qk = F.normalize(torch.randn(1, Hv, 1, Dk, generator=g), dim=-1)
    linear = (qk, qk, torch.randn(1, Hv, 1, Dv, generator=g), -torch.rand(1, Hv, 1, generator=g),
              torch.rand(1, Hv, 1, generator=g), torch.randn(1, Hv, Dk, Dv, generator=g))
    return {"attention": attn, "linear": linear}


def step(layer: str, x: tuple[torch.Tensor, ...]) -> dict[str, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    with torch.no_grad():
        if layer == "attention":
            attention(*x)  # one query over the whole cache: nothing to mask
        else:
            delta_rule_recurrent(*x[:5], state=x[5])
    return {"seconds": time.perf_counter() - wall, "cpu_seconds": time.process_time() - cpu}


def ratios(runs: dict[str, dict[str, list[dict[str, float]]]]) -> dict[str, float]:
    """The attention step's CPU time over the linear step's in the same round, median over rounds, per length."""
    return {n: statistics.median(a["cpu_seconds"] / b["cpu_seconds"]
                                 for a, b in zip(runs["attention"][n], runs["linear"][n], strict=True))
            for n in runs["attention"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS))
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    load_before = os.getloadavg()
    started = time.perf_counter()
    runs: dict[str, dict[str, list[dict[str, float]]]] = {layer: {} for layer in LAYERS}
    measured: dict[str, dict[str, int]] = {layer: {} for layer in LAYERS}
    for n in args.lengths:
        x = inputs(n, g)
        measured["attention"][str(n)] = sum(t.numel() * t.element_size() for t in x["attention"][1:])
        measured["linear"][str(n)] = x["linear"][5].numel() * x["linear"][5].element_size()
        for layer in LAYERS:
            step(layer, x[layer])  # warm-up
            runs[layer][str(n)] = []
        for _ in range(args.repeats):
            for layer in LAYERS:  # round-robin
                runs[layer][str(n)].append(step(layer, x[layer]))
        print(f"{n} tokens done", flush=True)
    medians = {layer: {n: statistics.median(r["cpu_seconds"] for r in v) for n, v in runs[layer].items()}
               for layer in LAYERS}
    report = {
        "model": MODEL,
        "config": {**sizes(), "dtype": "float32", "device": "cpu", "batch_size": 1, "lengths": args.lengths},
        "machine": {"torch": torch.__version__, "threads": torch.get_num_threads(), "cpus": os.cpu_count(),
                    "processor": platform.processor() or platform.machine(),
                    "load_average_before": [round(v, 2) for v in load_before],
                    "load_average_after": [round(v, 2) for v in os.getloadavg()]},
        "repeats": args.repeats,
        "method": "one decoding step of each layer's token mixing in turn (round-robin) after a warm-up step; "
                  "ratio: the median over rounds of the attention step's CPU time over the linear step's in the "
                  "same round; bytes measured from the tensors",
        "bytes_measured": measured,
        "bytes_computed": {layer: {str(n): state_bytes(n)[layer] for n in args.lengths} for layer in LAYERS},
        "runs": runs,
        "median_cpu_seconds": medians,
        "attention_over_linear": ratios(runs),
        "total_seconds": time.perf_counter() - started,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\n{MODEL}'s layers, float32, 1 thread, {args.repeats} rounds, load {load_before[0]:.1f}")
    print(f"  {'tokens':>8s} {'attention ms':>13s} {'linear ms':>10s} {'ratio':>7s} {'KV MiB':>8s} {'state MiB':>10s}")
    for n in map(str, args.lengths):
        print(f"  {int(n):8d} {medians['attention'][n] * 1e3:13.3f} {medians['linear'][n] * 1e3:10.3f} "
              f"{report['attention_over_linear'][n]:7.2f} {measured['attention'][n] / 2**20:8.1f} "
              f"{measured['linear'][n] / 2**20:10.2f}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
