"""The one attention interface: every implementation accepts the same inputs and gives the same answer.

Each implementation registered in ``ATTENTION_FUNCTIONS`` (and every public entry point built on them)
is compared with an fp64 reference written here from the definition (softmax over the visible keys; a
query that sees no key gets zeros), forward and backward, on drawn shapes (``T`` and ``S`` from 0, ``T``
different from ``S``), head counts (MHA, GQA, MQA), dtypes (bf16 included) and every mask form.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from lessons_src import MultiHeadAttention, attention, causal_mask, explicit_attention, padding_mask
from lessons_src.functional import ATTENTION_FUNCTIONS, ATTENTION_SUPPORTS, Supports, register_attention
from lessons_src.masks import sliding_window
from lessons_src.score_mods import Sinks, SoftCap

IMPLEMENTATIONS = sorted(ATTENTION_FUNCTIONS)
# Tolerances against the fp64 reference: float64 is exact to rounding; bf16 keeps 8 bits of mantissa.
TOL = {
    torch.float64: {"atol": 1e-10, "rtol": 1e-9},
    torch.float32: {"atol": 2e-5, "rtol": 1e-4},
    torch.bfloat16: {"atol": 4e-2, "rtol": 4e-2},
}
GRAD_TOL = {
    torch.float64: {"atol": 1e-9, "rtol": 1e-8},
    torch.float32: {"atol": 1e-4, "rtol": 1e-3},
    torch.bfloat16: {"atol": 1.5e-1, "rtol": 1e-1},
}


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, visible: torch.Tensor, bias: torch.Tensor):
    """fp64 attention from the definition: ``visible`` (B, H, T, S) bool, ``bias`` (B, H, T, S) added."""
    q, k, v, bias = q.double(), k.double(), v.double(), bias.double()
    n_rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(n_rep, dim=1), v.repeat_interleave(n_rep, dim=1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) + bias
    scores = scores.masked_fill(~visible, float("-inf"))
    # zeros that stay in the graph (a query that sees nothing has output 0 and gradient 0)
    out = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=torch.float64) + 0.0 * (q.sum() + k.sum() + v.sum())
    B, H, T, _ = visible.shape
    for b in range(B):
        for h in range(H):
            for t in range(T):
                row = visible[b, h, t]
                if row.any():
                    w = torch.softmax(scores[b, h, t, row], dim=-1)
                    out[b, h, t] = w @ v[b, h, row]
    return out


def draw_mask(kind: str, B: int, H: int, T: int, S: int, g: torch.Generator):
    """A mask of the given form, and what it means: (mask or None, visible (B, H, T, S), bias (B, H, T, S))."""
    full = torch.ones(B, H, T, S, dtype=torch.bool)
    zero = torch.zeros(B, H, T, S, dtype=torch.float64)
    if kind == "none":
        return None, full, zero
    if kind == "bool_full":
        m = torch.rand(B, H, T, S, generator=g) > 0.4
        return m, m.clone(), zero
    if kind == "bool_TS":
        m = torch.rand(T, S, generator=g) > 0.4
        return m, m.expand(B, H, T, S).clone(), zero
    if kind == "bool_S":  # 1-D: a key mask shared by every query
        m = torch.rand(S, generator=g) > 0.4
        return m, m.expand(B, H, T, S).clone(), zero
    if kind == "padding":
        lengths = torch.randint(1, S + 1, (B,), generator=g) if S > 0 else None
        if lengths is None:
            return None, full, zero
        m = padding_mask(lengths.tolist(), S)  # (B, 1, 1, S)
        return m, m.expand(B, H, T, S).clone(), zero
    if kind == "float_TS":  # additive, with some -inf
        f = torch.randn(T, S, generator=g, dtype=torch.float64)
        hide = torch.rand(T, S, generator=g) > 0.7
        f = f.masked_fill(hide, float("-inf"))
        return f, (~hide).expand(B, H, T, S).clone(), f.masked_fill(hide, 0.0).expand(B, H, T, S).clone()
    raise AssertionError(kind)


MASK_KINDS = ["none", "bool_full", "bool_TS", "bool_S", "padding", "float_TS"]


def bottom_right(T: int, S: int) -> torch.Tensor:
    i = torch.arange(T)[:, None]
    j = torch.arange(S)[None, :]
    return j <= i + S - T  # written from the definition, not with the package's causal_mask


@settings(max_examples=60, deadline=None)
@given(
    B=st.integers(1, 2),
    T=st.integers(0, 4),
    S=st.integers(0, 5),
    H_K=st.sampled_from([(1, 1), (2, 2), (4, 2), (4, 1), (2, 1)]),
    E=st.sampled_from([2, 4]),
    dtype=st.sampled_from([torch.float64, torch.float32, torch.bfloat16]),
    kind=st.sampled_from(MASK_KINDS),
    causal=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_every_implementation_equals_the_reference_forward_and_backward(B, T, S, H_K, E, dtype, kind, causal, seed):
    H, K = H_K
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, T, E, generator=g, dtype=torch.float64)
    k = torch.randn(B, K, S, E, generator=g, dtype=torch.float64)
    v = torch.randn(B, K, S, E + 1, generator=g, dtype=torch.float64)
    mask, visible, bias = draw_mask(kind, B, H, T, S, g)
    if causal:
        visible &= bottom_right(T, S)
    upstream = torch.randn(B, H, T, E + 1, generator=g, dtype=torch.float64)

    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    expected = reference(*leaves, visible, bias)
    (expected * upstream).sum().backward()
    expected_grads = [t.grad for t in leaves]

    outputs = {}
    for impl in IMPLEMENTATIONS:
        ins = [t.detach().to(dtype).requires_grad_() for t in (q, k, v)]
        m = mask.to(dtype) if mask is not None and mask.dtype != torch.bool else mask
        out = attention(*ins, attn_mask=m, is_causal=causal, implementation=impl).output
        assert out.dtype == dtype and out.shape == (B, H, T, E + 1)
        (out.double() * upstream).sum().backward()
        torch.testing.assert_close(out.double(), expected, **TOL[dtype], msg=lambda s, i=impl: f"{i}: {s}")
        for got, want, name in zip((t.grad for t in ins), expected_grads, "qkv", strict=True):
            assert got is not None and torch.isfinite(got).all(), f"{impl}: non-finite d{name}"
            torch.testing.assert_close(
                got.double(), want, **GRAD_TOL[dtype], msg=lambda s, i=impl, n=name: f"{i} d{n}: {s}"
            )
        outputs[impl] = out.double()
    # and the implementations agree with each other
    torch.testing.assert_close(outputs["sdpa"], outputs["eager"], **TOL[dtype])
    # rows that see no key are exactly zero on every path
    dead = ~visible.any(-1)  # (B, H, T)
    for out in outputs.values():
        assert (out[dead] == 0).all()


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("kind", ["bool", "float"])
def test_gradcheck_fp64_with_fully_masked_rows(impl: str, kind: str) -> None:
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 2, 3, 4, generator=g, dtype=torch.float64, requires_grad=True)
    k = torch.randn(1, 1, 4, 4, generator=g, dtype=torch.float64, requires_grad=True)
    v = torch.randn(1, 1, 4, 3, generator=g, dtype=torch.float64, requires_grad=True)
    keep = torch.tensor([[False] * 4, [True, False, True, True], [True] * 4])  # query 0 sees nothing
    mask = keep if kind == "bool" else torch.zeros(3, 4, dtype=torch.float64).masked_fill(~keep, float("-inf"))

    def f(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return attention(q, k, v, attn_mask=mask, implementation=impl).output

    assert torch.autograd.gradcheck(f, (q, k, v))
    out = f(q, k, v)
    assert (out[:, :, 0] == 0).all()


# ----------------------------------------------------------------------------- defects, one test each


def test_float_minus_inf_mask_on_explicit_path_gives_finite_gradients() -> None:
    """Defect 1: left padding + causal + weights made every gradient NaN (softmax of a -inf row)."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4)
    x = torch.randn(2, 5, 16, requires_grad=True)
    keep = torch.ones(2, 5, dtype=torch.bool)
    keep[1, :2] = False  # left padding: sequence 2 starts at position 2
    pad = torch.zeros(2, 1, 1, 5).masked_fill(~keep[:, None, None, :], float("-inf"))
    for need_weights in (True, False):
        x.grad = None
        mha.zero_grad()
        out = mha.with_weights(x, attn_mask=pad, is_causal=True)[0] if need_weights else mha(
            x, attn_mask=pad, is_causal=True)
        out.sum().backward()
        assert torch.isfinite(x.grad).all()
        assert all(torch.isfinite(p.grad).all() for p in mha.parameters())
        # queries 0 and 1 of sequence 2 see no key (causal + left padding): zero attention output
        y = mha.project_qkv(x)[0]
        assert y.shape[0] == 2
    fast = mha(x, attn_mask=pad, is_causal=True)
    slow, w = mha.with_weights(x, attn_mask=pad, is_causal=True)
    torch.testing.assert_close(fast, slow)
    assert (w[1, :, :2] == 0).all()


def test_grouped_attention_combines_mask_and_causal() -> None:
    """Defect 2: with fewer KV heads than query heads, is_causal=True silently dropped attn_mask."""
    g = torch.Generator().manual_seed(1)
    q, kv = torch.randn(1, 4, 5, 8, generator=g), torch.randn(1, 2, 5, 8, generator=g)
    keep = torch.ones(5, 5, dtype=torch.bool)
    keep[:, 0] = False  # nobody may see key 0
    got = attention(q, kv, kv, attn_mask=keep, is_causal=True).output
    want = attention(q, kv, kv, attn_mask=keep & causal_mask(5)).output
    torch.testing.assert_close(got, want)
    assert (got[:, :, 0] == 0).all()  # query 0 sees only key 0, which the mask hides


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("K", [4, 2])
def test_a_1d_key_mask_works_on_every_path(need_weights: bool, K: int) -> None:
    """Defect 3: a 1-D (S,) mask raised IndexError inside torch on the fused path."""
    torch.manual_seed(2)
    mha = MultiHeadAttention(16, 4, num_kv_heads=K).eval()
    x = torch.randn(2, 5, 16)
    keep = torch.tensor([True, True, False, True, True])
    out = mha.with_weights(x, attn_mask=keep)[0] if need_weights else mha(x, attn_mask=keep)
    torch.testing.assert_close(out, mha(x, attn_mask=keep.expand(2, 1, 5, 5)))


def test_bf16_autocast_float_mask_on_every_path() -> None:
    """Defect 3: under bf16 autocast a float mask was refused on the weights path only."""
    torch.manual_seed(3)
    mha = MultiHeadAttention(16, 4).eval()
    x = torch.randn(2, 5, 16)
    bias = torch.randn(5, 5)  # float32, the queries are bf16 under autocast
    with torch.autocast("cpu", dtype=torch.bfloat16):
        fast = mha(x, attn_mask=bias)
        slow, _ = mha.with_weights(x, attn_mask=bias)
    exact = mha(x, attn_mask=bias)
    torch.testing.assert_close(fast.float(), slow.float(), atol=3e-2, rtol=3e-2)
    torch.testing.assert_close(fast.float(), exact, atol=5e-2, rtol=5e-2)


def test_other_device_or_dtype_is_a_clear_error() -> None:
    """Defect 3: x, mask or cache on another device or dtype failed deep inside torch."""
    from lessons_src import KVCache

    mha = MultiHeadAttention(16, 4)
    with pytest.raises(ValueError, match=r"x has dtype torch.float64 but the module's weights are torch.float32"):
        mha(torch.randn(1, 3, 16, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"x is on meta but the module is on cpu"):
        mha(torch.randn(1, 3, 16, device="meta"))
    with pytest.raises(ValueError, match=r"attn_mask is on meta but the queries are on cpu"):
        mha(torch.randn(1, 3, 16), attn_mask=torch.ones(3, 3, dtype=torch.bool, device="meta"))
    with torch.no_grad(), pytest.raises(ValueError, match=r"k is on cpu but the cache is on meta"):
        mha(torch.randn(1, 3, 16), is_causal=True, cache=KVCache(1, 4, 4, 8, device="meta"))
    with pytest.raises(ValueError, match=r"share one floating dtype; got torch.float32, torch.float64"):
        attention(torch.randn(1, 1, 2, 4), torch.randn(1, 1, 2, 4, dtype=torch.float64), torch.randn(1, 1, 2, 4))


@torch.no_grad()
def test_a_failed_step_leaves_the_cache_as_it_was() -> None:
    """Defect 4: the cache's length advanced before attention could fail."""
    from lessons_src import KVCache
    from lessons_src.functional import register_attention

    def broken(*args: object, **kwargs: object):
        raise RuntimeError("kernel failed")

    register_attention("broken-for-test", broken)  # type: ignore[arg-type]
    try:
        mha = MultiHeadAttention(16, 4).eval()
        cache = KVCache(1, 4, 4, 8)
        mha(torch.randn(1, 3, 16), is_causal=True, cache=cache)
        with pytest.raises(RuntimeError, match="kernel failed"):
            mha(torch.randn(1, 1, 16), cache=cache, implementation="broken-for-test")
        assert cache.length == 3
    finally:
        ATTENTION_FUNCTIONS.pop("broken-for-test")
        ATTENTION_SUPPORTS.pop("broken-for-test")


@torch.no_grad()
def test_reusing_a_cache_for_a_new_prompt_without_reset_is_refused() -> None:
    """Defect 4: a second prompt silently attended to the first one's keys."""
    from lessons_src import KVCache

    mha = MultiHeadAttention(16, 4).eval()
    cache = KVCache(1, 4, 4, 16)
    mha(torch.randn(1, 4, 16), is_causal=True, cache=cache)
    with pytest.raises(ValueError, match=r"5 new tokens for a cache that already holds 4: .* cache.reset\(\) first"):
        mha(torch.randn(1, 5, 16), is_causal=True, cache=cache)
    cache.reset()
    x = torch.randn(1, 5, 16)
    torch.testing.assert_close(mha(x, is_causal=True, cache=cache), mha(x, is_causal=True))


@torch.no_grad()
def test_a_non_causal_prefill_into_a_cache_is_refused() -> None:
    """Defect 4: prefill with is_causal=False was bidirectional without a word."""
    from lessons_src import KVCache

    mha = MultiHeadAttention(16, 4).eval()
    with pytest.raises(ValueError, match=r"caching 4 tokens without is_causal=True"):
        mha(torch.randn(1, 4, 16), cache=KVCache(1, 4, 4, 8))


def test_caches_refuse_tensors_that_need_gradients() -> None:
    """Defect 4: backward through prefill+decode raised an in-place error and held the graph after reset()."""
    from lessons_src import KVCache, LatentCache, MultiHeadLatentAttention

    mha = MultiHeadAttention(16, 4)
    with pytest.raises(ValueError, match=r"k requires grad: KV caches are for inference; .*torch.no_grad\(\)"):
        mha(torch.randn(1, 4, 16), is_causal=True, cache=KVCache(1, 4, 4, 8))
    mla = MultiHeadLatentAttention(32, 4, kv_latent_dim=8, rope_dim=4)
    with pytest.raises(ValueError, match=r"latent requires grad"):
        mla(torch.randn(1, 4, 32), cache=LatentCache(1, 8, 4, 8))


@pytest.mark.parametrize(
    ("call", "err", "match"),
    [
        (lambda: MultiHeadAttention(8.0, 2), TypeError, r"d_model must be an int; got 8.0 of type float"),
        (lambda: MultiHeadAttention(8, 2.0), TypeError, r"num_heads must be an int; got 2.0"),
        (lambda: MultiHeadAttention(8, 2, num_kv_heads=True), TypeError, r"num_kv_heads must be an int; got True"),
    ],
)
def test_float_sizes_are_type_errors(call, err, match) -> None:
    """Defect 5: MultiHeadAttention(8.0, 2) failed inside torch."""
    with pytest.raises(err, match=match):
        call()


def test_unknown_model_name_lists_the_names() -> None:
    from lessons_src.lab.configs import load_configs

    configs = load_configs()
    with pytest.raises(KeyError, match=r"no published configuration named 'GPT-5'; the file has: .*") as info:
        configs["GPT-5"]
    first = next(iter(configs))
    assert first in str(info.value)


def test_model_config_refuses_zero_kv_heads() -> None:
    from lessons_src.lab.configs import ModelConfig

    with pytest.raises(ValueError, match=r"sizes must be ints of at least 1; got \{'num_kv_heads': 0\}"):
        ModelConfig("x", 2024, d_model=64, num_heads=4, num_kv_heads=0, num_layers=2, source="test")


@pytest.mark.parametrize("mode", ["naive", "absorbed"])
def test_mla_with_no_new_tokens(mode: str) -> None:
    from lessons_src import MultiHeadLatentAttention

    mla = MultiHeadLatentAttention(32, 4, kv_latent_dim=8, rope_dim=4)
    assert mla(torch.randn(2, 0, 32), mode=mode).shape == (2, 0, 32)  # type: ignore[arg-type]


def test_latent_cache_refuses_rope_dim_zero_like_mla() -> None:
    from lessons_src import LatentCache, MultiHeadLatentAttention

    with pytest.raises(ValueError, match=r"rope_dim must be at least 1; got rope_dim=0"):
        MultiHeadLatentAttention(32, 4, kv_latent_dim=8, rope_dim=0)
    with pytest.raises(ValueError, match=r"rope_dim must be at least 1; got rope_dim=0"):
        LatentCache(1, 8, 0, 4)


def test_minilm_truncates_like_sentence_transformers() -> None:
    from lessons_src.lab import minilm

    model, tok = minilm.load()
    long = " ".join(["attention"] * 400)
    tokens, ids = tok(long, truncate=True)
    assert tok.max_seq_length == 256 and len(tokens) == 256 and tokens[-1] == "[SEP]"
    assert len(tok(long)[0]) > 256  # without truncation, every piece
    with torch.no_grad():
        hidden, _ = model(ids[None])
    expected = F.normalize(hidden.mean(1), dim=-1)
    torch.testing.assert_close(minilm.sentence_embeddings([long]), expected)


def test_out_of_vocabulary_ids_are_clear_errors() -> None:
    from lessons_src.lab import minilm, toy_models

    model, _ = minilm.load()
    V = model.cfg.vocab_size
    with pytest.raises(ValueError, match=rf"ids outside the vocabulary 0..{V - 1}: \[-1, {V}\]"):
        model(torch.tensor([[101, V, -1, 102]]))
    toy = toy_models.load_induction_model()
    with pytest.raises(ValueError, match=rf"tokens outside the vocabulary 0..{toy.cfg.vocab_size - 1}"):
        toy(torch.tensor([[0, toy.cfg.vocab_size]]))


# ------------------------------------------------------------------ is_causal means one thing everywhere


@pytest.mark.parametrize(("T", "S"), [(3, 6), (6, 3), (4, 4), (1, 5)])
def test_is_causal_is_bottom_right_on_every_public_function(T: int, S: int) -> None:
    g = torch.Generator().manual_seed(4)
    q = torch.randn(1, 2, T, 4, generator=g, dtype=torch.float64)
    k = torch.randn(1, 2, S, 4, generator=g, dtype=torch.float64)
    v = torch.randn(1, 2, S, 4, generator=g, dtype=torch.float64)
    visible = bottom_right(T, S)
    want = reference(q, k, v, visible.expand(1, 2, T, S), torch.zeros(1, 2, T, S))
    torch.testing.assert_close(explicit_attention(q, k, v, is_causal=True)[0], want)
    torch.testing.assert_close(attention(q, k, v, is_causal=True).output, want)
    for impl in IMPLEMENTATIONS:
        torch.testing.assert_close(attention(q, k, v, is_causal=True, implementation=impl).output, want)
    torch.testing.assert_close(causal_mask(T, S), visible)


@pytest.mark.parametrize("need_weights", [False, True])
def test_module_is_causal_with_more_queries_than_keys(need_weights: bool) -> None:
    torch.manual_seed(5)
    mha = MultiHeadAttention(8, 2).double().eval()
    x, ctx = torch.randn(1, 5, 8, dtype=torch.float64), torch.randn(1, 3, 8, dtype=torch.float64)
    out = mha.with_weights(x, ctx, is_causal=True)[0] if need_weights else mha(x, ctx, is_causal=True)
    # the first T - S = 2 queries see nothing: their attention output is 0, so only out_proj's bias remains
    torch.testing.assert_close(out[:, :2], torch.zeros(1, 2, 8, dtype=torch.float64))


# ----------------------------------------------------------------------------- per-head weights


def test_head_weights_are_views_that_reproduce_the_layer_for_gqa() -> None:
    torch.manual_seed(6)
    mha = MultiHeadAttention(16, 4, num_kv_heads=2).double().eval()
    w = mha.head_weights()
    assert w.q.shape == (4, 4, 16) and w.k.shape == (2, 4, 16) and w.v.shape == (2, 4, 16) and w.o.shape == (4, 16, 4)
    assert w.q.untyped_storage().data_ptr() == mha.qkv_proj.weight.untyped_storage().data_ptr()
    x = torch.randn(1, 5, 16, dtype=torch.float64)
    out = torch.zeros(1, 5, 16, dtype=torch.float64)
    for h in range(4):  # the layer, one head at a time, from the views alone
        g = mha.kv_head(h)
        q, k, v = x @ w.q[h].T, x @ w.k[g].T, x @ w.v[g].T
        a = torch.softmax(q @ k.transpose(-2, -1) / 2.0, dim=-1)
        out += (a @ v) @ w.o[h].T
    torch.testing.assert_close(out, mha(x))


def test_lab_tools_work_on_a_gqa_layer() -> None:
    """heads.ov_circuit and lesson_tools.dimension_flow sliced qkv_proj by hand and crashed on GQA."""
    from lessons_src.lab.heads import ov_circuit
    from lessons_src.lab.lesson_tools import dimension_flow

    torch.manual_seed(7)
    mha = MultiHeadAttention(16, 4, num_kv_heads=2)
    flow = dict(dimension_flow(mha, torch.randn(1, 3, 16)))
    assert flow["keys K"] == (1, 2, 3, 4) and flow["output (after W_O)"] == (1, 3, 16)
    embed, unembed = torch.randn(10, 16), torch.randn(10, 16)
    ov = ov_circuit(embed, mha, unembed, head=3)
    w_v = mha.qkv_proj.weight[16 + 8 + 4 : 16 + 8 + 8]  # KV head 1 (serves query heads 2 and 3)
    w_o = mha.out_proj.weight[:, 12:16]
    torch.testing.assert_close(ov, embed @ w_v.T @ w_o.T @ unembed.T)


# ----------------------------------------------------------------------------- torch.compile


# Tracing a torch.autograd.Function (the "tiled" implementation) whose inputs require grad makes dynamo
# itself instantiate torch.autograd.Function() (torch/_dynamo/side_effects.py, track_object_new), which
# warns DeprecationWarning in torch 2.13: torch's own internals, not the code under test. Only that
# message is ignored; fullgraph=True still holds on every path.
@pytest.mark.filterwarnings("ignore:<class 'torch.autograd.function.Function'> should not be instantiated")
@pytest.mark.slow
@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_every_path_compiles_without_graph_breaks(impl: str) -> None:
    import torch._dynamo

    torch._dynamo.reset()
    torch.manual_seed(8)
    mha = MultiHeadAttention(16, 4, num_kv_heads=2, implementation=impl).eval()
    x = torch.randn(2, 5, 16)
    keep = padding_mask([5, 3], 5)
    compiled = torch.compile(mha, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(x, attn_mask=keep, is_causal=True), mha(x, attn_mask=keep, is_causal=True))
    fn = torch.compile(attention, fullgraph=True, backend="aot_eager")
    q, kv = torch.randn(1, 4, 3, 8), torch.randn(1, 2, 6, 8)
    torch.testing.assert_close(
        fn(q, kv, kv, is_causal=True, implementation=impl).output,
        attention(q, kv, kv, is_causal=True, implementation=impl).output,
    )


# Inductor's own import of torch.jit warns DeprecationWarning in torch 2.13 (torch's internals, not the code under
# test); only that message is ignored.
@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
@pytest.mark.slow
def test_module_compiles_with_the_default_backend() -> None:
    """Copiers compile with torch.compile's default backend (inductor), not aot_eager: a causal and a windowed call."""
    import torch._dynamo

    torch._dynamo.reset()
    torch.manual_seed(9)
    mha = MultiHeadAttention(16, 4, num_kv_heads=2).eval()
    x = torch.randn(2, 6, 16)
    compiled = torch.compile(mha, fullgraph=True)
    q, k, v = (t.double() for t in mha.project_qkv(x))  # float64 reference through PyTorch's SDPA
    k, v = k.repeat_interleave(2, 1), v.repeat_interleave(2, 1)
    with torch.no_grad():
        for window in (None, 3):
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(6, window=window))  # (2, 4, 6, 4)
            want = F.linear(y.transpose(1, 2).reshape(2, 6, 16), mha.out_proj.weight.double()).float()
            rule = None if window is None else sliding_window(window)
            torch.testing.assert_close(compiled(x, is_causal=True, attn_mask=rule), want)


@pytest.mark.parametrize("impl", ["eager", "tiled"])
def test_a_nan_query_gives_nan_in_its_own_row_only(impl: str) -> None:
    """What attention()'s docstring says about NaN: eager and tiled propagate it to the rows it reaches."""
    torch.manual_seed(10)
    q, kv = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 5, 4)
    bad = q.clone()
    bad[0, 1, 2, 0] = float("nan")
    out = attention(bad, kv, kv, is_causal=True, implementation=impl).output
    nan_rows = out.isnan().any(-1)  # (1, 2, 3)
    assert nan_rows.sum() == 1 and nan_rows[0, 1, 2] and out[0, 1, 2].isnan().all()
    want = F.scaled_dot_product_attention(q, kv, kv, attn_mask=causal_mask(3, 5))
    torch.testing.assert_close(out[~nan_rows], want[~nan_rows])
    with pytest.raises(ValueError, match=r"scale must be finite"):  # a NaN scale is refused, not propagated
        attention(q, kv, kv, implementation=impl, scale=float("nan"))


def test_a_registered_backend_is_refused_what_it_did_not_declare() -> None:
    """A backend registered with no declaration takes a mask and dropout only: given a soft-cap or sinks it gets one
    clear refusal naming the backends that can (it died with Python's "unexpected keyword argument" before)."""

    def plain(q, k, v, mask, *, scale, dropout_p):  # the Protocol's signature, nothing more
        return attention(q, k, v, attn_mask=mask.combined(), scale=scale, implementation="eager")

    register_attention("plain-for-test", plain)
    try:
        q = torch.randn(1, 2, 3, 4)
        torch.testing.assert_close(attention(q, q, q, is_causal=True, implementation="plain-for-test").output,
                                   attention(q, q, q, is_causal=True).output)
        with pytest.raises(ValueError, match=r"implementation='plain-for-test' cannot soft-cap the scores "
                                             r"\(got softcap=5.0\); use one that can: 'eager'"):
            attention(q, q, q, score_mods=SoftCap(5.0), implementation="plain-for-test")
        with pytest.raises(ValueError, match=r"cannot add learned sinks \(got sinks given\); use one that can: "
                                             r"'eager', 'sdpa'"):
            attention(q, q, q, score_mods=Sinks(torch.zeros(2)), implementation="plain-for-test")
        with pytest.raises(ValueError, match=r"cannot return the attention weights .*use one that can: 'eager'"):
            MultiHeadAttention(8, 2).with_weights(torch.randn(1, 3, 8), implementation="plain-for-test")
    finally:
        ATTENTION_FUNCTIONS.pop("plain-for-test")
        ATTENTION_SUPPORTS.pop("plain-for-test")


@pytest.mark.parametrize("sinks", [False, True])
def test_every_backend_returns_the_lse_it_declares(sinks: bool) -> None:
    """Each registered backend returns each query's log-sum-exp (sink included) exactly when it declares it; the
    value is the definition's, ``-inf`` for a query that sees nothing."""
    import lessons_src.flash  # noqa: F401  (registers "tiled")

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 4, 8, generator=g, dtype=torch.float64) for _ in range(3))
    s = torch.randn(2, generator=g, dtype=torch.float64) if sinks else None
    keep = torch.ones(4, 4, dtype=torch.bool).tril()
    keep[1] = False  # query 1 sees nothing
    scores = (q @ k.mT / math.sqrt(8)).masked_fill(~keep, -math.inf)
    if sinks:
        scores = torch.cat([scores, s.view(1, 2, 1, 1).expand(1, 2, 4, 1)], dim=-1)
    want = torch.logsumexp(scores, dim=-1)
    declared = []
    for impl in sorted(ATTENTION_FUNCTIONS):
        if impl == "triton":
            continue  # its own file checks its lse, with Triton installed
        lse = attention(q, k, v, attn_mask=keep, score_mods=None if s is None else Sinks(s), implementation=impl).lse
        if ATTENTION_SUPPORTS[impl].lse:
            declared.append(impl)
            assert lse is not None, f"{impl} declares an lse and returned none"
            torch.testing.assert_close(lse.double(), want, msg=lambda m, i=impl: f"{i}: {m}")
        else:
            assert lse is None, f"{impl} returned an lse it does not declare"
    assert {"eager", "tiled"} <= set(declared) and not ATTENTION_SUPPORTS["sdpa"].lse
    assert Supports().lse is False  # a backend registered without a declaration promises none
