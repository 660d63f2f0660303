"""Benchmark: compiled FlexAttention against SDPA given the equivalent dense mask, on the CPU.

For each mask of ``lessons_src.flex`` (causal, a sliding window, packed documents, prefix LM) and each length
``T = S`` (1K to 8K by default), B=1, 8 heads of 64, float32, forward only (PyTorch 2.13 runs FlexAttention on a
CPU forward only): ``torch.compile(flex_attention)`` with the block mask (tiles of 128), against
``F.scaled_dot_product_attention`` with the dense bool mask the same mask_mod defines. Each row records the share
of tiles the block mask skips, the seconds the first compiled call took (compiling, once per mask and length), the
seconds ``create_block_mask`` took, and every timed call of both, round-robin after a warm-up; the medians and the
speed-up (SDPA's median over Flex's) follow from them. The load average before and after is kept: this is a shared
machine.

    python tools/bench/bench_flex.py                      # T = 1024 .. 8192: writes docs/_data/bench/flex.json
    python tools/bench/bench_flex.py --sizes 1024 --repeats 3   # a quick check at the smallest size
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import create_mask, flex_attention

from lessons_src.flex import block_mask, block_sparsity
from lessons_src.masks import causal, mask_mod, prefix_lm, same_document, sliding_window

if TYPE_CHECKING:
    from collections.abc import Callable

OUT = Path(__file__).resolve().parents[2] / "docs" / "_data" / "bench" / "flex.json"
B, H, E = 1, 8, 64
BLOCK = 128  # FlexAttention's default tile
SIZES = (1024, 2048, 4096, 8192)
DOC = 512  # packed documents of 512 tokens each


def masks(T: int) -> dict[str, Callable[..., torch.Tensor]]:
    """The mask_mods measured, at length ``T`` (queries and keys): the package's rules, offset bound."""
    ids = torch.arange(T) // DOC  # (T,): document of each position
    rules = {
        "causal": causal(),
        "window_512": sliding_window(512),
        "documents_512": causal() & same_document(ids),
        "prefix_lm_quarter": prefix_lm(T // 4),
    }
    return {name: mask_mod(rule, T) for name, rule in rules.items()}


MASKS = tuple(masks(BLOCK))


def speedups(runs: dict[str, dict[str, list[float]]]) -> dict[str, float]:
    """SDPA's median seconds over Flex's, per row: above 1, Flex is faster."""
    return {row: statistics.median(r["sdpa"]) / statistics.median(r["flex"]) for row, r in runs.items()}


def measure(sizes: tuple[int, ...], repeats: int) -> dict[str, object]:
    assert len(MASKS) <= torch._dynamo.config.recompile_limit, "a length's masks would not all be compiled"
    torch.manual_seed(0)
    torch.set_num_threads(1)
    runs: dict[str, dict[str, list[float]]] = {}
    rows: dict[str, dict[str, float | int | str]] = {}
    with torch.no_grad():
        for T in sizes:
            # Each mask and length compiles its own graph. Dynamo keeps at most `recompile_limit` (8) graphs per
            # function and then runs it uncompiled, without an error: the full sweep's fifth length would time
            # eager FlexAttention. So each length starts from an empty cache, and its graphs must all be compiled.
            torch._dynamo.reset()
            compiled = torch.compile(flex_attention, dynamic=False)
            q, k, v = (torch.randn(B, H, T, E) for _ in range(3))
            calls: dict[str, Callable[[], torch.Tensor]] = {}
            for name, mod in masks(T).items():
                row = f"{name}@{T}"
                start = time.perf_counter()
                bm = block_mask(mod, T, block_size=BLOCK)
                made = time.perf_counter() - start
                dense = create_mask(mod, 1, 1, T, T, device="cpu")  # (1, 1, T, T): the same mask, as a tensor
                start = time.perf_counter()
                compiled(q, k, v, block_mask=bm)  # compiles
                compile_s = time.perf_counter() - start
                rows[row] = {"mask": name, "T": T, "tiles_skipped": block_sparsity(bm), "compile_seconds": compile_s,
                             "block_mask_seconds": made}
                calls[f"{row}/flex"] = lambda q=q, k=k, v=v, bm=bm, f=compiled: f(q, k, v, block_mask=bm)
                calls[f"{row}/sdpa"] = lambda q=q, k=k, v=v, m=dense: F.scaled_dot_product_attention(
                    q, k, v, attn_mask=m)
                runs[row] = {"flex": [], "sdpa": []}
            for fn in calls.values():
                fn()  # warm-up
            for _ in range(repeats):  # round-robin: a busy moment slows every call alike
                for key, fn in calls.items():
                    row, which = key.rsplit("/", 1)
                    start = time.perf_counter()
                    fn()
                    runs[row][which].append(time.perf_counter() - start)
    return {"runs": runs, "rows": rows}


def report(sizes: tuple[int, ...], repeats: int) -> dict[str, object]:
    load_before = os.getloadavg()
    measured = measure(sizes, repeats)
    runs = measured["runs"]
    assert isinstance(runs, dict)
    return {
        "config": {"B": B, "H": H, "E": E, "block_size": BLOCK, "sizes": list(sizes), "masks": list(MASKS),
                   "document_length": DOC, "dtype": "float32", "threads": 1, "pass": "forward"},
        "repeats": repeats,
        "full_sweep": tuple(sizes) == SIZES,
        "machine": {"torch": torch.__version__, "python": platform.python_version(), "cpu": platform.processor(),
                    "load_average_before": list(load_before), "load_average_after": list(os.getloadavg())},
        "rows": measured["rows"],
        "runs": runs,
        "median_seconds": {row: {w: statistics.median(t) for w, t in r.items()} for row, r in runs.items()},
        "speedup_flex_over_sdpa": speedups(runs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    # Compile into an empty cache. Inductor keeps compiled code on disk between runs (TORCHINDUCTOR_CACHE_DIR, read
    # at each compile); a warm cache would make "compile_seconds" a lookup for the lengths an earlier run compiled.
    with tempfile.TemporaryDirectory(prefix="bench_flex_inductor_") as cache:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
        r = report(tuple(args.sizes), args.repeats)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(r, indent=1) + "\n")
    print(f"{'row':28} {'skipped':>8} {'compile s':>10} {'flex ms':>8} {'sdpa ms':>8} {'speed-up':>8}")
    for row, info in r["rows"].items():  # type: ignore[union-attr]
        med = r["median_seconds"][row]  # type: ignore[index]
        print(f"{row:28} {info['tiles_skipped']:8.0%} {info['compile_seconds']:10.1f} {med['flex'] * 1e3:8.1f} "
              f"{med['sdpa'] * 1e3:8.1f} {r['speedup_flex_over_sdpa'][row]:7.2f}x")  # type: ignore[index]
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
