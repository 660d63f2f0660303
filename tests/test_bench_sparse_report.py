"""The committed report of tools/bench/bench_sparse.py: taken at DeepSeek-V3.2's sizes with S = 8,192 and k = 512, its
bytes the formula's (and selection_costs'), its prefill selection a valid block selection whose kept scores it counts
right, its medians and ratios those of its own runs.

Timings cannot be recomputed in a test; what the report says about them must follow from the runs it records. One
claim is checked against them: the prefill through a dense bool mask of the selection is no faster than dense causal
attention (it computes every score, then masks them).
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "docs" / "_data" / "bench" / "sparse.json"
from bench_sparse import (  # noqa: E402
    BLOCK,
    CACHE_BYTES,
    CONTEXT,
    DECODE_ROWS,
    FORMS,
    MODEL,
    PREFILL_ROWS,
    TOP_K,
    decode_bytes,
    dense_selection_mask,
    ratios,
    selection_pairs,
    sizes,
)


@pytest.fixture(scope="module")
def report() -> dict:
    return json.loads(REPORT.read_text())


def test_taken_at_deepseek_v32s_sizes_with_8k_cached_and_512_picked(report: dict) -> None:
    c = report["config"]
    assert report["model"] == MODEL and {k: c[k] for k in sizes()} == sizes()
    assert (c["context"], c["top_k"]) == (CONTEXT, TOP_K) == (8192, 512) and report["full_run"]
    assert set(report["decode"]["runs"]) == set(DECODE_ROWS) and set(report["prefill"]["runs"]) == set(PREFILL_ROWS)
    assert set(report["forms"]) == set(DECODE_ROWS) | set(PREFILL_ROWS) and report["forms"] == FORMS
    assert report["repeats"]["decode"] >= 3 and report["repeats"]["prefill"] >= 3
    assert {"load_average_before", "load_average_after"} <= set(report["machine"])


def test_decoding_bytes_are_the_formulas_and_selection_costs(report: dict) -> None:
    from lessons_src.lab.configs import load_configs
    from lessons_src.lab.long_context import selection_costs

    S, k = report["config"]["context"], report["config"]["top_k"]
    d = report["decode"]
    assert d["bytes_measured"] == d["bytes_computed"] == decode_bytes(S, k)
    cfg = load_configs()[MODEL]
    assert cfg.sparse is not None
    costs = selection_costs(dataclasses.replace(cfg, sparse={**cfg.sparse, "top_k": k}), S,
                            cache_bytes=CACHE_BYTES, index_bytes=CACHE_BYTES)
    assert (costs["dense_bytes"], costs["sparse_bytes"]) == (d["bytes_measured"]["dense"],
                                                            d["bytes_measured"]["indexed"])
    assert d["bytes_measured"]["dense"] == d["bytes_measured"]["gathered"] * S // k  # S rows against k


def test_the_prefill_selection_is_valid_and_its_kept_scores_counted(report: dict) -> None:
    S, k = report["config"]["context"], report["config"]["top_k"]
    blocks = torch.tensor(report["prefill"]["selection_blocks"])  # (S / BLOCK, k / BLOCK)
    nb = S // BLOCK
    assert tuple(blocks.shape) == (nb, k // BLOCK) and blocks[:, 0].tolist() == list(range(nb))  # its own block
    for i, row in enumerate(blocks[:, 1:].tolist()):
        real = [b for b in row if b >= 0]
        assert len(real) == min(i, k // BLOCK - 1) == len(set(real)) and all(b < i for b in real), i  # earlier only
    p = report["prefill"]
    assert p["pairs_measured"] == p["pairs_computed"] == selection_pairs(S, k)
    own = BLOCK * (BLOCK + 1) // 2  # each query block's own block, causally; then whole earlier blocks
    assert sum(own + int((row >= 0).sum()) * BLOCK**2 for row in blocks[:, 1:]) == p["pairs_measured"]["dense_mask"]
    assert max(p["max_abs_difference_from_dense_mask"].values()) < 1e-4  # three forms, one answer


def test_medians_and_ratios_follow_from_the_runs(report: dict) -> None:
    for part, base in (("decode", "dense"), ("prefill", "dense_causal")):
        r = report[part]
        for row, runs in r["runs"].items():
            assert len(runs) == report["repeats"][part], (part, row)
            assert r["median_cpu_seconds"][row] == pytest.approx(statistics.median(x["cpu_seconds"] for x in runs))
        assert r[f"{base}_over"] == pytest.approx(ratios(r["runs"], base))


def test_a_dense_mask_of_the_selection_does_not_beat_dense_attention(report: dict) -> None:
    assert report["prefill"]["dense_causal_over"]["dense_mask"] < 1


def test_the_dense_mask_of_a_block_selection_keeps_its_blocks_causally() -> None:
    blocks = torch.tensor([[0, -1], [1, 0], [2, 0], [3, 1]])  # 4 query blocks, each keeping itself and one other
    T = 4 * BLOCK
    want = torch.zeros(T, T, dtype=torch.bool)
    for i, row in enumerate(blocks.tolist()):
        for b in row:
            if b >= 0:
                want[i * BLOCK : (i + 1) * BLOCK, b * BLOCK : (b + 1) * BLOCK] = True
    assert torch.equal(dense_selection_mask(blocks, T), want.tril())
