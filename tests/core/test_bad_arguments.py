# ruff: noqa: E501  (a table of cases: one spec per line reads better than wrapped ones)
"""Every argument of every public name of the 2025-26 modules, given each kind of wrong value (issue 79).

The table of ``tests/core/test_bad_inputs.py`` holds chosen cases; this one is generated. Each public callable of
:data:`MODULES` (its list read from the module's ``__all__``) has a spec: how to call it well, and for each of
its arguments the *kind* of value it takes (a size, a positive finite number, an epsilon, a flag, a tensor, ...).
Each kind has one rule (``lessons_src/_checks.py``), so each kind has one list of wrong values here, with the one
answer every function must give: a wrong type, a bool or a string is a ``TypeError``; NaN, infinity, 0 or a
negative where the kind forbids it a ``ValueError``; a numpy integer is accepted; a tensor of the wrong rank or an
integer tensor where floats are needed is refused. Every error names the argument and says what it must be (the
message holds the argument's name and one of "must", "use", "need", "expect"); none escapes from inside torch or
Python. Beside the generated rows: half precision and the meta device for each callable that takes tensors (meta
where ``tests/core/test_devices.py`` says the name runs on meta), and the cases of the issue that are not one argument.
"""

from __future__ import annotations

import importlib
import inspect
import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import torch

if TYPE_CHECKING:
    from collections.abc import Callable

NAN, INF = math.nan, math.inf
META = torch.device("meta")
T_, V_ = TypeError, ValueError
EITHER = (TypeError, ValueError)

MODULES = ["mechanisms", "shared_kv", "score_mods", "split_kv", "rope", "flex", "sparse_selection", "delta_rule", "triton_flash",
           "lab.pattern_model", "lab.hybrid_models", "lab.long_context", "lab.continuous_batching",
           "quantized_cache"]


# --------------------------------------------------------------------------- kinds of argument and their wrong values


@dataclass
class Arg:
    """An argument: its kind, a good value, and whether ``None`` is a good value too."""

    kind: str
    good: Any
    optional: bool = False
    numpy: Any = None  # a numpy integer that must be accepted (None: the kind's default, if any)
    rank: bool = True  # tensors: whether a tensor of another rank is wrong
    extra: list[tuple[str, Any, Any]] = field(default_factory=list)  # (label, value, expected) rows of its own


def _np(good: Any, default: int) -> Any:
    return np.int64(good if isinstance(good, int) and not isinstance(good, bool) else default)


def bad_values(a: Arg) -> list[tuple[str, Any, Any]]:
    """``(label, value, expected)``: expected is an error class, a tuple of them, or None (accepted)."""
    k = a.kind
    if k in ("size", "size0"):  # an int of at least 1 (size0: at least 0)
        rows = [("string", "4", T_), ("bool", True, T_), ("nan", NAN, T_), ("inf", INF, T_), ("float", 2.0, T_),
                ("negative", -1, V_), ("numpy", np.int64(a.good) if a.numpy is None else a.numpy, None)]
        return rows + ([("zero", 0, V_)] if k == "size" else [])
    if k in ("positive", "factor", "base", "fraction", "eps", "number", "prob"):
        rows = [("string", "0.5", T_), ("bool", True, T_), ("tensor", torch.tensor(0.5), T_), ("nan", NAN, V_),
                ("inf", INF, V_), ("numpy", a.numpy if a.numpy is not None else np.int64(
                    {"eps": 0, "prob": 0, "base": 10000, "factor": 2}.get(k, 1)), None)]
        if k != "number":
            rows.append(("negative", -1.0, V_))
        if k in ("positive", "factor", "base", "fraction"):
            rows.append(("zero", 0.0, V_))
        if k in ("factor", "base"):
            rows.append(("below one", 0.5, V_))
        if k == "base":
            rows.append(("one", 1.0, V_))
        if k == "fraction":
            rows.append(("above one", 1.5, V_))
        if k == "prob":
            rows.append(("one", 1.0, V_))
        return rows
    if k == "flag":
        return [("string", "no", T_), ("int", 1, T_), ("none", None, T_)]
    if k == "choice":
        return [("unknown", "nope", V_), ("int", 3, EITHER)]
    if k == "object":
        return [("string", "x", T_)]
    if k == "path":
        return [("int", 3, T_)]
    if k == "device":
        return [("unknown", "x", V_), ("int", 1.5, EITHER)]
    if k in ("tensor", "itensor", "btensor"):
        t = a.good
        rows: list[tuple[str, Any, Any]] = [("list", t.tolist(), T_)]
        if a.rank:
            rows.append(("rank", t[0] if t.ndim > 1 else t[None], V_))
        if k == "tensor":
            rows.append(("integer", t.long(), EITHER))
        elif k == "itensor":
            rows.append(("float", t.float(), EITHER))
        else:
            rows.append(("float", t.float(), EITHER))
        return rows
    raise AssertionError(k)


# --------------------------------------------------------------------------- the specs: each public callable, called well

SPECS: dict[str, tuple[Callable[..., object], dict[str, Arg]]] = {}
NOT_CHECKED: dict[str, str] = {}  # "name.argument" or "name": why it gets no rows


def spec(key: str, call: Callable[..., object], /, **args: Arg) -> None:
    SPECS[key] = (call, args)


def r(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    g = torch.Generator().manual_seed(sum(shape))
    return torch.randn(*shape, generator=g).to(dtype)


def size(good: int, **kw: Any) -> Arg:
    return Arg("size", good, **kw)


def size0(good: int, **kw: Any) -> Arg:
    return Arg("size0", good, **kw)


def ten(t: torch.Tensor, **kw: Any) -> Arg:
    return Arg("tensor", t, **kw)


def obj(good: Any, **kw: Any) -> Arg:
    return Arg("object", good, **kw)


FLAG = Arg("flag", True)
FLAG_F = Arg("flag", False)
EPS = Arg("eps", 1e-6)
SCALE = Arg("positive", None, optional=True)
BASE = Arg("base", 10000.0)
DTYPE = obj(torch.float32)
DEVICE = Arg("device", None, optional=True)
CPU = obj(torch.device("cpu"))


def _specs_shared_kv(q: torch.Tensor) -> None:
    import lessons_src.mechanisms as mc
    import lessons_src.shared_kv as sk

    rope = mc.Rotary(2, features="trailing")
    spec("shared_kv.SharedKVCache", lambda **a: sk.SharedKVCache(**a), window=size(4))
    spec("shared_kv.GroupedOutput", lambda **a: sk.GroupedOutput(**a), num_heads=size(2), head_dim=size(4), d_model=size(8), groups=size(2), rank=size(3))
    spec("shared_kv.GroupedOutput.forward", lambda y: sk.GroupedOutput(2, 4, 8, groups=2, rank=3)(y), y=ten(q))
    spec("shared_kv.WindowCompressor", lambda **a: sk.WindowCompressor(**a), d_model=size(8), head_dim=size(4), rate=size(2), rope=obj(rope), eps=EPS)
    spec("shared_kv.WindowCompressor.forward", lambda x, start, cache, latent: sk.WindowCompressor(8, 4, 2, rope)(x, start=start, cache=cache, latent=latent),
         x=ten(r(1, 3, 8)), start=size0(0), cache=obj(None, optional=True), latent=obj(None, optional=True))
    spec("shared_kv.OverlapCompressor", lambda **a: sk.OverlapCompressor(**a), d_model=size(8), head_dim=size(4), rate=size(2), rope=obj(rope),
         selector=obj(None, optional=True), eps=EPS)
    spec("shared_kv.OverlapCompressor.forward", lambda x, start, cache, latent: sk.OverlapCompressor(8, 4, 2, rope)(x, start=start, cache=cache, latent=latent),
         x=ten(r(1, 3, 8)), start=Arg("size0", 0, extra=[("after 0", 1, V_)]), cache=obj(None, optional=True), latent=obj(None, optional=True))
    import lessons_src.sparse_selection as ss

    keys = sk.OverlapCompressor(8, 4, 2, rope)
    spec("sparse_selection.CompressedIndexer", lambda **a: ss.CompressedIndexer(**a), d_model=size(8), q_rank=size(3), num_heads=size(2),
         head_dim=size(4), top_k=size(2), keys=obj(keys), rope=obj(rope))
    spec("sparse_selection.CompressedIndexer.forward", lambda x, latent, start: ss.CompressedIndexer(8, 3, 2, 4, 2, keys=keys, rope=rope)(
        x, latent=latent, start=start), x=ten(r(1, 4, 8)), latent=ten(r(1, 4, 3)), start=Arg("size0", 0, extra=[("after 0", 1, V_)]))
    layer = {"d_model": size(8), "num_heads": size(2), "head_dim": size(4), "q_rank": size(3), "window": size(2), "rope": obj(rope),
             "output": obj(sk.GroupedOutput(2, 4, 8, groups=2, rank=3)), "output_rotation": obj(mc.ConjugateRotation(rope), optional=True),
             "compressor": obj(None, optional=True), "eps": EPS}
    spec("shared_kv.SharedKVAttention", lambda **a: sk.SharedKVAttention(**a), **layer)

    def run(x: torch.Tensor, cache: object, start: int) -> torch.Tensor:
        return sk.SharedKVAttention(8, 2, 4, q_rank=3, window=2, rope=rope, output=sk.GroupedOutput(2, 4, 8, groups=2, rank=3))(
            x, cache=cache, start=start)
    spec("shared_kv.SharedKVAttention.forward", run, x=ten(r(1, 3, 8)), cache=obj(None, optional=True), start=size0(0))


def _specs_core() -> None:
    import lessons_src.delta_rule as dr
    import lessons_src.flex as fx
    import lessons_src.mechanisms as mc
    import lessons_src.rope as rp
    import lessons_src.score_mods as sm
    import lessons_src.sparse_selection as ss
    from lessons_src.masks import causal

    q, kv = r(1, 2, 3, 4), r(1, 1, 5, 4)
    spec("mechanisms.PerHeadRMSNorm", lambda **a: mc.PerHeadRMSNorm(**a), head_dim=size(4), eps=EPS, offset=Arg("number", 0.0), keys=FLAG)
    spec("mechanisms.PerHeadRMSNorm.forward", lambda q, k: mc.PerHeadRMSNorm(4)(q, k), q=ten(q), k=ten(kv, optional=True))
    spec("mechanisms.ProjectionRMSNorm", lambda **a: mc.ProjectionRMSNorm(**a), num_heads=size(2), num_kv_heads=size(1), head_dim=size(4), eps=EPS)
    spec("mechanisms.ProjectionRMSNorm.forward", lambda q, k: mc.ProjectionRMSNorm(2, 1, 4)(q, k), q=ten(q), k=ten(kv, optional=True))
    spec("mechanisms.WeightlessRMSNorm", lambda **a: mc.WeightlessRMSNorm(**a), eps=EPS)
    spec("mechanisms.WeightlessRMSNorm.forward", lambda q, k: mc.WeightlessRMSNorm()(q, k), q=ten(q), k=ten(kv, optional=True))
    spec("mechanisms.ValueRMSNorm", lambda **a: mc.ValueRMSNorm(**a), eps=EPS)
    spec("mechanisms.ValueRMSNorm.forward", lambda v: mc.ValueRMSNorm()(v), v=ten(kv))
    scaling = rp.yarn_scaling(4, factor=2.0, original_max_positions=16)
    spec("mechanisms.Rotary", lambda **a: mc.Rotary(**a), dim=size(4, numpy=np.int64(4)), base=BASE, scaling=obj(scaling, optional=True),
         layout=Arg("choice", "interleaved"), features=Arg("choice", "trailing"))
    spec("mechanisms.ConjugateRotation", lambda **a: mc.ConjugateRotation(**a), rope=obj(mc.Rotary(4)))
    spec("mechanisms.ConjugateRotation.forward", lambda y, start: mc.ConjugateRotation(mc.Rotary(4))(y, start=start), y=ten(q), start=size0(2))
    _specs_shared_kv(q)
    at = Arg("itensor", torch.tensor([[0, 1, 2]]), optional=True, extra=[("negative", torch.tensor([[0, -1, 2]]), V_), ("other T", torch.tensor([[0, 1]]), V_)])
    spec("mechanisms.Rotary.forward", lambda q, k, start, positions: mc.Rotary(4)(q, k, start=start, positions=positions), q=ten(q), k=ten(r(1, 1, 3, 4), optional=True), start=size0(0), positions=at)
    spec("mechanisms.Rotary.partial", lambda **a: mc.Rotary.partial(**a), head_dim=size(16), fraction=Arg("fraction", 0.25), base=BASE, scaling=obj(None, optional=True))
    spec("mechanisms.Rotary.proportional", lambda **a: mc.Rotary.proportional(**a), head_dim=size(8), fraction=Arg("fraction", 0.5), base=BASE, factor=Arg("factor", 1.0))
    spec("mechanisms.NoPETemperature", lambda **a: mc.NoPETemperature(**a), floor_scale=size(2), attn_scale=Arg("eps", 0.1))
    spec("mechanisms.NoPETemperature.forward", lambda q, k, start, positions: mc.NoPETemperature(floor_scale=2)(q, k, start=start, positions=positions), q=ten(q), k=ten(r(1, 1, 3, 4), optional=True), start=size0(0), positions=at)
    spec("mechanisms.HeadwiseGate", lambda **a: mc.HeadwiseGate(**a), d_model=size(8), num_heads=size(2), bias=FLAG)
    spec("mechanisms.HeadwiseGate.forward", lambda x, y: mc.HeadwiseGate(8, 2)(x, y), x=ten(r(1, 3, 8)), y=ten(q))
    spec("mechanisms.ElementwiseGate", lambda **a: mc.ElementwiseGate(**a), d_model=size(8), num_heads=size(2), head_dim=size(4), bias=FLAG)
    spec("mechanisms.ElementwiseGate.forward", lambda x, y: mc.ElementwiseGate(8, 2, 4)(x, y), x=ten(r(1, 3, 8)), y=ten(q))

    q4, kv4 = r(1, 4, 3, 8), r(1, 2, 5, 8)
    sinks = torch.zeros(4)
    spec("score_mods.soft_cap", lambda **a: sm.soft_cap(**a), scores=ten(r(2, 3), rank=False), cap=Arg("positive", 5.0))
    spec("score_mods.check_softcap", lambda **a: sm.check_softcap(**a), softcap=Arg("positive", 5.0, optional=True))
    spec("score_mods.check_sinks", lambda **a: sm.check_sinks(**a), sinks=ten(sinks, optional=True), num_heads=size(4), dtype=DTYPE, device=CPU)
    spec("score_mods.check_score_mods", lambda **a: sm.check_score_mods(**a), softcap=Arg("positive", 5.0, optional=True), sinks=ten(sinks, optional=True), num_heads=size(4), dtype=DTYPE, device=CPU)
    spec("score_mods.score_mod_arguments", lambda **a: sm.score_mod_arguments(**a), score_mods=obj(sm.SoftCap(5.0), optional=True), num_heads=size(4), dtype=DTYPE, device=CPU)
    spec("score_mods.SoftCap", lambda **a: sm.SoftCap(**a), cap=Arg("positive", 5.0))
    spec("score_mods.Sinks", lambda **a: sm.Sinks(**a), logits=ten(sinks))
    keep = torch.ones(3, 5, dtype=torch.bool)
    spec("score_mods.sdpa_with_sinks", lambda **a: sm.sdpa_with_sinks(**a), q=ten(q4), k=ten(kv4), v=ten(kv4), sinks=ten(sinks), mask=ten(keep, optional=True, rank=False),
         is_causal=FLAG, scale=Arg("positive", 0.5), dropout_p=Arg("prob", 0.0))
    qh = r(1, 2, 3, 4)
    spec("score_mods.sink_flash_cpu", lambda **a: sm.sink_flash_cpu(**a), q=ten(qh), k=ten(qh), v=ten(qh), sinks=ten(torch.zeros(2)), is_causal=FLAG, mask=ten(torch.ones(3, 3, dtype=torch.bool), optional=True, rank=False),
         scale=Arg("positive", 0.5))
    spec("score_mods.sinks_as_a_key", lambda **a: sm.sinks_as_a_key(**a), q=ten(q4), k=ten(kv4), v=ten(kv4), mask=ten(keep, optional=True, rank=False), sinks=ten(sinks))
    spec("score_mods.merge_states", lambda **a: sm.merge_states(**a), states=obj([(r(2, 3), r(2)), (r(2, 3), r(2))]))

    import lessons_src.split_kv as sk

    spec("split_kv.split_bounds", lambda **a: sk.split_bounds(**a), S=size0(8), split_size=size(2))
    spec("split_kv.split_kv_attention", lambda **a: sk.split_kv_attention(**a), q=ten(q4), k=ten(kv4), v=ten(kv4), split_size=size(2), is_causal=FLAG_F,
         scale=SCALE, score_mods=obj(sm.SoftCap(5.0), optional=True))
    spec("split_kv.shared_prefix_attention", lambda **a: sk.shared_prefix_attention(**a), q=ten(q4), prefix_k=ten(kv4[:1]), prefix_v=ten(kv4[:1]), k=ten(kv4), v=ten(kv4),
         is_causal=FLAG, scale=SCALE, score_mods=obj(sm.SoftCap(5.0), optional=True))

    spec("rope.RopeScaling", lambda **a: rp.rope_cos_sin(torch.arange(3), 4, scaling=rp.RopeScaling(**a)), inv_freq=ten(rp.rope_frequencies(4)), attention_factor=Arg("positive", 1.0))
    cos, sin = rp.rope_cos_sin(torch.arange(3), 4)
    spec("rope.apply_rope", lambda **a: rp.apply_rope(**a), x=ten(q, rank=False), cos=ten(cos), sin=ten(sin))
    spec("rope.apply_rope_interleaved", lambda **a: rp.apply_rope_interleaved(**a), x=ten(q, rank=False), cos=ten(cos), sin=ten(sin))
    spec("rope.interleaved_to_rotate_half", lambda **a: rp.interleaved_to_rotate_half(**a), dim=size(8), device=DEVICE)
    spec("rope.rotate_half_to_interleaved", lambda **a: rp.rotate_half_to_interleaved(**a), dim=size(8), device=DEVICE)
    sections = obj((3, 3, 2), extra=[("a zero section", (3, 0, 2), V_), ("a float section", (3.0, 3, 2), T_), ("empty", (), T_)])
    spec("rope.mrope_pair_axes", lambda **a: rp.mrope_pair_axes(**a), sections=sections, order=Arg("choice", "contiguous_sections"), device=DEVICE)
    spec("rope.mrope_cos_sin", lambda **a: rp.mrope_cos_sin(**a), positions=Arg("itensor", torch.arange(5).expand(3, 5)), dim=size(16), sections=sections,
         order=Arg("choice", "interleaved_sections"), base=BASE, dtype=DTYPE, scaling=obj(None, optional=True))
    spec("rope.mrope_grid_positions", lambda **a: rp.mrope_grid_positions(**a), grid=obj((1, 2, 3), extra=[("a zero side", (1, 0, 3), V_), ("two sides", (2, 3), T_)]),
         start=size0(4), device=DEVICE)
    spec("rope.llama3_scaling", lambda **a: rp.llama3_scaling(**a), dim=size(8), base=BASE, factor=Arg("factor", 8.0), low_freq_factor=Arg("positive", 1.0),
         high_freq_factor=Arg("positive", 4.0, numpy=np.int64(4)), original_max_positions=size(64), device=DEVICE)
    spec("rope.proportional_scaling", lambda **a: rp.proportional_scaling(**a), dim=size(8), fraction=Arg("fraction", 0.5), base=BASE, factor=Arg("factor", 1.0), device=DEVICE)
    spec("rope.rope_cos_sin", lambda **a: rp.rope_cos_sin(**a), positions=Arg("itensor", torch.arange(3), rank=False, extra=[("3-D", torch.zeros(1, 1, 3, dtype=torch.long), V_)]), dim=size(4), base=BASE, dtype=DTYPE, scaling=obj(None, optional=True))
    spec("rope.rope_frequencies", lambda **a: rp.rope_frequencies(**a), dim=size(8), base=BASE, device=DEVICE)
    spec("rope.yarn_scaling", lambda **a: rp.yarn_scaling(**a), dim=size(8), base=BASE, factor=Arg("factor", 4.0), original_max_positions=size(64), beta_fast=Arg("positive", 32.0, numpy=np.int64(32)),
         beta_slow=Arg("positive", 1.0), attention_factor=Arg("positive", None, optional=True), truncate=FLAG, device=DEVICE)

    qf, kvf = r(1, 2, 4, 8), r(1, 1, 4, 8)
    spec("flex.block_mask", lambda **a: fx.block_mask(**a), mask=obj(causal()), T=size(4), S=size(4, optional=True), B=size(1, optional=True), H=size(1, optional=True), block_size=size(2), device=Arg("device", "cpu"))
    spec("flex.block_sparsity", lambda **a: fx.block_sparsity(**a), mask=obj(fx.block_mask(causal(), 4, block_size=2)))
    spec("flex.flex_attend", lambda **a: _flex(fx.flex_attend, **a), q=ten(qf), k=ten(kvf), v=ten(kvf), mask=obj(None, optional=True), score_mod=obj(None, optional=True),
         sinks=ten(torch.zeros(2), optional=True), scale=SCALE)
    spec("flex.soft_cap_mod", lambda **a: fx.soft_cap_mod(**a), cap=Arg("positive", 5.0))

    spec("sparse_selection.lightning_indexer_scores", lambda **a: ss.lightning_indexer_scores(**a), q=ten(r(1, 2, 3, 4)), k=ten(r(1, 5, 4)), weights=ten(torch.rand(1, 2, 3)), scale=SCALE)
    spec("sparse_selection.top_k_mask", lambda **a: ss.top_k_mask(**a), scores=ten(r(1, 3, 5)), top_k=size(2), is_causal=FLAG)
    spec("sparse_selection.moba_mask", lambda **a: ss.moba_mask(**a), q=ten(r(1, 2, 4, 2)), k=ten(r(1, 2, 4, 2)), block_size=size(2), top_k=size(1))
    pick = torch.tensor([True, False, True, False, False, True]).view(1, 1, 1, 6)
    spec("sparse_selection.gather_selected", lambda **a: ss.gather_selected(**a), k=ten(r(1, 2, 6, 8)), v=ten(r(1, 2, 6, 8)), mask=Arg("btensor", pick))

    qd, vd = torch.nn.functional.normalize(r(1, 2, 5, 4), dim=-1), r(1, 2, 5, 3)
    g, beta, state = -torch.rand(1, 2, 5), torch.rand(1, 2, 5), torch.zeros(1, 2, 4, 3)
    delta = {"q": ten(qd), "k": ten(qd), "v": ten(vd), "g": ten(g), "beta": ten(beta), "state": ten(state, optional=True), "scale": SCALE}
    spec("delta_rule.delta_rule_recurrent", lambda **a: dr.delta_rule_recurrent(**a), **delta)
    spec("delta_rule.delta_rule_chunked", lambda **a: dr.delta_rule_chunked(**a), **delta, chunk_size=size(2))


def _specs_quantized() -> None:
    import lessons_src.quantized_cache as qc

    spec("quantized_cache.TileFormat", lambda **a: qc.TileFormat("q", **a), bits=Arg("size", 8, extra=[("3 bits", 3, V_)]), tile=Arg("size", 32, extra=[("odd", 3, V_)]),
         scale_dtype=obj(torch.float16), float8=FLAG_F)
    spec("quantized_cache.quantize_tiles", lambda **a: qc.quantize_tiles(**a), x=ten(r(2, 32), rank=False, extra=[("not whole tiles", r(2, 30), V_)]), fmt=obj(qc.Q8_0))
    codes, scales = qc.quantize_tiles(r(2, 64), qc.Q4_0)
    spec("quantized_cache.dequantize_tiles", lambda **a: qc.dequantize_tiles(**a), codes=obj(codes, extra=[("other length", codes[:, :8], V_)]), scales=ten(scales),
         fmt=obj(qc.Q4_0), dtype=obj(torch.float32))
    spec("quantized_cache.quantized_bytes_per_token", lambda **a: qc.quantized_bytes_per_token(**a), num_kv_heads=size(2), head_dim=size(16), fmt=obj(qc.Q8_0),
         v_head_dim=size(16, optional=True, extra=[("not whole tiles", 4, V_)]))
    sizes = {"batch_size": size(1), "num_kv_heads": size(2), "max_len": size(4), "dtype": obj(torch.float32), "device": DEVICE}
    spec("quantized_cache.TileQuantizedCache", lambda **a: qc.TileQuantizedCache(**a), **sizes, head_dim=size(16, extra=[("not whole tiles", 4, V_)]), fmt=obj(qc.Q8_0),
         v_head_dim=size(16, optional=True))
    spec("quantized_cache.KIVICache", lambda **a: qc.KIVICache(**a), **sizes, head_dim=size(8, extra=[("odd", 3, V_)]), bits=Arg("size", 2, extra=[("3 bits", 3, V_)]),
         residual=size(4), v_head_dim=size(8, optional=True))
    spec("quantized_cache.hadamard", lambda **a: qc.hadamard(**a), n=Arg("size", 8, extra=[("not a power of two", 6, V_)]), dtype=obj(torch.float32), device=DEVICE)
    H = qc.hadamard(16)
    spec("quantized_cache.RotatedKeysCache", lambda **a: qc.RotatedKeysCache(**a), inner=obj(qc.TileQuantizedCache(1, 2, 16, 4, qc.Q8_0)),
         rotation=ten(H, extra=[("not orthogonal", 2 * H, V_), ("not square", H[:8], V_)]))


def _flex(f: Callable[..., object], **a: Any) -> object:
    """FlexAttention's dense path without its TorchDynamo trace (a second a call otherwise; tests/core/test_flex.py)."""
    import torch.nn.attention.flex_attention as flex_module

    debug = flex_module._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG
    flex_module._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = True
    try:
        return f(**a)
    finally:
        flex_module._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = debug


def _calls(f: Callable[..., object]) -> Callable[..., object]:
    return lambda **a: f(**a)


def _specs_lab() -> None:
    import lessons_src.lab.hybrid_models as hm
    import lessons_src.lab.long_context as lc
    import lessons_src.lab.pattern_model as pm
    from lessons_src.lab.configs import load_configs
    from lessons_src.lab.minilm import BertConfig, MiniLM, Tokenizer
    from lessons_src.lab.text_model import TextConfig, TextGPT
    from lessons_src.lab.toy_models import TinyConfig, TinyTransformer
    from lessons_src.masks import draft_tree
    from lessons_src.mechanisms import PerHeadRMSNorm

    spec("lab.pattern_model.LayerType", lambda **a: pm.LayerType(**a), kind=Arg("choice", "window"), size=size(4), rope=FLAG, shares=size0(0, optional=True))
    two = pm.gpt_oss_pattern(2, window=4)
    spec("lab.pattern_model.PatternConfig", lambda **a: pm.PatternGPT(pm.PatternConfig(**a)), pattern=obj(two), vocab_size=size(16), d_model=size(16), num_heads=size(4), num_kv_heads=size(2),
         d_ff=size(8), rope_base=BASE, nope_temperature=obj(None, optional=True), num_layers=size(2, optional=True))
    small = pm.PatternConfig(two, vocab_size=16, d_model=16, num_heads=4, num_kv_heads=2, d_ff=8)
    spec("lab.pattern_model.PatternGPT", lambda **a: pm.PatternGPT(**a), cfg=obj(small))
    model = pm.PatternGPT(small)
    spec("lab.pattern_model.PatternGPT.forward", lambda tokens, caches, positions, attn_mask: model(tokens, caches=caches, positions=positions, attn_mask=attn_mask),
         tokens=Arg("itensor", torch.arange(5)[None]), caches=obj(None, optional=True),
         positions=Arg("itensor", torch.tensor([[0, 1, 2, 2, 3]]), optional=True, extra=[("negative", torch.tensor([[0, -1, 2, 3, 4]]), V_), ("other T", torch.tensor([[0, 1]]), V_)]),
         attn_mask=obj(draft_tree([-1, 0], start=3), optional=True, extra=[("a string", "tree", T_)]))
    spec("lab.pattern_model.SharedKVAttention", lambda **a: pm.SharedKVAttention(**a), d_model=size(16), num_heads=size(4), qk_norm=obj(PerHeadRMSNorm(4, keys=False), optional=True),
         rope=obj(None, optional=True), scale=SCALE, bias=FLAG)
    shared = pm.SharedKVAttention(16, 4)
    kv = r(1, 2, 5, 4)
    spec("lab.pattern_model.SharedKVAttention.forward", lambda **a: shared(**a), x=ten(r(1, 5, 16)), k=ten(kv), v=ten(kv), start=size0(0), attn_mask=obj(None, optional=True), is_causal=FLAG,
         window=size(2, optional=True), chunk=size(2, optional=True))
    spec("lab.pattern_model.check_pattern", lambda **a: pm.check_pattern(**a), pattern=obj(two), num_layers=size(2))
    for name in ("gemma3_pattern", "llama4_pattern"):
        width = "window" if name == "gemma3_pattern" else "chunk"
        spec(f"lab.pattern_model.{name}", _calls(getattr(pm, name)), num_layers=size(4), **{width: size(4)}, every=size(2))
    for name in ("gpt_oss_pattern", "olmo3_pattern"):
        spec(f"lab.pattern_model.{name}", _calls(getattr(pm, name)), num_layers=size(4), window=size(4))
    spec("lab.pattern_model.share_kv", lambda **a: pm.share_kv(**a), pattern=obj(pm.gemma3_pattern(4, window=2, every=2)), last=size0(1))

    spec("lab.hybrid_models.GatedDeltaNet", lambda **a: hm.GatedDeltaNet(**a), d_model=size(8), num_heads=size(2), conv_size=size(2), chunk_size=size(2))
    spec("lab.hybrid_models.GatedDeltaNet.forward", lambda x: hm.GatedDeltaNet(8, 2)(x), x=ten(r(1, 5, 8)))
    cfg = hm.HybridConfig(vocab_size=10, d_model=8, num_heads=2, layers="LF", d_ff=8)
    spec("lab.hybrid_models.HybridConfig", lambda **a: hm.HybridConfig(**a), vocab_size=size(10), d_model=size(8), num_heads=size(2), layers=Arg("choice", "LF"), d_ff=size0(8), conv_size=size(2), chunk_size=size(2))
    spec("lab.hybrid_models.HybridLM", lambda **a: hm.HybridLM(**a), cfg=obj(cfg))
    hybrid = hm.HybridLM(cfg)
    spec("lab.hybrid_models.HybridLM.forward", lambda tokens: hybrid(tokens), tokens=Arg("itensor", torch.arange(5)[None]))
    spec("lab.hybrid_models.SwiGLU", lambda **a: hm.SwiGLU(**a), d_model=size(8), d_ff=size(4))
    spec("lab.hybrid_models.SwiGLU.forward", lambda x: hm.SwiGLU(8, 4)(x), x=ten(r(1, 5, 8)))
    spec("lab.hybrid_models.copy_accuracy", lambda **a: hm.copy_accuracy(**a), model=obj(hybrid), distances=obj([2]), rows=size(2), seed=size0(0), batch=size(2))
    spec("lab.hybrid_models.copy_batch", lambda **a: hm.copy_batch(**a), generator=obj(torch.Generator().manual_seed(0)), batch=size(2), seq_len=size(8), vocab_size=size(10), distances=obj([3]))
    tokens, distance = hm.copy_batch(torch.Generator().manual_seed(0), 2, 8, 10, [3])
    spec("lab.hybrid_models.copy_loss", lambda **a: hm.copy_loss(**a), model=obj(hybrid), tokens=Arg("itensor", tokens), distance=Arg("itensor", distance))
    spec("lab.hybrid_models.parameter_count", lambda **a: hm.parameter_count(**a), cfg=obj(cfg))
    spec("lab.hybrid_models.pattern", lambda **a: hm.pattern(**a), name=Arg("choice", "hybrid 3:1"), num_layers=size(4))

    icfg = lc.IndexerConfig(d_model=8, num_layers=2, indexer_heads=2, indexer_head_dim=4, rope_dim=2)
    spec("lab.long_context.IndexerConfig", lambda **a: lc.IndexerConfig(**a), d_model=size(8), num_layers=size(2), indexer_heads=size(2), indexer_head_dim=size(4), rope_dim=size0(2), rope_base=BASE)
    spec("lab.long_context.LightningIndexer", lambda **a: lc.LightningIndexer(**a), cfg=obj(icfg))
    spec("lab.long_context.LightningIndexer.forward", lambda x: lc.LightningIndexer(icfg)(x), x=ten(r(1, 5, 8)))
    spec("lab.long_context.TextIndexer", lambda **a: lc.TextIndexer(**a), cfg=obj(icfg))
    text = TextGPT(TextConfig(d_model=8, num_heads=2, num_layers=2, max_len=16, d_ff=8))
    windows = torch.arange(7)[None] % 256
    spec("lab.long_context.attention_targets", lambda **a: lc.attention_targets(**a), model=obj(text), tokens=Arg("itensor", windows[:, :-1]))
    spec("lab.long_context.text_model_top_k", lambda **a: lc.text_model_top_k(**a), model=obj(text), windows=Arg("itensor", windows), top_k=size(2), indexer=obj(lc.TextIndexer(icfg), optional=True))
    configs = load_configs()
    ds, nsa, v4 = configs["DeepSeek-V3.2"], configs["NSA 27B"], configs["DeepSeek-V4-Flash"]
    import lessons_src.lab.continuous_batching as cb

    tiny = TextGPT(TextConfig(d_model=16, num_heads=2, max_len=16, d_ff=32)).eval()
    spec("lab.continuous_batching.Request", lambda **a: cb.Request(**a), prompt=Arg("itensor", torch.arange(3)), max_new=size(2), arrival=size0(0))
    spec("lab.continuous_batching.serve", lambda **a: cb.serve(**a), model=obj(tiny), requests=obj([cb.Request(torch.arange(3), 2)]), num_blocks=size(8), block_size=size(4),
         max_batch_tokens=size(8))
    steps = cb.serve(tiny, [cb.Request(torch.arange(3), 2)]).steps
    spec("lab.continuous_batching.steps_figure", lambda **a: cb.steps_figure(**a), steps=obj(steps), size=obj((2.0, 1.5)), font=Arg("positive", 8.0), stacked=FLAG)
    spec("lab.long_context.selection_costs", lambda **a: lc.selection_costs(**a), cfg=obj(ds), context=size(4096), cache_bytes=size(2), index_bytes=size(1))
    spec("lab.long_context.native_sparse_costs", lambda **a: lc.native_sparse_costs(**a), cfg=obj(nsa), context=size(4096), cache_bytes=size(2))
    spec("lab.long_context.compressed_costs", lambda **a: lc.compressed_costs(**a), cfg=obj(v4), context=size(4096), kind=Arg("choice", "compressed_sparse"), cache_bytes=size(2), index_bytes=size(1))
    spec("lab.long_context.indexer_kl", lambda **a: lc.indexer_kl(**a), scores=ten(r(1, 2, 2)), target=ten(torch.tensor([[[1.0, 0.0], [0.5, 0.5]]])))
    spec("lab.long_context.load_text_indexer", lambda **a: lc.load_text_indexer(**a), path=Arg("path", None, optional=True))
    spec("lab.long_context.indexer_fit_table", lambda **a: lc.indexer_fit_table(**a), log=obj(lc.read_indexer_log()), top_k=obj([1, 8]))
    spec("lab.long_context.receptive_field", lambda **a: lc.receptive_field(**a), window=size(3), num_layers=size(3), length=size(12))
    toy = TinyTransformer(TinyConfig(vocab_size=10, d_model=8, num_heads=2, num_layers=1, max_len=16))
    spec("lab.long_context.toy_logits_with_mask", lambda **a: lc.toy_logits_with_mask(**a), model=obj(toy), tokens=Arg("itensor", torch.arange(4)[None]),
         attn_mask=Arg("btensor", torch.ones(4, 4, dtype=torch.bool).tril(), rank=False))
    spec("lab.long_context.toy_window_eviction", lambda **a: lc.toy_window_eviction(**a), model=obj(toy), n=size(5), window=size(3), sink_tokens=obj([0, 1]), batch=size(2), seed=size0(1))
    minilm = MiniLM(BertConfig(vocab_size=30522, d_model=8, num_heads=2, num_layers=1, d_ff=8, max_len=64, type_vocab_size=2, layer_norm_eps=1e-12))
    tok = Tokenizer()
    sentences = obj(["a cat sat.", "it was warm."])
    spec("lab.long_context.minilm_sink_shares", lambda **a: lc.minilm_sink_shares(**a), model=obj(minilm), tok=obj(tok), sentences=sentences)
    spec("lab.long_context.minilm_eviction_cosines", lambda **a: lc.minilm_eviction_cosines(**a), model=obj(minilm), tok=obj(tok), which=Arg("choice", "words"), sentences=sentences)
    ids, keep = tok.batch(["a cat sat.", "it was warm."])[1:]
    spec("lab.long_context.evict_keys_minilm", lambda **a: lc.evict_keys_minilm(**a), model=obj(minilm), ids=Arg("itensor", ids), keep=Arg("itensor", keep), evicted=obj([[1], [2]]))


def _specs_triton() -> None:
    import lessons_src.triton_flash as tf
    from lessons_src.masks import prepare_mask

    q, kv = r(1, 2, 16, 16), r(1, 1, 16, 16)
    blocks = {"block_q": Arg("size", 16, optional=True, numpy=np.int64(16)), "block_k": Arg("size", 16, optional=True, numpy=np.int64(16))}
    spec("triton_flash.triton_attention", lambda **a: tf.triton_attention(**a), q=ten(q), k=ten(kv), v=ten(kv), is_causal=FLAG, scale=SCALE, **blocks)
    prep = prepare_mask(None, is_causal=True, shape=(1, 2, 16, 16), dtype=torch.float32, device=torch.device("cpu"))
    spec("triton_flash.triton_attention_function", lambda **a: tf.triton_attention_function(**a), q=ten(q), k=ten(kv), v=ten(kv), mask=obj(prep), scale=Arg("positive", 0.25),
         dropout_p=Arg("prob", 0.0), **blocks)
    spec("triton_flash.TritonFlashAttention", lambda **a: tf.TritonFlashAttention.apply(*a.values()), q=ten(q), k=ten(kv), v=ten(kv), causal=FLAG, scale=Arg("positive", 0.25),
         block_q=Arg("size", 16, numpy=np.int64(16)), block_k=Arg("size", 16, numpy=np.int64(16)))


NOT_CHECKED.update({
    "lab.hybrid_models.HYBRID_LOG": "a file name", "lab.hybrid_models.LAYER_KINDS": "a dict of letters",
    "lab.hybrid_models.PATTERNS": "a dict of patterns", "lab.hybrid_models.read_hybrid_log": "takes no argument",
    "lab.long_context.INDEXER_CHECKPOINT": "a file name", "lab.long_context.INDEXER_LOG": "a file name",
    "lab.long_context.SENTENCES": "a tuple of sentences", "lab.long_context.read_indexer_log": "takes no argument",
    "lab.long_context.TopKResult": "a record a function fills with its results",
    "lab.continuous_batching.Step": "a record serve() fills with each step", "lab.continuous_batching.Served": "a record serve() fills with its results",
    "triton_flash.INTERPRETED": "a bool read from the environment",
    "quantized_cache.Q8_0": "a TileFormat", "quantized_cache.Q4_0": "a TileFormat", "quantized_cache.FP8": "a TileFormat",
    "quantized_cache.TileFormat.name": "a label, any str (the rows above check the sizes it is made with)",
    "split_kv.split_bounds.num_splits": "the other of split_size and num_splits (one rule, a size: tests/core/test_bad_inputs.py)",
    "split_kv.split_kv_attention.num_splits": "the other of split_size and num_splits (one rule, a size: tests/core/test_bad_inputs.py)",
    "split_kv.split_kv_attention.attn_mask": "attention()'s mask, checked by prepare_mask (tests/core/test_masks.py)",
    "shared_kv.SharedKVAttention.implementation": "attention()'s check_implementation (tests/core/test_attention_interface.py)",
    "split_kv.split_kv_attention.implementation": "attention()'s check_implementation (tests/core/test_attention_interface.py)",
    "split_kv.shared_prefix_attention.implementation": "attention()'s check_implementation (tests/core/test_attention_interface.py)",
})


# --------------------------------------------------------------------------- the rows


def _rows(names: list[str]) -> list[Any]:
    rows = []
    for name in names:
        call, args = SPECS[name]
        goods = {a: arg.good for a, arg in args.items()}
        for a, arg in args.items():
            for label, value, want in [*bad_values(arg), *arg.extra]:
                rows.append(pytest.param(name, a, call, {**goods, a: value}, want, id=f"{name}-{a}-{label}"))
            if arg.optional and arg.good is not None:
                rows.append(pytest.param(name, a, call, {**goods, a: None}, None, id=f"{name}-{a}-none"))
    return rows


def check_row(name: str, arg: str, call: Callable[..., object], kwargs: dict[str, Any], want: Any) -> None:
    """Accepted (``want`` None), or refused with ``want`` by a message that names ``arg`` and what it must be."""
    if want is None:
        call(**kwargs)
        return
    try:
        call(**kwargs)
    except EITHER as error:
        message = str(error)
        named = re.search(rf"(?<![\w.]){re.escape(arg)}(?!\w)", message)
        if not isinstance(error, want) and named:
            raise AssertionError(f"inconsistent: {type(error).__name__} where the rule gives {want}: {message}") from error
        if not isinstance(error, want):
            raise AssertionError(f"unclear: {type(error).__name__}: {error}") from error
        assert re.search(rf"(?<![\w.]){re.escape(arg)}(?!\w)", message), f"the error does not name {arg}: {message}"
        assert re.search(r"must|use|need|expect", message), f"the error does not say what would be right: {message}"
        return
    except Exception as error:
        raise AssertionError(f"unclear: {type(error).__name__}: {error}") from error
    raise AssertionError(f"silent: {name}({arg}={kwargs[arg]!r}) was accepted")


_specs_core()
_specs_quantized()
_specs_lab()
CORE_ROWS = _rows([n for n in SPECS if not n.startswith("triton_flash.")])


@pytest.mark.parametrize(("name", "arg", "call", "kwargs", "want"), CORE_ROWS)
def test_each_argument_refuses_each_kind_of_wrong_value(name, arg, call, kwargs, want) -> None:
    check_row(name, arg, call, kwargs, want)


def _triton_rows() -> list[Any]:
    try:
        import triton  # noqa: F401
    except ImportError:
        return []
    if not torch.cuda.is_available() and importlib.import_module("os").environ.get("TRITON_INTERPRET") != "1":
        return []
    _specs_triton()
    return _rows([n for n in SPECS if n.startswith("triton_flash.")])


TRITON_ROWS = _triton_rows()


@pytest.mark.parametrize(("name", "arg", "call", "kwargs", "want"), TRITON_ROWS or [pytest.param(None, None, None, None, None, marks=pytest.mark.skip(
    reason="needs Triton, the [triton] extra: `make test-triton` installs it and runs these rows through its interpreter"), id="triton")])
def test_each_triton_argument_refuses_each_kind_of_wrong_value(name, arg, call, kwargs, want) -> None:
    check_row(name, arg, call, kwargs, want)


# --------------------------------------------------------------------------- every public name has rows for every argument


def _public() -> dict[str, Any]:
    out = {}
    for m in MODULES:
        try:
            mod = importlib.import_module(f"lessons_src.{m}")
        except ImportError:  # triton_flash without Triton
            continue
        for n in mod.__all__:
            out[f"{m}.{n}"] = getattr(mod, n)
    return out


def _parameters(obj: Any) -> dict[str, list[str]]:
    """The callables a public name stands for (itself, its forward, its public classmethods) and their arguments."""
    if not callable(obj) or isinstance(obj, dict):
        return {"": []}
    if inspect.isclass(obj) and issubclass(obj, torch.autograd.Function):
        return {"": list(inspect.signature(obj.forward).parameters)[1:]}
    out: dict[str, list[str]] = {}
    if inspect.isclass(obj):
        init = obj.__init__ if "__init__" in vars(obj) or not hasattr(obj, "_fields") else None
        out[""] = [p for p in inspect.signature(obj).parameters]
        if init is None:
            out[""] = list(obj._fields)
        for meth in ("forward", "partial", "proportional"):
            if meth in vars(obj):
                f = getattr(obj, meth)
                out[f".{meth}"] = [p for p in inspect.signature(f).parameters if p != "self"]
    else:
        out[""] = list(inspect.signature(obj).parameters)
    return out


def test_every_public_name_has_a_row_for_every_argument() -> None:
    missing = []
    for name, obj in _public().items():
        if name in NOT_CHECKED:
            continue
        for suffix, params in _parameters(obj).items():
            full = name + suffix
            if full not in SPECS:
                if name.startswith("triton_flash.") and not TRITON_ROWS:
                    continue
                missing.append(f"{full} (no spec)")
                continue
            missing += [f"{full}.{p}" for p in params if p not in SPECS[full][1] and f"{full}.{p}" not in NOT_CHECKED]
    assert not missing, f"public arguments without rows: {missing}"


# --------------------------------------------------------------------------- the issue's cases that are not one argument


def _issue_cases() -> list[Any]:
    from lessons_src.functional import attention
    from lessons_src.layer import MultiHeadAttention
    from lessons_src.mechanisms import HeadwiseGate, PerHeadRMSNorm, Rotary, ValueRMSNorm

    q = r(1, 2, 3, 4)
    return [  # (id, call, error, message)
        ("qk_norm-is-a-value-norm", lambda: MultiHeadAttention(16, 4, qk_norm=ValueRMSNorm()), T_, r"qk_norm must be a qk_norm piece; got ValueRMSNorm, which is a v_norm piece: pass it as v_norm="),
        ("rope-is-a-norm", lambda: MultiHeadAttention(16, 4, rope=PerHeadRMSNorm(4)), T_, r"rope must be a rope piece; got PerHeadRMSNorm"),
        ("gate-is-a-rotary", lambda: MultiHeadAttention(16, 4, gate=Rotary(4)), T_, r"gate must be a gate piece; got Rotary"),
        ("v_norm-is-a-qk-norm", lambda: MultiHeadAttention(16, 4, v_norm=PerHeadRMSNorm(4)), T_, r"v_norm must be a v_norm piece"),
        ("gate-of-another-width", lambda: MultiHeadAttention(16, 4, gate=HeadwiseGate(8, 4)), V_, r"HeadwiseGate was made for d_model=8 \(the layer has 16\)"),
        ("attention-scale-zero", lambda: attention(q, q, q, scale=0), V_, r"scale must be above 0"),
        ("attention-scale-bool", lambda: attention(q, q, q, scale=True), T_, r"scale must be a number; got True"),
        ("attention-scale-string", lambda: attention(q, q, q, scale="0.5"), T_, r"scale must be a number; got '0.5'"),
        ("attention-scale-tensor", lambda: attention(q, q, q, scale=torch.tensor(0.5, requires_grad=True)), T_, r"a tensor would lose its gradient"),
        ("rotary-odd-width", lambda: Rotary(3), V_, r"dim must be even"),
        ("rotary-before-0", lambda: Rotary(4)(q, None, start=-1), V_, r"start must be at least 0"),
        ("rotary-start-and-positions", lambda: Rotary(4)(q, None, start=2, positions=torch.zeros(q.shape[0], q.shape[2], dtype=torch.long)), V_, r"give start=2 or positions, not both"),
        ("nope-before-0", lambda: __import__("lessons_src.mechanisms").mechanisms.NoPETemperature(floor_scale=2)(q, None, start=-2), V_, r"start must be at least 0"),
        ("eps-inf", lambda: ValueRMSNorm(eps=INF), V_, r"eps must be finite"),
        ("empty-copy-selection", lambda: __import__("lessons_src.lab.hybrid_models").lab.hybrid_models.copy_loss(
            SPECS["lab.hybrid_models.copy_loss"][1]["model"].good, torch.zeros(1, 5, dtype=torch.long), torch.zeros(1, 4, dtype=torch.long)), V_, r"distance marks no copied token"),
    ]


ISSUE_CASES = _issue_cases()


@pytest.mark.parametrize(("call", "error", "match"), [c[1:] for c in ISSUE_CASES], ids=[c[0] for c in ISSUE_CASES])
def test_the_issues_cases_get_a_clear_error(call, error, match) -> None:
    with pytest.raises(error, match=match):
        call()
