"""Small models whose layers are Gated DeltaNet or softmax attention, by a pattern, and the copy task they learn.

Qwen3-Next and Qwen3.5 run three Gated DeltaNet layers for every full attention layer. What does the fourth keep
that the other three cannot? :class:`HybridLM` is a tiny decoder whose ``pattern`` says, layer by layer, which:
``"L"`` a :class:`GatedDeltaNet` layer (a fixed-size state per head, :func:`lessons_src.delta_rule.delta_rule_chunked`),
``"F"`` full softmax attention (the package's :class:`~lessons_src.layer.MultiHeadAttention`). Every layer is
``x + mixer(norm(x))`` then ``x + mlp(norm(x))``; with :func:`pattern` the three models of
``tools/train/train_hybrids.py`` (``make train-hybrids``) are all-linear ``LLLL``, the 3:1 hybrid ``LLLF`` and
all-attention ``FFFF``, with parameter counts within 5% of each other (:func:`parameter_count`).

The task (:func:`copy_batch`): ``n`` distinct random tokens, then the same ``n`` again; from the second token of
the repeat on, each next token is the one ``n`` positions back, so ``n`` is the distance of the copy. Attention
can look back any distance; a linear layer must have kept the token in its state, written over by every token
since. :func:`copy_accuracy` measures the share of copied tokens predicted right at each distance.

What :class:`GatedDeltaNet` keeps of Qwen3-Next's layer (transformers' ``Qwen3NextGatedDeltaNet``): the
projections of queries, keys, values and the output gate ``z`` from the input, and of ``beta`` and ``a``; the short
causal depthwise convolution (4 taps) with SiLU over queries, keys and values; ``g = -exp(A_log) *
softplus(a + dt_bias)``, ``beta = sigmoid(b)``; unit-length queries and keys; the gated RMSNorm of each head's
output (``rmsnorm(o) * w * silu(z)``) and the output projection. What it leaves out: more value heads than key
heads (Qwen3-Next has 32 and 16), the cache for decoding, the fused kernels. The full layers keep Qwen3-Next's
QK-norm (``offset=1``) and sigmoid output gate per feature; they rotate every feature of a head (Qwen3-Next: a
quarter) and have as many key-value heads as query heads (Qwen3-Next: grouped). The MLP is SwiGLU, dense (Qwen3-Next:
a mixture of experts). The models have no position embedding: the full layers' positions are rotary, the linear
layers' come from the order of the recurrence and the convolution.

References:
    Yang, Kautz and Hatamizadeh, "Gated Delta Networks: Improving Mamba2 with Delta Rule", 2024 (arXiv:2412.06464).
    Qwen Team, Qwen3-Next (2025), transformers' ``modeling_qwen3_next.py``.
    Jelassi et al., "Repeat After Me: Transformers are Better than State Space Models at Copying", 2024
    (arXiv:2402.01032).
    Arora et al., "Zoology: Measuring and Improving Recall in Efficient Language Models", 2023 (arXiv:2312.04927).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._checks import choice, divisors, instance, size, tensor
from ..delta_rule import delta_rule_chunked
from ..layer import MultiHeadAttention
from ..mechanisms import ElementwiseGate, PerHeadRMSNorm, Rotary
from . import read_artifact_json

__all__ = [
    "HYBRID_LOG",
    "LAYER_KINDS",
    "PATTERNS",
    "GatedDeltaNet",
    "HybridConfig",
    "HybridLM",
    "SwiGLU",
    "copy_accuracy",
    "copy_batch",
    "copy_loss",
    "parameter_count",
    "pattern",
    "read_hybrid_log",
]

HYBRID_LOG = "hybrid_training.json"
"""The committed log of ``make train-hybrids`` among the package's artifacts."""

LAYER_KINDS = {"L": "linear", "F": "full"}
"""A pattern's letters and the layer each stands for, as the course's configs name them (``layer_kinds()``)."""

PATTERNS = {"all-linear": "L", "hybrid 3:1": "LLLF", "all-attention": "F"}
"""The three models compared: each pattern repeated to the model's depth (:func:`pattern`)."""


def pattern(name: str, num_layers: int) -> str:
    """The layer pattern named ``name`` in :data:`PATTERNS` for ``num_layers`` layers, as a string of letters.

    Raises:
        ValueError: for an unknown name, or a hybrid whose depth is not a multiple of its period (4).

    Example:
        >>> pattern("hybrid 3:1", 8), pattern("all-linear", 3)
        ('LLLFLLLF', 'LLL')
    """
    choice("name", name, PATTERNS)
    num_layers = size("num_layers", num_layers)
    unit = PATTERNS[name]
    if num_layers % len(unit):
        raise ValueError(f"the {name} pattern repeats {unit!r}: num_layers must be a multiple of {len(unit)}; "
                         f"got {num_layers}")
    return unit * (num_layers // len(unit))


def _check_pattern(layers: object) -> str:
    if not isinstance(layers, str):
        raise TypeError(f"layers must be a string of layer letters ({', '.join(LAYER_KINDS)}); got {layers!r}")
    if not layers:
        raise ValueError(f"layers must be a non-empty string of layer letters ({', '.join(LAYER_KINDS)}); got ''")
    bad = sorted({c for c in layers if c not in LAYER_KINDS})
    if bad:
        raise ValueError(f"unknown layer kind {', '.join(map(repr, bad))} in layers={layers!r}: each must be one of "
                         + ", ".join(f"{c!r} ({kind})" for c, kind in LAYER_KINDS.items()))
    return layers


@dataclass(frozen=True)
class HybridConfig:
    """Shape of a :class:`HybridLM`.

    Attributes:
        vocab_size: token ids ``V``.
        d_model: residual stream width ``D``.
        num_heads: heads per layer ``H`` (both kinds), each of ``head_dim = D // H``.
        layers: one letter per layer, ``"L"`` Gated DeltaNet, ``"F"`` full attention (:func:`pattern`).
        d_ff: hidden width of each layer's SwiGLU MLP; ``0`` for none.
        conv_size: taps of the linear layers' short convolution.
        chunk_size: tokens per chunk of :func:`~lessons_src.delta_rule.delta_rule_chunked`.

    Raises:
        ValueError: for a pattern with an unknown letter, or sizes that do not fit.
    """

    vocab_size: int
    d_model: int
    num_heads: int
    layers: str
    d_ff: int = 0
    conv_size: int = 4
    chunk_size: int = 64

    def __post_init__(self) -> None:
        _check_pattern(self.layers)
        for name in ("vocab_size", "d_model", "num_heads", "conv_size", "chunk_size"):
            object.__setattr__(self, name, size(name, getattr(self, name)))
        object.__setattr__(self, "d_ff", size("d_ff", self.d_ff, minimum=0, hint="0: no MLP"))
        _heads(self.d_model, self.num_heads)

    @property
    def kinds(self) -> tuple[str, ...]:
        """Each layer's kind, ``"linear"`` or ``"full"``, as :data:`LAYER_KINDS` names the letters."""
        return tuple(LAYER_KINDS[c] for c in self.layers)


def _heads(d_model: int, num_heads: int) -> None:
    if d_model % num_heads:
        raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}; head counts that divide "
                         f"{d_model} are {divisors(d_model)}: num_heads must be one")


def _width(x: object, d_model: int) -> None:
    t = tensor("x", x, ndim=3, shape=f"(B, T, d_model={d_model})")
    if t.shape[-1] != d_model:
        raise ValueError(f"x must be (B, T, d_model={d_model}); got shape {tuple(t.shape)}")


def _rms_norm(x: Tensor, eps: float = 1e-6) -> Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def _l2_norm(x: Tensor, eps: float = 1e-6) -> Tensor:
    """``x / sqrt(|x|^2 + eps)`` over the last dim, Qwen3-Next's (and fla's) form: ``F.normalize`` divides by
    ``max(|x|, eps)`` instead, which differs for short vectors (by a quarter at length 1e-3)."""
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + eps)


class GatedDeltaNet(nn.Module):
    """Qwen3-Next's Gated DeltaNet layer at toy size: projections, short convolution, the gated delta rule, gate.

    With transformers' ``Qwen3NextGatedDeltaNet``'s weights (as many value heads as key heads; its projections
    hold each head's q, k, v, z together, ours each kind's heads together) it gives the same outputs
    (``tests/lab/test_hybrid_models.py``).

    Args:
        d_model: ``D``.
        num_heads: ``H``; each head has a state of ``E x E`` numbers, ``E = D // H``.
        conv_size: taps of the causal depthwise convolution over queries, keys and values.
        chunk_size: tokens per chunk of the rule's chunked form.

    Shapes:
        x: ``(B, T, D)``; returns ``(B, T, D)``.

    Example:
        >>> layer = GatedDeltaNet(8, 2)
        >>> layer(torch.randn(1, 5, 8)).shape
        torch.Size([1, 5, 8])
    """

    def __init__(self, d_model: int, num_heads: int, *, conv_size: int = 4, chunk_size: int = 64) -> None:
        super().__init__()
        d_model, num_heads = size("d_model", d_model), size("num_heads", num_heads)
        conv_size, chunk_size = size("conv_size", conv_size), size("chunk_size", chunk_size)
        _heads(d_model, num_heads)
        self.d_model = d_model
        self.num_heads, self.head_dim, self.chunk_size = num_heads, d_model // num_heads, chunk_size
        inner = num_heads * self.head_dim
        self.qkvz = nn.Linear(d_model, 4 * inner, bias=False)  # queries, keys, values, output gate z
        self.ba = nn.Linear(d_model, 2 * num_heads, bias=False)  # beta's and the decay's inputs, one per head
        self.conv = nn.Conv1d(3 * inner, 3 * inner, conv_size, groups=3 * inner, padding=conv_size - 1, bias=False)
        # The decay's parameters as Gated DeltaNet initialises them (Mamba2's): A in [1, 16], dt in [0.001, 0.1].
        self.A_log = nn.Parameter(torch.empty(num_heads).uniform_(1, 16).log())
        dt = torch.empty(num_heads).uniform_(math.log(1e-3), math.log(0.1)).exp()
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # softplus(dt_bias) = dt
        self.norm_weight = nn.Parameter(torch.ones(self.head_dim))  # the gated RMSNorm's weight, shared by heads
        self.out = nn.Linear(inner, d_model, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        _width(x, self.d_model)
        B, T, _ = x.shape
        H, E = self.num_heads, self.head_dim
        qkv, z = self.qkvz(x).split([3 * H * E, H * E], dim=-1)  # (B, T, 3HE), (B, T, HE)
        qkv = F.silu(self.conv(qkv.transpose(1, 2))[..., :T]).transpose(1, 2)  # causal: (B, T, 3HE)
        q, k, v = (t.view(B, T, H, E).transpose(1, 2) for t in torch.split(qkv, H * E, dim=-1))  # (B, H, T, E) each
        q, k = _l2_norm(q), _l2_norm(k)  # (B, H, T, E): unit length, as the models make it
        b, a = torch.split(self.ba(x), H, dim=-1)  # (B, T, H) each
        beta = torch.sigmoid(b).transpose(1, 2)  # (B, H, T), write strength in (0, 1)
        g = (-self.A_log.exp() * F.softplus(a + self.dt_bias)).transpose(1, 2)  # (B, H, T), log decay <= 0
        o, _ = delta_rule_chunked(q, k, v, g, beta, chunk_size=self.chunk_size)  # (B, H, T, E)
        o = o.transpose(1, 2)  # (B, T, H, E)
        o = _rms_norm(o) * self.norm_weight * F.silu(z.view(B, T, H, E))  # gated RMSNorm per head
        out: Tensor = self.out(o.reshape(B, T, H * E))  # (B, T, D)
        return out


class SwiGLU(nn.Module):
    """``down(silu(gate(x)) * up(x))``, the MLP of Llama, Qwen and most models since.

    Shapes:
        x: ``(B, T, D)``; returns ``(B, T, D)``.
    """

    def __init__(self, d_model: int, d_ff: int) -> None:
        super().__init__()
        self.d_model, d_ff = size("d_model", d_model), size("d_ff", d_ff)
        self.gate_up = nn.Linear(d_model, 2 * d_ff, bias=False)
        self.down = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        _width(x, self.d_model)
        gate, up = self.gate_up(x).chunk(2, dim=-1)  # (B, T, d_ff) each
        out: Tensor = self.down(F.silu(gate) * up)  # (B, T, D)
        return out


class _Full(nn.Module):
    """A full attention layer as Qwen3-Next's: QK-norm, rotary positions, a sigmoid gate per output feature."""

    def __init__(self, d_model: int, num_heads: int) -> None:
        super().__init__()
        E = d_model // num_heads
        self.attn = MultiHeadAttention(d_model, num_heads, qk_norm=PerHeadRMSNorm(E, offset=1.0), rope=Rotary(E),
                                       gate=ElementwiseGate(d_model, num_heads, E))

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.attn(x, is_causal=True)  # (B, T, D)
        return out


class HybridLM(nn.Module):
    """Embedding, one block per letter of ``cfg.layers`` (Gated DeltaNet or full attention, then an MLP), unembedding.

    Args:
        cfg: the shape and the pattern.

    Shapes:
        tokens: ``(B, T)`` ints in ``[0, vocab_size)``; returns logits ``(B, T, V)``.

    Raises:
        ValueError: on tokens that are not a 2-D tensor of ids in the vocabulary.

    Example:
        >>> model = HybridLM(HybridConfig(vocab_size=10, d_model=16, num_heads=2, layers="LF"))
        >>> [type(m).__name__ for m in model.mixers], tuple(model(torch.zeros(1, 5, dtype=torch.long)).shape)
        (['GatedDeltaNet', '_Full'], (1, 5, 10))
    """

    def __init__(self, cfg: HybridConfig) -> None:
        super().__init__()
        instance("cfg", cfg, HybridConfig, "a HybridConfig")
        self.cfg = cfg
        D = cfg.d_model
        self.embed = nn.Embedding(cfg.vocab_size, D)
        self.mixers = nn.ModuleList(
            GatedDeltaNet(D, cfg.num_heads, conv_size=cfg.conv_size, chunk_size=cfg.chunk_size) if kind == "linear"
            else _Full(D, cfg.num_heads)
            for kind in cfg.kinds
        )
        self.mixer_norms = nn.ModuleList(nn.RMSNorm(D, eps=1e-6) for _ in cfg.kinds)
        self.mlps = nn.ModuleList(SwiGLU(D, cfg.d_ff) for _ in (cfg.kinds if cfg.d_ff else ()))
        self.mlp_norms = nn.ModuleList(nn.RMSNorm(D, eps=1e-6) for _ in (cfg.kinds if cfg.d_ff else ()))
        self.final_norm = nn.RMSNorm(D, eps=1e-6)
        self.unembed = nn.Linear(D, cfg.vocab_size, bias=False)

    def forward(self, tokens: Tensor) -> Tensor:
        tensor("tokens", tokens, ndim=2, shape="(B, T) of token ids", dtype="integer")
        bad = tokens[(tokens < 0) | (tokens >= self.cfg.vocab_size)]
        if bad.numel():
            raise ValueError(f"tokens outside the vocabulary 0..{self.cfg.vocab_size - 1}: "
                             f"{sorted(set(bad.tolist()))[:10]}")
        x = self.embed(tokens)  # (B, T, D)
        for i, mixer in enumerate(self.mixers):
            x = x + mixer(self.mixer_norms[i](x))  # (B, T, D)
            if self.mlps:
                x = x + self.mlps[i](self.mlp_norms[i](x))  # (B, T, D)
        logits: Tensor = self.unembed(self.final_norm(x))  # (B, T, V)
        return logits


def parameter_count(cfg: HybridConfig) -> int:
    """The number of parameters of a :class:`HybridLM` of this config (the global random state left as it was)."""
    instance("cfg", cfg, HybridConfig, "a HybridConfig")
    with torch.random.fork_rng(devices=[]):
        model = HybridLM(cfg)
    return sum(p.numel() for p in model.parameters())


def copy_batch(generator: torch.Generator, batch: int, seq_len: int, vocab_size: int,
               distances: Sequence[int]) -> tuple[Tensor, Tensor]:
    """Rows of ``n`` distinct random tokens followed by the same ``n`` again, then random tokens to ``seq_len``.

    Each row's ``n`` is drawn uniformly from ``distances``. In the repeat, the token at position ``t`` is the one at
    ``t - n``: a model that has seen the row's first token of the repeat (position ``n``) can predict every later
    one by finding the earlier copy of the current token and reading the token after it (an induction head's
    lookup), ``n`` positions back.

    Returns:
        ``(tokens, distance)``: ``distance[b, t]`` is ``n`` where ``tokens[b, t + 1]`` is a predictable copy
        (``t`` in ``n .. 2n - 2``), else 0.

    Shapes:
        tokens: ``(batch, seq_len)``; distance: ``(batch, seq_len - 1)``.

    Raises:
        ValueError: if a distance is below 2, above ``vocab_size`` (the ``n`` tokens are distinct) or above
            ``seq_len // 2``.

    Example:
        >>> tokens, distance = copy_batch(torch.Generator().manual_seed(0), 1, 8, 10, [3])
        >>> bool((tokens[0, 3:6] == tokens[0, :3]).all()), distance[0].tolist()
        (True, [0, 0, 0, 3, 3, 0, 0])
    """
    instance("generator", generator, torch.Generator, "a torch.Generator (seeded: torch.Generator().manual_seed(0))")
    batch, seq_len, vocab_size = size("batch", batch), size("seq_len", seq_len), size("vocab_size", vocab_size)
    distances = _distances(distances)
    if min(distances) < 2 or max(distances) > min(vocab_size, seq_len // 2):
        raise ValueError(f"distances must lie in 2 .. min(vocab_size, seq_len // 2) = "
                         f"{min(vocab_size, seq_len // 2)} (n distinct tokens, repeated once); got {distances}")
    tokens = torch.randint(0, vocab_size, (batch, seq_len), generator=generator)  # (B, T): the filler
    distance = torch.zeros(batch, seq_len - 1, dtype=torch.long)
    picks = torch.randint(0, len(distances), (batch,), generator=generator).tolist()
    order = torch.rand(batch, vocab_size, generator=generator).argsort(dim=1)  # (B, V): a random permutation a row
    for b, i in enumerate(picks):
        n = distances[i]
        tokens[b, :n] = order[b, :n]  # n distinct tokens
        tokens[b, n : 2 * n] = order[b, :n]  # and again
        distance[b, n : 2 * n - 1] = n
    return tokens, distance


def _distances(distances: object) -> list[int]:
    """``distances`` as a non-empty list of ints (a list or tuple of sizes)."""
    if isinstance(distances, str) or not isinstance(distances, Sequence) or not distances:
        raise TypeError(f"distances must be a non-empty list of ints; got {distances!r}")
    return [size("distances", d, minimum=2, hint="a copy's length") for d in distances]


def copy_loss(model: HybridLM, tokens: Tensor, distance: Tensor) -> Tensor:
    """Mean cross-entropy of the predictable copies alone (where ``distance > 0``), the loss the models train on.

    Shapes:
        tokens: ``(B, T)``; distance: ``(B, T - 1)``; returns a scalar.
    """
    instance("model", model, HybridLM, "a HybridLM")
    tensor("tokens", tokens, ndim=2, shape="(B, T) of token ids", dtype="integer")
    tensor("distance", distance, ndim=2, shape="(B, T - 1) from copy_batch", dtype="integer")
    if distance.shape != (tokens.shape[0], tokens.shape[1] - 1):
        raise ValueError(f"distance must be (B, T - 1) = ({tokens.shape[0]}, {tokens.shape[1] - 1}) for tokens "
                         f"{tuple(tokens.shape)}; got {tuple(distance.shape)}")
    if not bool((distance > 0).any()):
        raise ValueError("distance marks no copied token (all 0): the loss over none would be NaN; use rows from "
                         "copy_batch")
    logits = model(tokens[:, :-1])  # (B, T-1, V)
    loss = F.cross_entropy(logits.transpose(1, 2), tokens[:, 1:], reduction="none")  # (B, T-1)
    mask = distance > 0
    return loss[mask].mean()


@torch.no_grad()
def copy_accuracy(model: HybridLM, distances: Sequence[int], *, rows: int = 64, seed: int = 0,
                  batch: int = 64) -> dict[int, float]:
    """The share of copied tokens the model predicts right (argmax), at each distance, on fresh seeded rows.

    ``rows`` rows per distance, each as long as twice the largest distance; each row of distance ``n`` scores
    ``n - 1`` predictions.

    Returns:
        ``{distance: accuracy}``.
    """
    instance("model", model, nn.Module, "a model of token ids, such as a HybridLM")
    distances = _distances(distances)
    rows, batch, seed = size("rows", rows), size("batch", batch), size("seed", seed, minimum=0)
    seq_len = 2 * max(distances)
    was = model.training
    model.eval()
    g = torch.Generator().manual_seed(seed)
    out = {}
    for n in distances:
        right = total = 0
        for start in range(0, rows, batch):
            tokens, distance = copy_batch(g, min(batch, rows - start), seq_len, model.cfg.vocab_size, [n])
            mask = distance > 0  # (B, T-1)
            hits = model(tokens[:, :-1]).argmax(-1) == tokens[:, 1:]  # (B, T-1)
            right += int(hits[mask].sum())
            total += int(mask.sum())
        out[n] = right / total
    model.train(was)
    return out


def read_hybrid_log() -> dict[str, Any]:
    """The committed log of ``make train-hybrids``: settings, each model's parameters, losses, CPU seconds, and
    copy accuracy against distance."""
    log: dict[str, Any] = read_artifact_json(HYBRID_LOG)
    return log
