"""Today's changes around attention, as pieces a layer is given by name: QK-norm, rotary positions, output gates.

The open models of 2025-26 keep multi-head attention and change a few things around it. Each change here
is a small ``nn.Module`` that :class:`lessons_src.attention.MultiHeadAttention` is *given*, so a layer
says what it uses instead of switching flags on::

    MultiHeadAttention(d_model, num_heads, qk_norm=PerHeadRMSNorm(head_dim), rope=Rotary(head_dim),
                       gate=ElementwiseGate(d_model, num_heads, head_dim), sinks=True)

Why pieces and not flags: each change has its own weights, and the models disagree on the details
(Gemma's norms multiply by ``1 + w``, OLMo's normalise the whole projection, Llama 4's have no weight);
a piece carries its details with it, the plain layer's code stays what it was (an absent piece is
``None`` and costs one ``if``), and a reader copies only the pieces a model uses. The two changes that
act *inside* the softmax, the soft-cap and the sinks, are not pieces: they are arguments of
:func:`lessons_src.attention.attention` (``softcap=``, ``sinks=``; their code is in
:mod:`lessons_src.score_mods`) so that every implementation (``"sdpa"``, ``"eager"``, ``"tiled"``) honours
them; the layer passes them on (``softcap=50.0``, and ``sinks=True`` for a learned logit per head).

Where they live: this file needs only ``rope.py``, and ``attention.py`` never imports it (a layer calls the
piece it is given: ``qk_norm(q, k)``, ``rope(q, k, start=...)``, ``gate(x, y)``, and asks it to ``check``
the layer's sizes), so a reader who copies ``attention.py`` copies none of these pieces unless a model needs
them.

The order, from the layer's input ``x`` to its output (each step with the model that fixes it):

1. project ``x`` to ``q, k, v`` (one matmul);
2. **QK-norm** on ``q`` and ``k`` (:class:`PerHeadRMSNorm`: Qwen3, Gemma 3, Qwen3-Next;
   :class:`ProjectionRMSNorm`: OLMo 2 and 3; :class:`WeightlessRMSNorm`: Llama 4), then **RoPE**
   (:class:`Rotary`). A norm with a weight must come before the rotation: the weight scales feature
   ``i``, and the rotation mixes feature ``i`` with feature ``i + R/2``, so the two do not commute.
   Llama 4 normalises *after* RoPE, and its norm has no weight: a rotation keeps every vector's length, so
   before or after gives the same vector, and the layer applies all three kinds in one place;
3. **scale** the scores ``q k^T`` by ``1/sqrt(E)``; then
4. **cap** them, ``c tanh(s / c)`` (Gemma 2): on the *scaled* scores, since ``c`` (50) is set for them;
5. **mask**: after the cap, because a cap applied to ``-inf`` gives ``-c``, a finite score, and a hidden
   key would come back;
6. **softmax with the sink** (gpt-oss): the sink logit is one more column, after the mask so that no mask
   hides it (a query that sees no key puts all its weight on the sink and gets zero);
7. weight the **values** (the sink has none);
8. **gate** each head's output, ``sigmoid(x W_g)`` (Qiu et al.; Qwen3-Next): computed from the layer's
   input, applied before ``W_O`` because ``W_O`` mixes the heads; a gate after it would be one gate for all;
9. ``W_O``.

Where ``transformers``, the papers and the official code differ, the course follows the model's own code as
``transformers`` ships it (the tests compare with it), and says so:

* dtype: the norms compute in float32 for half-precision inputs and multiply by the weight before casting
  back (Gemma, OLMo, Qwen3-Next; Qwen3's module casts before the weight, one rounding apart);
* Llama 4's "L2 norm" divides by the root-mean-square, not the length (:class:`WeightlessRMSNorm`), in
  ``transformers`` and in Meta's code alike; its NoPE layers have no norm and scale queries by position
  instead ("temperature tuning"), which is not a piece here;
* Qwen3-Next's gate weights are rows of ``q_proj``, interleaved per head (``[q_h; g_h]``); the paper's gate
  is its own projection of the layer's input. The function is the same; here it is its own ``nn.Linear``
  (:class:`ElementwiseGate`), and the test moves the rows. The paper's headwise gate ships in no pinned
  model: its test is the formula;
* Gemma 2 scales by ``query_pre_attn_scalar ** -0.5``, which is ``1/sqrt(head_dim)`` for the 2B and 9B
  models (the layer's scale) but not for the 27B; ``transformers`` runs the cap in eager attention only,
  as ``"sdpa"`` refuses it here;
* gpt-oss's module shifts the logits by their row maximum (with the sink) before the softmax, which changes
  nothing but the rounding, and leaves its sinks uninitialised (``torch.empty``); here they start at zero.

References:
    Qwen Team, "Qwen3 Technical Report", 2025 (arXiv:2505.09388): per-head QK-norm.
    Gemma Team, "Gemma 3 Technical Report", 2025 (arXiv:2503.19786): QK-norm with ``(1 + w)`` weights.
    Team OLMo, "2 OLMo 2 Furious", 2025 (arXiv:2501.00656): QK-norm over the whole projection.
    Meta, Llama 4 model code (``llama_models/llama4/model.py``): weightless norm after RoPE, on RoPE layers.
    Qiu et al., "Gated Attention for Large Language Models: Non-linearity, Sparsity, and Attention-Sink-Free",
    2025 (arXiv:2505.06708): the sigmoid output gate, headwise or elementwise (their G1 position).
    Su et al., "RoFormer", 2021 (arXiv:2104.09864): rotary positions.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .rope import apply_rope, rope_cos_sin

__all__ = [
    "ElementwiseGate",
    "HeadwiseGate",
    "PerHeadRMSNorm",
    "ProjectionRMSNorm",
    "Rotary",
    "WeightlessRMSNorm",
]


def _rms_norm(x: Tensor, weight: Tensor | None, eps: float) -> Tensor:
    """``x / sqrt(mean(x^2) + eps) * weight`` over ``x``'s last ``weight.ndim`` dims (the last dim without a
    weight), computed in float32 for half-precision ``x`` and returned in ``x``'s dtype.

    ``F.rms_norm`` is that formula in one fused kernel (a third of the time of the four ops on CPU).

    Shapes:
        x: ``(..., *weight.shape)``; weight: the normalised dims' shape; output: like ``x``.

    Example:
        >>> _rms_norm(torch.tensor([3.0, 4.0]), None, 0.0)  # RMS is sqrt(12.5)
        tensor([0.8485, 1.1314])
    """
    shape = x.shape[-1:] if weight is None else weight.shape
    if x.dtype in (torch.float16, torch.bfloat16):
        w = None if weight is None else weight.float()
        return F.rms_norm(x.float(), shape, w, eps).to(x.dtype)
    return F.rms_norm(x, shape, None if weight is None else weight.to(x.dtype), eps)


def _eps(eps: object) -> float:
    if isinstance(eps, bool) or not isinstance(eps, int | float) or not eps >= 0:
        raise ValueError(f"eps must be a number at least 0 (1e-6 is usual); got eps={eps!r}")
    return float(eps)


def _width(name: str, value: object) -> int:
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{name} must be an int; got {value!r} of type {type(value).__name__}")
    n = int(value.__index__())
    if n < 1:
        raise ValueError(f"{name} must be at least 1; got {name}={n}")
    return n


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
    ``w`` starting at 0); Qwen3 as ``w`` (``offset=0``, ``w`` starting at 1). The weights start so that the
    multiplier is 1.

    Args:
        head_dim: ``E``.
        eps: added to the mean square.
        offset: ``0`` (Qwen3) or ``1`` (Gemma 3, Qwen3-Next).

    Shapes:
        q: ``(B, H, T, E)``, k: ``(B, K, S, E)``; outputs: the same.

    Example:
        >>> norm = PerHeadRMSNorm(4, offset=1.0)
        >>> q, k = norm(torch.randn(1, 2, 3, 4), torch.randn(1, 1, 5, 4))
        >>> q.pow(2).mean(-1).round(decimals=4).unique().tolist()  # every head's query now has RMS 1
        [1.0]
    """

    def __init__(self, head_dim: int, *, eps: float = 1e-6, offset: float = 0.0) -> None:
        super().__init__()
        self.head_dim, self.eps, self.offset = _width("head_dim", head_dim), _eps(eps), float(offset)
        self.q_weight = nn.Parameter(torch.full((self.head_dim,), 1.0 - self.offset))  # (E,)
        self.k_weight = nn.Parameter(torch.full((self.head_dim,), 1.0 - self.offset))  # (E,)

    def check(self, *, d_model: int, num_heads: int, num_kv_heads: int, head_dim: int) -> None:
        """Raise a ValueError unless this norm fits a layer of these sizes."""
        _fits(self, {"head_dim": self.head_dim}, {"head_dim": head_dim})

    def forward(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        q = _rms_norm(q, self.offset + self.q_weight, self.eps)  # (B, H, T, E), over E
        k = _rms_norm(k, self.offset + self.k_weight, self.eps)  # (B, K, S, E)
        return q, k

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, eps={self.eps}, offset={self.offset}"


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
        q: ``(B, H, T, E)``, k: ``(B, K, S, E)``; outputs: the same.

    Example:
        >>> q, k = ProjectionRMSNorm(2, 1, 4)(torch.randn(1, 2, 3, 4), torch.randn(1, 1, 5, 4))
        >>> q.pow(2).mean((1, 3)).round(decimals=4).unique().tolist()  # each position's projection: RMS 1
        [1.0]
    """

    def __init__(self, num_heads: int, num_kv_heads: int, head_dim: int, *, eps: float = 1e-6) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads = _width("num_heads", num_heads), _width("num_kv_heads", num_kv_heads)
        self.head_dim, self.eps = _width("head_dim", head_dim), _eps(eps)
        self.q_weight = nn.Parameter(torch.ones(self.num_heads * self.head_dim))  # (H * E,), the projection's order
        self.k_weight = nn.Parameter(torch.ones(self.num_kv_heads * self.head_dim))  # (K * E,)

    def check(self, *, d_model: int, num_heads: int, num_kv_heads: int, head_dim: int) -> None:
        """Raise a ValueError unless this norm fits a layer of these sizes."""
        mine = {"num_heads": self.num_heads, "num_kv_heads": self.num_kv_heads, "head_dim": self.head_dim}
        _fits(self, mine, {"num_heads": num_heads, "num_kv_heads": num_kv_heads, "head_dim": head_dim})

    def forward(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        w_q = self.q_weight.view(self.num_heads, self.head_dim)  # (H, E): the projection's features, head-major
        w_k = self.k_weight.view(self.num_kv_heads, self.head_dim)  # (K, E)
        q = _rms_norm(q.transpose(1, 2), w_q, self.eps).transpose(1, 2)  # over (H, E) of (B, T, H, E)
        k = _rms_norm(k.transpose(1, 2), w_k, self.eps).transpose(1, 2)  # over (K, E) of (B, S, K, E)
        return q, k

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}, num_kv_heads={self.num_kv_heads}, head_dim={self.head_dim}, eps={self.eps}"


class WeightlessRMSNorm(nn.Module):
    """Each head's query and key divided by its root-mean-square, with no weight (Llama 4, on its RoPE layers).

    Llama 4's code calls it an L2 norm; it divides by ``sqrt(mean(x^2) + eps)``, not by the length, so a
    head's vector ends with length ``sqrt(E)`` rather than 1 (the scores are then ``E`` times a cosine,
    scaled by ``1/sqrt(E)`` as usual). Llama 4 applies it after RoPE; having no weight, it gives the same
    vector before RoPE (a rotation keeps lengths), which is where this layer applies every QK-norm.

    Shapes:
        q: ``(B, H, T, E)``, k: ``(B, K, S, E)``; outputs: the same.

    Example:
        >>> q, _ = WeightlessRMSNorm()(torch.full((1, 1, 1, 4), 3.0), torch.ones(1, 1, 1, 4))
        >>> q.flatten().round(decimals=4).tolist(), round(q.norm().item(), 4)  # length sqrt(4) = 2, not 1
        ([1.0, 1.0, 1.0, 1.0], 2.0)
    """

    def __init__(self, *, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = _eps(eps)

    def check(self, *, d_model: int, num_heads: int, num_kv_heads: int, head_dim: int) -> None:
        """Fits any layer: it has no weights."""

    def forward(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        return _rms_norm(q, None, self.eps), _rms_norm(k, None, self.eps)  # (B, H, T, E), (B, K, S, E)

    def extra_repr(self) -> str:
        return f"eps={self.eps}"


# --------------------------------------------------------------------------- rotary positions


class Rotary(nn.Module):
    """RoPE on the first ``dim`` features of each head (all of them by default), at the tokens' positions.

    Qwen3-Next rotates a quarter of each head (``partial_rotary_factor``); most models rotate all of it.
    The rotation is :func:`lessons_src.rope.apply_rope` (pairs ``i`` and ``i + dim/2``).

    Args:
        dim: features rotated per head ``R`` (even).
        base: the wavelength base (``rope_theta``).

    Shapes:
        q: ``(B, H, T, E)``, k: ``(B, K, T, E)`` at positions ``start .. start + T - 1``; outputs: the same.

    Example:
        >>> q, k = Rotary(4)(torch.ones(1, 1, 2, 4), torch.ones(1, 1, 2, 4), start=0)
        >>> q[0, 0, 0].tolist()  # position 0: not rotated
        [1.0, 1.0, 1.0, 1.0]
    """

    def __init__(self, dim: int, *, base: float = 10000.0) -> None:
        super().__init__()
        self.dim, self.base = _width("dim", dim), float(base)
        rope_cos_sin(torch.arange(1), self.dim)  # checks dim: even, at least 2

    def check(self, *, d_model: int, num_heads: int, num_kv_heads: int, head_dim: int) -> None:
        """Raise a ValueError unless ``dim`` fits in a head."""
        if self.dim > head_dim:
            raise ValueError(f"Rotary(dim={self.dim}) rotates more features than a head has (head_dim={head_dim}); "
                             f"use dim <= {head_dim}")

    def forward(self, q: Tensor, k: Tensor, *, start: int) -> tuple[Tensor, Tensor]:
        T, R = q.shape[2], self.dim
        positions = torch.arange(start, start + T, device=q.device)  # (T,)
        cos, sin = rope_cos_sin(positions, R, base=self.base, dtype=q.dtype)  # (T, R) each
        q = torch.cat([apply_rope(q[..., :R], cos, sin), q[..., R:]], dim=-1)  # (B, H, T, E)
        k = torch.cat([apply_rope(k[..., :R], cos, sin), k[..., R:]], dim=-1)  # (B, K, T, E)
        return q, k

    def extra_repr(self) -> str:
        return f"dim={self.dim}, base={self.base}"


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

    def __init__(self, d_model: int, num_heads: int, *, bias: bool = False) -> None:
        super().__init__()
        self.d_model, self.num_heads = _width("d_model", d_model), _width("num_heads", num_heads)
        self.proj = nn.Linear(self.d_model, self.num_heads, bias=bias)  # (H, D)

    def check(self, *, d_model: int, num_heads: int, num_kv_heads: int, head_dim: int) -> None:
        """Raise a ValueError unless the gate's widths are the layer's."""
        _fits(self, {"d_model": self.d_model, "num_heads": self.num_heads},
              {"d_model": d_model, "num_heads": num_heads})

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
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

    def __init__(self, d_model: int, num_heads: int, head_dim: int, *, bias: bool = False) -> None:
        super().__init__()
        self.d_model, self.num_heads = _width("d_model", d_model), _width("num_heads", num_heads)
        self.head_dim = _width("head_dim", head_dim)
        self.proj = nn.Linear(self.d_model, self.num_heads * self.head_dim, bias=bias)  # (H * E, D)

    def check(self, *, d_model: int, num_heads: int, num_kv_heads: int, head_dim: int) -> None:
        """Raise a ValueError unless the gate's widths are the layer's."""
        mine = {"d_model": self.d_model, "num_heads": self.num_heads, "head_dim": self.head_dim}
        _fits(self, mine, {"d_model": d_model, "num_heads": num_heads, "head_dim": head_dim})

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        B, T, _ = x.shape
        g = torch.sigmoid(self.proj(x)).view(B, T, self.num_heads, self.head_dim)  # (B, T, H, E)
        return y * g.transpose(1, 2)  # (B, H, T, E)
