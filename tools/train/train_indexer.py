"""Fit a small lightning indexer to each layer of the frozen text model, then rank keys by it (``make train-indexer``).

DeepSeek-V3.2's dense warm-up stage, at the text model's scale: the text model (the committed checkpoint) is
frozen and runs densely; at each layer the target is its attention distribution, the heads' weights summed and
L1-normalised per query (``attention_targets``), and the layer's indexer (``LightningIndexer``: 4 heads of 16, 8
features of each rotated by position) is fitted to it by the KL divergence from the target to the softmax of its
scores over the causal keys (``indexer_kl``), summed over the layers. Batches: random windows of ``max_len`` bytes
of the text model's training split; AdamW, linear warm-up then cosine decay. Seeded, one CPU thread, a fixed
number of steps; the log records wall and CPU seconds.

Then the results, from the weights as stored (float16, read back as float32), on the text model's validation
windows: for each k, the loss and the attention weight kept with each query's top-k keys ranked by the true
attention (the upper bound), by the fitted indexer and by the same indexer before its fit (its seeded initial
weights), with the share of the true top-k each indexer picked (``text_model_top_k``); and the dense loss. Writes

* ``lessons_src/lab/artifacts/text_indexer.safetensors``: the fitted indexers' weights, float16;
* ``lessons_src/lab/artifacts/indexer_training.json``: settings, sizes, the KL of every step, the validation KL
  per layer every ``EVAL_EVERY`` steps, CPU seconds, and the results against k.

    python tools/train/train_indexer.py                  # the committed artifacts
    python tools/train/train_indexer.py --out /tmp/x     # somewhere else
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
import train_text  # noqa: E402

from lessons_src.lab import artifact  # noqa: E402
from lessons_src.lab.long_context import (  # noqa: E402
    INDEXER_CHECKPOINT,
    INDEXER_LOG,
    IndexerConfig,
    TextIndexer,
    attention_targets,
    indexer_kl,
    text_model_top_k,
)
from lessons_src.lab.text_model import TEXT_CHECKPOINT, TextGPT, corpus_bytes, load_text_model, text_loss  # noqa: E402

CONFIG = IndexerConfig(d_model=128, num_layers=2, indexer_heads=4, indexer_head_dim=16, rope_dim=8, rope_base=10000.0)
SEED = 0
STEPS = 600
BATCH = 32
LR = 3e-3
WARMUP = 30
EVAL_EVERY = 50
TOP_KS = (1, 2, 4, 8, 16, 32, 64, 128)
RANKINGS = ("true", "indexer", "untrained")

ARTIFACTS = ROOT / "lessons_src" / "lab" / "artifacts"


def initial_indexer(seed: int = SEED) -> TextIndexer:
    """The indexer before its fit: its weights are the first random numbers drawn after seeding with ``seed``."""
    torch.manual_seed(seed)
    return TextIndexer(CONFIG)


def batch(train: torch.Tensor, g: torch.Generator, size: int = BATCH) -> torch.Tensor:
    """``size`` random windows of ``max_len`` bytes of the training split, ``(size, max_len)``."""
    T = train_text.CONFIG.max_len
    starts = torch.randint(0, len(train) - T, (size,), generator=g).tolist()
    return torch.stack([train[s : s + T] for s in starts])


def lr_at(step: int, steps: int) -> float:
    """Linear warm-up to ``LR`` for ``WARMUP`` steps, then cosine decay to a tenth of it."""
    if step < WARMUP:
        return LR * (step + 1) / WARMUP
    t = (step - WARMUP) / max(1, steps - WARMUP)
    return LR * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def layer_kl(indexer: TextIndexer, targets: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """Each layer's mean KL (nats per query) from its attention distribution to its indexer's softmax, ``(L,)``."""
    return torch.stack([indexer_kl(indexer.layer(i)(x), p).mean() for i, (x, p) in enumerate(targets)])


def fit_step(indexer: TextIndexer, opt: torch.optim.Optimizer, model: TextGPT, tokens: torch.Tensor,
             lr: float) -> float:
    """One step at learning rate ``lr``: the layers' KLs summed, gradients clipped to norm 1; returns the sum."""
    for group in opt.param_groups:
        group["lr"] = lr
    loss = layer_kl(indexer, attention_targets(model, tokens)).sum()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(indexer.parameters(), 1.0)
    opt.step()
    return loss.item()


def results(model: TextGPT, rankers: dict[str, TextIndexer | None], windows: torch.Tensor,
            top_ks: tuple[int, ...] = TOP_KS) -> dict[str, object]:
    """The dense loss, and for each ranking (``None``: the true attention) and k: loss, weight kept, recall."""
    with torch.no_grad():
        dense = text_loss(model, windows).mean().item()
    table: dict[str, list[dict[str, float]]] = {}
    for name, indexer in rankers.items():
        table[name] = []
        for k in top_ks:
            r = text_model_top_k(model, windows, k, indexer=indexer)
            table[name].append({"top_k": k, "loss": round(r.loss, 5), "weight_kept": round(r.weight_kept, 5),
                                "recall": round(r.recall, 5)})
    return {"dense_loss": round(dense, 5), "top_k": list(top_ks), **table}


def train(out: Path | None, steps: int = STEPS, seed: int = SEED, stop_after: int | None = None,
          verbose: bool = False) -> dict[str, object]:
    """Fit; write the artifacts to ``out`` (``None``: write nothing).

    ``stop_after=k`` runs only the first ``k`` steps of the same ``steps``-step schedule, with no evaluation, and
    returns ``{"train_kl": [...]}``: the test that the script reproduces the log runs this.
    """
    torch.set_num_threads(1)
    model = load_text_model().eval()
    for p in model.parameters():
        p.requires_grad_(False)  # frozen: only the indexers learn
    if (model.cfg.d_model, model.cfg.num_layers, model.cfg.rope_base) != (CONFIG.d_model, CONFIG.num_layers,
                                                                          CONFIG.rope_base):
        raise ValueError(f"the indexer's config {CONFIG} does not fit the text model's {model.cfg}")
    indexer = initial_indexer(seed)
    untrained = initial_indexer(seed).eval()
    opt = torch.optim.AdamW(indexer.parameters(), lr=LR, weight_decay=0.0)
    train_data, val_data = train_text.split(corpus_bytes())
    val_windows = train_text.eval_windows(val_data)  # (64, max_len + 1): the text model's validation windows
    val_targets = attention_targets(model, val_windows[:, :-1]) if stop_after is None else []
    g = torch.Generator().manual_seed(seed + 1)
    train_kl: list[float] = []
    snapshots: list[dict[str, object]] = []
    start, cpu_start = time.perf_counter(), time.process_time()
    for step in range(steps + 1):
        if stop_after is None and (step % EVAL_EVERY == 0 or step == steps):
            indexer.eval()
            with torch.no_grad():
                kl = layer_kl(indexer, val_targets)
            indexer.train()
            snapshots.append({"step": step, "val_kl": [round(v, 5) for v in kl.tolist()],
                              "seconds": round(time.perf_counter() - start, 1)})
            if verbose:
                print(json.dumps(snapshots[-1]), flush=True)
        if step in (steps, stop_after):
            break
        train_kl.append(round(fit_step(indexer, opt, model, batch(train_data, g), lr_at(step, steps)), 5))
    if stop_after is not None:
        return {"train_kl": train_kl}
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    indexer.eval()
    report: dict[str, object] = {
        "config": asdict(CONFIG),
        "parameters": sum(p.numel() for p in indexer.parameters()),
        "seed": seed,
        "steps": steps,
        "batch": BATCH,
        "window": train_text.CONFIG.max_len,
        "lr": LR,
        "warmup": WARMUP,
        "optimizer": "AdamW, no weight decay, gradients clipped to norm 1",
        "loss": "KL(attention distribution || softmax(indexer scores)) over causal keys, mean over queries, "
                "summed over layers; attention distribution: the heads' weights summed, L1-normalised per query",
        "threads": 1,
        "torch": torch.__version__,
        "machine": platform.machine(),
        "train_seconds": round(seconds, 1),
        "train_cpu_seconds": round(cpu_seconds, 1),
        "text_model": {"checkpoint": f"lessons_src/lab/artifacts/{TEXT_CHECKPOINT}",
                       "sha256": hashlib.sha256(artifact(TEXT_CHECKPOINT).read_bytes()).hexdigest()},
        "eval_windows": len(val_windows),
        "eval_every": EVAL_EVERY,
        "train_kl": train_kl,
        "snapshots": snapshots,
    }
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        path = out / INDEXER_CHECKPOINT
        indexer.save(path, metadata={"seed": str(seed), "steps": str(steps)})
        stored = TextIndexer.load(path)
        with torch.no_grad():
            report["float16"] = {"val_kl_float32": [round(v, 5) for v in layer_kl(indexer, val_targets).tolist()],
                                 "val_kl_checkpoint": [round(v, 5) for v in layer_kl(stored, val_targets).tolist()]}
        report["checkpoint_bytes"] = path.stat().st_size
        cpu = time.process_time()
        report["results"] = results(model, {"true": None, "indexer": stored, "untrained": untrained}, val_windows)
        report["results_cpu_seconds"] = round(time.process_time() - cpu, 1)
        (out / INDEXER_LOG).write_text(json.dumps(report, indent=1) + "\n")
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ARTIFACTS)
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args()
    report = train(args.out, args.steps, args.seed, verbose=True)
    print(f"fitted in {report['train_seconds']} s ({report['train_cpu_seconds']} CPU s); "
          f"last snapshot {report['snapshots'][-1]}")  # type: ignore[index]
    r = report.get("results")
    if isinstance(r, dict):
        print(f"dense loss {r['dense_loss']}")
        print(f"{'k':>4} " + " ".join(f"{name + ' loss':>16} {'kept':>6} {'recall':>6}" for name in RANKINGS))
        for i, k in enumerate(r["top_k"]):
            print(f"{k:4d} " + " ".join(f"{r[n][i]['loss']:16.4f} {r[n][i]['weight_kept']:6.3f} "
                                        f"{r[n][i]['recall']:6.3f}" for n in RANKINGS))


if __name__ == "__main__":
    main()
