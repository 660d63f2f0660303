"""Measurements for the long-context lessons: receptive fields, attention sinks, evicting the first tokens, and
attention over chosen keys (the text model with each query's top-k keys, ranked by its true attention or by a small
lightning indexer fitted here, and the cost of an indexer at DeepSeek-V3.2's sizes).

Built on the core (``masks``, ``rope``, ``sparse_selection``) and the lab's trained models; nothing here is timed
(the benchmarks ``tools/bench/bench_long_context.py`` and ``tools/bench/bench_sparse.py`` do the timing).

The fitted indexer (:class:`TextIndexer`, one :class:`LightningIndexer` per layer of the text model) is fitted by
``tools/train/train_indexer.py`` (``make train-indexer``) as DeepSeek-V3.2's dense warm-up stage fits its indexer:
the text model frozen, the KL divergence from each layer's attention distribution (:func:`attention_targets`) to
the softmax of the indexer's scores (:func:`indexer_kl`). Its float16 weights and its log, with the results against
k, ship in ``lessons_src/lab/artifacts/`` (:func:`load_text_indexer`, :func:`read_indexer_log`).

References:
    DeepSeek-AI, "DeepSeek-V3.2: Pushing the Frontier of Open Large Language Models", 2025 (arXiv:2512.02556):
    the lightning indexer, its top-k selection and its KL warm-up.

Example:
    >>> receptive_field(window=3, num_layers=3, length=12)
    [3, 5, 7]
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from importlib import resources
from os import PathLike
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import torch
from torch import Tensor, nn

from .._checks import choice, instance, number, size, tensor
from ..functional import attention
from ..masks import causal_mask
from ..rope import apply_rope, rope_cos_sin
from ..sparse_selection import lightning_indexer_scores, top_k_mask
from . import artifact, read_artifact_json, requires_extra
from .heads import first_token_mass
from .lesson_tools import fmt_table

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from .configs import ModelConfig
    from .minilm import MiniLM, Tokenizer
    from .text_model import Block, TextGPT
    from .toy_models import TinyTransformer

__all__ = [
    "INDEXER_CHECKPOINT",
    "INDEXER_LOG",
    "SENTENCES",
    "IndexerConfig",
    "LightningIndexer",
    "TextIndexer",
    "TopKResult",
    "attention_targets",
    "compressed_costs",
    "evict_keys_minilm",
    "indexer_fit_table",
    "indexer_kl",
    "load_text_indexer",
    "minilm_eviction_cosines",
    "minilm_sink_shares",
    "native_sparse_costs",
    "read_indexer_log",
    "receptive_field",
    "selection_costs",
    "text_model_top_k",
    "toy_logits_with_mask",
    "toy_window_eviction",
]


def receptive_field(window: int, num_layers: int, length: int) -> list[int]:
    """How many input positions can reach the last position after each of ``num_layers`` windowed layers.

    Computed, not assumed: layer by layer, a position is reachable when some position it may attend to
    (``causal_mask(length, window=window)``) was reachable from the input. With a window of ``W`` each
    layer reaches ``W - 1`` further back, so ``n`` layers see ``n (W - 1) + 1`` positions (capped at
    ``length``).

    Raises:
        ValueError: if a size is below 1 (from :func:`lessons_src.masks.causal_mask` for the window).
    """
    num_layers, length = size("num_layers", num_layers), size("length", length)
    hop = causal_mask(length, window=window).to(torch.int64)  # (T, T): row i may read column j
    reach = hop[-1]  # (T,): what the last position reads after one layer
    out = [int(reach.count_nonzero())]
    for _ in range(num_layers - 1):
        reach = ((reach @ hop) > 0).to(torch.int64)  # read a position that read j
        out.append(int(reach.count_nonzero()))
    return out


@torch.no_grad()
def toy_logits_with_mask(model: TinyTransformer, tokens: Tensor, attn_mask: Tensor) -> Tensor:
    """The toy model's forward pass with ``attn_mask`` (bool, ``True`` = may attend) in every layer.

    The same computation as :class:`lessons_src.lab.toy_models.TinyTransformer` with ``is_causal=True``,
    except that the mask (which should include causality, e.g. ``causal_mask(T, window=W, sink_tokens=n)``)
    replaces the causal flag.

    Shapes:
        tokens: ``(B, T)``; attn_mask: ``(T, T)``; returns logits ``(B, T, V)``.
    """
    from .toy_models import TinyTransformer

    instance("model", model, TinyTransformer, "a TinyTransformer (lessons_src.lab.toy_models)")
    tensor("tokens", tokens, ndim=2, shape="(B, T) of token ids", dtype="integer")
    tensor("attn_mask", attn_mask, ndim=2, shape="(T, T), True = may attend", dtype="bool")
    T = tokens.shape[1]
    x = model.embed(tokens) + model.pos_embed(torch.arange(T))  # (B, T, D)
    for i, attn in enumerate(model.attentions):
        x = x + attn(x, attn_mask=attn_mask)
        if model.mlps:
            x = x + model.mlps[i](x)
    logits: Tensor = model.unembed(x)
    return logits


@torch.no_grad()
def evict_keys_minilm(model: MiniLM, ids: Tensor, keep: Tensor, evicted: list[list[int]]) -> Tensor:
    """MiniLM's hidden states when the ``evicted`` positions of each sentence are hidden as keys from every query.

    Args:
        model: the encoder.
        ids: ``(B, T)`` token ids.
        keep: ``(B, T)`` 1 for real tokens, 0 for padding.
        evicted: for each sentence, the positions no query may attend to (they still have an output).

    Returns:
        hidden states ``(B, T, D)``.
    """
    _minilm(model)
    tensor("ids", ids, ndim=2, shape="(B, T) of token ids", dtype="integer")
    tensor("keep", keep, ndim=2, shape="(B, T): 1 for real tokens, 0 for padding", dtype="integer")
    if isinstance(evicted, str) or not isinstance(evicted, list | tuple) or len(evicted) != ids.shape[0]:
        raise TypeError(f"evicted must be a list of position lists, one per sentence ({ids.shape[0]}); got "
                        f"{evicted!r}")
    mask = keep.clone()
    for b, positions in enumerate(evicted):
        mask[b, positions] = 0
    hidden: Tensor = model(ids, mask)[0]
    return hidden


def _minilm(model: object, tok: object = None, sentences: object = ()) -> None:
    """The checks every MiniLM measurement shares: the model, the tokenizer, the sentences."""
    from .minilm import MiniLM, Tokenizer

    instance("model", model, MiniLM, "a MiniLM (lessons_src.lab.minilm)")
    if tok is not None:
        instance("tok", tok, Tokenizer, "a Tokenizer (lessons_src.lab.minilm)")
    if isinstance(sentences, str) or not isinstance(sentences, list | tuple) or not all(
            isinstance(x, str) for x in sentences):
        raise TypeError(f"sentences must be a list of strings; got {sentences!r}")


SENTENCES = (
    "The cat sat on the mat because it was warm.",
    "Attention heads learn different patterns from the same input.",
    "A long context needs a cache that does not grow without bound.",
    "She gave him the book that her brother had written.",
)
"""The sentences the attention-sinks lesson measures MiniLM on."""


@torch.no_grad()
def minilm_sink_shares(
    model: MiniLM, tok: Tokenizer, sentences: Sequence[str] = SENTENCES
) -> list[tuple[float, float, float]]:
    """Per layer: the mean weight on ``[CLS]``, on ``[SEP]``, and the share uniform attention gives one token.

    Averaged over every head and every real query of ``sentences``.
    """
    _minilm(model, tok, sentences)
    _, ids, keep = tok.batch(list(sentences))  # (B, T) ids, 1 for real tokens
    lengths = keep.sum(1)
    _, weights = model(ids, keep)  # (L, B, H, T, T)
    on_cls = first_token_mass(weights, lengths).mean(1)  # (L,): key 0 is [CLS]
    on_sep = torch.stack(
        [weights[:, b, :, :n, n - 1].mean(dim=(1, 2)) for b, n in enumerate(lengths.tolist())]
    ).mean(0)  # (L,): the last real key is [SEP]
    uniform = float((1 / lengths.float()).mean())
    return [(float(c), float(s), uniform) for c, s in zip(on_cls, on_sep, strict=True)]


@torch.no_grad()
def minilm_eviction_cosines(
    model: MiniLM, tok: Tokenizer, which: str, sentences: Sequence[str] = SENTENCES
) -> list[float]:
    """Cosine between each sentence's embedding with two keys evicted and without: ``which`` is ``"sinks"``
    (``[CLS]`` and ``[SEP]``) or ``"words"`` (positions 2 and 4). The embedding is the mean of the token
    outputs, L2-normalised (as sentence-transformers computes it)."""
    _minilm(model, tok, sentences)
    choice("which", which, ("sinks", "words"))
    _, ids, keep = tok.batch(list(sentences))
    ends = (keep.sum(1) - 1).tolist()
    evicted = [[0, e] for e in ends] if which == "sinks" else [[2, 4] for _ in ends]

    def embedding(positions: list[list[int]]) -> Tensor:
        hidden = evict_keys_minilm(model, ids, keep, positions)  # (B, T, D)
        mean = (hidden * keep[..., None]).sum(1) / keep.sum(1, keepdim=True)
        return torch.nn.functional.normalize(mean, dim=-1)

    full = embedding([[] for _ in sentences])
    return [float(c) for c in (embedding(evicted) * full).sum(-1)]


@torch.no_grad()
def toy_window_eviction(
    model: TinyTransformer, n: int, window: int, sink_tokens: Sequence[int], batch: int = 32, seed: int = 1
) -> dict[str, object]:
    """The toy model on a random segment of ``n`` tokens repeated twice: first-token weight and windowed runs.

    Returns ``first_token`` (``(L, H)`` mean weight on position 0 from queries at position 8 or later),
    ``uniform`` (the share uniform attention would give it), ``full_loss`` (next-token loss on the repeated
    segment with full attention), ``outside_window`` (``(L,)``: with full attention, the mean weight the
    second copy's queries put on keys the window would hide, over heads and queries), and for each ``s`` in
    ``sink_tokens`` a row ``(s, relative change of the logits from full attention, loss on the repeat)`` with
    ``causal_mask(2n, window=window, sink_tokens=s)``.
    """
    import torch.nn.functional as F

    from .toy_models import TinyTransformer, repeated_random_tokens

    instance("model", model, TinyTransformer, "a TinyTransformer (lessons_src.lab.toy_models)")
    n, window, batch, seed = size("n", n), size("window", window), size("batch", batch), size("seed", seed, minimum=0)
    if isinstance(sink_tokens, str) or not isinstance(sink_tokens, list | tuple):
        raise TypeError(f"sink_tokens must be a list of counts of kept first tokens; got {sink_tokens!r}")
    sink_tokens = [size("sink_tokens", s, minimum=0) for s in sink_tokens]
    tokens = repeated_random_tokens(n, model.cfg.vocab_size, seed=seed, batch=batch)  # (batch, 2n)
    T = tokens.shape[1]
    full, weights = model(tokens, need_weights=True)  # (B, T, V), (L, B, H, T, T)
    assert weights is not None

    def repeat_loss(logits: Tensor) -> float:  # predicting the second copy from the token before each
        return float(F.cross_entropy(logits[:, n:-1].reshape(-1, logits.shape[-1]), tokens[:, n + 1 :].reshape(-1)))

    rows = []
    for s in sink_tokens:
        logits = toy_logits_with_mask(model, tokens, causal_mask(T, window=window, sink_tokens=s))
        rows.append((s, float((logits - full).norm() / full.norm()), repeat_loss(logits)))
    pos = torch.arange(T)
    hidden = (pos[None, :] <= pos[:, None] - window) & (pos[:, None] >= n)  # (T, T): second-copy query, old key
    outside = (weights * hidden).sum(-1).sum(-1) / (pos >= n).sum()  # (L, B, H): mean over the second copy
    return {
        "first_token": first_token_mass(weights, from_query=8),
        "outside_window": outside.mean(dim=(1, 2)),
        "uniform": float((1 / torch.arange(9, T + 1).float()).mean()),
        "full_loss": repeat_loss(full),
        "windowed": rows,
    }


INDEXER_CHECKPOINT = "text_indexer.safetensors"
INDEXER_LOG = "indexer_training.json"


@dataclass(frozen=True)
class IndexerConfig:
    """Shape of a :class:`TextIndexer`: one small lightning indexer per layer of the text model.

    Attributes:
        d_model: the text model's width ``D``; each indexer reads its block's normalised input, ``(B, T, D)``.
        num_layers: the text model's layers, one indexer each.
        indexer_heads: indexer heads ``Hi``.
        indexer_head_dim: indexer head size ``Di``, of queries and of the one shared key.
        rope_dim: how many of the ``Di`` features of each query and key are rotated by position (the first ones,
            half-split as :func:`lessons_src.rope.apply_rope` rotates them); the rest carry no position.
        rope_base: RoPE's wavelength base.

    Raises:
        ValueError: on a size below 1, or a ``rope_dim`` that is odd or larger than ``indexer_head_dim``.
    """

    d_model: int = 128
    num_layers: int = 2
    indexer_heads: int = 4
    indexer_head_dim: int = 16
    rope_dim: int = 8
    rope_base: float = 10000.0

    def __post_init__(self) -> None:
        for name in ("d_model", "num_layers", "indexer_heads", "indexer_head_dim"):
            object.__setattr__(self, name, size(name, getattr(self, name)))
        object.__setattr__(self, "rope_dim", size("rope_dim", self.rope_dim, minimum=0))
        object.__setattr__(self, "rope_base", number("rope_base", self.rope_base, low=1.0, low_ok=False,
                                                     hint="rope_theta, 10000 in RoFormer"))
        if not 0 <= self.rope_dim <= self.indexer_head_dim or self.rope_dim % 2:
            raise ValueError(f"rope_dim={self.rope_dim!r} must be even and from 0 to indexer_head_dim="
                             f"{self.indexer_head_dim} (RoPE rotates pairs of features)")


class LightningIndexer(nn.Module):
    """One layer's lightning indexer, DeepSeek-V3.2's form: ``I[t, s] = sum_h w[t, h] ReLU(q_h[t] . k[s] / sqrt(Di))``.

    From the block's normalised input ``x`` (the input of its attention), as ``transformers``'
    ``DeepseekV32Indexer`` computes it:

    * queries: ``Hi`` heads of ``Di`` features, ``q = x W_q``;
    * keys: one per position, shared by the heads, ``k = LayerNorm(x W_k)``;
    * positions: RoPE on the first ``rope_dim`` features of each query and key (half-split, the rotated part first,
      as DeepSeek-V3.2's indexer does; the text model's attention is rotated the same way), the rest unrotated;
    * per-head weights from the same input, ``w = x W_w * Hi ** -0.5``;
    * no biases; the scores are :func:`lessons_src.sparse_selection.lightning_indexer_scores`.

    What is left out of DeepSeek-V3.2's indexer, and why: its query comes from the attention's low-rank query
    latent (``W_q`` applied to ``q_a_layernorm(q_a_proj(x))``), and the text model has no low-rank query, so ``W_q``
    reads ``x`` itself; the Hadamard rotation and the FP8 keys are left out because they change speed and storage,
    not the ranking (the rotation is orthogonal: it keeps every dot product); and the sizes are the text model's
    scale, not DeepSeek-V3.2's (``Hi = 64``, ``Di = 128``, 64 of them rotated, at ``D = 7168``).

    Shapes:
        x: ``(B, T, D)``; returns scores ``(B, T, T)`` (causality not applied: :func:`top_k_mask` applies it).

    Example:
        >>> scores = LightningIndexer(IndexerConfig(d_model=8, indexer_heads=2, indexer_head_dim=4, rope_dim=2))(
        ...     torch.randn(1, 5, 8))
        >>> tuple(scores.shape)
        (1, 5, 5)
    """

    def __init__(self, cfg: IndexerConfig) -> None:
        super().__init__()
        instance("cfg", cfg, IndexerConfig, "an IndexerConfig")
        self.cfg = cfg
        Hi, Di = cfg.indexer_heads, cfg.indexer_head_dim
        self.wq = nn.Linear(cfg.d_model, Hi * Di, bias=False)
        self.wk = nn.Linear(cfg.d_model, Di, bias=False)
        self.k_norm = nn.LayerNorm(Di, eps=1e-6)  # as DeepSeek-V3.2's
        self.weights_proj = nn.Linear(cfg.d_model, Hi, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        cfg = self.cfg
        tensor("x", x, ndim=3, shape=f"(B, T, d_model={cfg.d_model})")
        if x.ndim != 3 or x.shape[-1] != cfg.d_model:
            raise ValueError(f"x must be (B, T, D) with D = d_model = {cfg.d_model}; got {tuple(x.shape)}")
        B, T, _ = x.shape
        Hi, Di, R = cfg.indexer_heads, cfg.indexer_head_dim, cfg.rope_dim
        q = self.wq(x).view(B, T, Hi, Di).transpose(1, 2)  # (B, Hi, T, Di)
        k = self.k_norm(self.wk(x))  # (B, T, Di): one key per position, shared by the heads
        if R:
            cos, sin = rope_cos_sin(torch.arange(T, device=x.device), R, base=cfg.rope_base)  # (T, R)
            q = torch.cat([apply_rope(q[..., :R], cos, sin), q[..., R:]], dim=-1)  # (B, Hi, T, Di)
            k = torch.cat([apply_rope(k[..., :R], cos, sin), k[..., R:]], dim=-1)  # (B, T, Di)
        w = self.weights_proj(x).transpose(1, 2) * Hi**-0.5  # (B, Hi, T)
        return lightning_indexer_scores(q, k, w)  # (B, T, T)


class TextIndexer(nn.Module):
    """One :class:`LightningIndexer` per layer of the text model; ``indexer.layers[i]`` ranks layer ``i``'s keys.

    Example:
        >>> cfg = IndexerConfig(d_model=8, num_layers=2, indexer_heads=2, indexer_head_dim=4, rope_dim=2)
        >>> indexer = TextIndexer(cfg)
        >>> len(indexer.layers), sum(p.numel() for p in indexer.parameters())
        (2, 240)
    """

    def __init__(self, cfg: IndexerConfig) -> None:
        super().__init__()
        instance("cfg", cfg, IndexerConfig, "an IndexerConfig")
        self.cfg = cfg
        self.layers = nn.ModuleList(LightningIndexer(cfg) for _ in range(cfg.num_layers))

    def layer(self, i: int) -> LightningIndexer:
        """Layer ``i``'s indexer."""
        return cast("LightningIndexer", self.layers[i])

    def check_state(self, state: dict[str, Tensor]) -> None:
        """Raise a ValueError naming every missing, unexpected or wrongly shaped tensor of ``state``.

        Raises:
            ValueError: ``layers.0.wq.weight has shape (32, 128); this indexer (d_model=128, indexer_heads=4,
                indexer_head_dim=16) needs (64, 128)``, and likewise for the other tensors.
        """
        want = {k: tuple(v.shape) for k, v in self.state_dict().items()}
        c = self.cfg
        sizes = (f"d_model={c.d_model}, num_layers={c.num_layers}, indexer_heads={c.indexer_heads}, "
                 f"indexer_head_dim={c.indexer_head_dim}")
        problems = [f"{k} is missing" for k in want if k not in state]
        problems += [f"{k} is not a tensor of this indexer" for k in state if k not in want]
        problems += [f"{k} has shape {tuple(state[k].shape)}, needs {shape}" for k, shape in want.items()
                     if k in state and tuple(state[k].shape) != shape]
        if problems:
            raise ValueError(f"weights that do not fit an indexer with {sizes}: {'; '.join(problems)}")

    def save(self, path: str | Path, metadata: dict[str, str] | None = None,
             dtype: torch.dtype = torch.float16) -> None:
        """Write the weights (as ``dtype``) and the config (JSON metadata) to a safetensors file."""
        with requires_extra("toy"):
            from safetensors.torch import save_file

        meta = {"config": json.dumps(asdict(self.cfg), sort_keys=True), **(metadata or {})}
        save_file({k: v.detach().to(dtype).contiguous() for k, v in self.state_dict().items()}, str(path),
                  metadata=meta)

    @classmethod
    def load(cls, path: str | Path) -> TextIndexer:
        """Read a file written by :meth:`save` into a float32 indexer in eval mode.

        Raises:
            ValueError: if the file's tensors do not have the shapes its config gives (:meth:`check_state`).
        """
        with requires_extra("toy"):
            from safetensors import safe_open
            from safetensors.torch import load_file

        with safe_open(str(path), "pt") as f:
            meta = f.metadata()
        indexer = cls(IndexerConfig(**json.loads(meta["config"])))
        state = {k: v.float() for k, v in load_file(str(path)).items()}
        indexer.check_state(state)
        indexer.load_state_dict(state)
        return indexer.eval()


def load_text_indexer(path: str | Path | None = None) -> TextIndexer:
    """The committed indexer fitted to the committed text model (``make train-indexer``), or the one at ``path``."""
    if path is not None:
        instance("path", path, str | PathLike, "a file path (str or pathlib.Path) or None")
        return TextIndexer.load(path)
    with resources.as_file(artifact(INDEXER_CHECKPOINT)) as file:
        return TextIndexer.load(file)


def read_indexer_log() -> dict[str, Any]:
    """The committed log of the indexer's fit: settings, sizes, the KL curve, CPU seconds and the results against k."""
    log: dict[str, Any] = read_artifact_json(INDEXER_LOG)
    return log


def indexer_fit_table(log: dict[str, Any], top_k: Sequence[int]) -> str:
    """The fitted indexer against the true top-k, from the log (:func:`read_indexer_log`), as a printed table: for
    each ``k`` of ``top_k``, the loss with each query's ``k`` keys of highest true weight, with the ``k`` keys the
    indexer picks, and the share of the true top-k the indexer finds (its recall).

    Example:
        >>> print(indexer_fit_table(read_indexer_log(), [1, 8]).splitlines()[0])
         k  true top-k  indexer  recall
    """
    instance("log", log, dict, "the indexer's log as read_indexer_log() returns it")
    if isinstance(top_k, str) or not isinstance(top_k, list | tuple):
        raise TypeError(f"top_k must be a list of key counts, such as [1, 8]; got {top_k!r}")
    top_k = [size("top_k", k) for k in top_k]
    results = log["results"]
    logged = [t["top_k"] for t in results["true"]]
    if missing := [k for k in top_k if k not in logged]:
        raise ValueError(f"the log has no result for top_k {missing}; it has {logged}")
    rows = [[t["top_k"], f"{t['loss']:.3f}", f"{f['loss']:.3f}", f"{f['recall']:.2f}"]
            for t, f in zip(results["true"], results["indexer"], strict=True) if t["top_k"] in top_k]
    return fmt_table(["k", "true top-k", "indexer", "recall"], rows)


@torch.no_grad()
def attention_targets(model: TextGPT, tokens: Tensor) -> list[tuple[Tensor, Tensor]]:
    """Per layer of the dense ``model``: its attention's normalised input and its distribution over the keys.

    The distribution is DeepSeek-V3.2's target for its indexer: the heads' attention weights summed and
    L1-normalised per query (each head's row sums to 1, so it is their mean).

    Shapes:
        tokens: ``(B, T)``; returns, per layer, ``(B, T, D)`` and ``(B, T, T)`` (zero above the diagonal).
    """
    _text_model(model)
    tensor("tokens", tokens, ndim=2, shape="(B, T) of byte ids", dtype="integer")
    model._check_tokens(tokens)
    x = model.embed(tokens)  # (B, T, D)
    out = []
    for block in cast("list[Block]", list(model.blocks)):
        normed = block.ln1(x)  # (B, T, D): what the attention and the indexer read
        x, weights = block(x, need_weights=True)  # weights (B, H, T, T)
        assert weights is not None
        total = weights.sum(dim=1)  # (B, T, T)
        out.append((normed, total / total.sum(dim=-1, keepdim=True)))
    return out


def _text_model(model: object) -> None:
    from .text_model import TextGPT

    instance("model", model, TextGPT, "a TextGPT (lessons_src.lab.text_model)")


def indexer_kl(scores: Tensor, target: Tensor) -> Tensor:
    """``KL(target || softmax(scores))`` per query over the keys it sees, in nats: the indexer's warm-up loss.

    The softmax runs over each query's causal keys only (bottom-right aligned); ``target`` is a distribution over
    those keys (:func:`attention_targets`).

    Shapes:
        scores, target: ``(B, T, S)``; returns ``(B, T)``.

    Raises:
        ValueError: if the shapes differ or are not ``(B, T, S)``.

    Example:
        >>> target = torch.tensor([[[1.0, 0.0], [0.5, 0.5]]])
        >>> indexer_kl(torch.tensor([[[0.0, 9.0], [0.0, 0.0]]]), target).tolist()  # the future key is ignored
        [[0.0, 0.0]]
    """
    tensor("scores", scores, ndim=3, shape="(B, T, S)")
    tensor("target", target, ndim=3, shape="(B, T, S)")
    if scores.ndim != 3 or scores.shape != target.shape:
        raise ValueError(f"scores and target must both be (B, T, S); got {tuple(scores.shape)} and "
                         f"{tuple(target.shape)}")
    visible = causal_mask(scores.shape[1], scores.shape[2], device=scores.device)  # (T, S)
    log_q = torch.log_softmax(scores.float().masked_fill(~visible, float("-inf")), dim=-1)
    p = target.float()
    return (torch.xlogy(p, p) - p * log_q.masked_fill(~visible, 0.0)).sum(dim=-1)  # (B, T)


class TopKResult(NamedTuple):
    """The text model with each query restricted to its ``top_k`` keys: the loss and the attention weight kept."""

    top_k: int
    loss: float  # mean next-byte cross-entropy, nats
    weight_kept: float  # mean over layers, heads and queries of the dense attention weight on the kept keys
    recall: float = 1.0  # share of the true top-k keys (by the heads' mean weight) that the ranking kept


@torch.no_grad()
def text_model_top_k(model: TextGPT, windows: Tensor, top_k: int, indexer: TextIndexer | None = None) -> TopKResult:
    """Run ``model`` with each query attending only to its ``top_k`` keys, ranked by the true attention weights
    or, given an ``indexer``, by its scores.

    The true ranking is the upper bound an indexer tries to reach: each layer computes its dense attention weights,
    averages them over the heads and keeps each query's ``top_k`` best keys for all of them (one selection per
    layer, shared by the heads, as DeepSeek-V3.2's indexer picks), then attends over that selection only. With
    ``indexer``, layer ``i`` keeps the ``top_k`` keys ``indexer.layers[i]`` scores highest on the layer's normalised
    input instead; ``recall`` is then the share of the true ranking's picks it kept (over every layer and query,
    so queries that see at most ``top_k`` keys count as fully recalled).

    Shapes:
        windows: ``(B, T + 1)`` byte ids; the loss predicts ``windows[:, 1:]``.

    Raises:
        ValueError: if ``indexer`` has another width or number of layers than ``model``.
    """
    import torch.nn.functional as F

    _text_model(model)
    tensor("windows", windows, ndim=2, shape="(B, T + 1) of byte ids", dtype="integer")
    top_k = size("top_k", top_k)
    if indexer is not None:
        instance("indexer", indexer, TextIndexer, "a TextIndexer or None")
    if indexer is not None and (indexer.cfg.d_model, indexer.cfg.num_layers) != (model.cfg.d_model,
                                                                                  model.cfg.num_layers):
        raise ValueError(f"the indexer has d_model={indexer.cfg.d_model}, num_layers={indexer.cfg.num_layers}; "
                         f"the model d_model={model.cfg.d_model}, num_layers={model.cfg.num_layers}")
    tokens = windows[:, :-1]
    cos, sin = model._rotations(tokens)
    x = model.embed(tokens)
    kept, recalled = [], []
    for i, block in enumerate(cast("list[Block]", list(model.blocks))):
        B, T, D = x.shape
        q, k, v = block.queries_keys_values(x, cos, sin)  # (B, H, T, E)
        dense = attention(q, k, v, is_causal=True, implementation="eager").weights  # (B, H, T, T)
        assert dense is not None
        best = top_k_mask(dense.mean(dim=1), top_k)  # (B, 1, T, T): the heads' mean weight ranks the keys
        keep = best if indexer is None else top_k_mask(indexer.layer(i)(block.ln1(x)), top_k)  # (B, 1, T, T)
        kept.append((dense * keep).sum(-1).mean())
        recalled.append((keep & best).sum() / best.sum())
        out = attention(q, k, v, attn_mask=keep).output  # keep is within causality already
        x = x + block.attn.out_proj(out.transpose(1, 2).reshape(B, T, D))
        x = x + block.mlp(block.ln2(x))
    logits = model.unembed(model.ln_f(x))
    loss = F.cross_entropy(logits.transpose(1, 2), windows[:, 1:])
    return TopKResult(top_k, float(loss), float(torch.stack(kept).mean()), float(torch.stack(recalled).mean()))


def selection_costs(cfg: ModelConfig, context: int, *, cache_bytes: int = 2, index_bytes: int = 1) -> dict[str, int]:
    """One decoding step's attention FLOPs and bytes read per layer, dense against a lightning indexer's top-k.

    For an MLA model with an indexer (DeepSeek-V3.2): dense attention reads the whole latent cache, ``S`` rows of
    ``C + R`` numbers, and spends ``2 H S (2C + R)`` FLOPs (absorbed: each head's query against each row's
    ``C + R`` numbers, then the weighted sum of the ``C``-wide latents). The indexer reads ``S`` keys of ``Di``
    numbers and spends ``2 Hi (Di + 1) S`` FLOPs (each head's dot products, then the heads' weighted sum: its
    quadratic part, over a whole sequence); attention then runs over
    ``top_k`` rows only. ``cache_bytes`` per latent number (bfloat16: 2), ``index_bytes`` per indexer key number
    (DeepSeek stores them in FP8: 1).

    Raises:
        ValueError: if the model has no MLA or no indexer, or ``context`` is below 1.

    Example:
        >>> from lessons_src.lab.configs import load_configs
        >>> c = selection_costs(load_configs()["DeepSeek-V3.2"], 131072)
        >>> round(c["dense_flops"] / c["sparse_flops"], 1), round(c["dense_bytes"] / c["sparse_bytes"], 1)
        (13.3, 7.9)
    """
    context = _check_costs(cfg, context, cache_bytes=cache_bytes, index_bytes=index_bytes)
    if not cfg.mla or not cfg.sparse:
        raise ValueError(f"{cfg.name} has no MLA latent or no lightning indexer (mla={cfg.mla}, sparse={cfg.sparse})")
    H, C, R = cfg.num_heads, cfg.mla["kv_latent_dim"], cfg.mla["rope_dim"]
    Hi, Di, top_k = cfg.sparse["indexer_heads"], cfg.sparse["indexer_head_dim"], cfg.sparse["top_k"]
    picked = min(top_k, context)
    attend = 2 * H * (2 * C + R)  # FLOPs per row attended
    return {
        "dense_flops": attend * context,
        "indexer_flops": 2 * Hi * (Di + 1) * context,
        "sparse_flops": 2 * Hi * (Di + 1) * context + attend * picked,
        "dense_bytes": context * (C + R) * cache_bytes,
        "indexer_bytes": context * Di * index_bytes,
        "sparse_bytes": context * Di * index_bytes + picked * (C + R) * cache_bytes,
    }


def native_sparse_costs(cfg: ModelConfig, context: int, *, cache_bytes: int = 2) -> dict[str, int]:
    """One decoding step's attention FLOPs and bytes read per layer: NSA's three branches against dense GQA.

    Dense attention reads every position's key and value for each of the ``K`` KV heads and spends
    ``2 H (E + Ev)`` FLOPs per position (each head's dot product, then its share of the weighted sum). NSA
    (Yuan et al. 2025, arXiv:2502.11089, equation 6) attends over ``(t - l) // d + 1`` pooled blocks, the
    ``n`` selected blocks of ``l'`` positions and the last ``w`` positions, each branch with keys and values of
    its own. The selection's own cost is the pooled branch (it reads every pooled key and its weights rank the
    blocks) plus summing those weights over each group's heads (``H`` additions per pooled key); the MLP that pools
    a block runs once per ``d`` new positions and is left out. ``indexer_*`` holds that selection cost.

    Raises:
        ValueError: if the model has no NSA layers, or ``context`` is below 1.

    Example:
        >>> from lessons_src.lab.configs import load_configs
        >>> c = native_sparse_costs(load_configs()["NSA 27B"], 65536)
        >>> round(c["dense_flops"] / c["sparse_flops"], 1)
        11.6
    """
    context = _check_costs(cfg, context, cache_bytes=cache_bytes)
    nsa = cfg.native_sparse
    if not nsa:
        raise ValueError(f"{cfg.name} has no NSA layers (native_sparse={nsa})")
    H, K, E, Ev = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.value_dim
    t, l, d = context, nsa["compress_block"], nsa["compress_stride"]
    blocks = (t - l) // d + 1 if t >= l else 0
    rows = blocks + min(nsa["selected_blocks"] * nsa["select_block"], t) + min(nsa["window"], t)
    flops_per_row, bytes_per_row = 2 * H * (E + Ev), K * (E + Ev) * cache_bytes
    return {
        "dense_flops": flops_per_row * t,
        "indexer_flops": (flops_per_row + H) * blocks,
        "sparse_flops": flops_per_row * rows + H * blocks,
        "dense_bytes": bytes_per_row * t,
        "indexer_bytes": bytes_per_row * blocks,
        "sparse_bytes": bytes_per_row * rows,
    }


def compressed_costs(cfg: ModelConfig, context: int, kind: str = "compressed_sparse", *, cache_bytes: int = 2,
                     index_bytes: int = 1) -> dict[str, int]:
    """One decoding step's attention FLOPs and bytes read per layer: a DeepSeek-V4 layer against dense attention.

    DeepSeek-V4 keeps one tensor per position as key and value (one KV head of ``E`` numbers), so dense attention
    reads ``E`` numbers per position and spends ``4 H E`` FLOPs on it. A ``compressed_sparse`` layer pools every
    ``m = compress[kind]`` positions into one entry, a lightning indexer (``Hi`` heads of ``Di``) scores every
    entry and attention runs over its ``top_k`` best and the window of recent positions; a
    ``heavily_compressed`` layer attends to every pooled entry and the window, with no indexer. The pooling runs
    once per ``m`` new positions and is left out. ``indexer_*`` holds the indexer's cost.

    Raises:
        ValueError: if the model has no layers of ``kind``, or ``context`` is below 1.

    Example:
        >>> from lessons_src.lab.configs import load_configs
        >>> c = compressed_costs(load_configs()["DeepSeek-V4-Flash"], 131072)
        >>> round(c["dense_bytes"] / c["sparse_bytes"], 1)
        27.7
    """
    context = _check_costs(cfg, context, cache_bytes=cache_bytes, index_bytes=index_bytes)
    choice("kind", kind, ("compressed_sparse", "heavily_compressed"))
    rate = (cfg.compress or {}).get(kind)
    if rate is None or kind not in cfg.layer_kinds():
        raise ValueError(f"{cfg.name} has no {kind!r} layers (its kinds: {sorted(set(cfg.layer_kinds()))})")
    H, E = cfg.num_heads, cfg.head_dim
    entries, window = context // rate, min(cfg.sliding_window or 0, context)
    indexer_flops = indexer_bytes = 0
    attended = entries
    if kind == "compressed_sparse":
        sparse = cfg.sparse or {}
        Hi, Di = sparse["indexer_heads"], sparse["indexer_head_dim"]
        indexer_flops, indexer_bytes = 2 * Hi * (Di + 1) * entries, entries * Di * index_bytes
        attended = min(sparse["top_k"], entries)
    rows = attended + window
    return {
        "dense_flops": 4 * H * E * context,
        "indexer_flops": indexer_flops,
        "sparse_flops": indexer_flops + 4 * H * E * rows,
        "dense_bytes": E * cache_bytes * context,
        "indexer_bytes": indexer_bytes,
        "sparse_bytes": indexer_bytes + E * cache_bytes * rows,
    }


def _check_costs(cfg: object, context: object, **bytes_per_number: object) -> int:
    """The checks the cost functions share: a model config, a context in tokens, bytes per stored number."""
    from .configs import ModelConfig

    instance("cfg", cfg, ModelConfig, "a ModelConfig (lessons_src.lab.configs.load_configs())")
    for name, n in bytes_per_number.items():
        size(name, n, hint="bytes per stored number")
    return size("context", context, hint="tokens")
