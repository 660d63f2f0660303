"""Benchmark: attention over chosen keys against dense attention at S = 8,192 and k = 512, on the CPU, in one run.

**Decoding** one token with S positions cached, at DeepSeek-V3.2's published sizes (lessons_src.lab.configs): its
MLA in the absorbed form, token mixing only (no projections), as ``lessons_src.mla``'s absorbed path runs it: the
128 heads' latent queries (512 + 64 numbers each) against the cached rows with SDPA, each row its own key and value.
Three rows, each a different amount of work for one step:

* ``dense``: attention over all S rows of the latent cache;
* ``gathered``: attention over k rows already gathered: the step over the selection alone (what a kernel that
  reads only the picked rows does);
* ``indexed``: the whole sparse step: the lightning indexer (64 heads of 128) scores all S of its keys
  (``lightning_indexer_scores``), the top k are picked (``top_k_mask``), their rows gathered (``gather_selected``,
  which copies the key and the value view of each row) and attended.

Bytes read: the cache rows and indexer keys each step reads, measured from the tensors and computed from the sizes
(``cache_bytes``); the indexer's query and head weights, a few KB made fresh each step, are not counted
(as ``selection_costs`` does not count them).

**Prefill** of T = S positions, 8 heads of 64 (bench_flex.py's sizes: DeepSeek-V3.2's would take minutes per call
on one thread), with a selection of k keys per query chosen in blocks of 128: each block of 128 queries keeps its own
block (causally) and the 3 earlier blocks whose mean key best matches its mean query, averaged over the heads (one
pick shared by the heads, as DeepSeek-V3.2's indexer's is). The selection is made once, untimed; each row times the
attention from the selection's block indices to the output. Four forms:

* ``dense_causal``: ``F.scaled_dot_product_attention(is_causal=True)``: every causal score, the baseline;
* ``dense_mask``: SDPA given the selection as a dense (T, T) bool mask: every score is still computed and then
  masked, so this form cannot beat dense attention: it shows the selection saves nothing in this form;
* ``gathered_blocks``: each query block's 4 key blocks gathered into (B * H, T / 128, 512, E) keys and values, then
  SDPA over them with a (T / 128, 128, 512) bool mask (causal in the query's own block);
* ``flex_block_mask``: ``torch.compile(flex_attention)`` with a ``BlockMask`` made from the block indices
  (``BlockMask.from_kv_blocks``: the own block partial, causal by the mask_mod; the 3 earlier ones full), which
  skips every other tile. Compiled once before the timing (its seconds recorded).

The three forms of the selection are checked to give the same output (their largest difference is recorded). float32,
one thread, batch 1; each part's rows run round-robin after a warm-up call each; each ratio is the median over the
rounds of the dense row's CPU time over the other row's in the same round. The load average before and after is
kept: this is a shared machine.

    python tools/bench/bench_sparse.py                          # writes docs/_data/bench/sparse.json, prints a table
    python tools/bench/bench_sparse.py --context 2048 --repeats 3 --prefill-repeats 2 --out /tmp/s.json   # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import rounds
import torch
import torch.nn.functional as F
from rounds import Runs, round_robin
from torch.nn.attention.flex_attention import BlockMask, flex_attention

from lessons_src.functional import attention
from lessons_src.lab.configs import load_configs
from lessons_src.masks import causal, causal_mask, mask_mod
from lessons_src.sparse_selection import gather_selected, lightning_indexer_scores, top_k_mask

OUT = Path(__file__).resolve().parents[2] / "docs" / "_data" / "bench" / "sparse.json"
MODEL = "DeepSeek-V3.2"
CONTEXT = 8192
TOP_K = 512
DECODE_ROWS = ("dense", "gathered", "indexed")
PREFILL_ROWS = ("dense_causal", "dense_mask", "gathered_blocks", "flex_block_mask")
B, H, E = 1, 8, 64  # prefill: bench_flex.py's sizes
BLOCK = 128  # query and key blocks of the prefill's selection, FlexAttention's tile
CACHE_BYTES = 4  # float32
FORMS = {
    "dense": "SDPA: the heads' latent queries over all S latent rows (MLA absorbed)",
    "gathered": "SDPA over the k latent rows already gathered",
    "indexed": "indexer scores over S keys, top-k, gather_selected, then SDPA over the k rows",
    "dense_causal": "SDPA is_causal=True over the whole causal triangle",
    "dense_mask": "SDPA with the selection as a dense (T, T) bool mask: every score computed, then masked",
    "gathered_blocks": "each query block's k keys gathered, SDPA over them with a (T/128, 128, k) bool mask",
    "flex_block_mask": "compiled flex_attention with a BlockMask from the block indices: unselected tiles skipped",
}


def sizes() -> dict[str, int]:
    """DeepSeek-V3.2's sizes the decoding step uses."""
    cfg = load_configs()[MODEL]
    assert cfg.mla is not None and cfg.sparse is not None
    return {"num_heads": cfg.num_heads, "head_dim": cfg.head_dim, "kv_latent_dim": cfg.mla["kv_latent_dim"],
            "rope_dim": cfg.mla["rope_dim"], "indexer_heads": cfg.sparse["indexer_heads"],
            "indexer_head_dim": cfg.sparse["indexer_head_dim"]}


def decode_bytes(context: int, top_k: int) -> dict[str, int]:
    """Bytes each decoding row reads from the cache: latent rows of ``C + R`` numbers, indexer keys of ``Di``."""
    s = sizes()
    row, key = (s["kv_latent_dim"] + s["rope_dim"]) * CACHE_BYTES, s["indexer_head_dim"] * CACHE_BYTES
    return {"dense": context * row, "gathered": top_k * row, "indexed": context * key + top_k * row}


def selection_pairs(context: int, top_k: int) -> dict[str, int]:
    """Query-key scores each prefill form keeps per head: the causal triangle, or the block selection's."""
    nb, kept = context // BLOCK, top_k // BLOCK
    own = BLOCK * (BLOCK + 1) // 2  # the own block, causally
    selected = sum(own + min(i, kept - 1) * BLOCK * BLOCK for i in range(nb))
    return {"dense_causal": context * (context + 1) // 2, "dense_mask": selected, "gathered_blocks": selected,
            "flex_block_mask": selected}


def ratios(runs: Runs, base: str) -> dict[str, float]:
    """``base``'s CPU time over each other row's in the same round, the median over the rounds."""
    return rounds.ratios(runs, base, key="cpu_seconds")


def decode(context: int, top_k: int, repeats: int, g: torch.Generator) -> dict[str, object]:
    s = sizes()
    Hq, C, R, Hi, Di = s["num_heads"], s["kv_latent_dim"], s["rope_dim"], s["indexer_heads"], s["indexer_head_dim"]
    scale = (s["head_dim"] + R) ** -0.5  # MLA's: each head's query and key have head_dim + rope_dim features
    q = torch.randn(1, 1, Hq, C + R, generator=g)  # the heads' absorbed queries as rows, as mla.py's absorbed path
    kv = torch.randn(1, 1, context, C + R, generator=g)  # the latent cache: [latent | k_rope] per position
    q_index, k_index = torch.randn(1, Hi, 1, Di, generator=g), torch.randn(1, context, Di, generator=g)
    w_index = torch.randn(1, Hi, 1, generator=g) * Hi**-0.5
    pick = top_k_mask(lightning_indexer_scores(q_index, k_index, w_index), top_k)  # (1, 1, 1, S)
    picked, _ = gather_selected(kv, kv, pick)  # (1, 1, k, C + R)

    def indexed() -> torch.Tensor:
        keep = top_k_mask(lightning_indexer_scores(q_index, k_index, w_index), top_k)  # (1, 1, 1, S)
        k_sel, v_sel = gather_selected(kv, kv, keep)  # (1, 1, k, C + R) each
        return attention(q, k_sel, v_sel, scale=scale).output

    calls = {"dense": lambda: attention(q, kv, kv, scale=scale).output,
             "gathered": lambda: attention(q, picked, picked, scale=scale).output,
             "indexed": indexed}
    torch.testing.assert_close(indexed(), calls["gathered"](), rtol=0, atol=0)  # the same pick, the same answer
    runs = round_robin(calls, repeats)
    measured = {"dense": kv.numel() * kv.element_size(), "gathered": picked.numel() * picked.element_size(),
                "indexed": k_index.numel() * k_index.element_size() + picked.numel() * picked.element_size()}
    return {"bytes_measured": measured, "bytes_computed": decode_bytes(context, top_k), "runs": runs,
            "median_cpu_seconds": {row: statistics.median(r["cpu_seconds"] for r in v) for row, v in runs.items()},
            "dense_over": ratios(runs, "dense")}


def block_selection(q: torch.Tensor, k: torch.Tensor, top_k: int) -> torch.Tensor:
    """Each query block's kept key blocks, ``(T / BLOCK, top_k / BLOCK)``: its own first, then its best earlier
    ones by mean query against mean key (averaged over the heads), ``-1`` where it has fewer earlier blocks."""
    T = q.shape[2]
    nb, kept = T // BLOCK, top_k // BLOCK
    q_mean = q.view(B, H, nb, BLOCK, E).mean(3)  # (B, H, nb, E)
    k_mean = k.view(B, H, nb, BLOCK, E).mean(3)  # (B, H, nb, E)
    scores = torch.einsum("bhne,bhme->nm", q_mean, k_mean)  # (nb, nb): summed over the heads
    earlier = torch.arange(nb)[None, :] < torch.arange(nb)[:, None]  # (nb, nb): key block before query block
    best = scores.masked_fill(~earlier, float("-inf")).topk(kept - 1, dim=-1)  # (nb, kept - 1)
    others = best.indices.masked_fill(best.values == float("-inf"), -1)  # no such earlier block: -1
    return torch.cat([torch.arange(nb)[:, None], others], dim=1)  # (nb, kept)


def dense_selection_mask(blocks: torch.Tensor, T: int) -> torch.Tensor:
    """The selection as a ``(T, T)`` bool keep-mask (causal)."""
    nb = T // BLOCK
    chosen = torch.zeros(nb, nb + 1, dtype=torch.bool)  # a spare column takes the -1s
    chosen.scatter_(1, blocks.where(blocks >= 0, nb), True)
    per_block = chosen[:, :nb]  # (nb, nb): query block keeps key block
    return per_block.repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1) & causal_mask(T)  # (T, T)


def gathered_blocks(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, blocks: torch.Tensor) -> torch.Tensor:
    """Attention of each query block over its gathered key blocks; returns ``(B, H, T, E)``."""
    T = q.shape[2]
    nb, kept = blocks.shape
    positions = (blocks.clamp(min=0)[:, :, None] * BLOCK + torch.arange(BLOCK)).view(nb, kept * BLOCK)  # (nb, k)
    valid = (blocks >= 0).repeat_interleave(BLOCK, dim=1)  # (nb, k): a real block
    query_pos = torch.arange(T).view(nb, BLOCK)  # (nb, BLOCK)
    mask = valid[:, None, :] & (positions[:, None, :] <= query_pos[:, :, None])  # (nb, BLOCK, k)
    k_g = k.index_select(2, positions.flatten()).view(B * H, nb, kept * BLOCK, E)  # (B*H, nb, k, E)
    v_g = v.index_select(2, positions.flatten()).view(B * H, nb, kept * BLOCK, E)
    out = F.scaled_dot_product_attention(q.view(B * H, nb, BLOCK, E), k_g, v_g, attn_mask=mask[None])
    return out.view(B, H, T, E)  # (B*H, nb, BLOCK, E) -> (B, H, T, E)


def flex_blocks(blocks: torch.Tensor, T: int) -> BlockMask:
    """A BlockMask of the selection from its block indices: the own block partial (causal), the others full."""
    nb, kept = blocks.shape
    others = blocks[:, 1:]  # (nb, kept - 1)
    full_count = (others >= 0).sum(1).to(torch.int32)  # (nb,)
    full = torch.zeros(nb, nb, dtype=torch.int32)
    full[:, : kept - 1] = others.sort(dim=1, descending=True).values.clamp(min=0).to(torch.int32)  # valid first
    partial = torch.zeros(nb, nb, dtype=torch.int32)
    partial[:, 0] = blocks[:, 0].to(torch.int32)
    return BlockMask.from_kv_blocks(torch.ones(1, 1, nb, dtype=torch.int32), partial[None, None],
                                    full_count[None, None], full[None, None], BLOCK_SIZE=BLOCK,
                                    mask_mod=mask_mod(causal(), T), seq_lengths=(T, T))


def prefill(T: int, top_k: int, repeats: int, g: torch.Generator) -> dict[str, object]:
    q, k, v = (torch.randn(B, H, T, E, generator=g) for _ in range(3))
    blocks = block_selection(q, k, top_k)  # (nb, kept): made once, untimed
    torch._dynamo.reset()
    compiled = torch.compile(flex_attention, dynamic=False)
    start = time.perf_counter()
    with torch.no_grad():
        flex_out = compiled(q, k, v, block_mask=flex_blocks(blocks, T))  # compiles
    compile_s = time.perf_counter() - start
    calls = {
        "dense_causal": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "dense_mask": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=dense_selection_mask(blocks, T)),
        "gathered_blocks": lambda: gathered_blocks(q, k, v, blocks),
        "flex_block_mask": lambda: compiled(q, k, v, block_mask=flex_blocks(blocks, T)),
    }
    with torch.no_grad():
        masked = calls["dense_mask"]()
        differences = {row: float((calls[row]() - masked).abs().max()) for row in ("gathered_blocks",)}
        differences["flex_block_mask"] = float((flex_out - masked).abs().max())
        kept = dense_selection_mask(blocks, T)
    assert max(differences.values()) < 1e-4, differences  # three forms of one selection: one answer
    runs = round_robin(calls, repeats)
    return {"selection_blocks": blocks.tolist(), "compile_seconds": compile_s,
            "pairs_measured": {"dense_causal": int(causal_mask(T).sum()), "dense_mask": int(kept.sum()),
                               "gathered_blocks": int(kept.sum()), "flex_block_mask": int(kept.sum())},
            "pairs_computed": selection_pairs(T, top_k),
            "max_abs_difference_from_dense_mask": differences, "runs": runs,
            "median_cpu_seconds": {row: statistics.median(r["cpu_seconds"] for r in v) for row, v in runs.items()},
            "dense_causal_over": ratios(runs, "dense_causal")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--context", type=int, default=CONTEXT)
    ap.add_argument("--top-k", type=int, default=TOP_K)
    ap.add_argument("--repeats", type=int, default=15, help="rounds of the decoding rows")
    ap.add_argument("--prefill-repeats", type=int, default=5, help="rounds of the prefill rows")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    if args.context % BLOCK or args.top_k % BLOCK or not BLOCK < args.top_k <= args.context:
        ap.error(f"--context and --top-k must be multiples of {BLOCK}, with {BLOCK} < top-k <= context")
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    load_before = os.getloadavg()
    started = time.perf_counter()
    dec = decode(args.context, args.top_k, args.repeats, g)
    print("decoding done", flush=True)
    # Compile into an empty cache, as bench_flex.py does: a warm one would make compile_seconds a lookup.
    with tempfile.TemporaryDirectory(prefix="bench_sparse_inductor_") as cache:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
        pre = prefill(args.context, args.top_k, args.prefill_repeats, g)
    report = {
        "model": MODEL,
        "config": {**sizes(), "context": args.context, "top_k": args.top_k, "cache_bytes": CACHE_BYTES,
                   "prefill": {"batch_size": B, "num_heads": H, "head_dim": E, "block_size": BLOCK},
                   "dtype": "float32", "device": "cpu", "batch_size": 1},
        "full_run": (args.context, args.top_k) == (CONTEXT, TOP_K),
        "machine": rounds.machine(torch.get_num_threads(), os.cpu_count(), load_before),
        "repeats": {"decode": args.repeats, "prefill": args.prefill_repeats},
        "method": "each part's rows in turn (round-robin) after a warm-up call each; ratio: the median over rounds "
                  "of the dense row's CPU time over the other row's in the same round; decoding bytes measured "
                  "from the tensors read; prefill pairs: query-key scores kept per head, counted from the masks",
        "forms": FORMS,
        "decode": dec,
        "prefill": pre,
        "total_seconds": time.perf_counter() - started,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"\n{MODEL}'s decoding step and a prefill, S = {args.context}, k = {args.top_k}, float32, 1 thread, "
          f"load {load_before[0]:.1f}")
    print(f"  {'decoding':18s} {'ms':>9s} {'dense/row':>10s} {'MiB read':>9s}")
    for row in DECODE_ROWS:
        ratio = dec["dense_over"].get(row, 1.0)  # type: ignore[attr-defined]
        print(f"  {row:18s} {dec['median_cpu_seconds'][row] * 1e3:9.2f} {ratio:10.2f} "  # type: ignore[index]
              f"{dec['bytes_measured'][row] / 2**20:9.2f}")  # type: ignore[index]
    print(f"  {'prefill':18s} {'ms':>9s} {'causal/row':>10s} {'pairs':>12s}   (flex compiled in "
          f"{pre['compile_seconds']:.1f} s)")
    for row in PREFILL_ROWS:
        ratio = pre["dense_causal_over"].get(row, 1.0)  # type: ignore[attr-defined]
        print(f"  {row:18s} {pre['median_cpu_seconds'][row] * 1e3:9.1f} {ratio:10.2f} "  # type: ignore[index]
              f"{pre['pairs_measured'][row]:12d}")  # type: ignore[index]
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
