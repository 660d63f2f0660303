"""Speculative decoding end to end: a draft tree checked in one pass equals each path decoded alone, the caches keep
the accepted path (contiguous, rolling window), and the written text equals plain greedy decoding."""

from __future__ import annotations

import pytest
import torch

from lessons_src.lab.pattern_model import PatternConfig, PatternGPT, gpt_oss_pattern
from lessons_src.lab.speculation import greedy_cached, speculative_greedy
from lessons_src.lab.text_model import (
    TextConfig,
    TextGPT,
    corpus_bytes,
    load_text_model,
    probe_texts,
    split_corpus,
)
from lessons_src.masks import draft_tree, tree_positions
from lessons_src.paged_cache import PagedKVCache, PagedView
from lessons_src.speculative import DraftCache, accept_greedy

PARENTS = [-1, 0, 0, 1, 1, 2, 3]  # a root, two children, grandchildren on both branches, depth 3
TOL = {torch.float32: {"atol": 2e-5, "rtol": 1e-5}, torch.float64: {"atol": 1e-10, "rtol": 1e-10}}
MISTAKES = ["none", "causal by index", "positions by index"]


def _ancestors(i: int) -> list[int]:
    path = [i]
    while PARENTS[path[-1]] >= 0:
        path.append(PARENTS[path[-1]])
    return path[::-1]


def _per_path(model: torch.nn.Module, prompt: torch.Tensor, tree: torch.Tensor) -> torch.Tensor:
    """Each node's logits from decoding its root-to-node path alone, after the prompt: the reference."""
    rows = []
    for i in range(len(PARENTS)):
        out = model(torch.cat([prompt, tree[_ancestors(i)]])[None])
        rows.append((out[0] if isinstance(out, tuple) else out)[0, -1])
    return torch.stack(rows)  # (n, V)


def _mask_and_positions(mistake: str, start: int) -> tuple[object, torch.Tensor]:
    pos = tree_positions(PARENTS, start)
    if mistake == "positions by index":
        pos = torch.arange(start, start + len(PARENTS))
    return (None if mistake == "causal by index" else draft_tree(PARENTS, start=start)), pos


@pytest.mark.parametrize("mistake", MISTAKES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_one_pass_over_a_tree_equals_each_path_alone_pattern_model(dtype: torch.dtype, mistake: str) -> None:
    """RoPE, a window of 3 (shorter than prompt + tree) and GQA (4 query heads, 2 KV heads)."""
    torch.manual_seed(0)
    model = PatternGPT(PatternConfig(gpt_oss_pattern(2, window=3), vocab_size=32, num_heads=4, num_kv_heads=2))
    model = model.to(dtype).eval()
    prompt, tree = torch.randint(0, 32, (6,)), torch.randint(0, 32, (len(PARENTS),))
    mask, pos = _mask_and_positions(mistake, 6)
    with torch.no_grad():
        one = model(torch.cat([prompt, tree])[None], positions=torch.cat([torch.arange(6), pos])[None],
                    attn_mask=mask)[0, 6:]  # (n, V): the prompt and the whole tree in one pass
        ref = _per_path(model, prompt, tree)
    if mistake == "none":
        torch.testing.assert_close(one, ref, **TOL[dtype])
    else:  # the test can fail: each mistake changes the logits of some node
        assert not torch.allclose(one, ref, **TOL[dtype])


@pytest.mark.parametrize("mistake", MISTAKES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_one_pass_over_a_tree_equals_each_path_alone_text_model_cached(dtype: torch.dtype, mistake: str) -> None:
    """The prompt prefilled into the caches, then the tree in one cached pass; the path kept, and decoding goes on."""
    torch.manual_seed(1)
    model = TextGPT(TextConfig(d_model=32, num_heads=4, max_len=32, d_ff=64)).to(dtype).eval()
    prompt, tree = torch.randint(0, 256, (5,)), torch.randint(0, 256, (len(PARENTS),))
    mask, pos = _mask_and_positions(mistake, 5)
    caches = [DraftCache(c) for c in model.make_caches(batch_size=1)]
    with torch.no_grad():
        model(prompt[None], caches=caches)
        one, _ = model(tree[None], caches=caches, positions=pos[None], attn_mask=mask)  # (1, n, V)
        ref = _per_path(model, prompt, tree)
    if mistake != "none":
        assert not torch.allclose(one[0], ref, **TOL[dtype])
        return
    torch.testing.assert_close(one[0], ref, **TOL[dtype])
    path = _ancestors(6)  # [0, 1, 3, 6]: skips node 2 and others, so it is written again, not only truncated
    for c in caches:
        c.keep(path)
    assert caches[0].length == 5 + len(path)
    with torch.no_grad():
        nxt, _ = model(torch.tensor([[7]]), caches=caches)
        full, _ = model(torch.cat([prompt, tree[path], torch.tensor([7])])[None])
    torch.testing.assert_close(nxt[0, -1], full[0, -1], **TOL[dtype])


def _prompts() -> dict[str, torch.Tensor]:
    _, val = split_corpus(corpus_bytes(), 0.1)
    repeated = probe_texts(val, 6, 64)[0]  # 64 bytes written twice, as the model's training repeats them
    return {"held out": val[1000:1048], "repeated": repeated[:72], "short": val[500:503]}


def test_speculative_text_equals_greedy_token_for_token() -> None:
    """Chains and trees of prompt-lookup drafts, on a held-out text, a repeated one and a prompt of 3 bytes."""
    model = load_text_model()
    accepted = []
    for name, prompt in _prompts().items():
        plain = greedy_cached(model, prompt, 30)
        for max_drafts in (1, 3):
            spec, stats = speculative_greedy(model, prompt, 30, max_drafts=max_drafts)
            assert torch.equal(spec, plain), (name, max_drafts)
            accepted.append(stats.tokens_per_pass)
    assert max(accepted) > 1.5  # drafts were kept: the rollback was exercised


def _chain_decode(model: PatternGPT, prompt: torch.Tensor, steps: int, reference: list[int], *, spare: int,
                  draft: int) -> torch.Tensor:
    """Greedy decoding with chains of ``draft`` guesses (right for a while, then wrong), rolled back by truncate.

    Returns the logits each written token was chosen from, ``(steps, V)``."""
    caches = model.make_caches(batch_size=1, max_len=64, spare=spare)
    rows = [model(prompt[None], caches=caches)[0, -1]]
    out = [int(rows[0].argmax())]
    while len(out) < steps:
        start = len(prompt) + len(out) - 1
        guess = reference[len(out) : len(out) + draft]
        guess = guess[: len(out) % (draft + 1)] + [(t + 1) % 32 for t in guess[len(out) % (draft + 1) :]]
        tokens = [out[-1], *guess]
        logits = model(torch.tensor([tokens]), caches=caches)[0]  # a chain: positions in order
        path, after = accept_greedy(tokens, list(range(-1, len(tokens) - 1)), logits)
        for c in caches:
            c.truncate(start + len(path))  # a chain's path is a prefix: truncate is the rollback
        out += [*tokens[1 : len(path)], after]
        rows += [logits[i] for i in path]
    return torch.stack(rows[:steps])


def test_rolling_window_cache_rolls_back_with_spare_slots_and_fails_without() -> None:
    torch.manual_seed(2)
    model = PatternGPT(PatternConfig(gpt_oss_pattern(2, window=4), vocab_size=32, num_heads=4, num_kv_heads=2)).eval()
    prompt = torch.randint(0, 32, (6,))
    with torch.no_grad():
        caches = model.make_caches(batch_size=1, max_len=64)
        plain = [model(prompt[None], caches=caches)[0, -1]]
        for _ in range(19):
            plain.append(model(plain[-1].argmax().view(1, 1), caches=caches)[0, -1])
        reference = [int(p.argmax()) for p in plain]
        spec = _chain_decode(model, prompt, 20, reference, spare=3, draft=3)
        torch.testing.assert_close(spec, torch.stack(plain), atol=2e-5, rtol=1e-5)
        with pytest.raises(ValueError, match="spare >= the longest draft"):
            _chain_decode(model, prompt, 20, reference, spare=0, draft=3)


def test_paged_pool_keeps_the_accepted_path_and_frees_the_rejected_pages() -> None:
    """One sequence per layer's pool, read through a PagedView: the text equals greedy, and after each pass the pool
    holds exactly the pages of the kept tokens."""
    model = load_text_model()
    prompt = _prompts()["repeated"]
    pools = [PagedKVCache(num_blocks=40, block_size=4, num_kv_heads=4, head_dim=32) for _ in range(2)]
    for pool in pools:
        pool.add_sequence(0)
    spec, stats = speculative_greedy(model, prompt, 30, max_drafts=3, caches=[PagedView(p, [0]) for p in pools])
    assert torch.equal(spec, greedy_cached(model, prompt, 30))
    assert stats.tokens_per_pass > 1.5 and max(stats.nodes) > max(stats.written)  # branches were rejected
    for pool in pools:  # every token read is held (the last written one is pending), in exactly its pages
        held = pool.lengths[0]
        assert held >= len(prompt) + 30 - 1 and pool.num_free_blocks == 40 - -(-held // 4)


def test_pattern_model_refuses_tree_arguments_it_cannot_honour() -> None:
    """Positions with a rolling cache (it places keys by its own count), and a tree on layers that share keys."""
    from lessons_src.lab.pattern_model import gemma3_pattern, share_kv

    model = PatternGPT(PatternConfig(gpt_oss_pattern(2, window=3), vocab_size=32))
    caches = model.make_caches(batch_size=1, max_len=16)
    with pytest.raises(ValueError, match="positions with a rolling or chunked cache"):
        model(torch.zeros(1, 3, dtype=torch.long), caches=caches, positions=torch.tensor([[0, 1, 1]]))
    shared = PatternGPT(PatternConfig(share_kv(gemma3_pattern(4, window=3, every=2), 1), vocab_size=32))
    with pytest.raises(ValueError, match="share keys and values"):
        shared(torch.zeros(1, 3, dtype=torch.long), attn_mask=draft_tree([-1, 0, 0], start=0))
