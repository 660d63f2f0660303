"""lessons_src.speculative: drafts from the context, chains merged into a tree, greedy acceptance, the kept path."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lessons_src.kv_cache import KVCache
from lessons_src.masks import tree_ancestors
from lessons_src.speculative import DraftCache, accept_greedy, prompt_lookup, tree_from_drafts

contexts = st.lists(st.integers(0, 3), min_size=1, max_size=24)


@settings(max_examples=60, deadline=None)
@given(ids=contexts, ngram=st.integers(1, 3), draft_len=st.integers(1, 4), max_drafts=st.integers(1, 3))
def test_prompt_lookup_copies_what_followed_the_latest_matches(ids, ngram, draft_len, max_drafts) -> None:
    drafts = prompt_lookup(torch.tensor(ids), ngram=ngram, draft_len=draft_len, max_drafts=max_drafts)
    for n in range(min(ngram, len(ids) - 1), 0, -1):  # the longest n-gram with a match, written out
        starts = [s for s in range(len(ids) - n - 1, -1, -1) if ids[s : s + n] == ids[-n:]]
        if starts:
            want: list[list[int]] = []
            for s in starts:
                chain = ids[s + n : s + n + draft_len]
                if chain not in want:
                    want.append(chain)
            assert drafts == want[:max_drafts]
            return
    assert drafts == []


@settings(max_examples=60, deadline=None)
@given(drafts=st.lists(st.lists(st.integers(0, 2), min_size=1, max_size=4), max_size=4), root=st.integers(0, 9))
def test_each_draft_is_a_root_to_node_path_and_shared_beginnings_are_one_node(drafts, root) -> None:
    tokens, parents = tree_from_drafts(root, drafts)
    seen = tree_ancestors(parents)
    paths = {tuple(tokens[a] for a in range(len(tokens)) if seen[i, a]) for i in range(len(tokens))}
    assert tokens[0] == root and parents[0] == -1
    for chain in drafts:
        assert (root, *chain) in paths
    prefixes = {(root,)} | {(root, *c[:k]) for c in drafts for k in range(len(c) + 1)}
    assert len(tokens) == len(prefixes)  # one node per distinct beginning: nothing repeated, nothing extra


def test_accept_greedy_follows_the_model_and_adds_its_next_token() -> None:
    tokens, parents = tree_from_drafts(0, [[5, 6, 7], [5, 8], [4]])  # nodes: 0, 5, 6, 7, 8, 4
    best = [5, 8, 9, 9, 3, 9]  # node 0 wants 5, node "5" wants 8 (the second branch), node "8" wants 3
    path, after = accept_greedy(tokens, parents, torch.eye(10)[best])
    assert [tokens[i] for i in path] == [0, 5, 8] and after == 3
    path, after = accept_greedy(tokens, parents, torch.eye(10)[[2] * 6])
    assert path == [0] and after == 2  # nothing accepted: the pass still writes the model's own token


def test_draft_cache_keeps_a_chain_by_truncating_and_writes_a_branch_again() -> None:
    inner = KVCache(batch_size=1, num_kv_heads=1, head_dim=2, max_len=8)
    cache = DraftCache(inner)
    cache.update(torch.zeros(1, 1, 2, 2), torch.zeros(1, 1, 2, 2))
    k = torch.randn(1, 1, 4, 2)
    cache.update(k, k)
    before = inner.k.clone()
    cache.keep([0, 1])
    assert inner.length == 4 and torch.equal(inner.k, before)  # nothing written again
    with pytest.raises(ValueError, match="once after each verification pass"):
        cache.keep([0])
    cache.update(k, k)  # positions 4..7
    cache.keep([0, 3])
    assert inner.length == 6 and torch.equal(inner.k[:, :, 4:6], k[:, :, [0, 3]])
    cache.update(k[:, :, :2], k[:, :, :2])
    with pytest.raises(ValueError, match="increasing indices"):
        cache.keep([1, 0])
