"""Small tools the core lessons run: the worked "it" example, counting, timing, and one diagram.

Everything here is built on :class:`lessons_src.layer.MultiHeadAttention`; nothing is needed at run
time but ``torch`` (the diagram imports matplotlib lazily).

* :func:`it_example` builds the sentence "The animal didn't cross the street because it was too tired"
  with hand-set 8-dimensional embeddings and hand-set attention weights: a two-head layer in which one
  head looks for the referent of "it" and the other for the attribute that explains it, and the best a
  single head can do with the same two questions.
* :func:`fit_single_head` trains one head of any width to attend to two tokens at once and shows that
  the softmax's budget of 1 is the limit, whatever the width.
* :func:`dimension_flow` records every intermediate shape of a real forward pass.
* :func:`attention_flops` counts FLOPs with ``torch.utils.flop_counter.FlopCounterMode``.
* :func:`count_attention_calls` counts attention computations in a stack with forward hooks.
* :func:`median_times` times callables round-robin, for ratios measured in one run.
* :func:`source_lines` reads a function of the package, or a part of it, from its installed file, for a lesson
  that reads a kernel in parts without importing what the kernel needs.

References:
    Vaswani et al., "Attention Is All You Need", NeurIPS 2017 (arXiv:1706.03762), section 3.2.
    Elhage et al., "A Mathematical Framework for Transformer Circuits", Anthropic 2021 (heads write
    into the residual stream through their own slice of ``W_O``).
"""

from __future__ import annotations

import ast
import math
import statistics
import textwrap
import time
from dataclasses import dataclass
from importlib.resources import files
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn
from torch.utils.flop_counter import FlopCounterMode

from ..functional import explicit_attention, repeat_kv
from ..layer import MultiHeadAttention
from . import requires_extra

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from matplotlib.figure import Figure

__all__ = [
    "COLLAPSIBLE_COLUMNS",
    "FEATURES",
    "PHONE_COLUMNS",
    "SEED_WORKED_EXAMPLE",
    "TOKENS",
    "AttentionStack",
    "ItExample",
    "TwoHeadExample",
    "attention_entropy",
    "attention_flops",
    "count_attention_calls",
    "count_parameters",
    "data_flow_diagram",
    "dimension_flow",
    "fit_single_head",
    "fmt_table",
    "fmt_vec",
    "it_example",
    "median_times",
    "source_lines",
    "two_head_example",
]

TOKENS: tuple[str, ...] = (
    "The", "animal", "didn't", "cross", "the", "street", "because", "it", "was", "too", "tired",
)  # fmt: skip
"""The sentence of the worked example, one token per word."""

FEATURES: tuple[str, ...] = ("animate", "state", "pronoun", "noun", "verb", "function", "pos_a", "pos_b")
"""What each of the 8 embedding coordinates means in the worked example."""

_HAND_FEATURES: dict[str, dict[str, float]] = {
    "The": {"function": 1.0},
    "animal": {"animate": 1.0, "noun": 1.0},
    "didn't": {"function": 1.0},
    "cross": {"verb": 1.0},
    "the": {"function": 1.0},
    "street": {"noun": 1.0},
    "because": {"function": 1.0},
    "it": {"pronoun": 1.0},
    "was": {"verb": 1.0},
    "too": {"function": 1.0},
    "tired": {"state": 1.0},
}


def _embed() -> Tensor:
    """Hand-set embeddings of :data:`TOKENS`: one-hot features plus a small position code. ``(T, 8)``."""
    x = torch.zeros(len(TOKENS), len(FEATURES))
    for i, tok in enumerate(TOKENS):
        for name, value in _HAND_FEATURES[tok].items():
            x[i, FEATURES.index(name)] = value
        x[i, 6] = 0.25 * math.cos(i)  # position code: keeps equal words distinguishable
        x[i, 7] = 0.25 * math.sin(i)
    return x


@dataclass(frozen=True)
class ItExample:
    """The worked example: hand-set embeddings and hand-set layers.

    Attributes:
        tokens: the sentence, one token per word.
        x: embeddings, ``(1, T, 8)``; coordinate meanings in :data:`FEATURES`.
        two_heads: ``d_model=8, num_heads=2``: head 0 asks "which animate thing?", head 1 asks "which
            state?". Its ``out_proj`` is the identity.
        one_head: ``d_model=8, num_heads=1`` (one head as wide as the model) asking both questions at
            once, each as strongly as the two-head layer does.
        it: index of "it" in ``tokens``.
    """

    tokens: tuple[str, ...]
    x: Tensor
    two_heads: MultiHeadAttention
    one_head: MultiHeadAttention
    it: int


def it_example(strength: float = 5.0) -> ItExample:
    """Build the worked example with hand-set weights (no training, no randomness).

    How the weights are set (``D = 8``; in the two-head layer each head has ``E = 4`` coordinates):

    * head 0 (referent): its query reads the ``pronoun`` feature, its key reads ``animate``, so "it"
      scores ``strength`` on "animal" and 0 elsewhere;
    * head 1 (attribute): its query reads ``pronoun``, its key reads ``state``, so "it" scores "tired";
    * values: head 0 carries ``[animate, noun, pos_a, pos_b]``, head 1 carries ``[state, verb, pos_a,
      pos_b]``; ``W_O`` is the identity;
    * the single head puts both questions into one query: its query reads ``pronoun`` into the
      ``animate`` and ``state`` directions at once, each as strongly as the specialised heads do; its
      keys are the two heads' keys side by side, its values the identity.

    Args:
        strength: query length (a larger value gives sharper attention).

    Returns:
        An :class:`ItExample`.

    Shapes:
        ``x``: ``(1, T, 8)`` with ``T = 11``.

    Example:
        >>> ex = it_example()
        >>> _, w = ex.two_heads.with_weights(ex.x)
        >>> ex.tokens[int(w[0, 0, ex.it].argmax())], ex.tokens[int(w[0, 1, ex.it].argmax())]
        ('animal', 'tired')
    """
    f = {name: i for i, name in enumerate(FEATURES)}
    D, E = 8, 4
    two = MultiHeadAttention(D, 2)
    one = MultiHeadAttention(D, 1)
    with torch.no_grad():
        for m in (two, one):
            m.qkv_proj.weight.zero_()
            m.out_proj.weight.copy_(torch.eye(D))
        wq, wk, wv = two.qkv_proj.weight.view(3, D, D)  # each (D_out, D_in); rows 0-3 head 0, rows 4-7 head 1
        # Scores are divided by sqrt(E) inside attention; multiply it back so `strength` is the score.
        wq[0, f["pronoun"]] = strength * math.sqrt(E)  # head 0 query: "I am a pronoun"
        wk[0, f["animate"]] = 1.0  # head 0 key: "I am animate"
        wq[E, f["pronoun"]] = strength * math.sqrt(E)  # head 1 query
        wk[E, f["state"]] = 1.0  # head 1 key: "I am a state"
        for j, name in enumerate(("animate", "noun", "pos_a", "pos_b")):
            wv[j, f[name]] = 1.0
        for j, name in enumerate(("state", "verb", "pos_a", "pos_b")):
            wv[E + j, f[name]] = 1.0

        wq1, wk1, wv1 = one.qkv_proj.weight.view(3, D, D)
        wq1[0, f["pronoun"]] = strength * math.sqrt(D)  # one query, two questions, each as strong
        wq1[1, f["pronoun"]] = strength * math.sqrt(D)  # as in the specialised heads
        wk1[0, f["animate"]] = 1.0
        wk1[1, f["state"]] = 1.0
        wv1.copy_(torch.eye(D))
    return ItExample(TOKENS, _embed()[None], two.eval(), one.eval(), TOKENS.index("it"))


def fit_single_head(
    x: Tensor,
    query: int,
    targets: Sequence[int],
    *,
    head_dim: int,
    num_heads: int = 1,
    steps: int = 150,
    seed: int = 0,
) -> Tensor:
    """Train ``W_Q`` and ``W_K`` of attention head(s) so that ``query`` attends to ``targets``.

    With one head, the loss is ``-sum(log w[target])`` over all targets: the head is asked to attend to
    every target at once. With ``num_heads == len(targets)``, head ``i`` is asked to attend to
    ``targets[i]`` only. Adam, learning rate 0.1, full batch; training stops early once every target
    weight exceeds 0.999.

    Args:
        x: embeddings ``(T, D)``.
        query: the position whose attention row is trained.
        targets: the key positions it should attend to.
        head_dim: width ``E`` of each head's query and key.
        num_heads: 1, or ``len(targets)`` (one head per target).
        steps: optimiser steps.
        seed: seed of the random initialisation.

    Returns:
        The trained weights of the query's row, ``(num_heads, T)``.

    Raises:
        ValueError: if ``num_heads`` is neither 1 nor ``len(targets)``.

    Example:
        >>> w = fit_single_head(torch.randn(5, 8), 0, [1, 2], head_dim=4, steps=20)
        >>> w.shape
        torch.Size([1, 5])
    """
    if num_heads not in (1, len(targets)):
        raise ValueError(f"num_heads must be 1 or len(targets)={len(targets)}; got num_heads={num_heads}")
    gen = torch.Generator().manual_seed(seed)
    D = x.shape[-1]
    wq = (torch.randn(num_heads, D, head_dim, generator=gen) / math.sqrt(D)).requires_grad_()
    wk = (torch.randn(num_heads, D, head_dim, generator=gen) / math.sqrt(D)).requires_grad_()
    idx = torch.tensor(list(targets))
    moments = [(torch.zeros_like(p), torch.zeros_like(p)) for p in (wq, wk)]

    def row() -> Tensor:
        q = x[query] @ wq  # (H, E)
        k = x @ wk  # (H, S, E)
        scores = (k @ q[:, :, None]).squeeze(-1) / math.sqrt(head_dim)  # (H, S)
        return scores.softmax(-1)

    for step in range(1, steps + 1):
        w = row()
        picked = w[0, idx] if num_heads == 1 else w[torch.arange(num_heads), idx]
        if bool((picked > 0.999).all()):
            break  # nothing left to learn (and the tiny gradients that follow would be slow denormals)
        loss = -picked.log().sum()
        grads = torch.autograd.grad(loss, [wq, wk])
        with torch.no_grad():  # Adam, written out (torch.optim's first use is slow to import)
            for p, g, (m, v) in zip((wq, wk), grads, moments, strict=True):
                m.mul_(0.9).add_(g, alpha=0.1)
                v.mul_(0.999).addcmul_(g, g, value=0.001)
                p -= 0.1 * (m / (1 - 0.9**step)) / ((v / (1 - 0.999**step)).sqrt() + 1e-8)
    with torch.no_grad():
        return row()


def dimension_flow(mha: MultiHeadAttention, x: Tensor) -> list[tuple[str, tuple[int, ...]]]:
    """Run ``mha`` on ``x`` step by step and record each intermediate shape.

    The steps are the module's own (:meth:`MultiHeadAttention.project_qkv`, the explicit attention,
    the concatenation, ``out_proj``); the result is checked against ``mha(x)``.

    Returns:
        ``[(step name, shape), ...]`` from the input to the output.

    Raises:
        RuntimeError: if the step-by-step result differs from ``mha(x)`` (it never should).

    Shapes:
        x: ``(B, T, D)``.

    Example:
        >>> dimension_flow(MultiHeadAttention(8, 2), torch.randn(1, 3, 8))[-1]
        ('output (after W_O)', (1, 3, 8))
    """
    B, T, D = x.shape
    qkv = mha.qkv_proj(x)  # (B, T, D + 2 K E)
    q, k, v = mha.project_qkv(x)  # (B, H, T, E), 2 x (B, K, T, E)
    scores = q @ repeat_kv(k, mha.n_rep).transpose(-2, -1) / math.sqrt(mha.head_dim)  # (B, H, T, T)
    y, weights = explicit_attention(q, k, v)  # (B, H, T, E), (B, H, T, T): KV heads shared by groups
    concat = y.transpose(1, 2).reshape(B, T, D)  # (B, T, D)
    out = mha.out_proj(concat)  # (B, T, D)
    if not torch.allclose(out, mha(x), atol=1e-5, rtol=1e-4):
        raise RuntimeError("step-by-step forward pass differs from mha(x)")
    return [
        ("input x", tuple(x.shape)),
        ("x @ [W_Q;W_K;W_V]^T", tuple(qkv.shape)),
        ("queries Q", tuple(q.shape)),
        ("keys K", tuple(k.shape)),
        ("values V", tuple(v.shape)),
        ("QK^T / sqrt(d_k)", tuple(scores.shape)),
        ("softmax(scores)", tuple(weights.shape)),
        ("weights @ V", tuple(y.shape)),
        ("concatenated heads", tuple(concat.shape)),
        ("output (after W_O)", tuple(out.shape)),
    ]


def count_parameters(module: nn.Module) -> int:
    """Number of parameters of ``module`` (all of them are trainable here).

    Example:
        >>> count_parameters(MultiHeadAttention(8, 2))
        256
    """
    return sum(p.numel() for p in module.parameters())


def attention_flops(d_model: int, num_heads: int, T: int, *, batch: int = 1) -> dict[str, int]:
    """Count one forward pass's FLOPs with ``FlopCounterMode``, split into projections and attention.

    Args:
        d_model: model width ``D``.
        num_heads: heads ``H`` (must divide ``d_model``).
        T: sequence length (self-attention, so ``S = T``).
        batch: batch size ``B``.

    The explicit path (``mha.with_weights(x)``) is counted: its matmuls are plain ``mm``/``bmm`` calls
    that the counter knows. (In torch 2.x the counter has no formula for the fused CPU attention
    kernel, so the fast path would be under-counted.)

    Returns:
        ``{"projections": ..., "attention": ..., "total": ...}``: ``mm`` FLOPs (the Q/K/V and output
        projections, ``8 B T D^2``) and ``bmm`` FLOPs (scores and weighted sum, ``4 B T^2 D``).

    Example:
        >>> attention_flops(8, 2, 4)["attention"] == 4 * 4**2 * 8
        True
    """
    mha = MultiHeadAttention(d_model, num_heads)
    x = torch.zeros(batch, T, d_model)
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        mha.with_weights(x)
    counts = {str(op): int(n) for op, n in counter.get_flop_counts()["Global"].items()}
    proj = sum(n for op, n in counts.items() if op.endswith(".mm") or op.endswith(".addmm"))
    attn = sum(n for op, n in counts.items() if op.endswith(".bmm"))
    return {"projections": proj, "attention": attn, "total": int(counter.get_total_flops())}


class _Block(nn.Module):
    """Pre-norm transformer block: ``x + MHA(LN(x))``, then ``x + FFN(LN(x))``."""

    def __init__(self, d_model: int, num_heads: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = MultiHeadAttention(d_model, num_heads)
        self.ln2 = nn.LayerNorm(d_model)
        self.ffn = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln1(x), is_causal=True)  # (B, T, D)
        out: Tensor = x + self.ffn(self.ln2(x))  # (B, T, D)
        return out


class AttentionStack(nn.Module):
    """A stack of ``num_layers`` pre-norm blocks, each with one multi-head attention layer.

    Args:
        num_layers: blocks stacked one after another.
        d_model: model width ``D``.
        num_heads: heads in every block's attention layer.

    Shapes:
        x: ``(B, T, D)``; output: ``(B, T, D)``.

    Example:
        >>> AttentionStack(2, 8, 2)(torch.randn(1, 3, 8)).shape
        torch.Size([1, 3, 8])
    """

    def __init__(self, num_layers: int, d_model: int, num_heads: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(_Block(d_model, num_heads) for _ in range(num_layers))

    def forward(self, x: Tensor) -> Tensor:
        for block in self.blocks:
            x = block(x)
        return x


def count_attention_calls(model: nn.Module, x: Tensor) -> tuple[int, int]:
    """Run ``model(x)`` and count, with forward hooks, how much attention it computed.

    Args:
        model: any module containing :class:`MultiHeadAttention` layers.
        x: its input.

    Returns:
        ``(layers, heads)``: how many :class:`MultiHeadAttention` modules ran, and how many separate
        attention computations (one softmax-weighted average per head) they did in total.

    Example:
        >>> count_attention_calls(AttentionStack(3, 8, 2), torch.randn(1, 4, 8))
        (3, 6)
    """
    calls: list[int] = []

    def hook(module: nn.Module, args: object, output: object) -> None:
        assert isinstance(module, MultiHeadAttention)
        calls.append(module.num_heads)

    handles = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, MultiHeadAttention)]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in handles:
            h.remove()
    return len(calls), sum(calls)


def attention_entropy(weights: Tensor) -> Tensor:
    """Mean entropy (in nats) of attention rows; ``log(S)`` is uniform, ``0`` is one-hot.

    Args:
        weights: rows of probabilities (each row sums to 1).

    Returns:
        The entropy averaged over all rows, a 0-d tensor.

    Shapes:
        weights: ``(..., T, S)``; output: scalar.

    Example:
        >>> round(float(attention_entropy(torch.full((2, 4), 0.25))), 4) == round(math.log(4), 4)
        True
    """
    w = weights.clamp_min(torch.finfo(weights.dtype).tiny)
    return -(weights * w.log()).sum(-1).mean()


def median_times(fns: dict[str, Callable[[], object]], *, repeats: int = 15, warmup: int = 2) -> dict[str, float]:
    """Median seconds per call of each function, timed round-robin (one call of each in turn).

    Round-robin means a busy machine slows every function alike, so the ratios between them are more
    trustworthy than the absolute times. Calls run under ``torch.no_grad()``, warm-up included.

    Args:
        fns: the functions to time, by name; each is called with no arguments.
        repeats: timed calls of each function.
        warmup: untimed calls of each function first (lazy initialisation, caches).

    Returns:
        Median seconds per call, by name.

    Raises:
        ValueError: if ``repeats < 1``.

    Example:
        >>> t = median_times({"a": lambda: None}, repeats=3)
        >>> list(t)
        ['a']
    """
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1; got repeats={repeats}")
    samples: dict[str, list[float]] = {name: [] for name in fns}
    with torch.no_grad():
        for _ in range(warmup):
            for fn in fns.values():
                fn()
        for _ in range(repeats):
            for name, fn in fns.items():
                start = time.perf_counter()
                fn()
                samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(s) for name, s in samples.items()}


def data_flow_diagram(
    flow: Sequence[tuple[str, tuple[int, ...]]], num_heads: int, *, vertical: bool = False
) -> Figure:
    """Draw the data flow of a multi-head attention layer, labelled with the shapes of a real run.

    Args:
        flow: the output of :func:`dimension_flow`.
        num_heads: heads to draw (at most 4 are drawn, with a gap marked for the rest).
        vertical: draw it top to bottom for a phone's column. The left-to-right figure carries this one
            as its narrow-screen variant (:func:`lessons_src.lab.plotting.set_narrow`).

    Returns:
        A matplotlib figure (emit it with :func:`lessons_src.lab.plotting.svg`).
    """
    from .plotting import set_narrow

    shapes = dict(flow)
    if vertical:
        return _data_flow_vertical(shapes, num_heads)
    return set_narrow(_data_flow_across(shapes, num_heads), _data_flow_vertical(shapes, num_heads))


def _fmt_shape(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(str(n) for n in shape) + ")"


def _data_flow_vertical(shapes: dict[str, tuple[int, ...]], num_heads: int) -> Figure:
    """The data flow top to bottom, 343 px wide with 9-pt type (see :func:`data_flow_diagram`)."""
    import textwrap

    with requires_extra("plot"):
        from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    from .plotting import NARROW_MIN_FONT_PT, NARROW_WIDTH_PX, figure

    fs = NARROW_MIN_FONT_PT
    fig = figure(figsize=(NARROW_WIDTH_PX / 96, 5.4), layout=None)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, 100)
    ax.set_ylim(0, 100)
    ax.set_axis_off()

    def box(x0: float, x1: float, yc: float, h: float, text: str, color: str) -> None:
        ax.add_patch(FancyBboxPatch((x0, yc - h / 2), x1 - x0, h, boxstyle="round,pad=0.8", fc=color, ec="#333333",
                                    lw=0.8))
        ax.text((x0 + x1) / 2, yc, text, ha="center", va="center", fontsize=fs, color="#111111")

    def line(xs: Sequence[float], ys: Sequence[float], head: bool = False) -> None:
        if head:
            ax.add_patch(FancyArrowPatch((xs[0], ys[0]), (xs[1], ys[1]), arrowstyle="-|>", mutation_scale=8, lw=0.8,
                                         color="#333333"))
        else:
            ax.plot(xs, ys, color="#333333", lw=0.8)

    B, _, T, E = shapes["queries Q"]
    box(25, 75, 94.5, 5.5, f"input x\n{_fmt_shape(shapes['input x'])}", "#dbe4ff")
    line([50, 50], [90.8, 86.4], head=True)
    projected = _fmt_shape(shapes["x @ [W_Q;W_K;W_V]^T"])
    box(15, 85, 80, 9, f"project Q, K, V\n(one fused matmul)\n{projected}", "#fff3bf")
    drawn = min(num_heads, 4)
    ys = [64 - i * 9.5 for i in range(drawn)]
    if num_heads > drawn:
        ys[-1] -= 5
    line([50, 50, 5, 5], [74.6, 72, 72, ys[-1]])
    for i, y in enumerate(ys):
        label = f"head {i + 1}" if i < drawn - 1 or drawn == num_heads else f"head {num_heads}"
        box(11, 89, y, 6, f"{label}: softmax(QKᵀ/√{E}) V\nQ, K, V ({B}, {T}, {E})", "#d3f9d8")
        line([5, 10.2], [y, y], head=True)
        line([89.8, 95], [y, y])
    if num_heads > drawn:
        ax.text(50, (ys[-2] + ys[-1]) / 2, f"… {num_heads - drawn} more heads …", ha="center", va="center", fontsize=fs)
    concat_y = ys[-1] - 14
    line([95, 95, 25], [ys[0], concat_y + 7, concat_y + 7])
    line([25, 25], [concat_y + 7, concat_y + 4.2], head=True)
    box(6, 44, concat_y, 6, f"concat\n{_fmt_shape(shapes['concatenated heads'])}", "#ffe8cc")
    line([45, 55], [concat_y, concat_y], head=True)
    box(56, 94, concat_y, 6, f"W_O\n{_fmt_shape(shapes['output (after W_O)'])}", "#f3d9fa")
    note = (f"d_model = {shapes['input x'][-1]} is split into {num_heads} heads of d_k = {E}; "
            f"every head has its own ({T} x {T}) attention weights.")
    ax.text(50, concat_y - 6, textwrap.fill(note, 44), ha="center", va="top", fontsize=fs)
    return fig


def _data_flow_across(shapes: dict[str, tuple[int, ...]], num_heads: int) -> Figure:
    """The data flow left to right (see :func:`data_flow_diagram`)."""
    with requires_extra("plot"):
        from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    from .plotting import figure

    fig = figure(figsize=(7.2, 4.0), layout=None)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, 100)
    ax.set_ylim(6, 64)
    ax.set_axis_off()

    def box(x: float, y: float, w: float, h: float, text: str, color: str) -> None:
        ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.6", fc=color, ec="#333333", lw=0.8))
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=8.5, color="#111111")

    def arrow(x0: float, y0: float, x1: float, y1: float) -> None:
        ax.add_patch(FancyArrowPatch((x0, y0), (x1, y1), arrowstyle="-|>", mutation_scale=8, lw=0.8, color="#333333"))

    def fmt(name: str) -> str:
        return "(" + ", ".join(str(n) for n in shapes[name]) + ")"

    B, _, T, E = shapes["queries Q"]
    box(2, 28, 12, 8, f"input x\n{fmt('input x')}", "#dbe4ff")
    projected = fmt("x @ [W_Q;W_K;W_V]^T")
    box(19, 27, 16, 10, f"project Q, K, V\n(one fused matmul)\n{projected}", "#fff3bf")
    arrow(14.6, 32, 19.4, 32)
    drawn = min(num_heads, 4)
    ys = [54 - i * 12.5 for i in range(drawn)]
    for i, y in enumerate(ys):
        label = f"head {i + 1}" if i < drawn - 1 or drawn == num_heads else f"head {num_heads}"
        box(42, y - 3, 22, 6.5, f"{label}: softmax(QKᵀ/√{E}) V\nQ, K, V ({B}, {T}, {E})", "#d3f9d8")
        arrow(35.6, 32, 41.4, y + 0.2)
        arrow(64.6, y + 0.2, 70.4, 32)
    if num_heads > drawn:
        ax.text(53, (ys[-2] + ys[-1]) / 2 + 0.3, f"… {num_heads - drawn} more heads …", ha="center", fontsize=8.5)
    box(71, 28, 11, 8, f"concat\n{fmt('concatenated heads')}", "#ffe8cc")
    box(87, 28, 11, 8, f"W_O\n{fmt('output (after W_O)')}", "#f3d9fa")
    arrow(82.6, 32, 86.4, 32)
    ax.text(
        50,
        8.5,
        f"d_model = {shapes['input x'][-1]} is split into {num_heads} heads of d_k = {E}; "
        f"every head has its own ({T} x {T}) attention weights.",
        ha="center",
        fontsize=8.5,
    )
    return fig


def source_lines(module: str, function: str, first: str | None = None, last: str | None = None) -> str:
    """The source of ``function``, a top-level function of the package's ``module``, or the part of it from the line
    that starts with ``first`` to the line before the next one that starts with ``last`` (each line compared
    without its indentation; the part is dedented), read from the installed file without importing it (so
    ``"triton_flash"`` reads without Triton).

    Example:
        >>> print(source_lines("functional", "repeat_kv", "if n_rep == 1", "B, K, S, E"))
        if n_rep == 1:
            return x
    """
    text = files("lessons_src").joinpath(f"{module}.py").read_text(encoding="utf-8")
    found = [node for node in ast.parse(text).body if isinstance(node, ast.FunctionDef) and node.name == function]
    if not found:
        raise ValueError(f"lessons_src/{module}.py has no top-level function {function!r}")
    lines = (ast.get_source_segment(text, found[0], padded=True) or "").splitlines()
    start = 0 if first is None else _line_starting(lines, first, 0, function)
    end = len(lines) if last is None else _line_starting(lines, last, start + 1, function)
    return textwrap.dedent("\n".join(lines[start:end]))


def _line_starting(lines: list[str], prefix: str, after: int, function: str) -> int:
    for n in range(after, len(lines)):
        if lines[n].strip().startswith(prefix):
            return n
    raise ValueError(f"no line of {function} after line {after + 1} starts with {prefix!r}")


def fmt_vec(values: Tensor | Sequence[float], digits: int = 3) -> str:
    """A vector as ``[0.62, 0.19, ...]`` with ``digits`` decimals, trailing zeros dropped: less f-string noise.

    Example:
        >>> fmt_vec([0.625, 0.1, 0.0])
        '[0.625, 0.1, 0]'
    """
    if isinstance(digits, bool) or not isinstance(digits, int) or digits < 0:
        raise ValueError(f"digits must be a non-negative int, got {digits!r}")
    items = values.tolist() if isinstance(values, Tensor) else list(values)
    if any(isinstance(v, list) for v in items):
        raise ValueError(f"fmt_vec formats one vector; got a nested list of shape like {len(items)} x ...")
    return "[" + ", ".join(f"{float(v):.{digits}f}".rstrip("0").rstrip(".") or "0" for v in items) + "]"


def _cell(value: object, digits: int) -> str:
    if isinstance(value, Tensor):
        if value.numel() != 1:
            raise ValueError(f"a table cell holds one number; got a tensor of shape {tuple(value.shape)}")
        value = value.item()
    if isinstance(value, bool | str):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    raise TypeError(f"a table cell is a number or a string; got {type(value).__name__}: {value!r}")


def fmt_table(
    headers: Sequence[str], rows: Iterable[Sequence[object]], *, digits: int = 3, width: int | None = None
) -> str:
    """Rows as a text table, columns as wide as their widest cell: no f-string widths to get right.

    Integers get thousands separators, floats ``digits`` decimals, strings (e.g. ``f"{share:.1%}"``) stay
    as they are. Columns of numbers are right-aligned, columns of words (no cell starting with a digit or a
    sign) left-aligned; two spaces separate the columns.

    ``width`` (e.g. :data:`PHONE_COLUMNS`): when the table is wider than that, its narrow form is printed
    instead, each row's first cell (its key) on a line of its own and the other cells on the line below,
    under their own header, so the table reads on a phone without scrolling or wrapping.

    Example:
        >>> print(fmt_table(["heads", "d_k"], [[8, 128], [16, 64]]))
        heads  d_k
            8  128
           16   64
        >>> print(fmt_table(["model", "heads", "d_k"], [["GPT-2 small", 12, 64]], width=16))
        model
          heads  d_k
        GPT-2 small
             12   64
    """
    if isinstance(digits, bool) or not isinstance(digits, int) or digits < 0:
        raise ValueError(f"digits must be a non-negative int, got {digits!r}")
    if width is not None and (isinstance(width, bool) or not isinstance(width, int) or width < 1):
        raise ValueError(f"width must be a positive int (columns of text) or None, got {width!r}")
    head = [str(h) for h in headers]
    body = [[_cell(v, digits) for v in row] for row in rows]
    for i, row in enumerate(body):
        if len(row) != len(head):
            raise ValueError(f"row {i} has {len(row)} cells; the table has {len(head)} columns: {head}")
    wide = _aligned([head, *body])
    if width is None or len(head) < 2 or max(len(line) for line in wide) <= width:
        return "\n".join(wide)
    rest = ["  " + line for line in _aligned([r[1:] for r in [head, *body]])]
    keyed = [line for r, values in zip(body, rest[1:], strict=True) for line in (r[0], values)]
    return "\n".join([head[0], rest[0], *keyed])


PHONE_COLUMNS = 38
"""Characters of printed output one line holds on a 375-px phone (monospace at Material's code size)."""

COLLAPSIBLE_COLUMNS = 31
"""The same inside a collapsible (an exercise's answer, a note), whose borders and padding take 54 px."""


def _aligned(table: list[list[str]]) -> list[str]:
    """Each row as a line, columns padded to their widest cell: numbers right-aligned, words left-aligned."""
    widths = [max(len(r[c]) for r in table) for c in range(len(table[0]))]
    words = [not any(r[c][:1].isdigit() or r[c][:1] in "+-" for r in table[1:]) for c in range(len(table[0]))]
    return [
        "  ".join(x.ljust(w) if w_ else x.rjust(w) for x, w, w_ in zip(r, widths, words, strict=True)).rstrip()
        for r in table
    ]


SEED_WORKED_EXAMPLE: dict[str, Any] = {
    "values": {  # one 4-number value vector per context word, as the seed wrote them
        "animal": (0.8, 0.1, 0.0, 0.2),
        "road": (0.1, 0.7, 0.1, 0.0),
        "because": (0.2, 0.2, 0.6, 0.1),
        "was": (0.1, 0.1, 0.2, 0.8),
        "tired": (0.3, 0.6, 0.1, 0.2),
    },
    "weights": {  # the seed's hand-picked attention weights of the token "it", per head
        "head 1": {"animal": 0.70, "road": 0.05, "because": 0.10, "was": 0.05, "tired": 0.10},
        "head 2": {"animal": 0.20, "road": 0.05, "because": 0.05, "was": 0.15, "tired": 0.55},
    },
    "claimed": {  # the outputs the seed printed for those weights
        "head 1": (0.61, 0.20, 0.09, 0.21),
        "head 2": (0.33, 0.41, 0.08, 0.29),
    },
}
"""Seed 003's hand-worked example (weights typed in, outputs computed by hand), kept to be checked by code."""


@dataclass(frozen=True)
class TwoHeadExample:
    """Two heads of "it" over five value vectors, with weights from a softmax of q·k.

    Attributes:
        words: the five context words.
        values: their value vectors, ``(5, 4)``.
        keys: their key vectors, ``(5, 4)``.
        queries: the query of "it" in each head, ``(2, 4)``.
        weights: softmax of ``q·k / sqrt(4)`` per head, ``(2, 5)``, each row summing to 1.
        outputs: each head's weighted sum of the values, ``(2, 4)``.
        concat: both outputs side by side, ``(8,)``; with ``W_O`` the identity this is the layer's output.
    """

    words: tuple[str, ...]
    values: Tensor
    keys: Tensor
    queries: Tensor
    weights: Tensor
    outputs: Tensor
    concat: Tensor


def two_head_example(sharpness: float = 3.0) -> TwoHeadExample:
    """Seed 003's worked example done with a softmax: "it" in two heads over "animal, road, because, was, tired".

    Keys mark two features of each word, "a referent" (an animate noun) and "a state" (a word describing
    how something is); head 1's query asks for the first, head 2's for the second, each ``sharpness``
    strong. Weights come out soft, never one-hot.

    Example:
        >>> ex = two_head_example()
        >>> bool(torch.allclose(ex.weights.sum(-1), torch.ones(2)))
        True
    """
    if not sharpness > 0:
        raise ValueError(f"sharpness must be > 0, got {sharpness!r}")
    vals = SEED_WORKED_EXAMPLE["values"]
    words = tuple(vals)
    values = torch.tensor([vals[w] for w in words])  # (5, 4)
    #                       referent, state, verb, function
    keys = torch.tensor([[1.0, 0.0, 0.0, 0.0],  # animal
                         [0.3, 0.0, 0.0, 0.0],  # road: a noun, not animate
                         [0.0, 0.0, 0.0, 1.0],  # because
                         [0.0, 0.3, 1.0, 0.0],  # was: a verb that links to a state
                         [0.0, 1.0, 0.0, 0.0]])  # tired  # fmt: skip
    queries = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]]) * sharpness * 2  # (2, 4)
    weights = torch.softmax(queries @ keys.T / keys.shape[-1] ** 0.5, dim=-1)  # (2, 5)
    outputs = weights @ values  # (2, 4)
    return TwoHeadExample(words, values, keys, queries, weights, outputs, outputs.reshape(-1))
