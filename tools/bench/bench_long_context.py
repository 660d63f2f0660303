"""Benchmark: long contexts and serving. Paged vs contiguous caches, a rolling cache, cached vs recomputed decoding.

One process, one CPU thread by default (``--threads``), float32, each part timed round-robin (every
variant runs once in turn, repeated), so a busy machine slows all variants alike; the load average is
recorded before and after. Medians are reported, with the ratios the targets are stated in.

1. **Paged vs contiguous decode** (targets: paged step at most 1.3x the contiguous one). B=8 sequences
   whose lengths are spread evenly from 256 to 4,096 (``linspace``), block size 16, 8 heads (MHA), head
   size 64. One decode step = append one token's keys and values to every sequence, then attend. Three
   variants: ``contiguous``: one :class:`~lessons_src.kv_cache.KVCache` per sequence, attention per
   sequence over exactly its length; ``padded``: one ``(B, K, 4096 + steps, E)`` buffer for the batch,
   one attention call with a padding mask (what a contiguous batch does); ``paged``:
   :class:`~lessons_src.paged_cache.PagedKVCache` and :func:`~lessons_src.paged_cache.paged_attention`;
   ``paged, block-major``: the same blocks and steps with the pool stored ``(num_blocks, K, bs, E)``, as
   vLLM's GPU pool is (:func:`block_major_attention`), to show what the layout costs in plain PyTorch.
   Outputs are checked equal before timing.
2. **Memory** of the two caches for ragged batches: B=64 lengths drawn uniformly from 256..4,096
   (``torch.randint``, seed 0); contiguous caches reserve ``max_len = 4096`` per sequence, the paged cache
   holds whole blocks; bytes measured from the tensors, for block sizes 1, 16, 256.
3. **Rolling cache** (target: decode time per token flat within 10% from 1k to 16k tokens of context):
   B=1, 8 heads, head size 64, window 1,024 + 4 sinks, keys rotated with RoPE; the same steps with a
   full :class:`~lessons_src.kv_cache.KVCache` for contrast; timed token by token, round-robin over the
   contexts (the rolling caches among themselves, then the full ones), median per token. Caches are
   filled with random rotated keys (the time of a step does not depend on their values).
4. **Cached vs recomputed decoding** (the pitfall "my KV cache gives no speed-up"): one
   ``MultiHeadAttention`` layer, d_model 512, 8 heads, B=1, prompt lengths 1 to 4,096. Per new token:
   ``recompute`` runs the layer over the whole prefix again; ``cache`` decodes one token with a
   preallocated ``KVCache``; ``cat cache`` grows its keys and values with ``torch.cat`` each step.
   Prefill time is measured too, to show when a workload is prefill-dominated.

    python tools/bench/bench_long_context.py     # writes docs/_data/bench/long_context.json, prints a summary
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
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from lessons_src import MultiHeadAttention
from lessons_src.functional import attention
from lessons_src.kv_cache import KVCache, RollingKVCache, kv_bytes_per_token
from lessons_src.masks import padding_mask
from lessons_src.paged_cache import PagedKVCache, block_runs, paged_attention
from lessons_src.rope import apply_rope, rope_cos_sin

if TYPE_CHECKING:
    from collections.abc import Callable

OUT = Path(__file__).resolve().parents[2] / "docs" / "_data" / "bench" / "long_context.json"
DTYPE = torch.float32
TARGETS = {"paged_over_contiguous": 1.3, "rolling_spread": 0.10}


def median_ms(ts: list[float]) -> float:
    return statistics.median(ts) * 1e3


def round_robin(fns: dict[str, Callable[[], object]], repeats: int, warmup: int = 1) -> dict[str, float]:
    """Median milliseconds of each function, called in turn ``repeats`` times (after ``warmup`` rounds)."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for r in range(warmup + repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            if r >= warmup:
                times[name].append(time.perf_counter() - t0)
    return {name: median_ms(ts) for name, ts in times.items()}


# --------------------------------------------------------------------------- 1. paged vs contiguous


def block_major_attention(q: Tensor, k_pool: Tensor, v_pool: Tensor, cache: PagedKVCache, ids: list[int]) -> Tensor:
    """``paged_attention``'s decode step (T = 1) over a block-major pool ``(num_blocks, K, bs, E)``.

    The same pieces (runs of at least 4 blocks read in place, the rest gathered), but a run is no longer
    one stretch of keys per head: its scores are one small product per block and head.
    """
    B, H, _, E = q.shape
    K, bs = cache.num_kv_heads, cache.block_size
    q = (q / math.sqrt(E)).reshape(B, K, H // K, E)
    out = torch.empty(B, K, H // K, v_pool.shape[-1])
    for b, seq in enumerate(ids):
        table, L = cache.block_tables[seq], cache.lengths[seq]
        pieces, scattered, i = [], [], 0
        for start, n in block_runs(table):
            if n >= 4:
                pieces.append((k_pool[start : start + n], v_pool[start : start + n], range(i, i + n)))
            else:
                scattered.extend(range(i, i + n))
            i += n
        if scattered:
            blocks = torch.tensor([table[j] for j in scattered])
            pieces.append((k_pool.index_select(0, blocks), v_pool.index_select(0, blocks), scattered))
        scores = []
        for k, _, where in pieces:
            s = q[b] @ k.transpose(-2, -1)  # (n, K, R, bs): a product per block and head
            if where[-1] == len(table) - 1:  # the last block: hide its unused positions
                s[-1, ..., L - (len(table) - 1) * bs :] = float("-inf")
            scores.append(s.permute(1, 2, 0, 3).reshape(K, H // K, -1))  # (K, R, n * bs), a copy
        p = torch.softmax(torch.cat(scores, dim=-1), dim=-1)
        acc, i = None, 0
        for k, v, _ in pieces:
            n = k.shape[0]
            w = p[..., i : i + n * bs].reshape(K, H // K, n, bs).permute(2, 0, 1, 3)  # (n, K, R, bs)
            part = (w @ v).sum(dim=0)  # (K, R, Ev)
            acc = part if acc is None else acc + part
            i += n * bs
        out[b] = acc
    return out.reshape(B, H, 1, -1)


def paged_vs_contiguous(steps: int, B: int = 8, H: int = 8, E: int = 64, block: int = 16) -> dict[str, Any]:
    lengths = [int(n) for n in torch.linspace(256, 4096, B).round()]
    g = torch.Generator().manual_seed(0)
    max_len = max(lengths) + steps + 1
    own = [KVCache(1, H, E, max_len) for _ in lengths]
    padded_k, padded_v = torch.zeros(B, H, max_len, E), torch.zeros(B, H, max_len, E)
    pool = PagedKVCache(sum(math.ceil((n + steps + 1) / block) for n in lengths), block, H, E)
    for s, n in enumerate(lengths):
        k, v = torch.randn(H, n, E, generator=g), torch.randn(H, n, E, generator=g)
        own[s].update(k[None], v[None])
        padded_k[s, :, :n], padded_v[s, :, :n] = k, v
        pool.add_sequence(s)
        pool.append(s, k, v)
    ids = list(range(B))
    length = list(lengths)  # the padded buffer's own bookkeeping

    def new_token() -> tuple[Tensor, Tensor, Tensor]:
        return (torch.randn(B, H, 1, E, generator=g), torch.randn(B, H, 1, E, generator=g),
                torch.randn(B, H, 1, E, generator=g))

    def contiguous(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        outs = []
        for s, cache in enumerate(own):
            ks, vs = cache.update(k[s : s + 1], v[s : s + 1])
            outs.append(attention(q[s : s + 1], ks, vs).output)
        return torch.cat(outs)

    def padded(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        rows = torch.arange(B)
        pos = torch.tensor(length)
        padded_k[rows, :, pos], padded_v[rows, :, pos] = k[:, :, 0], v[:, :, 0]
        for s in range(B):
            length[s] += 1
        S = max(length)
        mask = padding_mask(length, S)  # (B, 1, 1, S)
        return attention(q, padded_k[:, :, :S], padded_v[:, :, :S], attn_mask=mask).output

    def paged(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        for s in ids:
            pool.append(s, k[s], v[s])
        return paged_attention(q, pool, ids)

    # the same blocks stored block-major, (num_blocks, K, block_size, E), as vLLM's GPU pool is
    block_k, block_v = pool.k.transpose(0, 1).contiguous(), pool.v.transpose(0, 1).contiguous()

    def block_major(q: Tensor, k: Tensor, v: Tensor) -> Tensor:  # runs after paged: the tables hold the token
        for s in ids:
            L = pool.lengths[s]
            block_k[pool.block_tables[s][(L - 1) // block], :, (L - 1) % block] = k[s, :, 0]
            block_v[pool.block_tables[s][(L - 1) // block], :, (L - 1) % block] = v[s, :, 0]
        return block_major_attention(q, block_k, block_v, pool, ids)

    with torch.inference_mode():
        q, k, v = new_token()  # one step of each, checked equal, before timing
        variants = (
            ("contiguous", contiguous), ("padded", padded), ("paged", paged), ("paged, block-major", block_major)
        )
        outs = {name: fn(q, k, v) for name, fn in variants}
        for name, out in outs.items():
            torch.testing.assert_close(out, outs["contiguous"], atol=1e-5, rtol=1e-4, msg=name)
        times: dict[str, list[float]] = {name: [] for name, _ in variants}
        for _ in range(steps):
            q, k, v = new_token()
            for name, fn in variants:
                t0 = time.perf_counter()
                fn(q, k, v)
                times[name].append(time.perf_counter() - t0)
    ms = {name: median_ms(ts) for name, ts in times.items()}
    allocated = {  # bytes of the tensors each variant allocated, and what the tokens in it need
        "contiguous": sum(c.k.nbytes + c.v.nbytes for c in own),
        "padded": padded_k.nbytes + padded_v.nbytes,
        "paged": pool.k.nbytes + pool.v.nbytes,
        "paged, block-major": block_k.nbytes + block_v.nbytes,
    }
    return {
        "config": {"B": B, "lengths_at_start": lengths, "block_size": block, "num_heads": H, "num_kv_heads": H,
                   "head_dim": E, "steps": steps, "dtype": "float32"},
        "ms_per_step": ms,
        "bytes_allocated": allocated,
        "bytes_paged_blocks_held": pool.nbytes,
        "bytes_tokens": sum(c.nbytes for c in own),
        "paged_over_contiguous": ms["paged"] / ms["contiguous"],
        "paged_over_padded": ms["paged"] / ms["padded"],
        "block_major_over_paged": ms["paged, block-major"] / ms["paged"],
        "padded_over_contiguous": ms["padded"] / ms["contiguous"],
    }


# --------------------------------------------------------------------------- 2. memory


def memory(B: int = 64, H: int = 8, E: int = 64, max_len: int = 4096) -> dict[str, Any]:
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(256, max_len + 1, (B,), generator=g).tolist()
    per_token = kv_bytes_per_token(H, E, DTYPE)
    tokens = sum(lengths)
    contiguous = KVCache(B, H, E, max_len, device="meta")  # the reservation only: allocated on no device
    reserved = contiguous.k.numel() * contiguous.k.element_size() + contiguous.v.numel() * contiguous.v.element_size()
    paged: dict[str, Any] = {}
    for block in (1, 16, 256):
        pool = PagedKVCache(sum(math.ceil(n / block) for n in lengths), block, H, E, device="meta")
        for s, n in enumerate(lengths):
            pool.add_sequence(s)
            pool.append(s, torch.empty(H, n, E, device="meta"), torch.empty(H, n, E, device="meta"))
        paged[str(block)] = {"bytes": pool.nbytes, "waste_fraction": 1 - tokens * per_token / pool.nbytes}
    return {
        "config": {"B": B, "lengths": "uniform integers in [256, 4096], torch.randint, seed 0", "max_len": max_len,
                   "num_kv_heads": H, "head_dim": E, "dtype": "float32"},
        "tokens": tokens,
        "bytes_per_token": per_token,
        "needed_bytes": tokens * per_token,
        "contiguous_reserved_bytes": reserved,
        "contiguous_waste_fraction": 1 - tokens * per_token / reserved,
        "paged": paged,
    }


# --------------------------------------------------------------------------- 3. rolling cache


def rolling(steps: int, repeats: int, window: int = 1024, sinks: int = 4, H: int = 8, E: int = 64) -> dict[str, Any]:
    contexts = [1024, 2048, 4096, 8192, 16384]
    g = torch.Generator().manual_seed(0)
    total = max(contexts) + (repeats + 1) * steps + 1
    cos, sin = rope_cos_sin(torch.arange(total), E)
    caches: dict[str, Any] = {}
    with torch.inference_mode():
        for n in contexts:
            r, f = RollingKVCache(1, H, E, window, sink_tokens=sinks), KVCache(1, H, E, total)
            for start in range(0, n, 1024):  # fill in chunks, keys rotated by their positions
                rows = slice(start, start + 1024)
                k = apply_rope(torch.randn(1, H, 1024, E, generator=g), cos[rows], sin[rows])
                v = torch.randn(1, H, 1024, E, generator=g)
                r.update(k, v)
                f.update(k, v)
            caches[f"rolling {n}"], caches[f"full {n}"] = r, f
    held = {name: c.nbytes for name, c in caches.items()}  # after filling, before the timed steps add tokens

    def step(cache: RollingKVCache | KVCache) -> None:
        p = cache.length
        q = apply_rope(torch.randn(1, H, 1, E), cos[p : p + 1], sin[p : p + 1])
        k = apply_rope(torch.randn(1, H, 1, E), cos[p : p + 1], sin[p : p + 1])
        v = torch.randn(1, H, 1, E)
        if isinstance(cache, RollingKVCache):
            u = cache.update(k, v)
            attention(q, u.k, u.v, attn_mask=u.mask)
        else:
            ks, vs = cache.update(k, v)
            attention(q, ks, vs)

    samples: dict[str, list[float]] = {name: [] for name in caches}
    with torch.inference_mode():
        for kind in ("rolling", "full"):  # each kind among itself: a full cache's step would evict the others
            group = {name: c for name, c in caches.items() if name.startswith(kind)}
            for r in range(repeats + 1):  # round-robin token by token: a burst of load hits every context alike
                for _ in range(steps):
                    for name, c in group.items():
                        t0 = time.perf_counter()
                        step(c)
                        if r:  # the first round warms up (and fills the window's last empty slots)
                            samples[name].append(time.perf_counter() - t0)
    per_token = {name: median_ms(ts) for name, ts in samples.items()}
    roll = [per_token[f"rolling {n}"] for n in contexts]
    return {
        "config": {"B": 1, "num_heads": H, "head_dim": E, "window": window, "sinks": sinks, "contexts": contexts,
                   "steps": steps, "repeats": repeats, "dtype": "float32"},
        "ms_per_token": per_token,
        "rolling_spread": max(roll) / min(roll) - 1,
        "rolling_bytes": {str(n): held[f"rolling {n}"] for n in contexts},
        "full_bytes": {str(n): held[f"full {n}"] for n in contexts},
    }


# --------------------------------------------------------------------------- 4. cached vs recomputed


class CatCache:
    """The cache people write first: keys and values grown with ``torch.cat`` (a copy of everything, every step)."""

    def __init__(self) -> None:
        self.k: Tensor | None = None
        self.v: Tensor | None = None

    def step(self, mha: MultiHeadAttention, x: Tensor) -> Tensor:
        q, k, v = mha.project_qkv(x)  # (B, H, T, E)
        self.k = k if self.k is None else torch.cat([self.k, k], dim=2)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=2)
        y = attention(q, self.k, self.v, is_causal=True).output  # (B, H, T, E)
        out: Tensor = mha.out_proj(y.transpose(1, 2).reshape(x.shape))
        return out


def cache_vs_recompute(repeats: int, D: int = 512, H: int = 8) -> dict[str, Any]:
    prompts = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
    torch.manual_seed(0)
    mha = MultiHeadAttention(D, H).eval()
    x = torch.randn(1, max(prompts) + 1, D)
    result: dict[str, dict[str, float]] = {}
    with torch.inference_mode():
        for P in prompts:
            cache = KVCache(1, H, D // H, P + 1 + 64)
            cat = CatCache()
            mha(x[:, :P], is_causal=True, cache=cache)
            cat.step(mha, x[:, :P])
            ref = mha(x[:, : P + 1], is_causal=True)[:, -1:]
            a = mha(x[:, P : P + 1], is_causal=True, cache=cache)
            b = cat.step(mha, x[:, P : P + 1])
            torch.testing.assert_close(a, ref, atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(b, ref, atol=1e-4, rtol=1e-4)
            cache.length, cat.k, cat.v = P, cat.k[:, :, :P], cat.v[:, :, :P]  # type: ignore[index]

            def cached(c: KVCache = cache, p: int = P) -> None:
                c.length = p  # decode the same token again: the step's cost depends only on the length
                mha(x[:, p : p + 1], is_causal=True, cache=c)

            def catted(c: CatCache = cat, p: int = P) -> None:
                assert c.k is not None and c.v is not None
                c.k, c.v = c.k[:, :, :p], c.v[:, :, :p]
                c.step(mha, x[:, p : p + 1])

            def prefill(p: int = P) -> None:
                mha(x[:, :p], is_causal=True, cache=KVCache(1, H, D // H, p))

            fns = {
                "recompute": lambda p=P: mha(x[:, : p + 1], is_causal=True),
                "cache": cached,
                "cat cache": catted,
                "prefill": prefill,
            }
            result[str(P)] = round_robin(fns, repeats)
    crossover = next((P for P in prompts if result[str(P)]["recompute"] > 1.5 * result[str(P)]["cache"]), None)
    return {
        "config": {"d_model": D, "num_heads": H, "B": 1, "prompts": prompts, "repeats": repeats, "dtype": "float32"},
        "ms": result,
        "speedup": {P: r["recompute"] / r["cache"] for P, r in result.items()},
        "crossover_prompt": crossover,
        "crossover_rule": "the shortest prompt at which recomputing the prefix takes over 1.5x a cached step",
    }


# --------------------------------------------------------------------------- report


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--paged-steps", type=int, default=120)
    ap.add_argument("--rolling-steps", type=int, default=60)
    ap.add_argument("--repeats", type=int, default=11)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    report: dict[str, Any] = {
        "machine": {"torch": torch.__version__, "threads": torch.get_num_threads(), "processor": platform.machine(),
                    "python": platform.python_version(), "cpus": os.cpu_count()},
        "targets": TARGETS,
        "paged": paged_vs_contiguous(args.paged_steps),
        "memory": memory(),
        "rolling": rolling(args.rolling_steps, args.repeats),
        "recompute": cache_vs_recompute(args.repeats),
    }
    report["load_average"] = {"before": list(load_before), "after": list(os.getloadavg())}
    report["seconds"] = round(time.perf_counter() - t0, 1)
    report["targets_met"] = {
        "paged_over_contiguous": report["paged"]["paged_over_contiguous"] <= TARGETS["paged_over_contiguous"],
        "rolling_spread": report["rolling"]["rolling_spread"] <= TARGETS["rolling_spread"],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    p, r, c = report["paged"], report["rolling"], report["recompute"]
    first, last = p["config"]["lengths_at_start"][0], p["config"]["lengths_at_start"][-1]
    print(f"paged vs contiguous decode (B=8, lengths {first}..{last}):")
    for name, ms in p["ms_per_step"].items():
        print(f"  {name:11s} {ms:7.2f} ms per step")
    print(f"  paged / contiguous {p['paged_over_contiguous']:.2f}x (target <= {TARGETS['paged_over_contiguous']}), "
          f"paged / padded {p['paged_over_padded']:.2f}x")
    m = report["memory"]
    print(f"memory, B=64 ragged: needed {m['needed_bytes'] / 2**20:.0f} MiB, contiguous reserves "
          f"{m['contiguous_reserved_bytes'] / 2**20:.0f} MiB ({m['contiguous_waste_fraction']:.0%} waste), paged (16) "
          f"{m['paged']['16']['bytes'] / 2**20:.0f} MiB ({m['paged']['16']['waste_fraction']:.1%} waste)")
    print("rolling cache, ms per token: " + ", ".join(
        f"{n}: {r['ms_per_token'][f'rolling {n}']:.3f} (full {r['ms_per_token'][f'full {n}']:.3f})"
        for n in r["config"]["contexts"]))
    print(f"  spread {r['rolling_spread']:.1%} (target <= {TARGETS['rolling_spread']:.0%})")
    print("cached vs recomputed, ms per new token:")
    for P, row in c["ms"].items():
        print(f"  prompt {P:>5s}: recompute {row['recompute']:8.3f}  cache {row['cache']:7.3f}  "
              f"cat {row['cat cache']:7.3f}  prefill {row['prefill']:8.3f}")
    print(f"  crossover: {c['crossover_prompt']} ({c['crossover_rule']})")
    print(f"{report['seconds']} s; load average {report['load_average']}; wrote {args.out}")


if __name__ == "__main__":
    main()
