"""lessons_src: multi-head attention and its inference variants, small enough to read and copy.

The package has two layers. The **core** is what a reader copies into a project; each file needs only
``torch`` and at most three sibling files:

====================  ==========================================================================
``attention.py``      ``scaled_dot_product_attention`` (explicit), ``MultiHeadAttention`` (MHA, GQA,
                      MQA), ``grouped_attention``, ``repeat_kv``
``score_mods.py``     the soft-cap and learned sinks every implementation of ``attention`` takes
``masks.py``          the one mask convention (bool ``True`` = may attend), causal and padding masks
``kv_cache.py``       ``KVCache``, MLA's ``LatentCache`` and the sliding-window ``RollingKVCache``
``paged_cache.py``    ``PagedKVCache`` (block pool, block tables) and ``paged_attention``
``mla.py``            ``MultiHeadLatentAttention`` (DeepSeek-V2), naive and absorbed
``rope.py``           rotary position embedding
``mechanisms.py``     QK-norm, rotary positions and output gates, as pieces ``MultiHeadAttention`` is given
``convert.py``        MHA -> GQA checkpoint conversion
``flash.py``          online softmax and tiled (FlashAttention-2) attention, registered as ``"tiled"``
``parallel.py``       attention across processes: tensor parallelism by heads, Ulysses
``ring.py``           ring attention (sequence split, key/value blocks passed round), forward and backward
``interop.py``        ``nn.MultiheadAttention`` weights and masks, at the edge
====================  ==========================================================================

The **lab** subpackage (:mod:`lessons_src.lab`) is the lessons' apparatus, built on the core and never
imported by it: worked examples, counters, MiniLM, head scores, the trained toy models, plotting and the
published configurations, with the artifacts and data it loads shipped inside it.

>>> from lessons_src import MultiHeadAttention
>>> MultiHeadAttention(d_model=768, num_heads=12).head_dim
64
"""

from .attention import MultiHeadAttention, grouped_attention, repeat_kv, scaled_dot_product_attention
from .convert import mha_to_gqa
from .flash import online_softmax, tiled_attention
from .interop import from_torch, masks_from_torch
from .kv_cache import KVCache, LatentCache
from .masks import causal_mask, padding_mask
from .mla import MultiHeadLatentAttention
from .rope import apply_rope

__all__ = [
    "KVCache",
    "LatentCache",
    "MultiHeadAttention",
    "MultiHeadLatentAttention",
    "__version__",
    "apply_rope",
    "causal_mask",
    "from_torch",
    "grouped_attention",
    "masks_from_torch",
    "mha_to_gqa",
    "online_softmax",
    "padding_mask",
    "repeat_kv",
    "scaled_dot_product_attention",
    "tiled_attention",
]
__version__ = "0.2.0"
