"""lessons_src.sparse_selection: the lightning indexer against transformers' DeepSeek-V3.2 indexer, MoBA against a
per-query loop, and attention over a selection against attention restricted to the same keys.

top_k is always below the number of keys most queries see: with every key picked, a dense answer would pass.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from hf_weights import copy_deepseek_weights

from lessons_src.functional import attention
from lessons_src.masks import causal_mask
from lessons_src.sparse_selection import gather_selected, lightning_indexer_scores, moba_mask, top_k_mask

T, TOP_K = 24, 5


def v32_indexer(seed: int = 0) -> tuple[object, dict[str, torch.Tensor]]:
    """transformers' DeepSeek-V3.2 indexer with random weights, and the inputs its attention layer gives it."""
    from transformers import DeepseekV32Config
    from transformers.models.deepseek_v32 import modeling_deepseek_v32 as hf

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = DeepseekV32Config(hidden_size=32, num_attention_heads=2, num_key_value_heads=2, q_lora_rank=12,
                                kv_lora_rank=8, qk_rope_head_dim=4, qk_nope_head_dim=8, v_head_dim=8,
                                index_n_heads=4, index_head_dim=16, index_topk=TOP_K, vocab_size=16,
                                num_hidden_layers=1)
    torch.manual_seed(seed)
    indexer = hf.DeepseekV32Indexer(cfg, layer_idx=0).eval()
    for p in indexer.parameters():
        torch.nn.init.normal_(p, std=0.5)
    x, q_resid = torch.randn(2, T, 32), torch.randn(2, T, 12)
    cos, sin = hf.DeepseekV32RotaryEmbedding(cfg)(x, torch.arange(T)[None].expand(2, T))
    assert cos.shape[-1] == cfg.qk_rope_head_dim
    return indexer, {"x": x, "q_resid": q_resid, "cos": cos, "sin": sin}


def our_inputs(indexer: object, inp: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The indexer's queries, keys and head weights, from its own projections and RoPE (what our function scores)."""
    from transformers.models.deepseek_v32.modeling_deepseek_v32 import apply_rotary_pos_emb

    m = indexer
    B, Hi, Di, R = 2, m.n_heads, m.head_dim, m.qk_rope_head_dim  # type: ignore[attr-defined]
    q = m.wq_b(inp["q_resid"]).view(B, T, Hi, Di)  # type: ignore[attr-defined]
    k = m.k_norm(m.wk(inp["x"]))[:, :, None]  # type: ignore[attr-defined]
    q_rot, k_rot = apply_rotary_pos_emb(q[..., :R], k[..., :R], inp["cos"], inp["sin"], unsqueeze_dim=2)
    q, k = torch.cat([q_rot, q[..., R:]], -1), torch.cat([k_rot, k[..., R:]], -1)[:, :, 0]
    weights = m.weights_proj(inp["x"]) * Hi**-0.5  # type: ignore[attr-defined]
    return q.transpose(1, 2), k, weights.transpose(1, 2)


def test_the_indexer_picks_what_deepseek_v32_picks() -> None:
    indexer, inp = v32_indexer()
    with torch.no_grad():
        theirs = indexer(inp["x"], inp["q_resid"], (inp["cos"], inp["sin"]),  # type: ignore[operator]
                         causal_mask(T)[None].expand(2, T, T), None)
        q, k, w = our_inputs(indexer, inp)
        scores = lightning_indexer_scores(q, k, w)
    keep = top_k_mask(scores, TOP_K)
    assert keep.shape == (2, 1, T, T)  # one selection for all the layer's heads
    visible = causal_mask(T)
    compared = 0
    for b in range(2):
        for t in range(T):
            row = scores[b, t].masked_fill(~visible[t], float("-inf")).sort(descending=True).values
            if t + 1 > TOP_K and row[TOP_K - 1] - row[TOP_K] < 1e-4:
                continue  # a near tie: either pick is right
            picked = {int(j) for j in theirs[b, t] if visible[t, int(j)]}
            assert set(keep[b, 0, t].nonzero().flatten().tolist()) == picked, (b, t)
            compared += 1
    assert compared > 40 and int(keep[:, 0, -1].sum(-1).min()) == TOP_K < T  # a real selection, not everything


def test_causality_comes_before_the_pick() -> None:
    """A late query whose best keys lie in its future still keeps top_k keys, all visible: picking first and then
    masking would leave it fewer."""
    scores = torch.arange(T, dtype=torch.float32).expand(1, T, T).clone()  # later keys score higher
    keep = top_k_mask(scores, TOP_K)[0, 0]
    assert keep[:TOP_K].sum(-1).tolist() == list(range(1, TOP_K + 1))  # early queries keep all they see
    assert keep[TOP_K:].sum(-1).eq(TOP_K).all() and not (keep & ~causal_mask(T)).any()
    assert keep[10].nonzero().flatten().tolist() == list(range(10 - TOP_K + 1, 11))


def test_attention_over_a_selection_and_one_decoding_step() -> None:
    """The mask restricts attention to the picked keys; one step with the picked keys gathered gives the same row."""
    torch.manual_seed(1)
    q, k, v = torch.randn(2, 4, T, 8), torch.randn(2, 4, T, 8), torch.randn(2, 4, T, 6)
    keep = top_k_mask(torch.randn(2, T, T), TOP_K)
    out = attention(q, k, v, attn_mask=keep).output
    scores = (q @ k.transpose(-1, -2) / 8**0.5).masked_fill(~keep, float("-inf"))
    assert torch.allclose(out, scores.softmax(-1) @ v, atol=1e-5)
    assert not torch.allclose(out, attention(q, k, v, is_causal=True).output, atol=1e-3)  # the pick matters
    k_sel, v_sel = gather_selected(k, v, keep[:, :, -1:])
    step = attention(q[:, :, -1:], k_sel, v_sel).output
    assert torch.allclose(step, out[:, :, -1:], atol=1e-5)


def moba_loop(q: torch.Tensor, k: torch.Tensor, block: int, top_k: int) -> torch.Tensor:
    """MoBA's selection as its reference code (MoonshotAI/MoBA, ``moba_naive.py``) makes it, query by query: a gate
    per block (the query's dot product with the block's mean key), ``+inf`` for the query's own block and ``-inf``
    for blocks that do not end before the query; the ``min(top_k, blocks)`` largest gates kept; then causality."""
    B, H, Tq, _ = q.shape
    S = k.shape[2]
    n_blocks = -(-S // block)
    keep = torch.zeros(B, H, Tq, S, dtype=torch.bool)
    for b in range(B):
        for h in range(H):
            for t in range(Tq):
                pos = t + S - Tq
                gate = [float(q[b, h, t] @ k[b, h, n * block:(n + 1) * block].mean(0)) for n in range(n_blocks)]
                for n in range(n_blocks):
                    if (n + 1) * block > pos:  # the block is not whole before the query
                        gate[n] = math.inf if n == pos // block else -math.inf
                for n in sorted(range(n_blocks), key=lambda n: -gate[n])[:min(top_k, n_blocks)]:
                    keep[b, h, t, n * block:min((n + 1) * block, pos + 1)] = True  # causally
    return keep


@pytest.mark.parametrize(("Tq", "S", "block"), [(T, T, 4), (T, T, 5), (3, T + 2, 4)])
@pytest.mark.parametrize("top_k", [1, 3, 5])
def test_moba_matches_the_reference_codes_pick(Tq: int, S: int, block: int, top_k: int) -> None:
    torch.manual_seed(2)
    q, k = torch.randn(2, 3, Tq, 8), torch.randn(2, 3, S, 8)
    keep = moba_mask(q, k, block_size=block, top_k=top_k)
    assert torch.equal(keep, moba_loop(q, k, block, top_k))
    if 1 < top_k < -(-S // block):  # a real choice: neither the own block alone nor every block
        assert not torch.equal(keep[:, 0], keep[:, 1])  # each head picks for itself
        assert (keep.sum(-1) < causal_mask(Tq, S).sum(-1)).any()  # and leaves keys out


def test_moba_top_k_counts_the_own_block() -> None:
    """``top_k=1``: the own block alone (a block-diagonal causal mask); ``top_k`` = the number of blocks or more:
    every earlier key, plain causal attention (MoBA's dense setting)."""
    torch.manual_seed(3)
    q, k = torch.randn(1, 2, 10, 4), torch.randn(1, 2, 10, 4)
    pos = torch.arange(10)
    own_block = (pos[:, None] // 4 == pos[None, :] // 4) & causal_mask(10, 10)
    assert torch.equal(moba_mask(q, k, block_size=4, top_k=1), own_block.expand(1, 2, 10, 10))
    for dense in (3, 4, 100):  # 3 blocks of 4, 4 and 2 keys
        assert torch.equal(moba_mask(q, k, block_size=4, top_k=dense), causal_mask(10, 10).expand(1, 2, 10, 10))
    blocks_kept = moba_mask(q, k, block_size=2, top_k=2)[0, :, -1].view(2, 5, 2).any(-1).sum(-1)
    assert blocks_kept.tolist() == [2, 2]  # the last query: its own block and one earlier one


def test_bad_inputs_are_refused_with_the_values() -> None:
    scores = torch.randn(1, 4, 6)
    with pytest.raises(ValueError, match="top_k must be at least 1; got top_k=0"):
        top_k_mask(scores, 0)
    with pytest.raises(TypeError, match=r"top_k must be an int; got 2\.0"):
        top_k_mask(scores, 2.0)
    with pytest.raises(ValueError, match=r"scores hold NaN where a query picks \(first at index \[0, 3, 1\]\)"):
        top_k_mask(scores.index_put((torch.tensor(0), torch.tensor(3), torch.tensor(1)), torch.tensor(math.nan)), 2)
    with pytest.raises(ValueError, match=r"weights must be \(B, Hi, T\) = \(1, 2, 4\)"):
        lightning_indexer_scores(torch.randn(1, 2, 4, 8), torch.randn(1, 6, 8), torch.randn(1, 4, 2))
    with pytest.raises(ValueError, match=r"q must be \(B, Hi, T, Di\) and k \(B, S, Di\)"):
        lightning_indexer_scores(torch.randn(1, 2, 4, 8), torch.randn(1, 6, 4), torch.randn(1, 2, 4))
    q, k = torch.randn(1, 2, 6, 4), torch.randn(1, 2, 6, 4)
    with pytest.raises(ValueError, match="block_size must be at least 1; got block_size=0"):
        moba_mask(q, k, block_size=0, top_k=1)
    with pytest.raises(ValueError, match="top_k must be at least 1; got top_k=0"):
        moba_mask(q, k, block_size=2, top_k=0)
    with pytest.raises(ValueError, match=r"the blocks' scores .* hold NaN"):
        moba_mask(q.index_put((torch.tensor(0), torch.tensor(0), torch.tensor(5)), torch.tensor(math.nan)), k,
                  block_size=2, top_k=2)
    with pytest.raises(ValueError, match="every batch row must pick as many keys"):
        gather_selected(torch.randn(2, 1, 6, 4), torch.randn(2, 1, 6, 4),
                        torch.tensor([[1, 1, 0, 0, 0, 0], [1, 0, 0, 0, 0, 0]], dtype=torch.bool)[:, None, None])


def test_numpy_ints_and_a_top_k_above_the_keys_are_taken() -> None:
    """An int from numpy counts as an int, as everywhere in the package; ``top_k`` above ``S`` is ``S``
    (DeepSeek-V3.2's indexer takes ``min(index_topk, S)``), so every visible key is kept."""
    np = pytest.importorskip("numpy")
    scores = torch.randn(2, 4, 6)
    torch.testing.assert_close(top_k_mask(scores, np.int64(3)), top_k_mask(scores, 3))
    assert torch.equal(top_k_mask(scores, 7), causal_mask(4, 6).expand(2, 1, 4, 6))
    q, k = torch.randn(1, 2, 6, 4), torch.randn(1, 2, 6, 4)
    assert torch.equal(moba_mask(q, k, block_size=np.int32(2), top_k=np.int64(2)), moba_mask(q, k, block_size=2,
                                                                                             top_k=2))
    a_nan_no_query_ranks = q.index_put((torch.tensor(0), torch.tensor(0), torch.tensor(0)), torch.tensor(math.nan))
    moba_mask(a_nan_no_query_ranks, k, block_size=2, top_k=2)  # query 0 has no earlier block to rank: no error


def test_mla_over_the_indexers_pick_is_deepseek_v32s_attention() -> None:
    """DeepSeek-V3.2's attention layer (its indexer's pick, then MLA over it) and ours with its weights: the same
    output in both modes, not the dense one; and decoding the last token from a cache gives the full pass's row."""
    from transformers import DeepseekV32Config
    from transformers.models.deepseek_v32 import modeling_deepseek_v32 as hf

    from lessons_src.kv_cache import LatentCache
    from lessons_src.mla import MultiHeadLatentAttention

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = DeepseekV32Config(hidden_size=32, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=12,
                                kv_lora_rank=16, qk_rope_head_dim=4, qk_nope_head_dim=8, v_head_dim=6,
                                index_n_heads=4, index_head_dim=16, index_topk=TOP_K, attention_bias=False,
                                rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    cfg._attn_implementation = "eager"
    torch.manual_seed(3)
    ref = hf.DeepseekV32Attention(cfg, layer_idx=0).eval()
    ref.q_a_layernorm, ref.kv_a_layernorm = torch.nn.Identity(), torch.nn.Identity()  # as test_mla's V2 pair
    for p in ref.indexer.parameters():
        torch.nn.init.normal_(p, std=0.5)
    ours = MultiHeadLatentAttention(32, 4, kv_latent_dim=16, rope_dim=4, head_dim=8, v_head_dim=6,
                                    q_latent_dim=12).eval()
    copy_deepseek_weights(ref, ours)
    x = torch.randn(2, T, 32)
    cos, sin = hf.DeepseekV32RotaryEmbedding(cfg)(x, torch.arange(T)[None].expand(2, T))
    with torch.no_grad():
        additive = torch.zeros(2, 1, T, T).masked_fill(~causal_mask(T), float("-inf"))  # its eager path adds masks
        expected, _ = ref(x, (cos, sin), additive)
        assert ours.q_down_proj is not None
        q, k, w = our_inputs(ref.indexer, {"x": x, "q_resid": ours.q_down_proj(x), "cos": cos, "sin": sin})
        keep = top_k_mask(lightning_indexer_scores(q, k, w), TOP_K)
        for mode in ("naive", "absorbed"):
            torch.testing.assert_close(ours(x, mode=mode, attn_mask=keep), expected, atol=1e-5, rtol=1e-4)
        assert not torch.allclose(ours(x), expected, atol=1e-3)  # the pick changes the answer
        cache = LatentCache(2, 16, 4, max_len=T)
        ours(x[:, :-1], cache=cache, attn_mask=keep[:, :, :-1, :-1])
        step = ours(x[:, -1:], cache=cache, mode="absorbed", attn_mask=keep[:, :, -1:])
        torch.testing.assert_close(step, expected[:, -1:], atol=1e-5, rtol=1e-4)
    with pytest.raises(ValueError, match=r"attn_mask must be a bool keep-mask of \(24, 24\) or \(2, 1, 24, 24\)"):
        ours(x, attn_mask=keep.float())
