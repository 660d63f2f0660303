"""A mask is a function: the course's masks and score changes as FlexAttention ``mask_mod`` and ``score_mod``.

``torch.nn.attention.flex_attention`` takes a variant of attention as one or two small functions instead of a
tensor:

* a **mask_mod** ``(b, h, q_idx, kv_idx) -> bool`` says whether query ``q_idx`` of head ``h`` of sequence ``b`` may
  attend to key ``kv_idx`` (``True`` = may attend: this package's convention);
* a **score_mod** ``(score, b, h, q_idx, kv_idx) -> score`` changes one scaled score before the softmax.

From a mask_mod, ``create_block_mask`` (:func:`block_mask`) marks each tile of ``block_size`` queries by
``block_size`` keys as empty, full or partial; a compiled kernel skips the empty tiles and calls the mask_mod only
on the partial ones. :func:`block_sparsity` is the share of tiles skipped.

Every mask rule lives in :mod:`lessons_src.masks` (``causal()``, ``sliding_window(w)``, ``same_chunk(c)``,
``same_document(ids)``, ``prefix_lm(p)``, ``padding(lengths)``, composed with ``&`` and ``|``), written as a
function of positions; :func:`block_mask` turns one into FlexAttention's block mask, putting query ``q_idx`` at
position ``q_idx + S - T`` (the queries are the last ``T`` of ``S`` positions, bottom-right, as everywhere in this
package). This file defines no mask: only what is Flex's own, the block mask, its sparsity and
:func:`flex_attend`. The soft-cap of :mod:`lessons_src.score_mods` is here as a score_mod.

A learned sink (gpt-oss) is one more column of the softmax with no value, so it changes each query's normaliser:
no function of one score can add it. :func:`flex_attend` rescales FlexAttention's output by
``exp(lse - logaddexp(lse, sink))`` with the log-sum-exp it returns, as ``transformers`` does since its issue
41026 (a sink inside the score_mod) was fixed by pull request 41083.

On a CPU, torch 2.13's FlexAttention runs the forward pass only (inputs that need gradients raise
``NotImplementedError``), and without ``torch.compile`` it builds the whole ``(B, H, T, S)`` score matrix and
applies the functions to it with ``vmap``: the same answer, none of the savings. Even then it traces each call with
TorchDynamo (an eager backend), once per new function or shape, a fraction of a second to a second each; torch's
``_FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = True`` calls the same dense path without the trace. This file needs torch
2.9 or later (``AuxRequest``), ``masks.py`` and ``score_mods.py``.

References:
    Dong et al., "Flex Attention: A Programming Model for Generating Optimized Attention Kernels", 2024
    (arXiv:2412.05496).
    PyTorch documentation of ``torch.nn.attention.flex_attention``.
    huggingface/transformers issue 41026 and pull request 41083: the sink through the log-sum-exp.
"""

from __future__ import annotations

import math
import warnings
from typing import TYPE_CHECKING

import torch
from torch import Tensor
from torch.nn.attention.flex_attention import AuxRequest, BlockMask, create_block_mask, flex_attention

from ._checks import check_qkv, instance, positive, size
from ._checks import device as check_device
from .masks import MaskRule, mask_mod
from .score_mods import SoftCap, check_sinks

if TYPE_CHECKING:
    from collections.abc import Callable

    MaskMod = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]
    ScoreMod = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]

__all__ = ["block_mask", "block_sparsity", "flex_attend", "soft_cap_mod"]


def soft_cap_mod(cap: float) -> ScoreMod:
    """Gemma 2's soft-cap as a score_mod: ``cap * tanh(score / cap)`` (:func:`lessons_src.score_mods.soft_cap`).

    FlexAttention applies a score_mod before the mask, so a hidden key stays hidden, as the cap needs.

    Example:
        >>> soft_cap_mod(5.0)(torch.tensor(10.0), 0, 0, 0, 0)
        tensor(4.8201)
    """
    piece = SoftCap(cap)  # checked here, once: a traced score_mod must not branch on the cap

    def capped(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return piece(score)

    return capped


def block_mask(mask: MaskRule | MaskMod, T: int, S: int | None = None, *, B: int | None = None,
               H: int | None = None, block_size: int = 128, device: torch.device | str = "cpu") -> BlockMask:
    """``create_block_mask`` on ``device`` (its default is CUDA), without compiling: which tiles a kernel may skip.

    Args:
        mask: a :class:`lessons_src.masks.MaskRule` (``causal()``, ``sliding_window(8)``, ...), checked against the
            sizes and given its bottom-right offset by :func:`lessons_src.masks.mask_mod`; or a raw FlexAttention
            ``mask_mod`` over indices, ``(b, h, q_idx, kv_idx) -> bool``, used as it is.
        T, S: queries and keys (``S`` defaults to ``T``).
        B, H: batch and heads the mask depends on (``None``: the same for every one).
        block_size: tile side, queries and keys (FlexAttention's default is 128).
        device: where the queries live.

    Example:
        >>> from lessons_src.masks import causal
        >>> bm = block_mask(causal(), 4, block_size=2)
        >>> bm.kv_num_blocks.flatten().tolist(), bm.full_kv_num_blocks.flatten().tolist()  # partial, full tiles
        ([1, 1], [0, 1])
    """
    T = size("T", T)
    S = T if S is None else size("S", S)
    block = size("block_size", block_size)
    B, H = (None if B is None else size("B", B)), (None if H is None else size("H", H))
    device = check_device("device", device) or "cpu"
    if isinstance(mask, MaskRule):
        mask.check(1 if B is None else B, T, S, device)
        mask = mask_mod(mask, T, S)
    elif not callable(mask):
        raise TypeError(f"mask must be a MaskRule or a mask_mod function; got {type(mask).__name__}")
    return create_block_mask(mask, B, H, T, S, device=device, BLOCK_SIZE=block)


def block_sparsity(mask: BlockMask) -> float:
    """The share of ``(query block, key block)`` tiles that a compiled kernel skips: empty ones, over all of them.

    Counted over every batch entry and head the block mask holds; a tile is computed when it is partial or full.

    Example:
        >>> from lessons_src.masks import causal
        >>> block_sparsity(block_mask(causal(), 4, block_size=2))  # 1 of the 2 x 2 tiles is above the diagonal
        0.25
    """
    if not isinstance(mask, BlockMask):
        raise TypeError(f"block_sparsity needs mask, a BlockMask (from block_mask); got {type(mask).__name__}")
    T, S = mask.seq_lengths
    q_block, kv_block = mask.BLOCK_SIZE
    tiles = math.ceil(T / q_block) * math.ceil(S / kv_block) * mask.kv_num_blocks.shape[0] * mask.kv_num_blocks.shape[1]
    computed = int(mask.kv_num_blocks.sum())
    if mask.full_kv_num_blocks is not None:
        computed += int(mask.full_kv_num_blocks.sum())
    return 1.0 - computed / tiles


def flex_attend(q: Tensor, k: Tensor, v: Tensor, mask: BlockMask | None = None, *, score_mod: ScoreMod | None = None,
                sinks: Tensor | None = None, scale: float | None = None) -> Tensor:
    """FlexAttention with grouped heads and gpt-oss's learned sinks, applied through the log-sum-exp it returns.

    FlexAttention returns each query's ``lse = log sum_j exp(s_j)`` over its visible keys. A sink joins the
    normaliser, ``lse' = logaddexp(lse, sink_h)``, so each weight ``exp(s_j - lse)`` becomes ``exp(s_j - lse')``:
    the output is multiplied by ``exp(lse - lse')``. A query that sees no key has ``lse = -inf`` and keeps its zero.
    Forward only on a CPU (torch raises for inputs that need gradients there); eager unless you compile it.

    Args:
        q, k, v: queries, keys and values, ``H`` a multiple of ``K``.
        mask: a block mask from :func:`block_mask` (``None``: every key).
        score_mod: ``(score, b, h, q_idx, kv_idx) -> score``, on the scaled scores, before the mask.
        sinks: one logit per query head, in the queries' dtype (``None``: no sink).
        scale: the score multiplier, default ``1 / sqrt(E)``.

    Shapes:
        q ``(B, H, T, E)``, k ``(B, K, S, E)``, v ``(B, K, S, Ev)``, sinks ``(H,)``; output ``(B, H, T, Ev)``.

    Raises:
        ValueError, TypeError: if the sinks are not ``(H,)`` like ``q``.
        NotImplementedError: from torch, for inputs that need gradients on a CPU.

    Example:
        >>> q, kv = torch.randn(1, 4, 3, 8), torch.randn(1, 2, 3, 8)
        >>> from lessons_src.masks import causal
        >>> flex_attend(q, kv, kv, block_mask(causal(), 3), sinks=torch.zeros(4)).shape
        torch.Size([1, 4, 3, 8])
    """
    check_qkv(q, k, v)
    if mask is not None:
        instance("mask", mask, BlockMask, "a BlockMask from block_mask, or None")
    if score_mod is not None and not callable(score_mod):
        raise TypeError(f"score_mod must be a function (score, b, h, q_idx, kv_idx) -> score, or None; got "
                        f"{type(score_mod).__name__}")
    scale = None if scale is None else positive("scale", scale)
    if sinks is not None:
        check_sinks(sinks, q.shape[1], q.dtype, q.device)
    with warnings.catch_warnings():  # the eager path says once that it is not fused; the docstring says so
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        out, aux = flex_attention(q, k, v, score_mod=score_mod, block_mask=mask, scale=scale,
                                  enable_gqa=q.shape[1] != k.shape[1], return_aux=AuxRequest(lse=True))
    if sinks is None:
        return out  # (B, H, T, Ev)
    lse = aux.lse  # (B, H, T), natural log, float32
    assert lse is not None  # asked for with AuxRequest(lse=True)
    lse_all = torch.logaddexp(lse, sinks.view(1, -1, 1).to(lse.dtype))  # (B, H, T): the keys and the sink
    return (out * torch.exp(lse - lse_all)[..., None]).to(q.dtype)  # (B, H, T, Ev)
