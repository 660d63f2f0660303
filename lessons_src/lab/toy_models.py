"""Tiny transformers the project trains itself, and the synthetic data they learn from.

:class:`TinyTransformer` is token + position embeddings, ``num_layers`` residual blocks of our own
:class:`~lessons_src.layer.MultiHeadAttention` (plus an optional ReLU MLP), and an unembedding.
With ``d_ff=0`` it is *attention-only*, the model in which Olsson et al. found induction heads: with two
layers it learns to continue a repeated segment ``... A B ... A -> B``, a previous-token head in layer 1
feeding an induction head in layer 2.

The induction model is trained by ``tools/train/train_induction.py`` (``make train``); its checkpoint
(``lessons_src/lab/artifacts/induction_model.safetensors``, shipped in the package) is loaded by
:func:`load_induction_model`, and :func:`attention_maps` returns its attention on any token sequence.

References:
    Elhage et al., "A Mathematical Framework for Transformer Circuits", Anthropic 2021.
    Olsson et al., "In-context Learning and Induction Heads", Anthropic 2022 (arXiv:2209.11895).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from importlib import resources
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..layer import MultiHeadAttention
from . import artifact, requires_extra

if TYPE_CHECKING:
    from pathlib import Path

BROWSER_ATOL = 1e-4
"""How far the live model page's logits and weights may be from PyTorch's (docs/practice/live-model.md prints
it; tests/browser/test_live_model.py checks it): the page computes in JavaScript's 64-bit floats from the float32
weights, PyTorch in float32, so the two differ by float32 rounding, far below this."""

__all__ = [
    "BROWSER_ATOL",
    "INDUCTION_CHECKPOINT",
    "TinyConfig",
    "TinyTransformer",
    "attention_maps",
    "find_circuit",
    "induction_scores",
    "load_induction_model",
    "neighbour_pair_batch",
    "next_token_loss",
    "repeated_random_tokens",
    "repeated_segment_batch",
]

INDUCTION_CHECKPOINT = "induction_model.safetensors"
"""The committed induction model's file name among the package's artifacts (:func:`lessons_src.lab.artifact`)."""


@dataclass(frozen=True)
class TinyConfig:
    """Shape of a :class:`TinyTransformer`.

    Attributes:
        vocab_size: number of token ids.
        d_model: residual stream width ``D``.
        num_heads: heads per layer ``H``.
        num_layers: blocks.
        max_len: learned positions.
        d_ff: hidden width of each block's MLP; ``0`` for an attention-only model.
        causal: whether a position may attend only to itself and earlier positions.
        num_outputs: classes the unembedding predicts; ``None`` for ``vocab_size`` (next-token prediction).
    """

    vocab_size: int
    d_model: int
    num_heads: int
    num_layers: int
    max_len: int
    d_ff: int = 0
    causal: bool = True
    num_outputs: int | None = None


class TinyTransformer(nn.Module):
    """Embeddings, ``num_layers`` residual blocks ``x = x + MHA(x)`` (``+ MLP(x)``), unembedding.

    No LayerNorm: at this depth the model trains without it, and every path from tokens to logits stays
    linear apart from the softmax (and the MLP if any), which keeps the circuits easy to read.

    Args:
        cfg: the shape.

    Shapes:
        tokens: ``(B, T)`` ints in ``[0, vocab_size)``; returns logits ``(B, T, V)`` and, with
        ``need_weights=True``, weights ``(L, B, H, T, T)``.

    Example:
        >>> model = TinyTransformer(TinyConfig(vocab_size=10, d_model=16, num_heads=2, num_layers=2, max_len=8))
        >>> logits, w = model(torch.zeros(1, 5, dtype=torch.long), need_weights=True)
        >>> tuple(logits.shape), tuple(w.shape)
        ((1, 5, 10), (2, 1, 2, 5, 5))
    """

    def __init__(self, cfg: TinyConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_embed = nn.Embedding(cfg.max_len, cfg.d_model)
        self.attns = nn.ModuleList(MultiHeadAttention(cfg.d_model, cfg.num_heads) for _ in range(cfg.num_layers))
        self.mlps = nn.ModuleList(
            nn.Sequential(nn.Linear(cfg.d_model, cfg.d_ff), nn.ReLU(), nn.Linear(cfg.d_ff, cfg.d_model))
            for _ in range(cfg.num_layers if cfg.d_ff > 0 else 0)
        )
        self.unembed = nn.Linear(cfg.d_model, cfg.num_outputs or cfg.vocab_size, bias=False)

    @property
    def attentions(self) -> list[MultiHeadAttention]:
        """The attention module of every layer (for hooks and head ablation)."""
        return list(self.attns)  # type: ignore[arg-type]

    def forward(self, tokens: Tensor, *, need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        if tokens.ndim != 2:
            raise ValueError(f"tokens must be 2-D (B, T); got shape {tuple(tokens.shape)}")
        T = tokens.shape[1]
        if self.cfg.max_len < T:
            raise ValueError(f"sequence length T={T} exceeds max_len={self.cfg.max_len}")
        if tokens.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
            raise ValueError(f"tokens must hold integer token ids; got dtype {tokens.dtype}")
        bad = tokens[(tokens < 0) | (tokens >= self.cfg.vocab_size)]
        if bad.numel():
            raise ValueError(
                f"tokens outside the vocabulary 0..{self.cfg.vocab_size - 1}: {sorted(set(bad.tolist()))[:10]}"
            )
        x = self.embed(tokens) + self.pos_embed(torch.arange(T, device=tokens.device))  # (B, T, D)
        weights = []
        for i, attn in enumerate(self.attentions):
            if need_weights:
                a, w = attn.with_weights(x, is_causal=self.cfg.causal)  # (B, T, D), (B, H, T, T)
                weights.append(w)
            else:
                a = attn(x, is_causal=self.cfg.causal)  # (B, T, D)
            x = x + a
            if self.mlps:
                x = x + self.mlps[i](x)  # (B, T, D)
        logits = self.unembed(x)  # (B, T, V) (V = num_outputs if set)
        return logits, (torch.stack(weights) if need_weights else None)  # (L, B, H, T, T)

    def save(self, path: str | Path, metadata: dict[str, str] | None = None) -> None:
        """Write the weights and the config (as JSON metadata) to a safetensors file."""
        with requires_extra("toy"):
            from safetensors.torch import save_file

        meta = {"config": json.dumps(asdict(self.cfg), sort_keys=True), **(metadata or {})}
        save_file({k: v.contiguous() for k, v in self.state_dict().items()}, str(path), metadata=meta)

    @classmethod
    def load(cls, path: str | Path) -> TinyTransformer:
        """Read a file written by :meth:`save`; the model is returned in eval mode."""
        with requires_extra("toy"):
            from safetensors import safe_open
            from safetensors.torch import load_file

        with safe_open(str(path), "pt") as f:
            meta = f.metadata()
        model = cls(TinyConfig(**json.loads(meta["config"])))
        model.load_state_dict(load_file(str(path)))
        return model.eval()


def repeated_segment_batch(
    generator: torch.Generator, batch: int, seq_len: int, vocab_size: int, min_seg: int = 8, max_seg: int = 32
) -> tuple[Tensor, Tensor]:
    """Random tokens in which one random segment appears twice: the training data of the induction model.

    Each row is uniform random tokens; then a segment of length ``L`` (uniform in ``[min_seg, max_seg]``)
    starting at ``s`` is copied to a later start ``d >= s + L``. Only a model that looks back at the
    earlier copy can predict the copied tokens after the first.

    Returns:
        ``(tokens, in_context)``: ``in_context[b, t]`` is True where ``tokens[b, t + 1]`` is predictable
        from the earlier copy (positions ``d .. d + L - 2`` predict ``d + 1 .. d + L - 1``).

    Shapes:
        tokens and in_context: ``(batch, seq_len)``.
    """
    if not 1 <= min_seg <= max_seg or 2 * max_seg > seq_len:
        raise ValueError(f"need 1 <= min_seg <= max_seg <= seq_len / 2; got {min_seg}, {max_seg}, {seq_len}")
    tokens = torch.randint(0, vocab_size, (batch, seq_len), generator=generator)
    in_context = torch.zeros(batch, seq_len, dtype=torch.bool)
    for b in range(batch):
        L = int(torch.randint(min_seg, max_seg + 1, (1,), generator=generator))
        s = int(torch.randint(0, seq_len - 2 * L + 1, (1,), generator=generator))
        d = int(torch.randint(s + L, seq_len - L + 1, (1,), generator=generator))
        tokens[b, d : d + L] = tokens[b, s : s + L]
        in_context[b, d : d + L - 1] = True
    return tokens, in_context


def repeated_random_tokens(n: int, vocab_size: int, seed: int = 0, batch: int = 1) -> Tensor:
    """``n`` random tokens followed by the same ``n`` again: the standard probe for induction heads.

    Shapes:
        returns ``(batch, 2 n)``.

    Example:
        >>> t = repeated_random_tokens(4, 10)
        >>> bool((t[:, :4] == t[:, 4:]).all())
        True
    """
    g = torch.Generator().manual_seed(seed)
    first = torch.randint(0, vocab_size, (batch, n), generator=g)  # (batch, n)
    return torch.cat([first, first], dim=1)  # (batch, 2n)


def load_induction_model(path: str | Path | None = None) -> TinyTransformer:
    """The committed 2-layer attention-only model (``make train`` regenerates it), or the one at ``path``.

    The committed checkpoint ships inside the package and is read through :mod:`importlib.resources`,
    so it loads from an installed wheel as from a checkout.
    """
    if path is not None:
        return TinyTransformer.load(path)
    with resources.as_file(artifact(INDUCTION_CHECKPOINT)) as file:
        return TinyTransformer.load(file)


@torch.no_grad()
def attention_maps(tokens: Tensor | list[int], model: TinyTransformer | None = None) -> Tensor:
    """Every head's attention weights of the induction model on one token sequence.

    Args:
        tokens: token ids in ``[0, vocab_size)``, at most ``max_len`` of them.
        model: default: the committed checkpoint.

    Returns:
        weights; row ``i`` of ``weights[layer, head]`` is where position ``i`` attends (causal).

    Shapes:
        tokens: ``(T,)``; returns ``(L, H, T, T)``.
    """
    model = load_induction_model() if model is None else model
    t = torch.as_tensor(tokens, dtype=torch.long)
    if t.ndim != 1:
        raise ValueError(f"tokens must be one sequence (T,); got shape {tuple(t.shape)}")
    if t.numel() and (t.min() < 0 or t.max() >= model.cfg.vocab_size):
        raise ValueError(
            f"token ids must be in [0, {model.cfg.vocab_size}); got min {int(t.min())}, max {int(t.max())}"
        )
    _, weights = model(t[None], need_weights=True)
    assert weights is not None
    maps: Tensor = weights[:, 0]  # (L, H, T, T)
    return maps


def next_token_loss(model: TinyTransformer, tokens: Tensor) -> Tensor:
    """Per-position cross-entropy of predicting ``tokens[:, t + 1]`` from ``tokens[:, :t + 1]``.

    Shapes:
        tokens: ``(B, T)``; returns ``(B, T - 1)``.
    """
    logits, _ = model(tokens[:, :-1])  # (B, T-1, V)
    loss: Tensor = F.cross_entropy(logits.transpose(1, 2), tokens[:, 1:], reduction="none")  # (B, T-1)
    return loss


def neighbour_pair_batch(
    generator: torch.Generator, batch: int, seq_len: int, vocab_size: int
) -> tuple[Tensor, Tensor]:
    """A task in which every position needs two relations at once: name its left and its right neighbour.

    The target at position ``i`` is the ordered pair (token at ``i - 1``, token at ``i + 1``), wrapping
    around the ends, encoded as one class ``left * vocab_size + right``. One head can reach both
    neighbours only by blending their vectors, and must then tell from the blend which token was on
    which side; two heads can look left and right separately.

    Returns:
        ``(tokens, targets)``, targets in ``[0, vocab_size ** 2)``.

    Shapes:
        both ``(batch, seq_len)``.

    Example:
        >>> tokens, targets = neighbour_pair_batch(torch.Generator().manual_seed(0), 1, 5, 4)
        >>> bool(targets[0, 1] == tokens[0, 0] * 4 + tokens[0, 2])
        True
    """
    tokens = torch.randint(0, vocab_size, (batch, seq_len), generator=generator)  # (B, T)
    left, right = tokens.roll(1, dims=1), tokens.roll(-1, dims=1)  # (B, T) each
    return tokens, left * vocab_size + right


PREVIOUS_TOKEN_THRESHOLD = 0.5
"""A layer-1 head with a previous-token score at least this is called a previous-token head."""

INDUCTION_THRESHOLD = 0.5
"""A layer-2 head with a prefix-matching score at least this (and a positive copying score) is an induction head."""


@torch.no_grad()
def induction_scores(model: TinyTransformer, n: int = 24, batch: int = 32, seed: int = 0) -> dict[str, Tensor]:
    """Olsson et al.'s per-head scores on ``batch`` random sequences of ``n`` tokens repeated twice.

    Returns:
        ``previous`` (weight on the position before), ``prefix matching`` (weight on the token after the
        earlier occurrence of the query's token) and ``copying`` (OV-circuit eigenvalue share).

    Shapes:
        each ``(L, H)``.
    """
    from .heads import copying_score, ov_circuit, prefix_matching_score, previous_token_score

    if 2 * n > model.cfg.max_len:
        raise ValueError(f"2 n = {2 * n} exceeds the model's max_len={model.cfg.max_len}")
    tokens = repeated_random_tokens(n, model.cfg.vocab_size, seed=seed, batch=batch)  # (B, 2n)
    _, w = model(tokens, need_weights=True)  # (L, B, H, 2n, 2n)
    assert w is not None
    copying = torch.tensor(
        [
            [
                float(copying_score(ov_circuit(model.embed.weight, attn, model.unembed.weight, h)))
                for h in range(attn.num_heads)
            ]
            for attn in model.attentions
        ]
    )
    return {
        "previous": previous_token_score(w).mean(1),  # (L, H)
        "prefix matching": prefix_matching_score(w, n).mean(1),  # (L, H)
        "copying": copying,  # (L, H)
    }


def find_circuit(scores: dict[str, Tensor]) -> dict[str, list[int]]:
    """The previous-token heads of layer 1 and the induction heads of layer 2, by the thresholds above.

    Returns:
        ``{"previous-token heads": [...], "induction heads": [...]}``, head indices within their layer.
    """
    prev = scores["previous"][0]
    ind = scores["prefix matching"][1]
    copy = scores["copying"][1]
    return {
        "previous-token heads": [h for h in range(len(prev)) if prev[h] >= PREVIOUS_TOKEN_THRESHOLD],
        "induction heads": [h for h in range(len(ind)) if ind[h] >= INDUCTION_THRESHOLD and copy[h] > 0],
    }
