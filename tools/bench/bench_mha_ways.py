"""Benchmark: the common ways of writing causal multi-head attention, side by side, as a peer can rerun it.

The setup of Raschka's public comparison of MHA implementations (*Build a Large Language Model (From
Scratch)*, chapter 3 bonus material, rasbt/LLMs-from-scratch ch03/02_bonus_efficient-multihead-attention):
batch 8, 1,024 tokens, d_model 768, 12 heads, float32, causal. Each way is written here in this project's own words:

* ``wrapper``: one small attention module per head, outputs concatenated (the first version most
  tutorials write);
* ``stacked``: three ``d x d`` projections, heads split by ``view``/``transpose``, explicit masked softmax;
* ``fused_qkv``: one ``d x 3d`` projection, explicit masked softmax;
* ``einsum``: the same with ``torch.einsum`` for projections and scores;
* ``nn_mha``: ``nn.MultiheadAttention`` called with its defaults (it also returns averaged weights);
* ``nn_mha_no_weights``: the same with ``need_weights=False``;
* ``sdpa_is_causal`` / ``sdpa_mask``: fused projection + ``F.scaled_dot_product_attention`` with its causal
  flag / with an explicit bool mask;
* ``ours``: ``lessons_src.MultiHeadAttention`` (``"sdpa"`` implementation), ``ours_eager`` its explicit path.

Every way runs forward, and forward + backward, eagerly and under ``torch.compile`` (inductor). Calls are
timed round-robin within one process (one call of each in turn, repeated), so a noisy neighbour slows them
alike; the report gives medians, the spread (min and max) over repeats, ratios to the fastest, the SDPA
kernel that actually ran (from the profiler), and how close ``ours`` comes to the machine's limit: its
achieved FLOP/s (FLOPs counted analytically from the shapes, the full ``T x T`` score matrix included:
``FlopCounterMode`` does not see inside the CPU flash kernel) over the FLOP/s of a large matmul measured
in the same run.

    python tools/bench/bench_mha_ways.py            # writes docs/_data/bench/mha_ways.json
    python tools/bench/bench_mha_ways.py --quick    # tiny sizes, to check the script
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lessons_src import MultiHeadAttention, causal_mask

if TYPE_CHECKING:
    from collections.abc import Callable

OUT = Path(__file__).resolve().parents[2] / "docs" / "_data" / "bench" / "mha_ways.json"


def _causal_softmax_attention(q: Tensor, k: Tensor, v: Tensor, keep: Tensor) -> Tensor:
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, T, T)
    weights = scores.masked_fill(~keep, float("-inf")).softmax(dim=-1)
    return weights @ v  # (B, H, T, E)


class OneHead(nn.Module):
    def __init__(self, d: int, e: int, max_len: int) -> None:
        super().__init__()
        self.q, self.k, self.v = (nn.Linear(d, e, bias=False) for _ in range(3))
        self.register_buffer("keep", causal_mask(max_len), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        T = x.shape[1]
        return _causal_softmax_attention(self.q(x), self.k(x), self.v(x), self.keep[:T, :T])  # (B, T, E)


class Wrapper(nn.Module):
    """One module per head, concatenated, then the output projection."""

    def __init__(self, d: int, h: int, max_len: int) -> None:
        super().__init__()
        self.heads = nn.ModuleList(OneHead(d, d // h, max_len) for _ in range(h))
        self.out = nn.Linear(d, d, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.out(torch.cat([head(x) for head in self.heads], dim=-1))


class Stacked(nn.Module):
    """Three d x d projections; heads split by view and transpose; explicit masked softmax."""

    def __init__(self, d: int, h: int, max_len: int) -> None:
        super().__init__()
        self.h = h
        self.q, self.k, self.v, self.out = (nn.Linear(d, d, bias=False) for _ in range(4))
        self.register_buffer("keep", causal_mask(max_len), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        B, T, D = x.shape
        q, k, v = (p(x).view(B, T, self.h, D // self.h).transpose(1, 2) for p in (self.q, self.k, self.v))
        y = _causal_softmax_attention(q, k, v, self.keep[:T, :T])
        return self.out(y.transpose(1, 2).reshape(B, T, D))


class FusedQKV(nn.Module):
    """One d x 3d projection; explicit masked softmax; or SDPA (flag or mask) when ``sdpa`` is set."""

    def __init__(self, d: int, h: int, max_len: int, sdpa: str | None = None) -> None:
        super().__init__()
        self.h, self.sdpa = h, sdpa
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.out = nn.Linear(d, d, bias=False)
        self.register_buffer("keep", causal_mask(max_len), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        B, T, D = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.h, D // self.h).permute(2, 0, 3, 1, 4)  # 3 x (B, H, T, E)
        if self.sdpa == "flag":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        elif self.sdpa == "mask":
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=self.keep[:T, :T])
        else:
            y = _causal_softmax_attention(q, k, v, self.keep[:T, :T])
        return self.out(y.transpose(1, 2).reshape(B, T, D))


class Einsum(nn.Module):
    """Projections and scores written with einsum."""

    def __init__(self, d: int, h: int, max_len: int) -> None:
        super().__init__()
        self.h = h
        e = d // h
        self.w_qkv = nn.Parameter(torch.randn(3, h, e, d) / math.sqrt(d))
        self.w_o = nn.Parameter(torch.randn(d, h, e) / math.sqrt(d))
        self.register_buffer("keep", causal_mask(max_len), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        T = x.shape[1]
        q, k, v = torch.einsum("btd,nhed->nbhte", x, self.w_qkv)  # 3 x (B, H, T, E)
        scores = torch.einsum("bhte,bhse->bhts", q, k) / math.sqrt(q.shape[-1])
        weights = scores.masked_fill(~self.keep[:T, :T], float("-inf")).softmax(dim=-1)
        y = torch.einsum("bhts,bhse->bhte", weights, v)
        return torch.einsum("bhte,dhe->btd", y, self.w_o)


class TorchMHA(nn.Module):
    def __init__(self, d: int, h: int, max_len: int, need_weights: bool) -> None:
        super().__init__()
        self.mha = nn.MultiheadAttention(d, h, bias=False, batch_first=True)
        self.need_weights = need_weights
        self.register_buffer("blocked", ~causal_mask(max_len), persistent=False)  # nn.MHA: True = blocked

    def forward(self, x: Tensor) -> Tensor:
        T = x.shape[1]
        if self.need_weights:  # the default call
            return self.mha(x, x, x, attn_mask=self.blocked[:T, :T])[0]
        return self.mha(x, x, x, attn_mask=self.blocked[:T, :T], need_weights=False, is_causal=True)[0]


class Ours(nn.Module):
    def __init__(self, d: int, h: int, implementation: str) -> None:
        super().__init__()
        self.mha = MultiHeadAttention(d, h, implementation=implementation)

    def forward(self, x: Tensor) -> Tensor:
        return self.mha(x, is_causal=True)


def build(d: int, h: int, max_len: int) -> dict[str, nn.Module]:
    torch.manual_seed(0)
    return {
        "wrapper": Wrapper(d, h, max_len),
        "stacked": Stacked(d, h, max_len),
        "fused_qkv": FusedQKV(d, h, max_len),
        "einsum": Einsum(d, h, max_len),
        "nn_mha": TorchMHA(d, h, max_len, need_weights=True),
        "nn_mha_no_weights": TorchMHA(d, h, max_len, need_weights=False),
        "sdpa_is_causal": FusedQKV(d, h, max_len, sdpa="flag"),
        "sdpa_mask": FusedQKV(d, h, max_len, sdpa="mask"),
        "ours": Ours(d, h, "sdpa"),
        "ours_eager": Ours(d, h, "eager"),
    }


def sdpa_kernels(module: nn.Module, x: Tensor) -> list[str]:
    """The aten SDPA kernels one forward call runs (empty when the module does not use SDPA)."""
    from torch.profiler import ProfilerActivity, profile

    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU]) as prof:
        module(x)
    names = {e.key for e in prof.key_averages()}
    return sorted(n for n in names if "scaled_dot_product" in n and n != "aten::scaled_dot_product_attention")


def attention_flops(B: int, T: int, d: int) -> int:
    """Multiply-adds x 2 of one causal MHA forward, counting the full T x T score and value products."""
    projections = 2 * B * T * d * (3 * d) + 2 * B * T * d * d
    scores_and_values = 2 * 2 * B * T * T * d  # QK^T and PV over all heads: 2 B T^2 (H E) each
    return projections + scores_and_values


def matmul_flops_per_s(n: int, repeats: int) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - t0)
    return 2 * n**3 / statistics.median(times)


def time_round_robin(fns: dict[str, Callable[[], object]], repeats: int, warmup: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - t0)
    return samples


def run(B: int, T: int, d: int, h: int, repeats: int, compile_too: bool, matmul_n: int) -> dict[str, object]:
    modules = build(d, h, T)
    x = torch.randn(B, T, d)
    ref = modules["ours"](x)
    for name, m in modules.items():  # every way computes causal MHA: same shape, finite
        with torch.no_grad():
            y = m(x)
        if y.shape != ref.shape or not torch.isfinite(y).all():
            raise AssertionError(f"{name} returned {tuple(y.shape)} / non-finite values")
    kernels = {name: sdpa_kernels(m, x) for name, m in modules.items()}

    def forward(m: nn.Module) -> Callable[[], object]:
        def call() -> object:
            with torch.no_grad():
                return m(x)

        return call

    def forward_backward(m: nn.Module) -> Callable[[], object]:
        xg = x.clone().requires_grad_()

        def call() -> object:
            m.zero_grad(set_to_none=True)
            xg.grad = None
            m(xg).sum().backward()
            return None

        return call

    variants: dict[str, dict[str, nn.Module]] = {"eager": modules}
    if compile_too:
        variants["compiled"] = {name: torch.compile(m) for name, m in modules.items()}  # type: ignore[misc]
    results: dict[str, object] = {}
    for mode, wrap in (("forward", forward), ("forward_backward", forward_backward)):
        fns = {f"{name}|{kind}": wrap(m) for kind, ms in variants.items() for name, m in ms.items()}
        t0 = time.perf_counter()
        samples = time_round_robin(fns, repeats=repeats, warmup=2)
        medians = {k: statistics.median(v) for k, v in samples.items()}
        fastest = min(medians.values())
        rows = {}
        for key, s in samples.items():
            name, kind = key.split("|")
            rows[key] = {
                "way": name, "mode": kind, "median_s": medians[key], "min_s": min(s), "max_s": max(s),
                "ratio_to_fastest": medians[key] / fastest,
                "spread": (max(s) - min(s)) / medians[key],
            }
        results[mode] = {"rows": rows, "fastest": min(medians, key=medians.__getitem__),
                         "seconds": time.perf_counter() - t0}
    peak = matmul_flops_per_s(matmul_n, repeats=5)
    fwd_rows = results["forward"]["rows"]  # type: ignore[index]
    ours_fwd = fwd_rows["ours|eager"]["median_s"]
    flops = attention_flops(B, T, d)
    return {
        "setup": {"batch": B, "tokens": T, "d_model": d, "heads": h, "dtype": "float32", "causal": True,
                  "repeats": repeats, "compiled": compile_too},
        "results": results,
        "sdpa_kernels": kernels,
        "flops_per_forward": flops,
        "matmul": {"n": matmul_n, "flops_per_s": peak},
        "ours_forward_flops_per_s": flops / ours_fwd,
        "ours_share_of_matmul_peak": flops / ours_fwd / peak,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, two repeats, no compile: check the script")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    if args.quick:
        report = run(2, 64, 96, 12, repeats=2, compile_too=False, matmul_n=256)
    else:
        report = run(8, 1024, 768, 12, repeats=args.repeats, compile_too=not args.no_compile, matmul_n=4096)
    report["machine"] = {
        "torch": torch.__version__, "threads": torch.get_num_threads(),
        "cpu": platform.processor() or platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version(),
        "load_average_at_end": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }
    if not args.quick:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    for mode in ("forward", "forward_backward"):
        res = report["results"][mode]  # type: ignore[index]
        print(f"\n{mode} (fastest: {res['fastest']})")
        for key, row in sorted(res["rows"].items(), key=lambda kv: kv[1]["median_s"]):
            print(f"  {key:28s} {row['median_s'] * 1e3:9.1f} ms  {row['ratio_to_fastest']:5.2f}x  "
                  f"spread {row['spread']:5.1%}")
    print(f"\nours: {report['ours_forward_flops_per_s'] / 1e9:.1f} GFLOP/s = "
          f"{report['ours_share_of_matmul_peak']:.0%} of a large matmul's")
    print("SDPA kernels:", {k: v for k, v in report["sdpa_kernels"].items() if v})  # type: ignore[union-attr]


if __name__ == "__main__":
    main()
