"""The build's export of the induction model for "Run the model yourself" (tools/site_build/live_model.py).

Checks on the built site/: the weights file holds the committed checkpoint's float32 values exactly, its
name carries the hash of its content, the page points at it, the page's extras stay within 250 kB gzipped,
and the presets and findings on the page are what ``lessons_src`` computes.
"""

from __future__ import annotations

import gzip
import hashlib
import html
import json
import re
import struct
from pathlib import Path

import pytest
import torch

from lessons_src.lab.toy_models import find_circuit, induction_scores, load_induction_model

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "site"
PAGE = SITE / "practice" / "live-model" / "index.html"
MODELS = SITE / "assets" / "models"
EXTRAS_BUDGET = 250_000  # bytes, gzipped: weights + their JSON + the page's script and stylesheet

import live_model  # noqa: E402

if not PAGE.exists():
    pytest.fail("site/ is not built with the live model page: run `make build` first", pytrace=False)


def exported() -> tuple[dict[str, object], bytes, Path]:
    metas = sorted(MODELS.glob("induction-*.json"))
    assert len(metas) == 1, f"expected one exported model in {MODELS}, found {metas}"
    meta = json.loads(metas[0].read_text(encoding="utf-8"))
    return meta, (MODELS / str(meta["weights"])).read_bytes(), metas[0]


def test_weights_are_the_checkpoint_exactly() -> None:
    meta, data, _ = exported()
    model = load_induction_model()
    state = model.state_dict()
    tensors = meta["tensors"]
    assert isinstance(tensors, list)
    assert [t["name"] for t in tensors] == list(state)
    assert len(data) == 4 * sum(v.numel() for v in state.values())
    for spec in tensors:
        ref = state[spec["name"]]
        assert spec["shape"] == list(ref.shape)
        n = ref.numel()
        values = struct.unpack_from(f"<{n}f", data, 4 * spec["offset"])
        assert torch.equal(torch.tensor(values, dtype=torch.float32).view(ref.shape), ref), spec["name"]
    cfg = meta["config"]
    assert isinstance(cfg, dict)
    assert cfg["num_layers"] == model.cfg.num_layers and cfg["num_heads"] == model.cfg.num_heads
    assert cfg["vocab_size"] == model.cfg.vocab_size and cfg["max_len"] == model.cfg.max_len
    assert cfg["causal"] == model.cfg.causal and cfg["head_dim"] == model.cfg.d_model // model.cfg.num_heads
    assert meta["sha256"] == hashlib.sha256(data).hexdigest()


def test_file_names_carry_the_content_hash_and_the_page_points_at_them() -> None:
    meta, _, json_path = exported()
    _, _, stem = live_model.export()
    assert json_path.name == f"{stem}.json" and meta["weights"] == f"{stem}.bin"
    assert json_path.read_bytes() == live_model.meta_bytes()
    page = PAGE.read_text(encoding="utf-8")
    src = re.search(r'data-model-src="([^"]+)"', page)
    assert src, "the page has no data-model-src"
    assert (PAGE.parent / src.group(1)).resolve() == json_path.resolve()
    assert live_model.MODEL_URL_PLACEHOLDER not in page


def test_page_extras_within_budget() -> None:
    _, data, json_path = exported()
    extras = [data, json_path.read_bytes()]
    extras.append((SITE / "assets/js/live-model.js").read_bytes())
    extras.append((SITE.parent / "docs" / "assets" / "live-model.css").read_bytes())  # inlined into the page
    size = sum(len(gzip.compress(b, mtime=0)) for b in extras)
    assert size <= EXTRAS_BUDGET, f"{size} bytes gzipped"


def test_presets_and_findings_are_computed() -> None:
    page = PAGE.read_text(encoding="utf-8")
    payload = re.search(r'<div class="lm-data" hidden data-search-exclude>(.*?)</div>', page, re.S)
    assert payload
    data = json.loads(html.unescape(payload.group(1)))
    model = load_induction_model()
    circuit = find_circuit(induction_scores(model))
    assert data["findings"]["previous"] == circuit["previous-token heads"]
    assert data["findings"]["induction"] == circuit["induction heads"]
    presets = {p["id"]: p for p in data["presets"]}
    prev = [f"L0H{h}" for h in circuit["previous-token heads"]]
    assert presets["no-previous-token-head"]["off"] == prev
    assert presets["no-induction-heads"]["off"] == [f"L1H{h}" for h in circuit["induction heads"]]
    for p in data["presets"]:
        assert 1 <= len(p["tokens"]) <= model.cfg.max_len
        assert all(0 <= t < model.cfg.vocab_size for t in p["tokens"])
    assert len(set(presets["no-repeat"]["tokens"])) == len(presets["no-repeat"]["tokens"])
    assert len(presets["long-repeat"]["tokens"]) == model.cfg.max_len
    assert len(presets["short-repeat"]["tokens"]) == model.cfg.max_len


def test_copyable_positions_rule() -> None:
    assert live_model.copyable_positions([1, 2, 3, 1, 2, 3]) == [False, False, False, True, True]
    assert live_model.copyable_positions([4, 4, 4]) == [False, True]
    assert live_model.copyable_positions([7]) == []


@pytest.mark.parametrize(
    ("report", "keys"),
    [("live_model.json", {"forward_64", "toggle_update"}), ("live_text_model.json", {"per_token_64", "text_update"})],
)
def test_bench_report_is_shown_on_the_benchmarks_page(report: str, keys: set[str]) -> None:
    """Each timing is shown with its own goal (a frame, or RAIL's 100 ms for the update after typing) and its
    share of it, as the report has them."""
    report_path = ROOT / "docs" / "_data" / "bench" / report
    if not report_path.exists():
        pytest.skip(f"no report yet: `make bench-live-model` writes docs/_data/bench/{report}")
    r = json.loads(report_path.read_text(encoding="utf-8"))
    assert set(r["median_ms"]) == set(r["budget_ms"]) == keys
    for key, ms in r["median_ms"].items():
        assert 0 < ms <= r["max_ms"][key]
        assert r["ratio_to_budget"][key] == round(ms / r["budget_ms"][key], 3)
    page = (SITE / "reference" / "benchmarks" / "index.html").read_text(encoding="utf-8")
    text = re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", page)))
    for key in r["median_ms"]:
        row = (f"{r['median_ms'][key]:.2f} ms {r['max_ms'][key]:.2f} ms {r['budget_ms'][key]:.0f} ms "
               f"{r['ratio_to_budget'][key]:.2f}")
        assert row in text, row
