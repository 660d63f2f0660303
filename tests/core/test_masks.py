"""lessons_src.masks: the one mask convention and its translation from nn.MultiheadAttention."""

from __future__ import annotations

import math
import re

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from lessons_src.functional import attention
from lessons_src.layer import MultiHeadAttention
from lessons_src.masks import (
    at_positions,
    causal,
    causal_mask,
    check_mask,
    chunk_mask,
    combine_masks,
    document_mask,
    draft_tree,
    key_mask,
    mask_tensor,
    padding,
    padding_mask,
    prefix_lm,
    prefix_lm_mask,
    same_chunk,
    same_document,
    sliding_window,
    tree_ancestors,
    tree_positions,
)
from lessons_src.score_mods import Sinks


def test_causal_square_is_lower_triangle() -> None:
    assert torch.equal(causal_mask(4), torch.ones(4, 4, dtype=torch.bool).tril())


@pytest.mark.parametrize(("T", "S"), [(1, 1), (1, 6), (3, 5), (4, 4)])
def test_causal_is_bottom_right(T: int, S: int) -> None:
    m = causal_mask(T, S)
    for i in range(T):
        for j in range(S):
            assert bool(m[i, j]) == (j <= i + S - T)
    assert m[-1].all()  # the newest query sees every key


def test_causal_last_rows_equal_full_square() -> None:
    """Decoding T new tokens after S - T cached ones sees what the full causal pass saw."""
    assert torch.equal(causal_mask(3, 8), causal_mask(8)[-3:])


def test_is_causal_flag_differs_from_ours_when_t_below_s() -> None:
    """Why this package never passes is_causal=True to SDPA when T != S."""
    q = torch.randn(1, 1, 2, 4)
    k = v = torch.randn(1, 1, 5, 4)
    top_left = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    bottom_right = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(2, 5))
    assert not torch.allclose(top_left, bottom_right)


def test_causal_with_more_queries_than_keys_hides_everything_from_the_first() -> None:
    """T > S: the queries are the last T of S positions, so the first T - S see no key at all."""
    assert causal_mask(4, 2).int().tolist() == [[0, 0], [0, 0], [1, 0], [1, 1]]
    assert causal_mask(0, 3).shape == (0, 3) and causal_mask(2, 0).shape == (2, 0)


@pytest.mark.parametrize(("T", "S", "err", "match"), [
    (-1, 3, ValueError, "T must be at least 0; got T=-1"),
    (2, -1, ValueError, "S must be at least 0; got S=-1"),
    (2.0, 3, TypeError, "T must be an int; got 2.0 of type float"),
    (2, True, TypeError, "S must be an int; got True of type bool"),
])
def test_causal_bad(T: object, S: object, err: type[Exception], match: str) -> None:
    with pytest.raises(err, match=match):
        causal_mask(T, S)  # type: ignore[arg-type]


def test_padding_mask() -> None:
    m = padding_mask([3, 1, 4], S=5)
    assert m.shape == (3, 1, 1, 5)
    assert m[:, 0, 0].int().tolist() == [[1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 0]]
    assert padding_mask(torch.tensor([2, 3])).shape == (2, 1, 1, 3)


@settings(max_examples=20, deadline=None)
@given(rows=st.lists(st.lists(st.booleans(), min_size=5, max_size=5), min_size=1, max_size=3), T=st.integers(1, 5))
def test_key_mask_is_its_definition(rows: list[list[bool]], T: int) -> None:
    """``key_mask(keep)`` keeps key ``j`` of row ``b`` exactly where ``keep[b, j]``, for every query; 0/1 ints too."""
    keep = torch.tensor(rows)  # (B, 5)
    got = mask_tensor(key_mask(keep), T, 5, B=len(rows))  # (B, 1, T, 5)
    assert torch.equal(got, keep[:, None, None, :].expand(len(rows), 1, T, 5))
    assert torch.equal(mask_tensor(key_mask(keep.int()), T, 5, B=len(rows)), got)


def test_key_mask_of_right_padding_is_padding_by_lengths() -> None:
    lengths = torch.tensor([3, 5, 1])
    keep = torch.arange(5) < lengths[:, None]  # (3, 5): real tokens first
    assert torch.equal(mask_tensor(key_mask(keep) & causal(), 5, B=3), mask_tensor(padding(lengths) & causal(), 5, B=3))


def test_padding_bad() -> None:
    with pytest.raises(ValueError, match=r"between 1 and S=3; got \[0, 5\]"):
        padding_mask([0, 2, 5], S=3)
    with pytest.raises(ValueError, match="non-empty 1-D"):
        padding_mask([[1, 2]])


def test_check_mask_accepts_broadcastable() -> None:
    for shape in [(5, 7), (2, 1, 1, 7), (1, 4, 5, 7), (7,)]:
        check_mask(torch.ones(shape, dtype=torch.bool), (2, 4, 5, 7), torch.float32)


def test_combine() -> None:
    a = torch.tensor([True, False, True])
    b = torch.tensor([True, True, False])
    assert combine_masks(a, b, torch.float32).tolist() == [True, False, False]
    f = combine_masks(a, torch.tensor([1.0, 2.0, 3.0]), torch.float32)
    assert f.tolist() == [1.0, float("-inf"), 3.0]
    assert combine_masks(None, b, torch.float32) is b


@pytest.mark.parametrize(("q_shape", "mask_shape"), [((1, 2, 3, 5), (2, 1, 1, 5)), ((2, 2, 1, 5), (3, 5))])
@pytest.mark.parametrize("implementation", ["eager", "sdpa", "tiled"])
def test_a_mask_larger_than_the_scores_is_refused(q_shape, mask_shape, implementation: str) -> None:
    """With B = 1 or T = 1 a larger mask broadcasts *with* the scores but not *to* them: refused, both shapes named."""
    B, H, T, E = q_shape
    q, kv = torch.randn(B, H, T, E), torch.randn(B, H, 5, E)
    mask = torch.ones(mask_shape, dtype=torch.bool)
    named = rf"shape {re.escape(str(mask_shape))} is not broadcastable .* {re.escape(str((B, H, T, 5)))}"
    with pytest.raises(ValueError, match=named):
        attention(q, kv, kv, attn_mask=mask, implementation=implementation)
    with pytest.raises(ValueError, match=r"not broadcastable"):
        check_mask(mask, (B, H, T, 5), torch.float32)



@settings(max_examples=40, deadline=None)
@given(scores=st.lists(st.integers(1, 3), min_size=4, max_size=4), mask=st.lists(st.integers(1, 3), min_size=1,
       max_size=5))
def test_a_mask_is_accepted_exactly_when_it_broadcasts_to_the_scores(scores: list[int], mask: list[int]) -> None:
    """Drawn mask and score shapes: accepted when broadcasting leaves the scores' shape unchanged, else refused."""
    target, m = tuple(scores), torch.ones(mask, dtype=torch.bool)
    fits = len(mask) <= 4 and all(a in (1, b) for a, b in zip(reversed(mask), reversed(target), strict=False))
    if fits:
        check_mask(m, target, torch.float32)
    else:
        with pytest.raises(ValueError, match=rf"shape {re.escape(str(tuple(mask)))} .* {re.escape(str(target))}"):
            check_mask(m, target, torch.float32)


# --------------------------------------------------------------------------- chunked attention (Llama 4)


@settings(max_examples=40, deadline=None)
@given(S=st.integers(1, 12), T_off=st.integers(0, 11), chunk=st.integers(1, 6))
def test_chunk_mask_is_its_definition_for_the_last_queries(S: int, T_off: int, chunk: int) -> None:
    """Query ``i`` of the last ``T`` is at ``p = i + S - T`` and sees key ``j`` when ``j <= p`` and both share a chunk;
    the last ``T`` rows of the square mask, so decoding after cached tokens sees what the full pass saw."""
    T = max(1, S - T_off)
    got = causal_mask(T, S, chunk=chunk)
    p = torch.arange(S - T, S)[:, None]
    j = torch.arange(S)[None, :]
    assert torch.equal(got, (j <= p) & (j // chunk == p // chunk))
    assert torch.equal(got, causal_mask(S, chunk=chunk)[S - T :])
    assert torch.equal(chunk_mask(T, S, chunk) & causal_mask(T, S), got)


@settings(max_examples=20, deadline=None)
@given(T=st.integers(1, 6), extra=st.integers(0, 4), chunk=st.integers(1, 5), kind=st.sampled_from(["none", "bool",
       "float"]), seed=st.integers(0, 2**16))
def test_every_implementation_attends_within_chunks(T: int, extra: int, chunk: int, kind: str, seed: int) -> None:
    """``chunk=`` goes through the one mask preparation: every implementation equals an explicit chunked mask,
    combined with the caller's mask."""
    from lessons_src.functional import ATTENTION_FUNCTIONS

    g = torch.Generator().manual_seed(seed)
    S = T + extra
    q = torch.randn(1, 4, T, 4, generator=g, dtype=torch.float64)
    k, v = (torch.randn(1, 2, S, 4, generator=g, dtype=torch.float64) for _ in range(2))
    keep = torch.rand(T, S, generator=g) > 0.2
    hidden = torch.zeros(T, S, dtype=torch.float64).masked_fill(~keep, float("-inf"))
    mask = {"none": None, "bool": keep, "float": hidden}[kind]
    explicit = causal_mask(T, S, chunk=chunk) & (keep if kind != "none" else True)
    want = attention(q, k, v, attn_mask=explicit, implementation="eager").output
    for impl in sorted(ATTENTION_FUNCTIONS):
        rules = [m for m in (mask, causal() & same_chunk(chunk)) if m is not None]
        got = attention(q, k, v, attn_mask=rules, is_causal=True, implementation=impl).output
        torch.testing.assert_close(got, want, atol=1e-10, rtol=1e-9, msg=lambda m, i=impl: f"{i}: {m}")


def test_chunk_and_window_are_refused_together_and_need_is_causal() -> None:
    with pytest.raises(ValueError, match=r"chunk=2 and window=3 are two ways to limit the keys"):
        causal_mask(4, chunk=2, window=3)
    with pytest.raises(ValueError, match=r"chunk must be at least 1 position .*; got chunk=0"):
        same_chunk(0)
    q = torch.randn(1, 1, 4, 4)  # a chunk rule alone is not causal: the layer's chunked attention is causal & chunk
    assert not torch.allclose(attention(q, q, q, attn_mask=same_chunk(2)).output,
                              attention(q, q, q, attn_mask=causal() & same_chunk(2)).output)


# --------------------------------------------------------------------------- packed documents and prefix LM


def _by_definition(T: int, S: int, keep) -> torch.Tensor:
    """A (T, S) mask built one entry at a time from ``keep(p, j)``, with ``p = i + S - T`` the query's position."""
    return torch.tensor([[bool(keep(i + S - T, j)) for j in range(S)] for i in range(T)])


@settings(max_examples=25, deadline=None)
@given(ids=st.lists(st.integers(0, 3), min_size=1, max_size=9), data=st.data())
def test_document_mask_is_its_definition(ids: list[int], data) -> None:
    """Query at position ``p`` sees key ``j`` when they share a document; with the causal mask, only ``j <= p``."""
    S = len(ids)
    T = data.draw(st.integers(1, S))
    docs = torch.tensor(sorted(ids))  # packed: each document's tokens side by side
    want = _by_definition(T, S, lambda p, j: docs[j] == docs[p])
    assert torch.equal(document_mask(docs, T), want)
    assert torch.equal(document_mask(docs, T) & causal_mask(T, S), _by_definition(T, S, lambda p, j: j <= p and want[p
                       - (S - T), j]))
    both = document_mask(torch.stack([docs, docs.flip(0)]), T)  # (B, S) ids: one mask per sequence
    assert both.shape == (2, 1, T, S) and torch.equal(both[0, 0], want)


def test_document_mask_by_hand() -> None:
    docs = torch.tensor([0, 0, 1, 1, 1])
    want = torch.tensor([[1, 0, 0, 0, 0],
                         [1, 1, 0, 0, 0],
                         [0, 0, 1, 0, 0],
                         [0, 0, 1, 1, 0],
                         [0, 0, 1, 1, 1]], dtype=torch.bool)
    assert torch.equal(document_mask(docs) & causal_mask(5), want)
    assert torch.equal(document_mask(docs, 2) & causal_mask(2, 5), want[3:])  # the last two, with three cached


@settings(max_examples=25, deadline=None)
@given(S=st.integers(1, 9), data=st.data())
def test_prefix_lm_mask_is_its_definition(S: int, data) -> None:
    T = data.draw(st.integers(1, S))
    P = data.draw(st.integers(0, S))
    assert torch.equal(prefix_lm_mask(T, S, prefix=P), _by_definition(T, S, lambda p, j: j <= p or j < P))
    assert torch.equal(prefix_lm_mask(T, S, prefix=0), causal_mask(T, S))
    both = prefix_lm_mask(T, S, prefix=[P, 0])
    assert both.shape == (2, 1, T, S) and torch.equal(both[0, 0], prefix_lm_mask(T, S, prefix=P))
    assert torch.equal(both[1, 0], causal_mask(T, S))


def test_prefix_lm_mask_by_hand() -> None:
    want = torch.tensor([[1, 1, 0, 0],
                         [1, 1, 0, 0],
                         [1, 1, 1, 0],
                         [1, 1, 1, 1]], dtype=torch.bool)
    assert torch.equal(prefix_lm_mask(4, prefix=2), want)
    assert torch.equal(prefix_lm_mask(1, 4, prefix=2), want[3:])


@settings(max_examples=15, deadline=None)
@given(T=st.integers(1, 5), extra=st.integers(0, 3), kind=st.sampled_from(["none", "bool", "float"]),
       seed=st.integers(0, 2**16))
def test_every_implementation_takes_documents_and_prefix(T: int, extra: int, kind: str, seed: int) -> None:
    """``documents=`` and ``prefix=`` go through the one mask preparation: every implementation, with or without
    sinks, equals the explicit mask, combined with the caller's."""
    from lessons_src.functional import ATTENTION_FUNCTIONS

    g = torch.Generator().manual_seed(seed)
    S = T + extra
    q = torch.randn(2, 4, T, 4, generator=g, dtype=torch.float64)
    k, v = (torch.randn(2, 2, S, 4, generator=g, dtype=torch.float64) for _ in range(2))
    keep = torch.rand(T, S, generator=g) > 0.2
    mask = {"none": None, "bool": keep, "float": torch.zeros(T, S, dtype=torch.float64).masked_fill(~keep, -math.inf)}
    caller = keep if kind != "none" else True
    docs = torch.randint(0, 3, (2, S), generator=g).sort(dim=-1).values  # (B, S)
    prefix = torch.randint(0, S + 1, (2,), generator=g).tolist()
    sinks = torch.randn(4, generator=g, dtype=torch.float64)
    cases = [(same_document(docs), True, document_mask(docs, T) & causal_mask(T, S) & caller),
             (prefix_lm(prefix), False, prefix_lm_mask(T, S, prefix=prefix) & caller)]  # causal after its prefix
    for rule, is_causal, explicit in cases:
        for s in (None, Sinks(sinks)):
            want = attention(q, k, v, attn_mask=explicit, implementation="eager", score_mods=s).output
            for impl in sorted(ATTENTION_FUNCTIONS):
                masks = [m for m in (mask[kind], rule) if m is not None]
                got = attention(q, k, v, attn_mask=masks, is_causal=is_causal, implementation=impl,
                                score_mods=s).output
                torch.testing.assert_close(got, want, atol=1e-10, rtol=1e-9, msg=lambda m, i=impl: f"{i}: {m}")


def test_documents_decoded_with_a_cache_equal_the_full_forward() -> None:
    """T != S: the ids cover the cached keys and the new token; decoding the last token of a packed row with a cache
    gives the full forward's last row."""
    from lessons_src.kv_cache import KVCache

    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, num_kv_heads=2).eval()
    x, docs = torch.randn(2, 6, 16), torch.tensor([[0, 0, 0, 1, 1, 1], [0, 1, 1, 1, 2, 2]])
    with torch.no_grad():
        full = mha(x, is_causal=True, attn_mask=same_document(docs))
        cache = KVCache(batch_size=2, num_kv_heads=2, head_dim=4, max_len=8)
        mha(x[:, :5], is_causal=True, cache=cache, attn_mask=same_document(docs[:, :5]))
        last = mha(x[:, 5:], is_causal=True, cache=cache, attn_mask=same_document(docs))
        wrong = mha(x, is_causal=True)  # without the ids the last token sees the other documents
    torch.testing.assert_close(last, full[:, 5:])
    assert (wrong[:, 5:] - full[:, 5:]).abs().max() > 1e-3


def test_prefix_and_documents_refuse_what_they_cannot_mean() -> None:

    q, layer, x = torch.randn(1, 1, 3, 4), MultiHeadAttention(4, 1), torch.randn(1, 3, 4)
    with pytest.raises(ValueError, match=r"prefix_lm widens the causal mask .*or a causal rule"):
        layer(x, attn_mask=prefix_lm(2) & sliding_window(2))  # a window would hide the prefix again
    with pytest.raises(ValueError, match=r"prefix_lm widens the causal mask .*without is_causal=True"):
        attention(q, q, q, is_causal=True, attn_mask=prefix_lm(2))  # the rule is causal after its prefix itself
    with pytest.raises(ValueError, match=r"documents give 4 positions but there are S=3 keys"):
        attention(q, q, q, is_causal=True, attn_mask=same_document(torch.zeros(4, dtype=torch.long)))
    with pytest.raises(ValueError, match=r"T=4 queries must be the last of the S=3 positions"):
        document_mask(torch.zeros(3, dtype=torch.long), T=4)


def test_lengths_given_as_ints_follow_the_mask_to_its_device() -> None:
    """An int prefix or a list of lengths has no device: the rule works wherever the mask is built (the queries'
    device), as `attention(..., prefix=2)` did; a tensor the caller placed elsewhere is still refused by name."""
    for rule in (prefix_lm(2), prefix_lm([1, 2]), padding([2, 3])):
        keep = mask_tensor(rule, 3, 4, B=2, device="meta")
        assert keep.device.type == "meta" and keep.shape[-2:] == (3, 4)
    with pytest.raises(ValueError, match=r"lengths are on cpu but the mask is built on meta"):
        mask_tensor(padding(torch.tensor([2, 3])), 1, 4, B=2, device="meta")
    torch.testing.assert_close(mask_tensor(prefix_lm([1, 2]), 3, 4, B=2)[:, 0],
                               prefix_lm_mask(3, 4, prefix=[1, 2])[:, 0])


# --------------------------------------------------------------------------- draft trees (speculative decoding)

parent_arrays = st.integers(1, 7).flatmap(
    lambda n: st.tuples(*[st.integers(-1, i - 1) for i in range(n)]).map(list))


def _ancestors_walked(parents: list[int], i: int) -> set[int]:
    """Node ``i`` and every node reached by following parents from it: the relation, computed directly."""
    out = {i}
    while parents[i] >= 0:
        i = parents[i]
        out.add(i)
    return out


@settings(max_examples=40, deadline=None)
@given(parents=parent_arrays, start=st.integers(0, 3))
def test_a_draft_node_sees_the_cache_and_exactly_its_ancestors(parents: list[int], start: int) -> None:
    n = len(parents)
    keep = mask_tensor(causal() & draft_tree(parents, start=start), n, start + n)[0, 0]  # (n, start + n)
    for i in range(n):
        seen = {j - start for j in range(start, start + n) if keep[i, j]}
        assert seen == _ancestors_walked(parents, i)
        assert bool(keep[i, :start].all())  # every cached key
    assert [len(_ancestors_walked(parents, i)) - 1 + start for i in range(n)] == tree_positions(parents, start).tolist()
    assert torch.equal(tree_ancestors(torch.tensor(parents)), keep[:, start:])


@settings(max_examples=20, deadline=None)
@given(parents=parent_arrays, start=st.integers(1, 3))
def test_a_full_pass_over_prompt_and_tree_is_causal_on_the_prompt(parents: list[int], start: int) -> None:
    S = start + len(parents)
    keep = mask_tensor(causal() & draft_tree(parents, start=start), S)[0, 0]
    assert torch.equal(keep[:start], causal_mask(S)[:start])  # the prompt's queries: causal, no draft seen


def test_a_chain_is_the_causal_mask() -> None:
    assert torch.equal(mask_tensor(draft_tree([-1, 0, 1, 2], start=3), 4, 7)[0, 0], causal_mask(4, 7))
    assert tree_positions([-1, 0, 1, 2], start=3).tolist() == [3, 4, 5, 6]


def test_a_window_over_a_tree_is_measured_by_positions() -> None:
    parents = [-1, 0, 0, 1, 2]  # two branches: positions 4, 5, 5, 6, 6 after a 4-token prompt
    pos = torch.cat([torch.arange(4), tree_positions(parents, 4)])  # (9,)
    keep = mask_tensor(at_positions(sliding_window(3), pos) & draft_tree(parents, start=4), 5, 9)[0, 0]
    assert keep[4].int().tolist() == [0, 0, 0, 0, 1, 0, 1, 0, 1]  # node 4, at 6: ancestors at 4, 5; itself
    by_slot = mask_tensor(sliding_window(3) & draft_tree(parents, start=4), 5, 9)[0, 0]
    assert not torch.equal(keep, by_slot)  # slots would hide the root from node 4, its grandparent


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: tree_ancestors([0]), ValueError, "parents\\[0\\]=0"),
    (lambda: tree_ancestors([-1, 2, 0]), ValueError, "must come before"),
    (lambda: tree_ancestors([]), ValueError, "at least one node"),
    (lambda: tree_ancestors([-1, 0.5]), TypeError, "parents\\[1\\] must be an int"),
    (lambda: tree_ancestors("01"), TypeError, "parents must be a list"),
    (lambda: tree_ancestors(torch.tensor([[-1]])), ValueError, "1-D"),
    (lambda: tree_ancestors(torch.tensor([-1.0])), TypeError, "integer"),
    (lambda: tree_positions([-1], start=-1), ValueError, "start must be at least 0"),
    (lambda: draft_tree([-1], start=True), TypeError, "start"),
    (lambda: mask_tensor(draft_tree([-1, 0], start=2), 2, 5), ValueError, "S must be 4"),
    (lambda: at_positions(causal(), torch.tensor([0.0, 1.0])), TypeError, "integer tensor"),
    (lambda: at_positions("causal", torch.arange(3)), TypeError, "MaskRule"),
    (lambda: at_positions(causal(), torch.zeros(1, 1, 3, dtype=torch.long)), ValueError, "positions must be"),
    (lambda: mask_tensor(at_positions(causal(), torch.arange(3)), 2, 4), ValueError, "one position per key slot"),
])
def test_draft_tree_arguments_get_clear_errors(call, error, match) -> None:
    with pytest.raises(error, match=match):
        call()
