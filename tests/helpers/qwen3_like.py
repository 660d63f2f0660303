"""A tiny random Qwen3 from ``transformers`` and the same decoder built from the course's parts, its weights copied.

Shared by tests/lab/test_batching.py (a left-padded batch against ``generate``) and
tests/lab/test_continuous_batching.py (the course's scheduler against ``generate_batch``).
"""

from __future__ import annotations

from typing import Any

import torch


def tiny_qwen3(max_position_embeddings: int = 32) -> Any:
    """A ``Qwen3ForCausalLM`` with two layers, GQA (4 query heads, 2 KV heads) and QK-norm, its norms' weights drawn
    (they start at 1, so a misplaced norm would not show); seeded."""
    import transformers

    torch.manual_seed(0)
    cfg = transformers.Qwen3Config(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                   max_position_embeddings=max_position_embeddings, tie_word_embeddings=False,
                                   pad_token_id=0, eos_token_id=None, bos_token_id=None)
    ref = transformers.Qwen3ForCausalLM(cfg).eval()
    with torch.no_grad():
        for p in ref.parameters():
            if p.ndim == 1:
                p.add_(torch.randn_like(p) * 0.3)
    return ref


class Qwen3Like(torch.nn.Module):
    """Qwen3's decoder from the course's parts (the layer with QK-norm, RoPE and GQA; RMSNorm; a SwiGLU MLP), with
    the cached interface ``lessons_src.lab.batching`` and ``lessons_src.lab.continuous_batching`` run; its weights
    are copied from a ``Qwen3ForCausalLM``."""

    def __init__(self, ref: torch.nn.Module) -> None:
        from lessons_src.layer import MultiHeadAttention
        from lessons_src.mechanisms import PerHeadRMSNorm, Rotary

        super().__init__()
        cfg = ref.config
        D, H, K, E = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        eps = cfg.rms_norm_eps
        self.K, self.E, self.context = K, E, cfg.max_position_embeddings
        self.embed = ref.model.embed_tokens
        self.layers = torch.nn.ModuleList()
        for block in ref.model.layers:
            a = MultiHeadAttention(D, H, num_kv_heads=K, qk_norm=PerHeadRMSNorm(E, eps=eps),
                                   rope=Rotary(E, base=cfg.rope_parameters["rope_theta"]))
            s = block.self_attn
            with torch.no_grad():
                a.qkv_proj.weight.copy_(torch.cat([s.q_proj.weight, s.k_proj.weight, s.v_proj.weight]))
                a.out_proj.weight.copy_(s.o_proj.weight)
                a.qk_norm.q_weight.copy_(s.q_norm.weight)
                a.qk_norm.k_weight.copy_(s.k_norm.weight)
            self.layers.append(torch.nn.ModuleDict({"attn": a, "norm1": block.input_layernorm, "mlp": block.mlp,
                                                    "norm2": block.post_attention_layernorm}))
        self.norm, self.unembed = ref.model.norm, ref.lm_head

    def make_caches(self, batch_size: int, max_len: int | None = None) -> list:
        from lessons_src.kv_cache import KVCache

        return [KVCache(batch_size, self.K, self.E, max_len or self.context) for _ in self.layers]

    def forward(self, tokens, *, caches=None, positions=None, attn_mask=None):  # type: ignore[no-untyped-def]
        x = self.embed(tokens)  # (B, T, D)
        for i, layer in enumerate(self.layers):
            cache = None if caches is None else caches[i]
            at = None if cache is None or cache.length == 0 else cache.length
            x = x + layer["attn"](layer["norm1"](x), is_causal=True, cache=cache, cache_position=at,
                                  positions=positions, attn_mask=attn_mask)
            x = x + layer["mlp"](layer["norm2"](x))
        return self.unembed(self.norm(x)), None
