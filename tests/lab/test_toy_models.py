"""lessons_src.lab.toy_models: the data, the model, and the committed induction checkpoint's heads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import warm_python

from lessons_src.lab import read_artifact_json, toy_models
from lessons_src.lab.toy_models import TinyConfig, TinyTransformer

ROOT = Path(__file__).resolve().parents[2]

# The committed checkpoint must show the circuit clearly: these are the thresholds the lesson states.
INDUCTION_MIN = toy_models.INDUCTION_THRESHOLD
PREVIOUS_MIN = toy_models.PREVIOUS_TOKEN_THRESHOLD


def test_repeated_segment_batch_marks_the_predictable_positions() -> None:
    g = torch.Generator().manual_seed(0)
    tokens, ctx = toy_models.repeated_segment_batch(g, 64, 40, 10, 4, 12)
    for b in range(64):
        pos = ctx[b].nonzero().flatten().tolist()
        assert 3 <= len(pos) <= 11 and pos == list(range(pos[0], pos[-1] + 1))
        d, L = pos[0], len(pos) + 1
        segment = tokens[b, d : d + L]
        starts = [s for s in range(0, d - L + 1) if torch.equal(tokens[b, s : s + L], segment)]
        assert starts, "the copied segment must appear earlier"
    with pytest.raises(ValueError, match="max_seg"):
        toy_models.repeated_segment_batch(g, 1, 10, 5, 2, 6)


def test_neighbour_pair_targets() -> None:
    tokens, targets = toy_models.neighbour_pair_batch(torch.Generator().manual_seed(1), 4, 7, 5)
    for b in range(4):
        for i in range(7):
            assert targets[b, i] == tokens[b, (i - 1) % 7] * 5 + tokens[b, (i + 1) % 7]


def test_model_is_causal_and_saves_round_trip(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = TinyTransformer(TinyConfig(vocab_size=11, d_model=16, num_heads=2, num_layers=2, max_len=9)).eval()
    x = torch.randint(0, 11, (2, 9))
    y = x.clone()
    y[:, 6:] = (y[:, 6:] + 1) % 11  # change only the future of position 5
    (lx, wx), (ly, _) = model(x, need_weights=True), model(y)
    torch.testing.assert_close(lx[:, :6], ly[:, :6])
    assert wx is not None and wx.shape == (2, 2, 2, 9, 9) and torch.all(wx.triu(1) == 0)
    model.save(tmp_path / "m.safetensors")
    again = TinyTransformer.load(tmp_path / "m.safetensors")
    assert again.cfg == model.cfg
    torch.testing.assert_close(again(x)[0], lx)
    with pytest.raises(ValueError, match="max_len=9"):
        model(torch.zeros(1, 10, dtype=torch.long))


def test_attention_maps_api() -> None:
    w = toy_models.attention_maps([1, 2, 3, 1, 2, 3])
    cfg = toy_models.load_induction_model().cfg
    assert w.shape == (cfg.num_layers, cfg.num_heads, 6, 6)
    torch.testing.assert_close(w.sum(-1), torch.ones(cfg.num_layers, cfg.num_heads, 6))
    with pytest.raises(ValueError, match=r"in \[0, "):
        toy_models.attention_maps([cfg.vocab_size])


def test_committed_checkpoint_has_the_induction_circuit() -> None:
    model = toy_models.load_induction_model()
    scores = toy_models.induction_scores(model)
    found = toy_models.find_circuit(scores)
    assert found["induction heads"], f"no layer-2 head reaches prefix matching {INDUCTION_MIN}: {scores}"
    assert found["previous-token heads"], f"no layer-1 head reaches previous-token {PREVIOUS_MIN}: {scores}"
    assert scores["prefix matching"][1].max() >= INDUCTION_MIN
    assert scores["prefix matching"][0].max() < 0.2  # layer 1 cannot do induction on its own
    # the circuit does the work: the second copy is predicted far better than the first
    tokens = toy_models.repeated_random_tokens(24, model.cfg.vocab_size, seed=3, batch=64)
    with torch.no_grad():
        loss = toy_models.next_token_loss(model, tokens)  # (64, 47)
    assert loss[:, 24:].mean() < 0.5 * loss[:, :23].mean()


def test_training_log_matches_checkpoint() -> None:
    log = read_artifact_json("induction_training.json")
    assert TinyConfig(**log["config"]) == toy_models.load_induction_model().cfg
    first, last = log["log"][0], log["log"][-1]
    assert last["step"] == log["steps"] and last["in_context_loss"] < 0.5 * first["in_context_loss"]


# The committed run's first steps, retrained in the test (a few seconds); the whole run is `make train-check`.
PREFIX_STEPS = 60  # the first three logged evaluations after the start: the seed, data, model and optimiser all show
# The log keeps 5 decimals; another CPU's kernels may sum in another order, so allow a little more than rounding.
LOG_TOLERANCE = 5e-4


@pytest.mark.slow
def test_retraining_from_the_seed_reproduces_the_logged_losses(tmp_path: Path) -> None:
    """The training script, run from its seed, logs the committed run's losses step for step (first steps)."""
    script = ROOT / "tools" / "train" / "train_induction.py"
    # python SCRIPT in a child forked from a parent that imported torch alone (tests/helpers/warm_python.py)
    proc = warm_python.TORCH.run([str(script), "--out", str(tmp_path), "--steps", str(PREFIX_STEPS)], cwd=os.getcwd())
    assert proc.returncode == 0, proc.stderr[-3000:]
    retrained = json.loads((tmp_path / "induction_training.json").read_text())["log"]
    committed = {row["step"]: row for row in read_artifact_json("induction_training.json")["log"]}
    assert [row["step"] for row in retrained] == list(range(0, PREFIX_STEPS + 1, 20))
    for row in retrained:
        for key in ("loss", "in_context_loss", "other_loss"):
            want = committed[row["step"]][key]
            assert abs(row[key] - want) <= LOG_TOLERANCE, f"step {row['step']} {key}: {row[key]} != logged {want}"


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("FULL_RETRAIN"), reason="the whole retraining (a minute): make train-check")
def test_retraining_from_the_seed_finds_the_same_heads(tmp_path: Path) -> None:
    script = ROOT / "tools" / "train" / "train_induction.py"
    subprocess.run([sys.executable, str(script), "--out", str(tmp_path)], check=True)
    retrained = TinyTransformer.load(tmp_path / "induction_model.safetensors")
    new = toy_models.find_circuit(toy_models.induction_scores(retrained))
    old = toy_models.find_circuit(toy_models.induction_scores(toy_models.load_induction_model()))
    assert new == old
