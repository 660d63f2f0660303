"""lessons_src.lab.quantized_kv: the comparison measures zero for the float caches themselves, the mixed cache
quantizes one half only, and the committed measurement recomputes (one format's row and the channel spread)."""

from __future__ import annotations

import pytest
import torch

from lessons_src.kv_cache import KVCache
from lessons_src.lab.quantized_kv import (
    FORMATS,
    MixedCache,
    channel_spread,
    compare_formats,
    format_caches,
    read_quantized_log,
)
from lessons_src.lab.text_model import TextConfig, TextGPT
from lessons_src.quantized_cache import Q4_0, TileQuantizedCache


def _tiny() -> tuple[TextGPT, torch.Tensor]:
    torch.manual_seed(0)
    model = TextGPT(TextConfig(d_model=64, num_heads=2, max_len=16, d_ff=32, dropout=0.0)).eval()
    return model, torch.randint(0, 256, (3, 17))


def test_the_float_cache_against_itself_measures_nothing_and_quantized_ones_something() -> None:
    model, windows = _tiny()
    float_row, q4_row = compare_formats(model, windows, ["float32", "q4_0"], prompt=8)
    assert float_row["loss_change_per_window"] == [0.0] * 3
    assert float_row["loss_change"] == 0 and float_row["output_error"] == [0.0, 0.0]
    assert float_row["greedy_agreement"] == float_row["greedy_same"] == 1.0
    assert float_row["bytes_per_token"] == 2 * 64 * 4
    assert q4_row["bytes_per_token"] == 2 * 64 * 18 / 32 and min(q4_row["output_error"]) > 0


@pytest.mark.parametrize("part", ["keys", "values"])
def test_a_mixed_cache_quantizes_one_half(part: str) -> None:
    model, _ = _tiny()
    cache = format_caches(model, "q4_0", 1, part)[0]
    k, v = torch.randn(1, 2, 3, 32), torch.randn(1, 2, 3, 32)
    keys, values = cache.update(k, v)
    assert torch.equal(keys, k) == (part == "values") and torch.equal(values, v) == (part == "keys")
    cache.truncate(1)
    assert cache.length == 1 and cache.keys.length == cache.values.length == 1  # type: ignore[attr-defined]
    plain = MixedCache(TileQuantizedCache(1, 2, 32, 4, Q4_0), KVCache(1, 2, 32, 4))
    plain.update(k, v)
    assert plain.nbytes == 3 * (2 * 32 * 18 // 32 + 2 * 32 * 4)  # the keys' part in q4_0, the values' in float32


def test_format_caches_refuses_an_unknown_format_or_part() -> None:
    model, _ = _tiny()
    with pytest.raises(ValueError, match="name must be one of float32, q8_0"):
        format_caches(model, "int3", 1)
    with pytest.raises(ValueError, match="part must be"):
        format_caches(model, "q8_0", 1, "queries")


def test_the_committed_measurement_recomputes() -> None:
    import measure_quantized_cache as m
    import train_text

    from lessons_src.lab.text_model import corpus_bytes, load_text_model

    log = read_quantized_log()
    made = [(f, p) for f in m.FORMATS for p in m.PARTS.get(f, ("both",))]
    assert [(r["format"], r["part"]) for r in log["rows"]] == made
    assert set(m.FORMATS) < set(FORMATS)
    model = load_text_model().eval()
    windows = train_text.eval_windows(train_text.split(corpus_bytes())[1])
    spread = channel_spread(model, windows[:, :-1])
    assert [[r[h] for h in ("keys", "values")] for r in spread] == [
        pytest.approx([r[h] for h in ("keys", "values")], rel=1e-4) for r in log["channel_spread"]]
    few = 8  # the first windows, teacher-forced only: a second of the measurement's minutes
    again = compare_formats(model, windows[:few], ["q4_0"], prompt=None)[0]
    stored = log["rows"][[r["format"] for r in log["rows"]].index("q4_0")]
    assert again["loss_change_per_window"] == pytest.approx(stored["loss_change_per_window"][:few], abs=1e-5)
    assert stored["loss_change"] == pytest.approx(sum(stored["loss_change_per_window"]) / log["windows"], abs=1e-5)
    assert again["bytes_per_token"] == stored["bytes_per_token"]
