"""The committed long-context benchmark report agrees with itself and with the cache formulas."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from lessons_src.kv_cache import kv_bytes_per_token

REPORT = Path(__file__).resolve().parents[1] / "docs" / "_data" / "bench" / "long_context.json"


@pytest.fixture(scope="module")
def report() -> dict:  # type: ignore[type-arg]
    return json.loads(REPORT.read_text())


def test_ratios_and_verdicts_follow_from_the_timings(report: dict) -> None:  # type: ignore[type-arg]
    p, r, t = report["paged"], report["rolling"], report["targets"]
    ms = p["ms_per_step"]
    assert p["paged_over_contiguous"] == pytest.approx(ms["paged"] / ms["contiguous"])
    assert p["paged_over_padded"] == pytest.approx(ms["paged"] / ms["padded"])
    assert p["block_major_over_paged"] == pytest.approx(ms["paged, block-major"] / ms["paged"])
    rolling = [r["ms_per_token"][f"rolling {n}"] for n in r["config"]["contexts"]]
    assert r["rolling_spread"] == pytest.approx(max(rolling) / min(rolling) - 1)
    met = report["targets_met"]
    assert met["paged_over_contiguous"] == (p["paged_over_contiguous"] <= t["paged_over_contiguous"])
    assert met["rolling_spread"] == (r["rolling_spread"] <= t["rolling_spread"])
    c = report["recompute"]
    for P, row in c["ms"].items():
        assert c["speedup"][P] == pytest.approx(row["recompute"] / row["cache"])
    rows = sorted(c["ms"].items(), key=lambda item: int(item[0]))  # JSON keys are strings, sorted as text
    first = next((int(P) for P, row in rows if row["recompute"] > 1.5 * row["cache"]), None)
    assert c["crossover_prompt"] == first


def test_memory_matches_the_formulas(report: dict) -> None:  # type: ignore[type-arg]
    m = report["memory"]
    c = m["config"]
    per_token = kv_bytes_per_token(c["num_kv_heads"], c["head_dim"], torch.float32)
    assert m["bytes_per_token"] == per_token and m["needed_bytes"] == m["tokens"] * per_token
    assert m["contiguous_reserved_bytes"] == c["B"] * c["max_len"] * per_token
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(256, c["max_len"] + 1, (c["B"],), generator=g).tolist()  # the stated distribution
    assert sum(lengths) == m["tokens"]
    for block, paged in m["paged"].items():
        b = int(block)
        assert paged["bytes"] == sum(math.ceil(n / b) for n in lengths) * b * per_token
        assert paged["bytes"] - m["needed_bytes"] < c["B"] * b * per_token  # under one block per sequence
    rolling = report["rolling"]
    rc = rolling["config"]
    per_rolling = kv_bytes_per_token(rc["num_heads"], rc["head_dim"], torch.float32)
    for n in rc["contexts"]:
        assert rolling["rolling_bytes"][str(n)] == min(n, rc["window"] + rc["sinks"]) * per_rolling
        assert rolling["full_bytes"][str(n)] == n * per_rolling
