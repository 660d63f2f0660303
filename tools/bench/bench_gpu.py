"""Benchmark on a CUDA GPU: the Triton FlashAttention kernel against SDPA's FlashAttention backend and the tiled loop.

FlashAttention-2's setup (arXiv:2307.08691, section 4.1): 16K tokens per batch (B = 16384 / T), hidden size 2048
(H = 2048 / E heads), bfloat16, T = S from 1K to 16K, head sizes 64 and 128, causal and not, forward and
forward+backward. Each (size, implementation, pass) is timed with CUDA events after a warm-up call (which also
compiles the Triton kernels; the tiled loop, which compiles nothing and takes seconds at 16K, is warmed at 1K only),
repeated until 5 runs or 2 seconds, the median kept. Achieved TFLOP/s counts the
matrix products the algorithm does: forward 4 B H T S E (halved when causal, as the papers count), backward
2.5 times that. The report names the GPU, the versions and the load, and checks the issue's goal: Triton's forward
within 1.5x of SDPA's FlashAttention backend at T = 8K, head size 128.

    make bench-gpu                                   # writes docs/_data/bench/gpu.json, prints a table
    TRITON_INTERPRET=1 python tools/bench/bench_gpu.py --dry-run --out /tmp/gpu.json   # the code path, on CPU
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
OUT = ROOT / "docs" / "_data" / "bench" / "gpu.json"
TOKENS, HIDDEN = 16384, 2048
LENGTHS = (1024, 2048, 4096, 8192, 16384)
HEADS = (64, 128)
IMPLEMENTATIONS = ("triton", "sdpa_flash", "tiled")
MODES = ("forward", "forward_backward")
GOAL = {"T": 8192, "head_dim": 128, "mode": "forward", "triton_over_sdpa_flash_at_most": 1.5}
MAX_RUNS, MAX_SECONDS = 5, 2.0


def flops(B: int, H: int, T: int, E: int, causal: bool, mode: str) -> float:
    """Matrix-product FLOPs: QK^T and PV forward (2 T S E each, per head); the backward does 2.5 times that."""
    forward = 4 * B * H * T * T * E * (0.5 if causal else 1.0)
    return forward * (3.5 if mode == "forward_backward" else 1.0)


def _call(impl: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    if impl == "triton":
        from lessons_src.triton_flash import triton_attention

        return triton_attention(q, k, v, is_causal=causal).output
    if impl == "tiled":
        from lessons_src.flash import tiled_attention

        return tiled_attention(q, k, v, is_causal=causal).output
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = SDPBackend.FLASH_ATTENTION if q.is_cuda else SDPBackend.MATH
    with sdpa_kernel(backend):  # T = S: SDPA's top-left causal mask is the course's bottom-right one
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def _timer(device: str):
    """Seconds taken by fn(), measured with CUDA events on a GPU (perf_counter on the CPU, for --dry-run)."""
    def run(fn) -> float:
        if device != "cuda":
            start = time.perf_counter()
            fn()
            return time.perf_counter() - start
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        return begin.elapsed_time(end) / 1000
    return run


def measure(impl: str, mode: str, T: int, E: int, causal: bool, device: str, dtype: torch.dtype, tokens: int,
            hidden: int, warm: bool = True) -> dict:
    B, H = max(1, tokens // T), hidden // E
    g = torch.Generator(device=device).manual_seed(0)
    q, k, v = (torch.randn(B, H, T, E, device=device, dtype=dtype, generator=g, requires_grad=mode != "forward")
               for _ in range(3))
    grad = torch.randn(B, H, T, E, device=device, dtype=dtype, generator=g)

    def step() -> None:
        if mode == "forward":
            with torch.no_grad():
                _call(impl, q, k, v, causal)
        else:
            for t in (q, k, v):
                t.grad = None
            _call(impl, q, k, v, causal).backward(grad)

    timer = _timer(device)
    if warm:  # compiles the Triton kernels, loads the FlashAttention backend, fills the allocator
        timer(step)
    seconds: list[float] = []
    while len(seconds) < MAX_RUNS and (sum(seconds) < MAX_SECONDS or len(seconds) < 1):
        seconds.append(timer(step))
    median = statistics.median(seconds)
    return {"B": B, "H": H, "seconds": seconds, "median_seconds": median,
            "tflops": flops(B, H, T, E, causal, mode) / median / 1e12}


def check_outputs(T: int, E: int, causal: bool, device: str, dtype: torch.dtype, tokens: int, hidden: int) -> float:
    """Largest difference between Triton's and SDPA's forward output at this size (a sanity check, not a test)."""
    B, H = max(1, tokens // T), hidden // E
    g = torch.Generator(device=device).manual_seed(1)
    q, k, v = (torch.randn(B, H, T, E, device=device, dtype=dtype, generator=g) for _ in range(3))
    with torch.no_grad():
        a, b = _call("triton", q, k, v, causal), _call("sdpa_flash", q, k, v, causal)
    return (a.float() - b.float()).abs().max().item()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--dry-run", action="store_true", help="tiny sizes on the CPU through TRITON_INTERPRET=1")
    args = ap.parse_args()
    if args.dry_run:
        device, dtype, lengths, heads, tokens, hidden = "cpu", torch.float32, (64, 128), (16, 32), 256, 64
    elif torch.cuda.is_available():
        device, dtype, lengths, heads, tokens, hidden = "cuda", torch.bfloat16, LENGTHS, HEADS, TOKENS, HIDDEN
    else:
        sys.exit("make bench-gpu needs a CUDA GPU (torch.cuda.is_available() is False); --dry-run runs the code path")
    import triton

    load_before = os.getloadavg()
    started = time.perf_counter()
    rows = []
    for E in heads:
        for causal in (True, False):
            for T in lengths:
                row = {"T": T, "head_dim": E, "causal": causal,
                       "max_abs_diff_triton_vs_sdpa": check_outputs(T, E, causal, device, dtype, tokens, hidden)}
                for mode in MODES:
                    for impl in IMPLEMENTATIONS:
                        # the tiled loop compiles nothing: one warm-up call, at the shortest length, is enough
                        warm = impl != "tiled" or lengths[0] == T
                        r = measure(impl, mode, T, E, causal, device, dtype, tokens, hidden, warm)
                        row.setdefault("B", r["B"])
                        row.setdefault("H", r["H"])
                        row[f"{impl}.{mode}"] = {"seconds": r["seconds"], "median_seconds": r["median_seconds"],
                                                 "tflops": r["tflops"]}
                        print(f"E={E:3d} causal={causal!s:5} T={T:5d} {impl:10s} {mode:16s} "
                              f"{r['median_seconds'] * 1e3:9.2f} ms {r['tflops']:7.1f} TFLOP/s", flush=True)
                rows.append(row)

    goal_row = next((r for r in rows if r["T"] == GOAL["T"] and r["head_dim"] == GOAL["head_dim"] and r["causal"]),
                    None)
    ratio = None if goal_row is None else (goal_row["triton.forward"]["median_seconds"]
                                           / goal_row["sdpa_flash.forward"]["median_seconds"])
    props = torch.cuda.get_device_properties(0) if device == "cuda" else None
    report = {
        "config": {"tokens_per_batch": tokens, "hidden": hidden, "dtype": str(dtype).removeprefix("torch."),
                   "device": device, "lengths": list(lengths), "head_dims": list(heads),
                   "implementations": list(IMPLEMENTATIONS), "modes": list(MODES), "dry_run": args.dry_run},
        "machine": {
            "gpu": torch.cuda.get_device_name(0) if props else None,
            "multiprocessors": props.multi_processor_count if props else None,
            "gpu_memory_gib": round(props.total_memory / 2**30, 1) if props else None,
            "cuda": torch.version.cuda, "torch": torch.__version__, "triton": triton.__version__,
            "cpus": os.cpu_count(), "processor": platform.processor() or platform.machine(),
            "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in os.getloadavg()],
        },
        "method": (f"CUDA events around one call (forward under no_grad; forward+backward with a random output "
                   f"gradient) after one warm-up call; up to {MAX_RUNS} runs or {MAX_SECONDS} s, median"),
        "flops": "forward 4 B H T S E (x 0.5 causal); forward+backward 3.5 x forward",
        "rows": rows,
        "goal": {**GOAL, "causal": True, "ratio": ratio, "met": None if ratio is None else ratio <= GOAL[
            "triton_over_sdpa_flash_at_most"]},
        "total_seconds": time.perf_counter() - started,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    if ratio is not None:
        print(f"goal: triton / sdpa_flash forward at T=8192, E=128, causal = {ratio:.2f} (at most 1.5: "
              f"{'met' if report['goal']['met'] else 'MISSED'})")
    print(f"wrote {args.out} in {report['total_seconds']:.0f} s")


if __name__ == "__main__":
    main()
