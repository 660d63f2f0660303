"""Benchmark: incremental decoding with a cache for MHA, GQA, MQA and MLA (one layer), as ratios to MHA.

B=8, d_model=512, 8 query heads, a 2048-token prompt then 256 new tokens one at a time, float32 on CPU.
Variants: MHA (8 KV heads), GQA (2 KV heads), MQA (1 KV head), all ``lessons_src.MultiHeadAttention``
with a ``KVCache``; MLA (``MultiHeadLatentAttention``, d_c=256, d_h^R=32, head and value size 64) with a
``LatentCache``, decoded in absorbed mode and, for comparison, in naive mode (timed on every 16th token
only, as it is slow; the other steps fill its cache in absorbed mode, which writes the same cache). MLA
prefill runs in naive mode, values padded so SDPA keeps its fused kernel; an extra MLA prefill without
that padding (timed twice only) shows what the slow math kernel costs.

One CPU thread by default (``--threads``): a decoding step lasts milliseconds, and on a shared machine
the synchronisation of several threads per operation can take longer than the work, which swamps the
differences being measured; one thread gives stable ratios.

Timing is round-robin in one process: prefill, one call of each variant in turn, repeated; decoding,
every variant advances one token in turn, so at each step all of them attend over the same number of
cached positions. The report gives medians (per decoded token, per prefill) and ratios to MHA. Cache
bytes are measured from the cache tensors after the run and checked to equal the formula exactly.

    python tools/bench/bench_decode.py          # writes lessons_src/lab/artifacts/decode_bench.json and prints a table
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import Tensor

from lessons_src import MultiHeadAttention
from lessons_src.kv_cache import KVCache, LatentCache, kv_bytes_per_token, latent_bytes_per_token
from lessons_src.mla import MultiHeadLatentAttention

if TYPE_CHECKING:
    from collections.abc import Callable

OUT = Path(__file__).resolve().parents[2] / "lessons_src" / "lab" / "artifacts" / "decode_bench.json"
B, D, H, PROMPT, NEW = 8, 512, 8, 2048, 256
C, R = 256, 32  # MLA latent and RoPE sizes
DTYPE = torch.float32


class UnpaddedMLA(MultiHeadLatentAttention):
    """MLA whose naive path hands SDPA values narrower than the keys (what the padding avoids)."""

    def _naive(self, q_nope: Tensor, q_rope: Tensor, kv: Tensor, mask: Tensor | None) -> Tensor:
        B_, H_, T, _ = q_nope.shape
        S, E, Ev = kv.shape[1], self.head_dim, self.v_head_dim
        latent, k_rope = kv[..., : self.kv_latent_dim], kv[..., self.kv_latent_dim :]
        k_nope = self.k_up_proj(latent).view(B_, S, H_, E).transpose(1, 2)
        v = self.v_up_proj(latent).view(B_, S, H_, Ev).transpose(1, 2)
        k = torch.cat([k_nope, k_rope[:, None].expand(B_, H_, S, self.rope_dim)], dim=-1)
        q = torch.cat([q_nope, q_rope], dim=-1)
        out: Tensor = F.scaled_dot_product_attention(q, k, v, is_causal=T == S, scale=self.scale)
        return out


class Variant:
    """One attention layer with its cache: ``prefill(x)`` then ``step(x)`` per new token."""

    def __init__(self, name: str, layer: torch.nn.Module, make_cache: Callable[[], Any], **kw: Any) -> None:
        self.name, self.layer, self.make_cache = name, layer.eval(), make_cache
        self.prefill_kw, self.step_kw = kw.get("prefill_kw", {}), kw.get("step_kw", {})
        self.formula_per_token: int = kw["formula_per_token"]
        self.timed_every: int = kw.get("timed_every", 1)
        self.untimed_kw: dict[str, Any] = kw.get("untimed_kw", self.step_kw)
        self.cache = make_cache()

    def prefill(self, x: Tensor) -> None:
        self.cache = self.make_cache()
        self.layer(x, cache=self.cache, **self.prefill_kw)

    def step(self, x: Tensor, timed: bool = True) -> None:
        self.layer(x, cache=self.cache, **(self.step_kw if timed else self.untimed_kw))


def make_variants(max_len: int) -> dict[str, Variant]:
    torch.manual_seed(0)
    E = D // H
    out: dict[str, Variant] = {}
    for name, K in (("MHA", H), ("GQA-2", 2), ("MQA", 1)):
        out[name] = Variant(
            name,
            MultiHeadAttention(D, H, num_kv_heads=K),
            lambda K=K: KVCache(B, K, E, max_len, dtype=DTYPE),
            prefill_kw={"is_causal": True},
            step_kw={"is_causal": True},
            formula_per_token=kv_bytes_per_token(K, E, DTYPE),
        )
    mla = MultiHeadLatentAttention(D, H, kv_latent_dim=C, rope_dim=R)
    for name, mode, every in (("MLA absorbed", "absorbed", 1), ("MLA naive", "naive", 16)):
        out[name] = Variant(
            name,
            mla,
            lambda: LatentCache(B, C, R, max_len, dtype=DTYPE),
            prefill_kw={"mode": "naive"},
            step_kw={"mode": mode},
            untimed_kw={"mode": "absorbed"},
            timed_every=every,
            formula_per_token=latent_bytes_per_token(C, R, DTYPE),
        )
    return out


def median_ms(ts: list[float]) -> float:
    return statistics.median(ts) * 1e3


def run(prompt: int, new: int, repeats: int, prefill_repeats: int) -> dict[str, Any]:
    variants = make_variants(prompt + new)
    unpadded = UnpaddedMLA(D, H, kv_latent_dim=C, rope_dim=R).eval()
    unpadded.load_state_dict(variants["MLA absorbed"].layer.state_dict())
    g = torch.Generator().manual_seed(1)
    x = torch.randn(B, prompt, D, generator=g, dtype=DTYPE)
    tokens = torch.randn(new, B, 1, D, generator=g, dtype=DTYPE)
    prefill_s: dict[str, list[float]] = {n: [] for n in (*variants, "MLA unpadded")}
    decode_s: dict[str, list[float]] = {n: [] for n in variants}
    with torch.inference_mode():
        for _ in range(prefill_repeats):  # round-robin prefills
            for name, var in variants.items():
                if name == "MLA naive":  # same layer and prefill as "MLA absorbed"
                    continue
                t0 = time.perf_counter()
                var.prefill(x)
                prefill_s[name].append(time.perf_counter() - t0)
            if len(prefill_s["MLA unpadded"]) < 2:  # slow, and only there to show why values are padded
                t0 = time.perf_counter()
                unpadded(x, cache=LatentCache(B, C, R, prompt, dtype=DTYPE))
                prefill_s["MLA unpadded"].append(time.perf_counter() - t0)
        prefill_s["MLA naive"] = prefill_s["MLA absorbed"]
        for _ in range(repeats):  # round-robin decoding, one token each in turn
            for var in variants.values():
                var.prefill(x)
                var.step(tokens[0])  # warm-up token, not timed
            for i in range(1, new):
                for name, var in variants.items():
                    if i % var.timed_every:
                        var.step(tokens[i], timed=False)
                        continue
                    t0 = time.perf_counter()
                    var.step(tokens[i])
                    decode_s[name].append(time.perf_counter() - t0)
    cache: dict[str, dict[str, int]] = {}
    for name, var in variants.items():
        measured = var.cache.nbytes
        formula = B * (prompt + new) * var.formula_per_token
        if measured != formula:
            raise AssertionError(f"{name}: cache holds {measured} bytes, formula says {formula}")
        cache[name] = {"bytes_per_token": var.formula_per_token, "measured_bytes": measured, "formula_bytes": formula}
    prefill = {n: median_ms(ts) for n, ts in prefill_s.items()}
    decode = {n: median_ms(ts) for n, ts in decode_s.items()}
    return {
        "prefill_ms": prefill,
        "decode_ms_per_token": decode,
        "prefill_ratio_to_mha": {n: v / prefill["MHA"] for n, v in prefill.items()},
        "decode_speedup_vs_mha": {n: decode["MHA"] / v for n, v in decode.items()},
        "cache": cache,
        "cache_ratio_to_mha": {n: c["measured_bytes"] / cache["MHA"]["measured_bytes"] for n, c in cache.items()},
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompt", type=int, default=PROMPT)
    ap.add_argument("--new", type=int, default=NEW)
    ap.add_argument("--repeats", type=int, default=2, help="full generations per variant")
    ap.add_argument("--prefill-repeats", type=int, default=9)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    result = run(args.prompt, args.new, args.repeats, args.prefill_repeats)
    report = {
        "config": {
            "B": B,
            "d_model": D,
            "num_heads": H,
            "head_dim": D // H,
            "num_kv_heads": {"MHA": H, "GQA-2": 2, "MQA": 1},
            "mla": {"kv_latent_dim": C, "rope_dim": R, "v_head_dim": D // H},
            "prompt": args.prompt,
            "new_tokens": args.new,
            "dtype": "float32",
            "layers": 1,
        },
        "machine": {
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "processor": platform.machine(),
            "python": platform.python_version(),
        },
        "repeats": args.repeats,
        "prefill_repeats": args.prefill_repeats,
        **result,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    print(
        f"Decoding one layer, B={B} d_model={D} h={H}, prompt {args.prompt} + {args.new} new tokens, float32, "
        f"{torch.get_num_threads()} threads"
    )
    vs = f"{'vs MHA':>7s}"
    print(f"  {'variant':14s} {'decode/token':>13s} {vs} {'prefill':>10s} {vs} {'cache':>10s} {vs}")
    for name, ms in result["decode_ms_per_token"].items():
        c = result["cache"][name]["measured_bytes"]
        print(
            f"  {name:14s} {ms:10.2f} ms {result['decode_speedup_vs_mha'][name]:6.2f}x "
            f"{result['prefill_ms'][name]:7.0f} ms {result['prefill_ratio_to_mha'][name]:6.2f}x "
            f"{c / 2**20:6.1f} MiB {result['cache_ratio_to_mha'][name]:6.3f}x"
        )
    print(
        f"  MLA prefill without padding the values: {result['prefill_ms']['MLA unpadded']:.0f} ms "
        f"({result['prefill_ratio_to_mha']['MLA unpadded']:.2f}x MHA)"
    )
    print("  decode 'vs MHA' is a speed-up (MHA time / variant time); the others are ratios to MHA")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
