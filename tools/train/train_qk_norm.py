"""The text model with and without QK-norm, three learning rates, two seeds each (``make train-qk-norm``).

Every run is ``make train-text``'s recipe (its model, batches, AdamW, warm-up, cosine decay and gradient
clipping) cut to ``STEPS`` steps, with only two things changed: the peak learning rate (one of ``LRS``) and
whether each head's queries and keys are RMS-normalised before RoPE (``TextConfig(qk_norm=True)``, the
package's :class:`~lessons_src.mechanisms.PerHeadRMSNorm`, as Qwen3 and Gemma 3 place it). Each run is seeded
and uses one CPU thread; the log records every step's training loss and, every ``EVAL_EVERY`` steps, the
validation loss and each layer's largest attention logit ``q·k/√E`` on the fixed validation windows.

What counts as *hurt* was written here before any run, and :func:`verdict` applies it to the log:

* **a spike**: after warm-up, a step's training loss more than ``SPIKE`` nats above the lowest training loss
  of the run so far (the committed 2,000-step run's largest such rise is 0.21 nats); or
* **a worse end**: the final validation loss more than ``WORSE`` nats above the same seed's and same
  setting's run at the lowest learning rate.

    python tools/train/train_qk_norm.py                # all twelve runs, two at a time
    python tools/train/train_qk_norm.py --jobs 1       # one at a time
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import train_text as base

from lessons_src.lab.text_model import TextGPT, corpus_bytes, text_loss

STEPS = 600
LRS = (3e-3, 3e-2, 1e-1)
SEEDS = (0, 1)
EVAL_EVERY = 25
SPIKE = 0.5  # nats above the run's lowest training loss so far
WORSE = 0.02  # nats of final validation loss above the lowest learning rate's
LOG = "qk_norm_sweep.json"


def run(qk_norm: bool, lr: float, seed: int, steps: int = STEPS, stop_after: int | None = None) -> dict[str, object]:
    """One run; ``stop_after=k`` stops after ``k`` steps of the same schedule and returns the losses so far."""
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    train_data, val_data = base.split(corpus_bytes())
    model = TextGPT(replace(base.CONFIG, qk_norm=qk_norm))
    opt = base.optimizer(model, lr)  # no decay on the QK-norm weights, as on every 1-D parameter
    g = torch.Generator().manual_seed(seed + 1)
    val_windows = base.eval_windows(val_data)
    train_loss: list[float] = []
    evals: list[dict[str, object]] = []
    cpu_start = time.process_time()
    for step in range(steps + 1):
        if stop_after is None and (step % EVAL_EVERY == 0 or step == steps):
            model.eval()
            with torch.no_grad():
                val = text_loss(model, val_windows).mean().item()
                largest = model.largest_scores(val_windows[:, :-1]).tolist()
            model.train()
            evals.append({"step": step, "val_loss": round(val, 5), "largest_logit": [round(x, 3) for x in largest]})
        if step in (steps, stop_after):
            break
        loss = base.train_step(model, opt, base.batch(train_data, g), base.lr_at(step, steps, lr))
        train_loss.append(round(loss, 5))
    out: dict[str, object] = {"qk_norm": qk_norm, "lr": lr, "seed": seed, "train_loss": train_loss}
    if stop_after is None:
        out |= {"evals": evals, "cpu_seconds": round(time.process_time() - cpu_start, 1)}
    return out


def largest_rise(train_loss: list[float], warmup: int) -> float:
    """The largest rise of a step's training loss above the lowest loss of the steps before it, after warm-up
    (infinite if a loss is not finite: a run that diverged to NaN spiked)."""
    lowest, rise = float("inf"), 0.0
    for step, loss in enumerate(train_loss):
        if not math.isfinite(loss):
            return float("inf")
        if step >= warmup:
            rise = max(rise, loss - lowest)
        lowest = min(lowest, loss)
    return rise


def verdict(runs: list[dict], warmup: int = base.WARMUP, spike: float = SPIKE, worse: float = WORSE) -> list[dict]:
    """For each run: its largest rise, its final validation loss against the lowest learning rate's, and
    whether it was hurt (a spike, or a worse end), by the definition in this module's docstring."""
    low = min(r["lr"] for r in runs)
    ref = {(r["qk_norm"], r["seed"]): r["evals"][-1]["val_loss"] for r in runs if r["lr"] == low}
    verdicts = []
    for r in runs:
        rise = largest_rise(r["train_loss"], warmup)
        above = r["evals"][-1]["val_loss"] - ref[(r["qk_norm"], r["seed"])]
        verdicts.append({
            "qk_norm": r["qk_norm"], "lr": r["lr"], "seed": r["seed"],
            "largest_rise": round(rise, 4), "above_lowest_lr": round(above, 4),
            "spike": rise > spike, "worse_end": above > worse, "hurt": rise > spike or above > worse,
        })
    return verdicts


def _one(args: tuple[bool, float, int, int]) -> dict[str, object]:
    return run(*args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=base.ARTIFACTS)
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    todo = [(qk, lr, seed, args.steps) for lr in LRS for qk in (False, True) for seed in SEEDS]
    start = time.perf_counter()
    with ProcessPoolExecutor(args.jobs) as pool:
        runs = []
        for r in pool.map(_one, todo):
            last = r["evals"][-1]  # type: ignore[index]
            print(f"qk_norm={r['qk_norm']!s:5} lr={r['lr']:.0e} seed={r['seed']}: val {last['val_loss']:.4f}, "
                  f"largest logit {max(last['largest_logit']):.1f}, {r['cpu_seconds']} CPU s", flush=True)
            runs.append(r)
    report = {
        "config": asdict(base.CONFIG), "steps": args.steps, "lrs": list(LRS), "seeds": list(SEEDS),
        "batch": base.BATCH, "repeat_rows": base.REPEAT_ROWS, "warmup": base.WARMUP,
        "weight_decay": base.WEIGHT_DECAY, "eval_every": EVAL_EVERY, "eval_windows": base.EVAL_WINDOWS,
        "spike": SPIKE, "worse": WORSE, "threads_per_run": 1, "jobs": args.jobs,
        "torch": torch.__version__, "machine": platform.machine(),
        "wall_seconds": round(time.perf_counter() - start, 1),
        "runs": runs, "verdicts": verdict(runs),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / LOG).write_text(json.dumps(report, indent=1) + "\n")
    for v in report["verdicts"]:
        print(v)


if __name__ == "__main__":
    main()
