"""Today's changes around attention, as pieces a layer is given by name: QK-norm, value norm, positions, gates.

Each change of the open models of 2025-26 is a small ``nn.Module`` that :class:`lessons_src.layer.MultiHeadAttention`
is *given* (an absent piece is ``None``), so a layer says what it uses instead of switching flags on::

    MultiHeadAttention(d_model, num_heads, qk_norm=PerHeadRMSNorm(head_dim), rope=Rotary(head_dim),
                       gate=ElementwiseGate(d_model, num_heads, head_dim), sinks=True)

The layer applies them in one order: project; QK-norm, then RoPE (or a NoPE layer's temperature); the value
norm; scale; the soft-cap and the sinks (score changes of :mod:`lessons_src.score_mods`, not pieces); mask;
softmax; values; the output gate; ``W_O``. Why each step sits where it does, and where ``transformers``, the
papers and the official code differ (the tests compare with ``transformers``), is on the lesson "Reading a
real model" (``docs/lessons/reading-a-real-model.md``).

Needs ``rope.py`` and ``_checks.py``.

References:
    Qwen Team, "Qwen3 Technical Report", 2025 (arXiv:2505.09388): per-head QK-norm.
    Gemma Team, "Gemma 3 Technical Report", 2025 (arXiv:2503.19786): QK-norm with ``(1 + w)`` weights.
    Team OLMo, "2 OLMo 2 Furious", 2025 (arXiv:2501.00656): QK-norm over the whole projection.
    Meta, Llama 4 model code (``llama_models/llama4/model.py``): weightless norm after RoPE, on RoPE layers
    (Scout's; Maverick has none).
    Google, Gemma 4 as ``transformers`` 5.23 ships it (``models/gemma4/modeling_gemma4.py``): the value norm,
    the scale of 1, proportional RoPE and KV sharing (the tests compare with that module).
    Qiu et al., "Gated Attention for Large Language Models: Non-linearity, Sparsity, and Attention-Sink-Free",
    2025 (arXiv:2505.06708): the sigmoid output gate, headwise or elementwise (their G1 position).
    Su et al., "RoFormer", 2021 (arXiv:2104.09864): rotary positions.
    Nakanishi, "Scalable-Softmax Is Superior for Attention", 2025 (arXiv:2501.19399): scaling the scores with
    the log of the context, which ``transformers``' Llama 4 code cites for its NoPE layers' temperature.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._checks import choice, flag, instance, number, size, tensor
from ._checks import eps as check_eps
from .rope import RopeScaling, apply_rope, apply_rope_interleaved, proportional_scaling, rope_cos_sin, rope_frequencies

__all__ = [
    "ElementwiseGate",
    "HeadwiseGate",
    "NoPETemperature",
    "PerHeadRMSNorm",
    "ProjectionRMSNorm",
    "Rotary",
    "ValueRMSNorm",
    "WeightlessRMSNorm",
]


def _rms_norm(x: Tensor, weight: Tensor | None, eps: float, offset: float = 0.0) -> Tensor:
    """``x / sqrt(mean(x^2) + eps) * (offset + weight)`` over ``x``'s last ``weight.ndim`` dims (the last dim
    without a weight), computed in float32 for half-precision ``x`` and returned in ``x``'s dtype.

    The multiplier ``offset + weight`` is formed in float32 too, as Gemma's and Qwen3-Next's norms form
    ``1 + w``: in half precision ``1 + w`` would round to a coarser grid than ``w``. ``F.rms_norm`` is the
    formula in one fused kernel (a third of the time of the four ops on CPU).

    Shapes:
        x: ``(..., *weight.shape)``; weight: the normalised dims' shape; output: like ``x``.

    Example:
        >>> _rms_norm(torch.tensor([3.0, 4.0]), None, 0.0)  # RMS is sqrt(12.5)
        tensor([0.8485, 1.1314])
    """
    shape = x.shape[-1:] if weight is None else weight.shape
    compute = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    w = None if weight is None else offset + weight.to(compute)
    return F.rms_norm(x.to(compute), shape, w, eps).to(x.dtype)


def _eps(eps: object) -> float:
    return check_eps("eps", eps)


def _start(start: object) -> int:
    """The first new token's position: an int of at least 0 (the positions before it are cached ones)."""
    return start if type(start) is int and start >= 0 else size("start", start, minimum=0, hint="a position")


def _heads(name: str, t: object, width: int | None = None) -> None:
    """Raise unless ``t`` is a floating ``(B, heads, T, E)`` tensor (``E = width`` when given); cheap when it is."""
    if type(t) is Tensor and t.ndim == 4 and t.dtype.is_floating_point and (width is None or t.shape[-1] == width):
        return
    t = tensor(name, t, ndim=4, shape="(B, heads, T, E)")
    raise ValueError(f"{name} must have head_dim={width} features per head; got shape {tuple(t.shape)}")


def _fits(piece: nn.Module, wanted: dict[str, int], layer: dict[str, int]) -> None:
    """Raise a ValueError naming each size where ``piece`` (``wanted``) and the layer disagree."""
    wrong = [f"{name}={n} (the layer has {layer[name]})" for name, n in wanted.items() if n != layer[name]]
    if wrong:
        raise ValueError(f"{type(piece).__name__} was made for {', '.join(wrong)}; make it with the layer's sizes")


# --------------------------------------------------------------------------- QK-norm, three kinds


class PerHeadRMSNorm(nn.Module):
    """RMSNorm of each head's query and key, with a learned weight per feature (Qwen3, Gemma 3, Qwen3-Next).

    ``q_h -> q_h / rms(q_h) * (offset + w_q)``, and the same for keys with ``w_k``; one weight vector of
    ``head_dim`` serves every head. Gemma and Qwen3-Next write the multiplier as ``1 + w`` (``offset=1``,
    ``w`` starting at 0); Qwen3 and Gemma 4 as ``w`` (``offset=0``, ``w`` starting at 1). The weights start so
    that the multiplier is 1. A layer that reuses an earlier layer's keys (Gemma 4's KV-sharing layers) norms
    its queries only: ``keys=False`` makes no key weight, and such a layer passes ``k=None``.

    Args:
        head_dim: ``E``.
        eps: added to the mean square.
        offset: ``0`` (Qwen3, Gemma 4) or ``1`` (Gemma 3, Qwen3-Next).
        keys: give the norm a key weight; ``False`` for a layer that computes no keys.

    Shapes:
        q: ``(B, H, T, E)``, k: ``(B, K, S, E)`` or ``None``; outputs: the same.

    Raises:
        ValueError: in :meth:`check`, for ``keys=False`` on a layer that computes keys; in forward, for keys
            given to a norm without a key weight.

    Example:
        >>> norm = PerHeadRMSNorm(4, offset=1.0)
        >>> q, k = norm(torch.randn(1, 2, 3, 4), torch.randn(1, 1, 5, 4))
        >>> q.pow(2).mean(-1).round(decimals=4).unique().tolist()  # every head's query now has RMS 1
        [1.0]
    """

    slot = "qk_norm"  # where a layer takes it: MultiHeadAttention(qk_norm=...)

    def __init__(self, head_dim: int, *, eps: float = 1e-6, offset: float = 0.0, keys: bool = True) -> None:
        super().__init__()
        self.head_dim, self.eps = size("head_dim", head_dim), _eps(eps)
        self.offset = number("offset", offset, hint="0 for Qwen3 and Gemma 4, 1 for Gemma 3 and Qwen3-Next")
        if not isinstance(keys, bool):
            raise TypeError(f"keys must be True or False (False: a layer that reuses another's keys); got {keys!r}")
        self.q_weight = nn.Parameter(torch.full((self.head_dim,), 1.0 - self.offset))  # (E,)
        self.k_weight = nn.Parameter(torch.full((self.head_dim,), 1.0 - self.offset)) if keys else None  # (E,)

    def check(self, *, d_model: int, num_heads: int, num_kv_heads: int, head_dim: int) -> None:
        """Raise a ValueError unless this norm fits a layer of these sizes that computes its own keys."""
        _fits(self, {"head_dim": self.head_dim}, {"head_dim": head_dim})
        if self.k_weight is None:
            raise ValueError("PerHeadRMSNorm(keys=False) norms queries only, for a layer that reuses another "
                             "layer's keys; this layer computes its own: use keys=True")

    def forward(self, q: Tensor, k: Tensor | None) -> tuple[Tensor, Tensor | None]:
        _heads("q", q, self.head_dim)
        q = _rms_norm(q, self.q_weight, self.eps, self.offset)  # (B, H, T, E), over E
        if k is None:
            return q, None
        if self.k_weight is None:
            raise ValueError("this norm has no key weight (keys=False): pass k=None, or make it with keys=True")
        _heads("k", k, self.head_dim)
        return q, _rms_norm(k, self.k_weight, self.eps, self.offset)  # (B, K, S, E)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, eps={self.eps}, offset={self.offset}" + ("" if self.k_weight is not None
                                                                                     else ", keys=False")


class ProjectionRMSNorm(nn.Module):
    """RMSNorm over the whole query projection and the whole key projection (OLMo 2, OLMo 3).

    The statistic is taken over all heads together, ``H * E`` features for the queries and ``K * E`` for
    the keys, before the projection is split into heads, with one weight per feature of the projection.
    On the split tensors that is a mean over the head and feature dims.

    Args:
        num_heads: ``H``.
        num_kv_heads: ``K``.
        head_dim: ``E``.
        eps: added to the mean square.

    Shapes:
        q: ``(B, H, T, E)``, k: ``(B, K, S, E)`` or ``None``; outputs: the same.

    Example:
        >>> q, k = ProjectionRMSNorm(2, 1, 4)(torch.randn(1, 2, 3, 4), torch.randn(1, 1, 5, 4))
        >>> q.pow(2).mean((1, 3)).round(decimals=4).unique().tolist()  # each position's projection: RMS 1
        [1.0]
    """

    slot = "qk_norm"  # where a layer takes it: MultiHeadAttention(qk_norm=...)

    def __init__(self, num_heads: int, num_kv_heads: int, head_dim: int, *, eps: float = 1e-6) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads = size("num_heads", num_heads), size("num_kv_heads", num_kv_heads)
        self.head_dim, self.eps = size("head_dim", head_dim), _eps(eps)
        self.q_weight = nn.Parameter(torch.ones(self.num_heads * self.head_dim))  # (H * E,), the projection's order
        self.k_weight = nn.Parameter(torch.ones(self.num_kv_heads * self.head_dim))  # (K * E,)

    def check(self, *, d_model: int, num_heads: int, num_kv_heads: int, head_dim: int) -> None:
        """Raise a ValueError unless this norm fits a layer of these sizes."""
        mine = {"num_heads": self.num_heads, "num_kv_heads": self.num_kv_heads, "head_dim": self.head_dim}
        _fits(self, mine, {"num_heads": num_heads, "num_kv_heads": num_kv_heads, "head_dim": head_dim})

    def forward(self, q: Tensor, k: Tensor | None) -> tuple[Tensor, Tensor | None]:
        _heads("q", q, self.head_dim)
        if q.shape[1] != self.num_heads:
            raise ValueError(f"q must have num_heads={self.num_heads} heads; got shape {tuple(q.shape)}")
        w_q = self.q_weight.view(self.num_heads, self.head_dim)  # (H, E): the projection's features, head-major
        q = _rms_norm(q.transpose(1, 2), w_q, self.eps).transpose(1, 2)  # over (H, E) of (B, T, H, E)
        if k is None:
            return q, None
        _heads("k", k, self.head_dim)
        if k.shape[1] != self.num_kv_heads:
            raise ValueError(f"k must have num_kv_heads={self.num_kv_heads} heads; got shape {tuple(k.shape)}")
        w_k = self.k_weight.view(self.num_kv_heads, self.head_dim)  # (K, E)
        return q, _rms_norm(k.transpose(1, 2), w_k, self.eps).transpose(1, 2)  # over (K, E) of (B, S, K, E)

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}, num_kv_heads={self.num_kv_heads}, head_dim={self.head_dim}, eps={self.eps}"


class WeightlessRMSNorm(nn.Module):
    """Each head's query and key divided by its root-mean-square, with no weight (Llama 4 Scout's RoPE layers).

    Llama 4's code calls it an L2 norm; it divides by ``sqrt(mean(x^2) + eps)``, not by the length, so a
    head's vector ends with length ``sqrt(E)`` rather than 1 (the scores are then ``E`` times a cosine,
    scaled by ``1/sqrt(E)`` as usual). Llama 4 Scout applies it after RoPE (Maverick has no QK-norm); having
    no weight, it gives the same vector before RoPE (a rotation keeps lengths), which is where this layer
    applies every QK-norm.

    Shapes:
        q: ``(B, H, T, E)``, k: ``(B, K, S, E)`` or ``None``; outputs: the same.

    Example:
        >>> q, _ = WeightlessRMSNorm()(torch.full((1, 1, 1, 4), 3.0), torch.ones(1, 1, 1, 4))
        >>> q.flatten().round(decimals=4).tolist(), round(q.norm().item(), 4)  # length sqrt(4) = 2, not 1
        ([1.0, 1.0, 1.0, 1.0], 2.0)
    """

    slot = "qk_norm"  # where a layer takes it: MultiHeadAttention(qk_norm=...)

    def __init__(self, *, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = _eps(eps)

    def check(self, *, d_model: int, num_heads: int, num_kv_heads: int, head_dim: int) -> None:
        """Fits any layer: it has no weights."""

    def forward(self, q: Tensor, k: Tensor | None) -> tuple[Tensor, Tensor | None]:
        _heads("q", q)
        if k is not None:
            _heads("k", k)
        return _rms_norm(q, None, self.eps), None if k is None else _rms_norm(k, None, self.eps)  # (B, H, T, E), ...

    def extra_repr(self) -> str:
        return f"eps={self.eps}"


class ValueRMSNorm(nn.Module):
    """Each head's value divided by its root-mean-square, with no weight (Gemma 4), given as the layer's ``v_norm=``.

    Gemma 4 norms the values as it norms the queries and keys, so every head's value has RMS 1 before the
    softmax mixes them: a head's output is then an average of vectors of one size, whatever the projection's.
    The norm is taken before the values are cached, so a cache holds them normed (and a layer that reuses
    them, normed once).

    Args:
        eps: added to the mean square.

    Shapes:
        v: ``(B, K, S, E)``; output: the same.

    Example:
        >>> ValueRMSNorm(eps=0.0)(torch.tensor([[[[3.0, 4.0]]]])).flatten()  # RMS sqrt(12.5)
        tensor([0.8485, 1.1314])
    """

    slot = "v_norm"  # where a layer takes it: MultiHeadAttention(v_norm=...)

    def __init__(self, *, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = _eps(eps)

    def check(self, *, d_model: int, num_heads: int, num_kv_heads: int, head_dim: int) -> None:
        """Fits any layer: it has no weights."""

    def forward(self, v: Tensor) -> Tensor:
        _heads("v", v)
        return _rms_norm(v, None, self.eps)  # (B, K, S, E), over E

    def extra_repr(self) -> str:
        return f"eps={self.eps}"


# --------------------------------------------------------------------------- rotary positions


class Rotary(nn.Module):
    """RoPE on the first ``dim`` features of each head (all of them by default), at the tokens' positions.

    Qwen3-Next rotates a quarter of each head and passes the rest through unchanged (partial RoPE,
    ``partial_rotary_factor``; :meth:`partial` makes it from that fraction); most models rotate all of it;
    Gemma 4's global layers rotate all of it with the slow pairs' frequencies set to 0 (:meth:`proportional`).
    The rotation is :func:`lessons_src.rope.apply_rope` (pairs ``i`` and ``i + dim/2``), or with
    ``layout="interleaved"`` :func:`lessons_src.rope.apply_rope_interleaved` (pairs ``2i`` and ``2i + 1``, as
    Meta's original Llama code and DeepSeek lay them out); ``scaling`` stretches the context
    (:func:`lessons_src.rope.llama3_scaling`, :func:`lessons_src.rope.yarn_scaling`).

    Args:
        dim: features rotated per head ``R`` (even).
        base: the wavelength base (``rope_theta``); unused with ``scaling``.
        scaling: scaled frequencies (``R/2`` of them) and attention factor, or ``None``.
        layout: which features pair, ``"rotate_half"`` or ``"interleaved"``.

    Shapes:
        q: ``(B, H, T, E)``, k: ``(B, K, T, E)`` (or ``None``, for a layer that reuses another's keys) at positions
        ``start .. start + T - 1``; outputs: the same.

    Raises:
        ValueError: if ``dim`` is odd or below 2, or ``scaling`` was made for another ``dim``.

    Example:
        >>> q, k = Rotary(4)(torch.ones(1, 1, 2, 4), torch.ones(1, 1, 2, 4), start=0)
        >>> q[0, 0, 0].tolist()  # position 0: not rotated
        [1.0, 1.0, 1.0, 1.0]
    """

    slot = "rope"  # where a layer takes it: MultiHeadAttention(rope=...)

    def __init__(self, dim: int, *, base: float = 10000.0, scaling: RopeScaling | None = None,
                 layout: str = "rotate_half") -> None:
        super().__init__()
        self.layout = choice("layout", layout, ("rotate_half", "interleaved"))
        rope_frequencies(2, base=base)  # checks base, used or not
        self.dim, self.base, self.scaling = size("dim", dim), float(base), scaling
        if scaling is not None:
            instance("scaling", scaling, RopeScaling, "a RopeScaling (from llama3_scaling, yarn_scaling, ...) or None")
        at = None if scaling is None else scaling.inv_freq.device
        rope_cos_sin(torch.arange(1, device=at), self.dim, base=self.base, scaling=scaling)  # checks dim and scaling

    @classmethod
    def partial(cls, head_dim: int, fraction: float, *, base: float = 10000.0,
                scaling: RopeScaling | None = None) -> Rotary:
        """RoPE on ``fraction`` of each head's ``head_dim`` features (Qwen3-Next: 0.25), the rest passed through.

        Raises:
            ValueError: unless ``fraction`` is in ``(0, 1]`` and ``fraction * head_dim`` is an even whole number
                (RoPE rotates pairs); the message lists the fractions that would do.

        Example:
            >>> Rotary.partial(16, 0.25)
            Rotary(dim=4, base=10000.0)
        """
        head_dim = size("head_dim", head_dim)
        fraction = number("fraction", fraction, low=0.0, low_ok=False, high=1.0, hint="Qwen3-Next: 0.25")
        dim = fraction * head_dim
        if dim != int(dim) or int(dim) % 2:
            good = ", ".join(f"{r / head_dim:g}" for r in range(2, head_dim + 1, 2))
            raise ValueError(f"fraction={fraction!r} of head_dim={head_dim} rotates {dim:g} features, but RoPE rotates "
                             f"pairs: use a fraction giving an even count, one of {good}")
        return cls(int(dim), base=base, scaling=scaling)

    @classmethod
    def proportional(cls, head_dim: int, fraction: float, *, base: float = 10000.0, factor: float = 1.0) -> Rotary:
        """Gemma 4's global layers: RoPE on all ``head_dim`` features, only the fastest ``fraction`` of pairs turning.

        The frequencies are :func:`lessons_src.rope.proportional_scaling`'s (Gemma 4: ``fraction=0.25``,
        ``base=1e6``).

        Raises:
            ValueError: unless ``fraction`` is in ``(0, 1]`` and gives a whole number of pairs.

        Example:
            >>> Rotary.proportional(16, 0.25).scaling.inv_freq.count_nonzero().item()  # 2 of 8 pairs turn
            2
        """
        head_dim = size("head_dim", head_dim)
        if head_dim % 2:
            raise ValueError(f"RoPE rotates pairs of features, so head_dim must be even; got head_dim={head_dim}")
        return cls(head_dim, scaling=proportional_scaling(head_dim, fraction, base=base, factor=factor))

    def check(self, *, d_model: int, num_heads: int, num_kv_heads: int, head_dim: int) -> None:
        """Raise a ValueError unless ``dim`` fits in a head."""
        if self.dim > head_dim:
            raise ValueError(f"Rotary(dim={self.dim}) rotates more features than a head has (head_dim={head_dim}); "
                             f"use dim <= {head_dim}")

    def forward(self, q: Tensor, k: Tensor | None, *, start: int) -> tuple[Tensor, Tensor | None]:
        _heads("q", q)
        if k is not None:
            _heads("k", k)
        start = _start(start)
        T, R = q.shape[2], self.dim
        if q.shape[-1] < R or (k is not None and (k.shape[-1] < R or k.shape[2] != T)):
            raise ValueError(f"q and k must be (B, heads, T, E) with E >= dim={R} and one T, rotated at the same "
                             f"positions; got q {tuple(q.shape)}, k {None if k is None else tuple(k.shape)}")
        positions = torch.arange(start, start + T, device=q.device)  # (T,)
        cos, sin = rope_cos_sin(positions, R, base=self.base, dtype=q.dtype, scaling=self.scaling)  # (T, R) each
        rotate = apply_rope_interleaved if self.layout == "interleaved" else apply_rope
        q = torch.cat([rotate(q[..., :R], cos, sin), q[..., R:]], dim=-1)  # (B, H, T, E)
        if k is None:
            return q, None
        return q, torch.cat([rotate(k[..., :R], cos, sin), k[..., R:]], dim=-1)  # (B, K, T, E)

    def extra_repr(self) -> str:
        scaled = "" if self.scaling is None else f", scaling={self.scaling.attention_factor:g}x attention factor"
        layout = "" if self.layout == "rotate_half" else f", layout={self.layout!r}"
        return f"dim={self.dim}, base={self.base}{scaled}{layout}"


class NoPETemperature(nn.Module):
    """Llama 4's NoPE layers: no positions, and queries scaled up with the position ("temperature tuning").

    A layer without RoPE (NoPE) sees every earlier token alike, so at long range its softmax flattens over
    ever more keys. Llama 4 multiplies the query at position ``p`` by ``1 + attn_scale * ln(1 + floor((p + 1)
    / floor_scale))``, which is 1 for the first ``floor_scale - 1`` positions and grows slowly after, keeping
    the scores sharp. Keys are left as they are. It is the layer's position piece, given as ``rope=``, since
    it acts where RoPE would, and at the same positions (with a cache, those after the cached ones).

    ``transformers`` and Meta's code agree on the formula; Llama 4 Scout uses ``floor_scale=8192`` and
    ``attn_scale=0.1``.

    Args:
        floor_scale: positions per step of the scale (``>= 1``).
        attn_scale: how fast the scale grows with the log of the step (``>= 0``).

    Shapes:
        q: ``(B, H, T, E)``, k: ``(B, K, T, E)`` or ``None`` at positions ``start .. start + T - 1``; outputs: the same.

    Raises:
        ValueError: if ``floor_scale`` is below 1 or ``attn_scale`` negative or not finite.

    Example:
        >>> q, _ = NoPETemperature(floor_scale=2, attn_scale=1.0)(torch.ones(1, 1, 4, 1), torch.ones(1, 1, 4, 1),
        ...                                                       start=0)
        >>> [round(x, 4) for x in q.flatten().tolist()]  # 1 + ln(1 + floor((p + 1) / 2)) for p = 0 .. 3
        [1.0, 1.6931, 1.6931, 2.0986]
    """

    slot = "rope"  # where a layer takes it: MultiHeadAttention(rope=...)

    def __init__(self, *, floor_scale: int = 8192, attn_scale: float = 0.1) -> None:
        super().__init__()
        self.floor_scale = size("floor_scale", floor_scale)
        self.attn_scale = check_eps("attn_scale", attn_scale, "Llama 4: 0.1")

    def check(self, *, d_model: int, num_heads: int, num_kv_heads: int, head_dim: int) -> None:
        """Fits any layer: it has no weights."""

    def forward(self, q: Tensor, k: Tensor | None, *, start: int) -> tuple[Tensor, Tensor | None]:
        _heads("q", q)
        if k is not None:
            _heads("k", k)
        start = _start(start)
        positions = torch.arange(start, start + q.shape[2], device=q.device, dtype=torch.float64)  # (T,)
        scale = 1.0 + self.attn_scale * torch.log1p(torch.floor((positions + 1) / self.floor_scale))  # (T,)
        return q * scale.to(q.dtype)[:, None], k  # (B, H, T, E): each query times its position's scale

    def extra_repr(self) -> str:
        return f"floor_scale={self.floor_scale}, attn_scale={self.attn_scale}"


# --------------------------------------------------------------------------- output gates


class HeadwiseGate(nn.Module):
    """One sigmoid gate per head and token, from the layer's input: ``y_h <- y_h * sigmoid(x w_h)`` (Qiu et al.).

    A gate near 0 lets a head output nothing for a token, which a softmax alone cannot (its weights sum
    to 1); the paper finds that this removes the need for attention sinks and the huge first-token scores.

    Args:
        d_model: ``D``.
        num_heads: ``H``.
        bias: give the gate's projection a bias.

    Shapes:
        x: ``(B, T, D)``, y: ``(B, H, T, E)``; output: like ``y``.

    Example:
        >>> gate = HeadwiseGate(8, 2)
        >>> gate(torch.randn(1, 3, 8), torch.randn(1, 2, 3, 4)).shape
        torch.Size([1, 2, 3, 4])
    """

    slot = "gate"  # where a layer takes it: MultiHeadAttention(gate=...)

    def __init__(self, d_model: int, num_heads: int, *, bias: bool = False) -> None:
        super().__init__()
        self.d_model, self.num_heads = size("d_model", d_model), size("num_heads", num_heads)
        self.proj = nn.Linear(self.d_model, self.num_heads, bias=flag("bias", bias))  # (H, D)

    def check(self, *, d_model: int, num_heads: int, num_kv_heads: int, head_dim: int) -> None:
        """Raise a ValueError unless the gate's widths are the layer's."""
        _fits(self, {"d_model": self.d_model, "num_heads": self.num_heads},
              {"d_model": d_model, "num_heads": num_heads})

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        _gate_inputs(x, y, self.d_model, self.num_heads, None)
        g = torch.sigmoid(self.proj(x))  # (B, T, H)
        return y * g.transpose(1, 2)[..., None]  # (B, H, T, E)


class ElementwiseGate(nn.Module):
    """A sigmoid gate per head, token and feature, from the layer's input (Qiu et al.'s best; Qwen3-Next).

    Args:
        d_model: ``D``.
        num_heads: ``H``.
        head_dim: ``E``.
        bias: give the gate's projection a bias.

    Shapes:
        x: ``(B, T, D)``, y: ``(B, H, T, E)``; output: like ``y``.

    Example:
        >>> ElementwiseGate(8, 2, 4)(torch.randn(1, 3, 8), torch.randn(1, 2, 3, 4)).shape
        torch.Size([1, 2, 3, 4])
    """

    slot = "gate"  # where a layer takes it: MultiHeadAttention(gate=...)

    def __init__(self, d_model: int, num_heads: int, head_dim: int, *, bias: bool = False) -> None:
        super().__init__()
        self.d_model, self.num_heads = size("d_model", d_model), size("num_heads", num_heads)
        self.head_dim = size("head_dim", head_dim)
        self.proj = nn.Linear(self.d_model, self.num_heads * self.head_dim, bias=flag("bias", bias))  # (H * E, D)

    def check(self, *, d_model: int, num_heads: int, num_kv_heads: int, head_dim: int) -> None:
        """Raise a ValueError unless the gate's widths are the layer's."""
        mine = {"d_model": self.d_model, "num_heads": self.num_heads, "head_dim": self.head_dim}
        _fits(self, mine, {"d_model": d_model, "num_heads": num_heads, "head_dim": head_dim})

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        _gate_inputs(x, y, self.d_model, self.num_heads, self.head_dim)
        B, T, _ = x.shape
        g = torch.sigmoid(self.proj(x)).view(B, T, self.num_heads, self.head_dim)  # (B, T, H, E)
        return y * g.transpose(1, 2)  # (B, H, T, E)


def _gate_inputs(x: object, y: object, d_model: int, num_heads: int, head_dim: int | None) -> None:
    """Raise unless ``x`` is ``(B, T, d_model)`` and ``y`` the heads' outputs ``(B, num_heads, T, E)`` for it."""
    if type(x) is not Tensor or x.ndim != 3 or x.shape[-1] != d_model or not x.dtype.is_floating_point:
        x = tensor("x", x, ndim=3, shape=f"(B, T, d_model={d_model})")
        raise ValueError(f"x must be (B, T, d_model={d_model}); got shape {tuple(x.shape)}")
    _heads("y", y, head_dim)
    assert isinstance(y, Tensor)
    if y.shape[:3] != (x.shape[0], num_heads, x.shape[1]):
        raise ValueError(f"y must be the heads' outputs (B, num_heads={num_heads}, T, E) for x {tuple(x.shape)}; "
                         f"got shape {tuple(y.shape)}")
