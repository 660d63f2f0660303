"""Train an all-linear, a 3:1 hybrid and an all-attention model on the copy task (``make train-hybrids``).

Three :class:`~lessons_src.lab.hybrid_models.HybridLM` of four layers and the same widths, patterns ``LLLL``
(Gated DeltaNet), ``LLLF`` (Qwen3-Next's three linear layers per full one) and ``FFFF`` (softmax attention), with
parameter counts within 5% of each other. Each learns the copy task of :func:`~lessons_src.lab.hybrid_models.
copy_batch` (``n`` distinct random tokens then the same ``n`` again, ``n`` drawn from ``DISTANCES``), from the same
seed and the same batches, on the copies alone (``copy_loss``); AdamW, linear warm-up then cosine decay, one CPU
thread, a fixed number of steps. Then each model's copy accuracy at each distance of ``EVAL_DISTANCES``, on
``EVAL_ROWS`` fresh rows per distance from the evaluation seed. Writes
``lessons_src/lab/artifacts/hybrid_training.json``: settings, each model's pattern and parameter count, its loss
at every step, CPU and wall seconds, and its accuracy against distance.

    python tools/train/train_hybrids.py                  # the committed log
    python tools/train/train_hybrids.py --out /tmp/x     # somewhere else
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from dataclasses import asdict
from pathlib import Path

import torch

from lessons_src.lab.hybrid_models import (
    HYBRID_LOG,
    PATTERNS,
    HybridConfig,
    HybridLM,
    copy_accuracy,
    copy_batch,
    copy_loss,
    parameter_count,
    pattern,
)

VOCAB = 64
D_MODEL = 64
NUM_HEADS = 4
NUM_LAYERS = 4
D_FF = 128
CHUNK = 32
DISTANCES = tuple(range(2, 33))  # n of each training row, uniform
SEQ_LEN = 2 * max(DISTANCES)
EVAL_DISTANCES = (2, 4, 8, 12, 16, 20, 24, 28, 32)
EVAL_ROWS = 128
SEED = 0
EVAL_SEED = 12345
STEPS = 1500
BATCH = 32
LR = 3e-3  # at 1e-2 the all-linear model never left a uniform guess in 1,500 steps; the others learn at both
WARMUP = 50
WEIGHT_DECAY = 0.01

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "lessons_src" / "lab" / "artifacts"


def config(name: str) -> HybridConfig:
    """The model named ``name`` in :data:`~lessons_src.lab.hybrid_models.PATTERNS`, at this script's sizes."""
    return HybridConfig(vocab_size=VOCAB, d_model=D_MODEL, num_heads=NUM_HEADS, layers=pattern(name, NUM_LAYERS),
                        d_ff=D_FF, chunk_size=CHUNK)


def lr_at(step: int, steps: int) -> float:
    """Linear warm-up to ``LR`` for ``WARMUP`` steps, then cosine decay to a tenth of it."""
    if step < WARMUP:
        return LR * (step + 1) / WARMUP
    t = (step - WARMUP) / max(1, steps - WARMUP)
    return LR * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def train_one(name: str, steps: int = STEPS, seed: int = SEED, stop_after: int | None = None,
              verbose: bool = False) -> dict[str, object]:
    """Train the model ``name``; ``stop_after=k`` runs only the first ``k`` steps of the same schedule and returns
    ``{"loss": [...]}`` with no evaluation (the test that the script reproduces the log runs this)."""
    torch.set_num_threads(1)
    cfg = config(name)
    torch.manual_seed(seed)
    model = HybridLM(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    data = torch.Generator().manual_seed(seed + 1)  # the same batches for every model
    losses: list[float] = []
    start, cpu_start = time.perf_counter(), time.process_time()
    for step in range(steps if stop_after is None else stop_after):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps)
        tokens, distance = copy_batch(data, BATCH, SEQ_LEN, VOCAB, DISTANCES)
        loss = copy_loss(model, tokens, distance)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(round(loss.item(), 5))
        if verbose and (step % 50 == 0 or step == steps - 1):
            print(f"{name} step {step} loss {losses[-1]} ({time.process_time() - cpu_start:.0f} CPU s)", flush=True)
    if stop_after is not None:
        return {"loss": losses}
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    accuracy = copy_accuracy(model, EVAL_DISTANCES, rows=EVAL_ROWS, seed=EVAL_SEED)
    return {
        "layers": cfg.layers,
        "parameters": sum(p.numel() for p in model.parameters()),
        "train_seconds": round(seconds, 1),
        "train_cpu_seconds": round(cpu_seconds, 1),
        "loss": losses,
        "accuracy": {str(d): round(a, 5) for d, a in accuracy.items()},
    }


def train(out: Path | None, steps: int = STEPS, seed: int = SEED, names: tuple[str, ...] = tuple(PATTERNS),
          verbose: bool = False) -> dict[str, object]:
    """Train every model of ``names``; write the log to ``out`` (``None``: write nothing)."""
    base = asdict(config(names[0]))
    del base["layers"]
    report: dict[str, object] = {
        "task": "n distinct random tokens, then the same n again; scored on the copies after the repeat's first "
                "token, each predicted from the token n positions back",
        "config": base,
        "num_layers": NUM_LAYERS,
        "distances": [min(DISTANCES), max(DISTANCES)],
        "seq_len": SEQ_LEN,
        "eval_distances": list(EVAL_DISTANCES),
        "eval_rows": EVAL_ROWS,
        "eval_seed": EVAL_SEED,
        "seed": seed,
        "steps": steps,
        "batch": BATCH,
        "lr": LR,
        "warmup": WARMUP,
        "optimizer": f"AdamW, weight decay {WEIGHT_DECAY}, gradients clipped to norm 1",
        "threads": 1,
        "torch": torch.__version__,
        "machine": platform.machine(),
        "models": {},
    }
    for name in names:
        result = train_one(name, steps, seed, verbose=verbose)
        assert result["parameters"] == parameter_count(config(name))
        report["models"][name] = result  # type: ignore[index]
        if verbose:
            print(name, result["train_cpu_seconds"], "CPU s", result["accuracy"], flush=True)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / HYBRID_LOG).write_text(json.dumps(report, indent=1) + "\n")
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ARTIFACTS)
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--models", nargs="+", default=list(PATTERNS), choices=list(PATTERNS))
    args = parser.parse_args()
    report = train(args.out, args.steps, args.seed, tuple(args.models), verbose=True)
    for name, r in report["models"].items():  # type: ignore[attr-defined]
        print(f"{name:14} {r['layers']} {r['parameters']:,} parameters, {r['train_cpu_seconds']} CPU s, "
              f"accuracy by distance {r['accuracy']}")


if __name__ == "__main__":
    main()
