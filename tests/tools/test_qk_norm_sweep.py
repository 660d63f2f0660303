"""tools/train/train_qk_norm.py (``make train-qk-norm``) and its committed log (docs/lessons/scores-in-range.md)."""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

from lessons_src.lab import read_artifact_json

ROOT = Path(__file__).resolve().parents[2]
import train_qk_norm as sweep  # noqa: E402
import train_text  # noqa: E402

LOG = read_artifact_json(sweep.LOG)


def test_the_log_holds_every_run_of_the_grid_with_the_scripts_settings() -> None:
    assert LOG["config"] == asdict(train_text.CONFIG) and LOG["config"]["qk_norm"] is False  # the base recipe
    assert (LOG["steps"], LOG["lrs"], LOG["seeds"]) == (sweep.STEPS, list(sweep.LRS), list(sweep.SEEDS))
    assert (LOG["spike"], LOG["worse"], LOG["warmup"]) == (sweep.SPIKE, sweep.WORSE, train_text.WARMUP)
    grid = sorted((r["qk_norm"], r["lr"], r["seed"]) for r in LOG["runs"])
    assert grid == sorted((qk, lr, seed) for qk in (False, True) for lr in sweep.LRS for seed in sweep.SEEDS)
    evals = list(range(0, sweep.STEPS + 1, sweep.EVAL_EVERY))
    for r in LOG["runs"]:
        assert len(r["train_loss"]) == LOG["steps"]
        assert [e["step"] for e in r["evals"]] == evals
        assert all(len(e["largest_logit"]) == LOG["config"]["num_layers"] for e in r["evals"])
        assert r["cpu_seconds"] < 600  # the budget: each run under ten minutes of CPU


def test_the_logged_verdicts_follow_the_rule_written_before_the_runs() -> None:
    assert LOG["verdicts"] == sweep.verdict(LOG["runs"])


def _run(qk: bool, lr: float, seed: int, losses: list[float], end: float) -> dict[str, object]:
    return {"qk_norm": qk, "lr": lr, "seed": seed, "train_loss": losses, "evals": [{"val_loss": end}]}


def test_the_rule_flags_a_spike_a_divergence_and_a_worse_end_and_nothing_else() -> None:
    """The verdict, given runs it must refuse: a spike after warm-up, a NaN, an end 0.03 nats worse."""
    calm = [3.0, 2.0, 1.5, 1.4, 1.3, 1.2]
    runs = [
        _run(False, 1e-3, 0, calm, 1.50),  # the lowest learning rate: the reference
        _run(False, 1e-2, 0, [3.0, 2.0, 1.5, 1.4, 2.1, 1.2], 1.49),  # 0.7 above the lowest so far, after warm-up
        _run(False, 1e-1, 0, [*calm[:4], math.nan, math.nan], 1.40),  # diverged
        _run(True, 1e-3, 0, calm, 1.50),
        _run(True, 1e-2, 0, [3.0, 4.0, 1.5, 1.4, 1.3, 1.2], 1.51),  # a rise inside warm-up only; end 0.01 worse
        _run(True, 1e-1, 0, calm, 1.53),  # 0.03 worse than its setting's lowest learning rate
    ]
    got = {(v["qk_norm"], v["lr"]): (v["spike"], v["worse_end"], v["hurt"]) for v in sweep.verdict(runs, warmup=2)}
    assert got == {
        (False, 1e-3): (False, False, False), (False, 1e-2): (True, False, True), (False, 1e-1): (True, False, True),
        (True, 1e-3): (False, False, False), (True, 1e-2): (False, False, False), (True, 1e-1): (False, True, True),
    }


@pytest.mark.slow
def test_the_script_reproduces_the_logged_first_steps() -> None:
    """`make train-qk-norm` reproducibility without its twelve runs: one run's first steps, with QK-norm at the
    highest learning rate, give the logged losses (another CPU may sum in another order: a little slack)."""
    lr, seed = max(sweep.LRS), sweep.SEEDS[-1]
    logged = next(r for r in LOG["runs"] if r["qk_norm"] and r["lr"] == lr and r["seed"] == seed)
    got = sweep.run(True, lr, seed, LOG["steps"], stop_after=3)["train_loss"]
    torch.testing.assert_close(torch.tensor(got), torch.tensor(logged["train_loss"][:3]), atol=5e-4, rtol=0)
    other = sweep.run(False, lr, seed, LOG["steps"], stop_after=3)["train_loss"]
    assert abs(other[-1] - got[-1]) > 1e-3  # without the norm the same steps differ: the log tells them apart


@pytest.mark.parametrize("bad", [[1.0, float("inf")], [float("nan")]])
def test_a_loss_that_is_not_finite_is_an_infinite_rise(bad: list[float]) -> None:
    assert sweep.largest_rise([2.0, *bad], warmup=5) == math.inf
