"""Many prompts in one batch: left padding with positions per row, chunked prefill, packed documents.

A decoder serves prompts of different lengths together by padding them to one length. **Left padding** puts the
padding before each prompt, so every row's last token sits in the same slot and the next token is written to
the same cache slot for every row: one :class:`~lessons_src.kv_cache.KVCache` length serves the whole batch.
Two things must then be given per row, at every step, prompt and decoded tokens alike:

* the **positions** of each row, counted from its first real token (:func:`padded_positions`): RoPE rotates by
  position, and a row that counted its padding would see its prompt shifted;
* the **padding mask** with the causal one (:func:`lessons_src.masks.key_mask` of the real tokens, cached slots
  included): a row whose queries could see its padding slots would attend to them.

:func:`generate_batch` decodes a batch so, greedily; :func:`generate_alone` decodes one prompt by full passes,
without a cache, as the reference each row must equal. The two classic wrong variants are kept by name
(:data:`MISTAKES`) so that a lesson and the tests can show each one failing.

**Chunked prefill** puts a long prompt into the cache ``chunk`` tokens at a time (``generate_batch(chunk=C)``):
each chunk's queries see the cached tokens and, causally, their own, so the result equals one prefill.
**Packing** lays several documents end to end in one row without padding (:func:`pack`): ``cu_seqlens``, the
cumulative lengths FlashAttention's variable-length kernels take, say where each starts; each document sees only
itself (:func:`lessons_src.masks.same_document` of :func:`packed_documents`) and its positions restart at 0
(:func:`packed_positions`).

The model is one with :class:`~lessons_src.lab.text_model.TextGPT`'s cached interface: ``model(tokens,
caches=, positions=, attn_mask=)`` returning ``(logits, _)``, and ``model.make_caches(batch_size, max_len)``.

References:
    Hugging Face ``transformers``, ``generate`` with a left-padded ``attention_mask``: positions from
    ``attention_mask.cumsum(-1) - 1``.
    Dao, "FlashAttention-2", 2023 (arXiv:2307.08691), and its ``flash_attn_varlen_func``: ``cu_seqlens``.
    Krell et al., "Efficient Sequence Packing without Cross-contamination", 2021 (arXiv:2107.02027).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, Protocol

import torch
from torch import Tensor

from .._checks import choice, integer, size, tensor
from ..masks import key_mask

if TYPE_CHECKING:
    from collections.abc import Sequence

    from matplotlib.figure import Figure

    from ..kv_cache import KVCache, LayerCache
    from ..masks import MaskLike

__all__ = [
    "MISTAKES",
    "BatchDecode",
    "CachedDecoder",
    "generate_alone",
    "generate_batch",
    "left_pad",
    "pack",
    "packed_documents",
    "packed_positions",
    "padded_batch_figure",
    "padded_positions",
]

MISTAKES = {
    "positions from the padding": "every row's positions counted from slot 0, its padding included",
    "mask dropped after the prefill": "the padding mask given to the prompt's step only, not to the decoded tokens",
}
"""The two classic mistakes of a left-padded batch, by name, with what each does."""


class CachedDecoder(Protocol):
    """What :func:`generate_batch` needs of a model (:class:`~lessons_src.lab.text_model.TextGPT` has it)."""

    def __call__(self, tokens: Tensor, *, caches: Sequence[LayerCache] | None = ..., positions: Tensor | None = ...,
                 attn_mask: MaskLike = ...) -> tuple[Tensor, Tensor | None]: ...

    def make_caches(self, batch_size: int, max_len: int | None = ...) -> list[KVCache]: ...


class BatchDecode(NamedTuple):
    """What :func:`generate_batch` and :func:`generate_alone` return.

    Attributes:
        tokens: the greedy tokens, ``(B, N)``.
        logits: the logits each was chosen from, ``(B, N, V)``.
    """

    tokens: Tensor
    logits: Tensor


def _prompts(prompts: Sequence[Tensor]) -> list[Tensor]:
    if isinstance(prompts, Tensor) or not isinstance(prompts, list | tuple) or not prompts:
        raise TypeError(f"prompts must be a non-empty list of 1-D token tensors; got {type(prompts).__name__}")
    for i, p in enumerate(prompts):
        tensor(f"prompts[{i}]", p, ndim=1, shape="(L,) of token ids", dtype="integer")
        if p.numel() == 0:
            raise ValueError(f"prompts[{i}] is empty; every prompt needs at least one token")
    return list(prompts)


def left_pad(prompts: Sequence[Tensor], *, pad_id: int = 0) -> tuple[Tensor, Tensor]:
    """Prompts of different lengths as one batch, each padded on the left to the longest.

    Args:
        prompts: ``B`` token tensors ``(L_b,)``.
        pad_id: the token written in the padding slots (never attended to: any id will do).

    Returns:
        ``(tokens, keep)``: ``tokens`` ``(B, T)`` with ``T = max L_b``, and ``keep`` ``(B, T)`` bool, True on the
        real tokens (Hugging Face's ``attention_mask``).

    Example:
        >>> tokens, keep = left_pad([torch.tensor([7, 8]), torch.tensor([1, 2, 3])])
        >>> tokens.tolist(), keep.int().tolist()
        ([[0, 7, 8], [1, 2, 3]], [[0, 1, 1], [1, 1, 1]])
    """
    prompts = _prompts(prompts)
    pad_id = integer("pad_id", pad_id)
    T = max(len(p) for p in prompts)
    tokens = torch.full((len(prompts), T), pad_id, dtype=prompts[0].dtype, device=prompts[0].device)
    keep = torch.zeros(len(prompts), T, dtype=torch.bool, device=prompts[0].device)
    for b, p in enumerate(prompts):
        tokens[b, T - len(p):], keep[b, T - len(p):] = p, True
    return tokens, keep


def padded_positions(keep: Tensor) -> Tensor:
    """Each slot's position in its own row: how many real tokens come before it (``keep.cumsum(-1) - 1``).

    A padding slot before the first real token gets 0 (any position will do: the padding mask hides it).

    Shapes:
        keep: ``(B, S)`` bool; returns ``(B, S)`` int64.

    Example:
        >>> padded_positions(torch.tensor([[False, False, True, True], [True, True, True, True]])).tolist()
        [[0, 0, 0, 1], [0, 1, 2, 3]]
    """
    tensor("keep", keep, ndim=2, shape="(B, S), True on the real tokens", dtype="bool")
    return (keep.long().cumsum(-1) - 1).clamp(min=0)  # (B, S)


@torch.no_grad()
def generate_batch(model: CachedDecoder, prompts: Sequence[Tensor], new_tokens: int, *, chunk: int | None = None,
                   mistake: str | None = None) -> BatchDecode:
    """Greedy decoding of several prompts in one left-padded batch, with one KV cache per layer.

    The prompts are left padded (:func:`left_pad`) and prefilled, in chunks of ``chunk`` tokens if given; then
    each step feeds every row's last token. Every call gets each row's positions (:func:`padded_positions`,
    continued by one per step) and the mask of its real keys (:func:`lessons_src.masks.key_mask`), with the
    causal rule, so each row's tokens and logits are those of its prompt decoded alone (:func:`generate_alone`).

    Args:
        model: a decoder with a cached interface (:class:`CachedDecoder`).
        prompts: ``B`` token tensors ``(L_b,)``.
        new_tokens: tokens to decode per row (at least 1).
        chunk: prefill the padded prompts ``chunk`` tokens at a time (``None``: all at once).
        mistake: ``None``, or a name in :data:`MISTAKES` to make that mistake (to see what it breaks).

    Returns:
        A :class:`BatchDecode`: tokens ``(B, new_tokens)`` and their logits ``(B, new_tokens, V)``.

    Example:
        >>> from lessons_src.lab.text_model import TextConfig, TextGPT, encode
        >>> model = TextGPT(TextConfig(d_model=16, num_heads=2, max_len=16, d_ff=32)).eval()
        >>> out = generate_batch(model, [encode("ab"), encode("hello")], 3)
        >>> torch.equal(out.tokens[0], generate_alone(model, encode("ab"), 3).tokens[0])
        True
    """
    new_tokens = size("new_tokens", new_tokens, hint="tokens to decode per row")
    if chunk is not None:
        chunk = size("chunk", chunk, hint="prompt tokens per prefill step")
    if mistake is not None:
        choice("mistake", mistake, MISTAKES)
    tokens, keep = left_pad(prompts)
    B, T = tokens.shape
    caches = model.make_caches(B, T + new_tokens - 1)
    from_padding = mistake == "positions from the padding"
    pos = torch.arange(T, device=tokens.device).expand(B, T) if from_padding else padded_positions(keep)  # (B, T)
    step = T if chunk is None else chunk
    for a in range(0, T, step):  # the prefill, one chunk at a time
        b = min(a + step, T)
        logits, _ = model(tokens[:, a:b], caches=caches, positions=pos[:, a:b], attn_mask=key_mask(keep[:, :b]))
    out, chosen = [], []
    for n in range(new_tokens):
        last = logits[:, -1]  # (B, V)
        out.append(last.argmax(-1))  # (B,)
        chosen.append(last)
        if n == new_tokens - 1:
            break
        keep = torch.cat([keep, keep.new_ones(B, 1)], dim=1)  # (B, S): the new token is real
        pos = pos[:, -1:] + 1  # (B, 1): one after each row's last position
        mask = None if mistake == "mask dropped after the prefill" else key_mask(keep)
        logits, _ = model(out[-1][:, None], caches=caches, positions=pos, attn_mask=mask)
    return BatchDecode(torch.stack(out, dim=1), torch.stack(chosen, dim=1))


@torch.no_grad()
def generate_alone(model: CachedDecoder, prompt: Tensor, new_tokens: int) -> BatchDecode:
    """Greedy decoding of one prompt, each step a full pass over everything so far (no cache, no padding).

    The reference a batched decode's row must equal.

    Returns:
        A :class:`BatchDecode` with one row: tokens ``(1, new_tokens)``, logits ``(1, new_tokens, V)``.
    """
    (prompt,) = _prompts([prompt])
    new_tokens = size("new_tokens", new_tokens, hint="tokens to decode")
    ids, out, chosen = prompt, [], []
    for _ in range(new_tokens):
        last = model(ids[None])[0][0, -1]  # (V,)
        out.append(last.argmax())
        chosen.append(last)
        ids = torch.cat([ids, out[-1][None]])
    return BatchDecode(torch.stack(out)[None], torch.stack(chosen)[None])


def pack(prompts: Sequence[Tensor]) -> tuple[Tensor, Tensor]:
    """Documents end to end in one row, without padding, and where each starts.

    Returns:
        ``(tokens, cu_seqlens)``: ``tokens`` ``(1, N)`` with ``N`` the total length, and ``cu_seqlens`` ``(D + 1,)``
        int32, the cumulative lengths ``0, L_0, L_0 + L_1, .., N`` (FlashAttention's varlen layout): document
        ``d`` is ``tokens[0, cu_seqlens[d]:cu_seqlens[d + 1]]``.

    Example:
        >>> tokens, cu = pack([torch.tensor([5, 6, 7]), torch.tensor([8, 9])])
        >>> tokens.tolist(), cu.tolist()
        ([[5, 6, 7, 8, 9]], [0, 3, 5])
    """
    prompts = _prompts(prompts)
    lengths = torch.tensor([0] + [len(p) for p in prompts], device=prompts[0].device)
    return torch.cat(prompts)[None], lengths.cumsum(0).to(torch.int32)


def _cu(cu_seqlens: Tensor) -> Tensor:
    tensor("cu_seqlens", cu_seqlens, ndim=1, shape="(D + 1,), 0 then each document's end", dtype="integer")
    steps = cu_seqlens.diff()
    if len(cu_seqlens) < 2 or int(cu_seqlens[0]) != 0 or bool((steps < 1).any()):
        raise ValueError(f"cu_seqlens must start at 0 and grow by at least 1 per document; got {cu_seqlens.tolist()}")
    return steps


def packed_documents(cu_seqlens: Tensor) -> Tensor:
    """The document of each packed position: ``d`` on ``cu_seqlens[d] .. cu_seqlens[d + 1] - 1``.

    Shapes:
        cu_seqlens: ``(D + 1,)``; returns ``(N,)`` int64, for :func:`lessons_src.masks.same_document`.

    Example:
        >>> packed_documents(torch.tensor([0, 3, 5])).tolist()
        [0, 0, 0, 1, 1]
    """
    steps = _cu(cu_seqlens)
    return torch.repeat_interleave(torch.arange(len(steps), device=cu_seqlens.device), steps)  # (N,)


def packed_positions(cu_seqlens: Tensor) -> Tensor:
    """Each packed position's place in its own document: 0 at each document's start.

    Shapes:
        cu_seqlens: ``(D + 1,)``; returns ``(N,)`` int64.

    Example:
        >>> packed_positions(torch.tensor([0, 3, 5])).tolist()
        [0, 1, 2, 0, 1]
    """
    steps = _cu(cu_seqlens)
    N = int(cu_seqlens[-1])
    starts = torch.repeat_interleave(cu_seqlens[:-1].long(), steps)  # (N,): each position's document start
    return torch.arange(N, device=cu_seqlens.device) - starts  # (N,)


def padded_batch_figure(lengths: Sequence[int], *, row: int = 0, size: tuple[float, float], font: float,
                        stacked: bool = False) -> Figure:
    """A left-padded batch as the model must see it: each slot's position, and one row's mask with the causal rule.

    Left panel: ``B`` rows of ``T = max(lengths)`` slots, padding grey, each real token labelled with its position
    (:func:`padded_positions`). Right panel: row ``row``'s queries (down) by keys (across), blue where the causal
    rule and the row's padding mask both let the query see the key (:func:`lessons_src.masks.key_mask`), grey
    where the key is padding; a padding query sees nothing.

    Args:
        lengths: each prompt's length.
        row: the row whose mask is drawn.
        size: the figure's size in inches; font: its type size in points.
        stacked: the panels one above the other (a phone's column), not side by side.
    """
    from ..masks import causal, mask_tensor
    from .plotting import figure

    tokens, keep = left_pad([torch.zeros(n, dtype=torch.long) for n in lengths])
    B, T = tokens.shape
    pos = padded_positions(keep)
    visible = mask_tensor(causal() & key_mask(keep), T, B=B)[row, 0]  # (T, T)
    blue, grey, blank = (torch.tensor(c) for c in ([0.17, 0.42, 0.69], [0.8, 0.8, 0.8], [0.96, 0.96, 0.96]))  # RGB
    slots = torch.where(keep[..., None], blue, grey)  # (B, T, 3)
    seen = torch.where(visible[..., None], blue, torch.where(keep[row][None, :, None], blank, grey))  # (T, T, 3)
    fig = figure(figsize=size)
    left, right = fig.subplots(2, 1, height_ratios=[B, T]) if stacked else fig.subplots(1, 2)
    left.imshow(slots.numpy(), aspect="equal")
    for b in range(B):
        for t in range(T):
            if keep[b, t]:
                left.text(t, b, str(int(pos[b, t])), ha="center", va="center", fontsize=font, color="white")
    left.set_yticks(range(B), labels=[f"row {b}" for b in range(B)])
    left.set_xlabel("slot", fontsize=font)
    left.set_title("positions (grey: padding)", fontsize=font)
    right.imshow(seen.numpy(), aspect="equal")
    right.set_yticks(range(T))
    right.set_xlabel("key slot", fontsize=font)
    right.set_ylabel("query slot", fontsize=font)
    right.set_title(f"row {row}: what each query sees", fontsize=font)
    for ax, rows in ((left, B), (right, T)):
        ax.set_xticks(range(T))
        ax.tick_params(labelsize=font, length=0)
        ax.set_xticks([x - 0.5 for x in range(1, T)], minor=True)
        ax.set_yticks([y - 0.5 for y in range(1, rows)], minor=True)
        ax.grid(which="minor", color="white", linewidth=1.5)
        ax.tick_params(which="minor", length=0)
        for side in ax.spines.values():
            side.set_visible(False)
    return fig
