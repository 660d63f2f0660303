"""lessons_src: multi-head attention and the tools the lessons use, small enough to read and copy.

>>> from lessons_src import MultiHeadAttention
>>> MultiHeadAttention(d_model=768, num_heads=12).head_dim
64
"""

from .attention import MultiHeadAttention, scaled_dot_product_attention
from .masks import causal_mask, masks_from_torch, padding_mask

__all__ = [
    "MultiHeadAttention",
    "causal_mask",
    "masks_from_torch",
    "padding_mask",
    "scaled_dot_product_attention",
]
__version__ = "0.1.0"
