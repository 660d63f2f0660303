"""lessons_src.flex: each mask rule of lessons_src.masks in FlexAttention, equal to its definition and to the dense one.

FlexAttention runs eagerly here (torch 2.13 on a CPU; no ``torch.compile`` in tests): it applies the mask_mod to
the whole score matrix, so an equal output says the mask_mod is right but not that the block mask is. The block
mask is checked on its own, tile by tile, against the dense mask: a compiled kernel trusts it and would skip a
tile it wrongly calls empty.

Without ``torch.compile``, torch 2.13's ``flex_attention`` still traces each call with TorchDynamo (an eager
backend, ``fullgraph=True``), once per new function or shape: about a second each here. The tests switch that trace
off with torch's own switch for it (``_FLEX_ATTENTION_DISABLE_COMPILE_DEBUG``), which calls the same dense
implementation directly; :func:`test_the_traced_path_gives_the_same_answers` keeps the default path checked.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.attention.flex_attention as flex_module
from torch.nn.attention.flex_attention import create_mask

from lessons_src.flex import block_mask, block_sparsity, flex_attend, soft_cap_mod
from lessons_src.functional import ATTENTION_FUNCTIONS, attention
from lessons_src.masks import (
    MaskRule,
    causal,
    mask_mod,
    mask_tensor,
    padding,
    prefix_lm,
    same_chunk,
    same_document,
    sliding_window,
)
from lessons_src.score_mods import Sinks, SoftCap

# (B, H, K, T, S): GQA with T < S (new tokens after cached ones), MHA square, and more queries than keys (T > S).
# Few shapes: FlexAttention traces its call with torch._dynamo (eager backend) for each new function and shape
SHAPES = [(2, 4, 2, 5, 9), (1, 2, 2, 6, 6), (2, 2, 1, 7, 4)]


def _twins(B: int, T: int, S: int) -> dict[str, tuple[MaskRule, object]]:
    """name: (the package's rule, its definition ``(b, p, j) -> bool`` for the query at position ``p`` and key ``j``,
    written out here). Rules that need the queries among the keys (documents, prefix) are left out for T > S."""
    docs = torch.arange(S).repeat(B, 1) * (torch.arange(B)[:, None] + 2) // 5  # (B, S): packed, unequal lengths
    lengths = torch.tensor([S - b for b in range(B)])
    prefix = [min(S, 2 + 3 * b) for b in range(B)]
    twins: dict[str, tuple[MaskRule, object]] = {
        "causal": (causal(), lambda b, p, j: j <= p),
        "padding": (padding(lengths), lambda b, p, j: j < int(lengths[b])),
        "window": (sliding_window(3), lambda b, p, j: p - 3 < j <= p),
        "window+sinks": (sliding_window(2, sink_tokens=2), lambda b, p, j: j <= p and (j > p - 2 or j < 2)),
        "chunk": (causal() & same_chunk(3), lambda b, p, j: j <= p and j // 3 == p // 3),
        "documents": (causal() & same_document(docs), lambda b, p, j: j <= p and int(docs[b, j]) == int(docs[b, p])),
        "prefix": (prefix_lm(prefix), lambda b, p, j: j <= p or j < prefix[b]),
    }
    if T > S:
        del twins["documents"], twins["prefix"]
    return twins


def _definition(rule: object, B: int, T: int, S: int) -> torch.Tensor:
    """``(B, 1, T, S)`` from the definition, query ``i`` at position ``i + S - T``."""
    return torch.tensor([[[[bool(rule(b, i + S - T, j)) for j in range(S)] for i in range(T)]]  # type: ignore[operator]
                         for b in range(B)])


def _pair(name: str, B: int, T: int, S: int) -> tuple[MaskRule, torch.Tensor]:
    """The rule and its mask from the definition, ``(B, 1, T, S)``."""
    rule, definition = _twins(B, T, S)[name]
    return rule, _definition(definition, B, T, S)


NAMES = list(_twins(1, 3, 4))


@pytest.fixture(autouse=True)
def untraced(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """FlexAttention's dense path called directly, without a TorchDynamo trace per new function (see above)."""
    if "traced" not in request.keywords:
        monkeypatch.setattr(flex_module, "_FLEX_ATTENTION_DISABLE_COMPILE_DEBUG", True)


def _qkv(B: int, H: int, K: int, T: int, S: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, n, L, 8, generator=g, dtype=torch.float64) for n, L in ((H, T), (K, S), (K, S)))


@pytest.mark.parametrize("name", NAMES)
def test_each_rule_is_its_definition_dense_and_in_flex(name: str) -> None:
    """For T < S, T = S and T > S: the rule's dense tensor, FlexAttention's own dense form of it (create_mask over
    the rule's mask_mod, and create_block_mask's tiles) and the definition agree; FlexAttention with the rule is
    attention() with it."""
    for B, H, K, T, S in SHAPES:
        if name not in _twins(B, T, S):
            continue
        rule, definition = _twins(B, T, S)[name]
        want = _definition(definition, B, T, S)
        assert torch.equal(mask_tensor(rule, T, S, B=B).expand(B, 1, T, S), want), (name, T, S)
        assert torch.equal(create_mask(mask_mod(rule, T, S), B, 1, T, S, device="cpu"), want), (name, T, S)
        q, k, v = _qkv(B, H, K, T, S)
        got = flex_attend(q, k, v, block_mask(rule, T, S, B=B, block_size=2))
        torch.testing.assert_close(got, attention(q, k, v, attn_mask=rule).output, atol=1e-12, rtol=1e-10)


def test_rules_that_need_the_queries_among_the_keys_refuse_more_queries_alike() -> None:
    """Documents and a prefix LM place each query among the keys: with T > S every consumer refuses, in one message
    (flex's old document mod read ``ids[-1]`` there and let a query into another document)."""
    q, kv = torch.randn(1, 1, 5, 4), torch.randn(1, 1, 3, 4)
    for rule, message in ((same_document(torch.tensor([0, 0, 1])), r"T=5 queries must be the last of the S=3"),
                          (prefix_lm(1), r"a prefix LM needs 1 <= T <= S .*got T=5, S=3")):
        for consumer in (lambda r: mask_tensor(r, 5, 3), lambda r: block_mask(r, 5, 3, block_size=2),
                         lambda r: attention(q, kv, kv, attn_mask=r)):
            with pytest.raises(ValueError, match=message):
                consumer(rule)


def test_a_rule_written_here_runs_through_every_implementation_and_flex() -> None:
    """A new mask is one function: a dilated causal mask (every other earlier key), defined in this test, through
    eager, SDPA, tiled and FlexAttention, equal to its definition, with no change to the package."""
    import lessons_src.flash  # noqa: F401  (registers "tiled")

    dilated = MaskRule("dilated(2)", lambda b, h, q, kv: (kv <= q) & ((q - kv) % 2 == 0))
    B, H, K, T, S = SHAPES[0]
    q, k, v = _qkv(B, H, K, T, S)
    want_mask = _definition(lambda b, p, j: j <= p and (p - j) % 2 == 0, B, T, S)
    want = attention(q, k, v, attn_mask=want_mask, implementation="eager").output
    for impl in sorted(ATTENTION_FUNCTIONS):
        torch.testing.assert_close(attention(q, k, v, attn_mask=dilated, implementation=impl).output, want,
                                   atol=1e-12, rtol=1e-10, msg=lambda m, i=impl: f"{i}: {m}")
    got = flex_attend(q, k, v, block_mask(dilated, T, S, block_size=2))
    torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-10)
    assert not torch.allclose(want, attention(q, k, v, is_causal=True).output)  # the dilation matters


@pytest.mark.parametrize("name", NAMES)
def test_each_block_mask_skips_exactly_the_empty_tiles(name: str) -> None:
    """Tile by tile: skipped when the dense mask hides all of it, full when it hides none; and the sparsity is the
    share of empty tiles counted from the dense mask."""
    B, T, S, size = 2, 7, 11, 3
    rule, definition = _twins(B, T, S)[name]
    bm = block_mask(rule, T, S, B=B, block_size=size)
    full = _definition(definition, B, T, S)
    nq, nk = math.ceil(T / size), math.ceil(S / size)
    padded = torch.zeros(B, 1, nq * size, nk * size, dtype=torch.bool)  # tiles past the end hold nothing
    padded[..., :T, :S] = full
    tiles = padded.reshape(B, 1, nq, size, nk, size).transpose(3, 4)  # (B, 1, nq, nk, size, size)
    any_kept = tiles.flatten(-2).any(-1)  # (B, 1, nq, nk)
    assert torch.equal(bm.to_dense().bool(), any_kept)
    all_kept = tiles.flatten(-2).all(-1)  # a tile cut by the end is never full: its missing entries count as hidden
    full_tiles = torch.zeros_like(any_kept)  # the tiles the kernel runs without calling the mask_mod
    assert bm.full_kv_num_blocks is not None and bm.full_kv_indices is not None
    for b in range(B):
        for i in range(nq):
            full_tiles[b, 0, i, bm.full_kv_indices[b, 0, i, : bm.full_kv_num_blocks[b, 0, i]]] = True
    assert torch.equal(full_tiles, all_kept)
    assert block_sparsity(bm) == pytest.approx(1 - any_kept.float().mean().item())


def test_block_sparsity_of_a_causal_square_is_the_tiles_above_the_diagonal() -> None:
    for n in (1, 2, 5):  # n x n tiles: n (n - 1) / 2 above the diagonal
        assert block_sparsity(block_mask(causal(), 4 * n, block_size=4)) == pytest.approx((n - 1) / (2 * n))


def test_soft_cap_mod_equals_the_cap_of_attention() -> None:
    for B, H, K, T, S in SHAPES:
        q, k, v = _qkv(B, H, K, T, S)
        q = q * 4  # scores well beyond the cap
        mod, dense = _pair("window+sinks", B, T, S)
        got = flex_attend(q, k, v, block_mask(mod, T, S, block_size=2), score_mod=soft_cap_mod(1.5))
        want = attention(q, k, v, attn_mask=dense, score_mods=SoftCap(1.5), implementation="eager").output
        torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-10)
        uncapped = attention(q, k, v, attn_mask=dense).output
        assert (got - uncapped).abs().max() > 1e-3


# --------------------------------------------------------------------------- the learned sink: after, not inside


def sink_inside_scores(sinks: torch.Tensor):
    """transformers' placement before its pull request 41083: each score normalised against the sink on its own.

    ``exp(s) / (exp(s) + exp(sink))`` is what one weight would be if the row held that one key; a score_mod sees one
    score, so it cannot form the row's normaliser, and FlexAttention then takes a softmax of these numbers.
    """

    def score_mod(score, b, h, q_idx, kv_idx):
        return torch.sigmoid(score - sinks[h])

    return score_mod


def sink_added_to_scores(sinks: torch.Tensor):
    """The sink logit added to every score of its head: a constant per row, which the softmax removes."""

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + sinks[h]

    return score_mod


@pytest.mark.parametrize("name", ["window+sinks", "documents"])
def test_the_sink_goes_through_the_log_sum_exp_and_a_score_mod_cannot_place_it(name: str) -> None:
    for B, H, K, T, S in SHAPES:
        if name not in _twins(B, T, S):
            continue
        q, k, v = _qkv(B, H, K, T, S, seed=1)
        sinks = torch.linspace(-1.0, 2.0, H, dtype=torch.float64)
        mod, dense = _pair(name, B, T, S)
        bm = block_mask(mod, T, S, B=B, block_size=2)
        want = attention(q, k, v, attn_mask=dense, score_mods=Sinks(sinks)).output
        torch.testing.assert_close(flex_attend(q, k, v, bm, sinks=sinks), want, atol=1e-12, rtol=1e-10)
        plain = attention(q, k, v, attn_mask=dense).output
        assert (want - plain).abs().max() > 1e-2  # the sink matters here
        inside = flex_attend(q, k, v, bm, score_mod=sink_inside_scores(sinks))
        added = flex_attend(q, k, v, bm, score_mod=sink_added_to_scores(sinks))
        assert (inside - want).abs().max() > 1e-2, "a sink inside the scores gave the sink's answer"
        torch.testing.assert_close(added, plain, atol=1e-12, rtol=1e-10)  # the sink vanished


def test_a_query_that_sees_nothing_gets_zero_with_a_sink() -> None:
    q, k, v = _qkv(1, 2, 2, 4, 4)
    rule = causal() & MaskRule("after_the_first", lambda b, h, q, kv: q > 0)  # query 0 sees nothing
    out = flex_attend(q, k, v, block_mask(rule, 4, block_size=2), sinks=torch.ones(2, dtype=torch.float64))
    assert torch.equal(out[:, :, 0], torch.zeros_like(out[:, :, 0]))
    want = attention(q, k, v, attn_mask=rule, score_mods=Sinks(torch.ones(2, dtype=torch.float64))).output
    torch.testing.assert_close(out, want, atol=1e-12, rtol=1e-10)


# --------------------------------------------------------------------------- what torch 2.13 does on a CPU


@pytest.mark.traced
def test_the_traced_path_gives_the_same_answers() -> None:
    """The default path (a TorchDynamo trace of each call) on GQA with T < S: packed documents with a soft-cap and
    sinks, the mask and score change that capture the most."""
    assert not flex_module._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG
    B, H, K, T, S = SHAPES[0]
    q, k, v = _qkv(B, H, K, T, S)
    mod, dense = _pair("documents", B, T, S)
    sinks = torch.linspace(-1.0, 2.0, H, dtype=torch.float64)
    got = flex_attend(q, k, v, block_mask(mod, T, S, B=B, block_size=2), score_mod=soft_cap_mod(1.5), sinks=sinks)
    want = attention(q, k, v, attn_mask=dense, score_mods=[SoftCap(1.5), Sinks(sinks)], implementation="eager").output
    torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-10)


def test_flex_attention_on_a_cpu_is_forward_only() -> None:
    """The page states it; this keeps the statement true for the pinned torch."""
    q = torch.randn(1, 2, 4, 8, requires_grad=True)
    with pytest.raises(NotImplementedError, match="FlexAttention does not support backward on CPU"):
        flex_attend(q, q.detach(), q.detach(), block_mask(causal(), 4, block_size=2))


def test_bad_inputs_name_the_value() -> None:
    with pytest.raises(TypeError, match=r"documents must hold integer document ids; got dtype torch.float32"):
        same_document(torch.zeros(3))
    with pytest.raises(ValueError, match=r"window must be at least 1 \(the query itself\); got window=0"):
        sliding_window(0)
    with pytest.raises(ValueError, match=r"sinks must have shape \(H,\) = \(2,\)"):
        q = torch.randn(1, 2, 4, 8)
        flex_attend(q, q, q, sinks=torch.zeros(3))
