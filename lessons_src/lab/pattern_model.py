"""A small decoder whose layers follow a pattern: global, sliding-window, chunked and NoPE layers, some sharing KV.

The open models of 2025-26 mix layer types: gpt-oss alternates 128-token windows with global layers, Gemma 3
runs five local layers per global one, OLMo 3 three per global one, Llama 4 attends within chunks on three
layers of four and leaves the fourth without positions (NoPE), and Gemma 4's last layers reuse the keys and
values of an earlier layer of their type instead of computing their own. A pattern is a list of
:class:`LayerType`, one per layer; :func:`gpt_oss_pattern`, :func:`gemma3_pattern`, :func:`olmo3_pattern`,
:func:`llama4_pattern` and :func:`share_kv` write the shipping models' (the tests compare them with
``transformers``' configs and the masks its models build).

Each layer type needs its own cache (:meth:`PatternGPT.make_caches`): a global layer every position
(:class:`~lessons_src.kv_cache.KVCache`), a window of ``W`` the last ``W``
(:class:`~lessons_src.kv_cache.RollingKVCache`), a chunk of ``C`` the current chunk
(:class:`~lessons_src.kv_cache.ChunkedKVCache`), and a layer that shares none: it attends to what its source
layer attended to in the same step. Decoding with these caches equals the full pass, token by token and in
blocks (the tests check every type and pattern). A sharing layer computes only its queries
(:class:`SharedKVAttention`): it has no key or value projection and no key norm, as Gemma 4's consumer
layers build none.

Why here, in ``lab``, and not in the core: the decoder needs the attention layer, the masks, the caches,
the pieces and RoPE, five core files where a core file may need three; and its MLP, norms and embeddings are
a toy's. What a reader copies for a model of mixed layers is in the core: the chunk mask
(:func:`lessons_src.masks.chunk_mask`, through ``attention(chunk=)``), the caches, and the pieces
(:class:`~lessons_src.mechanisms.Rotary`, :class:`~lessons_src.mechanisms.NoPETemperature`); this file shows
how a decoder names them per layer.

References:
    OpenAI, "gpt-oss-120b & gpt-oss-20b Model Card", 2025 (arXiv:2508.10925): alternating banded and dense layers.
    Gemma Team, "Gemma 3 Technical Report", 2025 (arXiv:2503.19786): five local layers per global one.
    Team OLMo, "Olmo 3", 2025: three sliding-window layers per global one.
    Meta, Llama 4 model code (``llama_models/llama4/model.py``): chunked attention and NoPE layers.
    Brandon et al., "Reducing Transformer Key-Value Cache Size with Cross-Layer Attention", 2024
    (arXiv:2405.12981): sharing keys and values across layers, as Gemma 4's last layers do.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, NamedTuple

import torch
from torch import Tensor, nn

from .._checks import choice, divisors, flag, instance, number, positive, size, tensor
from ..functional import attention
from ..kv_cache import ChunkedKVCache, KVCache, LayerCache, RollingKVCache
from ..layer import MultiHeadAttention
from ..masks import MaskRule, at_positions, causal, same_chunk, sliding_window
from ..mechanisms import NoPETemperature, PerHeadRMSNorm, Rotary

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..masks import MaskLike

__all__ = [
    "LayerType",
    "PatternConfig",
    "PatternGPT",
    "SharedKVAttention",
    "check_pattern",
    "gemma3_pattern",
    "gpt_oss_pattern",
    "llama4_pattern",
    "olmo3_pattern",
    "share_kv",
]

KINDS = ("global", "window", "chunk")


@dataclass(frozen=True)
class LayerType:
    """One layer's attention: which keys it sees, whether it has positions, and whose keys and values it uses.

    Attributes:
        kind: ``"global"`` (every earlier key), ``"window"`` (the last ``size``) or ``"chunk"`` (its chunk of
            ``size``).
        size: the window ``W`` or chunk ``C``; ``None`` for a global layer.
        rope: rotary positions; ``False`` for a NoPE layer.
        shares: the index of an earlier layer whose keys and values this one reuses (same kind, size and
            positions), or ``None`` for a layer that computes its own.

    Raises:
        ValueError: for an unknown kind, a window or chunk without a positive size, a size on a global layer,
            or a negative ``shares``.

    Example:
        >>> LayerType("window", 128), LayerType("global", rope=False).name
        (LayerType(kind='window', size=128, rope=True, shares=None), 'nope')
    """

    kind: str = "global"
    size: int | None = None
    rope: bool = True
    shares: int | None = None

    def __post_init__(self) -> None:
        choice("kind", self.kind, KINDS)
        if self.kind == "global" and self.size is not None:
            raise ValueError(f"a global layer sees every key: its size must be None; got size={self.size} (use "
                             "kind='window' or 'chunk')")
        if self.kind != "global":
            object.__setattr__(self, "size", size("size", self.size, hint=f"positions of a {self.kind}"))
        flag("rope", self.rope)
        if self.shares is not None:
            object.__setattr__(self, "shares", size("shares", self.shares, minimum=0, hint="an earlier layer's index"))

    @property
    def name(self) -> str:
        """``"global"``, ``"nope"``, ``"window:W"`` or ``"chunk:C"`` (sharing aside)."""
        if self.kind == "global":
            return "global" if self.rope else "nope"
        return f"{self.kind}:{self.size}" + ("" if self.rope else ":nope")


def check_pattern(pattern: Sequence[LayerType], num_layers: int) -> tuple[LayerType, ...]:
    """``pattern`` as a tuple, or an error naming what is wrong: its length, or a layer that shares badly.

    A sharing layer must point backwards, at a layer that computes its own keys and values and has the same
    kind, size and positions (its cache holds exactly what the sharer needs).

    Raises:
        TypeError: if an entry is not a :class:`LayerType`.
        ValueError: if ``len(pattern) != num_layers``, or a layer shares itself, a later layer, a sharing
            layer or a layer of another type.

    Example:
        >>> len(check_pattern(gpt_oss_pattern(4), 4))
        4
    """
    pattern = _layer_types(pattern)
    num_layers = size("num_layers", num_layers)
    if len(pattern) != num_layers:
        raise ValueError(f"the pattern has {len(pattern)} layer types but the model has num_layers={num_layers}; "
                         "the pattern must give one per layer")
    for i, t in enumerate(pattern):
        if t.shares is None:
            continue
        j = t.shares
        if j >= i:
            where = "itself" if j == i else f"a later layer ({j})"
            raise ValueError(f"layer {i} shares the keys and values of {where}; it can only reuse an earlier "
                             f"layer's, one of 0..{i - 1}")
        source = pattern[j]
        if source.shares is not None:
            raise ValueError(f"layer {i} shares layer {j}, which shares layer {source.shares}: point it at "
                             f"shares={source.shares}")
        if (source.kind, source.size, source.rope) != (t.kind, t.size, t.rope):
            raise ValueError(f"layer {i} ({t.name}) shares layer {j} ({source.name}): a layer reuses only the keys "
                             "and values of a layer of its own type")
    return pattern


def _layer_types(pattern: object) -> tuple[LayerType, ...]:
    """``pattern`` as a tuple of :class:`LayerType`, or a TypeError naming the first entry that is not one."""
    if isinstance(pattern, str) or not isinstance(pattern, list | tuple):
        raise TypeError(f"pattern must be a list of LayerType; got {type(pattern).__name__}")
    bad = [(i, t) for i, t in enumerate(pattern) if not isinstance(t, LayerType)]
    if bad:
        raise TypeError(f"pattern must be a list of LayerType; entry {bad[0][0]} is {bad[0][1]!r}")
    return tuple(pattern)


def gpt_oss_pattern(num_layers: int, *, window: int = 128) -> tuple[LayerType, ...]:
    """gpt-oss: a window of ``window`` (128) on even layers, global attention on odd ones.

    Example:
        >>> [t.name for t in gpt_oss_pattern(4)]
        ['window:128', 'global', 'window:128', 'global']
    """
    num_layers, window = size("num_layers", num_layers), size("window", window)
    return tuple(LayerType("window", window) if i % 2 == 0 else LayerType() for i in range(num_layers))


def gemma3_pattern(num_layers: int, *, window: int = 1024, every: int = 6) -> tuple[LayerType, ...]:
    """Gemma 3: every ``every``-th layer (the 6th, 12th, ...) global, the others a window of ``window`` (1,024).

    Example:
        >>> [t.name for t in gemma3_pattern(6, window=512)]
        ['window:512', 'window:512', 'window:512', 'window:512', 'window:512', 'global']
    """
    num_layers, window, every = size("num_layers", num_layers), size("window", window), size("every", every)
    return tuple(LayerType() if (i + 1) % every == 0 else LayerType("window", window) for i in range(num_layers))


def olmo3_pattern(num_layers: int, *, window: int = 4096) -> tuple[LayerType, ...]:
    """OLMo 3: every fourth layer global, the others a window of ``window`` (4,096).

    Example:
        >>> [t.name for t in olmo3_pattern(4, window=8)]
        ['window:8', 'window:8', 'window:8', 'global']
    """
    return gemma3_pattern(num_layers, window=window, every=4)


def llama4_pattern(num_layers: int, *, chunk: int = 8192, every: int = 4) -> tuple[LayerType, ...]:
    """Llama 4: every ``every``-th layer global without positions (NoPE), the others RoPE within chunks of ``chunk``.

    Example:
        >>> [t.name for t in llama4_pattern(4, chunk=16)]
        ['chunk:16', 'chunk:16', 'chunk:16', 'nope']
    """
    num_layers, chunk, every = size("num_layers", num_layers), size("chunk", chunk), size("every", every)
    return tuple(LayerType(rope=False) if (i + 1) % every == 0 else LayerType("chunk", chunk)
                 for i in range(num_layers))


def share_kv(pattern: Sequence[LayerType], last: int) -> tuple[LayerType, ...]:
    """Gemma 4's rule: the last ``last`` layers reuse the keys and values of the last earlier layer of their type.

    Raises:
        ValueError: if ``last`` is negative or not below the layer count, or a sharing layer's type has no
            earlier layer to share.

    Example:
        >>> [t.shares for t in share_kv(gemma3_pattern(12, window=4), 4)][8:]  # windows share 7, the global 5
        [7, 7, 7, 5]
    """
    pattern = _layer_types(pattern)
    last = size("last", last, minimum=0)
    if not 0 <= last < len(pattern):
        raise ValueError(f"last must be in 0..{len(pattern) - 1} (at least one layer computes keys); got last={last!r}")
    first_shared = len(pattern) - last
    out = list(pattern)
    for i in range(first_shared, len(pattern)):
        kind = (pattern[i].kind, pattern[i].size, pattern[i].rope)
        sources = [j for j in range(first_shared) if (pattern[j].kind, pattern[j].size, pattern[j].rope) == kind]
        if not sources:
            raise ValueError(f"layer {i} ({pattern[i].name}) would share keys and values, but no layer before "
                             f"{first_shared} is of its type")
        out[i] = replace(pattern[i], shares=sources[-1])
    return tuple(out)


@dataclass(frozen=True)
class PatternConfig:
    """Shape of a :class:`PatternGPT`.

    Attributes:
        pattern: one :class:`LayerType` per layer (its length is the layer count).
        vocab_size: token ids.
        d_model: ``D``.
        num_heads: ``H``.
        num_kv_heads: ``K``.
        d_ff: MLP hidden width.
        rope_base: RoPE's wavelength base.
        nope_temperature: ``(floor_scale, attn_scale)`` of Llama 4's query scaling on NoPE layers, or ``None``.
        num_layers: the layer count, checked against the pattern's length (``None``: the pattern's length).
    """

    pattern: tuple[LayerType, ...]
    vocab_size: int = 256
    d_model: int = 32
    num_heads: int = 4
    num_kv_heads: int = 2
    d_ff: int = 64
    rope_base: float = 10000.0
    nope_temperature: tuple[int, float] | None = None
    num_layers: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "pattern", check_pattern(
            self.pattern, len(_layer_types(self.pattern)) if self.num_layers is None else self.num_layers))
        for name in ("vocab_size", "d_model", "num_heads", "num_kv_heads", "d_ff"):
            object.__setattr__(self, name, size(name, getattr(self, name)))
        if self.d_model % self.num_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by num_heads={self.num_heads}; head counts "
                             f"that divide {self.d_model} are {divisors(self.d_model)}: num_heads must be one")
        object.__setattr__(self, "rope_base", number("rope_base", self.rope_base, low=1.0, low_ok=False,
                                                     hint="rope_theta, 10000 in RoFormer"))
        t = self.nope_temperature
        if t is not None and (not isinstance(t, tuple | list) or len(t) != 2):
            raise TypeError(f"nope_temperature must be (floor_scale, attn_scale) or None; got {t!r}")


def _limits(window: int | None, chunk: int | None, positions: Tensor | None = None) -> list[MaskRule]:
    """The rules a sliding-window or chunked layer adds to its mask (lessons_src.masks), measured on the keys'
    ``positions`` when they are given (a draft tree's siblings share one), else on their slots."""
    rules = ([sliding_window(window)] if window is not None else []) + (
        [causal() & same_chunk(chunk)] if chunk is not None else [])
    return rules if positions is None else [at_positions(r, positions) for r in rules]


class _Attended(NamedTuple):
    """What a layer attended to in one step, for the layers that share it: keys, values and how they were masked."""

    k: Tensor
    v: Tensor
    mask: Tensor | None
    is_causal: bool
    window: int | None = None
    chunk: int | None = None


Cache = KVCache | RollingKVCache | ChunkedKVCache | None


class SharedKVAttention(nn.Module):
    """The attention of a layer that reuses an earlier layer's keys and values (Gemma 4's KV sharing): queries only.

    It has ``W_Q`` and ``W_O`` and the query side of its pieces, and no ``W_K``, ``W_V`` or key norm, as Gemma 4
    builds none for such a layer (``transformers`` makes no ``k_proj``, ``v_proj``, ``k_norm`` or ``v_norm`` for
    it). Its queries get the layer's own norm and positions; the keys and values come as the source layer left
    them (normed and rotated once, by the source), with the source's mask, so a shared window stays the
    source's window.

    Args:
        d_model: ``D``.
        num_heads: ``H`` (each head of ``E = D / H`` features).
        qk_norm: the queries' norm, a piece that takes ``k=None`` and has no key weight
            (:class:`~lessons_src.mechanisms.PerHeadRMSNorm` with ``keys=False``), or ``None``.
        rope: the queries' position piece (:class:`~lessons_src.mechanisms.Rotary`,
            :class:`~lessons_src.mechanisms.NoPETemperature`), or ``None``.
        scale: the scores' multiplier; ``None`` for ``1/sqrt(E)`` (Gemma 4: 1).
        bias: add biases to the projections.

    Shapes:
        x: ``(B, T, D)``; k, v: ``(B, K, S, E)`` with ``K`` dividing ``H``; output: ``(B, T, D)``.

    Raises:
        ValueError: if ``num_heads`` does not divide ``d_model``, ``qk_norm`` has a key weight, or a piece was
            made for other sizes.

    Example:
        >>> from lessons_src.mechanisms import PerHeadRMSNorm
        >>> layer = SharedKVAttention(16, 4, qk_norm=PerHeadRMSNorm(4, keys=False))
        >>> k = v = torch.randn(1, 2, 5, 4)  # another layer's keys and values
        >>> layer(torch.randn(1, 5, 16), k, v, start=0, is_causal=True).shape, sorted(layer.state_dict())
        (torch.Size([1, 5, 16]), ['out_proj.weight', 'q_proj.weight', 'qk_norm.q_weight'])
    """

    def __init__(self, d_model: int, num_heads: int, *, qk_norm: nn.Module | None = None,
                 rope: nn.Module | None = None, scale: float | None = None, bias: bool = False) -> None:
        super().__init__()
        d_model, num_heads = size("d_model", d_model), size("num_heads", num_heads)
        if d_model % num_heads:
            raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}; head counts that divide "
                             f"{d_model} are {divisors(d_model)}: num_heads must be one")
        scale = None if scale is None else positive("scale", scale, "None for 1/sqrt(head_dim); Gemma 4: 1.0")
        for name, piece in (("qk_norm", qk_norm), ("rope", rope)):
            if piece is not None:
                instance(name, piece, nn.Module, "an nn.Module piece (see lessons_src.mechanisms) or None")
        bias = flag("bias", bias)
        self.d_model, self.num_heads, self.head_dim, self.scale = d_model, num_heads, d_model // num_heads, scale
        if getattr(qk_norm, "k_weight", None) is not None:
            raise ValueError(f"{type(qk_norm).__name__} has a key weight, but this layer computes no keys: make it "
                             "with keys=False")
        norm_dim = getattr(qk_norm, "head_dim", self.head_dim)
        if norm_dim != self.head_dim:
            raise ValueError(f"qk_norm was made for head_dim={norm_dim} (the layer has {self.head_dim})")
        check = getattr(rope, "check", None)
        if callable(check):  # a position piece made for other sizes: a ValueError naming them
            check(d_model=d_model, num_heads=num_heads, num_kv_heads=num_heads, head_dim=self.head_dim)
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)  # W_Q: the only projection of the input
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)  # W_O
        self.qk_norm, self.rope = qk_norm, rope

    def forward(self, x: Tensor, k: Tensor, v: Tensor, *, start: int, attn_mask: Tensor | None = None,
                is_causal: bool = False, window: int | None = None, chunk: int | None = None) -> Tensor:
        """Attend from ``x``'s queries (tokens ``start ..``) to the given keys and values, with their mask."""
        tensor("x", x, ndim=3, shape=f"(B, T, d_model={self.d_model})")
        tensor("k", k, ndim=4, shape="(B, K, S, E)")
        tensor("v", v, ndim=4, shape="(B, K, S, E)")
        if x.shape[-1] != self.d_model:
            raise ValueError(f"x must be (B, T, d_model={self.d_model}); got shape {tuple(x.shape)}")
        start, is_causal = size("start", start, minimum=0, hint="a position"), flag("is_causal", is_causal)
        window = None if window is None else size("window", window)
        chunk = None if chunk is None else size("chunk", chunk)
        B, T, D = x.shape
        q = self.q_proj(x).view(B, T, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H, T, E)
        if self.qk_norm is not None:
            q, _ = self.qk_norm(q, None)  # the queries only: the keys were normed by their own layer
        if self.rope is not None:
            q, _ = self.rope(q, None, start=start)  # the queries' positions; the keys were rotated once already
        masks = [m for m in (attn_mask, *_limits(window, chunk)) if m is not None]
        out = attention(q, k, v, attn_mask=masks, is_causal=is_causal, scale=self.scale).output  # (B, H, T, E)
        y: Tensor = self.out_proj(out.transpose(1, 2).reshape(B, T, D))  # (B, T, D)
        return y


class PatternBlock(nn.Module):
    """Pre-norm residual block: attention of the layer's type, then a GELU MLP."""

    def __init__(self, cfg: PatternConfig, layer: LayerType) -> None:
        super().__init__()
        E = cfg.d_model // cfg.num_heads
        if layer.rope:
            pos: nn.Module | None = Rotary(E, base=cfg.rope_base)
        elif cfg.nope_temperature is not None:
            floor_scale, attn_scale = cfg.nope_temperature
            pos = NoPETemperature(floor_scale=floor_scale, attn_scale=attn_scale)
        else:
            pos = None
        self.layer = layer
        self.norm1, self.norm2 = nn.RMSNorm(cfg.d_model), nn.RMSNorm(cfg.d_model)
        self.attn: MultiHeadAttention | SharedKVAttention
        if layer.shares is None:
            self.attn = MultiHeadAttention(cfg.d_model, cfg.num_heads, num_kv_heads=cfg.num_kv_heads,
                                           qk_norm=PerHeadRMSNorm(E, offset=1.0), rope=pos)
        else:  # queries only: the keys and values are an earlier layer's
            self.attn = SharedKVAttention(cfg.d_model, cfg.num_heads, qk_norm=PerHeadRMSNorm(E, offset=1.0, keys=False),
                                          rope=pos)
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, cfg.d_ff), nn.GELU(), nn.Linear(cfg.d_ff, cfg.d_model))

    def forward(self, x: Tensor, *, start: int, cache: Cache, shared: _Attended | None, positions: Tensor | None = None,
                attn_mask: MaskLike = None) -> tuple[Tensor, _Attended]:
        """One block on ``x`` (tokens ``start .. start + T - 1``, or at ``positions``); returns the output and what it
        attended to."""
        h = self.norm1(x)  # (B, T, D)
        if isinstance(self.attn, SharedKVAttention):  # a sharing layer: its source's keys, values and mask
            assert shared is not None
            seen = shared
            y = self.attn(h, seen.k, seen.v, start=start, attn_mask=seen.mask, is_causal=seen.is_causal,
                          window=seen.window, chunk=seen.chunk)  # (B, T, D)
        else:
            y, seen = self._attend(self.attn, h, start, cache, positions, attn_mask)
        x = x + y
        return x + self.mlp(self.norm2(x)), seen

    def _attend(self, a: MultiHeadAttention, h: Tensor, start: int, cache: Cache, positions: Tensor | None = None,
                attn_mask: MaskLike = None) -> tuple[Tensor, _Attended]:
        """A layer with keys and values of its own: attend, and return what it attended to for its sharers."""
        B, T, D = h.shape
        kind = self.layer.kind
        q, k, v = a.project_qkv(h)  # (B, H, T, E), 2 x (B, K, T, E)
        assert a.qk_norm is not None
        q, k = a.qk_norm(q, k)
        if a.rope is not None:
            at = {"start": start} if positions is None else {"positions": positions}
            q, k = a.rope(q, k, **at)  # positions start .. start + T - 1, or given (or Llama 4's temperature)
        if a.v_norm is not None:
            v = a.v_norm(v)  # normed once, here: its sharers get them normed
        if cache is None:  # the full pass: the layer's limit through the one mask preparation
            size = self.layer.size
            seen = _Attended(k, v, None, True, window=size if kind == "window" else None,
                             chunk=size if kind == "chunk" else None)
        elif isinstance(cache, LayerCache):  # a global layer: every position so far
            k, v = cache.update(k, v)  # (B, K, S, E) each
            seen = _Attended(k, v, None, True)
        else:  # a rolling or chunked cache: the keys it keeps, and its mask of who may see which
            step = cache.update(k, v)
            seen = _Attended(step.k, step.v, step.mask, False)
        extra = attn_mask if isinstance(attn_mask, list | tuple) else [attn_mask]
        masks = [m for m in (seen.mask, *_limits(seen.window, seen.chunk, positions), *extra) if m is not None]
        out = attention(q, seen.k, seen.v, attn_mask=masks, is_causal=seen.is_causal, scale=a.scale).output
        return a.out_proj(out.transpose(1, 2).reshape(B, T, D)), seen  # (B, T, D)


class PatternGPT(nn.Module):
    """Token embeddings, one :class:`PatternBlock` per layer type of the pattern, a final norm and an unembedding.

    Shapes:
        tokens: ``(B, T)`` ids; returns logits ``(B, T, V)``. With ``caches``, ``T`` new tokens after those cached.

    Example:
        >>> model = PatternGPT(PatternConfig(gpt_oss_pattern(2, window=4)))
        >>> caches = model.make_caches(batch_size=1, max_len=16)
        >>> [type(c).__name__ for c in caches]
        ['RollingKVCache', 'KVCache']
        >>> with torch.no_grad():
        ...     full = model(torch.arange(6)[None])
        ...     steps = torch.cat([model(torch.arange(t, t + 1)[None], caches=caches) for t in range(6)], dim=1)
        >>> torch.allclose(steps, full, atol=1e-5)
        True
    """

    def __init__(self, cfg: PatternConfig) -> None:
        super().__init__()
        instance("cfg", cfg, PatternConfig, "a PatternConfig")
        self.cfg = cfg
        self.pattern = check_pattern(cfg.pattern, len(cfg.pattern) if cfg.num_layers is None else cfg.num_layers)
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(PatternBlock(cfg, t) for t in self.pattern)
        self.norm = nn.RMSNorm(cfg.d_model)
        self.unembed = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)

    def make_caches(self, batch_size: int, max_len: int, *, spare: int = 0, dtype: torch.dtype | None = None,
                    device: torch.device | str | None = None) -> list[Cache]:
        """One cache per layer, of its type: full, rolling (the window, and ``spare`` slots for draft tokens:
        :class:`~lessons_src.kv_cache.RollingKVCache`), chunked (one chunk), or none (sharing)."""
        w = self.unembed.weight
        dtype, device = dtype or w.dtype, device or w.device
        K, E = self.cfg.num_kv_heads, self.cfg.d_model // self.cfg.num_heads
        caches: list[Cache] = []
        for t in self.pattern:
            if t.shares is not None:
                caches.append(None)
            elif t.kind == "global":
                caches.append(KVCache(batch_size, K, E, max_len, dtype=dtype, device=device))
            elif t.kind == "window":
                assert t.size is not None
                caches.append(RollingKVCache(batch_size, K, E, t.size, spare=spare, dtype=dtype, device=device))
            else:
                assert t.size is not None
                caches.append(ChunkedKVCache(batch_size, K, E, t.size, dtype=dtype, device=device))
        return caches

    def forward(self, tokens: Tensor, *, caches: list[Cache] | None = None, positions: Tensor | None = None,
                attn_mask: MaskLike = None) -> Tensor:
        """Logits of ``tokens``, after the cached ones if ``caches`` are given.

        Args:
            tokens: ``(B, T)`` ids.
            caches: one cache per layer (:meth:`make_caches`); the tokens go after what they hold.
            positions: ``(B, T)``, each token's position, rotating its query and key and, without caches,
                measuring the windows and chunks (a draft tree's siblings share a position:
                :func:`lessons_src.masks.tree_positions`); ``None``: ``cached .. cached + T - 1``.
            attn_mask: a mask every layer adds to its own (a rule of :mod:`lessons_src.masks` such as
                ``draft_tree(parents, start=P)``, or a tensor), over the key slots.

        Raises:
            ValueError: on caches that are not one per layer, or ``positions`` or ``attn_mask`` given with a layer
                that shares keys and values, or ``positions`` with a rolling or chunked cache (which place keys by
                their own count).
        """
        tensor("tokens", tokens, ndim=2, shape="(B, T) of token ids", dtype="integer")
        if caches is not None and not isinstance(caches, list):
            raise TypeError(f"caches must be a list, one cache per layer (make_caches()); got {type(caches).__name__}")
        if caches is not None and len(caches) != len(self.blocks):
            raise ValueError(f"caches has {len(caches)} entries for {len(self.blocks)} layers; use make_caches()")
        start = 0 if caches is None else next(c.length for c in caches if c is not None)
        if (positions is not None or attn_mask is not None) and any(t.shares is not None for t in self.pattern):
            raise ValueError("positions and attn_mask are for layers with keys of their own; this pattern has "
                             "layers that share keys and values (share_kv): use one without")
        if positions is not None and caches is not None and any(
                not isinstance(c, LayerCache | None) for c in caches):
            raise ValueError("positions with a rolling or chunked cache: those caches place keys by their own count "
                             "of positions; decode in order (positions=None), or without caches")
        x = self.embed(tokens)  # (B, T, D)
        seen: list[_Attended] = []
        for i, block in enumerate(self.blocks):
            t = self.pattern[i]
            shared = None if t.shares is None else seen[t.shares]
            x, attended = block(x, start=start, cache=None if caches is None else caches[i], shared=shared,
                                positions=positions, attn_mask=attn_mask)
            seen.append(attended)
        logits: Tensor = self.unembed(self.norm(x))  # (B, T, V)
        return logits
