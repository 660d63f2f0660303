"""lessons_src: multi-head attention and its inference variants, small enough to read and copy.

The package has two layers. The **core** is what a reader copies into a project; each file needs only
``torch`` and a few sibling files (``docs/reference/code/index.md`` lists them; a test copies each file with
them alone). In reading order, by role:

======================  ========================================================================
the interface           ``functional.py`` (``attention()``, its backends by name, ``explicit_attention``,
                        ``repeat_kv``); ``layer.py`` (``MultiHeadAttention``: MHA, GQA, MQA);
                        ``_checks.py`` (the argument checks every file shares)
masks and scores        ``masks.py`` (every mask rule once, and the one mask preparation);
                        ``score_mods.py`` (the soft-cap and learned sinks)
implementations         ``flash.py`` (``"tiled"``, FlashAttention-2 in PyTorch); ``triton_flash.py``
                        (``"triton"``); ``flex.py`` (FlexAttention's block masks)
variants and caches     ``kv_cache.py``, ``paged_cache.py``, ``quantized_cache.py``, ``mla.py``, ``mechanisms.py``,
                        ``sparse_selection.py``, ``shared_kv.py``, ``delta_rule.py``, ``convert.py``
serving                 ``split_kv.py`` (split-KV decoding and a shared prefix, merged by log-sum-exp),
                        ``speculative.py`` (draft tokens checked in one pass, the cache rolled back)
positions               ``rope.py``
across devices          ``parallel.py``, ``ring.py``
adapters                ``interop.py`` (``nn.MultiheadAttention``'s weights and masks)
======================  ========================================================================

The **lab** subpackage (:mod:`lessons_src.lab`) is the lessons' apparatus, built on the core and never
imported by it: worked examples, counters, MiniLM, head scores, the trained toy models, plotting and the
published configurations, with the artifacts and data it loads shipped inside it.

>>> from lessons_src import MultiHeadAttention, attention
>>> MultiHeadAttention(d_model=768, num_heads=12).head_dim
64
"""

from .convert import mha_to_gqa
from .flash import online_softmax, tiled_attention
from .functional import attention, explicit_attention, repeat_kv
from .interop import from_torch, masks_from_torch
from .kv_cache import KVCache, LatentCache
from .layer import MultiHeadAttention
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
    "attention",
    "causal_mask",
    "explicit_attention",
    "from_torch",
    "masks_from_torch",
    "mha_to_gqa",
    "online_softmax",
    "padding_mask",
    "repeat_kv",
    "tiled_attention",
]
__version__ = "0.2.0"
