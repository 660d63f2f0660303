"""The multi-head attention layer: project to heads, attend with :func:`lessons_src.functional.attention`, mix.

``MultiHeadAttention`` covers MHA, GQA and MQA (``num_kv_heads``), self- and cross-attention, a
:class:`lessons_src.kv_cache.KVCache` for decoding, and the pieces today's models add around the kernel
(QK-norm, rotary positions, output gates, a value norm, from :mod:`lessons_src.mechanisms`), given by name.
``HeadWeights`` views its projections per head.

Needs ``functional.py`` (and what it needs), ``kv_cache.py`` and ``_checks.py``.

References:
    Vaswani et al., "Attention Is All You Need", NeurIPS 2017 (arXiv:1706.03762), section 3.2.2.
    Ainslie et al., "GQA: Training Generalized Multi-Query Transformer Models from Multi-Head
    Checkpoints", EMNLP 2023 (arXiv:2305.13245).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._checks import autocast_on, divisors, size
from ._checks import positions as check_positions
from .functional import ATTENTION_FUNCTIONS, check_implementation, check_supports
from .kv_cache import LayerCache
from .masks import prepare_mask
from .score_mods import check_softcap

if TYPE_CHECKING:
    from .masks import MaskLike

__all__ = ["HeadWeights", "MultiHeadAttention"]


class HeadWeights(NamedTuple):
    """Per-head views of a :class:`MultiHeadAttention`'s projection weights (no copies).

    Attributes:
        q: ``(H, E, D)``: head ``h``'s queries are ``x @ q[h].T``.
        k: ``(K, E, D)``: KV head ``g``'s keys are ``context @ k[g].T``.
        v: ``(K, E, D)``: KV head ``g``'s values.
        o: ``(H, D, E)``: head ``h`` adds ``y_h @ o[h].T`` to the output.
    """

    q: Tensor
    k: Tensor
    v: Tensor
    o: Tensor


class MultiHeadAttention(nn.Module):
    """Multi-head attention: split into heads, attend in each, concatenate, mix with ``W_O``.

    Self-attention uses one fused projection for Q, K and V (one matmul instead of three), with rows
    ``[W_Q (H*E); W_K (K*E); W_V (K*E)]``. With ``num_kv_heads == num_heads`` (the default) that is the
    ``(3 * d_model, d_model)`` layout of ``nn.MultiheadAttention``'s ``in_proj_weight``, so weights copy
    across unchanged (:func:`lessons_src.interop.from_torch`). Cross-attention uses the same weights,
    the Q rows on ``x`` and the K/V rows on ``context``.

    Args:
        d_model: model width ``D`` (HF ``hidden_size``, nanoGPT ``n_embd``, PyTorch ``embed_dim``).
        num_heads: number of query heads ``H``; must divide ``d_model``. Each head has ``head_dim = D // H``.
        num_kv_heads: number of key/value heads ``K`` (HF ``num_key_value_heads``); must divide
            ``num_heads``. ``None`` or ``num_heads``: MHA; ``1``: MQA; in between: GQA.
        bias: add biases to the projections.
        dropout: dropout on the attention weights, in training mode only.
        implementation: the attention function :meth:`forward` runs by default, a name in
            :data:`ATTENTION_FUNCTIONS` (``"sdpa"``: the fused kernel). Every implementation accepts the
            same inputs and gives the same answer; :meth:`with_weights` runs ``"eager"``, which returns the weights.
        qk_norm: a QK-norm piece from :mod:`lessons_src.mechanisms` (``PerHeadRMSNorm``,
            ``ProjectionRMSNorm``, ``WeightlessRMSNorm``): ``(q, k) -> (q, k)``, before ``rope``.
        v_norm: a value norm (``ValueRMSNorm``, Gemma 4): ``v -> v``, before the values are cached.
        rope: the layer's position piece, ``(q, k, start=) -> (q, k)``: a :class:`lessons_src.mechanisms.Rotary`
            (rotary positions, partial or scaled), or on a NoPE layer ``None`` or Llama 4's
            :class:`lessons_src.mechanisms.NoPETemperature`; for self-attention (with a cache, the new tokens'
            positions follow the cached ones).
        gate: an output gate (``HeadwiseGate``, ``ElementwiseGate``): ``(x, y) -> y``, each head's output
            gated from the layer's input, before ``W_O``.
        softcap: cap the scaled scores at ``softcap * tanh(s / softcap)`` (Gemma 2 uses 50.0); needs an
            implementation that can, ``"eager"`` or ``"tiled"``.
        sinks: learn one sink logit per head (gpt-oss), a parameter ``sinks`` ``(H,)`` starting at zero.
        scale: the scores' multiplier; ``None`` for ``1/sqrt(head_dim)``. Gemma 4 uses 1, Gemma 2 27B
            ``query_pre_attn_scalar ** -0.5``.

    Shapes:
        x: ``(B, T, D)``; context: ``(B, S, D)``; attn_mask: broadcastable to ``(B, H, T, S)``;
        output: ``(B, T, D)``; weights: ``(B, H, T, S)``. With a cache, ``S`` = cached + ``T``.

    Raises:
        TypeError: if a size is not an int (``8.0`` is not a size), a piece is not an ``nn.Module``, or ``scale``
            is not a number.
        ValueError: if a size is below 1, ``num_heads`` does not divide ``d_model`` or ``num_kv_heads``
            does not divide ``num_heads`` (the messages list the counts that would), a piece was made for
            other sizes, ``softcap`` or ``scale`` is not positive or ``softcap`` comes with
            ``implementation="sdpa"``, and, in :meth:`forward`, on malformed inputs.

    Example:
        >>> mha = MultiHeadAttention(d_model=8, num_heads=2)
        >>> mha(torch.randn(1, 5, 8), is_causal=True).shape
        torch.Size([1, 5, 8])
        >>> MultiHeadAttention(d_model=64, num_heads=8, num_kv_heads=2).n_rep
        4
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        *,
        num_kv_heads: int | None = None,
        bias: bool = False,
        dropout: float = 0.0,
        implementation: str = "sdpa",
        qk_norm: nn.Module | None = None,
        rope: nn.Module | None = None,
        gate: nn.Module | None = None,
        softcap: float | None = None,
        sinks: bool = False,
        v_norm: nn.Module | None = None,
        scale: float | None = None,
    ) -> None:
        super().__init__()
        d_model, num_heads = size("d_model", d_model), size("num_heads", num_heads)
        if num_kv_heads is not None:
            num_kv_heads = size("num_kv_heads", num_kv_heads)
        if not isinstance(bias, bool):
            raise TypeError(f"bias must be True or False; got {bias!r}")
        check_implementation(implementation)
        if d_model % num_heads != 0:
            raise ValueError(
                f"d_model={d_model} is not divisible by num_heads={num_heads}; "
                f"head counts that divide {d_model} are {divisors(d_model)}"
            )
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        if num_kv_heads < 1 or num_heads % num_kv_heads != 0:
            raise ValueError(
                f"num_heads={num_heads} is not a multiple of num_kv_heads={num_kv_heads}; "
                f"valid num_kv_heads for num_heads={num_heads} are {divisors(num_heads)}"
            )
        if isinstance(dropout, bool) or not isinstance(dropout, int | float) or not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be a number in [0, 1); got dropout={dropout!r}")
        self.d_model = d_model
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.n_rep = num_heads // num_kv_heads  # query heads served by each KV head
        self.head_dim = d_model // num_heads
        self.kv_dim = num_kv_heads * self.head_dim  # K * E
        self.dropout = float(dropout)
        self.implementation = implementation  # the default; forward(implementation=...) overrides it
        self.qkv_proj = nn.Linear(d_model, d_model + 2 * self.kv_dim, bias=bias)  # rows: [W_Q; W_K; W_V]
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)  # W_O
        # today's mechanisms (lessons_src.mechanisms): each is absent (None) unless the layer is given it
        sizes = {"d_model": d_model, "num_heads": num_heads, "num_kv_heads": num_kv_heads, "head_dim": self.head_dim}
        for name, piece in (("qk_norm", qk_norm), ("v_norm", v_norm), ("rope", rope), ("gate", gate)):
            if piece is not None and not isinstance(piece, nn.Module):
                raise TypeError(f"{name} must be an nn.Module piece (see lessons_src.mechanisms) or None; "
                                f"got {type(piece).__name__}")
            slot = getattr(piece, "slot", name)
            if slot != name:  # a piece of lessons_src.mechanisms given in another piece's place
                raise TypeError(f"{name} must be a {name} piece; got {type(piece).__name__}, which is a {slot} "
                                f"piece: pass it as {slot}=")
            check = getattr(piece, "check", None)
            if callable(check):
                check(**sizes)  # a piece made for other sizes: a ValueError naming them
        self.qk_norm, self.v_norm, self.rope, self.gate = qk_norm, v_norm, rope, gate
        if scale is not None and (isinstance(scale, bool) or not isinstance(scale, int | float)):
            raise TypeError(f"scale must be a number or None; got {scale!r} of type {type(scale).__name__}")
        if scale is not None and not 0 < scale < math.inf:
            raise ValueError(f"scale must be a finite number above 0, or None for 1/sqrt(head_dim) = "
                             f"{self.head_dim ** -0.5:.4g} (Gemma 4: 1.0); got scale={scale!r}")
        self.scale = None if scale is None else float(scale)  # None: 1/sqrt(E)
        self.softcap = check_softcap(softcap)
        check_supports(implementation, softcap=self.softcap)
        if not isinstance(sinks, bool):
            raise TypeError(f"sinks must be True or False (a learned logit per head, or none); got {sinks!r}")
        self.sinks = nn.Parameter(self.qkv_proj.weight.new_zeros(num_heads)) if sinks else None  # (H,)

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, num_heads={self.num_heads}, num_kv_heads={self.num_kv_heads}, "
            f"head_dim={self.head_dim}" + ("" if self.softcap is None else f", softcap={self.softcap}")
            + ("" if self.scale is None else f", scale={self.scale:g}")
        )

    @property
    def mechanisms(self) -> tuple[str, ...]:
        """The names of the mechanisms this layer has beyond plain attention (``()`` for a plain layer).

        Example:
            >>> MultiHeadAttention(8, 2, sinks=True).mechanisms
            ('sinks',)
        """
        names = ("qk_norm", "v_norm", "rope", "gate", "softcap", "sinks", "scale")
        return tuple(name for name in names if getattr(self, name) is not None)

    def check_plain(self, what: str) -> None:
        """Raise a ValueError naming ``what`` if this layer has a mechanism that ``what`` would silently drop."""
        if self.mechanisms:
            raise ValueError(f"{what} handles plain attention; this layer also has {', '.join(self.mechanisms)}, "
                             "which it would drop: use a layer without them")

    def head_weights(self) -> HeadWeights:
        """Per-head views of ``W_Q``, ``W_K``, ``W_V`` and ``W_O`` (they share storage with the parameters).

        Query head ``h`` uses KV head ``h // n_rep`` (:meth:`kv_head`).

        Example:
            >>> w = MultiHeadAttention(d_model=16, num_heads=4, num_kv_heads=2).head_weights()
            >>> tuple(w.q.shape), tuple(w.k.shape), tuple(w.o.shape)
            ((4, 4, 16), (2, 4, 16), (4, 16, 4))
        """
        D, H, K, E = self.d_model, self.num_heads, self.num_kv_heads, self.head_dim
        w_q, w_k, w_v = torch.split(self.qkv_proj.weight, [D, K * E, K * E], dim=0)  # rows [W_Q; W_K; W_V]
        w_o = self.out_proj.weight.view(D, H, E).transpose(0, 1)  # (H, D, E): columns of W_O per head
        return HeadWeights(w_q.view(H, E, D), w_k.view(K, E, D), w_v.view(K, E, D), w_o)

    def kv_head(self, head: int) -> int:
        """The key/value head that query head ``head`` reads (``head // n_rep``)."""
        head = size("head", head, minimum=0)
        if head >= self.num_heads:
            raise ValueError(f"head must be in 0..{self.num_heads - 1}; got head={head}")
        return head // self.n_rep

    def _split_heads(self, t: Tensor, heads: int) -> Tensor:
        B, L, _ = t.shape
        return t.view(B, L, heads, self.head_dim).transpose(1, 2)  # (B, heads, L, E)

    def project_qkv(self, x: Tensor, context: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """Project to per-head queries, keys and values (no checks; :meth:`forward` checks).

        Shapes:
            x: ``(B, T, D)``, context: ``(B, S, D)``; returns q ``(B, H, T, E)``, k and v ``(B, K, S, E)``.
        """
        D, KE = self.d_model, self.kv_dim
        if context is None:
            q, k, v = self.qkv_proj(x).split([D, KE, KE], dim=-1)  # (B, T, D), 2 x (B, T, K*E): one matmul
        else:
            w, b = self.qkv_proj.weight, self.qkv_proj.bias
            q = F.linear(x, w[:D], None if b is None else b[:D])  # (B, T, D)
            k, v = torch.split(F.linear(context, w[D:], None if b is None else b[D:]), [KE, KE], dim=-1)  # (B, S, K*E)
        H, K = self.num_heads, self.num_kv_heads
        return self._split_heads(q, H), self._split_heads(k, K), self._split_heads(v, K)

    def forward(
        self,
        x: Tensor,
        context: Tensor | None = None,
        *,
        attn_mask: MaskLike = None,
        is_causal: bool = False,
        cache: LayerCache | None = None,
        cache_position: int | None = None,
        positions: Tensor | None = None,
        implementation: str | None = None,
    ) -> Tensor:
        """Attend from ``x`` to itself, or to ``context`` (cross-attention).

        Args:
            x: queries' input ``(B, T, D)``.
            context: keys' and values' input ``(B, S, D)``; ``None`` for self-attention (``S = T``).
            attn_mask: a mask as :func:`attention` takes it: a bool (``True`` = may attend) or float (added)
                tensor broadcastable to ``(B, H, T, S)``, a rule of :mod:`lessons_src.masks` (``sliding_window(w)``,
                ``causal() & same_chunk(c)``, ``same_document(ids)`` with one id per key position, cached ones
                included, ``prefix_lm(p)``), or a list of them; a cache still keeps every position.
            is_causal: hide future keys, aligned bottom-right (see :func:`attention`); combines with
                ``attn_mask``.
            cache: a :class:`lessons_src.kv_cache.LayerCache` (such as ``KVCache``) for incremental
                self-attention decoding, for inference only (under ``torch.no_grad()``): the new keys and
                values are appended and ``x`` attends to everything cached (``S`` = cached + ``T``).
                Prefill a prompt into an empty cache with ``is_causal=True``, then decode one token per
                call. If a step fails, the cache is left as it was.
            cache_position: where ``x``'s first token goes in the cache. Needed only to append several
                tokens to a non-empty cache (a prompt in chunks); it must equal ``cache.length``. A new
                prompt needs ``cache.reset()`` first: several tokens arriving at a non-empty cache
                without ``cache_position`` are refused rather than attending to a stale prompt.
            positions: each new token's position, one row per sequence, ``(B, T)`` integers of at least 0,
                handed to ``rope`` in place of ``start``: a left-padded batch counts each row from its first real
                token, packed documents restart at 0. ``None``: ``cache.length ..`` (``0 ..`` without a cache) for
                every row. Positions only rotate; which keys a query sees is ``attn_mask``'s and ``is_causal``'s,
                over the cache's slots (a left-padded row's padding is hidden by a mask, not by its positions).
            implementation: a name in :data:`ATTENTION_FUNCTIONS`; default ``self.implementation``.

        Returns:
            ``output`` ``(B, T, D)``. :meth:`with_weights` also returns the attention weights.

        Raises:
            ValueError: if ``x`` or ``context`` is not 3-D, their batch or width is wrong, their dtype or
                device differs from the module's (outside autocast), the mask's dtype, device or shape is
                not accepted, ``cache`` is combined with ``context``, a cached prompt is not causal, a
                multi-token input meets a non-empty cache without ``cache_position``, or the cache does
                not fit (see :meth:`lessons_src.kv_cache.KVCache.update`).
            TypeError: if ``cache`` is not a :class:`lessons_src.kv_cache.LayerCache` (checked before it is touched).

        Example:
            >>> from lessons_src.kv_cache import KVCache
            >>> gqa = MultiHeadAttention(16, 4, num_kv_heads=2).eval()
            >>> cache = KVCache(batch_size=1, num_kv_heads=2, head_dim=4, max_len=8)
            >>> with torch.no_grad():
            ...     _ = gqa(torch.randn(1, 5, 16), is_causal=True, cache=cache)  # prefill 5 tokens
            ...     y = gqa(torch.randn(1, 1, 16), is_causal=True, cache=cache)  # decode one
            >>> y.shape, cache.length
            (torch.Size([1, 1, 16]), 6)

            Two prompts in one batch, the shorter left-padded: each row's own positions, its padding hidden.

            >>> from lessons_src.masks import key_mask
            >>> from lessons_src.mechanisms import Rotary
            >>> layer = MultiHeadAttention(16, 4, rope=Rotary(4)).eval()
            >>> keep = torch.tensor([[False, True, True], [True, True, True]])  # row 0: one padding slot
            >>> at = (keep.cumsum(-1) - 1).clamp(min=0)  # [[0, 0, 1], [0, 1, 2]]
            >>> y = layer(torch.randn(2, 3, 16), is_causal=True, attn_mask=key_mask(keep), positions=at)
            >>> y.shape
            torch.Size([2, 3, 16])
        """
        impl = self.implementation if implementation is None else implementation
        return self._attend(x, context, attn_mask, is_causal, cache, cache_position, impl, weights=False,
                            positions=positions)[0]

    def with_weights(
        self,
        x: Tensor,
        context: Tensor | None = None,
        *,
        attn_mask: MaskLike = None,
        is_causal: bool = False,
        cache: LayerCache | None = None,
        cache_position: int | None = None,
        positions: Tensor | None = None,
        implementation: str = "eager",
    ) -> tuple[Tensor, Tensor]:
        """:meth:`forward`, also returning the attention weights ``(B, H, T, S)``: what a head looked at.

        The arguments are :meth:`forward`'s. The weights exist only where an implementation builds them:
        ``"eager"`` does (the default here; the output equals the fused kernel's); another is refused by
        name unless it was registered with ``Supports(weights=True)``.

        Example:
            >>> out, w = MultiHeadAttention(8, 2).with_weights(torch.randn(1, 5, 8), is_causal=True)
            >>> tuple(out.shape), tuple(w.shape), bool(w[0, 0, 0, 1:].eq(0).all())
            ((1, 5, 8), (1, 2, 5, 5), True)
        """
        out, weights = self._attend(x, context, attn_mask, is_causal, cache, cache_position, implementation,
                                    weights=True, positions=positions)
        assert weights is not None  # check_supports refused an implementation without weights
        return out, weights

    def _attend(self, x: Tensor, context: Tensor | None, attn_mask: MaskLike, is_causal: bool,
                cache: LayerCache | None, cache_position: int | None, impl: str, *,
                weights: bool, positions: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        self._check_inputs(x, context)
        check_implementation(impl)
        B, T, _ = x.shape
        if positions is not None:
            if context is not None:
                raise ValueError("positions are for self-attention (they rotate the queries and keys of x); pass "
                                 "context=None, or no positions")
            check_positions("positions", positions, B, T, x.device)
        if cache is not None:
            self._check_cache(cache, T, is_causal, attn_mask, context, cache_position)
        elif cache_position is not None:
            raise ValueError("cache_position is only meaningful with a cache; pass cache=... or drop it")
        S = (T if context is None else context.shape[1]) + (0 if cache is None else cache.length)
        if self.rope is not None and context is not None:
            raise ValueError("rope gives positions to self-attention; pass context=None, or a layer without rope")
        dtype = torch.get_autocast_dtype(x.device.type) if autocast_on(x.device.type) else x.dtype
        # checked before the cache is touched; the implementations get this one prepared mask
        shape = (B, self.num_heads, T, S)
        mask = prepare_mask(attn_mask, is_causal=is_causal, shape=shape, dtype=dtype, device=x.device)
        q, k, v = self.project_qkv(x, context)  # (B, H, T, E), 2 x (B, K, S, E)
        dropout_p = self.dropout if self.training else 0.0
        start = 0 if cache is None else cache.length
        if self.qk_norm is not None:
            q, k = self.qk_norm(q, k)  # (B, H, T, E), (B, K, S, E)
        if self.rope is not None:  # the new tokens at positions start .. start + T - 1, or each row's own (B, T)
            at = {"start": start} if positions is None else {"positions": positions}
            q, k = self.rope(q, k, **at)
        if self.v_norm is not None:
            v = self.v_norm(v)  # (B, K, S, E)
        mods: dict[str, float | Tensor] = {} if self.softcap is None else {"softcap": self.softcap}
        if self.sinks is not None:
            mods["sinks"] = self.sinks.to(q.dtype)  # (H,)
        try:
            if cache is not None:
                k, v = cache.update(k, v)  # everything cached so far: 2 x (B, K, S, E)
            if mask.mask is not None and mask.mask.dtype != torch.bool and mask.mask.dtype != q.dtype:
                mask = replace(mask, mask=mask.mask.to(q.dtype))
            scale = 1.0 / math.sqrt(self.head_dim) if self.scale is None else self.scale
            check_supports(impl, mask=mask.beyond_causal(), dropout=dropout_p, weights=weights, **mods)
            result = ATTENTION_FUNCTIONS[impl](q, k, v, mask, scale=scale, dropout_p=dropout_p, **mods)
        except BaseException:
            if cache is not None:
                cache.truncate(start)  # the step failed: forget the positions it appended
            raise
        heads = result.output if self.gate is None else self.gate(x, result.output)  # (B, H, T, E)
        y = heads.transpose(1, 2).reshape(B, T, self.d_model)  # concatenate heads: (B, T, D)
        return self.out_proj(y), result.weights  # (B, T, D), (B, H, T, S) or None

    def _check_cache(self, cache: LayerCache, T: int, is_causal: bool, attn_mask: MaskLike,
                     context: Tensor | None, cache_position: int | None) -> None:
        if not isinstance(cache, LayerCache):
            raise TypeError(f"cache must be a LayerCache such as KVCache (lessons_src.kv_cache), not a "
                            f"{type(cache).__name__}: a rolling or latent cache has its own update(); call it, then "
                            "attention()")
        if context is not None:
            raise ValueError("cache is for self-attention decoding; pass context=None with a cache")
        if cache_position is not None:
            if size("cache_position", cache_position, minimum=0) != cache.length:
                raise ValueError(
                    f"cache_position={cache_position} but the cache holds {cache.length} positions; new tokens go "
                    f"at position {cache.length} (call cache.reset() to start a new prompt)"
                )
        elif T > 1 and cache.length > 0:
            raise ValueError(
                f"{T} new tokens for a cache that already holds {cache.length}: if this is a new prompt, call "
                f"cache.reset() first; to append a prompt in chunks, pass cache_position={cache.length}"
            )
        if T > 1 and not is_causal and attn_mask is None:
            raise ValueError(
                f"caching {T} tokens without is_causal=True would let each see the ones after it (a decoder "
                "never can); pass is_causal=True, or an explicit attn_mask if that is what you mean"
            )

    def _check_inputs(self, x: Tensor, context: Tensor | None) -> None:
        D = self.d_model
        w = self.qkv_proj.weight
        for name, t in (("x", x), ("context", context)):
            if t is None:
                continue
            if not isinstance(t, Tensor):
                raise TypeError(f"{name} must be a torch.Tensor; got {type(t).__name__}")
            if t.device != w.device:
                raise ValueError(f"{name} is on {t.device} but the module is on {w.device}; move one of them")
            if t.dtype != w.dtype and not autocast_on(t.device.type):
                raise ValueError(
                    f"{name} has dtype {t.dtype} but the module's weights are {w.dtype}; convert one of them "
                    f"(x.to({w.dtype}) or module.to({t.dtype})), or run under torch.autocast"
                )
        if x.ndim != 3:
            raise ValueError(f"x must be 3-D (B, T, d_model={D}); got shape {tuple(x.shape)}")
        if x.shape[-1] != D:
            raise ValueError(f"x's last dim must be d_model={D}; got shape {tuple(x.shape)}")
        if context is None:
            return
        if context.ndim != 3:
            raise ValueError(f"context must be 3-D (B, S, d_model={D}); got shape {tuple(context.shape)}")
        if context.shape[0] != x.shape[0]:
            raise ValueError(
                f"context batch size {context.shape[0]} does not match x's batch size {x.shape[0]} "
                f"(x {tuple(x.shape)}, context {tuple(context.shape)})"
            )
        if context.shape[-1] != D:
            raise ValueError(f"context's last dim must be d_model={D}; got shape {tuple(context.shape)}")
