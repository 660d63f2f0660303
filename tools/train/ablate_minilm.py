"""Ablate every head of all-MiniLM-L6-v2, then prune heads in order of least importance (``make ablate``).

A head's importance is how much the sentence embeddings move when that head alone is removed:
``1 - cos(embedding, embedding without the head)``, averaged over ``minilm.PROBE_SENTENCES``. Pruning
then removes heads cumulatively, least important first, and records the same change after each step.
Writes ``lessons_src/lab/artifacts/minilm_ablation.json``; a few seconds of CPU, deterministic.

    python tools/train/ablate_minilm.py
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from lessons_src.lab import minilm
from lessons_src.lab.heads import ablate_heads

ARTIFACTS = Path(__file__).resolve().parents[2] / "lessons_src" / "lab" / "artifacts"
"""Where the committed artifacts live in the source tree (the package ships them from there)."""


def embedding_change(keep: torch.Tensor, base: torch.Tensor) -> float:
    """Mean ``1 - cosine`` between the full model's sentence embeddings and those with ``keep`` applied."""
    model, _ = minilm.load()
    with ablate_heads(model.attentions, keep):
        emb = minilm.sentence_embeddings(minilm.PROBE_SENTENCES)  # (N, D), unit rows
    return float((1 - (emb * base).sum(-1)).mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ARTIFACTS / "minilm_ablation.json")
    args = parser.parse_args()
    torch.set_num_threads(1)
    start = time.perf_counter()
    model, _ = minilm.load()
    L, H = model.cfg.num_layers, model.cfg.num_heads
    base = minilm.sentence_embeddings(minilm.PROBE_SENTENCES)  # (N, D)
    importance = torch.zeros(L, H)
    for layer in range(L):
        for head in range(H):
            keep = torch.ones(L, H)
            keep[layer, head] = 0.0
            importance[layer, head] = embedding_change(keep, base)
    order = sorted(range(L * H), key=lambda i: (float(importance.view(-1)[i]), i))  # least important first
    keep = torch.ones(L, H)
    curve = [{"pruned": 0, "change": 0.0}]
    for n, i in enumerate(order, start=1):
        keep.view(-1)[i] = 0.0
        curve.append({"pruned": n, "change": round(embedding_change(keep, base), 6)})
    report = {
        "model": minilm.HUB_NAME,
        "sha256": minilm.MODEL_SHA256,
        "measure": "mean over PROBE_SENTENCES of 1 - cos(full, ablated) sentence embedding",
        "num_sentences": len(minilm.PROBE_SENTENCES),
        "importance": [[round(float(v), 7) for v in row] for row in importance],
        "prune_order": [[i // H, i % H] for i in order],
        "curve": curve,
        "seconds": round(time.perf_counter() - start, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out} in {report['seconds']} s")


if __name__ == "__main__":
    main()
