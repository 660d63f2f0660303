"""Benchmark: a decoding step reading a quantized KV cache, dequantized on the fly, against the float cache.

One decoder layer's attention at Llama 3 8B's shape (32 query heads, 8 KV heads of 128), float32 on the CPU, one
thread, batch 1, at ``S`` = 8K and 32K cached positions. A step appends one token's key and value to the cache and
attends to everything the cache returns (``F.scaled_dot_product_attention`` with GQA's query heads stacked on their
KV head): for the float ``KVCache`` a view of its buffers; for a quantized cache every cached position dequantized
from its codes and scales, in plain PyTorch, as a cache without a fused kernel must. Rows: ``float32``, ``q8_0``,
``fp8``, ``q4_0`` (:class:`lessons_src.quantized_cache.TileQuantizedCache`) and ``kivi_2`` (2-bit
:class:`~lessons_src.quantized_cache.KIVICache`, residual 128).

Bytes a token, measured from each cache's ``nbytes`` after the prefill, are compared with bfloat16's
``kv_bytes_per_token``: the tile formats' ratio is their ``bytes_per_number`` over 2 exactly. Times: every row's
step in turn (round-robin, ``rounds.py``) after a warm-up call each; the ratio is the median over rounds of the float
cache's step time over the row's (below 1: slower). The load average before and after is kept (a shared machine).

    python tools/bench/bench_quantized_cache.py            # writes docs/_data/bench/quantized_cache.json
    python tools/bench/bench_quantized_cache.py --quick    # small caches, two rounds: check the script
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING

import rounds
import torch
import torch.nn.functional as F
from rounds import round_robin

from lessons_src.kv_cache import KVCache, LayerCache, kv_bytes_per_token
from lessons_src.quantized_cache import FP8, Q4_0, Q8_0, KIVICache, TileQuantizedCache

if TYPE_CHECKING:
    from collections.abc import Callable

OUT = Path(__file__).resolve().parents[2] / "docs" / "_data" / "bench" / "quantized_cache.json"
H, K, E = 32, 8, 128  # Llama 3 8B: query heads, KV heads, head_dim
CACHED = (8192, 32768)
REPEATS = 5
RESIDUAL = 128  # KIVI's residual tokens
ROWS: dict[str, Callable[[int], LayerCache]] = {
    "float32": lambda L: KVCache(1, K, E, L),
    "q8_0": lambda L: TileQuantizedCache(1, K, E, L, Q8_0),
    "fp8": lambda L: TileQuantizedCache(1, K, E, L, FP8),
    "q4_0": lambda L: TileQuantizedCache(1, K, E, L, Q4_0),
    "kivi_2": lambda L: KIVICache(1, K, E, L, bits=2, residual=RESIDUAL),
}


def step(cache: LayerCache, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """One decoding step: append one token, attend to every cached position (GQA's groups stacked on a KV head)."""
    keys, values = cache.update(k, v)  # (1, K, S, E) each
    out: torch.Tensor = F.scaled_dot_product_attention(q.view(1, K, H // K, E), keys, values)  # (1, K, H/K, E)
    return out


def measure(S: int, repeats: int, g: torch.Generator) -> dict[str, object]:
    """Every row at ``S`` cached positions: bytes a token after the prefill, then the steps, round-robin."""
    k, v = torch.randn(1, K, S, E, generator=g), torch.randn(1, K, S, E, generator=g)
    q, k1, v1 = torch.randn(1, H, 1, E, generator=g), torch.randn(1, K, 1, E, generator=g), torch.randn(1, K, 1, E,
                                                                                                         generator=g)
    caches = {}
    for name, make in ROWS.items():
        cache = make(S + repeats + 1)  # room for the warm-up and every round's new token
        with torch.no_grad():
            cache.update(k, v)  # the prefill
        caches[name] = cache
    per_token = {name: c.nbytes / S for name, c in caches.items()}
    runs = round_robin({name: (lambda c=c: step(c, q, k1, v1)) for name, c in caches.items()}, repeats)
    return {"cached": S, "bytes_per_token": per_token, "runs": runs,
            "median_seconds": {r: statistics.median(x["seconds"] for x in v_) for r, v_ in runs.items()},
            "float32_over": rounds.ratios(runs, "float32", key="seconds")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small caches, two rounds: check the script")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    repeats = 2 if args.quick else REPEATS
    cached = [S // 16 for S in CACHED] if args.quick else list(CACHED)
    load_before = os.getloadavg()
    started = time.perf_counter()
    parts = []
    for S in cached:
        parts.append(measure(S, repeats, g))
        print(f"S={S} done", flush=True)
    report = {
        "config": {"num_heads": H, "num_kv_heads": K, "head_dim": E, "dtype": "float32", "device": "cpu",
                   "cached": cached, "repeats": repeats, "residual": RESIDUAL, "rows": list(ROWS),
                   "bfloat16_bytes_per_token": kv_bytes_per_token(K, E, torch.bfloat16)},
        "full_run": not args.quick,
        "machine": rounds.machine(1, os.cpu_count(), load_before),
        "method": "a step appends one token and attends to what the cache returns (dequantized on the fly); rows in "
                  "turn (round-robin) after a warm-up call each; ratio: the median over rounds of the float cache's "
                  "wall time over the row's in the same round; bytes: each cache's nbytes after the prefill",
        "parts": parts,
        "total_seconds": time.perf_counter() - started,
    }
    if not args.quick:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    bf16 = report["config"]["bfloat16_bytes_per_token"]  # type: ignore[index]
    print(f"\nLlama 3 8B attention (H {H}, K {K}, E {E}), float32, one thread, load {load_before[0]:.1f}")
    for p in parts:
        print(f"  S {p['cached']}: " + ", ".join(
            f"{r} {p['median_seconds'][r] * 1e3:.1f} ms ({p['float32_over'].get(r, 1.0):.2f}x, "  # type: ignore[index, attr-defined]
            f"{p['bytes_per_token'][r] / bf16:.4f} of bf16)" for r in ROWS))  # type: ignore[index]
    print(f"{report['total_seconds']:.0f} s" + (f"; wrote {args.out}" if not args.quick else ""))


if __name__ == "__main__":
    main()
