"""Benchmark: lessons_src.MultiHeadAttention against a bare SDPA floor, nn.MultiheadAttention and a textbook version.

Forward only, causal, float32 on CPU, B=8, T=512, d_model=512, 8 heads. Every variant is timed in the same
process, round-robin (one call of each in turn, repeated), so a noisy neighbour slows all of them alike; the
report gives each median as a ratio to the floor: fused QKV Linear + F.scaled_dot_product_attention + output
Linear. Peak memory at T=2048 is measured in a fresh subprocess per variant as the growth of the process's
peak resident set size during one forward call (Linux only).

    python tools/bench/bench_mha.py            # writes docs/_data/bench/mha.json and prints a table
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lessons_src import MultiHeadAttention, causal_mask
from lessons_src.lab.lesson_tools import median_times

if TYPE_CHECKING:
    from collections.abc import Callable

OUT = Path(__file__).resolve().parents[2] / "docs" / "_data" / "bench" / "mha.json"
B, T, D, H = 8, 512, 512, 8


class Floor(nn.Module):
    """The least work multi-head attention can do: one fused projection, the fused kernel, one projection."""

    def __init__(self, d: int, h: int) -> None:
        super().__init__()
        self.h = h
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.out = nn.Linear(d, d, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        B, T, D = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.h, D // self.h).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(B, T, D))


class Textbook(nn.Module):
    """The version most tutorials write: three Linears, explicit scores, masked_fill, softmax, matmul."""

    def __init__(self, d: int, h: int) -> None:
        super().__init__()
        self.h, self.e = h, d // h
        self.w_q = nn.Linear(d, d, bias=False)
        self.w_k = nn.Linear(d, d, bias=False)
        self.w_v = nn.Linear(d, d, bias=False)
        self.w_o = nn.Linear(d, d, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        B, T, D = x.shape
        q = self.w_q(x).view(B, T, self.h, self.e).transpose(1, 2)
        k = self.w_k(x).view(B, T, self.h, self.e).transpose(1, 2)
        v = self.w_v(x).view(B, T, self.h, self.e).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / self.e**0.5
        keep = torch.ones(T, T, dtype=torch.bool).tril()
        weights = scores.masked_fill(~keep, float("-inf")).softmax(-1)
        return self.w_o((weights @ v).transpose(1, 2).reshape(B, T, D))


def variants(t: int) -> dict[str, Callable[[Tensor], Tensor]]:
    torch.manual_seed(0)
    ours = MultiHeadAttention(D, H).eval()
    ref = nn.MultiheadAttention(D, H, bias=False, batch_first=True).eval()
    blocked = ~causal_mask(t)  # nn.MultiheadAttention: True = blocked
    float_mask = torch.zeros(t, t).masked_fill(blocked, float("-inf"))
    floor, textbook = Floor(D, H).eval(), Textbook(D, H).eval()
    return {
        "floor": floor,
        "ours": lambda x: ours(x, is_causal=True),
        "ours_need_weights": lambda x: ours.with_weights(x, is_causal=True)[0],
        "torch_mha_default": lambda x: ref(x, x, x, attn_mask=blocked, is_causal=True)[0],
        "torch_mha_float_mask": lambda x: ref(x, x, x, attn_mask=float_mask, need_weights=False)[0],
        "textbook": textbook,
    }


def time_all(repeats: int, warmup: int) -> dict[str, float]:
    x = torch.randn(B, T, D)
    return median_times({name: partial(fn, x) for name, fn in variants(T).items()}, repeats=repeats, warmup=warmup)


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def peak_memory_child(name: str, t: int) -> None:
    """Peak resident memory added by one call, from Linux's high-water mark reset just before it."""
    fn = variants(t)[name]
    x = torch.randn(B, t, D)
    with torch.inference_mode():
        fn(torch.randn(1, 8, D))  # load kernels before measuring
        before = _status_kib("VmRSS")
        Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
        fn(x)
        peak = _status_kib("VmHWM")
    print(json.dumps({"peak_bytes": (peak - before) * 1024}))


def peak_memory(name: str, t: int) -> int:
    # Large blocks go straight to mmap and back to the OS when freed, so resident memory tracks live tensors.
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    out = subprocess.run(
        [sys.executable, __file__, "--memory-child", name, "--t", str(t)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return int(json.loads(out.stdout)["peak_bytes"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--memory-child")
    ap.add_argument("--t", type=int, default=2048)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    if args.memory_child:
        peak_memory_child(args.memory_child, args.t)
        return

    medians = time_all(args.repeats, args.warmup)
    memory = {name: peak_memory(name, args.t) for name in ("floor", "ours", "textbook")}
    report = {
        "config": {
            "B": B,
            "T": T,
            "d_model": D,
            "num_heads": H,
            "dtype": "float32",
            "causal": True,
            "forward_only": True,
        },
        "machine": {
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "processor": platform.machine(),
            "python": platform.python_version(),
        },
        "repeats": args.repeats,
        "median_seconds": medians,
        "ratio_to_floor": {name: medians[name] / medians["floor"] for name in medians},
        "memory_T": args.t,
        "peak_bytes": memory,
        "memory_ratio_to_floor": {name: memory[name] / memory["floor"] for name in memory},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    print(
        f"MultiHeadAttention forward, B={B} T={T} d_model={D} h={H}, causal, float32, {torch.get_num_threads()} threads"
    )
    for name, s in medians.items():
        print(f"  {name:22s} {s * 1e3:8.2f} ms   {s / medians['floor']:5.2f}x floor")
    print(f"peak memory of one forward call at T={args.t}:")
    for name, b in memory.items():
        print(f"  {name:22s} {b / 2**30:6.3f} GiB   {b / memory['floor']:5.2f}x floor")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
