"""A mask is a function: the course's masks and score changes as FlexAttention ``mask_mod`` and ``score_mod``.

``torch.nn.attention.flex_attention`` takes a variant of attention as one or two small functions instead of a
tensor:

* a **mask_mod** ``(b, h, q_idx, kv_idx) -> bool`` says whether query ``q_idx`` of head ``h`` of sequence ``b`` may
  attend to key ``kv_idx`` (``True`` = may attend: this package's convention);
* a **score_mod** ``(score, b, h, q_idx, kv_idx) -> score`` changes one scaled score before the softmax.

From a mask_mod, ``create_block_mask`` (:func:`block_mask`) marks each tile of ``block_size`` queries by
``block_size`` keys as empty, full or partial; a compiled kernel skips the empty tiles and calls the mask_mod only
on the partial ones. :func:`block_sparsity` is the share of tiles skipped.

Each mask of :mod:`lessons_src.masks` is here as a mask_mod, and each score change of
:mod:`lessons_src.score_mods` as a score_mod or, for the learned sinks, as what :func:`flex_attend` does with the
log-sum-exp FlexAttention returns. Query ``q_idx`` is at position ``q_idx + S - T`` (the queries are the last
``T`` of ``S`` positions, bottom-right, as everywhere in this package)::

    mask_mod            keeps key j for the query at p = q_idx + S - T when
    causal_mod          j <= p
    padding_mod         j < lengths[b]
    window_mod          j <= p and (j > p - window or j < sinks)
    chunk_mod           j <= p and j // chunk == p // chunk
    document_mod        ids[b, j] == ids[b, p]            (with causal_mod: causal within each document)
    prefix_lm_mod       j <= p or j < prefix[b]

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

from .masks import _length, check_chunk, check_window  # _length: an int size, or an error naming it
from .score_mods import check_sinks, check_softcap

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    MaskMod = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]
    ScoreMod = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]

__all__ = [
    "block_mask",
    "block_sparsity",
    "causal_mod",
    "chunk_mod",
    "document_mod",
    "flex_attend",
    "padding_mod",
    "prefix_lm_mod",
    "soft_cap_mod",
    "window_mod",
]


def _offset(T: int, S: int | None) -> tuple[int, int]:
    """``(S, S - T)``: query ``q_idx`` is at position ``q_idx + S - T``."""
    T = _length("T", T, 1)
    S = T if S is None else _length("S", S, 1)
    return S, S - T


def causal_mod(T: int, S: int | None = None) -> MaskMod:
    """The bottom-right causal mask as a mask_mod: key ``j`` is kept when ``j <= q_idx + S - T``.

    FlexAttention's own examples write ``q_idx >= kv_idx``, which is top-left: right only when ``T == S``.

    Example:
        >>> mod = causal_mod(2, 3)
        >>> mod(0, 0, torch.tensor(0), torch.arange(3)).tolist()  # query 0 is at position 1
        [True, True, False]
    """
    _, offset = _offset(T, S)

    def causal(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return kv_idx <= q_idx + offset

    return causal


def padding_mod(lengths: Tensor) -> MaskMod:
    """Padding as a mask_mod: sequence ``b`` keeps only its first ``lengths[b]`` keys (:func:`masks.padding_mask`).

    Example:
        >>> padding_mod(torch.tensor([2, 3]))(1, 0, 0, torch.arange(4)).tolist()
        [True, True, True, False]
    """
    if not isinstance(lengths, Tensor) or lengths.ndim != 1 or lengths.dtype.is_floating_point \
            or lengths.dtype == torch.bool:
        raise TypeError(f"lengths must be a 1-D integer tensor, one length per sequence; got {lengths!r}")

    def padding(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return kv_idx < lengths[b]

    return padding


def window_mod(T: int, S: int | None = None, *, window: int, sinks: int = 0) -> MaskMod:
    """A sliding window as a mask_mod: the last ``window`` positions up to the query's own, plus ``sinks`` first keys.

    The Long-contexts lessons' sink tokens (StreamingLLM): the first ``sinks`` keys stay visible to every query,
    causally, as in :func:`lessons_src.masks.causal_mask` with ``window`` and ``sinks``.

    Example:
        >>> window_mod(5, window=2, sinks=1)(0, 0, torch.tensor(4), torch.arange(5)).tolist()
        [True, False, False, True, True]
    """
    _, offset = _offset(T, S)
    w = check_window(window)
    if w is None:
        raise TypeError("window_mod needs a window, an int of at least 1; got None")
    n_sinks = _length("sinks", sinks)

    def sliding_window(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        p = q_idx + offset
        return (kv_idx <= p) & ((kv_idx > p - w) | (kv_idx < n_sinks))

    return sliding_window


def chunk_mod(T: int, S: int | None = None, *, chunk: int) -> MaskMod:
    """Chunked attention (Llama 4) as a mask_mod: causal, and only within the query's chunk of ``chunk`` positions.

    Example:
        >>> chunk_mod(5, chunk=2)(0, 0, torch.tensor(3), torch.arange(5)).tolist()
        [False, False, True, True, False]
    """
    _, offset = _offset(T, S)
    c = check_chunk(chunk)
    if c is None:
        raise TypeError("chunk_mod needs a chunk, an int of at least 1; got None")

    def chunked(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        p = q_idx + offset
        return (kv_idx <= p) & (kv_idx // c == p // c)

    return chunked


def document_mod(documents: Tensor, T: int | None = None) -> MaskMod:
    """Packed documents as a mask_mod: a query sees only the keys of its own document (not causal by itself).

    ``documents`` holds the document id of each of the ``S`` positions, ``(S,)`` or ``(B, S)``; the queries are the
    last ``T``. Combine it with :func:`causal_mod` (``and_masks``) for causal attention within each document.

    Example:
        >>> document_mod(torch.tensor([0, 0, 1]))(0, 0, torch.tensor(2), torch.arange(3)).tolist()
        [False, False, True]
    """
    if not isinstance(documents, Tensor) or documents.dtype.is_floating_point or documents.dtype == torch.bool \
            or documents.ndim not in (1, 2) or documents.shape[-1] == 0:
        raise TypeError(f"documents must be integer ids, (S,) or (B, S) with S >= 1; got {documents!r}")
    S = documents.shape[-1]
    _, offset = _offset(S if T is None else T, S)
    ids = documents if documents.ndim == 2 else documents[None]  # (B or 1, S)
    one_row = ids.shape[0] == 1

    def same_document(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        row = 0 if one_row else b
        return ids[row, kv_idx] == ids[row, q_idx + offset]

    return same_document


def prefix_lm_mod(T: int, S: int | None = None, *, prefix: int | Tensor | Sequence[int],
                  device: torch.device | str | None = None) -> MaskMod:
    """Prefix LM as a mask_mod: key ``j`` is kept when ``j <= q_idx + S - T`` or ``j < prefix`` (per sequence).

    Example:
        >>> prefix_lm_mod(3, prefix=2)(0, 0, torch.tensor(0), torch.arange(3)).tolist()
        [True, True, False]
    """
    S, offset = _offset(T, S)
    if not isinstance(prefix, Tensor) and hasattr(prefix, "__index__") and not 0 <= _length("prefix", prefix) <= S:
        raise ValueError(f"prefix={prefix} must be between 0 and S={S}")
    lengths = torch.as_tensor(prefix, device=device).reshape(-1)  # (1,) or (B,): their values are not read here
    if lengths.dtype.is_floating_point or lengths.dtype == torch.bool or lengths.numel() == 0:
        raise TypeError(f"prefix must be an int or one int per sequence; got {prefix!r}")
    one = lengths.numel() == 1

    def prefix_lm(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return (kv_idx <= q_idx + offset) | (kv_idx < lengths[0 if one else b])

    return prefix_lm


def soft_cap_mod(cap: float) -> ScoreMod:
    """Gemma 2's soft-cap as a score_mod: ``cap * tanh(score / cap)`` (:func:`lessons_src.score_mods.soft_cap`).

    FlexAttention applies a score_mod before the mask, so a hidden key stays hidden, as the cap needs.

    Example:
        >>> soft_cap_mod(5.0)(torch.tensor(10.0), 0, 0, 0, 0)
        tensor(4.8201)
    """
    c = check_softcap(cap)
    if c is None:
        raise TypeError("soft_cap_mod needs a cap, a positive number; got None")

    def soft_cap(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return c * torch.tanh(score / c)

    return soft_cap


def block_mask(mask_mod: MaskMod, T: int, S: int | None = None, *, B: int | None = None, H: int | None = None,
               block_size: int = 128, device: torch.device | str = "cpu") -> BlockMask:
    """``create_block_mask`` on ``device`` (its default is CUDA), without compiling: which tiles a kernel may skip.

    Args:
        mask_mod: ``(b, h, q_idx, kv_idx) -> bool``.
        T, S: queries and keys (``S`` defaults to ``T``).
        B, H: batch and heads the mask_mod depends on (``None``: the same for every one).
        block_size: tile side, queries and keys (FlexAttention's default is 128).
        device: where the queries live.

    Example:
        >>> bm = block_mask(causal_mod(4), 4, block_size=2)
        >>> bm.kv_num_blocks.flatten().tolist(), bm.full_kv_num_blocks.flatten().tolist()  # partial, full tiles
        ([1, 1], [0, 1])
    """
    S = _length("T", T, 1) if S is None else _length("S", S, 1)
    return create_block_mask(mask_mod, B, H, T, S, device=device, BLOCK_SIZE=_length("block_size", block_size, 1))


def block_sparsity(mask: BlockMask) -> float:
    """The share of ``(query block, key block)`` tiles that a compiled kernel skips: empty ones, over all of them.

    Counted over every batch entry and head the block mask holds; a tile is computed when it is partial or full.

    Example:
        >>> block_sparsity(block_mask(causal_mod(4), 4, block_size=2))  # 1 of the 2 x 2 tiles is above the diagonal
        0.25
    """
    if not isinstance(mask, BlockMask):
        raise TypeError(f"block_sparsity needs a BlockMask (from block_mask); got {type(mask).__name__}")
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
        >>> flex_attend(q, kv, kv, block_mask(causal_mod(3), 3), sinks=torch.zeros(4)).shape
        torch.Size([1, 4, 3, 8])
    """
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
