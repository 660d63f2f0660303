"""Train the tiny byte-level GPT on the course's own prose, watching its heads as it learns (``make train-text``).

Seeded, one CPU thread, a fixed number of steps: two runs on the same machine give the same log, and the
log records wall and CPU seconds so the checkpoint does not depend on the machine's load. Writes

* ``lessons_src/lab/artifacts/text_model.safetensors``: the weights, stored as float16;
* ``lessons_src/lab/artifacts/text_training.json``: settings, corpus (file, licence, SHA-256), the training
  loss of every step, validation loss every ``EVAL_EVERY`` steps, samples, the float16 error, and the
  snapshots: every ``EVAL_EVERY`` steps each head's previous-token, prefix-matching and first-token scores
  and the loss on repeated text (first copy vs second copy), from :func:`text_head_scores`.

Training batches: windows of ``T + 1`` bytes from the first 90% of the corpus; in ``REPEAT_ROWS`` of every
batch's rows the window is half a window of text written twice, so the model sees repeated text often enough
to learn to use it (natural prose repeats words, but rarely whole passages). The last 10% is the validation
text; the probe for the head scores is validation text written twice.

What that teaches the model, measured (the lesson docs/lessons/heads-forming.md shows it): the repeat is always
``max_len / 2`` bytes back, and the head that learns to copy it looks back that fixed distance; on repeats of
other lengths it scores near zero. Two variants that copied a segment to a random later distance instead
(same seed, same corpus) formed no head over the prefix-matching threshold in the steps they had:

* 2 layers, 8 repeated rows of 8-48 bytes, 1200 steps: best prefix-matching score 0.0015, probe loss on the
  second copy 1.664 nats against 1.619 on the first (407 s wall, 356 s CPU);
* 3 layers, 16 repeated rows of 16-56 bytes, stopped at step 600 of 1200: best score 0.0047, second copy
  1.615 against 1.594 on the first.

A real (distance-free) induction head on this corpus likely needs a longer run than the time budget here.

    python tools/train/train_text.py                  # the committed artifacts
    python tools/train/train_text.py --out /tmp/x     # somewhere else
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import platform
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from text_corpus import LICENCE, SNAPSHOT_COMMIT  # noqa: E402

from lessons_src.lab.text_model import (  # noqa: E402
    CORPUS_FILE,
    TEXT_CHECKPOINT,
    TEXT_LOG,
    TextConfig,
    TextGPT,
    corpus_bytes,
    probe_texts,
    spaced_windows,
    split_corpus,
    text_head_scores,
    text_loss,
)

CONFIG = TextConfig(vocab_size=256, d_model=128, num_heads=4, num_layers=2, max_len=128, d_ff=512, dropout=0.1)
SEED = 0
STEPS = 2000
BATCH = 32
REPEAT_ROWS = 8  # rows of each batch that are half a window written twice
LR = 3e-3
WARMUP = 100
WEIGHT_DECAY = 0.1
EVAL_EVERY = 50
VAL_FRACTION = 0.1
EVAL_WINDOWS = 64  # validation windows, evenly spaced
PROBE_TEXTS = 32  # validation texts of max_len / 2 bytes, each written twice
SAMPLE_STEPS = (0, 200, 600, STEPS)
SAMPLE_PROMPT = "Multi-head attention"
SAMPLE_BYTES = 160

ARTIFACTS = ROOT / "lessons_src" / "lab" / "artifacts"


def split(data: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The training bytes and the validation bytes (the corpus's last ``VAL_FRACTION``)."""
    return split_corpus(data, VAL_FRACTION)


def eval_windows(val: torch.Tensor) -> torch.Tensor:
    """The fixed validation windows, ``(EVAL_WINDOWS, max_len + 1)``."""
    return spaced_windows(val, EVAL_WINDOWS, CONFIG.max_len + 1)


def probe(val: torch.Tensor) -> torch.Tensor:
    """The head-score probe: validation text of ``max_len / 2`` bytes written twice, ``(PROBE_TEXTS, max_len)``."""
    return probe_texts(val, PROBE_TEXTS, CONFIG.max_len // 2)


def batch(train: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """One training batch ``(BATCH, max_len + 1)``: random windows, the first ``REPEAT_ROWS`` repeated halves."""
    T, n = CONFIG.max_len, CONFIG.max_len // 2
    starts = torch.randint(0, len(train) - T - 1, (BATCH,), generator=g).tolist()
    rows = []
    for i, s in enumerate(starts):
        if i < REPEAT_ROWS:
            rows.append(torch.cat([train[s : s + n], train[s : s + n + 1]]))  # n bytes, the same n again, one more
        else:
            rows.append(train[s : s + T + 1])
    return torch.stack(rows)


def lr_at(step: int, steps: int, peak: float = LR) -> float:
    """Linear warm-up to ``peak`` for ``WARMUP`` steps, then cosine decay to a tenth of it."""
    if step < WARMUP:
        return peak * (step + 1) / WARMUP
    t = (step - WARMUP) / max(1, steps - WARMUP)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def optimizer(model: TextGPT, lr: float = LR) -> torch.optim.AdamW:
    """AdamW with ``WEIGHT_DECAY`` on the matrices, none on biases and norm weights (every 1-D parameter)."""
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": WEIGHT_DECAY}, {"params": no_decay, "weight_decay": 0.0}], lr=lr
    )


def train_step(model: TextGPT, opt: torch.optim.Optimizer, windows: torch.Tensor, lr: float) -> float:
    """One step at learning rate ``lr`` on ``windows``, gradients clipped to norm 1; returns the batch's loss."""
    for group in opt.param_groups:
        group["lr"] = lr
    loss = text_loss(model, windows).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss.item()


def snapshot(model: TextGPT, step: int, val_windows: torch.Tensor, probe_batch: torch.Tensor) -> dict[str, object]:
    model.eval()
    with torch.no_grad():
        val = text_loss(model, val_windows).mean().item()
        s = text_head_scores(model, probe_batch)
    model.train()
    return {
        "step": step,
        "val_loss": round(val, 5),
        "loss_first_copy": round(float(s["loss first copy"]), 5),
        "loss_second_copy": round(float(s["loss second copy"]), 5),
        **{k.replace(" ", "_"): [[round(v, 4) for v in row] for row in s[k].tolist()]
           for k in ("previous", "prefix matching", "first token")},
    }


def train(out: Path | None, steps: int = STEPS, seed: int = SEED, stop_after: int | None = None,
          verbose: bool = False) -> dict[str, object]:
    """Train; write the artifacts to ``out`` (``None``: write nothing).

    ``stop_after=k`` runs only the first ``k`` steps of the same ``steps``-step schedule, with no snapshots,
    and returns ``{"train_loss": [...]}``: the test that the script reproduces the log runs this.
    """
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    data = corpus_bytes()
    train_data, val_data = split(data)
    model = TextGPT(CONFIG)
    opt = optimizer(model)
    g = torch.Generator().manual_seed(seed + 1)
    val_windows, probe_batch = eval_windows(val_data), probe(val_data)
    train_loss: list[float] = []
    snapshots: list[dict[str, object]] = []
    samples: list[dict[str, object]] = []
    start, cpu_start = time.perf_counter(), time.process_time()
    model.train()
    for step in range(steps + 1):
        if stop_after is None:
            if step % EVAL_EVERY == 0 or step == steps:
                snapshots.append(snapshot(model, step, val_windows, probe_batch))
                snapshots[-1]["seconds"] = round(time.perf_counter() - start, 1)
                if verbose:
                    print(json.dumps(snapshots[-1]), flush=True)
            if step in SAMPLE_STEPS:
                model.eval()
                text = model.generate(SAMPLE_PROMPT, SAMPLE_BYTES, torch.Generator().manual_seed(seed + 3))
                samples.append({"step": step, "text": text})
                model.train()
        if step in (steps, stop_after):
            break
        train_loss.append(round(train_step(model, opt, batch(train_data, g), lr_at(step, steps)), 5))
    if stop_after is not None:
        return {"train_loss": train_loss}
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    model.eval()
    report: dict[str, object] = {
        "config": asdict(CONFIG),
        "parameters": sum(p.numel() for p in model.parameters()),
        "seed": seed,
        "steps": steps,
        "batch": BATCH,
        "repeat_rows": REPEAT_ROWS,
        "lr": LR,
        "warmup": WARMUP,
        "weight_decay": WEIGHT_DECAY,
        "threads": 1,
        "torch": torch.__version__,
        "machine": platform.machine(),
        "train_seconds": round(seconds, 1),
        "train_cpu_seconds": round(cpu_seconds, 1),
        "corpus": {
            "file": f"lessons_src/lab/data/{CORPUS_FILE}",
            "made_by": f"tools/train/text_corpus.py from the docs of commit {SNAPSHOT_COMMIT}",
            "licence": LICENCE,
            "bytes": len(data),
            "sha256": hashlib.sha256(bytes(data.to(torch.uint8).tolist())).hexdigest(),
            "train_bytes": len(train_data),
            "val_bytes": len(val_data),
        },
        "tokenizer": "UTF-8 bytes, ids 0-255",
        "val_fraction": VAL_FRACTION,
        "eval_windows": EVAL_WINDOWS,
        "probe_texts": PROBE_TEXTS,
        "eval_every": EVAL_EVERY,
        "uniform_loss": round(math.log(CONFIG.vocab_size), 5),
        "train_loss": train_loss,
        "snapshots": snapshots,
        "samples": samples,
        "sample_prompt": SAMPLE_PROMPT,
    }
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        path = out / TEXT_CHECKPOINT
        model.save(path, metadata={"seed": str(seed), "steps": str(steps)})
        stored = TextGPT.load(path)
        with torch.no_grad():
            full, _ = model(val_windows[:, :-1])  # (B, T, V) float32 weights
            half, _ = stored(val_windows[:, :-1])  # the same from the float16 file
            report["float16"] = {
                "max_abs_logit_error": float(f"{(full - half).abs().max().item():.3g}"),
                "logit_scale": round(full.abs().max().item(), 3),
                "val_loss_float32": round(text_loss(model, val_windows).mean().item(), 5),
                "val_loss_checkpoint": round(text_loss(stored, val_windows).mean().item(), 5),
            }
        report["checkpoint_bytes"] = path.stat().st_size
        (out / TEXT_LOG).write_text(json.dumps(report, indent=1) + "\n")
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ARTIFACTS)
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args()
    report = train(args.out, args.steps, args.seed, verbose=True)
    last = report["snapshots"][-1]  # type: ignore[index]
    print(f"trained in {report['train_seconds']} s ({report['train_cpu_seconds']} CPU s); last snapshot {last}")


if __name__ == "__main__":
    main()
