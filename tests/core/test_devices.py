"""Tensors stay on the queries' device: meta runs of the core, and a lint for tensors made without one.

A ``meta`` tensor has a shape, dtype and device but no values, so a function whose control flow reads
no values runs on it for free, and any tensor it makes on the default device (the CPU) instead of the
queries' one raises torch's device-mismatch error, exactly as it would on a GPU.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import lessons_src
from lessons_src.functional import attention
from lessons_src.layer import MultiHeadAttention
from lessons_src.masks import causal_mask, sliding_window

META = torch.device("meta")


def _meta(*shape: int) -> torch.Tensor:
    return torch.empty(*shape, device=META)


# --------------------------------------------------------------------------- the combined causal mask

# (name, implementation, q shape, kv shape, window): the calls issue 27 lists as failing off the CPU
MASK_CASES = [
    ("eager causal", "eager", (1, 2, 4, 8), (1, 2, 4, 8), None),
    ("sdpa window", "sdpa", (1, 2, 4, 8), (1, 2, 4, 8), 2),
    ("sdpa causal T > S", "sdpa", (1, 2, 4, 8), (1, 2, 2, 8), None),
    ("sdpa causal GQA T < S", "sdpa", (1, 4, 3, 8), (1, 2, 6, 8), None),
]


@pytest.mark.parametrize(("name", "impl", "q_shape", "kv_shape", "window"), MASK_CASES, ids=[c[0] for c in MASK_CASES])
def test_causal_mask_is_built_on_the_queries_device(name, impl, q_shape, kv_shape, window):
    q, kv = _meta(*q_shape), _meta(*kv_shape)
    out, weights, _ = attention(q, kv, kv, is_causal=True, implementation=impl,
                                attn_mask=None if window is None else sliding_window(window))
    assert out.device == META and out.shape == q_shape
    if impl == "eager":
        assert weights is not None and weights.device == META


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_every_implementation_gives_one_meta_result(dtype):
    """On meta, as on a real device, each implementation returns the output's shape and dtype (torch's autocast
    has no meta entry: an implementation that asks it without checking raised)."""
    q, k, v = (torch.empty(*shape, device=META, dtype=dtype) for shape in ((1, 4, 3, 8), (1, 2, 5, 8), (1, 2, 5, 6)))
    for impl in ("sdpa", "eager", "tiled"):
        out = attention(q, k, v, is_causal=True, implementation=impl).output
        assert (out.shape, out.dtype, out.device) == ((1, 4, 3, 6), dtype, META), impl


def test_mha_with_weights_builds_its_mask_on_the_inputs_device():
    # On the CPU with meta as the default device: a mask made without device= lands on meta and fails the call.
    torch.manual_seed(0)
    mha = MultiHeadAttention(d_model=8, num_heads=2)
    x = torch.randn(1, 5, 8)
    q, k, v = mha.project_qkv(x)  # (1, 2, 5, 4) each
    want = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True)  # T == S
    want = mha.out_proj(want.transpose(1, 2).reshape(1, 5, 8).float())
    with torch.device(META):
        out, weights = mha.with_weights(x, is_causal=True)
        windowed = mha(x, attn_mask=sliding_window(2))
    torch.testing.assert_close(out, want)
    assert weights.device.type == "cpu" and windowed.device.type == "cpu"
    assert torch.equal(weights[0, 0] > 0, causal_mask(5, device="cpu"))


# --------------------------------------------------------------------------- every public core name

# Every core file but triton_flash: its kernels run on a CUDA GPU or through Triton's interpreter, never on meta or
# the CPU by themselves (tests/core/test_triton_flash.py covers both; `make test-gpu` and `make test-triton` run it)
SKIP = ("__init__", "triton_flash")
CORE = sorted(p.stem for p in Path(lessons_src.__file__).parent.glob("*.py") if p.stem not in SKIP)


def _mods() -> dict[str, object]:
    import importlib

    return {m: importlib.import_module(f"lessons_src.{m}") for m in CORE}


def _mha_meta() -> MultiHeadAttention:
    return MultiHeadAttention(8, 4, num_kv_heads=2).to(META)


def _quantized_on_meta(kv: torch.Tensor) -> dict[str, object]:
    import lessons_src.quantized_cache as qc

    def kivi() -> list[torch.Tensor]:
        cache = qc.KIVICache(1, 2, 8, 8, residual=3, device=META)
        return [*cache.update(kv, kv), *cache.update(kv[:, :, :1], kv[:, :, :1])]  # a block, then the residual

    return {
        "quantized_cache.TileQuantizedCache": lambda: [
            *qc.TileQuantizedCache(1, 2, 16, 6, qc.Q4_0, device=META).update(_meta(1, 2, 5, 16), _meta(1, 2, 5, 16)),
            *qc.TileQuantizedCache(1, 2, 64, 6, qc.FP8, device=META).update(_meta(1, 2, 5, 64), _meta(1, 2, 5, 64))],
        "quantized_cache.KIVICache": kivi,
        "quantized_cache.RotatedKeysCache": lambda: list(qc.RotatedKeysCache(
            qc.TileQuantizedCache(1, 2, 16, 6, qc.Q4_0, device=META), qc.hadamard(16, device=META)).update(
            _meta(1, 2, 5, 16), _meta(1, 2, 5, 16))),
        "quantized_cache.hadamard": lambda: qc.hadamard(8, device=META),
        "quantized_cache.quantize_tiles": lambda: list(qc.quantize_tiles(_meta(2, 32), qc.Q8_0)),
        "quantized_cache.dequantize_tiles": lambda: qc.dequantize_tiles(*qc.quantize_tiles(_meta(2, 32), qc.Q4_0),
                                                                        qc.Q4_0),
    }


def _paged_meta() -> object:
    from lessons_src.paged_cache import PagedKVCache

    cache = PagedKVCache(num_blocks=4, block_size=2, num_kv_heads=2, head_dim=8, device=META)
    cache.add_sequence(0)
    cache.append(0, _meta(2, 3, 8), _meta(2, 3, 8))
    return cache.gather(0)


def _draft_cache_on_meta() -> list[object]:
    from lessons_src.kv_cache import KVCache
    from lessons_src.speculative import DraftCache

    cache = DraftCache(KVCache(1, 2, 8, max_len=8, device=META))
    out = cache.update(_meta(1, 2, 4, 8), _meta(1, 2, 4, 8))
    cache.keep([0, 2])  # a path that skips a node: written again
    return [*out, cache.cache.k]


def _flex_on_meta() -> dict[str, object]:
    """FlexAttention's functions on meta index tensors, as create_block_mask applies them; block masks on meta."""
    import lessons_src.flex as fx
    import lessons_src.masks as mk

    qi, ki = torch.arange(3, device=META)[:, None], torch.arange(5, device=META)  # (3, 1), (5,)
    ids = torch.empty(2, 5, dtype=torch.long, device=META)
    return {
        "masks.MaskRule": lambda: mk.MaskRule("later", lambda b, h, q, kv: kv > q)(0, 0, qi + 2, ki),
        "masks.causal": lambda: mk.causal()(0, 0, qi + 2, ki),
        "masks.padding": lambda: mk.padding(torch.empty(2, dtype=torch.long, device=META))(1, 0, qi, ki),
        "masks.sliding_window": lambda: mk.sliding_window(2, sink_tokens=1)(0, 0, qi + 2, ki),
        "masks.same_chunk": lambda: mk.same_chunk(2)(0, 0, qi + 2, ki),
        "masks.same_document": lambda: mk.same_document(ids)(1, 0, qi + 2, ki),
        "masks.key_mask": lambda: mk.key_mask(torch.empty(2, 5, dtype=torch.bool, device=META))(1, 0, qi + 2, ki),
        "masks.draft_tree": lambda: mk.draft_tree([-1, 0, 0], start=2)(0, 0, qi + 2, ki),
        "masks.at_positions": lambda: mk.at_positions(mk.causal(), torch.empty(5, dtype=torch.long, device=META))(
            0, 0, qi + 2, ki),
        "speculative.DraftCache": _draft_cache_on_meta,
        "masks.prefix_lm": lambda: mk.prefix_lm([1, 2], device=META)(1, 0, qi + 2, ki),
        "masks.and_masks": lambda: mk.and_masks(mk.causal(), mk.same_chunk(2))(0, 0, qi + 2, ki),
        "masks.or_masks": lambda: mk.or_masks(mk.causal(), mk.same_chunk(2))(0, 0, qi + 2, ki),
        "masks.mask_mod": lambda: mk.mask_mod(mk.causal(), 3, 5)(0, 0, qi, ki),
        "masks.CausalTiles": lambda: mk.CausalTiles(3, 5, mk.sliding_window(2), device=META).visible(0, 3, 0, 5),
        "masks.mask_tensor": lambda: mk.mask_tensor(mk.prefix_lm([1, 2], device=META), 3, 5, B=2, device=META),
        "flex.soft_cap_mod": lambda: fx.soft_cap_mod(5.0)(_meta(3, 5), 0, 0, qi, ki),
        "flex.block_mask": lambda: list(fx.block_mask(mk.causal(), 4, block_size=2, device=META).as_tuple()[:4]),
    }


def _delta_rule_on_meta(form: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The gated delta rule on meta: its gate and strength checks read values, so they are skipped there."""
    import lessons_src.delta_rule as dr

    qk, v, beta = _meta(1, 2, 5, 4), _meta(1, 2, 5, 3), _meta(1, 2, 5)
    if form == "recurrent":
        return dr.delta_rule_recurrent(qk, qk, v, _meta(1, 2, 5, 4), beta)  # a gate per key channel (KDA)
    return dr.delta_rule_chunked(qk, qk, v, _meta(1, 2, 5), beta, chunk_size=2, state=_meta(1, 2, 4, 3))


def _on_meta() -> dict[str, object]:
    """Each public name that runs on meta tensors, as a zero-argument call exercising it."""
    import lessons_src.convert as cv
    import lessons_src.flash as fl
    import lessons_src.functional as at
    import lessons_src.interop as io
    import lessons_src.kv_cache as kc
    import lessons_src.masks as mk
    import lessons_src.mechanisms as mc
    import lessons_src.mla as ml
    import lessons_src.ring as rg
    import lessons_src.rope as rp
    import lessons_src.score_mods as sm
    import lessons_src.sparse_selection as ss
    import lessons_src.split_kv as sk

    q, kv, b = _meta(1, 4, 3, 8), _meta(1, 2, 5, 8), torch.bool
    keep = torch.empty(3, 5, dtype=b, device=META)
    prep = mk.prepare_mask(keep, is_causal=True, shape=(1, 4, 3, 5), dtype=torch.float32, device=META)
    cos_sin = rp.rope_cos_sin(torch.arange(3, device=META), 4)
    return {
        "functional.attention": lambda: [
            at.attention(q, kv, kv, attn_mask=[x for x in (m, r) if x is not None], is_causal=True,
                         implementation=impl)
            for impl in ("sdpa", "eager", "tiled") for m in (None, keep, _meta(1, 1, 3, 5))
            for r in (None, mk.sliding_window(2), mk.causal() & mk.same_chunk(2))
        ] + [
            at.attention(q, kv, kv, attn_mask=[x for x in (m, r) if x is not None], is_causal=c, implementation=impl)
            for impl in ("sdpa", "eager", "tiled") for m in (None, keep)
            for r, c in ((mk.prefix_lm(2, device=META), False),
                         (mk.same_document(torch.empty(5, dtype=torch.long, device=META)), True))
        ] + [
            at.attention(q, kv, kv, attn_mask=m, is_causal=True, implementation=impl,
                         score_mods=[sm.Sinks(_meta(4)), *([] if impl == "sdpa" else [sm.SoftCap(5.0)])])
            for impl in ("sdpa", "eager", "tiled") for m in (None, keep)
        ],
        "layer.MultiHeadAttention": lambda: [_mha_meta().with_weights(_meta(1, 5, 8), is_causal=True)],
        "score_mods.soft_cap": lambda: sm.soft_cap(_meta(2, 3), 5.0),
        "score_mods.check_sinks": lambda: sm.check_sinks(_meta(4), 4, torch.float32, META),
        "score_mods.check_score_mods": lambda: [*sm.check_score_mods(5.0, _meta(4), 4, torch.float32, META).values()],
        "score_mods.Sinks": lambda: sm.Sinks(_meta(4)).logits,
        "score_mods.score_mod_arguments": lambda: [*sm.score_mod_arguments([sm.SoftCap(5.0), sm.Sinks(_meta(4))], 4,
                                                                           torch.float32, META).values()],
        "score_mods.sdpa_with_sinks": lambda: [sm.sdpa_with_sinks(q, kv, kv, _meta(4), mask=m, is_causal=c, scale=0.5)
                                               for m, c in ((None, True), (keep, False))],
        "score_mods.sinks_as_a_key": lambda: [sm.sinks_as_a_key(q, kv, kv, m, _meta(4)) for m in (None, keep)],
        "score_mods.merge_states": lambda: sm.merge_states([(_meta(1, 4, 3, 8), _meta(1, 4, 3))] * 3),
        "split_kv.split_kv_attention": lambda: [
            sk.split_kv_attention(q, kv, kv, split_size=2, attn_mask=m, is_causal=True, implementation=impl,
                                  score_mods=sm.Sinks(_meta(4)))
            for impl in ("eager", "tiled") for m in (None, mk.sliding_window(2))] + [
            sk.split_kv_attention(q, kv[:, :, :0], kv[:, :, :0], num_splits=2)],  # no cached key: the empty state
        "split_kv.shared_prefix_attention": lambda: sk.shared_prefix_attention(
            q, _meta(1, 2, 4, 8), _meta(1, 2, 4, 8), kv, kv, score_mods=sm.Sinks(_meta(4))),
        "mechanisms.PerHeadRMSNorm": lambda: [*mc.PerHeadRMSNorm(8, offset=1.0).to(META)(q, kv),
                                              mc.PerHeadRMSNorm(8, keys=False).to(META)(q, None)[0]],
        "mechanisms.ValueRMSNorm": lambda: mc.ValueRMSNorm()(kv),
        "mechanisms.ProjectionRMSNorm": lambda: mc.ProjectionRMSNorm(4, 2, 8).to(META)(q, kv),
        "mechanisms.WeightlessRMSNorm": lambda: mc.WeightlessRMSNorm()(q, kv),
        "mechanisms.Rotary": lambda: [
            mc.Rotary(4)(q, _meta(1, 2, 3, 8), start=2),
            mc.Rotary.partial(8, 0.5, scaling=rp.yarn_scaling(4, factor=4.0, original_max_positions=8, device=META))(
                q, _meta(1, 2, 3, 8), start=2),
            mc.Rotary.proportional(8, 0.25, base=1e6)(q, None, start=2)[0],
            mc.Rotary(4)(q, _meta(1, 2, 3, 8), positions=torch.empty(1, 3, dtype=torch.long, device=META)),
        ],
        "mechanisms.NoPETemperature": lambda: [
            mc.NoPETemperature(floor_scale=2)(q, _meta(1, 2, 3, 8), start=2),
            mc.NoPETemperature(floor_scale=2)(q, None, positions=torch.empty(1, 3, dtype=torch.long, device=META))[0],
        ],
        "mechanisms.HeadwiseGate": lambda: mc.HeadwiseGate(16, 4).to(META)(_meta(1, 3, 16), q),
        "mechanisms.ElementwiseGate": lambda: mc.ElementwiseGate(16, 4, 8).to(META)(_meta(1, 3, 16), q),
        "layer.MultiHeadAttention+mechanisms": lambda: [  # every piece, the sinks and the cap, on meta
            MultiHeadAttention(
                16, 4, num_kv_heads=2, implementation=impl, qk_norm=mc.PerHeadRMSNorm(4), rope=mc.Rotary(4),
                gate=mc.ElementwiseGate(16, 4, 4), softcap=None if impl == "sdpa" else 5.0, sinks=True,
                v_norm=mc.ValueRMSNorm(), scale=1.0,
            ).to(META)(_meta(1, 5, 16), is_causal=True)
            for impl in ("sdpa", "eager", "tiled")
        ],
        "functional.eager_attention": lambda: at.eager_attention(q, kv, kv, prep, scale=0.5, dropout_p=0.0),
        "functional.sdpa_attention": lambda: at.sdpa_attention(q, kv, kv, prep, scale=0.5, dropout_p=0.0),
        "functional.explicit_attention": lambda: at.explicit_attention(
            _meta(2, 3, 8), _meta(2, 5, 8), _meta(2, 5, 8), is_causal=True
        ),
        "masks.prepare_mask": lambda: prep.combined(),
        "masks.PreparedMask": lambda: mk.PreparedMask(None, True, 3, 5, window=2, device=META).combined(),
        "functional.repeat_kv": lambda: at.repeat_kv(kv, 2),
        "layer.HeadWeights": lambda: _mha_meta().head_weights(),
        "masks.causal_mask": lambda: [mk.causal_mask(3, 5, window=2, sink_tokens=1, device=META),
                                      mk.causal_mask(3, 5, chunk=2, device=META)],
        "masks.chunk_mask": lambda: mk.chunk_mask(3, 5, 2, device=META),
        **_flex_on_meta(),
        "masks.document_mask": lambda: [mk.document_mask(torch.empty(2, 5, dtype=torch.long, device=META), 3),
                                        mk.document_mask(torch.empty(5, dtype=torch.long, device=META))],
        "masks.prefix_lm_mask": lambda: mk.prefix_lm_mask(3, 5, prefix=2, device=META),
        "masks.combine_masks": lambda: mk.combine_masks(keep, _meta(1, 1, 3, 5), torch.float32),
        "masks.check_mask": lambda: (mk.check_mask(keep, (1, 4, 3, 5), torch.float32), keep)[1],
        "kv_cache.KVCache": lambda: kc.KVCache(1, 2, 8, 6, device=META).update(kv, kv),
        "kv_cache.ChunkedKVCache": lambda: list(kc.ChunkedKVCache(1, 2, 8, 2, device=META).update(kv, kv)[:3]),
        "kv_cache.LatentCache": lambda: kc.LatentCache(1, 4, 2, 6, device=META).update(_meta(1, 3, 4), _meta(1, 3, 2)),
        "paged_cache.PagedKVCache": _paged_meta,
        **_quantized_on_meta(kv),
        "flash.tiled_attention": lambda: fl.tiled_attention(q, kv, kv, attn_mask=keep, is_causal=True, block_q=2),
        "flash.tiled_attention_function": lambda: fl.tiled_attention_function(q, kv, kv, prep, scale=0.5,
                                                                              dropout_p=0.0),
        "flash.TiledAttention": lambda: fl.TiledAttention.apply(q, kv, kv, None, True, 0.5, 2, 2),
        "flash.online_softmax": lambda: fl.online_softmax(_meta(2, 7), block_size=3),
        "flash.softmax_statistics": lambda: list(fl.softmax_statistics(_meta(2, 7), block_size=3)),
        "mla.MultiHeadLatentAttention": lambda: [
            ml.MultiHeadLatentAttention(16, 2, kv_latent_dim=4, rope_dim=2).to(META)(_meta(1, 3, 16), mode=mode)
            for mode in ("naive", "absorbed")
        ],
        "rope.rope_cos_sin": lambda: [
            *cos_sin, *rp.rope_cos_sin(torch.arange(3, device=META), 4, scaling=rp.llama3_scaling(4, device=META)),
            *rp.rope_cos_sin(torch.empty(2, 3, dtype=torch.long, device=META), 4),
        ],
        "rope.rope_frequencies": lambda: rp.rope_frequencies(8, device=META),
        "rope.llama3_scaling": lambda: rp.llama3_scaling(8, device=META).inv_freq,
        "rope.yarn_scaling": lambda: rp.yarn_scaling(8, factor=4.0, original_max_positions=16, device=META).inv_freq,
        "rope.proportional_scaling": lambda: rp.proportional_scaling(8, 0.5, device=META).inv_freq,
        "rope.RopeScaling": lambda: rp.RopeScaling(_meta(4)).inv_freq,
        "rope.apply_rope": lambda: rp.apply_rope(_meta(1, 2, 3, 4), *cos_sin),
        "rope.apply_rope_interleaved": lambda: rp.apply_rope_interleaved(_meta(1, 2, 3, 4), *cos_sin),
        "rope.interleaved_to_rotate_half": lambda: rp.interleaved_to_rotate_half(8, device=META),
        "rope.rotate_half_to_interleaved": lambda: rp.rotate_half_to_interleaved(8, device=META),
        "rope.mrope_pair_axes": lambda: [rp.mrope_pair_axes((3, 3, 2), order=o, device=META)
                                         for o in ("interleaved_sections", "contiguous_sections")],
        "rope.mrope_cos_sin": lambda: list(rp.mrope_cos_sin(torch.zeros(3, 5, dtype=torch.long, device=META), 16,
                                                            sections=(3, 3, 2))),
        "rope.mrope_grid_positions": lambda: rp.mrope_grid_positions((1, 2, 3), device=META),
        "convert.pool_kv_heads": lambda: cv.pool_kv_heads(_meta(8, 8), 4, 2),
        "convert.expand_kv_heads": lambda: cv.expand_kv_heads(_meta(4, 8), 2, 4),
        "convert.mha_to_gqa": lambda: list(cv.mha_to_gqa(MultiHeadAttention(8, 4).to(META), 2).parameters()),
        "interop.from_torch": lambda: list(io.from_torch(torch.nn.MultiheadAttention(8, 2, device=META)).parameters()),
        "interop.masks_from_torch": lambda: io.masks_from_torch(
            torch.empty(3, 3, dtype=b, device=META), torch.empty(1, 3, dtype=b, device=META), num_heads=2
        ),
        "delta_rule.delta_rule_recurrent": lambda: list(_delta_rule_on_meta("recurrent")),
        "delta_rule.delta_rule_chunked": lambda: list(_delta_rule_on_meta("chunked")),
        "sparse_selection.lightning_indexer_scores": lambda: ss.lightning_indexer_scores(
            _meta(1, 2, 3, 4), _meta(1, 5, 4), _meta(1, 2, 3)),
        "sparse_selection.top_k_mask": lambda: ss.top_k_mask(_meta(1, 3, 5), 2),
        "mechanisms.ConjugateRotation": lambda: mc.ConjugateRotation(mc.Rotary(4, features="trailing"))(q, start=2),
        **_shared_kv_on_meta(),
        "sparse_selection.moba_mask": lambda: ss.moba_mask(_meta(1, 2, 3, 4), _meta(1, 2, 5, 4), block_size=2, top_k=1),
        "ring.shard_sequence": lambda: rg.shard_sequence(_meta(1, 2, 8, 4), 2, 0, dim=2, order="zigzag"),
        "ring.unshard_sequence": lambda: rg.unshard_sequence([_meta(1, 2, 4, 4)] * 2, dim=2, order="zigzag"),
    }


def _shared_kv_on_meta() -> dict[str, object]:
    """DeepSeek-V4's layer of each kind on meta, its cache and pieces with it."""
    import lessons_src.mechanisms as mc
    import lessons_src.shared_kv as sk
    import lessons_src.sparse_selection as ss

    rope = mc.Rotary(2, layout="interleaved", features="trailing")

    def layer(compressor: object = None) -> sk.SharedKVAttention:
        out = sk.GroupedOutput(2, 4, 8, groups=2, rank=3)
        return sk.SharedKVAttention(8, 2, 4, q_rank=3, window=2, rope=rope, output=out,
                                    output_rotation=mc.ConjugateRotation(rope), compressor=compressor).to(META)

    def decoded() -> list[object]:
        cache = sk.SharedKVCache(2)
        hca = layer(sk.WindowCompressor(8, 4, 2, rope))
        return [hca(_meta(1, 3, 8), cache=cache), hca(_meta(1, 1, 8), cache=cache), cache.kv, cache.entries]

    def indexer() -> ss.CompressedIndexer:
        return ss.CompressedIndexer(8, 3, 2, 4, 1, keys=sk.OverlapCompressor(8, 4, 2, rope), rope=rope)

    return {
        "shared_kv.SharedKVAttention": lambda: [layer()(_meta(1, 5, 8)), layer()(_meta(1, 5, 8), start=3)],
        "shared_kv.SharedKVCache": decoded,
        "shared_kv.WindowCompressor": decoded,
        "shared_kv.GroupedOutput": lambda: sk.GroupedOutput(2, 4, 8, groups=2, rank=3).to(META)(_meta(1, 2, 3, 4)),
        "shared_kv.OverlapCompressor": lambda: layer(sk.OverlapCompressor(8, 4, 2, rope, selector=indexer()))(
            _meta(1, 6, 8)),
        "sparse_selection.CompressedIndexer": lambda: indexer().to(META)(_meta(1, 6, 8), latent=_meta(1, 6, 3),
                                                                         start=0),
    }


NOT_ON_META = {  # name: why it cannot run on meta; those marked * run in the default-device test below
    "masks.padding_mask": "* reads the lengths' values (max, range check)",
    "speculative.accept_greedy": "reads each node's argmax to walk the tree",
    "kv_cache.RollingKVCache": "* update() reads which slots are filled (nonzero, bool())",
    "paged_cache.paged_attention": "* reads each sequence's length and block table to pick its pieces",
    "paged_cache.PagedView": "* picks each sequence's slots of the pool with a boolean mask (its size is read)",
    "ring.ring_attention": "needs a torch.distributed process group; gloo sends real values",
    "parallel.ulysses_attention": "needs a torch.distributed process group; gloo sends real values",
    "parallel.TensorParallelAttention": "needs a torch.distributed process group; gloo sends real values",
    "parallel.Collectives": "a process group's collectives; gloo sends real values",
    "score_mods.sink_flash_cpu": "torch's CPU flash kernel takes CPU tensors only (other devices: a clear error)",
    "flex.flex_attend": "FlexAttention refuses meta tensors (CUDA, CPU, HPU, XPU, MPS only)",
    "flex.block_sparsity": "* reads the block mask's tile counts",
    "sparse_selection.gather_selected": "* reads how many keys each row picked (the gathered tensor's length)",
}
NO_TENSORS = {  # public names that make no tensor: nothing to place
    "flash.RescaleCount": "a NamedTuple of three ints",
    "flash.count_rescales": "counts (ints) read from the caller's scores, on their device",
    "functional.ATTENTION_FUNCTIONS": "a dict of implementations",
    "functional.AttentionFunction": "a typing Protocol",
    "functional.AttentionResult": "a NamedTuple of the caller's tensors",
    "functional.register_attention": "adds a name to a dict",
    "functional.ATTENTION_SUPPORTS": "a dict of declarations",
    "functional.Supports": "a frozen dataclass of bools",
    "functional.check_supports": "compares a declaration with what was asked",
    "functional.check_implementation": "looks a name up in a dict",
    "score_mods.SoftCap": "holds a checked number",
    "masks.check_window": "checks an int",
    "masks.check_chunk": "checks an int",
    "masks.by_distance": "a list of Python bools",
    "score_mods.check_softcap": "checks a number",
    "_checks.integer": "checks an int",
    "_checks.size": "checks an int",
    "_checks.number": "checks a number",
    "_checks.positive": "checks a number",
    "_checks.eps": "checks a number",
    "_checks.probability": "checks a number",
    "_checks.choice": "checks a string",
    "_checks.instance": "checks a type",
    "_checks.device": "names a device",
    "_checks.tensor": "reads the caller's tensor's rank and dtype",
    "_checks.positions": "reads the caller's tensor's shape, dtype and device (its values not on meta)",
    "_checks.flag": "checks a bool",
    "_checks.divisors": "arithmetic on an int",
    "_checks.autocast_on": "reads torch's autocast state",
    "_checks.check_qkv": "reads the caller's tensors' shapes, dtypes and devices",
    "kv_cache.RollingUpdate": "a NamedTuple of the cache's tensors",
    "kv_cache.LayerCache": "an abstract base class: its subclasses make the tensors (KVCache above)",
    "kv_cache.kv_bytes_per_token": "arithmetic on sizes",
    "kv_cache.latent_bytes_per_token": "arithmetic on sizes",
    "paged_cache.block_runs": "arithmetic on a list of ints",
    "flash.BLOCK_Q": "an int",
    "flash.BLOCK_K": "an int",
    "flash.block_kind": "reads a CPU index table",
    "flash.tile_plan": "reads a CPU index table",
    "ring.RingStep": "a record of ints and strings",
    "ring.RingResult": "a record of the ranks' tensors",
    "ring.sequence_chunks": "arithmetic on ints",
    "split_kv.split_bounds": "arithmetic on ints",
    "masks.tree_ancestors": "a small table built from a list of ints, on the CPU (draft_tree moves it to the mask's)",
    "masks.tree_positions": "positions from a list of ints, on the CPU (move them with .to(device))",
    "speculative.prompt_lookup": "compares Python ints (the context's values are read)",
    "speculative.tree_from_drafts": "lists of Python ints",
    "parallel.TPPlan": "a record of ints",
    "parallel.tp_plan": "arithmetic on ints",
    "parallel.valid_tp_degrees": "arithmetic on ints",
    "quantized_cache.TileFormat": "a frozen dataclass of a format's sizes",
    "quantized_cache.Q8_0": "a TileFormat",
    "quantized_cache.Q4_0": "a TileFormat",
    "quantized_cache.FP8": "a TileFormat",
    "quantized_cache.quantized_bytes_per_token": "arithmetic on sizes",
}


def _tensors(obj: object) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, list | tuple):
        return [t for x in obj for t in _tensors(x)]
    return []


def test_every_public_core_name_is_classified():
    public = {f"{m}.{name}" for m, mod in _mods().items() for name in mod.__all__}  # type: ignore[attr-defined]
    public.add("layer.MultiHeadAttention+mechanisms")  # the layer with every piece: a case of its own
    groups = [set(_on_meta()), set(NOT_ON_META), set(NO_TENSORS)]
    assert set.union(*groups) == public, (
        f"unclassified: {sorted(public - set.union(*groups))}; stale: {sorted(set.union(*groups) - public)}"
    )
    assert sum(len(g) for g in groups) == len(public), "a name is in two groups"


@pytest.mark.parametrize("name", sorted(_on_meta()))
def test_core_runs_on_meta(name):
    tensors = _tensors(_on_meta()[name]())
    assert tensors, f"{name} returned no tensor to check"
    assert {t.device for t in tensors} == {META}


def _cpu_cases() -> dict[str, object]:
    """For the names marked * above: (make inputs on the CPU, then run) pairs, the run compared across devices."""
    from lessons_src.flash import tiled_attention, tiled_attention_function
    from lessons_src.kv_cache import RollingKVCache
    from lessons_src.masks import padding_mask
    from lessons_src.paged_cache import PagedKVCache, PagedView, paged_attention

    def mha():
        torch.manual_seed(0)
        m, x = MultiHeadAttention(8, 4, num_kv_heads=2), torch.randn(1, 5, 8)
        return lambda: [m(x, is_causal=True), m(x, attn_mask=sliding_window(2)),
                        *m.with_weights(x, is_causal=True)]

    def mechanisms():
        from lessons_src.mechanisms import HeadwiseGate, PerHeadRMSNorm, ProjectionRMSNorm, Rotary, ValueRMSNorm

        torch.manual_seed(0)
        x = torch.randn(1, 5, 8, requires_grad=True)
        layers = [MultiHeadAttention(8, 4, num_kv_heads=2, implementation=impl, qk_norm=ProjectionRMSNorm(4, 2, 2),
                                     rope=Rotary(2), gate=HeadwiseGate(8, 4), sinks=True,
                                     softcap=None if impl == "sdpa" else 2.0) for impl in ("sdpa", "eager", "tiled")]
        layers += [MultiHeadAttention(8, 2, num_kv_heads=1, implementation=impl, qk_norm=PerHeadRMSNorm(4),
                                      v_norm=ValueRMSNorm(), rope=Rotary.proportional(4, 0.5), scale=1.0, sinks=True)
                   for impl in ("sdpa", "eager", "tiled")]  # Gemma 4's pieces (sinks: for the gradients below)

        def run():
            outs = [m(x, is_causal=True) for m in layers]
            return [*outs, *torch.autograd.grad(sum(o.sum() for o in outs), [x, *(m.sinks for m in layers)])]

        return run

    def tiled():
        torch.manual_seed(0)
        q, kv = torch.randn(1, 4, 5, 8, requires_grad=True), torch.randn(1, 2, 7, 8)
        from lessons_src.masks import prepare_mask

        prep = prepare_mask(sliding_window(3), is_causal=True, shape=(1, 4, 5, 7), dtype=q.dtype, device=q.device)

        def run():
            out = tiled_attention(q, kv, kv, is_causal=True, block_q=2, block_k=3).output
            (grad,) = torch.autograd.grad(out.sum(), q)
            return [out, grad, *tiled_attention_function(q, kv, kv, prep, scale=0.3, dropout_p=0.0)[::2]]

        return run

    def rolling():
        torch.manual_seed(0)
        cache, k = RollingKVCache(1, 2, 4, window=3, sink_tokens=1), torch.randn(1, 2, 6, 4)
        return lambda: [*cache.update(k[:, :, :4], k[:, :, :4]), *cache.update(k[:, :, 4:5], k[:, :, 4:5])[:2]]

    def paged():
        torch.manual_seed(0)
        cache = PagedKVCache(num_blocks=4, block_size=2, num_kv_heads=1, head_dim=4)
        for s, n in ((0, 5), (1, 2)):
            cache.add_sequence(s)
            cache.append(s, torch.randn(1, n, 4), torch.randn(1, n, 4))
        q = torch.randn(2, 2, 1, 4)
        return lambda: paged_attention(q, cache, [0, 1], min_run=1)

    def paged_view():  # a packed step of two sequences through the pool: positions, documents, keys and values
        torch.manual_seed(0)
        pool = PagedKVCache(num_blocks=6, block_size=2, num_kv_heads=1, head_dim=4)
        for s, n in ((0, 3), (1, 0)):
            pool.add_sequence(s)
            if n:
                pool.append(s, torch.randn(1, n, 4), torch.randn(1, n, 4))
        k = torch.randn(1, 1, 4, 4)

        def run():
            pool.truncate(0, 3)  # the same pool each call
            pool.truncate(1, 0)
            view = PagedView(pool, [0, 1], [1, 3])
            return [view.positions(), view.documents(), *view.update(k, k)]

        return run

    lengths = torch.tensor([2, 3])
    def flex():
        import torch.nn.attention.flex_attention as flex_module

        from lessons_src.flex import block_mask, block_sparsity, flex_attend
        from lessons_src.masks import causal

        torch.manual_seed(0)
        q, kv, sinks = torch.randn(1, 4, 3, 8), torch.randn(1, 2, 5, 8), torch.zeros(4)

        def run():
            bm = block_mask(causal(), 3, 5, block_size=2)
            debug = flex_module._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG
            flex_module._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = True
            try:  # the dense path without its TorchDynamo trace (tests/core/test_flex.py says why)
                out = flex_attend(q, kv, kv, bm, sinks=sinks)
            finally:
                flex_module._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = debug
            return [out, *bm.as_tuple()[:4]] if block_sparsity(bm) > 0 else []

        return run

    def selection():  # the key-choosing masks, and gathering one step's picked keys (reads their count)
        import lessons_src.sparse_selection as ss

        torch.manual_seed(0)
        q, k, w = torch.randn(1, 2, 4, 8), torch.randn(1, 6, 8), torch.rand(1, 2, 4)
        kv = torch.randn(1, 2, 6, 8)

        def run():
            keep = ss.top_k_mask(ss.lightning_indexer_scores(q, k, w), 3)
            return [keep, ss.moba_mask(q, kv, block_size=2, top_k=1), *ss.gather_selected(kv, kv, keep[:, :, -1:])]

        return run

    def delta_rule():
        from lessons_src.delta_rule import delta_rule_chunked, delta_rule_recurrent

        torch.manual_seed(0)
        qk, v, g, beta = torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 3), -torch.rand(1, 2, 5, 4), torch.rand(1, 2, 5)
        return lambda: [*delta_rule_recurrent(qk, qk, v, g, beta),
                        *delta_rule_chunked(qk, qk, v, g, beta, chunk_size=2)]

    return {"MultiHeadAttention": mha, "mechanisms": mechanisms, "tiled": tiled, "rolling": rolling, "paged": paged,
            "paged_view": paged_view,
            "padding_mask": lambda: lambda: padding_mask(lengths, 4), "flex": flex, "selection": selection,
            "delta_rule": delta_rule}


@pytest.mark.parametrize("name", sorted(_cpu_cases()))
def test_core_makes_no_tensor_on_the_default_device(name):
    """On CPU inputs with meta as the default device: a tensor made without device= lands on meta and fails."""
    make = _cpu_cases()[name]
    want = _tensors(make()())  # type: ignore[operator]
    run = make()  # type: ignore[operator]
    with torch.device(META):
        got = _tensors(run())
    assert len(got) == len(want) > 0
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)


# --------------------------------------------------------------------------- a lint: factories name a device

FACTORIES = {
    "arange", "zeros", "ones", "empty", "full", "tensor", "as_tensor", "eye", "rand", "randn", "randint", "randperm",
    "linspace", "logspace", "empty_strided", "scalar_tensor", "tril_indices", "triu_indices",
}
# (file, enclosing function, factory): why it may use the default device; reviewed, keep it short
REVIEWED = {
    ("kv_cache.py", "_element_size", "empty"): "a 0-d tensor made only to read its element size",
    ("parallel.py", "kv_cache_bytes_per_token", "empty"): "a 0-d tensor made only to read its element size",
    ("quantized_cache.py", "bytes_per_number", "empty"): "a 0-d tensor made only to read its element size",
    ("parallel.py", "__init__", "tensor"): "index lists (a CPU index tensor can index weights on any device)",
    ("parallel.py", "__init__", "zeros"): "a Parameter made in __init__, moved by module.to() like nn.Linear's",
    ("mechanisms.py", "__init__", "full"): "a Parameter made in __init__, moved by module.to() like nn.Linear's",
    ("mechanisms.py", "__init__", "ones"): "a Parameter made in __init__, moved by module.to() like nn.Linear's",
    ("shared_kv.py", "__init__", "zeros"): "a Parameter made in __init__, moved by module.to() like nn.Linear's",
    ("shared_kv.py", "__init__", "randn"): "a Parameter made in __init__, moved by module.to() like nn.Linear's",
}


def _factory_calls_without_device(path) -> list[tuple[str, str, int]]:
    """``(enclosing function, factory, line)`` for each ``torch.<factory>(...)`` in ``path`` without ``device=``."""
    import ast

    found: list[tuple[str, str, int]] = []

    def visit(node: ast.AST, func: str) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            func = node.name
        if (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in FACTORIES
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch"
            and not any(kw.arg == "device" for kw in node.keywords)
        ):
            found.append((func, node.func.attr, node.lineno))
        for child in ast.iter_child_nodes(node):
            visit(child, func)

    visit(ast.parse(path.read_text()), "<module>")
    return found


def test_core_names_a_device_for_every_new_tensor():
    from pathlib import Path

    import lessons_src

    root = Path(lessons_src.__file__).parent
    seen, bad = set(), []
    for name in CORE:
        for func, factory, line in _factory_calls_without_device(root / f"{name}.py"):
            key = (f"{name}.py", func, factory)
            seen.add(key)
            if key not in REVIEWED:
                bad.append(f"{name}.py:{line} torch.{factory}(...) in {func}()")
    assert not bad, "tensors made on the default device; pass device= (or use *_like / x.new_*): " + "; ".join(bad)
    assert set(REVIEWED) <= seen, f"reviewed exceptions that no longer occur: {sorted(set(REVIEWED) - seen)}"


def test_the_lint_finds_a_tensor_without_a_device(tmp_path):
    src = tmp_path / "mod.py"
    src.write_text("import torch\ndef f(x):\n    return torch.ones(3, dtype=x.dtype) + torch.zeros_like(x)\n")
    assert _factory_calls_without_device(src) == [("f", "ones", 3)]
