"""Attention with one key that is also the value (DeepSeek-V4): a shared key-value head, its window, its compressor.

Every query head reads one key-value head (a multi-query layer), and that head is one tensor read as both the
keys and the values (K = V): the cache holds ``E`` numbers per token where MQA holds ``2E``. The keys carry RoPE on
their trailing features, so the values do too; the layer turns each head's output back by the query's position
(:class:`lessons_src.mechanisms.ConjugateRotation`), leaving every value turned by its offset from the query. A
learned sink per head joins the softmax (:class:`lessons_src.score_mods.Sinks`), and the heads' outputs reach
``d_model`` through a grouped low-rank projection (:class:`GroupedOutput`). A window-only layer sees the last
``window`` tokens; a compressed layer also sees one entry per ``rate`` tokens (:class:`WindowCompressor`, V4's
heavily compressed attention, HCA), or the few of them an indexer picks among entries pooled over overlapping
windows (:class:`OverlapCompressor` with :class:`lessons_src.sparse_selection.CompressedIndexer`, V4's compressed
sparse attention, CSA). The layer is *given* its position pieces, as
:class:`lessons_src.layer.MultiHeadAttention` is, so it imports none of them.

Needs ``functional.py`` (and what it needs: ``masks.py``, ``score_mods.py``) and ``_checks.py``.

References:
    DeepSeek-AI, "DeepSeek-V4" technical report, 2026, section 2.3 (compressed attention, K = V, the output's
    rotation, the grouped output projection).
    ``transformers`` 5.23, ``models/deepseek_v4/modeling_deepseek_v4.py`` (``DeepseekV4Attention``,
    ``DeepseekV4HCACompressor``): the tests copy its weights and compare.
"""

from __future__ import annotations

from typing import Protocol, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._checks import eps as check_eps
from ._checks import size, tensor
from .functional import attention, check_implementation
from .masks import mask_tensor, sliding_window
from .score_mods import Sinks

__all__ = ["GroupedOutput", "OverlapCompressor", "SharedKVAttention", "SharedKVCache", "WindowCompressor"]


class SharedKVCache:
    """What a :class:`SharedKVAttention` layer keeps between decoding steps: one tensor for keys and values.

    The window's part holds the last ``window - 1`` shared key-values (with the new token's, a query's
    ``window``); a compressed layer's part holds the compressed entries made so far and the tokens of the window
    not yet complete (their projections and gates).

    Args:
        window: the layer's window.

    Example:
        >>> cache = SharedKVCache(window=4)
        >>> cache.update(torch.randn(1, 1, 6, 8)).shape, cache.kv.shape, cache.length  # keeps window - 1
        (torch.Size([1, 1, 6, 8]), torch.Size([1, 1, 3, 8]), 6)
    """

    def __init__(self, window: int) -> None:
        self.window = size("window", window)
        self.kv: Tensor | None = None  # (B, 1, <= window - 1, E)
        self.length = 0  # tokens seen
        self.entries: Tensor | None = None  # (B, 1, N, E): compressed entries so far
        self.pending: tuple[Tensor, Tensor] | None = None  # projections and gates of an incomplete window

    def update(self, kv: Tensor) -> Tensor:
        """Append the new tokens' key-values; return the held ones followed by them ``(B, 1, held + T, E)``."""
        full = kv if self.kv is None else torch.cat([self.kv, kv], dim=2)  # (B, 1, held + T, E)
        self.kv = full[:, :, full.shape[2] - min(full.shape[2], self.window - 1):]
        self.length += kv.shape[2]
        return full

    def nbytes(self) -> int:
        """Bytes held: the window's key-values and the compressed entries (one tensor each, no separate values)."""
        return sum(t.nbytes for t in (self.kv, self.entries) if t is not None)


class _Rotates(Protocol):
    def rotate(self, x: Tensor, positions: Tensor) -> Tensor: ...


def _turn(rope: nn.Module, x: Tensor, positions: Tensor) -> Tensor:
    """The position piece's rotation of ``x`` at ``positions`` (a :class:`lessons_src.mechanisms.Rotary`'s)."""
    return cast("_Rotates", rope).rotate(x, positions)


def _cache(cache: object) -> SharedKVCache | None:
    if cache is not None and not isinstance(cache, SharedKVCache):
        raise TypeError(f"cache must be a SharedKVCache or None; got {type(cache).__name__}")
    return cache


def _latent(latent: object) -> None:
    if latent is not None:
        tensor("latent", latent, ndim=3, shape="(B, T, q_rank), the layer's query latent")


class GroupedOutput(nn.Module):
    """``W_O`` in two steps: each group of heads projected to ``rank`` features, then all groups mixed to ``d_model``.

    With ``H * E`` far above ``d_model`` (V4-Flash: 64 heads of 512 for a width of 4,096) one ``W_O`` would be the
    layer's biggest matrix. Splitting the heads into ``groups`` and giving each group its own ``(rank, H * E /
    groups)`` block is a block-diagonal first step; a dense ``(d_model, groups * rank)`` second step mixes the
    groups.

    Args:
        num_heads: ``H``.
        head_dim: ``E``.
        d_model: ``D``.
        groups: number of groups ``G``; must divide ``num_heads``.
        rank: each group's width after its block ``r``.

    Shapes:
        y: ``(B, H, T, E)``; output: ``(B, T, D)``.

    Example:
        >>> GroupedOutput(4, 8, 16, groups=2, rank=3)(torch.randn(1, 4, 5, 8)).shape
        torch.Size([1, 5, 16])
    """

    def __init__(self, num_heads: int, head_dim: int, d_model: int, *, groups: int, rank: int) -> None:
        super().__init__()
        H, E, D = size("num_heads", num_heads), size("head_dim", head_dim), size("d_model", d_model)
        G, r = size("groups", groups), size("rank", rank)
        if H % G:
            raise ValueError(f"groups={G} must divide num_heads={H}, so each group holds whole heads")
        self.num_heads, self.head_dim, self.groups, self.rank = H, E, G, r
        self.blocks = nn.Parameter(torch.randn(G, r, H * E // G) * (H * E // G) ** -0.5)  # (G, r, H*E/G)
        self.mix = nn.Linear(G * r, D, bias=False)  # (D, G*r)

    def forward(self, y: Tensor) -> Tensor:
        y = tensor("y", y, ndim=4, shape="(B, H, T, E)")
        B, H, T, E = y.shape
        if self.num_heads != H or self.head_dim != E:
            raise ValueError(f"y must have num_heads={self.num_heads} heads of head_dim={self.head_dim}; "
                             f"got shape {tuple(y.shape)}")
        grouped = y.transpose(1, 2).reshape(B, T, self.groups, -1)  # (B, T, G, H*E/G): heads in order
        low = torch.einsum("btgi,gri->btgr", grouped, self.blocks)  # (B, T, G, r): one block per group
        out: Tensor = self.mix(low.reshape(B, T, -1))  # (B, T, D)
        return out


def _pooled(kv: Tensor, gate: Tensor, norm: nn.Module) -> Tensor:
    """``norm(sum_j softmax_j(gate) * kv)`` over each window's slots (dim 2): ``(B, n, slots, E)`` to ``(B, n, E)``."""
    out: Tensor = norm((kv * gate.softmax(dim=2)).sum(dim=2))
    return out


def _seen(rate: int, entries: int, start: int, T: int, device: torch.device) -> Tensor:
    """Entry ``w`` (tokens up to ``(w+1)*rate - 1``) is seen by the queries at or after its window's last token."""
    ends = rate * (torch.arange(entries, device=device) + 1) - 1  # (N,): each window's last position
    return (ends <= torch.arange(start, start + T, device=device)[:, None]).view(1, 1, T, entries)  # (1, 1, T, N)


class WindowCompressor(nn.Module):
    """One key-value entry per ``rate`` tokens, pooled with learned gates (DeepSeek-V4's heavily compressed layers).

    Tokens are projected to a key-value ``c_j`` and a gate ``z_j``; window ``w`` (tokens ``w*rate ..
    (w+1)*rate - 1``) becomes ``norm(sum_j softmax_j(z_j + b_j) * c_j)``, the softmax over the window's tokens
    per feature with a learned bias per slot, turned by the layer's RoPE at the window's first position.
    A query sees an entry once the entry's window has ended at or before it. Only complete windows are pooled;
    with a cache the rest wait there for their window to fill.

    Args:
        d_model: ``D``.
        head_dim: ``E``.
        rate: tokens per entry (V4: 128).
        rope: the layer's :class:`lessons_src.mechanisms.Rotary` (its ``rotate``).
        eps: the norm's.

    Shapes:
        x: ``(B, T, D)`` at positions ``start ..``; returns entries ``(B, 1, N, E)`` and which each query
        sees ``(1, 1, T, N)`` (bool).
    """

    def __init__(self, d_model: int, head_dim: int, rate: int, rope: nn.Module, *, eps: float = 1e-6) -> None:
        super().__init__()
        D, E, self.rate = size("d_model", d_model), size("head_dim", head_dim), size("rate", rate)
        if not callable(getattr(rope, "rotate", None)):
            raise TypeError(f"rope must be a position piece with rotate(x, positions) (a Rotary); "
                            f"got {type(rope).__name__}")
        self.rope = rope
        self.kv_proj = nn.Linear(D, E, bias=False)
        self.gate_proj = nn.Linear(D, E, bias=False)
        self.position_bias = nn.Parameter(torch.zeros(self.rate, E))  # (rate, E): b_j per slot of a window
        self.kv_norm = nn.RMSNorm(E, eps=check_eps("eps", eps))

    def forward(self, x: Tensor, *, start: int, cache: SharedKVCache | None,
                latent: Tensor | None = None) -> tuple[Tensor, Tensor]:
        x = tensor("x", x, ndim=3, shape="(B, T, d_model)")
        start, cache = size("start", start, minimum=0), _cache(cache)
        _latent(latent)  # unused here: a selector's input
        B, T, _ = x.shape
        kv, gate = self.kv_proj(x), self.gate_proj(x)  # (B, T, E) each
        first = start  # the position of kv's first token
        if cache is not None and cache.pending is not None:  # the incomplete window's tokens come first
            kv, gate = torch.cat([cache.pending[0], kv], dim=1), torch.cat([cache.pending[1], gate], dim=1)
            first = start - cache.pending[0].shape[1]
        n = kv.shape[1] // self.rate  # complete windows
        if cache is not None:
            cache.pending = (kv[:, n * self.rate:], gate[:, n * self.rate:])  # the incomplete window waits
        E = kv.shape[-1]
        windows = kv[:, : n * self.rate].view(B, n, self.rate, E)  # (B, n, rate, E)
        gates = gate[:, : n * self.rate].view(B, n, self.rate, E) + self.position_bias  # (B, n, rate, E)
        pooled = _pooled(windows, gates, self.kv_norm).unsqueeze(1)  # (B, 1, n, E)
        at = first + self.rate * torch.arange(n, device=x.device)  # (n,): each window's first position
        entries = _turn(self.rope, pooled, at)  # (B, 1, n, E)
        if cache is not None:
            entries = entries if cache.entries is None else torch.cat([cache.entries, entries], dim=2)
            cache.entries = entries
        return entries, _seen(self.rate, entries.shape[2], start, T, x.device)  # (B, 1, N, E), (1, 1, T, N)


class OverlapCompressor(nn.Module):
    """One entry per ``rate`` tokens pooled over two windows, the entries a selector picks from (V4's CSA).

    Each token is projected to two key-values and two gates, ``a`` and ``b`` (``2E`` features): entry ``w`` pools
    the ``a`` halves of window ``w - 1`` with the ``b`` halves of window ``w``, ``2 * rate`` slots in one softmax
    per feature (window 0 has no previous one), then is normed and turned by the layer's RoPE at ``w * rate``. A
    query sees an entry once its window has ended and, with a ``selector`` (a
    :class:`lessons_src.sparse_selection.CompressedIndexer`), only the entries it picks. Full passes only: cached
    decoding is not built for it.

    Args:
        d_model: ``D``.
        head_dim: ``E`` of an entry.
        rate: tokens per entry (V4: 4).
        rope: the layer's :class:`lessons_src.mechanisms.Rotary` (its ``rotate``).
        selector: picks entries per query, ``(x, latent=, start=) -> keep (B, 1, T, N)``, or ``None``.
        eps: the norm's.

    Shapes:
        x: ``(B, T, D)``; latent: the layer's query latent ``(B, T, q_rank)``; returns entries ``(B, 1, N, E)`` and
        which each query sees ``(B or 1, 1, T, N)`` (bool).
    """

    def __init__(self, d_model: int, head_dim: int, rate: int, rope: nn.Module, *, selector: nn.Module | None = None,
                 eps: float = 1e-6) -> None:
        super().__init__()
        D, E, self.rate = size("d_model", d_model), size("head_dim", head_dim), size("rate", rate)
        if not callable(getattr(rope, "rotate", None)):
            raise TypeError(f"rope must be a position piece with rotate(x, positions) (a Rotary); "
                            f"got {type(rope).__name__}")
        if selector is not None and not isinstance(selector, nn.Module):
            raise TypeError(f"selector must be an nn.Module (a CompressedIndexer) or None; "
                            f"got {type(selector).__name__}")
        self.rope, self.selector, self.head_dim = rope, selector, E
        self.kv_proj = nn.Linear(D, 2 * E, bias=False)  # [a | b] per token
        self.gate_proj = nn.Linear(D, 2 * E, bias=False)
        self.position_bias = nn.Parameter(torch.zeros(self.rate, 2 * E))  # (rate, 2E)
        self.kv_norm = nn.RMSNorm(E, eps=check_eps("eps", eps))

    def forward(self, x: Tensor, *, start: int, cache: SharedKVCache | None,
                latent: Tensor | None = None) -> tuple[Tensor, Tensor]:
        x = tensor("x", x, ndim=3, shape="(B, T, d_model)")
        start = size("start", start, minimum=0)
        if _cache(cache) is not None or start != 0:
            raise ValueError(f"start must be 0 and cache None (got start={start}, cache={type(cache).__name__}): "
                             "OverlapCompressor computes full passes only; its cached decoding is not built")
        _latent(latent)
        B, T, _ = x.shape
        E, n = self.head_dim, T // self.rate
        kv = self.kv_proj(x)[:, : n * self.rate].view(B, n, self.rate, 2 * E)  # (B, n, rate, 2E)
        gate = self.gate_proj(x)[:, : n * self.rate].view(B, n, self.rate, 2 * E) + self.position_bias
        slots = kv.new_zeros(B, n, 2 * self.rate, E)  # (B, n, 2 rate, E): [a of w - 1 | b of w]
        gates = gate.new_full((B, n, 2 * self.rate, E), float("-inf"))  # window 0 has no previous: weight 0
        slots[:, :, self.rate:], gates[:, :, self.rate:] = kv[..., E:], gate[..., E:]
        slots[:, 1:, : self.rate], gates[:, 1:, : self.rate] = kv[:, :-1, :, :E], gate[:, :-1, :, :E]
        pooled = _pooled(slots, gates, self.kv_norm).unsqueeze(1)  # (B, 1, n, E)
        entries = _turn(self.rope, pooled, self.rate * torch.arange(n, device=x.device))  # (B, 1, n, E)
        sees = _seen(self.rate, n, start, T, x.device)  # (1, 1, T, n)
        if self.selector is not None and n > 0:
            sees = sees & self.selector(x, latent=latent, start=start)  # (B, 1, T, n): the picked ones
        return entries, sees


class SharedKVAttention(nn.Module):
    """DeepSeek-V4's attention: low-rank queries, one shared key-value head, a window, sinks, a grouped output.

    ``q = rms(W_UQ rms(W_DQ x))`` per head, ``c = rms(W_KV x)`` one head; RoPE turns the trailing features of
    both (``rope``); ``c`` is read as the keys and the values; each query sees the last ``window`` tokens (and a
    compressor's entries), with one learned sink logit per head; ``output_rotation`` turns each head's output
    back by the query's position; ``output`` maps the heads to ``d_model``.

    Args:
        d_model: ``D``.
        num_heads: ``H``.
        head_dim: ``E`` (independent of ``D``: V4 uses 512).
        q_rank: the queries' low-rank width (``q_lora_rank``).
        window: tokens a query sees, its own included (``sliding_window``).
        rope: a :class:`lessons_src.mechanisms.Rotary` (V4: interleaved, trailing features; base 10,000 on
            window-only layers, 160,000 with YaRN on compressed ones).
        output: the heads' outputs to ``d_model``, ``(B, H, T, E) -> (B, T, D)`` (:class:`GroupedOutput`).
        output_rotation: :class:`lessons_src.mechanisms.ConjugateRotation` of ``rope``, or ``None``.
        compressor: a :class:`WindowCompressor` or :class:`OverlapCompressor` (a compressed layer), or ``None``
            (window only): ``(x, start=, cache=, latent=) -> (entries (B, 1, N, E), seen (B or 1, 1, T, N))``.
        eps: the norms'.
        implementation: the attention function, a name :func:`lessons_src.functional.attention` takes.

    Shapes:
        x: ``(B, T, D)``; output: ``(B, T, D)``.

    Example:
        >>> from lessons_src.mechanisms import ConjugateRotation, Rotary
        >>> rope = Rotary(4, layout="interleaved", features="trailing")
        >>> layer = SharedKVAttention(16, 2, 8, q_rank=4, window=3, rope=rope, output=GroupedOutput(2, 8, 16, groups=2,
        ...                           rank=4), output_rotation=ConjugateRotation(rope))
        >>> layer(torch.randn(1, 5, 16)).shape
        torch.Size([1, 5, 16])
    """

    def __init__(self, d_model: int, num_heads: int, head_dim: int, *, q_rank: int, window: int, rope: nn.Module,
                 output: nn.Module, output_rotation: nn.Module | None = None, compressor: nn.Module | None = None,
                 eps: float = 1e-6, implementation: str = "eager") -> None:
        super().__init__()
        D, self.num_heads, self.head_dim = size("d_model", d_model), size("num_heads", num_heads), size("head_dim",
                                                                                                       head_dim)
        self.window, self.eps = size("window", window), check_eps("eps", eps)
        check_implementation(implementation)
        self.implementation = implementation
        for name, piece in (("rope", rope), ("output", output), ("output_rotation", output_rotation),
                            ("compressor", compressor)):
            if piece is not None and not isinstance(piece, nn.Module):
                raise TypeError(f"{name} must be an nn.Module piece or None; got {type(piece).__name__}")
        if rope is None or output is None:
            raise TypeError("rope and output are needed: a Rotary, and a GroupedOutput (or any (B, H, T, E) -> "
                            "(B, T, D))")
        self.q_down = nn.Linear(D, size("q_rank", q_rank), bias=False)  # W_DQ (q_a_proj)
        self.q_norm = nn.RMSNorm(q_rank, eps=self.eps)
        self.q_up = nn.Linear(q_rank, self.num_heads * self.head_dim, bias=False)  # W_UQ (q_b_proj)
        self.kv_proj = nn.Linear(D, self.head_dim, bias=False)  # one head: the keys and the values
        self.kv_norm = nn.RMSNorm(self.head_dim, eps=self.eps)
        self.sinks = nn.Parameter(torch.zeros(self.num_heads))  # (H,)
        self.rope, self.output, self.output_rotation, self.compressor = rope, output, output_rotation, compressor

    def forward(self, x: Tensor, *, cache: SharedKVCache | None = None, start: int = 0) -> Tensor:
        """Attend causally within the window (and to the compressor's entries).

        Args:
            x: ``(B, T, D)``.
            cache: a :class:`SharedKVCache` for decoding (inference only): ``x`` follows what it holds.
            start: the position of ``x``'s first token without a cache (0: a prompt's start); with a cache, the
                cache's length.

        Raises:
            TypeError, ValueError: for a malformed ``x``, a cache that is not a :class:`SharedKVCache`, or a
                ``start`` that is not the cache's length.
        """
        x = tensor("x", x, ndim=3, shape="(B, T, d_model)")
        start = size("start", start, minimum=0)
        cache = _cache(cache)
        if cache is not None:
            if start not in (0, cache.length):
                raise ValueError(f"start={start} but the cache holds {cache.length} tokens; x goes after them")
            start = cache.length
        B, T, _ = x.shape
        H, E = self.num_heads, self.head_dim
        latent = self.q_norm(self.q_down(x))  # (B, T, q_rank): a compressed layer's selector reads it too
        q = self.q_up(latent).view(B, T, H, E).transpose(1, 2)  # (B, H, T, E)
        q = F.rms_norm(q, (E,), eps=self.eps)  # each head's query to RMS 1, no weight
        kv = self.kv_norm(self.kv_proj(x)).unsqueeze(1)  # (B, 1, T, E): one head
        q, kv = self.rope(q, kv, start=start)  # trailing features turned at start .. start + T - 1
        kv = kv if cache is None else cache.update(kv)  # (B, 1, S, E): the window's, then the new
        S = kv.shape[2]
        mask = mask_tensor(sliding_window(self.window), T, S, device=x.device)  # (1, 1, T, S)
        if self.compressor is not None:
            entries, sees = self.compressor(x, start=start, cache=cache, latent=latent)  # (B, 1, N, E), (., 1, T, N)
            mask = torch.cat([mask.expand(sees.shape[0], 1, T, S), sees], dim=-1)  # (B or 1, 1, T, S + N)
            kv = torch.cat([kv, entries], dim=2)  # (B, 1, S + N, E)
        y = attention(q, kv, kv, attn_mask=mask, scale=E ** -0.5, implementation=self.implementation,
                      score_mods=Sinks(self.sinks.to(q.dtype))).output  # (B, H, T, E): K = V
        if self.output_rotation is not None:
            y = self.output_rotation(y, start=start)  # each value now turned by its offset from the query
        out: Tensor = self.output(y)  # (B, T, D)
        return out
