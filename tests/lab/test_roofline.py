"""lessons_src.lab.roofline: every step PyTorch counts equals the formula the lesson prints, a formula missing a term
fails, the fused CPU kernel is invisible to the counter (why the counts run the eager path), and the batch at which
a step reaches a ridge is the first that does."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from lessons_src import attention
from lessons_src.lab.roofline import PREFILL_VARIANTS, VARIANTS, Cost, Sizes, count_flops, counted, formula, gpus

TINY = Sizes(d_model=64, num_heads=8, kv_latent_dim=16, rope_dim=4, window=8, top_k=4, indexer_heads=2, indexer_dim=8)
STEPS = [(name, False) for name in VARIANTS] + [(name, True) for name in PREFILL_VARIANTS]


@pytest.mark.parametrize(("name", "prefill"), STEPS, ids=[f"{n}-{'prefill' if p else 'decode'}" for n, p in STEPS])
def test_counted_equals_the_formula(name: str, prefill: bool) -> None:
    """At tiny sizes in two dtypes, and at the lesson's (bfloat16, 32,768 positions): FLOPs and bytes alike."""
    for dtype, b in ((torch.bfloat16, 2), (torch.float32, 4)):
        assert counted(name, TINY, 24, prefill=prefill, dtype=dtype) == formula(name, TINY, 24, prefill=prefill,
                                                                                bytes_per_number=b)
    assert counted(name, prefill=prefill) == formula(name, prefill=prefill)


@pytest.mark.parametrize("name", ["MLA naive", "MLA absorbed", "V3.2 top-k"])
def test_counted_equals_the_formula_with_heads_wider_than_d_model_over_h(name: str) -> None:
    """DeepSeek-V3's 128 heads of 128 in a 7,168-wide model (the lesson's exercise)."""
    v3 = Sizes(d_model=7168, num_heads=128, head_dim=128)
    assert counted(name, v3, 4096) == formula(name, v3, 4096)


def _without(cost: Cost, flops: int = 0, seq_bytes: int = 0) -> Cost:
    return dataclasses.replace(cost, flops=cost.flops - flops, seq_bytes=cost.seq_bytes - seq_bytes)


def test_a_formula_missing_a_term_fails() -> None:
    """The comparison can fail: drop the weighted sum's FLOPs, the values' bytes, or the up-projection of naive MLA's
    cache, and the formula no longer equals PyTorch's count."""
    s, S, b = TINY, 24, 2
    H, K, E, C = s.num_heads, 2, s.E, s.kv_latent_dim
    gqa, naive = counted("GQA-2", s, S), counted("MLA naive", s, S)
    assert gqa == formula("GQA-2", s, S) and naive == formula("MLA naive", s, S)
    assert _without(formula("GQA-2", s, S), flops=2 * H * S * E) != gqa  # no weighted sum
    assert _without(formula("GQA-2", s, S), seq_bytes=K * S * E * b) != gqa  # values not read
    assert _without(formula("MLA naive", s, S), flops=4 * S * C * H * E) != naive  # cache not up-projected
    with pytest.raises(ValueError, match="prefill is counted for"):
        counted("V3.2 top-k", s, S, prefill=True)
    with pytest.raises(ValueError, match="unknown variant"):
        formula("GQA-x", s, S)


def test_the_fused_cpu_kernel_counts_nothing_and_the_eager_path_counts_the_products() -> None:
    q, k, v = torch.randn(1, 4, 1, 8), torch.randn(1, 2, 16, 8), torch.randn(1, 2, 16, 8)
    counter = FlopCounterMode(display=False)
    with counter:
        attention(q, k, v)
    assert counter.get_total_flops() == 0  # why the lesson and counted() count the eager path
    assert count_flops(lambda: attention(q, k, v, implementation="eager"))[0] == 2 * 2 * 4 * 16 * 8


@pytest.mark.parametrize(("B", "H", "K", "E", "S"), [(2, 8, 2, 4, 5), (1, 6, 3, 8, 7), (3, 4, 4, 2, 3)])
def test_the_exercises_answer_is_what_flopcountermode_counts(B: int, H: int, K: int, E: int, S: int) -> None:
    """The intensity exercise's reference (lessons_src.lab.exercises.solutions) against PyTorch's counter."""
    from lessons_src.lab.exercises.solutions import gqa_decode_intensity

    q, k, v = torch.randn(B, H, 1, E), torch.randn(B, K, S, E), torch.randn(B, K, S, E)
    answer = gqa_decode_intensity(B, H, K, E, S, 4)
    assert answer["flops"] == count_flops(lambda: attention(q, k, v, implementation="eager"))[0]
    assert answer["bytes"] == k.nbytes + v.nbytes and answer["intensity"] == answer["flops"] / answer["bytes"]


@pytest.mark.parametrize("ridge", [1.0, 4.5, 153.0, 295.2])
def test_batch_to_reach_is_the_first_batch_at_the_ridge(ridge: float) -> None:
    costs = (Cost(flops=600, weight_bytes=1000, seq_bytes=2), counted("MQA", TINY, 4), counted("MLA naive", TINY, 40))
    for cost in costs:
        b = cost.batch_to_reach(ridge)
        if b is None:
            assert cost.limit <= ridge
        else:
            assert cost.intensity(b) >= ridge and (b == 1 or cost.intensity(b - 1) < ridge)


def test_the_gpus_ridges_are_their_data_sheets_ratios() -> None:
    g = gpus()
    assert {n: round(m.ridge) for n, m in g.items()} == {"A100 80GB SXM": 153, "H100 SXM": 295, "H200 SXM": 206}
    assert all("data sheet" in m.source or "specifications" in m.source for m in g.values())


@pytest.mark.parametrize("fmt_name", ["Q8_0", "FP8", "Q4_0"])
@pytest.mark.parametrize("name", ["GQA-8", "MQA"])
def test_a_quantized_cache_keeps_the_flops_and_moves_fewer_bytes_by_its_formula(name: str, fmt_name: str) -> None:
    """The same step with its cache in a quantized format: FLOPs and weights unchanged, the cache's bytes those of
    the format's formula (``quantized_bytes_per_token``) in place of bfloat16's, position for position."""
    import lessons_src.quantized_cache as qc
    from lessons_src.kv_cache import kv_bytes_per_token

    fmt, S, E = getattr(qc, fmt_name), 32768, Sizes().E
    K = {"GQA-8": 8, "MQA": 1}[name]
    plain, quantized = counted(name), counted(name, cache_format=fmt)
    assert (quantized.flops, quantized.weight_bytes) == (plain.flops, plain.weight_bytes)
    saved = S * (kv_bytes_per_token(K, E, torch.bfloat16) - qc.quantized_bytes_per_token(K, E, fmt))
    assert plain.seq_bytes - quantized.seq_bytes == saved > 0
    with pytest.raises(ValueError, match="caches a latent"):
        counted("MLA absorbed", cache_format=fmt)
