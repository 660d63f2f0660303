"""The exercises: for each one, its statement (the stub), hints, lesson, inputs, answer and known mistakes.

The inputs are chosen to tell the mistakes apart: several of them give the right answer when there is one
head (H = 1), one key/value head (K = 1), one query per KV head (n_rep = 1), as many queries as keys
(T = S), one query (T = 1), or a running maximum that never changes. Every exercise's first case avoids all
of those; later cases add the edges (one head, one token, a fully masked row). ``tests/lab/test_exercises.py``
proves the choice: each wrong variant is diagnosed as itself. What the values cannot show, whether an
online softmax works block by block, its input notes (:mod:`.blocks`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from . import solutions, stubs
from .blocks import in_blocks
from .mistakes import MISCONCEPTIONS, VARIANTS, Link, Misconception, Variant

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["EXERCISES", "Case", "Exercise", "exercise"]


@dataclass(frozen=True)
class Case:
    """One call: ``fn(*args, **kwargs)``. ``inplace`` names arguments the function must fill in place."""

    label: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    inplace: tuple[tuple[int, str], ...] = ()


@dataclass(frozen=True)
class Exercise:
    name: str
    title: str
    lesson: Link
    hints: tuple[str, ...]
    cases: Callable[[], list[Case]]
    package_code: tuple[str, ...] = ()  # dotted names whose source the solution shows beside the answer

    @property
    def stub(self) -> Callable[..., Any]:
        fn: Callable[..., Any] = getattr(stubs, self.name)
        return fn

    @property
    def reference(self) -> Callable[..., Any]:
        fn: Callable[..., Any] = getattr(solutions, self.name)
        return fn

    @property
    def variants(self) -> tuple[Variant, ...]:
        return tuple(v for v in VARIANTS if v.exercise == self.name)

    @property
    def misconceptions(self) -> tuple[Misconception, ...]:
        keys = dict.fromkeys(v.misconception for v in self.variants)
        return tuple(MISCONCEPTIONS[k] for k in keys)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(g: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=g)


def _split_cases() -> list[Case]:
    g = _gen(1)
    sizes = [(2, 3, 8, 2), (1, 4, 12, 3), (1, 2, 6, 6), (1, 5, 8, 1)]
    return [Case(f"x (B={B}, T={T}, D={D}), num_heads={H}", (_randn(g, B, T, D), H)) for B, T, D, H in sizes]


def _merge_cases() -> list[Case]:
    g = _gen(2)
    sizes = [(2, 2, 3, 4), (1, 3, 4, 2), (1, 1, 5, 3)]
    return [Case(f"y (B={B}, H={H}, T={T}, E={E})", (_randn(g, B, H, T, E),)) for B, H, T, E in sizes]


def _scores_cases() -> list[Case]:
    g = _gen(3)
    sizes = [(2, 2, 3, 5, 4), (1, 4, 2, 2, 8), (1, 1, 3, 4, 4)]
    return [Case(f"q (B={B}, H={H}, T={T}, E={E}), k (B={B}, H={H}, S={S}, E={E})",
                 (_randn(g, B, H, T, E), _randn(g, B, H, S, E))) for B, H, T, S, E in sizes]


def _causal_cases() -> list[Case]:
    return [Case(f"T={T}, S={S}", (T, S)) for T, S in [(2, 5), (3, 3), (1, 4), (4, 6), (1, 1)]]


def _padding_cases() -> list[Case]:
    return [Case(f"lengths={lengths}, S={S}", (lengths, S)) for lengths, S in [([2, 3], 4), ([1, 4, 2], 5), ([3], 3)]]


def _masked_softmax_cases() -> list[Case]:
    g = _gen(6)
    causal = solutions.causal_mask(3, 5)  # (T, S) = (3, 5), bottom-right
    padded = torch.ones(2, 1, 4, 4, dtype=torch.bool)  # (B, 1, T, S): sequence 1 has 2 real tokens
    padded[1, :, :, 2:] = False  # its padding keys are hidden
    padded[1, :, 2:, :] = False  # and its padding queries see nothing: two fully masked rows
    return [
        Case("scores (B=1, H=2, T=3, S=5), mask = the causal mask (T=3, S=5)", (_randn(g, 1, 2, 3, 5), causal)),
        Case("scores (B=2, H=2, T=4, S=4), mask (B=2, 1, T=4, S=4) with two fully masked rows "
             "(padded queries of sequence 1)", (_randn(g, 2, 2, 4, 4), padded)),
        Case("scores (B=1, H=1, T=2, S=3), mask all True", (_randn(g, 1, 1, 2, 3), torch.ones(2, 3, dtype=torch.bool))),
    ]


def _mha_cases() -> list[Case]:
    g = _gen(7)
    out = []
    for B, T, D, H in [(2, 4, 8, 2), (1, 3, 12, 3), (1, 1, 4, 1)]:
        x = _randn(g, B, T, D)
        w = [_randn(g, D, D) / D**0.5 for _ in range(4)]
        out.append(Case(f"x (B={B}, T={T}, D={D}), weights ({D}, {D}) each, num_heads={H}", (x, *w, H)))
    return out


def _param_cases() -> list[Case]:
    sizes = [(64, 8, 2, True), (768, 12, 12, False), (1024, 16, 16, True), (32, 4, 1, False)]
    return [Case(f"d_model={D}, num_heads={H}, num_kv_heads={K}, bias={b}", (D, H, K, b)) for D, H, K, b in sizes]


def _arithmetic_cases() -> list[Case]:
    # d_model = 1024 with 16 heads, then 32: the questions page's pen-and-paper exercise, checked
    return [Case(f"d_model={D}, num_heads={H}", (D, H)) for D, H in [(1024, 16), (1024, 32), (768, 12), (64, 1)]]


def _gqa_cases() -> list[Case]:
    g = _gen(9)
    sizes = [(1, 4, 2, 3, 5, 4), (2, 6, 3, 2, 2, 8), (1, 4, 1, 1, 6, 4), (1, 2, 2, 3, 3, 4)]
    return [
        Case(f"q (B={B}, H={H}, T={T}, E={E}), k and v (B={B}, K={K}, S={S}, E={E}) (n_rep={H // K})",
             (_randn(g, B, H, T, E), _randn(g, B, K, S, E), _randn(g, B, K, S, E)))
        for B, H, K, T, S, E in sizes
    ]


def _decode_cases() -> list[Case]:
    g = _gen(10)
    out = []
    for B, H, T, E, position, max_len in [(1, 2, 2, 4, 3, 8), (2, 2, 1, 4, 4, 8), (1, 1, 1, 4, 5, 8)]:
        q, k_new, v_new = (_randn(g, B, H, T, E) for _ in range(3))
        k_cache, v_cache = torch.zeros(B, H, max_len, E), torch.zeros(B, H, max_len, E)
        k_cache[:, :, :position], v_cache[:, :, :position] = _randn(g, B, H, position, E), _randn(g, B, H, position, E)
        out.append(Case(
            f"q, k_new, v_new (B={B}, H={H}, T={T}, E={E}), caches (B={B}, H={H}, max_len={max_len}, E={E}) "
            f"holding {position} tokens, position={position}",
            (q, k_new, v_new, k_cache, v_cache, position), inplace=((3, "k_cache"), (4, "v_cache")),
        ))
    return out


def _online_cases() -> list[Case]:
    g = _gen(11)
    rising = _randn(g, 2, 3, 6) + torch.arange(6.0)  # the maximum changes from block to block
    masked = _randn(g, 3, 5)
    masked[0, 3:] = float("-inf")
    masked[1] = float("-inf")  # a row that sees nothing
    sizes = [("x (2, 3, 6), rising along the row", rising, 2),
             ("x (3, 5) with -inf entries and a row of only -inf", masked, 2),
             ("x (4, 7)", _randn(g, 4, 7), 3), ("x (2, 5)", _randn(g, 2, 5), 5)]
    # x notes each max or sum taken over more than block_size values of a row at once (see .blocks)
    return [Case(f"{label}, block_size={b}" + (" (one block)" if b == x.shape[-1] else ""), (in_blocks(x, b),),
                 {"block_size": b}) for label, x, b in sizes]


def _absorb_cases() -> list[Case]:
    g = _gen(12)
    sizes = [(1, 2, 3, 4, 6), (2, 3, 2, 2, 5), (1, 1, 2, 4, 3)]
    return [Case(f"q_nope (B={B}, H={H}, T={T}, E={E}), w_uk (H * E = {H * E}, C={C})",
                 (_randn(g, B, H, T, E), _randn(g, H * E, C))) for B, H, T, E, C in sizes]


def _softcap_cases() -> list[Case]:
    g = _gen(13)
    causal = solutions.causal_mask(3, 5)  # (T, S) = (3, 5), bottom-right
    padded = torch.ones(2, 1, 4, 4, dtype=torch.bool)
    padded[1, :, :, 2:] = False
    padded[1, :, 2:, :] = False  # two fully masked rows
    return [
        Case("scores (B=1, H=2, T=3, S=5) of spread 8, mask = the causal mask (T=3, S=5), cap=5.0",
             (_randn(g, 1, 2, 3, 5) * 8, causal, 5.0)),
        Case("scores (B=2, H=2, T=4, S=4), mask (B=2, 1, T=4, S=4) with two fully masked rows, cap=2.0",
             (_randn(g, 2, 2, 4, 4) * 4, padded, 2.0)),
    ]


def _sink_cases() -> list[Case]:
    g = _gen(14)
    out = []
    for B, H, T, S, E in [(1, 2, 3, 5, 4), (2, 3, 4, 4, 8)]:
        out.append(Case(f"q (B={B}, H={H}, T={T}, E={E}), k and v (S={S}), sinks (H={H},), mask = the causal "
                        f"mask (T={T}, S={S})",
                        (_randn(g, B, H, T, E), _randn(g, B, H, S, E), _randn(g, B, H, S, E), _randn(g, H),
                         solutions.causal_mask(T, S))))
    hidden = torch.zeros(2, 3, dtype=torch.bool)
    hidden[1] = True  # query 0 sees nothing: all its weight on the sink
    out.append(Case("q (B=1, H=2, T=2, E=4), k and v (S=3), sinks (H=2,), query 0 sees no key",
                    (_randn(g, 1, 2, 2, 4), _randn(g, 1, 2, 3, 4), _randn(g, 1, 2, 3, 4), _randn(g, 2), hidden)))
    return out


def _qk_norm_cases() -> list[Case]:
    from ...rope import rope_cos_sin

    g = _gen(15)
    out = []
    for B, H, T, E in [(1, 2, 4, 8), (2, 3, 5, 4)]:
        cos, sin = rope_cos_sin(torch.arange(T), E)  # (T, E)
        out.append(Case(f"q and k (B={B}, H={H}, T={T}, E={E}), weights (E={E},) drawn around 1, cos and sin "
                        f"(T={T}, E={E}) of positions 0..{T - 1}",
                        (_randn(g, B, H, T, E) * 3, _randn(g, B, H, T, E), 1 + 0.5 * _randn(g, E),
                         1 + 0.5 * _randn(g, E), cos, sin)))
    return out


def _gate_cases() -> list[Case]:
    g = _gen(16)
    out = []
    for B, H, T, E in [(1, 2, 3, 4), (2, 4, 2, 2)]:
        D = H * E
        out.append(Case(f"x (B={B}, T={T}, D={D}), heads (B={B}, H={H}, T={T}, E={E}), w_g ({D}, {D}), "
                        f"w_o ({D}, {D})",
                        (_randn(g, B, T, D), _randn(g, B, H, T, E), _randn(g, D, D) / D**0.5,
                         _randn(g, D, D) / D**0.5)))
    return out


def _delta_rule_cases() -> list[Case]:
    g = _gen(19)
    out = []
    for B, H, Dk, Dv, label in [(1, 2, 4, 3, "decays 0.3 to 0.9, beta 0.2 to 0.9"),
                                (2, 3, 3, 5, "decays 0.3 to 0.9, beta 0.2 to 0.9")]:
        decay = 0.3 + 0.6 * torch.rand(B, H, generator=g)  # far from 1: the gate's place shows
        beta = 0.2 + 0.7 * torch.rand(B, H, generator=g)
        unit = torch.nn.functional.normalize
        out.append(Case(f"state (B={B}, H={H}, Dk={Dk}, Dv={Dv}), q and k (B={B}, H={H}, Dk={Dk}) of unit length, "
                        f"v (Dv={Dv}), g and beta (B={B}, H={H}): {label}",
                        (_randn(g, B, H, Dk, Dv), unit(_randn(g, B, H, Dk), dim=-1),
                         unit(_randn(g, B, H, Dk), dim=-1), _randn(g, B, H, Dv), decay.log(), beta),
                        inplace=((0, "state"),)))
    return out


def _indexer_cases() -> list[Case]:
    g = _gen(23)
    out = []
    for B, Hi, T, S, Di, top_k in [(1, 4, 6, 10, 8, 3), (2, 3, 5, 5, 4, 2)]:  # T < S first; then T = S, short rows
        weights = 0.5 + torch.rand(B, Hi, T, generator=g)  # positive: the ReLU's place shows
        out.append(Case(f"q (B={B}, Hi={Hi}, T={T}, Di={Di}), k (B={B}, S={S}, Di={Di}), weights (B={B}, Hi={Hi}, "
                        f"T={T}), top_k={top_k}",
                        (_randn(g, B, Hi, T, Di), _randn(g, B, S, Di), weights, top_k)))
    return out


def _mask_mod_cases() -> list[Case]:
    sizes = [(2, 5), (4, 6), (3, 3), (1, 4)]  # T < S first: there top-left and bottom-right differ
    return [Case(f"q_idx = arange(T)[:, None], kv_idx = arange(S)[None, :], T={T}, S={S}",
                 (torch.arange(T)[:, None], torch.arange(S)[None, :], T, S)) for T, S in sizes]


def _flex_sink_cases() -> list[Case]:
    g = _gen(13)
    out = []
    for B, H, T, E, sinks in [(1, 2, 5, 8, [-1.0, 2.0]), (2, 2, 5, 8, [0.5, 3.0])]:
        q, k, v = (_randn(g, B, H, T, E) for _ in range(3))
        out.append(Case(f"q, k, v (B={B}, H={H}, T={T}, E={E}), sinks={sinks}", (q, k, v, torch.tensor(sinks))))
    return out


def _intensity_cases() -> list[Case]:
    sizes = [(2, 8, 2, 4, 5, 2), (1, 6, 3, 8, 7, 4), (3, 4, 4, 2, 3, 2)]  # n_rep 4, then 2, then MHA (n_rep 1)
    return [Case(f"batch={B}, num_heads={H}, num_kv_heads={K}, head_dim={E}, cached={S}, bytes_per_number={b}",
                 (B, H, K, E, S, b)) for B, H, K, E, S, b in sizes]


def _state_merge_cases() -> list[Case]:
    """Two states of each query, over two disjoint sets of keys, computed from scores; the last case has a query
    whose second state is empty and one whose both are (a query outside both splits' window)."""
    g = _gen(17)
    out: list[Case] = []
    for B, H, T, E, S1, S2 in [(1, 2, 3, 4, 5, 7), (2, 1, 2, 3, 4, 6), (1, 1, 3, 2, 3, 3)]:
        scores, v = _randn(g, B, H, T, S1 + S2) * 2, _randn(g, B, H, S1 + S2, E)
        states = []
        for keys in (slice(0, S1), slice(S1, S1 + S2)):
            s = scores[..., keys].clone()  # (B, H, T, S_i)
            if len(out) == 2:  # query 1 sees no key of the second set; query 2 no key of either
                s[:, :, 2] = -math.inf
                if keys.start:
                    s[:, :, 1] = -math.inf
            lse = torch.logsumexp(s, dim=-1)  # (B, H, T): -inf for a query that sees none of these keys
            o = torch.nan_to_num(torch.softmax(s, dim=-1)) @ v[:, :, keys]  # (B, H, T, E): 0 where empty
            states += [o, lse]
        label = f"two states of B={B}, H={H}, T={T} queries (E={E}), over {S1} and {S2} keys"
        out.append(Case(label + (": one state empty, then both" if len(out) == 2 else ""), tuple(states)))
    return out


def _rope_cases() -> list[Case]:
    from ...rope import rope_cos_sin

    g = _gen(24)
    out = []
    for B, H, T, E, start in [(1, 2, 4, 8, 3), (2, 1, 3, 4, 1), (1, 1, 2, 2, 5)]:  # E = 2: one pair, both layouts agree
        cos, sin = rope_cos_sin(torch.arange(start, start + T), E)  # (T, E)
        out.append(Case(f"x (B={B}, H={H}, T={T}, E={E}), cos and sin (T={T}, E={E}) of positions "
                        f"{start}..{start + T - 1}", (_randn(g, B, H, T, E), cos, sin)))
    return out


def _tile_cases() -> list[Case]:
    g = _gen(29)
    out = []
    for Q, K0, K, E in [(4, 3, 3, 2), (3, 2, 4, 3)]:
        s0, v0 = _randn(g, Q, K0), _randn(g, K0, E)  # the tiles before this one
        s0[Q - 2 :] = float("-inf")  # the last two queries have seen no key yet
        m = s0.amax(dim=-1)
        p0 = torch.exp(s0 - torch.where(m == float("-inf"), 0.0, m)[:, None])
        s = _randn(g, Q, K)
        s[0] += 4.0  # query 0's maximum rises: what was summed must be rescaled
        s[1] -= 4.0  # query 1's stays
        if Q == 4:
            s[3] = float("-inf")  # query 3 sees nothing in this tile either
        out.append(Case(f"m, l (Q={Q},) and acc (Q={Q}, E={E}) after {K0} keys, the last two queries having seen "
                        f"none; s (Q={Q}, K={K}) raising query 0's maximum"
                        + (", query 3's all -inf" if Q == 4 else "") + f"; v (K={K}, E={E})",
                        (m, p0.sum(dim=-1), p0 @ v0, s, _randn(g, K, E))))
    return out


def _key_end_cases() -> list[Case]:
    sizes = [(6, 10, 4), (7, 3, 2), (5, 5, 2), (1, 9, 4), (8, 8, 8)]  # T < S with a short last block first
    return [Case(f"T={T}, S={S}, block_q={b}", (T, S, b)) for T, S, b in sizes]


def _lse_cases() -> list[Case]:
    g = _gen(31)
    rising = _randn(g, 2, 3, 6) + torch.arange(6.0)  # the maximum changes from block to block
    rising[1, 2] = float("-inf")  # a row that sees nothing
    masked = _randn(g, 3, 5)
    masked[0, 3:] = float("-inf")
    masked[1] = float("-inf")
    sizes = [("x (2, 3, 6), rising along the row, one row of only -inf", rising, 2),
             ("x (3, 5) with -inf entries and a row of only -inf", masked, 2), ("x (4, 7)", _randn(g, 4, 7), 3)]
    return [Case(f"{label}, block_size={b}", (in_blocks(x, b),), {"block_size": b}) for label, x, b in sizes]


def _draft_tree_cases() -> list[Case]:
    trees = [([-1, 0, 0, 1, 2], 3), ([-1, 0, 1, 1, 0], 2), ([-1, -1, 0, 1], 4), ([-1, 0, 1], 1)]  # the last a chain
    return [Case(f"parents={p}, cached={c}", (p, c)) for p, c in trees]


def _left_pad_cases() -> list[Case]:
    sizes = [([3, 5, 1], 5), ([2, 4], 6), ([1, 3, 2], 3)]  # the first row never the longest: one length shows
    return [Case(f"lengths={lengths}, T={T}", (lengths, T)) for lengths, T in sizes]


def _packed_step_cases() -> list[Case]:
    sizes = [([5, 0, 3], [1, 4, 1]), ([2, 7], [3, 1]), ([0], [6])]  # a decode, a prompt chunk, a request starting
    return [Case(f"cached={cached}, new={new}", (cached, new)) for cached, new in sizes]


def _tile_quant_cases() -> list[Case]:
    """Rows of tiles whose magnitudes differ by far (one scale per tensor would crush the small ones), each with
    one large number (a scale from the mean would clip it), at 8 and 4 bits."""
    g = _gen(31)
    out = []
    for bits, rows, tiles, tile in [(8, 2, 3, 8), (4, 3, 2, 4), (4, 1, 4, 8)]:
        x = _randn(g, rows, tiles, tile) * torch.logspace(-2, 1, tiles)[:, None]  # tiles of growing magnitude
        x[..., 0] *= 4  # each tile's first number well above the rest
        out.append(Case(f"{rows} rows of {tiles} tiles of {tile}, {bits} bits", (x.flatten(-2), bits, tile)))
    return out


_SRC = "lessons/split-run-concatenate.md"
_SPLIT = Link(_SRC, "the-split-traced-view-then-transpose", "Split, run, concatenate: the split, traced")
_KERNEL = Link("lessons/flash-in-triton.md", "the-forward-kernel-read-in-parts",
               "FlashAttention in Triton: the forward kernel")
EXERCISES: dict[str, Exercise] = {
    e.name: e
    for e in (
        Exercise(
            "split_heads", "Split the width into heads", _SPLIT,
            ("`E = D // num_heads`. Memory keeps each position's `D` features together, so split the LAST dim "
             "first: `x.view(B, T, H, E)`.",
             "That tensor is `(B, T, H, E)`; the heads must come before the positions: swap dims 1 and 2 "
             "with `.transpose(1, 2)`."),
            _split_cases, ("lessons_src.layer.MultiHeadAttention._split_heads",),
        ),
        Exercise(
            "merge_heads", "Concatenate the heads", _SPLIT,
            ("Undo the split in reverse order: first bring the positions back before the heads.",
             "`y.transpose(1, 2)` is `(B, T, H, E)` and not contiguous: `.reshape(B, T, H * E)` (not `.view`) "
             "joins the last two dims."),
            _merge_cases,
        ),
        Exercise(
            "attention_scores", "Scaled scores",
            Link(_SRC, "the-formula", "Split, run, concatenate: the formula"),
            ("Every query against every key is one matmul over the last dim: `q @ k.transpose(-2, -1)`.",
             "Divide by the square root of the HEAD size, `q.shape[-1]`, not of the model width."),
            _scores_cases,
        ),
        Exercise(
            "mha_param_count", "The parameters of an attention layer",
            Link("lessons/parameters-and-compute.md", "parameters-4d_textmodel2", "Parameters and compute"),
            ("`W_Q` maps `d_model` to `num_heads * E = d_model` features; `W_K` and `W_V` map `d_model` to "
             "`num_kv_heads * E` features; `W_O` maps `d_model` back to `d_model`.",
             "A weight has `in * out` parameters; a bias adds `out` more."),
            _param_cases,
        ),
        Exercise(
            "dimension_arithmetic", "Dimension arithmetic at d_model = 1024, h = 16",
            Link("lessons/parameters-and-compute.md", "head-count-is-a-partition",
                 "Parameters and compute: head count is a partition"),
            ("`head_dim = d_model // num_heads`.",
             "One head's `W_Q` is `d_model x head_dim`; the heads together are `num_heads` times that.",
             "The heads' outputs side by side are `num_heads * head_dim` wide, and `W_O` maps that to `d_model`."),
            _arithmetic_cases, ("lessons_src.layer.MultiHeadAttention.head_weights",),
        ),
        Exercise(
            "causal_mask", "A causal mask for T ≤ S (bottom-right)",
            Link("lessons/inference-variants.md", "a-pitfall-is_causaltrue-when-the-queries-are-fewer-than-the-keys",
                 "The KV cache: is_causal with fewer queries than keys"),
            ("Start from a `(T, S)` tensor of `True` and keep its lower triangle: `torch.tril`.",
             "`tril`'s `diagonal` argument moves the triangle: the last query must see the last key.",
             "`diagonal = S - T`."),
            _causal_cases, ("lessons_src.masks.causal_mask",),
        ),
        Exercise(
            "padding_mask", "A padding mask",
            Link("lessons/pitfalls-in-code.md", "6-mask-polarity-true-means-opposite-things",
                 "Pitfalls 2: mask polarity"),
            ("Compare the positions `torch.arange(S)` with each length: a position is real when it is below it.",
             "`torch.arange(S) < torch.tensor(lengths)[:, None]` is `(B, S)`; add the two broadcast dims with "
             "`[:, None, None, :]`."),
            _padding_cases, ("lessons_src.masks.padding_mask",),
        ),
        Exercise(
            "masked_softmax", "A masked softmax that survives fully masked rows",
            Link("lessons/pitfalls-in-code.md", "fully-masked-rows", "Pitfalls 2: a fully masked row"),
            ("Hide the keys the mask forbids: `scores.masked_fill(~mask, float('-inf'))`. The softmax is over "
             "the keys, the last dim.",
             "Subtract each row's maximum before `exp`, but where that maximum is `-inf` (nothing visible), "
             "subtract 0 instead: `exp(-inf) = 0` everywhere in that row.",
             "Divide by the row's sum where it is positive and by 1 where it is 0."),
            _masked_softmax_cases, ("lessons_src.functional._softmax_zero_rows",),
        ),
        Exercise(
            "mha_forward", "A multi-head attention forward pass from given weights",
            Link(_SRC, "the-formula", "Split, run, concatenate: the formula"),
            ("Project: `q = x @ w_q.T` (likewise `k` and `v`), then split each with your `split_heads`.",
             "In every head: `softmax(q @ k.transpose(-2, -1) / sqrt(E), dim=-1) @ v`.",
             "Concatenate the heads with `merge_heads`, then apply the output projection: `@ w_o.T`."),
            _mha_cases, ("lessons_src.layer.MultiHeadAttention.project_qkv",),
        ),
        Exercise(
            "gqa_attention", "GQA: each KV head serves its group",
            Link("lessons/gqa-mqa.md", "grouped-query-and-multi-query-attention", "GQA and MQA"),
            ("`n_rep = H // K`. Line the KV heads up with the query heads, then attend as in MHA.",
             "Query heads `0 .. n_rep - 1` all read KV head 0: each KV head is repeated in place, "
             "`k.repeat_interleave(n_rep, dim=1)`, not tiled."),
            _gqa_cases, ("lessons_src.functional.repeat_kv",),
        ),
        Exercise(
            "decode_step", "One KV-cache decode step",
            Link("lessons/inference-variants.md", "the-kv-cache", "The KV cache"),
            ("Write in place: `k_cache[:, :, position:position + T] = k_new` (likewise `v`).",
             "Attend to the filled slots only: `k_cache[:, :, :position + T]`.",
             "The `T` new queries are the LAST `T` of those `S` positions: the causal mask is bottom-right "
             "(`tril` with `diagonal=S - T`); `F.scaled_dot_product_attention`'s `is_causal=True` is top-left."),
            _decode_cases, ("lessons_src.kv_cache.KVCache.update",),
        ),
        Exercise(
            "online_softmax", "Online softmax",
            Link("lessons/flash-attention.md", "online-softmax", "FlashAttention: online softmax"),
            ("Start with `m = -inf` and `l = 0` per row. For each block: `m_new = max(m, block's max)`.",
             "`l` was summed relative to `m`: `l_new = l * exp(m - m_new) + sum(exp(block - m_new))`.",
             "While `m_new` is `-inf` (only `-inf` seen so far), shift by 0 instead; at the end divide "
             "`exp(x - m)` by `l`, and by 1 where `l` is 0."),
            _online_cases, ("lessons_src.flash.softmax_statistics", "lessons_src.flash.online_softmax"),
        ),
        Exercise(
            "absorb_query", "MLA weight absorption",
            Link("lessons/mla-modes.md", "two-ways-to-compute-the-same-thing", "MLA, naive or absorbed"),
            ("`q . (W c) = (W^T q) . c`: fold `W_UK_h` into head `h`'s query.",
             "Head `h` owns the rows `h * E .. h * E + E - 1` of `w_uk`: `w_uk.view(H, E, C)`.",
             "Contract over `E`: `torch.einsum('bhte,hec->bhtc', q_nope, w)`."),
            _absorb_cases, ("lessons_src.mla.MultiHeadLatentAttention._absorbed",),
        ),
        Exercise(
            "softcapped_softmax", "A soft-capped, masked softmax",
            Link("lessons/reading-a-real-model.md", "where-the-other-pieces-go",
                 "Reading a real model's attention: where the other pieces go"),
            ("The cap is `cap * torch.tanh(scores / cap)`: every finite score ends in `(-cap, cap)`.",
             "What does the cap do to `-inf`? `tanh(-inf) = -1`. So cap first, then fill the hidden scores with "
             "`-inf`.",
             "Then the masked softmax you wrote before: shift by 0 where a row sees nothing, divide by 1 where "
             "its sum is 0."),
            _softcap_cases, ("lessons_src.score_mods.soft_cap",),
        ),
        Exercise(
            "sink_attention", "Attention with a learned sink",
            Link("lessons/sinks-and-gates.md", "a-sink-you-can-learn", "Sinks you can learn, and gates: a sink"),
            ("Masked scores as usual, `(B, H, T, S)`; head `h`'s sink logit is one more column: "
             "`sinks[:, None, None].expand(B, H, T, 1)`.",
             "Concatenate it after the keys' columns and take the softmax over all `S + 1`.",
             "The sink has no value: keep the first `S` columns of the weights (`[..., :-1]`) and multiply by `v`."),
            _sink_cases,
        ),
        Exercise(
            "qk_norm_scores", "QK-norm, RoPE and the scores, in Qwen3's order",
            Link("lessons/reading-a-real-model.md", "ours-and-theirs-run-together",
                 "Reading a real model's attention: ours and theirs"),
            ("RMSNorm over the last dim: `x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * weight`.",
             "RoPE, rotate-half: split the last dim in halves `x1, x2`, then `x * cos + cat([-x2, x1]) * sin`.",
             "The order matters: the norm's weight scales features one by one, and RoPE mixes feature `i` with "
             "`i + E/2`. Norm first, as Qwen3's `forward` does."),
            _qk_norm_cases, ("lessons_src.mechanisms.PerHeadRMSNorm.forward",),
        ),
        Exercise(
            "gated_output", "An output gate, then W_O",
            Link("lessons/reading-a-real-model.md", "where-the-other-pieces-go",
                 "Reading a real model's attention: where the other pieces go"),
            ("Concatenate the heads first: `heads.transpose(1, 2).reshape(B, T, H * E)`; feature `h * E + e` is "
             "head `h`'s feature `e`.",
             "The gate, `torch.sigmoid(x @ w_g.T)`, has the same layout: multiply it in before `W_O`, which mixes "
             "the heads."),
            _gate_cases, ("lessons_src.mechanisms.ElementwiseGate.forward",),
        ),
        Exercise(
            "delta_rule_step", "One step of the gated delta rule",
            Link("lessons/linear-attention.md", "the-gate-forgetting-on-purpose",
                 "Layers with a fixed-size state: the gate"),
            ("Decay first: `S = state * torch.exp(g)[..., None, None]`.",
             "What the state holds for the key: `torch.einsum('bhkv,bhk->bhv', S, k)`. Write `beta * (v - that)` "
             "under the key: the outer product `k[..., :, None] * write[..., None, :]`, added to `S`.",
             "The query reads the state after the write. Then `state.copy_(S)`: a new tensor bound to the name "
             "`state` leaves the caller's state unchanged."),
            _delta_rule_cases, ("lessons_src.delta_rule.delta_rule_recurrent",),
        ),
        Exercise(
            "indexer_top_k", "A lightning indexer's pick",
            Link("lessons/choosing-keys.md", "a-cheap-score-picks-for-every-head",
                 "Attention that chooses its keys: a cheap score"),
            ("The scores: `torch.relu(torch.einsum('bhtd,bsd->bhts', q, k))` per indexer head, times "
             "`weights[..., None]`, summed over the heads: `(B, T, S)`.",
             "Query `t` sees keys `0 .. t + S - T`: `torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T)`. "
             "Fill the hidden scores with `-inf` before the pick.",
             "`scores.topk(top_k, dim=-1).indices` along the keys; `scatter_` them into a bool mask, keep only the "
             "visible ones (a short row picked some `-inf`), and add the one head axis: `[:, None]`."),
            _indexer_cases, ("lessons_src.sparse_selection.top_k_mask",),
        ),
        Exercise(
            "causal_mask_mod", "A causal mask_mod for new tokens after a cache",
            Link("lessons/mask-is-a-function.md", "the-convention-that-bites-bottom-right",
                 "A mask is a function: bottom-right"),
            ("Query `q_idx` is not at position `q_idx`: `S - T` cached keys come before the new queries.",
             "Query `q_idx` sits at position `q_idx + S - T`; it may see every key at or before that position."),
            _mask_mod_cases, ("lessons_src.masks.causal", "lessons_src.masks.mask_mod"),
        ),
        Exercise(
            "flex_sink_attention", "Learned sinks through FlexAttention's log-sum-exp",
            Link("lessons/mask-is-a-function.md", "score-changes-and-the-sink-that-is-not-one",
                 "A mask is a function: the sink that is not one"),
            ("A score_mod sees one score; the sink changes each query's normaliser. Ask FlexAttention for it: "
             "`flex_attention(q, k, v, return_aux=AuxRequest(lse=True))` returns `(out, aux)` with `aux.lse`.",
             "With the sink the normaliser's log is `torch.logaddexp(lse, sink)`; every weight `exp(s - lse)` becomes "
             "`exp(s - lse_all)`, so multiply `out` by `exp(lse - lse_all)` (one number per query)."),
            _flex_sink_cases, ("lessons_src.flex.flex_attend",),
        ),
        Exercise(
            "flash_tile_step", "One tile of FlashAttention's loop",
            _KERNEL,
            ("The new maximum: `m_new = torch.maximum(m, s.amax(dim=-1))`; the tile's weights are "
             "`torch.exp(s - m_new[:, None])`.",
             "`l` and `acc` were both summed against the old `m`: multiply both by `alpha = torch.exp(m - m_new)` "
             "before adding the tile's `p.sum(dim=-1)` and `p @ v`.",
             "Where `m_new` is `-inf` (only `-inf` seen so far), shift by 0 instead: `exp(-inf - 0) = 0`, and "
             "nothing becomes `NaN`."),
            _tile_cases,
        ),
        Exercise(
            "causal_key_ends", "The causal loop's bound, per block of queries",
            _KERNEL,
            ("Block `i_block` holds the queries `i_block * block_q` to `(i_block + 1) * block_q - 1` (fewer in a "
             "short last block); its last query sees the most keys.",
             "Query `i` sees the keys `0 .. i + S - T`: one past the last is `i + S - T + 1`.",
             "Clamp into `[0, S]`: a short last block's bound passes `S`, and with `T > S` the first blocks see "
             "no key."),
            _key_end_cases, ("lessons_src.flash.block_kind",),
        ),
        Exercise(
            "lse_in_base_2", "The log-sum-exp, kept in base 2",
            _KERNEL,
            ("The online softmax's running maximum and sum, on `x * log2(e)` (`1 / math.log(2)`), with "
             "`torch.exp2` in place of `torch.exp`.",
             "At the end, `m + torch.log2(l)` is the log-sum-exp in base 2; times `math.log(2)` it is the natural "
             "one.",
             "Shift by 0 where the running maximum is `-inf`; `torch.log2(0)` is `-inf`, the right answer for a "
             "row that sees nothing."),
            _lse_cases, ("lessons_src.flash.softmax_statistics",),
        ),
        Exercise(
            "gqa_decode_intensity", "The arithmetic intensity of a GQA decoding step",
            Link("lessons/decoding-and-memory.md", "one-decoding-step-counted",
                 "Why decoding waits on memory: one decoding step, counted"),
            ("FLOPs: every query head does `cached * head_dim` multiply-adds for its scores and as many for its "
             "weighted sum, for each of the `batch` sequences; a multiply-add is 2 FLOPs.",
             "Bytes: the cache holds `num_kv_heads` heads of keys and as many of values, `cached` positions of "
             "`head_dim` numbers each, per sequence. A group's query heads share what their KV head read.",
             "`intensity = flops / bytes`: `2 * num_heads / (num_kv_heads * bytes_per_number)`, whatever the "
             "batch and the cache length."),
            _intensity_cases,
        ),
        Exercise(
            "merge_attention_states", "Merge two attention states",
            Link("lessons/split-and-merge.md", "the-attention-state-and-its-merge",
                 "Split, merged, shared: the attention state, and its merge"),
            ("The merged log-sum-exp is the log of the two sums of exponentials added: "
             "`torch.logaddexp(lse1, lse2)`.",
             "Each output is normalised over its own keys; over all of them, state i holds the share "
             "`exp(lse_i - lse)` of the softmax. Weight each output by its share (add a last axis to broadcast "
             "over E), then add.",
             "Where both states are empty, `lse` is `-inf` and `lse_i - lse` is NaN: subtract 0 there instead "
             "(`torch.where(torch.isneginf(lse), 0, lse)`), so both weights are `exp(-inf) = 0`."),
            _state_merge_cases, ("lessons_src.score_mods.merge_states",),
        ),
        Exercise(
            "rope_interleaved", "RoPE with interleaved pairs",
            Link("lessons/positions.md", "two-layouts-which-features-pair", "Positions: two layouts"),
            ("Pair `i` is features `2i` and `2i + 1`: `x1, x2 = x[..., 0::2], x[..., 1::2]`, each `(..., T, E/2)`.",
             "Pair `i`'s angle is in column `i` of `cos` and `sin` (made for rotate-half, they hold it again at "
             "`i + E/2`): `c, s = cos[..., :E // 2], sin[..., :E // 2]`.",
             "Turn each pair, `x1 * c - x2 * s` and `x2 * c + x1 * s`, then put the two back side by side: "
             "`torch.stack([...], dim=-1).flatten(-2)`."),
            _rope_cases, ("lessons_src.rope.apply_rope_interleaved",),
        ),
        Exercise(
            "left_padded_positions", "Positions for a left-padded batch",
            Link("lessons/many-prompts.md", "a-padded-batch", "Many prompts in one batch: a padded batch"),
            ("Row `b` has `T - lengths[b]` padding slots before its prompt: its own number, not the longest row's "
             "or the first row's.",
             "The first real token of every row is at position 0: slot `T - lengths[b]` gets 0, the next slot 1. "
             "`torch.arange(T) - pad` with `pad` of shape `(B, 1)` does every row at once.",
             "The padding slots come out negative: `.clamp(min=0)` puts them at 0."),
            _left_pad_cases, ("lessons_src.lab.batching.padded_positions",),
        ),
        Exercise(
            "packed_step_positions", "Positions in a packed step",
            Link("lessons/continuous-batching.md", "one-step", "Serving attention, part 4: one step"),
            ("The row is not one sequence: each request's tokens are positioned in their own request, so the "
             "row's slot numbers mean nothing to RoPE.",
             "Request `i` holds `cached[i]` positions already: its `new[i]` tokens are at "
             "`cached[i] .. cached[i] + new[i] - 1`.",
             "`torch.arange(c, c + n)` for each request, then `torch.cat` them in the row's order."),
            _packed_step_cases, ("lessons_src.paged_cache.PagedView.positions",),
        ),
        Exercise(
            "draft_tree_mask", "The mask of a draft tree",
            Link("lessons/speculative-decoding.md", "a-tree-checked-in-one-pass",
                 "Guess, then check: a tree checked in one pass"),
            ("A draft sees its ancestors: follow the parents. Since a parent comes before its child, row `i` of "
             "the drafts' part is row `parents[i]` plus `i` itself: one loop over the drafts, in order.",
             "Every draft sees all `cached` keys before the drafts: put a block of `True` before the drafts' part.",
             "A draft's position is `cached` plus its depth, the number of its ancestors: siblings share one. "
             "`seen.sum(dim=1) - 1` counts them."),
            _draft_tree_cases, ("lessons_src.masks.draft_tree", "lessons_src.masks.tree_positions"),
        ),
        Exercise(
            "quantize_tile", "Quantize a tile",
            Link("lessons/quantized-cache.md", "a-code-and-a-scale",
                 "A cache in 8-bit and 4-bit numbers: a code and a scale"),
            ("Split the last dimension into tiles: `x.reshape(*x.shape[:-1], -1, tile)`; each tile's scale is its "
             "own largest magnitude, `.abs().amax(dim=-1, keepdim=True)`, over the largest code.",
             "The largest code is `2 ** (bits - 1) - 1`; the codes run from one below its negative to it.",
             "Divide by the scale, round with `torch.round`, clamp to the codes, multiply back by the scale and "
             "give the result `x`'s shape."),
            _tile_quant_cases,
            ("lessons_src.quantized_cache.quantize_tiles", "lessons_src.quantized_cache.dequantize_tiles"),
        ),
    )
}


def exercise(name: str) -> Exercise:
    """The exercise called ``name``; a ``ValueError`` lists them for any other name."""
    if name not in EXERCISES:
        raise ValueError(f"no exercise called {name!r}; the exercises are: {', '.join(EXERCISES)}")
    return EXERCISES[name]
