"""Weights copied from a transformers attention module into the package's, for the tests that compare the two.

Shared by tests/core/test_mla.py (DeepSeek-V2's MLA) and tests/core/test_sparse_selection.py (DeepSeek-V3.2's MLA
under its sparse attention).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from lessons_src.rope import interleaved_to_rotate_half

if TYPE_CHECKING:
    from lessons_src.mla import MultiHeadLatentAttention


def copy_deepseek_weights(ref: torch.nn.Module, ours: MultiHeadLatentAttention) -> None:
    """Copy a transformers DeepSeek (V2, V3, V3.2) attention's weights into ours, RoPE rows permuted.

    transformers pairs RoPE features (2i, 2i+1) where the package pairs (i, i + R/2): ``interleaved_to_rotate_half``.
    """
    H, E, R, Ev, C = ours.num_heads, ours.head_dim, ours.rope_dim, ours.v_head_dim, ours.kv_latent_dim
    perm = interleaved_to_rotate_half(R)  # our RoPE feature j is HF's perm[j]
    with torch.no_grad():
        q_b = ref.q_proj if ours.q_down_proj is None else ref.q_b_proj
        q_w = q_b.weight.view(H, E + R, -1)  # type: ignore[union-attr, operator]
        ours.q_proj.weight.copy_(torch.cat([q_w[:, :E], q_w[:, E:][:, perm]], dim=1).reshape(H * (E + R), -1))
        if ours.q_down_proj is not None:
            ours.q_down_proj.weight.copy_(ref.q_a_proj.weight)  # type: ignore[union-attr, arg-type]
        kv_a = ref.kv_a_proj_with_mqa.weight  # type: ignore[union-attr]
        ours.kv_down_proj.weight.copy_(torch.cat([kv_a[:C], kv_a[C:][perm]]))  # type: ignore[index]
        kv_b = ref.kv_b_proj.weight.view(H, E + Ev, C)  # type: ignore[union-attr, operator]  # [k_nope | v] per head
        ours.k_up_proj.weight.copy_(kv_b[:, :E].reshape(H * E, C))
        ours.v_up_proj.weight.copy_(kv_b[:, E:].reshape(H * Ev, C))
        ours.out_proj.weight.copy_(ref.o_proj.weight)  # type: ignore[union-attr, arg-type]
