"""`make parallel`: tensor-parallel, Ulysses and ring attention in 2 and 4 local processes, checked and counted.

Larger than the unit tests (which run in `make test`): a layer of width 256 with 16 query heads, 512
positions, MHA, GQA and MQA; ring attention causal and not, contiguous and zig-zag. For each world size it
prints the largest difference from one process, the bytes rank 0 sent per collective against the formula,
the ring's work per rank and the launch's wall time. Exits non-zero if a check fails.
"""

from __future__ import annotations

import time

import torch

from lessons_src import MultiHeadAttention
from lessons_src.functional import attention
from lessons_src.lab.launch import launch
from lessons_src.lab.parallel_runs import combined_run
from lessons_src.ring import unshard_sequence

D, H, B, T = 256, 16, 2, 512


def main() -> int:
    failures = 0
    torch.manual_seed(0)
    layers = []
    for K in (16, 4, 1):
        full = MultiHeadAttention(D, H, num_kv_heads=K, bias=True)
        layers.append((full, {"config": {"d_model": D, "num_heads": H, "num_kv_heads": K, "bias": True},
                              "state": full.state_dict(), "x": torch.randn(B, T, D),
                              "grad_out": torch.randn(B, T, D), "is_causal": True}))
    ring = [{"q": torch.randn(B, 4, T, 32), "k": torch.randn(B, 2, T, 32), "v": torch.randn(B, 2, T, 32),
             "grad_out": torch.randn(B, 4, T, 32), "grad_lse": torch.zeros(B, 4, T), "is_causal": causal,
             "order": order} for causal in (False, True) for order in ("contiguous", "zigzag")]
    for P in (2, 4):
        start = time.perf_counter()
        cases = [c for _, c in layers]
        res = launch(combined_run, P, {"tp": cases, "ulysses": cases, "ring": ring}, timeout_s=600)
        print(f"P={P}: launch and all checks {time.perf_counter() - start:.1f} s")
        for i, (full, case) in enumerate(layers):
            x = case["x"].clone().requires_grad_(True)
            y = full(x, is_causal=True)
            full.zero_grad()
            y.backward(case["grad_out"])
            tp = max((r["tp"][i]["output"] - y).abs().max().item() for r in res)
            uly = (unshard_sequence([r["ulysses"][i]["output"] for r in res], dim=1) - y).abs().max().item()
            grads = max((res[0]["tp"][i]["grads"][n] - p.grad).abs().max().item() for n, p in full.named_parameters())
            sent = [rec.sent_bytes for rec in res[0]["tp"][i]["forward"]]
            formula = 2 * (P - 1) * B * T * D * 4 // P
            ok = tp < 1e-4 and uly < 1e-4 and grads < 1e-3 and sent == [formula]
            failures += not ok
            print(f"  K={case['config']['num_kv_heads']:2d}: |TP - one process| {tp:.1e} (grads {grads:.1e}), "
                  f"|Ulysses - one process| {uly:.1e}; TP all-reduce sent {sent} B, formula {formula}"
                  f"{'' if ok else '  FAILED'}")
        for i, case in enumerate(ring):
            q, k, v = (case[n].clone().requires_grad_(True) for n in ("q", "k", "v"))
            ref = attention(q, k, v, is_causal=case["is_causal"]).output
            ref.backward(case["grad_out"])
            out = unshard_sequence([r["ring"][i]["output"] for r in res], dim=2, order=case["order"])
            diff = (out - ref).abs().max().item()
            grad = max((unshard_sequence([r["ring"][i]["grads"][n] for r in res], dim=2, order=case["order"])
                        - t.grad).abs().max().item() for n, t in (("q", q), ("k", k), ("v", v)) if t.grad is not None)
            failures += diff > 1e-4 or grad > 1e-3
            print(f"  ring causal={case['is_causal']!s:5s} {case['order']:10s}: |ring - full| {diff:.1e} "
                  f"(grads {grad:.1e}); work per rank {[r['ring'][i]['work'] for r in res]}")
    print("all checks passed" if not failures else f"{failures} check(s) FAILED")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
