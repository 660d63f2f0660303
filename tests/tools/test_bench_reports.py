"""The committed benchmark reports against the code that wrote them: what goes stale when that code changes.

A report's timings cannot be measured again in a test, and its medians recomputed from the runs it records would
only check the report against itself. What goes stale when the code moves on is checked, report by report, in
three parts:

* **settings**: the sizes, rows, models and goals the script measures now (its constants and functions) are the
  ones the report was taken at;
* **counts**: every number the code computes without timing anything (cache bytes from the formulas of
  ``lessons_src``, FLOPs, a block mask's skipped tiles, a selection's kept scores) is what the code computes now;
* **summary**: the figures the script derives from its runs (ratios, speed-ups, goals met) are what the script's
  own functions and goals derive now from the runs the report records.

A report's claims that a page states (the fused kernel ran; a dense mask of the selection is not faster) are
checked beside them. The scripts' own pure functions are tested at the end. `make bench` rewrites the reports.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import torch

from lessons_src.kv_cache import kv_bytes_per_token, latent_bytes_per_token
from lessons_src.lab import read_artifact_json

if TYPE_CHECKING:
    from collections.abc import Callable

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "docs" / "_data" / "bench"


@functools.cache
def report(name: str) -> dict[str, Any]:
    if name == "decode":  # read by shown blocks, so it ships with the package
        return read_artifact_json("decode_bench.json")  # type: ignore[no-any-return]
    return json.loads((BENCH / f"{name}.json").read_text(encoding="utf-8"))  # type: ignore[no-any-return]


CHECKS: dict[str, Callable[[dict[str, Any]], None]] = {}
SLOW = {"flex/counts"}  # recomputes a block mask per row: seconds


def check(name: str) -> Callable[[Callable[[dict[str, Any]], None]], Callable[[dict[str, Any]], None]]:
    """Register ``fn(report)`` as the check ``name`` (``"<report>/<part>"``)."""

    def register(fn: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
        CHECKS[name] = fn
        return fn

    return register


# ------------------------------------------------------------------- continuous_batching (bench_continuous_batching.py)


@check("continuous_batching/settings")
def _continuous_batching_settings(r: dict[str, Any]) -> None:
    from bench_continuous_batching import (
        BLOCK_SIZE,
        GOAL_OVER_ONE,
        MAX_BATCH_TOKENS,
        NUM_BLOCKS,
        OUTPUTS,
        PROMPTS,
        REPEATS,
        STRIDE,
        WAYS,
    )

    c = r["config"]
    assert (c["prompts"], c["outputs"], c["stride"]) == (list(PROMPTS), list(OUTPUTS), STRIDE) and r["full_run"]
    assert len(PROMPTS) == 16 and (min(PROMPTS), max(PROMPTS), min(OUTPUTS), max(OUTPUTS)) == (8, 96, 8, 64)  # the mix
    assert all(p + n - 1 <= 128 for p, n in zip(PROMPTS, OUTPUTS, strict=True))  # each within the context
    assert (c["block_size"], c["num_blocks"], c["max_batch_tokens"], c["repeats"]) == (BLOCK_SIZE, NUM_BLOCKS,
                                                                                       MAX_BATCH_TOKENS, REPEATS)
    assert c["goal_continuous_over_one_at_a_time"] == GOAL_OVER_ONE == 3.0
    assert set(r["runs"]) == set(WAYS) and all(len(x) == REPEATS for x in r["runs"].values())
    assert {"load_average_before", "load_average_after"} <= set(r["machine"])


@check("continuous_batching/counts")
def _continuous_batching_counts(r: dict[str, Any]) -> None:
    """Tokens computed, the useful fraction and the peak bytes, from the code now: the scheduler run again (no timing),
    the padded batch's slots from the formula of ``kv_bytes_per_token``."""
    from bench_continuous_batching import OUTPUTS, PROMPTS, continuous, counts, mix

    from lessons_src.lab.text_model import load_text_model

    model = load_text_model()
    served = continuous(model, mix())
    assert counts(model, served) == {k: r[k] for k in ("computed_tokens", "useful_fraction", "peak_cache_bytes")}
    assert r["steps"] == len(served.steps)
    slots = max(PROMPTS) + max(OUTPUTS) - 1  # the padded batch: every row as long as the longest prompt and output
    assert r["peak_cache_bytes"]["padded_static"] == 16 * slots * kv_bytes_per_token(4, 32, torch.float32) * 2


@check("continuous_batching/summary")
def _continuous_batching_summary(r: dict[str, Any]) -> None:
    from bench_continuous_batching import OUTPUTS, goals, ratios

    assert r["over_one_at_a_time"] == pytest.approx(ratios(r["runs"]))
    assert r["tokens_per_second"] == pytest.approx({w: sum(OUTPUTS) / min(x["cpu_seconds"] for x in v)
                                                    for w, v in r["runs"].items()})
    assert r["goals_met"] == goals(r["over_one_at_a_time"], r)


# ------------------------------------------------------------------- decode (lessons_src/lab/artifacts/)


@check("decode/counts")
def _decode_counts(r: dict[str, Any]) -> None:
    c = r["config"]
    tokens = c["B"] * (c["prompt"] + c["new_tokens"])
    E = c["d_model"] // c["num_heads"]
    expected = {name: kv_bytes_per_token(K, E, torch.float32) for name, K in c["num_kv_heads"].items()}
    mla = latent_bytes_per_token(c["mla"]["kv_latent_dim"], c["mla"]["rope_dim"], torch.float32)
    expected |= {"MLA absorbed": mla, "MLA naive": mla}
    assert set(r["cache"]) == set(expected)
    for name, per_token in expected.items():
        cache = r["cache"][name]
        assert cache["bytes_per_token"] == per_token
        assert cache["measured_bytes"] == cache["formula_bytes"] == tokens * per_token
        assert r["cache_ratio_to_mha"][name] == per_token / expected["MHA"]


# ------------------------------------------------------------------- flash (tools/bench/bench_flash.py)


@check("flash/settings")
def _flash_settings(r: dict[str, Any]) -> None:
    from bench_flash import MODES, TARGETS, VARIANTS

    c = r["config"]
    got = (c["B"], c["num_heads"], c["head_dim"], c["T"], c["S"], c["dtype"], c["causal"])
    assert got == (1, 12, 64, 8192, 8192, "float32", True)  # the size
    assert r["repeats"] >= 2, "at least two runs each, so the spread is visible"
    assert {v: set(r["runs"][v]) for v in r["runs"]} == {v: set(MODES) for v in VARIANTS}
    assert r["targets_at_most"] == TARGETS


@check("flash/counts")
def _flash_counts(r: dict[str, Any]) -> None:
    from bench_flash import analytic_bytes

    c = r["config"]
    assert r["analytic_bytes"] == analytic_bytes(c["T"], c["block_q"])
    # eager's measured forward peak holds at least its scores and weights, computed independently here
    assert r["median_peak_bytes"]["eager"]["forward"] >= 2 * 12 * 8192 * 8192 * 4


@check("flash/summary")
def _flash_summary(r: dict[str, Any]) -> None:
    from bench_flash import TARGETS

    assert r["met"] == {k: r["ratios_tiled_to_eager"][k] <= TARGETS[k] for k in TARGETS}


# ------------------------------------------------------------------- flex (tools/bench/bench_flex.py)


@check("flex/settings")
def _flex_settings(r: dict[str, Any]) -> None:
    from bench_flex import BLOCK, MASKS, SIZES

    c = r["config"]
    assert c["masks"] == list(MASKS) and c["block_size"] == BLOCK
    assert set(c["sizes"]) <= set(SIZES) and c["sizes"]
    assert r["full_sweep"] == (tuple(c["sizes"]) == SIZES)
    assert set(r["rows"]) == {f"{m}@{T}" for m in MASKS for T in c["sizes"]} == set(r["runs"])
    assert r["repeats"] >= 3 and "load_average_before" in r["machine"] and "load_average_after" in r["machine"]


@check("flex/counts")
def _flex_counts(r: dict[str, Any]) -> None:
    from bench_flex import BLOCK, masks

    from lessons_src.flex import block_mask, block_sparsity

    for row, info in r["rows"].items():
        T = info["T"]
        bm = block_mask(masks(T)[info["mask"]], T, block_size=BLOCK)
        assert info["tiles_skipped"] == pytest.approx(block_sparsity(bm)), row


@check("flex/summary")
def _flex_summary(r: dict[str, Any]) -> None:
    from bench_flex import speedups

    assert r["speedup_flex_over_sdpa"] == pytest.approx(speedups(r["runs"]))


# ------------------------------------------------------------------- gpu (tools/bench/bench_gpu.py)


@check("gpu/settings")
def _gpu_settings(r: dict[str, Any]) -> None:
    from bench_gpu import HEADS, HIDDEN, IMPLEMENTATIONS, LENGTHS, MODES, TOKENS

    c, m = r["config"], r["machine"]
    assert not c["dry_run"] and c["device"] == "cuda" and c["dtype"] == "bfloat16"
    assert m["gpu"] and m["triton"] and m["cuda"], "the hardware and versions are named"
    assert (c["tokens_per_batch"], c["hidden"]) == (TOKENS, HIDDEN)
    swept = {(row["T"], row["head_dim"], row["causal"]) for row in r["rows"]}
    assert swept == {(T, E, causal) for T in LENGTHS for E in HEADS for causal in (True, False)}
    for row in r["rows"]:
        assert (row["B"], row["H"]) == (TOKENS // row["T"], HIDDEN // row["head_dim"])
        assert {f"{impl}.{mode}" for impl in IMPLEMENTATIONS for mode in MODES} <= set(row)


@check("gpu/counts")
def _gpu_counts(r: dict[str, Any]) -> None:
    from bench_gpu import IMPLEMENTATIONS, MODES, flops

    for row in r["rows"]:
        for impl in IMPLEMENTATIONS:
            for mode in MODES:
                cell = row[f"{impl}.{mode}"]
                want = flops(row["B"], row["H"], row["T"], row["head_dim"], row["causal"], mode)
                assert cell["tflops"] == pytest.approx(want / cell["median_seconds"] / 1e12)
        assert row["max_abs_diff_triton_vs_sdpa"] < 0.05, "Triton's and SDPA's bfloat16 outputs agree"


@check("gpu/summary")
def _gpu_summary(r: dict[str, Any]) -> None:
    from bench_gpu import GOAL

    row = next(x for x in r["rows"] if (x["T"], x["head_dim"], x["causal"]) == (GOAL["T"], GOAL["head_dim"], True))
    ratio = row["triton.forward"]["median_seconds"] / row["sdpa_flash.forward"]["median_seconds"]
    assert r["goal"]["ratio"] == pytest.approx(ratio)
    assert r["goal"]["met"] == (ratio <= GOAL["triton_over_sdpa_flash_at_most"])


# ------------------------------------------------------------------- linear (tools/bench/bench_linear.py)


@check("linear/settings")
def _linear_settings(r: dict[str, Any]) -> None:
    from bench_linear import LAYERS, MODEL, sizes

    assert r["model"] == MODEL and {k: r["config"][k] for k in sizes()} == sizes()
    assert min(r["config"]["lengths"]) <= 1024 and max(r["config"]["lengths"]) >= 65536
    assert r["repeats"] >= 3 and set(r["runs"]) == set(LAYERS)


@check("linear/counts")
def _linear_counts(r: dict[str, Any]) -> None:
    from bench_linear import LAYERS, state_bytes

    for layer in LAYERS:
        for n in r["config"]["lengths"]:
            assert r["bytes_measured"][layer][str(n)] == r["bytes_computed"][layer][str(n)] == \
                state_bytes(n)[layer], (layer, n)
    linear = {r["bytes_measured"]["linear"][str(n)] for n in r["config"]["lengths"]}
    assert len(linear) == 1  # the state does not grow with the context


@check("linear/summary")
def _linear_summary(r: dict[str, Any]) -> None:
    from bench_linear import ratios

    assert r["attention_over_linear"] == pytest.approx(ratios(r["runs"]))


# ------------------------------------------------------------------- long_context (tools/bench/bench_long_context.py)


@check("long_context/counts")
def _long_context_counts(r: dict[str, Any]) -> None:
    m = r["memory"]
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
    rolling = r["rolling"]
    rc = rolling["config"]
    per_rolling = kv_bytes_per_token(rc["num_heads"], rc["head_dim"], torch.float32)
    for n in rc["contexts"]:
        assert rolling["rolling_bytes"][str(n)] == min(n, rc["window"] + rc["sinks"]) * per_rolling
        assert rolling["full_bytes"][str(n)] == n * per_rolling


@check("long_context/summary")
def _long_context_summary(r: dict[str, Any]) -> None:
    from bench_long_context import TARGETS

    p, rolling = r["paged"], r["rolling"]
    assert r["targets"] == TARGETS
    met = r["targets_met"]
    assert met["paged_over_contiguous"] == (p["paged_over_contiguous"] <= TARGETS["paged_over_contiguous"])
    assert met["rolling_spread"] == (rolling["rolling_spread"] <= TARGETS["rolling_spread"])


# ------------------------------------------------------------------- mechanisms (tools/bench/bench_mechanisms.py)


@check("mechanisms/settings")
def _mechanisms_settings(r: dict[str, Any]) -> None:
    from bench_mechanisms import MODES, TARGETS, VARIANTS

    c = r["config"]
    assert (c["B"], c["T"], c["d_model"], c["num_heads"], c["causal"]) == (8, 512, 512, 8, True)  # issue 48's size
    assert r["repeats"] >= 3, "at least three rounds, so the median means something"
    assert {n: set(r["runs"][n]) for n in r["runs"]} == {n: set(MODES) for n in VARIANTS}
    assert "load_average_before" in r["machine"] and "load_average_after" in r["machine"]
    assert r["baselines"] == {n: b for n, (b, _) in VARIANTS.items() if b is not None}
    assert r["targets_at_most"] == TARGETS


@check("mechanisms/counts")
def _mechanisms_counts(r: dict[str, Any]) -> None:
    """The matmul FLOPs are recounted here (on meta: nothing runs) for the plain layer and both gates."""
    from bench_mechanisms import count_flops, flop_ratios

    names = ["plain_sdpa", "gate_headwise", "gate_elementwise"]
    assert {n: r["flops"][n] for n in names} == count_flops(names)
    assert r["flop_ratios_to_baseline"] == flop_ratios(r["flops"])
    # the elementwise gate adds a (D x D) matmul: 2 / (8 + 4 T / D) of the plain forward, counting whole score matrices
    c = r["config"]
    assert r["flop_ratios_to_baseline"]["gate_elementwise"]["forward"] == pytest.approx(
        1 + 2 / (8 + 4 * c["T"] / c["d_model"]))


@check("mechanisms/summary")
def _mechanisms_summary(r: dict[str, Any]) -> None:
    from bench_mechanisms import MODES, TARGETS, ratios

    expected = ratios(r["runs"])
    assert set(r["ratios_to_baseline"]) == set(expected)
    for name, by_mode in expected.items():
        assert r["ratios_to_baseline"][name] == pytest.approx(by_mode), name
    got = r["ratios_to_baseline"]
    assert r["met"] == {n: all(got[n][m] <= TARGETS[n] for m in MODES) for n in TARGETS}


# ------------------------------------------------------------------- mha_ways (tools/bench/bench_mha_ways.py)


@check("mha_ways/settings")
def _mha_ways_settings(r: dict[str, Any]) -> None:
    from bench_mha_ways import build

    s = r["setup"]
    assert (s["batch"], s["tokens"], s["d_model"], s["heads"], s["dtype"], s["causal"]) == (
        8, 1024, 768, 12, "float32", True)  # Raschka's setup
    ways = set(build(24, 12, 4))
    kinds = {"eager", "compiled"} if s["compiled"] else {"eager"}
    for mode in ("forward", "forward_backward"):
        assert set(r["results"][mode]["rows"]) == {f"{w}|{k}" for w in ways for k in kinds}, mode


@check("mha_ways/counts")
def _mha_ways_counts(r: dict[str, Any]) -> None:
    from bench_mha_ways import attention_flops

    B, T, D = 8, 1024, 768
    projections = 2 * B * T * D * 4 * D  # x @ [W_Q; W_K; W_V], then y @ W_O
    attention = 2 * (2 * B * T * T * D)  # Q K^T and P V over all heads, full T x T
    assert r["flops_per_forward"] == projections + attention == attention_flops(B, T, D)


@check("mha_ways/claims")
def _mha_ways_claims(r: dict[str, Any]) -> None:
    """The page says our layer runs SDPA's fused kernel, as PyTorch's own call does; the eager ways run none."""
    assert r["sdpa_kernels"]["ours"] == r["sdpa_kernels"]["sdpa_is_causal"] != []
    assert r["sdpa_kernels"]["ours_eager"] == [] and r["sdpa_kernels"]["fused_qkv"] == []


# ------------------------------------------------------------------- patterns (tools/bench/bench_patterns.py)


@check("patterns/settings")
def _patterns_settings(r: dict[str, Any]) -> None:
    from bench_patterns import BASELINE, PATTERNS

    lengths = r["config"]["lengths"]
    assert min(lengths) <= 1024 and max(lengths) >= 32768
    assert r["repeats"] >= 3, "at least three rounds, so the median means something"
    assert set(r["runs"]) == set(PATTERNS) and r["baseline"] == BASELINE
    assert r["patterns"] == {n: [t.name + ("" if t.shares is None else f">{t.shares}") for t in p]
                             for n, p in PATTERNS.items()}


@check("patterns/counts")
def _patterns_counts(r: dict[str, Any]) -> None:
    from bench_patterns import PATTERNS, expected_bytes

    for name, pattern in PATTERNS.items():
        for n in r["config"]["lengths"]:
            assert r["bytes_measured"][name][str(n)] == r["bytes_computed"][name][str(n)] == \
                expected_bytes(pattern, n), (name, n)


@check("patterns/summary")
def _patterns_summary(r: dict[str, Any]) -> None:
    from bench_patterns import ratios

    for name, by_length in ratios(r["runs"]).items():
        assert r["step_ratio_to_baseline"][name] == pytest.approx(by_length), name


# ------------------------------------------------------------------- roofline (tools/bench/bench_roofline.py)


@check("roofline/settings")
def _roofline_settings(r: dict[str, Any]) -> None:
    from bench_roofline import COPY_MIB, MATMUL_N, REPEATS

    assert r["config"] == {"matmul_n": MATMUL_N, "copy_mib": COPY_MIB, "dtype": "float32", "repeats": REPEATS}
    m = r["machine"]
    assert set(r["threads"]) == {"1", str(m["cpus"])}
    assert m["cpu"] and m["torch"] and {"load_average_before", "load_average_after"} <= set(m)
    for t in r["threads"].values():
        assert len(t["matmul_seconds"]) == len(t["copy_seconds"]) == REPEATS


@check("roofline/counts")
def _roofline_counts(r: dict[str, Any]) -> None:
    from bench_roofline import COPY_MIB, MATMUL_N

    for t in r["threads"].values():
        assert t["matmul_flops"] == 2 * MATMUL_N**3 and t["copy_bytes"] == 2 * COPY_MIB * 2**20  # read + write


# ------------------------------------------------------------------- sparse (tools/bench/bench_sparse.py)


@check("sparse/settings")
def _sparse_settings(r: dict[str, Any]) -> None:
    from bench_sparse import CONTEXT, DECODE_ROWS, FORMS, MODEL, PREFILL_ROWS, TOP_K, sizes

    c = r["config"]
    assert r["model"] == MODEL and {k: c[k] for k in sizes()} == sizes()
    assert (c["context"], c["top_k"]) == (CONTEXT, TOP_K) == (8192, 512) and r["full_run"]
    assert set(r["decode"]["runs"]) == set(DECODE_ROWS) and set(r["prefill"]["runs"]) == set(PREFILL_ROWS)
    assert set(r["forms"]) == set(DECODE_ROWS) | set(PREFILL_ROWS) and r["forms"] == FORMS
    assert r["repeats"]["decode"] >= 3 and r["repeats"]["prefill"] >= 3
    assert {"load_average_before", "load_average_after"} <= set(r["machine"])


@check("sparse/counts")
def _sparse_counts(r: dict[str, Any]) -> None:
    from bench_sparse import BLOCK, CACHE_BYTES, MODEL, decode_bytes, selection_pairs

    from lessons_src.lab.configs import load_configs
    from lessons_src.lab.long_context import selection_costs

    S, k = r["config"]["context"], r["config"]["top_k"]
    d = r["decode"]
    assert d["bytes_measured"] == d["bytes_computed"] == decode_bytes(S, k)
    cfg = load_configs()[MODEL]
    assert cfg.sparse is not None
    costs = selection_costs(dataclasses.replace(cfg, sparse={**cfg.sparse, "top_k": k}), S,
                            cache_bytes=CACHE_BYTES, index_bytes=CACHE_BYTES)
    measured = d["bytes_measured"]
    assert (costs["dense_bytes"], costs["sparse_bytes"]) == (measured["dense"], measured["indexed"])
    assert d["bytes_measured"]["dense"] == d["bytes_measured"]["gathered"] * S // k  # S rows against k
    # the prefill's recorded selection is a causal block selection, and the kept scores are counted from it
    blocks = torch.tensor(r["prefill"]["selection_blocks"])  # (S / BLOCK, k / BLOCK)
    nb = S // BLOCK
    assert tuple(blocks.shape) == (nb, k // BLOCK) and blocks[:, 0].tolist() == list(range(nb))  # its own block
    for i, row in enumerate(blocks[:, 1:].tolist()):
        real = [b for b in row if b >= 0]
        assert len(real) == min(i, k // BLOCK - 1) == len(set(real)) and all(b < i for b in real), i  # earlier only
    p = r["prefill"]
    assert p["pairs_measured"] == p["pairs_computed"] == selection_pairs(S, k)
    own = BLOCK * (BLOCK + 1) // 2  # each query block's own block, causally; then whole earlier blocks
    assert sum(own + int((row >= 0).sum()) * BLOCK**2 for row in blocks[:, 1:]) == p["pairs_measured"]["dense_mask"]
    assert max(p["max_abs_difference_from_dense_mask"].values()) < 1e-4  # three forms, one answer


@check("sparse/summary")
def _sparse_summary(r: dict[str, Any]) -> None:
    from bench_sparse import ratios

    for part, base in (("decode", "dense"), ("prefill", "dense_causal")):
        assert r[part][f"{base}_over"] == pytest.approx(ratios(r[part]["runs"], base)), part


@check("sparse/claims")
def _sparse_claims(r: dict[str, Any]) -> None:
    """The page says the prefill through a dense bool mask of the selection is no faster than dense attention."""
    assert r["prefill"]["dense_causal_over"]["dense_mask"] < 1


# ------------------------------------------------------------------- split_kv (tools/bench/bench_split_kv.py)


@check("split_kv/settings")
def _split_kv_settings(r: dict[str, Any]) -> None:
    from bench_split_kv import (
        BACKEND,
        DECODE,
        DECODE_ROWS,
        OWN,
        PREFIX,
        PREFIX_ROWS,
        REPEATS,
        REQUESTS,
        SPLIT_SIZE,
        E,
        H,
        K,
    )

    c = r["config"]
    assert (c["num_heads"], c["num_kv_heads"], c["head_dim"]) == (H, K, E) == (32, 8, 128)  # Llama 3 8B
    assert [tuple(x) for x in c["decode"]] == list(DECODE) and c["requests"] == list(REQUESTS) and r["full_run"]
    assert (c["prefix"], c["own"], c["split_size"], c["repeats"], c["backend"]) == (PREFIX, OWN, SPLIT_SIZE, REPEATS,
                                                                                   BACKEND)
    assert [(d["batch"], d["cached"]) for d in r["decode"]] == list(DECODE)
    assert [p["requests"] for p in r["shared_prefix"]] == list(REQUESTS)
    for part, rows in (("decode", DECODE_ROWS), ("shared_prefix", PREFIX_ROWS)):
        for x in r[part]:
            assert set(x["runs"]) == set(rows) and all(len(v) == REPEATS for v in x["runs"].values()), part
    assert {"load_average_before", "load_average_after", "capability"} <= set(r["machine"])


@check("split_kv/counts")
def _split_kv_counts(r: dict[str, Any]) -> None:
    from bench_split_kv import DECODE_ROWS, SPLIT_SIZE, decode_bytes, prefix_bytes

    for d in r["decode"]:
        assert d["bytes_measured"] == d["bytes_computed"] == decode_bytes(d["batch"], d["cached"])
        assert d["splits"] == {"split_2": 2, "split_4096": -(-d["cached"] // SPLIT_SIZE)}
        assert set(d["max_abs_difference"]) == set(DECODE_ROWS[1:]) and max(d["max_abs_difference"].values()) < 1e-4
    for p in r["shared_prefix"]:
        assert p["bytes_measured"] == p["bytes_computed"] == prefix_bytes(p["requests"])
        assert p["max_abs_difference"] < 1e-4  # the shared prefix gave each request's own answer


@check("split_kv/summary")
def _split_kv_summary(r: dict[str, Any]) -> None:
    from bench_split_kv import ratios

    for d in r["decode"]:
        assert d["one_pass_over"] == pytest.approx(ratios(d["runs"], "one_pass"))
    for p in r["shared_prefix"]:
        x = p["runs"]
        every = ratios({"own_copies": x["own_copies"], "shared_prefix": x["shared_prefix"]}, "own_copies")
        one = ratios({"own_copies": x["own_copies_1_thread"], "shared_prefix": x["shared_prefix_1_thread"]},
                     "own_copies")
        assert p["own_copies_over"] == pytest.approx({"every_core": every["shared_prefix"],
                                                      "one_thread": one["shared_prefix"]})


@check("split_kv/claims")
def _split_kv_claims(r: dict[str, Any]) -> None:
    """The page says no split made a step a tenth faster on two cores, and the shared prompt at the most requests
    was at least 3x faster on one thread, from a tenth of the bytes (the issue's goal)."""
    from bench_split_kv import GOAL_SHARED_32

    split = [v for d in r["decode"] for k, v in d["one_pass_over"].items() if k.startswith("split")]
    assert max(split) < 1.1 and sum(x < 1 for x in split) > len(split) / 2
    most = max(r["shared_prefix"], key=lambda p: p["requests"])
    assert most["own_copies_over"]["one_thread"] >= GOAL_SHARED_32
    assert most["bytes_measured"]["own_copies"] > 10 * most["bytes_measured"]["shared_prefix"]


# ------------------------------------------------------------------- speculative (tools/bench/bench_speculative.py)


@check("speculative/settings")
def _speculative_settings(r: dict[str, Any]) -> None:
    from bench_speculative import (
        DRAFT_LEN,
        GOAL_REPEATS,
        HALF,
        LEAD,
        NEW_TOKENS,
        NGRAM,
        PROMPT,
        PROMPTS,
        REPEATS,
        ROWS,
        TREE_DRAFTS,
    )

    c = r["config"]
    assert (c["prompts"], c["prompt"], c["half"], c["lead"], c["new_tokens"]) == (PROMPTS, PROMPT, HALF, LEAD,
                                                                                  NEW_TOKENS)
    assert (c["ngram"], c["draft_len"], c["tree_drafts"], c["repeats"], c["goal_repeats"]) == (
        NGRAM, DRAFT_LEN, TREE_DRAFTS, REPEATS, GOAL_REPEATS) and r["full_run"]
    assert c["rows"] == list(ROWS) and set(r["sets"]) == {"held_out", "repeats"}
    for s in r["sets"].values():
        assert len(s["per_prompt"]) == PROMPTS
        assert set(s["runs"]) == set(ROWS) and all(len(v) == REPEATS for v in s["runs"].values())
    assert {"load_average_before", "load_average_after", "threads"} <= set(r["machine"])


@check("speculative/counts")
def _speculative_counts(r: dict[str, Any]) -> None:
    """The first prompt of the repeats set decoded again: identical to greedy, the same passes and tokens per pass."""
    from bench_speculative import counts, prompt_sets

    from lessons_src.lab.text_model import load_text_model

    model = load_text_model()
    assert counts(model, prompt_sets(1)["repeats"][0]) == r["sets"]["repeats"]["per_prompt"][0]
    for s in r["sets"].values():
        assert s["identical"] and all(c["identical"] for c in s["per_prompt"])


@check("speculative/summary")
def _speculative_summary(r: dict[str, Any]) -> None:
    import statistics

    from bench_speculative import GOAL_REPEATS, NEW_TOKENS, ROWS, speedups

    for s in r["sets"].values():
        assert s["speedup"] == pytest.approx(speedups(s["runs"]))
        assert s["tokens_per_pass"] == {row: pytest.approx(statistics.mean(c[row]["tokens_per_pass"]
                                                                            for c in s["per_prompt"]), abs=1e-4)
                                        for row in ("chain", "tree")}
        tokens = len(s["per_prompt"]) * NEW_TOKENS
        assert s["tokens_per_cpu_second"] == pytest.approx(
            {row: tokens / statistics.median(x["cpu_seconds"] for x in s["runs"][row]) for row in ROWS})
    assert r["goal_met"] == (max(r["sets"]["repeats"]["speedup"].values()) >= GOAL_REPEATS)


# ------------------------------------------------------------- quantized_cache (tools/bench/bench_quantized_cache.py)


@check("quantized_cache/settings")
def _quantized_cache_settings(r: dict[str, Any]) -> None:
    from bench_quantized_cache import CACHED, REPEATS, RESIDUAL, ROWS, E, H, K

    c = r["config"]
    assert (c["num_heads"], c["num_kv_heads"], c["head_dim"]) == (H, K, E) == (32, 8, 128) and r["full_run"]
    assert (c["cached"], c["repeats"], c["residual"], c["rows"]) == (list(CACHED), REPEATS, RESIDUAL, list(ROWS))
    assert [p["cached"] for p in r["parts"]] == list(CACHED)
    assert all(set(p["runs"]) == set(ROWS) and all(len(v) == REPEATS for v in p["runs"].values()) for p in r["parts"])
    assert {"load_average_before", "load_average_after", "capability"} <= set(r["machine"])


@check("quantized_cache/counts")
def _quantized_cache_counts(r: dict[str, Any]) -> None:
    """Each cache's bytes a token, measured after the prefill, are its format's formula: the tile formats'
    ``bytes_per_number`` against bfloat16's 2 exactly, KIVI's codes, per-token value scales and one block's key
    scales (the prefill is one block)."""
    from lessons_src.quantized_cache import FP8, Q4_0, Q8_0, quantized_bytes_per_token

    c = r["config"]
    K, E, bf16 = c["num_kv_heads"], c["head_dim"], c["bfloat16_bytes_per_token"]
    assert bf16 == kv_bytes_per_token(K, E, torch.bfloat16)
    for p in r["parts"]:
        b, S = p["bytes_per_token"], p["cached"]
        assert b["float32"] == kv_bytes_per_token(K, E, torch.float32)
        for name, fmt in (("q8_0", Q8_0), ("fp8", FP8), ("q4_0", Q4_0)):
            assert b[name] == quantized_bytes_per_token(K, E, fmt) == bf16 * fmt.bytes_per_number / 2
        assert b["kivi_2"] * S == S * K * 2 * E * 2 / 8 + S * K * 2 * 2 + K * E * 2 * 2


@check("quantized_cache/summary")
def _quantized_cache_summary(r: dict[str, Any]) -> None:
    from rounds import ratios

    for p in r["parts"]:
        assert p["float32_over"] == pytest.approx(ratios(p["runs"], "float32", key="seconds"))


@check("quantized_cache/claims")
def _quantized_cache_claims(r: dict[str, Any]) -> None:
    """The page says every quantized cache made a step slower here, dequantized in plain PyTorch."""
    assert all(x < 0.9 for p in r["parts"] for x in p["float32_over"].values())


# ------------------------------------------------------------------- every check above, one test each


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in CHECKS])
def test_report_agrees_with_the_code_that_wrote_it(name: str) -> None:
    CHECKS[name](report(name.split("/")[0]))


def test_every_report_with_a_script_is_checked() -> None:
    """A bench script that writes a report under docs/_data/bench/ has checks here (or a reason to have none)."""
    elsewhere = {"site": "tests/site/test_site_report.py", "live_model": "tests/site/test_live_model_export.py",
                 "live_text_model": "tests/site/test_live_model_export.py"}
    unchecked = {"mha": "times our layer against SDPA and nn.MultiheadAttention: timings only",
                 "gqa_convert": "all-MiniLM-L6-v2's retrieval after conversion: a pretrained model's run, measured",
                 "site_live_text_model": "bench_site.py on the live text page (Lighthouse): measurements only"}
    checked = {n.split("/")[0] for n in CHECKS}
    written = {p.stem for p in BENCH.glob("*.json")}
    assert written - checked - set(elsewhere) - set(unchecked) == set(), "a new report needs its checks here"


# ------------------------------------------------------------------- the scripts' own functions


def test_gpu_flops_count_the_papers_way() -> None:
    from bench_gpu import flops

    assert flops(1, 1, 1024, 64, False, "forward") == 4 * 1024 * 1024 * 64
    assert flops(1, 1, 1024, 64, True, "forward") == 2 * 1024 * 1024 * 64
    assert flops(2, 3, 8, 16, False, "forward_backward") == 3.5 * 4 * 2 * 3 * 8 * 8 * 16


def test_a_window_or_chunk_cache_stops_growing() -> None:
    """From the formula: past its window, a windowed layer's cache stays flat; the global layers' grow."""
    from bench_patterns import PATTERNS, expected_bytes

    small, large = expected_bytes(PATTERNS["gpt_oss"], 4096), expected_bytes(PATTERNS["gpt_oss"], 8192)
    globals_ = sum(t.kind == "global" for t in PATTERNS["gpt_oss"])
    per_token = expected_bytes((PATTERNS["all_global"][0],), 1)
    assert large - small == globals_ * 4096 * per_token


def test_the_dense_mask_of_a_block_selection_keeps_its_blocks_causally() -> None:
    from bench_sparse import BLOCK, dense_selection_mask

    blocks = torch.tensor([[0, -1], [1, 0], [2, 0], [3, 1]])  # 4 query blocks, each keeping itself and one other
    T = 4 * BLOCK
    want = torch.zeros(T, T, dtype=torch.bool)
    for i, row in enumerate(blocks.tolist()):
        for b in row:
            if b >= 0:
                want[i * BLOCK : (i + 1) * BLOCK, b * BLOCK : (b + 1) * BLOCK] = True
    assert torch.equal(dense_selection_mask(blocks, T), want.tril())


@pytest.mark.parametrize("masked", [False, True])
def test_the_split_kv_bench_backend_is_attention_with_its_log_sum_exp(masked: bool) -> None:
    """bench_split_kv.py's split backend, the CPU flash kernel with its log-sum-exp (GQA's heads stacked without a
    mask), against eager attention."""
    from bench_split_kv import sdpa_cpu_lse

    from lessons_src.functional import attention
    from lessons_src.masks import prepare_mask

    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 3, 8, generator=g)  # (B, H, T, E): two query heads per KV head
    k, v = torch.randn(2, 2, 5, 8, generator=g), torch.randn(2, 2, 5, 8, generator=g)  # (B, K, S, E)
    keep = torch.rand(3, 5, generator=g) > 0.3 if masked else None
    want = attention(q, k, v, attn_mask=keep, implementation="eager")
    mask = prepare_mask(keep, is_causal=False, shape=(2, 4, 3, 5), dtype=q.dtype, device=q.device)
    got = sdpa_cpu_lse(q, k, v, mask, scale=8**-0.5, dropout_p=0.0)
    torch.testing.assert_close(got.output, want.output)
    torch.testing.assert_close(got.lse, want.lse)
