"""Greedy decoding of the text model with its KV caches, plainly and with prompt-lookup speculation.

:func:`greedy_cached` writes one token per forward pass. :func:`speculative_greedy` writes the same tokens with
fewer passes: before each pass it drafts chains by prompt lookup (:func:`lessons_src.speculative.prompt_lookup`),
merges them into a tree, checks the whole tree in the one pass (the tree mask of
:func:`lessons_src.masks.draft_tree`, positions by depth), keeps the longest path the model agrees with, and
rolls each layer's cache back to it (:class:`lessons_src.speculative.DraftCache`). The two agree token for token
(the tests check it on every prompt they use); the bench compares their speed.

Both keep a token the model has written but not yet read (the *pending* token): it is the root of the next
pass's tree, so a pass reads it and the drafts after it at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from .._checks import size
from ..masks import draft_tree, mask_tensor, tree_positions
from ..speculative import DraftCache, accept_greedy, prompt_lookup, tree_from_drafts
from .text_model import TextGPT

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from ..kv_cache import LayerCache

__all__ = ["SpeculationStats", "draft_tree_figure", "greedy_cached", "speculative_greedy"]


@dataclass
class SpeculationStats:
    """What a decode did: forward passes after the prompt's, and tokens written per pass (drafts kept plus one)."""

    passes: int = 0
    written: list[int] = field(default_factory=list)  # tokens each verification pass wrote
    nodes: list[int] = field(default_factory=list)  # draft tokens each pass checked

    @property
    def tokens_per_pass(self) -> float:
        """Tokens written per verification pass (1.0: no draft ever kept)."""
        return sum(self.written) / max(len(self.written), 1)


def _check(model: TextGPT, prompt: Tensor, new_tokens: int) -> tuple[Tensor, int]:
    if not isinstance(model, TextGPT):
        raise TypeError(f"model must be a TextGPT; got {type(model).__name__}")
    if not isinstance(prompt, Tensor) or prompt.ndim != 1 or prompt.dtype != torch.long or prompt.numel() == 0:
        raise ValueError("prompt must be a non-empty 1-D int64 tensor of token ids")
    new_tokens = size("new_tokens", new_tokens)
    if prompt.numel() + new_tokens > model.cfg.max_len + 1:
        raise ValueError(f"{prompt.numel()} prompt tokens and new_tokens={new_tokens} go past the context of "
                         f"{model.cfg.max_len} positions; ask for at most {model.cfg.max_len + 1 - prompt.numel()}")
    return prompt, new_tokens


@torch.no_grad()
def greedy_cached(model: TextGPT, prompt: Tensor, new_tokens: int) -> Tensor:
    """``new_tokens`` greedy tokens after ``prompt``: a prefill, then one token per pass with the KV caches.

    Shapes:
        prompt: ``(N,)``; returns ``(new_tokens,)``.
    """
    prompt, new_tokens = _check(model, prompt, new_tokens)
    caches = model.make_caches(batch_size=1)
    logits, _ = model(prompt[None], caches=caches)  # (1, N, V)
    out = [int(logits[0, -1].argmax())]
    while len(out) < new_tokens:
        logits, _ = model(torch.tensor([[out[-1]]], device=prompt.device), caches=caches)  # (1, 1, V)
        out.append(int(logits[0, -1].argmax()))
    return torch.tensor(out)


@torch.no_grad()
def speculative_greedy(model: TextGPT, prompt: Tensor, new_tokens: int, *, ngram: int = 3, draft_len: int = 8,
                       max_drafts: int = 1, caches: list[LayerCache] | None = None) -> tuple[Tensor, SpeculationStats]:
    """The tokens of :func:`greedy_cached`, written with prompt-lookup drafts checked one tree per pass.

    Args:
        model: the text model.
        prompt: the token ids to continue.
        new_tokens: tokens to write.
        ngram, draft_len: as :func:`lessons_src.speculative.prompt_lookup`.
        max_drafts: chains per pass: 1 checks a chain, more a tree of distinct matches.
        caches: one empty cache per layer, of any kind (a ``KVCache``, a sequence of a page pool); ``None``:
            ``model.make_caches(1)``.

    Returns:
        The tokens ``(new_tokens,)`` and the :class:`SpeculationStats`.
    """
    prompt, new_tokens = _check(model, prompt, new_tokens)
    layers = [DraftCache(c) for c in (model.make_caches(batch_size=1) if caches is None else caches)]
    logits, _ = model(prompt[None], caches=layers)  # (1, N, V)
    ids, out, stats = prompt.tolist(), [int(logits[0, -1].argmax())], SpeculationStats()
    while len(out) < new_tokens:
        start = layers[0].length
        room = min(model.cfg.max_len - start - 1, new_tokens - len(out))  # drafts that fit, and are wanted
        drafts = [] if room < 1 else prompt_lookup(ids + out, ngram=ngram, draft_len=min(draft_len, room),
                                                   max_drafts=max_drafts)
        while drafts and sum(map(len, drafts)) >= model.cfg.max_len - start:  # the tree must fit the context
            drafts.pop()
        tokens, parents = tree_from_drafts(out[-1], drafts)  # node 0: the pending token
        n, x = len(tokens), torch.tensor([tokens], device=prompt.device)  # (1, n)
        if parents == list(range(-1, n - 1)):  # a chain: its tree mask is the causal mask, its positions in order
            logits, _ = model(x, caches=layers)  # (1, n, V)
        else:  # the tree's mask, built once for every layer, and positions by depth
            keep = mask_tensor(draft_tree(parents, start=start), n, start + n, device=prompt.device)  # (1, 1, n, S)
            at = tree_positions(parents, start, device=prompt.device)  # (n,)
            logits, _ = model(x, caches=layers, positions=at[None], attn_mask=keep)  # (1, n, V)
        path, after = accept_greedy(tokens, parents, logits[0])
        for c in layers:
            c.keep(path)  # the pending token and the kept drafts stay cached
        written = [tokens[i] for i in path[1:]] + [after]
        out += written
        stats.passes += 1
        stats.written.append(len(written))
        stats.nodes.append(len(tokens) - 1)
    return torch.tensor(out[:new_tokens]), stats


def draft_tree_figure(context: str, *, ngram: int = 3, draft_len: int = 2, max_drafts: int = 3,
                      size: tuple[float, float], font: float, stacked: bool = False) -> Figure:
    """The draft tree prompt lookup makes from ``context`` (its last character the root), and the tree's mask.

    Left panel: the tree, one node per draft token (its index and character), each joined to its parent, the root
    (the last character of ``context``) at depth 0. Right panel: each node's queries (down) by keys (across): the
    first column stands for every cached key, the others for the nodes; blue where the node may attend
    (:func:`lessons_src.masks.draft_tree`).

    Args:
        context: the text so far; prompt lookup's matches come from it (:func:`lessons_src.speculative.prompt_lookup`).
        ngram, draft_len, max_drafts: as ``prompt_lookup``.
        size: the figure's size in inches; font: its type size in points.
        stacked: the panels one above the other (a phone's column), not side by side.
    """
    from ..masks import tree_ancestors
    from .plotting import figure

    ids = list(context.encode())
    tokens, parents = tree_from_drafts(ids[-1], prompt_lookup(ids, ngram=ngram, draft_len=draft_len,
                                                               max_drafts=max_drafts))
    n, seen = len(tokens), tree_ancestors(parents)
    names = [f"{i}:{chr(t)}" for i, t in enumerate(tokens)]
    children: dict[int, list[int]] = {}
    for i, p in enumerate(parents):
        children.setdefault(p, []).append(i)
    row: dict[int, float] = {}

    def place(node: int, top: float) -> float:  # leaves one row each, in order; a parent beside its first child
        kids = children.get(node, [])
        for kid in kids:
            top = place(kid, top)
        row[node] = row[kids[0]] if kids else top
        return top + (0 if kids else 1)

    place(0, 0.0)
    fig = figure(figsize=size)
    left, right = fig.subplots(2, 1, height_ratios=[max(row.values()) + 1, n]) if stacked else fig.subplots(1, 2)
    depth = seen.sum(dim=1) - 1
    for i, p in enumerate(parents):
        if p >= 0:
            left.plot([int(depth[p]), int(depth[i])], [row[p], row[i]], color="0.6", zorder=1)
    for i in range(n):
        left.text(int(depth[i]), row[i], names[i], ha="center", va="center", fontsize=font, zorder=2,
                  bbox={"boxstyle": "round", "facecolor": "#2c6bb0", "edgecolor": "none"}, color="white")
    left.set_xlim(-0.6, int(depth.max()) + 0.6)
    left.set_ylim(max(row.values()) + 0.6, -0.6)
    left.set_xticks(range(int(depth.max()) + 1))
    left.set_yticks([])
    left.set_xlabel("depth (position after the cache)", fontsize=font)
    left.set_title("draft tree", fontsize=font)
    keep = torch.cat([torch.ones(n, 1, dtype=torch.bool), seen], dim=1)  # (n, 1 + n): the cache, then the nodes
    blue, blank = torch.tensor([0.17, 0.42, 0.69]), torch.tensor([0.96, 0.96, 0.96])
    right.imshow(torch.where(keep[..., None], blue, blank).numpy(), aspect="equal")
    right.set_xticks(range(n + 1), labels=["cache", *[str(i) for i in range(n)]])
    right.set_yticks(range(n), labels=names)
    right.set_xlabel("key", fontsize=font)
    right.set_title("what each node sees", fontsize=font)
    right.tick_params(labelsize=font, length=0)
    left.tick_params(labelsize=font, length=0)
    right.set_xticks([x - 0.5 for x in range(1, n + 1)], minor=True)
    right.set_yticks([y - 0.5 for y in range(1, n)], minor=True)
    right.grid(which="minor", color="white", linewidth=1.5)
    right.tick_params(which="minor", length=0)
    for ax in (left, right):
        for side in ax.spines.values():
            side.set_visible(False)
    return fig
