"""Benchmark: split-KV decoding against one pass, and a shared prefix read once against each request's own copy.

One decoder layer's attention at Llama 3 8B's shape (32 query heads, 8 KV heads of 128), float32, on the CPU,
every core (two here) unless a row says otherwise. Two parts, each timed round-robin after a warm-up call of each
row, so a busy moment slows every row of a round alike:

**Decoding** one token over ``S`` cached positions (8K, 32K and 128K at batch 1; 8K and 32K at batch 8):

* ``one_pass``: one fused SDPA call over the whole cache (the package's ``"sdpa"``: GQA's query heads stacked on
  their KV head, one call);
* ``one_pass_1_thread``: the same on one thread: what the second core already gives the one pass;
* ``split_2``: :func:`lessons_src.split_kv.split_kv_attention`, the cache cut in two (one split per core), each
  split's state from the fused CPU kernel with its log-sum-exp, then merged;
* ``split_4096``: the same with a fixed split size of 4,096 keys (the batch-invariant choice): 2 to 32 splits.

Does splitting pay here? A split runs its own fused call, one after another (the CPU kernel already spreads one
call's ``B x K`` head groups over the cores), so it pays only if one pass left a core idle.

**A shared prefix**: ``N`` requests (8 and 32) share a 4,096-token prompt, each with 256 tokens of its own after
it, one new query each:

* ``own_copies``: batched SDPA over each request's own copy of the prefix and its own tokens (``N`` copies read);
* ``shared_prefix``: :func:`lessons_src.split_kv.shared_prefix_attention`: the prefix's keys read once for all
  ``N`` requests' queries (one pass), each request's own keys apart, the two states merged;
* both again on one thread (``_1_thread``): the ratio on a loaded two-core machine is steadier there.

The split backends return a log-sum-exp: registered here, through the package's registry, as ``"sdpa_cpu_lse"``:
PyTorch's fused CPU flash kernel (``torch.ops.aten._scaled_dot_product_flash_attention_for_cpu``, the kernel SDPA
runs on the CPU for float32), which computes each query's log-sum-exp anyway and returns it. Every row's output is
checked against the one pass (the largest difference is kept). Bytes read: the keys and values each row reads,
counted from the tensors. Each ratio is the median over rounds of the baseline's wall time over the row's in the same
round (wall time: the rows use both cores). The load average before and after is kept: this is a shared machine.

    python tools/bench/bench_split_kv.py            # writes docs/_data/bench/split_kv.json and prints a table
    python tools/bench/bench_split_kv.py --quick    # small sizes, two rounds: check the script (writes nothing)
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
from rounds import Runs, round_robin

from lessons_src.functional import ATTENTION_FUNCTIONS, AttentionResult, Supports, attention, register_attention
from lessons_src.split_kv import shared_prefix_attention, split_kv_attention

if TYPE_CHECKING:
    from collections.abc import Callable

    from lessons_src.masks import PreparedMask

OUT = Path(__file__).resolve().parents[2] / "docs" / "_data" / "bench" / "split_kv.json"
H, K, E = 32, 8, 128  # Llama 3 8B: query heads, KV heads, head_dim
BYTES = 4  # float32
DECODE = ((1, 8192), (1, 32768), (1, 131072), (8, 8192), (8, 32768))  # (batch, cached positions)
PREFIX, OWN, REQUESTS = 4096, 256, (8, 32)
SPLIT_SIZE = 4096
DECODE_ROWS = ("one_pass", "one_pass_1_thread", "split_2", "split_4096")
PREFIX_ROWS = ("own_copies", "shared_prefix", "own_copies_1_thread", "shared_prefix_1_thread")
REPEATS = 7
GOAL_SHARED_32 = 3.0  # the goal: the shared prefix at least 3x faster than own copies at 32 requests
BACKEND = "sdpa_cpu_lse"


def sdpa_cpu_lse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: PreparedMask, *, scale: float,
                 dropout_p: float, softcap: float | None = None, sinks: torch.Tensor | None = None) -> AttentionResult:
    """The fused CPU flash kernel, with the log-sum-exp it computes: a split backend (no cap, no sinks; a query
    must see at least one key, as every query of this bench does).

    Without a mask, GQA's query heads are stacked on their KV head, ``(B, H, T, E) -> (B, K, n_rep T, E)``, as the
    package's ``"sdpa"`` does, so each KV head is read once for its group."""
    B, H, T, E_ = q.shape
    K_, Ev = k.shape[1], v.shape[-1]
    full = mask.combined()  # None, or (.., T, S) bool or float
    if full is not None and full.dtype == torch.bool:  # the kernel takes an additive mask in q's dtype
        full = torch.zeros(full.shape, dtype=q.dtype).masked_fill(~full, float("-inf"))
    qg = q.reshape(B, K_, H // K_ * T, E_) if full is None else q  # (B, K, n_rep T, E): one read per KV head
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        qg, k, v, dropout_p, attn_mask=full, scale=scale)  # (B, K or H, ., Ev), (B, K or H, .)
    return AttentionResult(out.reshape(B, H, T, Ev), None, lse.reshape(B, H, T))


def ratios(runs: Runs, base: str) -> dict[str, float]:
    """``base``'s wall time over each other row's in the same round, the median over the rounds."""
    return rounds.ratios(runs, base, key="seconds")


def on_threads(n: int, fn: Callable[[], torch.Tensor]) -> Callable[[], torch.Tensor]:
    def call() -> torch.Tensor:
        before = torch.get_num_threads()
        torch.set_num_threads(n)
        try:
            return fn()
        finally:
            torch.set_num_threads(before)
    return call


def decode_bytes(B: int, S: int) -> int:
    """Keys and values of a decoding step's cache: ``2 B K S E`` numbers."""
    return 2 * B * K * S * E * BYTES


def prefix_bytes(N: int) -> dict[str, int]:
    """Keys and values each shared-prefix row reads: every request's copy, or the prefix once and the own keys."""
    return {"own_copies": 2 * N * K * (PREFIX + OWN) * E * BYTES,
            "shared_prefix": 2 * K * PREFIX * E * BYTES + 2 * N * K * OWN * E * BYTES}


def decode(B: int, S: int, repeats: int, g: torch.Generator) -> dict[str, object]:
    q = torch.randn(B, H, 1, E, generator=g)  # (B, H, 1, E): one new token per sequence
    k, v = torch.randn(B, K, S, E, generator=g), torch.randn(B, K, S, E, generator=g)  # (B, K, S, E)
    calls = {
        "one_pass": lambda: attention(q, k, v).output,
        "one_pass_1_thread": on_threads(1, lambda: attention(q, k, v).output),
        "split_2": lambda: split_kv_attention(q, k, v, num_splits=2, implementation=BACKEND).output,
        "split_4096": lambda: split_kv_attention(q, k, v, split_size=SPLIT_SIZE, implementation=BACKEND).output,
    }
    with torch.no_grad():
        ref = calls["one_pass"]()
        diff = {row: float((calls[row]() - ref).abs().max()) for row in DECODE_ROWS[1:]}
    assert max(diff.values()) < 1e-4, diff
    runs = round_robin(calls, repeats)
    read = k.nbytes + v.nbytes
    return {"batch": B, "cached": S, "splits": {"split_2": 2, "split_4096": -(-S // SPLIT_SIZE)},
            "bytes_measured": read, "bytes_computed": decode_bytes(B, S), "max_abs_difference": diff,
            "runs": runs, "median_seconds": {r: statistics.median(x["seconds"] for x in v_) for r, v_ in runs.items()},
            "one_pass_over": ratios(runs, "one_pass")}


def shared(N: int, repeats: int, g: torch.Generator) -> dict[str, object]:
    q = torch.randn(N, H, 1, E, generator=g)  # (N, H, 1, E): one new token per request
    pk, pv = torch.randn(1, K, PREFIX, E, generator=g), torch.randn(1, K, PREFIX, E, generator=g)  # one copy
    ok, ov = torch.randn(N, K, OWN, E, generator=g), torch.randn(N, K, OWN, E, generator=g)  # each request's own
    whole_k = torch.cat([pk.expand(N, -1, -1, -1), ok], dim=2)  # (N, K, PREFIX + OWN, E): a copy per request
    whole_v = torch.cat([pv.expand(N, -1, -1, -1), ov], dim=2)
    rows = {
        "own_copies": lambda: attention(q, whole_k, whole_v).output,
        "shared_prefix": lambda: shared_prefix_attention(q, pk, pv, ok, ov, is_causal=False,
                                                         implementation=BACKEND).output,
    }
    with torch.no_grad():
        diff = float((rows["shared_prefix"]() - rows["own_copies"]()).abs().max())
    assert diff < 1e-4, diff
    calls = {**rows, **{f"{r}_1_thread": on_threads(1, fn) for r, fn in rows.items()}}
    runs = round_robin(calls, repeats)
    measured = {"own_copies": whole_k.nbytes + whole_v.nbytes,
                "shared_prefix": pk.nbytes + pv.nbytes + ok.nbytes + ov.nbytes}
    pair = {t: {r: runs[r + t] for r in rows} for t in ("", "_1_thread")}
    return {"requests": N, "bytes_measured": measured, "bytes_computed": prefix_bytes(N), "max_abs_difference": diff,
            "runs": runs, "median_seconds": {r: statistics.median(x["seconds"] for x in v_) for r, v_ in runs.items()},
            "own_copies_over": {"every_core": ratios(pair[""], "own_copies")["shared_prefix"],
                                "one_thread": ratios(pair["_1_thread"], "own_copies")["shared_prefix"]}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small caches, two rounds: check the script")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    if BACKEND not in ATTENTION_FUNCTIONS:  # here, not on import: a test importing this file registers nothing
        register_attention(BACKEND, sdpa_cpu_lse, Supports(lse=True))
    cores = os.cpu_count() or 1
    torch.set_num_threads(cores)
    g = torch.Generator().manual_seed(0)
    repeats = 2 if args.quick else REPEATS
    contexts = [(B, S // 16) for B, S in DECODE] if args.quick else list(DECODE)
    load_before = os.getloadavg()
    started = time.perf_counter()
    dec = []
    for B, S in contexts:
        dec.append(decode(B, S, repeats, g))
        print(f"decoding B={B}, S={S} done", flush=True)
    pre = [shared(N, repeats, g) for N in REQUESTS]
    report = {
        "config": {"num_heads": H, "num_kv_heads": K, "head_dim": E, "dtype": "float32", "device": "cpu",
                   "decode": [list(c) for c in contexts], "prefix": PREFIX, "own": OWN, "requests": list(REQUESTS),
                   "split_size": SPLIT_SIZE, "backend": BACKEND, "repeats": repeats,
                   "goal_shared_over_own_at_32": GOAL_SHARED_32},
        "full_run": not args.quick,
        "machine": rounds.machine(cores, cores, load_before),
        "method": "each part's rows in turn (round-robin) after a warm-up call each; ratio: the median over rounds "
                  "of the baseline's wall time over the row's in the same round; bytes: keys and values read, "
                  "measured from the tensors",
        "decode": dec,
        "shared_prefix": pre,
        "total_seconds": time.perf_counter() - started,
    }
    if not args.quick:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"\nLlama 3 8B attention (H {H}, K {K}, E {E}), float32, {cores} threads, load {load_before[0]:.1f}")
    print(f"  {'decoding':14s} {'ms one pass':>11s} " + " ".join(f"{r:>17s}" for r in DECODE_ROWS[1:]))
    for d in dec:
        r = d["one_pass_over"]
        print(f"  B {d['batch']}, S {d['cached']:>6d} {d['median_seconds']['one_pass'] * 1e3:11.2f} "  # type: ignore[index]
              + " ".join(f"{r[row]:17.2f}" for row in DECODE_ROWS[1:]))  # type: ignore[index]
    for p in pre:
        print(f"  shared prefix, {p['requests']} requests: own copies "
              f"{p['median_seconds']['own_copies'] * 1e3:.1f} ms, shared "  # type: ignore[index]
              f"{p['median_seconds']['shared_prefix'] * 1e3:.1f} ms, "  # type: ignore[index]
              f"{p['own_copies_over']['every_core']:.1f}x (one thread "  # type: ignore[index]
              f"{p['own_copies_over']['one_thread']:.1f}x); MiB read "  # type: ignore[index]
              f"{p['bytes_measured']['own_copies'] / 2**20:.0f} vs "  # type: ignore[index]
              f"{p['bytes_measured']['shared_prefix'] / 2**20:.0f}")  # type: ignore[index]
    print(f"{report['total_seconds']:.0f} s" + (f"; wrote {args.out}" if not args.quick else ""))


if __name__ == "__main__":
    main()
