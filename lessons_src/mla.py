"""Multi-head latent attention (MLA), as in DeepSeek-V2: cache one small latent per token, not K and V per head.

Each token's hidden state ``h`` (our ``x``) is compressed to a latent ``c = W_DKV h`` of size ``C``
(the paper's ``d_c``); per-head keys and values are *up-projections* of it, ``k_h = W_UK_h c`` and
``v_h = W_UV_h c``. Position goes in through a separate, decoupled RoPE key ``k_R = RoPE(W_KR h)`` of
size ``R`` (``d_h^R``), shared by all heads, and a RoPE part of each query. So a token adds only
``C + R`` numbers to the cache, whatever the number of heads. Queries may be compressed too
(``q_latent_dim``, the paper's ``d_c'``), which saves activations in training, not cache.

Two ways to run it, which compute the same function:

* **naive**: up-project the cached latents of all ``S`` positions to full keys and values every step,
  then attend as MHA does. Simple, but each decoding step redoes ``S`` up-projections.
* **absorbed**: since ``q_h . (W_UK_h c) = (W_UK_h^T q_h) . c``, fold ``W_UK`` into the query and
  ``W_UV`` into the output side; attention then runs directly on the cached latents, which all heads
  share, like multi-query attention with head size ``C + R``.

Names (paper, section 2.1 -> here -> Hugging Face DeepSeek-V2): ``d_c`` -> ``kv_latent_dim`` ->
``kv_lora_rank``; ``d_c'`` -> ``q_latent_dim`` -> ``q_lora_rank``; ``d_h^R`` -> ``rope_dim`` ->
``qk_rope_head_dim``; ``d_h`` -> ``head_dim`` -> ``qk_nope_head_dim`` and ``v_head_dim``;
``[W_DKV; W_KR]`` -> ``kv_down_proj`` -> ``kv_a_proj_with_mqa``; ``W_UK``, ``W_UV`` -> ``k_up_proj``,
``v_up_proj`` -> ``kv_b_proj`` (both, per head interleaved); ``W_DQ`` -> ``q_down_proj`` -> ``q_a_proj``;
``[W_UQ; W_QR]`` -> ``q_up_proj`` (or ``q_proj`` without query compression) -> ``q_b_proj`` (``q_proj``);
``W_O`` -> ``out_proj`` -> ``o_proj``. The RMSNorms that DeepSeek-V2 applies to the latents
(section 3.1.2) are left out here. RoPE here pairs features ``(i, i + R/2)`` (:func:`lessons_src.rope.apply_rope`);
DeepSeek's checkpoints pair ``(2i, 2i + 1)``: permute the rows of ``W_QR`` (each head's RoPE part) and ``W_KR``
by :func:`lessons_src.rope.interleaved_to_rotate_half` when loading one.

References:
    DeepSeek-AI, "DeepSeek-V2: A Strong, Economical, and Efficient Mixture-of-Experts Language Model",
    2024 (arXiv:2405.04434), section 2.1.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._checks import size
from .masks import causal_mask
from .rope import apply_rope, rope_cos_sin

if TYPE_CHECKING:
    from .kv_cache import LatentCache

__all__ = ["MultiHeadLatentAttention"]

Mode = Literal["naive", "absorbed"]


class MultiHeadLatentAttention(nn.Module):
    """Causal self-attention that caches a compressed latent (DeepSeek-V2's MLA).

    Args:
        d_model: model width ``D``.
        num_heads: query heads ``H`` (every head has its own up-projected key and value).
        kv_latent_dim: ``C``, size of the joint key/value latent (paper ``d_c``, HF ``kv_lora_rank``).
        rope_dim: ``R``, size of the decoupled RoPE key shared by all heads and of each head's RoPE query
            part (paper ``d_h^R``, HF ``qk_rope_head_dim``); even.
        head_dim: ``E``, per-head size of the position-free query/key part (paper ``d_h``, HF
            ``qk_nope_head_dim``); default ``d_model // num_heads``.
        v_head_dim: ``Ev``, per-head value size (HF ``v_head_dim``); default ``head_dim``.
        q_latent_dim: compress queries to this size first (paper ``d_c'``, HF ``q_lora_rank``); ``None``
            projects queries directly.
        rope_base: RoPE wavelength base.

    Shapes:
        x: ``(B, T, D)``; output: ``(B, T, D)``. Internally q ``(B, H, T, E + R)``; the cache holds
        ``(B, S, C + R)``.

    Raises:
        ValueError: if a size is below 1, ``rope_dim`` is odd, ``head_dim`` is not given and
            ``num_heads`` does not divide ``d_model``, and, in :meth:`forward`, on malformed inputs.

    Example:
        >>> from lessons_src.kv_cache import LatentCache
        >>> mla = MultiHeadLatentAttention(32, 4, kv_latent_dim=16, rope_dim=4).eval()
        >>> cache = LatentCache(batch_size=1, kv_latent_dim=16, rope_dim=4, max_len=6)
        >>> with torch.no_grad():  # caches are for inference
        ...     _ = mla(torch.randn(1, 5, 32), cache=cache)  # prefill
        ...     y = mla(torch.randn(1, 1, 32), cache=cache, mode="absorbed")  # decode one token
        >>> y.shape, cache.nbytes
        (torch.Size([1, 1, 32]), 480)
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        *,
        kv_latent_dim: int,
        rope_dim: int,
        head_dim: int | None = None,
        v_head_dim: int | None = None,
        q_latent_dim: int | None = None,
        rope_base: float = 10000.0,
    ) -> None:
        super().__init__()
        sizes: dict[str, object] = {
            "d_model": d_model, "num_heads": num_heads, "kv_latent_dim": kv_latent_dim, "rope_dim": rope_dim
        }
        optional = {"head_dim": head_dim, "v_head_dim": v_head_dim, "q_latent_dim": q_latent_dim}
        sizes |= {name: n for name, n in optional.items() if n is not None}
        ints = {name: size(name, n) for name, n in sizes.items()}  # numpy integers pass, bool and float do not
        d_model, num_heads, kv_latent_dim, rope_dim = (ints[n] for n in ("d_model", "num_heads", "kv_latent_dim",
                                                                         "rope_dim"))
        head_dim, v_head_dim, q_latent_dim = (ints.get(n) for n in ("head_dim", "v_head_dim", "q_latent_dim"))
        if rope_dim % 2:
            raise ValueError(f"rope_dim must be even (RoPE rotates pairs of features); got rope_dim={rope_dim}")
        if head_dim is None and d_model % num_heads:
            raise ValueError(
                f"d_model={d_model} is not divisible by num_heads={num_heads}; pass head_dim explicitly "
                f"or use a head count that divides {d_model}"
            )
        E = d_model // num_heads if head_dim is None else head_dim
        Ev = E if v_head_dim is None else v_head_dim
        self.d_model, self.num_heads, self.head_dim, self.v_head_dim = d_model, num_heads, E, Ev
        self.kv_latent_dim, self.rope_dim = kv_latent_dim, rope_dim
        self.q_latent_dim, self.rope_base = q_latent_dim, rope_base
        self.scale = 1.0 / math.sqrt(E + rope_dim)  # queries and keys have E + R features per head
        H, C, R = num_heads, kv_latent_dim, rope_dim
        self.q_down_proj: nn.Linear | None = None
        if q_latent_dim is None:
            self.q_proj = nn.Linear(d_model, H * (E + R), bias=False)  # [W_UQ; W_QR] applied to x
        else:
            self.q_down_proj = nn.Linear(d_model, q_latent_dim, bias=False)  # W_DQ
            self.q_proj = nn.Linear(q_latent_dim, H * (E + R), bias=False)  # [W_UQ; W_QR]: per head [nope | rope]
        self.kv_down_proj = nn.Linear(d_model, C + R, bias=False)  # [W_DKV; W_KR]: latent and RoPE key
        self.k_up_proj = nn.Linear(C, H * E, bias=False)  # W_UK
        self.v_up_proj = nn.Linear(C, H * Ev, bias=False)  # W_UV
        self.out_proj = nn.Linear(H * Ev, d_model, bias=False)  # W_O

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, num_heads={self.num_heads}, kv_latent_dim={self.kv_latent_dim}, "
            f"rope_dim={self.rope_dim}, head_dim={self.head_dim}, v_head_dim={self.v_head_dim}, "
            f"q_latent_dim={self.q_latent_dim}"
        )

    def forward(
        self, x: Tensor, *, cache: LatentCache | None = None, mode: Mode = "naive", cache_position: int | None = None,
        attn_mask: Tensor | None = None,
    ) -> Tensor:
        """Causal self-attention of ``x`` over itself and everything in ``cache``.

        Args:
            x: input ``(B, T, D)``: a prompt (prefill) or one or more new tokens.
            cache: a :class:`lessons_src.kv_cache.LatentCache`; the new latents and RoPE keys are
                appended to it and the positions continue from its length. ``None``: no cache, positions
                start at 0.
            mode: ``"naive"`` (up-project keys and values, attend per head; best for a long prefill) or
                ``"absorbed"`` (attend on the latents; best for decoding). Both give the same output.
            cache_position: needed only to append several tokens to a non-empty cache (a prompt in
                chunks); must equal ``cache.length``. A new prompt needs ``cache.reset()`` first.
            attn_mask: a bool keep-mask (``True`` = may attend) of ``(T, S)`` or ``(B, 1, T, S)``, ``S`` the
                positions cached after this step, shared by the heads and combined with causality: the keys
                each query chose, as DeepSeek-V3.2's lightning indexer picks them
                (:func:`lessons_src.sparse_selection.top_k_mask`).

        Returns:
            ``(B, T, D)``.

        Raises:
            ValueError: if ``x`` is not ``(B, T, d_model)`` or its dtype or device differs from the
                module's (outside autocast), ``mode`` is unknown, several tokens meet a non-empty cache
                without ``cache_position``, ``attn_mask`` is not a bool mask of one of its shapes, or the cache
                does not fit (see
                :meth:`lessons_src.kv_cache.LatentCache.update`). A failed step leaves the cache as it was.
        """
        if not isinstance(x, Tensor):
            raise TypeError(f"x must be a torch.Tensor; got {type(x).__name__}")
        if x.ndim != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"x must be (B, T, d_model={self.d_model}); got shape {tuple(x.shape)}")
        w = self.kv_down_proj.weight
        if x.device != w.device:
            raise ValueError(f"x is on {x.device} but the module is on {w.device}; move one of them")
        if x.dtype != w.dtype and not torch.is_autocast_enabled(x.device.type):
            raise ValueError(f"x has dtype {x.dtype} but the module's weights are {w.dtype}; convert one of them")
        if mode not in ("naive", "absorbed"):
            raise ValueError(f"mode must be 'naive' or 'absorbed'; got {mode!r}")
        T = x.shape[1]
        if cache is not None and cache_position is not None and cache_position != cache.length:
            raise ValueError(
                f"cache_position={cache_position} but the cache holds {cache.length} positions; new tokens go at "
                f"position {cache.length} (call cache.reset() to start a new prompt)"
            )
        if cache is not None and cache_position is None and T > 1 and cache.length > 0:
            raise ValueError(
                f"{T} new tokens for a cache that already holds {cache.length}: if this is a new prompt, call "
                f"cache.reset() first; to append a prompt in chunks, pass cache_position={cache.length}"
            )
        if cache is None and cache_position is not None:
            raise ValueError("cache_position is only meaningful with a cache; pass cache=... or drop it")
        start = 0 if cache is None else cache.length
        if attn_mask is not None:
            B, S = x.shape[0], start + T
            if attn_mask.dtype != torch.bool or tuple(attn_mask.shape) not in ((T, S), (B, 1, T, S)):
                raise ValueError(
                    f"attn_mask must be a bool keep-mask of ({T}, {S}) or ({B}, 1, {T}, {S}) (queries, positions "
                    f"cached after this step); got {attn_mask.dtype} {tuple(attn_mask.shape)}"
                )
        try:
            return self._forward(x, cache, mode, start, attn_mask)
        except BaseException:
            if cache is not None:
                cache.length = start  # the step failed: forget the positions it appended
            raise

    def _forward(self, x: Tensor, cache: LatentCache | None, mode: Mode, start: int, keep: Tensor | None) -> Tensor:
        B, T, _ = x.shape
        H, E, R, C = self.num_heads, self.head_dim, self.rope_dim, self.kv_latent_dim

        q_in = x if self.q_down_proj is None else self.q_down_proj(x)  # (B, T, D) or (B, T, C')
        q = self.q_proj(q_in).view(B, T, H, E + R).transpose(1, 2)  # (B, H, T, E + R)
        q_nope, q_rope = q.split([E, R], dim=-1)  # (B, H, T, E), (B, H, T, R)
        latent, k_rope = self.kv_down_proj(x).split([C, R], dim=-1)  # (B, T, C), (B, T, R)

        cos, sin = rope_cos_sin(torch.arange(start, start + T, device=x.device), R, base=self.rope_base, dtype=x.dtype)
        q_rope = apply_rope(q_rope, cos, sin)  # (B, H, T, R)
        k_rope = apply_rope(k_rope, cos, sin)  # (B, T, R): one RoPE key per token, shared by the heads
        if cache is None:
            kv = torch.cat([latent, k_rope], dim=-1)  # (B, S, C + R) with S = T
        else:
            kv = cache.update(latent, k_rope)  # (B, S, C + R)
        S = kv.shape[1]
        # Causal mask, bottom-right; not needed for one query (it sees every key) nor for T == S in the
        # naive mode, which uses SDPA's causal flag instead.
        needs_mask = T > 1 and (T != S or mode == "absorbed")
        mask = causal_mask(T, S, device=x.device) if needs_mask else None  # (T, S)
        if keep is not None:  # the chosen keys, within causality: (T, S) or (B, 1, T, S)
            mask = keep & causal_mask(T, S, device=x.device)

        if mode == "naive":
            y = self._naive(q_nope, q_rope, kv, mask)  # (B, H, T, Ev)
        else:
            y = self._absorbed(q_nope, q_rope, kv, mask)  # (B, H, T, Ev)
        out: Tensor = self.out_proj(y.transpose(1, 2).reshape(B, T, H * self.v_head_dim))  # (B, T, D)
        return out

    def _naive(self, q_nope: Tensor, q_rope: Tensor, kv: Tensor, mask: Tensor | None) -> Tensor:
        B, H, T, _ = q_nope.shape
        S, E, Ev, R, C = kv.shape[1], self.head_dim, self.v_head_dim, self.rope_dim, self.kv_latent_dim
        latent, k_rope = kv[..., :C], kv[..., C:]  # (B, S, C), (B, S, R)
        k_nope = self.k_up_proj(latent).view(B, S, H, E).transpose(1, 2)  # (B, H, S, E)
        v = self.v_up_proj(latent).view(B, S, H, Ev).transpose(1, 2)  # (B, H, S, Ev)
        k = torch.cat([k_nope, k_rope[:, None].expand(B, H, S, R)], dim=-1)  # (B, H, S, E + R)
        q = torch.cat([q_nope, q_rope], dim=-1)  # (B, H, T, E + R)
        # SDPA runs its fused kernel only when values are as wide as keys; otherwise it silently falls
        # back to the slow math kernel. Pad the values with zeros and drop the padding afterwards.
        pad = E + R - Ev
        if pad > 0:
            v = F.pad(v, (0, pad))  # (B, H, S, E + R)
        is_causal = mask is None and T == S and T > 1  # top-left and bottom-right agree when T == S
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=is_causal, scale=self.scale
        )  # (B, H, T, max(Ev, E + R))
        return y[..., :Ev]  # (B, H, T, Ev)

    def _absorbed(self, q_nope: Tensor, q_rope: Tensor, kv: Tensor, mask: Tensor | None) -> Tensor:
        B, H, T, _ = q_nope.shape
        E, Ev, C = self.head_dim, self.v_head_dim, self.kv_latent_dim
        w_uk = self.k_up_proj.weight.view(H, E, C)  # W_UK per head
        w_uv = self.v_up_proj.weight.view(H, Ev, C)  # W_UV per head
        q_latent = torch.einsum("bhte,hec->bhtc", q_nope, w_uk)  # (B, H, T, C): W_UK folded into the query
        q = torch.cat([q_latent, q_rope], dim=-1).reshape(B, 1, H * T, C + self.rope_dim)  # (B, 1, H*T, C + R)
        if mask is not None:  # row h*T + t is query t of head h: (H*T, S), or (B, 1, H*T, S) for a per-batch mask
            mask = mask.repeat(H, 1) if mask.dim() == 2 else mask.repeat(1, 1, H, 1)
        kv = kv[:, None]  # (B, 1, S, C + R): the key, and the value, shared by every head
        # Using the whole [latent | k_rope] row as the value keeps key and value the same width (fused
        # kernel, no copy); the last R output columns are the attention-weighted RoPE keys, dropped.
        y = F.scaled_dot_product_attention(q, kv, kv, attn_mask=mask, scale=self.scale)  # (B, 1, H*T, C + R)
        y_latent = y[..., :C].reshape(B, H, T, C)  # (B, H, T, C)
        return torch.einsum("bhtc,hvc->bhtv", y_latent, w_uv)  # (B, H, T, Ev): W_UV applied after attention
