"""The committed artifacts agree with the code that made them (recomputed in part, quickly)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lessons_src.lab import minilm, read_artifact_json

ROOT = Path(__file__).resolve().parents[2]


def test_minilm_ablation_recomputes() -> None:
    from ablate_minilm import embedding_change

    report = read_artifact_json("minilm_ablation.json")
    assert report["sha256"] == minilm.MODEL_SHA256
    imp = torch.tensor(report["importance"])  # (6, 12)
    base = minilm.sentence_embeddings(minilm.PROBE_SENTENCES)
    for i in (int(imp.argmax()), int(imp.argmin())):
        keep = torch.ones(6, 12)
        keep.view(-1)[i] = 0.0
        assert embedding_change(keep, base) == pytest.approx(float(imp.view(-1)[i]), abs=1e-5)
    curve = report["curve"]
    assert [c["pruned"] for c in curve] == list(range(73))
    assert curve[0]["change"] == 0.0 and curve[1]["change"] == pytest.approx(float(imp.min()), abs=1e-5)
    assert sorted(map(tuple, report["prune_order"])) == [(l, h) for l in range(6) for h in range(12)]


def test_one_vs_many_results_are_complete() -> None:
    report = read_artifact_json("one_vs_many_heads.json")
    runs = report["runs"]
    assert sorted({r["num_heads"] for r in runs}) == [1, 2, 4, 8]
    assert len({r["parameters"] for r in runs}) == 1  # same d_model: same parameter count for every h
    assert all(0.0 <= r["accuracy"] <= 1.0 for r in runs)


@pytest.mark.slow
def test_one_vs_many_run_reproduces() -> None:
    import train_one_vs_many as t

    report = read_artifact_json("one_vs_many_heads.json")
    stored = next(r for r in report["runs"] if r["num_heads"] == 2 and r["seed"] == 0)
    torch.set_num_threads(report["threads"])
    again = t.train_one(2, 0, report["steps"])
    assert again["accuracy"] == pytest.approx(stored["accuracy"], abs=0.02)
