"""The gated delta rule: linear attention with a fixed-size state, one step per token or a chunk at a time.

Gated DeltaNet (Yang et al. 2024, arXiv:2412.06464; Qwen3-Next and Qwen3.5's linear layers) and Kimi Delta
Attention (KDA, arXiv:2510.26692; Kimi Linear) keep, per head, a state ``S`` of ``Dk x Dv`` numbers instead of a
cache that grows with the context. Each token decays the state, erases what the state recalls for its key, and
writes its own value in that place, then its query reads the state:

    S  <-  exp(g_t) * S                        the gate: g_t <= 0, one number per head (Gated DeltaNet)
                                               or one per key channel, a diagonal decay (KDA)
    S  <-  S + k_t (beta_t (v_t - S^T k_t))^T  the delta rule: S^T k_t is what the state recalls for k_t,
                                               so the write replaces it, at rate beta_t, with v_t
    o_t =  S^T (scale * q_t)

:func:`delta_rule_recurrent` runs that loop; :func:`delta_rule_chunked` computes the same outputs a chunk of
tokens at a time with matrix products (the form that trains fast), passing the state from chunk to chunk.
Both match transformers' own PyTorch implementations (Qwen3-Next's ``torch_recurrent_gated_delta_rule`` and
``torch_chunk_gated_delta_rule``, Kimi Linear's ``recurrent_kimi_delta_attention`` and
``chunk_kimi_delta_attention``; the tests check it). The models L2-normalise queries and keys before these
functions and give the value heads their key head by ``repeat_interleave``: the caller does both here.

Shapes: ``q``, ``k`` ``(B, H, T, Dk)``; ``v`` ``(B, H, T, Dv)``; ``g`` ``(B, H, T)`` or ``(B, H, T, Dk)``;
``beta`` ``(B, H, T)``; the state ``(B, H, Dk, Dv)``. Computed in float32, returned in ``v``'s dtype.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ._checks import positive, size, tensor

__all__ = ["delta_rule_chunked", "delta_rule_recurrent"]


def _check(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, state: Tensor | None,
           scale: object) -> float | None:
    for name, t, layout in (("q", q, "(B, H, T, Dk)"), ("k", k, "(B, H, T, Dk)"), ("v", v, "(B, H, T, Dv)"),
                            ("g", g, "(B, H, T) or (B, H, T, Dk)"), ("beta", beta, "(B, H, T)"),
                            ("state", state, "(B, H, Dk, Dv)")):
        if t is not None:
            tensor(name, t, shape=layout)
    if q.dim() != 4 or q.shape != k.shape:
        raise ValueError(f"q and k must both be (B, H, T, Dk); got q {tuple(q.shape)}, k {tuple(k.shape)}")
    B, H, T, Dk = q.shape
    if v.dim() != 4 or v.shape[:3] != (B, H, T):
        raise ValueError(f"v must be (B, H, T, Dv) = ({B}, {H}, {T}, Dv) like q; got {tuple(v.shape)}")
    if g.shape not in ((B, H, T), (B, H, T, Dk)):
        raise ValueError(
            f"g must be ({B}, {H}, {T}) (one gate per head, Gated DeltaNet) or ({B}, {H}, {T}, {Dk}) "
            f"(one per key channel, KDA); got {tuple(g.shape)}"
        )
    if beta.shape != (B, H, T):
        raise ValueError(f"beta must be (B, H, T) = ({B}, {H}, {T}); got {tuple(beta.shape)}")
    if state is not None and state.shape != (B, H, Dk, v.shape[-1]):
        raise ValueError(f"state must be (B, H, Dk, Dv) = ({B}, {H}, {Dk}, {v.shape[-1]}); got {tuple(state.shape)}")
    scale = None if scale is None else positive("scale", scale, "default Dk ** -0.5")
    if g.is_meta or beta.is_meta:  # no values to check
        return scale
    if not bool(torch.isfinite(g).all()) or bool((g > 0).any()):
        raise ValueError(
            f"g is the log of the state's decay, so it must be finite and at most 0 (a decay in (0, 1]); got values "
            f"from {g.min().item():.3g} to {g.max().item():.3g} (models take g = -softplus(...) * A, or logsigmoid)"
        )
    if not bool(((beta >= 0) & (beta <= 2)).all()):
        raise ValueError(
            f"beta is the write strength: it must lie in [0, 2] (Gated DeltaNet and KDA take a sigmoid, in (0, 1); "
            f"2 allows the state's eigenvalues down to -1); got values from {beta.min().item():.3g} to "
            f"{beta.max().item():.3g}"
        )
    return scale


def delta_rule_recurrent(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, *, state: Tensor | None = None,
    scale: float | None = None,
) -> tuple[Tensor, Tensor]:
    """The gated delta rule, one token at a time: ``(output (B, H, T, Dv), final state (B, H, Dk, Dv))``.

    Args:
        q, k: ``(B, H, T, Dk)``, normalised by the caller as the model does (L2 in Gated DeltaNet and KDA).
        v: ``(B, H, T, Dv)``.
        g: log decay, ``<= 0``: ``(B, H, T)`` one per head (Gated DeltaNet), ``(B, H, T, Dk)`` one per key channel
            (KDA).
        beta: write strength per head and token, ``(B, H, T)``, in ``[0, 2]``.
        state: the state before the first token, ``(B, H, Dk, Dv)`` (default zeros).
        scale: the queries' factor (default ``Dk ** -0.5``).

    Raises:
        ValueError: on shapes that do not fit together, ``g > 0`` or not finite, ``beta`` outside ``[0, 2]``.

    Example:
        >>> q = k = torch.nn.functional.normalize(torch.randn(1, 2, 5, 4), dim=-1)
        >>> out, state = delta_rule_recurrent(q, k, torch.randn(1, 2, 5, 3), -torch.rand(1, 2, 5), torch.rand(1, 2, 5))
        >>> out.shape, state.shape
        (torch.Size([1, 2, 5, 3]), torch.Size([1, 2, 4, 3]))
    """
    scale = _check(q, k, v, g, beta, state, scale)
    B, H, T, Dk = q.shape
    f32, dtype = torch.float32, v.dtype
    q = q.to(f32) * (Dk**-0.5 if scale is None else scale)
    k, v, beta = k.to(f32), v.to(f32), beta.to(f32)
    decay = g.to(f32).exp()
    decay = decay[..., None, None] if decay.dim() == 3 else decay[..., None]  # (B, H, T, 1, 1) or (B, H, T, Dk, 1)
    S = torch.zeros(B, H, Dk, v.shape[-1], dtype=f32, device=v.device) if state is None else state.to(f32)
    out = []
    for t in range(T):
        S = S * decay[:, :, t]  # the gate
        recalled = torch.einsum("bhkv,bhk->bhv", S, k[:, :, t])  # what the state holds for this key, (B, H, Dv)
        write = beta[:, :, t, None] * (v[:, :, t] - recalled)  # the delta: replace it with the value
        S = S + k[:, :, t, :, None] * write[:, :, None, :]  # (B, H, Dk, Dv)
        out.append(torch.einsum("bhkv,bhk->bhv", S, q[:, :, t]))
    o = torch.stack(out, dim=2) if out else v.new_zeros(B, H, 0, v.shape[-1])
    return o.to(dtype), S


def delta_rule_chunked(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, *, chunk_size: int = 64,
    state: Tensor | None = None, scale: float | None = None,
) -> tuple[Tensor, Tensor]:
    """The gated delta rule a chunk at a time; the same results as :func:`delta_rule_recurrent`.

    Inside a chunk of ``C`` tokens with cumulative log decays ``c_i`` (per key channel), the writes depend on each
    other only through the lower-triangular ``A[i, j] = beta_i sum_d k_i[d] k_j[d] exp(c_i[d] - c_j[d])``
    (``j < i``; with one gate per head, ``exp(c_i - c_j)`` is one number per pair of tokens and the sums are plain
    matrix products, the form Gated DeltaNet trains with): one triangular solve gives each token's value net of
    what the earlier writes of the chunk recall (``u``) and the decayed keys through which the state before the
    chunk is read (``w``). Then ``o = (q * exp(c)) S + P (u - w S)``, ``P`` the chunk's decayed query-key
    products, and the state moves on to ``exp(c_C) S + sum_j (k_j * exp(c_C - c_j)) (u - w S)_j``. Every ``exp``
    is of a difference ``<= 0``, so nothing overflows however strong the decay. ``T`` need not be a multiple of
    ``chunk_size``.

    Raises:
        ValueError: as :func:`delta_rule_recurrent`, and if ``chunk_size`` is not a positive int.
    """
    chunk_size = size("chunk_size", chunk_size, hint="tokens per chunk, 64 in the models")
    scale = _check(q, k, v, g, beta, state, scale)
    B, H, T, Dk = q.shape
    Dv, f32, dtype = v.shape[-1], torch.float32, v.dtype
    q = q.to(f32) * (Dk**-0.5 if scale is None else scale)
    k, v, beta, g = k.to(f32), v.to(f32), beta.to(f32), g.to(f32)
    per_head = g.dim() == 3  # Gated DeltaNet: the same decay on every key channel
    S = torch.zeros(B, H, Dk, Dv, dtype=f32, device=v.device) if state is None else state.to(f32)
    out = []
    for start in range(0, T, chunk_size):
        end = min(start + chunk_size, T)
        C = end - start
        qc, kc, vc, bc = q[:, :, start:end], k[:, :, start:end], v[:, :, start:end], beta[:, :, start:end]
        c = g[:, :, start:end].cumsum(dim=2)  # (B, H, C) or (B, H, C, Dk): log decay from the chunk's start
        lower = torch.ones(C, C, dtype=torch.bool, device=v.device).tril()  # j <= i
        if per_head:  # exp(c_i - c_j) is one number per pair of tokens: plain matrix products
            decay = (c[..., :, None] - c[..., None, :]).masked_fill(~lower, float("-inf")).exp()  # (B, H, C, C)
            A = ((kc * bc[..., None]) @ kc.transpose(-1, -2) * decay).tril(-1)
            P = qc @ kc.transpose(-1, -2) * decay  # (B, H, C, C), zero above the diagonal
            c = c[..., None]  # (B, H, C, 1): the same on every key channel below
        else:  # one decay per key channel: it weighs each channel of the dot products
            gap = (c[:, :, :, None, :] - c[:, :, None, :, :]).masked_fill(~lower[..., None], float("-inf"))
            decay = gap.exp()  # (B, H, C, C, Dk): exp(c_i - c_j) for j <= i, 0 above
            A = torch.einsum("bhid,bhjd,bhijd->bhij", kc * bc[..., None], kc, decay).tril(-1)
            P = torch.einsum("bhid,bhjd,bhijd->bhij", qc, kc, decay)  # (B, H, C, C), zero above the diagonal
        L = A + torch.eye(C, dtype=f32, device=v.device)  # unit lower triangular
        u = torch.linalg.solve_triangular(L, vc * bc[..., None], upper=False)  # (B, H, C, Dv)
        w = torch.linalg.solve_triangular(L, kc * bc[..., None] * c.exp(), upper=False)  # (B, H, C, Dk)
        new = u - w @ S  # each token's write, net of what the state before the chunk recalls
        out.append((qc * c.exp()) @ S + P @ new)
        last = c[:, :, -1:]  # (B, H, 1, Dk), or (B, H, 1, 1) with one gate per head
        S = S * last.transpose(-1, -2).exp() + (kc * (last - c).exp()).transpose(-1, -2) @ new
    o = torch.cat(out, dim=2) if out else v.new_zeros(B, H, 0, Dv)
    return o.to(dtype), S
