"""Train the 2-layer attention-only transformer whose heads the induction lesson reads (``make train``).

Seeded and CPU-only: two runs on the same machine and thread count give the same checkpoint. Writes
``lessons_src/lab/artifacts/induction_model.safetensors`` (the weights) and
``lessons_src/lab/artifacts/induction_training.json`` (the
loss curve, split into positions a repeated segment makes predictable and the rest).

    python tools/train/train_induction.py                 # the committed artifacts
    python tools/train/train_induction.py --out /tmp/x    # somewhere else (the slow test does this)
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import asdict
from pathlib import Path

import torch

from lessons_src.lab.toy_models import TinyConfig, TinyTransformer, next_token_loss, repeated_segment_batch

CONFIG = TinyConfig(vocab_size=48, d_model=64, num_heads=4, num_layers=2, max_len=64)
SEED = 0
STEPS = 2000
BATCH = 32
LR = 3e-3
LOG_EVERY = 20
EVAL_BATCH = 256
MIN_SEG, MAX_SEG = 16, 32  # length of the repeated segment

ARTIFACTS = Path(__file__).resolve().parents[2] / "lessons_src" / "lab" / "artifacts"
"""Where the committed artifacts live in the source tree (the package ships them from there)."""


def train(out: Path, steps: int = STEPS, seed: int = SEED, threads: int = 1) -> dict[str, object]:
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    model = TinyTransformer(CONFIG)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.01)
    data = torch.Generator().manual_seed(seed + 1)
    eval_tokens, eval_ctx = repeated_segment_batch(
        torch.Generator().manual_seed(seed + 2), EVAL_BATCH, CONFIG.max_len, CONFIG.vocab_size, MIN_SEG, MAX_SEG
    )
    eval_ctx = eval_ctx[:, :-1]  # (B, T-1): which predictions the earlier copy makes possible
    log: list[dict[str, float]] = []
    start, cpu_start = time.perf_counter(), time.process_time()
    for step in range(steps + 1):
        if step % LOG_EVERY == 0 or step == steps:
            model.eval()
            with torch.no_grad():
                loss = next_token_loss(model, eval_tokens)  # (B, T-1)
            log.append(
                {
                    "step": step,
                    "loss": round(loss.mean().item(), 5),
                    "in_context_loss": round(loss[eval_ctx].mean().item(), 5),
                    "other_loss": round(loss[~eval_ctx].mean().item(), 5),
                    "seconds": round(time.perf_counter() - start, 2),
                }
            )
            model.train()
        if step == steps:
            break
        tokens, _ = repeated_segment_batch(data, BATCH, CONFIG.max_len, CONFIG.vocab_size, MIN_SEG, MAX_SEG)
        loss = next_token_loss(model, tokens).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    out.mkdir(parents=True, exist_ok=True)
    model.eval()
    model.save(out / "induction_model.safetensors", metadata={"seed": str(seed), "steps": str(steps)})
    report: dict[str, object] = {
        "config": asdict(CONFIG),
        "seed": seed,
        "steps": steps,
        "batch": BATCH,
        "lr": LR,
        "threads": threads,
        "train_seconds": round(seconds, 1),
        "train_cpu_seconds": round(cpu_seconds, 1),
        "min_seg": MIN_SEG,
        "max_seg": MAX_SEG,
        "uniform_loss": round(math.log(CONFIG.vocab_size), 5),
        "log": log,
    }
    (out / "induction_training.json").write_text(json.dumps(report, indent=1) + "\n")
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ARTIFACTS)
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--threads", type=int, default=1)  # tiny matrices: one thread is fastest
    args = parser.parse_args()
    report = train(args.out, args.steps, args.seed, args.threads)
    last = report["log"][-1]  # type: ignore[index]
    print(f"trained in {report['train_seconds']} s; final loss {last}")


if __name__ == "__main__":
    main()
