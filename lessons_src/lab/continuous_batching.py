"""Continuous batching: requests join and leave a running batch between steps, their caches in one page pool.

A padded static batch (:mod:`lessons_src.lab.batching`) starts its prompts together and keeps every row until the
longest is done, computing padding all the while. A serving engine instead runs a loop of **steps**, each one
forward pass over a packed row of tokens from several requests, and between steps it lets requests arrive and
leave:

* a request that has arrived starts when the pool can hold it (here: its prompt and every token it may write);
* each step takes one token of every request that is **decoding** (its last output), then fills what is left of
  its token budget (``max_batch_tokens``) with **prefill chunks** of requests still reading their prompts, so a long
  prompt is spread over several steps beside other requests' decoding;
* a request whose row ends its prompt, or that is decoding, takes its next token (greedy) from that row's logits;
  one that has written all its tokens leaves, and its pages go back to the pool.

Each request's keys and values live in pages of one :class:`~lessons_src.paged_cache.PagedKVCache` per layer,
which the model reads through :class:`~lessons_src.paged_cache.PagedView`, a cache like any other. A prompt that
begins with whole pages of tokens another request already holds in its cache starts on those pages, shared
(:meth:`~lessons_src.paged_cache.PagedKVCache.fork`), and prefills only the rest.

:func:`serve` is the loop; :func:`steps_figure` draws what each step computed and which pages each request held.

References:
    Yu et al., "Orca: A Distributed Serving System for Transformer-Based Generative Models", OSDI 2022 (iteration-level
    scheduling). Kwon et al., "Efficient Memory Management for Large Language Model Serving with PagedAttention", SOSP
    2023 (arXiv:2309.06180). Agrawal et al., "Taming Throughput-Latency Tradeoff in LLM Inference with
    Sarathi-Serve", OSDI 2024 (arXiv:2403.02310), on chunked prefill beside decoding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

import torch
from torch import Tensor

from .._checks import flag, instance, positive, size, tensor
from ..masks import mask_tensor, same_document
from ..paged_cache import PagedKVCache, PagedView

if TYPE_CHECKING:
    from collections.abc import Sequence

    from matplotlib.figure import Figure

    from .batching import CachedDecoder

__all__ = ["Request", "Served", "Step", "serve", "steps_figure"]


@dataclass
class Request:
    """A prompt to continue greedily for ``max_new`` tokens, arriving before step ``arrival``.

    Attributes:
        prompt: ``(L,)`` token ids.
        max_new: tokens to write (at least 1).
        arrival: the first step it may join.
    """

    prompt: Tensor
    max_new: int
    arrival: int = 0
    out: list[int] = field(default_factory=list, init=False, repr=False)  # tokens written so far
    fed: int = field(default=0, init=False, repr=False)  # positions in its cache

    def __post_init__(self) -> None:
        tensor("prompt", self.prompt, ndim=1, shape="(L,) of token ids", dtype="integer")
        if self.prompt.numel() == 0:
            raise ValueError("prompt is empty; a request needs at least one token")
        self.max_new = size("max_new", self.max_new, hint="tokens to write")
        self.arrival = size("arrival", self.arrival, minimum=0, hint="the first step it may join")

    def tokens(self) -> list[int]:
        """Its prompt, then what it wrote."""
        return self.prompt.tolist() + self.out


class Step(NamedTuple):
    """What one step computed: ``rows`` of ``(request, "prefill" or "decode", tokens)`` and, after it, each running
    request's pages (its block table in the first layer's pool) and the blocks in use."""

    rows: list[tuple[int, str, int]]
    pages: dict[int, list[int]]
    blocks_in_use: int


class Served(NamedTuple):
    """What :func:`serve` returns.

    Attributes:
        tokens: each request's tokens, ``(max_new,)``.
        logits: the logits each was chosen from, ``(max_new, V)``.
        steps: every step, in order (:class:`Step`).
        peak_bytes: the most bytes the pools' blocks in use held at once (every layer).
        computed: tokens the model ran on (each prompt token not shared, each token fed back).
        shared: prompt tokens read from another request's pages instead of computed.
    """

    tokens: list[Tensor]
    logits: list[Tensor]
    steps: list[Step]
    peak_bytes: int
    computed: int
    shared: int


def _check(requests: Sequence[Request], max_len: int) -> list[Request]:
    if not isinstance(requests, list | tuple) or not requests:
        raise TypeError(f"requests must be a non-empty list of Request; got {type(requests).__name__}")
    for i, r in enumerate(requests):
        instance(f"requests[{i}]", r, Request, "a Request")
        if len(r.prompt) > max_len - r.max_new + 1:
            raise ValueError(f"requests[{i}] has a prompt of {len(r.prompt)} tokens and max_new={r.max_new}: the "
                             f"prompt needs 1 to {max_len - r.max_new + 1} tokens to stay in the context of {max_len}")
    return [Request(r.prompt, r.max_new, r.arrival) for r in requests]  # fresh state: the caller's are untouched


def _start(pools: list[PagedKVCache], i: int, r: Request, running: dict[int, Request]) -> int:
    """Start request ``i`` on the whole pages of the longest prefix a running request holds; return tokens shared."""
    bs, best, source = pools[0].block_size, 0, None
    prompt = r.prompt.tolist()
    for j, other in running.items():
        held = other.tokens()[: other.fed]
        same = next((n for n, (a, b) in enumerate(zip(prompt, held, strict=False)) if a != b), min(len(prompt),
                                                                                                 len(held)))
        n = min(same, len(prompt) - 1) // bs * bs  # whole pages, and the last prompt token left to compute
        if n > best:
            best, source = n, j
    for pool in pools:
        pool.add_sequence(i) if source is None else pool.fork(source, i, best)
    r.fed = best
    return best


@torch.no_grad()
def serve(model: CachedDecoder, requests: Sequence[Request], *, num_blocks: int = 64, block_size: int = 16,
          max_batch_tokens: int = 64) -> Served:
    """Greedy decoding of every request by continuous batching over a shared page pool (see the module).

    Args:
        model: a decoder with a cached interface (:class:`~lessons_src.lab.batching.CachedDecoder`), such as
            :class:`~lessons_src.lab.text_model.TextGPT`: the shape of its caches (``model.make_caches(1)``) gives
            the pages' shape and the context.
        requests: what to serve; each starts at its ``arrival`` step or when the pool can hold it, in order.
        num_blocks: pages in each layer's pool.
        block_size: positions per page.
        max_batch_tokens: tokens per step, decoding and prefill together (at most the model's context).

    Returns:
        A :class:`Served`: each request's tokens equal those of its prompt decoded alone.

    Raises:
        ValueError: if a request's prompt and ``max_new`` do not fit the model's context, or the pool could not hold
            one request alone.

    Example:
        >>> from lessons_src.lab.text_model import TextConfig, TextGPT, encode
        >>> model = TextGPT(TextConfig(d_model=16, num_heads=2, max_len=16, d_ff=32)).eval()
        >>> done = serve(model, [Request(encode("hello"), 3), Request(encode("hi"), 2, arrival=1)], block_size=4)
        >>> [len(t) for t in done.tokens], [len(s.rows) for s in done.steps]
        ([3, 2], [1, 2, 1])
    """
    if not callable(getattr(model, "make_caches", None)):
        raise TypeError(f"model must be a decoder with make_caches() and a cached call, such as TextGPT; got "
                        f"{type(model).__name__}")
    num_blocks, block_size = size("num_blocks", num_blocks), size("block_size", block_size)
    budget = size("max_batch_tokens", max_batch_tokens, hint="tokens per step")
    layers = model.make_caches(1)  # the shape of each layer's cache, and the context
    reqs = _check(requests, layers[0].max_len)
    need = [math.ceil((len(r.prompt) + r.max_new - 1) / block_size) for r in reqs]  # pages at most, sharing aside
    if max(need) > num_blocks:
        raise ValueError(f"a request needs up to {max(need)} pages of {block_size} but the pool has "
                         f"num_blocks={num_blocks}; give at least that many")
    pools = [PagedKVCache(num_blocks, block_size, c.num_kv_heads, c.head_dim, v_head_dim=c.v_head_dim, dtype=c.k.dtype,
                          device=c.k.device) for c in layers]  # one per layer, the same pages in each
    waiting, running = list(range(len(reqs))), dict[int, Request]()  # by request id, in arrival order
    chosen: list[list[Tensor]] = [[] for _ in reqs]
    steps, peak, computed, shared, now = [], 0, 0, 0, 0
    while waiting or running:
        while waiting and reqs[waiting[0]].arrival <= now and \
                sum(need[j] for j in running) + need[waiting[0]] <= num_blocks:  # every worst case still fits
            i = waiting.pop(0)
            shared += _start(pools, i, reqs[i], running)
            running[i] = reqs[i]
        rows = [(i, "decode", r.out[-1:]) for i, r in running.items() if r.out]  # each decoding request's last token
        for i, r in running.items():  # then prefill chunks, in the budget left
            left = budget - sum(len(f) for _, _, f in rows)
            if not r.out and left > 0:
                rows.append((i, "prefill", r.prompt[r.fed : r.fed + left].tolist()))
        now += 1
        if not rows:  # nothing has arrived yet
            continue
        ids, feed = [i for i, _, _ in rows], [f for _, _, f in rows]
        views = [PagedView(pool, ids, [len(f) for f in feed]) for pool in pools]
        tokens = torch.tensor([t for f in feed for t in f], device=pools[0].k.device)[None]  # (1, T): the packed row
        docs = views[0].documents()  # (S,): each key's request; a query sees its own request's keys only
        mask = mask_tensor(same_document(docs), tokens.shape[1], len(docs), device=docs.device)  # once, every layer
        logits, _ = model(tokens, caches=views, positions=views[0].positions(), attn_mask=mask)  # (1, T, V)
        computed, end = computed + tokens.shape[1], -1
        for i, f in zip(ids, feed, strict=True):
            r, end = reqs[i], end + len(f)
            r.fed += len(f)
            if r.fed >= len(r.prompt):  # its prompt is read: its row's last logits give its next token
                r.out.append(int(logits[0, end].argmax()))
                chosen[i].append(logits[0, end])
        peak = max(peak, sum(pool.nbytes for pool in pools))
        for i in [i for i in ids if len(reqs[i].out) == reqs[i].max_new]:  # done: it leaves, its pages go back
            del running[i]
            for pool in pools:
                pool.free(i)
        pages = {i: list(pools[0].block_tables[i]) for i in running}
        steps.append(Step([(i, kind, len(f)) for i, kind, f in rows], pages, num_blocks - pools[0].num_free_blocks))
    return Served([torch.tensor(r.out) for r in reqs], [torch.stack(c) for c in chosen], steps, peak, computed, shared)


def steps_figure(steps: Sequence[Step], *, size: tuple[float, float], font: float, stacked: bool = False) -> Figure:
    """Each step's batch (left): one bar per request, its number on it, orange where it prefills, blue where it
    decodes, as long as the tokens it brings; and the pages each running request holds after the step (right), one
    colour per request, a page it shares with another hatched.

    Args:
        steps: from :func:`serve`.
        size: the figure's size in inches; font: its type size in points.
        stacked: the panels one above the other (a phone's column), not side by side.
    """
    from .plotting import figure

    if not isinstance(steps, list | tuple) or not all(isinstance(step, Step) for step in steps):
        raise TypeError(f"steps must be a list of Step, as serve() returns them; got {type(steps).__name__}")
    if not isinstance(size, tuple) or len(size) != 2:
        raise TypeError(f"size must be (width, height) in inches; got {size!r}")
    size = (positive("size[0]", size[0]), positive("size[1]", size[1]))
    font, stacked = positive("font", font, hint="points"), flag("stacked", stacked)
    fig = figure(figsize=size)
    left, right = fig.subplots(2, 1) if stacked else fig.subplots(1, 2)
    kinds = {"prefill": "#d9822b", "decode": "#2b6cb0"}
    palette = ["#4c956c", "#8e6bbf", "#c9563c", "#3a8fb7", "#b8860b", "#7a7a7a", "#d16ba5", "#2f4f4f"]
    for s, step in enumerate(steps):
        x = 0.0
        for i, kind, n in step.rows:
            left.barh(s, n, left=x, height=0.8, color=kinds[kind], edgecolor="white", linewidth=1)
            left.text(x + n / 2, s, str(i), ha="center", va="center", fontsize=font, color="white")
            x += n
        held: dict[int, int] = {}
        for table in step.pages.values():
            for b in table:
                held[b] = held.get(b, 0) + 1
        x = 0.0
        for i, table in step.pages.items():
            for b in table:
                right.barh(s, 1, left=x, height=0.8, color=palette[i % len(palette)], edgecolor="white",
                           hatch="////" if held[b] > 1 else None, linewidth=1)
                x += 1
            if table:  # the number on its last page, its own
                right.text(x - 0.5, s, str(i), ha="center", va="center", fontsize=font, color="white")
    left.set_title("tokens in each step (orange: prefill, blue: decode)", fontsize=font)
    right.set_title("pages held (hatched: shared)", fontsize=font)
    for ax, unit in ((left, "tokens"), (right, "pages")):
        ax.set_xlabel(unit, fontsize=font)
        ax.set_ylim(len(steps) - 0.5, -0.5)
        ax.set_ylabel("step", fontsize=font)
        ax.tick_params(labelsize=font)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    return fig
