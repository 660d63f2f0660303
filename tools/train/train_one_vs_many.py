"""One head vs many at the same d_model (``make train-heads``): train h = 1, 2, 4, 8 on the neighbour-pair task.

Every model has one block (our MultiHeadAttention, bidirectional, then a ReLU MLP) with the same
d_model, so the same number of parameters; only how d_model is split into heads differs. Each head count
is trained from several seeds; held-out accuracy and loss go to ``lessons_src/lab/artifacts/one_vs_many_heads.json``.

    python tools/train/train_one_vs_many.py
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path

import torch
import torch.nn.functional as F

from lessons_src.lab.toy_models import TinyConfig, TinyTransformer, neighbour_pair_batch

VOCAB = 16
SEQ_LEN = 12
D_MODEL = 32
D_FF = 128
HEADS = (1, 2, 4, 8)
SEEDS = (0, 1, 2)
STEPS = 600
EVAL_EVERY = 50
BATCH = 64
LR = 3e-3
EVAL_BATCH = 1024

ARTIFACTS = Path(__file__).resolve().parents[2] / "lessons_src" / "lab" / "artifacts"
"""Where the committed artifacts live in the source tree (the package ships them from there)."""


def config(num_heads: int) -> TinyConfig:
    return TinyConfig(
        vocab_size=VOCAB, d_model=D_MODEL, num_heads=num_heads, num_layers=1, max_len=SEQ_LEN,
        d_ff=D_FF, causal=False, num_outputs=VOCAB**2,
    )


def train_one(num_heads: int, seed: int, steps: int) -> dict[str, object]:
    torch.manual_seed(seed)
    model = TinyTransformer(config(num_heads))
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.01)
    data = torch.Generator().manual_seed(1000 + seed)
    eval_tokens, eval_targets = neighbour_pair_batch(torch.Generator().manual_seed(99), EVAL_BATCH, SEQ_LEN, VOCAB)
    curve = []
    start = time.perf_counter()
    for step in range(steps + 1):
        if step % EVAL_EVERY == 0:
            model.eval()
            with torch.no_grad():
                logits, _ = model(eval_tokens)
            accuracy = (logits.argmax(-1) == eval_targets).float().mean().item()
            curve.append({"step": step, "accuracy": round(accuracy, 5)})
            model.train()
        if step == steps:
            break
        tokens, targets = neighbour_pair_batch(data, BATCH, SEQ_LEN, VOCAB)
        logits, _ = model(tokens)  # (B, T, VOCAB**2)
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    seconds = time.perf_counter() - start
    model.eval()
    tokens, targets = eval_tokens, eval_targets
    with torch.no_grad():
        logits, _ = model(tokens)
    return {
        "num_heads": num_heads,
        "seed": seed,
        "loss": round(F.cross_entropy(logits.flatten(0, 1), targets.flatten()).item(), 5),
        "accuracy": round((logits.argmax(-1) == targets).float().mean().item(), 5),
        "parameters": sum(p.numel() for p in model.parameters()),
        "seconds": round(seconds, 1),
        "curve": curve,  # type: ignore[dict-item]
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ARTIFACTS / "one_vs_many_heads.json")
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--threads", type=int, default=1)  # tiny matrices: one thread is fastest
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    runs = []
    for h in HEADS:
        for seed in SEEDS:
            runs.append(train_one(h, seed, args.steps))
            print(runs[-1], flush=True)
    report = {
        "task": "neighbour pairs: predict (token at i-1, token at i+1) as one of vocab_size**2 classes",
        "vocab_size": VOCAB, "seq_len": SEQ_LEN, "steps": args.steps, "batch": BATCH, "lr": LR,
        "config": {str(h): asdict(config(h)) for h in HEADS}, "threads": args.threads, "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
