"""Interop with ``torch.nn.MultiheadAttention``: copy its weights, translate its masks.

``nn.MultiheadAttention`` and this package lay out the Q/K/V projection the same way (one
``(3 * D, D)`` ``in_proj_weight`` with rows ``[W_Q; W_K; W_V]``), so weights copy across unchanged.
Masks do not: ``nn.MultiheadAttention`` marks *blocked* positions with bool ``True`` and takes a
separate ``key_padding_mask``, while this package (like ``F.scaled_dot_product_attention``) marks
positions that *may* be attended with ``True`` and takes one mask. This file is the one place where
that polarity flips; nothing else in the package knows about ``nn.MultiheadAttention``.

Copy it with ``layer.py`` and what that needs.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .layer import MultiHeadAttention
from .masks import combine_masks

__all__ = ["from_torch", "masks_from_torch"]


def from_torch(module: nn.MultiheadAttention) -> MultiHeadAttention:
    """Build an equivalent :class:`~lessons_src.layer.MultiHeadAttention`, copying the weights.

    ``batch_first`` does not matter for the weights; feed the new module ``(B, T, D)`` tensors and
    translate masks with :func:`masks_from_torch`. The new module is on the same device and dtype, and
    in the same training or eval mode, as ``module``.

    Args:
        module: the ``nn.MultiheadAttention`` to copy.

    Returns:
        A :class:`MultiHeadAttention` that computes the same outputs.

    Raises:
        TypeError: if ``module`` is not an ``nn.MultiheadAttention``.
        ValueError: for features :class:`MultiHeadAttention` does not have (``kdim``/``vdim`` different
            from ``embed_dim``, ``add_bias_kv``, ``add_zero_attn``).

    Example:
        >>> ref = nn.MultiheadAttention(8, 2, batch_first=True)
        >>> from_torch(ref).head_dim
        4
    """
    if not isinstance(module, nn.MultiheadAttention):
        raise TypeError(f"from_torch expects a torch.nn.MultiheadAttention; got {type(module).__name__}")
    if not module._qkv_same_embed_dim:
        raise ValueError(
            f"kdim={module.kdim} and vdim={module.vdim} must equal embed_dim={module.embed_dim} to convert"
        )
    if module.bias_k is not None or module.add_zero_attn:
        raise ValueError("add_bias_kv=True and add_zero_attn=True have no equivalent here; use False")
    bias = module.in_proj_bias is not None
    new = MultiHeadAttention(module.embed_dim, module.num_heads, bias=bias, dropout=module.dropout)
    new = new.to(device=module.in_proj_weight.device, dtype=module.in_proj_weight.dtype)
    with torch.no_grad():
        new.qkv_proj.weight.copy_(module.in_proj_weight)
        new.out_proj.weight.copy_(module.out_proj.weight)
        if bias:
            new.qkv_proj.bias.copy_(module.in_proj_bias)
            new.out_proj.bias.copy_(module.out_proj.bias)
    return new.train(module.training)


def masks_from_torch(
    attn_mask: Tensor | None,
    key_padding_mask: Tensor | None,
    *,
    num_heads: int,
    dtype: torch.dtype = torch.float32,
) -> Tensor | None:
    """Translate ``nn.MultiheadAttention``'s masks into this package's convention.

    ``nn.MultiheadAttention`` marks *blocked* positions with ``True`` and takes a separate
    ``key_padding_mask``; this package marks *allowed* positions with ``True`` and takes one mask.
    Float masks are additive in both and pass through unchanged.

    Args:
        attn_mask: ``(T, S)`` or ``(B * num_heads, T, S)``, bool (True = blocked) or float.
        key_padding_mask: ``(B, S)``, bool (True = padding) or float.
        num_heads: needed to unfold a 3-D ``attn_mask``.
        dtype: dtype of float masks when bool and float masks are combined.

    Returns:
        One mask broadcastable to ``(B, H, T, S)``, or ``None`` if both inputs are ``None``.

    Example:
        >>> masks_from_torch(torch.tensor([[False, True]]), None, num_heads=1).tolist()
        [[True, False]]
    """
    mask = None
    if attn_mask is not None:
        mask = ~attn_mask if attn_mask.dtype == torch.bool else attn_mask
        if mask.ndim == 3:
            BH, T, S = mask.shape
            if BH % num_heads != 0:
                raise ValueError(
                    f"a 3-D attn_mask must be (B * num_heads, T, S); got {tuple(mask.shape)}, whose first dim "
                    f"{BH} is not a multiple of num_heads={num_heads}"
                )
            mask = mask.view(BH // num_heads, num_heads, T, S)  # (B, H, T, S)
    if key_padding_mask is not None:
        kpm = ~key_padding_mask if key_padding_mask.dtype == torch.bool else key_padding_mask
        mask = combine_masks(mask, kpm[:, None, None, :], dtype)  # kpm: (B, 1, 1, S)
    return mask
