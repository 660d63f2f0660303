"""Benchmark: this CPU's two roofs, a matmul's FLOP rate and a copy's bandwidth, and their ratio (its ridge point).

The lesson on arithmetic intensity (``docs/lessons/decoding-and-memory.md``) sets each attention step's FLOPs per
byte against a machine's ratio of compute to bandwidth. For this CPU both rates are measured here, in float32 (the
decode benchmark's type), on one thread (as ``bench_decode.py`` times its steps) and on every core:

* **matmul**: ``a @ b`` of two ``n x n`` float32 matrices, ``2 n^3`` FLOPs per call;
* **copy**: ``dst.copy_(src)`` of a float32 tensor far larger than the caches, which reads ``src`` and writes ``dst``:
  ``2 * src.nbytes`` bytes moved per call (STREAM's "copy" convention).

After a warm-up call of each, the two are timed round-robin (one matmul, one copy, repeated), so a busy moment slows
both alike; the report keeps every sample and the medians, and the load average before and after: this is a shared
machine, and its figures are what this machine did then, not its data sheet.

    python tools/bench/bench_roofline.py            # writes docs/_data/bench/roofline.json and prints a table
    python tools/bench/bench_roofline.py --quick    # small sizes, to check the script (writes nothing)
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

OUT = Path(__file__).resolve().parents[2] / "docs" / "_data" / "bench" / "roofline.json"
MATMUL_N = 2048
COPY_MIB = 256
REPEATS = 7


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def measure(threads: int, n: int, copy_mib: int, repeats: int) -> dict[str, object]:
    """Median FLOP/s of an ``n x n`` matmul and bytes/s of a ``copy_mib`` MiB copy on ``threads`` threads."""
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(n, n, generator=g), torch.randn(n, n, generator=g)
    src = torch.randn(copy_mib * 2**20 // 4, generator=g)
    dst = torch.empty_like(src)
    a @ b  # warm-up: threads started, kernels chosen, pages touched
    dst.copy_(src)
    matmul_s, copy_s = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        matmul_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        dst.copy_(src)
        copy_s.append(time.perf_counter() - t0)
    flops, moved = 2 * n**3, 2 * src.nbytes
    rate, bandwidth = flops / statistics.median(matmul_s), moved / statistics.median(copy_s)
    return {
        "matmul_seconds": matmul_s, "copy_seconds": copy_s, "matmul_flops": flops, "copy_bytes": moved,
        "matmul_flops_per_s": rate, "copy_bytes_per_s": bandwidth, "flops_per_byte": rate / bandwidth,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes, two repeats: check the script")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    n, mib, repeats = (256, 16, 2) if args.quick else (MATMUL_N, COPY_MIB, REPEATS)
    cores = os.cpu_count() or 1
    load_before = os.getloadavg()
    results = {str(t): measure(t, n, mib, repeats) for t in sorted({1, cores})}
    report = {
        "config": {"matmul_n": n, "copy_mib": mib, "dtype": "float32", "repeats": repeats},
        "machine": {"torch": torch.__version__, "python": platform.python_version(), "cpu": cpu_model(),
                    "cpus": cores, "load_average_before": [round(x, 2) for x in load_before],
                    "load_average_after": [round(x, 2) for x in os.getloadavg()]},
        "threads": results,
    }
    if not args.quick:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    print(f"{report['machine']['cpu']}, {cores} CPUs, float32; load {load_before[0]:.1f} -> {os.getloadavg()[0]:.1f}")
    for t, r in results.items():
        print(f"  {t} thread(s): matmul {r['matmul_flops_per_s'] / 1e9:7.1f} GFLOP/s, copy "  # type: ignore[operator]
              f"{r['copy_bytes_per_s'] / 1e9:6.1f} GB/s, ratio {r['flops_per_byte']:5.1f} FLOP/byte")
    if not args.quick:
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
