"""Published attention configurations, loaded from ``data/model_configs.json`` with their sources.

Only the published numbers are stored; everything derived (``head_dim``, parameter counts, cache sizes)
is computed here or by the lessons, so a typo in one place cannot disagree with another.

Example:
    >>> cfg = load_configs()["GPT-2 small"]
    >>> cfg.head_dim, cfg.n_rep
    (64, 1)
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from . import data_file

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = [
    "COMPRESSED_KINDS", "LAYER_KINDS", "LESSON_MODELS", "ROPE_SCALINGS", "ConfigTable", "ModelConfig",
    "UnknownModelError", "load_configs",
]


LAYER_KINDS = ("full", "sliding", "chunked", "linear", "compressed_sparse", "heavily_compressed", "native_sparse")
"""What one layer's token mixer is, as ``layer_pattern`` names it.

``full``: softmax attention over every earlier position; ``sliding``: over the last ``sliding_window``
positions (itself included); ``chunked``: over the earlier positions of its own block of ``chunk_size``
positions (Llama 4); ``linear``: a recurrent state of fixed size instead of a cache (Gated DeltaNet, KDA);
``compressed_sparse`` and ``heavily_compressed``: DeepSeek-V4's attention over keys pooled every
``compress[kind]`` positions (the first with a top-k selection over them), beside a window of recent keys;
``native_sparse``: NSA's three branches (see ``native_sparse``), each with keys and values of its own.
"""

COMPRESSED_KINDS = ("compressed_sparse", "heavily_compressed")  # DeepSeek-V4's: each also keeps a window

ROPE_SCALINGS = ("yarn", "llama3", "linear")
"""The stretches of RoPE's frequencies a ``rope`` setting may name (:mod:`lessons_src.rope` has the first two;
``"linear"`` divides every frequency by the factor, Gemma 3's global layers)."""

LESSON_MODELS = (
    "Transformer base", "Transformer big", "BERT-base", "GPT-2 small", "GPT-2 medium", "all-MiniLM-L6-v2",
    "GPT-3 175B", "LLaMA 7B", "Llama 2 70B", "Mistral 7B", "Llama 3 8B", "Llama 3 70B", "Gemma 2 27B",
    "Gemma 3 27B", "DeepSeek-V2",
)
"""The models the lessons' comparison tables and figures show (the atlas page shows every model in the file).

Each has one kind of layer throughout, or windowed and full layers only, so the lessons' per-layer cache
arithmetic holds for it; the models of 2025-26 with linear, chunked, compressed or shared layers are
counted by :meth:`ModelConfig.layer_kinds` instead.
"""


@dataclass(frozen=True)
class ModelConfig:
    """One model's attention shape, as published.

    Attributes:
        name: model name.
        year: year of publication.
        d_model: model width (``hidden_size``, ``n_embd``, ``dim``).
        num_heads: query heads per layer.
        num_kv_heads: key/value heads per layer (``== num_heads`` for MHA, ``1`` for MQA).
        num_layers: attention layers.
        source: where each number comes from.
        family: the model family the atlas groups this row under (``"Qwen3"``, ``"gpt-oss"``).
        card_names: the names the source uses for our fields (``"linear.key_heads"`` for a field inside
            ``linear``).
        head_dim_published: head size when the source states one that differs from ``d_model // num_heads``.
        mla: multi-head latent attention sizes (DeepSeek-V2 style), if any.
        sliding_window: positions a query attends to (itself included) in a ``sliding`` layer, e.g. Mistral
            7B; its KV cache is then a rolling buffer of this many positions.
        layer_pattern: the kinds of the layers (see :data:`LAYER_KINDS`), first layer first, repeated until
            ``num_layers``: ``["sliding", "full"]`` alternates (Gemma 2, gpt-oss). ``None``: every layer is
            ``sliding`` if the model has a ``sliding_window``, else ``full``.
        chunk_size: positions per block of a ``chunked`` layer.
        kv_shared_layers: the last this-many layers reuse an earlier layer's keys and values and cache none.
        global_layers: head sizes that differ in ``full`` layers: ``num_kv_heads``, ``head_dim``, and
            ``k_eq_v`` (keys and values from one projection; both are cached, since the key is then normalised
            and rotated and the value only normalised), Gemma 4.
        context_length: the longest context the source states the model was trained or released for.
        params_billions: total parameter count in billions, as the source rounds it, when stated.
        qk_norm: normalisation of queries and keys before their dot product: ``"per_head"`` (RMSNorm with a
            learned scale over each head's ``head_dim``), ``"per_head_weightless"`` (the same without a
            scale, Llama 4 Scout) or ``"projection"`` (one RMSNorm over all heads' projection, OLMo).
        attn_softcap: ``c`` in ``c * tanh(score / c)`` applied to the attention scores (Gemma 2).
        sinks: one learned logit per head that joins every row's softmax and takes weight from the keys
            (gpt-oss).
        output_gate: ``"elementwise"``: the attention output times ``sigmoid`` of a second query projection,
            before the output projection (Qwen3-Next).
        rope: rotary positions by layer kind: every kind of attention layer the model has (every kind of
            :data:`LAYER_KINDS` but ``linear``) maps to its setting, or to ``None`` where those layers do not
            rotate (Llama 4's full layers). A setting has a ``theta`` (the base), the ``fraction`` of each head's
            dimensions rotated (1 if absent) and, if the frequencies are stretched, a ``scaling`` (one of
            :data:`ROPE_SCALINGS`) with its ``factor`` and, for ``"yarn"`` and ``"llama3"``, the
            ``original_context`` it stretches. Kinds differ: Gemma 3's sliding layers rotate at base 10,000 and
            its full ones at 1,000,000; DeepSeek-V4's compressed layers at 160,000 with YaRN, its window-only
            layers at 10,000 unscaled. ``None``: the row records no rotary positions. See :meth:`rope_for`.
        nope_every: every this-many-th layer (counted from 1) uses no positional rotation (Llama 4); ``rope``
            must map those layers' kind, and no other, to ``None``.
        sparse: a lightning indexer's ``indexer_heads`` and ``indexer_head_dim``, and the ``top_k`` keys
            each query attends to (DeepSeek-V3.2, V4).
        linear: a linear-attention layer's ``kind``, ``key_heads``, ``value_heads``, ``key_dim``,
            ``value_dim`` and ``conv_kernel``.
        compress: positions pooled into one key per layer kind (DeepSeek-V4).
        value_dim_published: value head size when the source states one that differs from ``head_dim``.
        native_sparse: NSA's three branches (Yuan et al. 2025): keys pooled in blocks of ``compress_block``
            positions every ``compress_stride``; ``selected_blocks`` blocks of ``select_block`` positions picked
            per query and KV group; a window of the last ``window`` positions.
    """

    name: str
    year: int
    d_model: int
    num_heads: int
    num_kv_heads: int
    num_layers: int
    source: str
    family: str | None = None
    card_names: dict[str, str] = field(default_factory=dict)
    head_dim_published: int | None = None
    mla: dict[str, int] | None = None
    sliding_window: int | None = None
    layer_pattern: tuple[str, ...] | None = None
    chunk_size: int | None = None
    kv_shared_layers: int = 0
    global_layers: dict[str, Any] | None = None
    context_length: int | None = None
    params_billions: float | None = None
    qk_norm: str | None = None
    attn_softcap: float | None = None
    sinks: bool = False
    output_gate: str | None = None
    rope: dict[str, dict[str, Any] | None] | None = None
    nope_every: int | None = None
    sparse: dict[str, int] | None = None
    linear: dict[str, Any] | None = None
    compress: dict[str, int] | None = None
    value_dim_published: int | None = None
    native_sparse: dict[str, int] | None = None

    def __post_init__(self) -> None:
        sizes = {"d_model": self.d_model, "num_heads": self.num_heads, "num_kv_heads": self.num_kv_heads,
                 "num_layers": self.num_layers}
        bad = {k: v for k, v in sizes.items() if isinstance(v, bool) or not isinstance(v, int) or v < 1}
        if bad:
            raise ValueError(f"{self.name}: sizes must be ints of at least 1; got {bad}")
        if self.num_heads % self.num_kv_heads != 0:
            raise ValueError(
                f"{self.name}: num_heads={self.num_heads} is not a multiple of num_kv_heads={self.num_kv_heads}"
            )
        if self.head_dim_published is None and self.d_model % self.num_heads != 0:
            raise ValueError(f"{self.name}: d_model={self.d_model} is not divisible by num_heads={self.num_heads}")
        for name in ("sliding_window", "chunk_size", "context_length", "nope_every"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{self.name}: {name}={value!r} must be a positive int")
        if self.params_billions is not None and self.params_billions <= 0:
            raise ValueError(f"{self.name}: params_billions={self.params_billions} must be positive")
        self._check_layers()
        self._check_recipe()
        self._check_rope()

    def _check_layers(self) -> None:
        pattern = self.layer_pattern
        if pattern is not None:
            unknown = sorted(set(pattern) - set(LAYER_KINDS))
            if not pattern or unknown:
                raise ValueError(f"{self.name}: layer_pattern has unknown kinds {unknown}; the kinds are {LAYER_KINDS}")
            if len(pattern) > self.num_layers:
                raise ValueError(f"{self.name}: layer_pattern has {len(pattern)} entries for {self.num_layers} layers")
        kinds = set(self.layer_kinds())
        needs = {"sliding": ("sliding_window", self.sliding_window), "chunked": ("chunk_size", self.chunk_size),
                 "linear": ("linear", self.linear), "native_sparse": ("native_sparse", self.native_sparse)}
        needs |= {kind: ("compress", (self.compress or {}).get(kind)) for kind in COMPRESSED_KINDS}
        for kind, (name, value) in needs.items():
            if kind in kinds and value is None:
                raise ValueError(f"{self.name}: layer_pattern has {kind!r} layers, which need {name}")
        if self.sliding_window is not None and not kinds & {"sliding", *COMPRESSED_KINDS}:
            raise ValueError(f"{self.name}: sliding_window={self.sliding_window} but no layer uses a window")
        if not 0 <= self.kv_shared_layers < self.num_layers:
            raise ValueError(
                f"{self.name}: kv_shared_layers={self.kv_shared_layers} must be from 0 to num_layers - 1 "
                f"= {self.num_layers - 1} (the first layer has nothing to share)"
            )

    def _check_recipe(self) -> None:
        choices = {"qk_norm": ("per_head", "per_head_weightless", "projection"), "output_gate": ("elementwise",)}
        for name, allowed in choices.items():
            value = getattr(self, name)
            if value is not None and value not in allowed:
                raise ValueError(f"{self.name}: {name}={value!r}; expected one of {allowed} or None")
        if self.attn_softcap is not None and not self.attn_softcap > 0:
            raise ValueError(f"{self.name}: attn_softcap={self.attn_softcap} must be positive")
        if self.sparse is not None and set(self.sparse) != {"indexer_heads", "indexer_head_dim", "top_k"}:
            raise ValueError(f"{self.name}: sparse={self.sparse} needs exactly indexer_heads, indexer_head_dim, top_k")
        nsa_keys = {"compress_block", "compress_stride", "select_block", "selected_blocks", "window"}
        if self.native_sparse is not None and (set(self.native_sparse) != nsa_keys or not all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in self.native_sparse.values())):
            raise ValueError(f"{self.name}: native_sparse={self.native_sparse} needs exactly {sorted(nsa_keys)}, "
                             "each a positive int")
        linear_keys = {"kind", "key_heads", "value_heads", "key_dim", "value_dim", "conv_kernel"}
        if self.linear is not None and set(self.linear) != linear_keys:
            raise ValueError(f"{self.name}: linear={self.linear} needs exactly {sorted(linear_keys)}")

    def _check_rope(self) -> None:
        if self.rope is None:
            return
        kinds = self.layer_kinds()
        attending = sorted(set(kinds) - {"linear"})
        if not isinstance(self.rope, dict) or sorted(self.rope) != attending:
            given = sorted(self.rope) if isinstance(self.rope, dict) else self.rope
            raise ValueError(f"{self.name}: rope gives the layer kinds {given}; it needs exactly the kinds of "
                             f"attention layer the model has, {attending}, each with its setting (None: not rotated)")
        allowed = {"theta", "fraction", "scaling", "factor", "original_context"}
        for kind, setting in self.rope.items():
            if setting is None:
                continue
            theta, fraction, scaling = setting.get("theta"), setting.get("fraction", 1), setting.get("scaling")
            number = (int, float)
            ok = set(setting) <= allowed and isinstance(theta, number) and theta > 0
            ok = ok and isinstance(fraction, number) and 0 < fraction <= 1
            if scaling is None:
                ok = ok and not {"factor", "original_context"} & set(setting)
            else:
                factor, original = setting.get("factor"), setting.get("original_context")
                ok = ok and scaling in ROPE_SCALINGS and isinstance(factor, number) and factor > 0
                ok = ok and (original is None if scaling == "linear" else isinstance(original, int) and original > 0)
            if not ok:
                raise ValueError(
                    f"{self.name}: rope[{kind!r}]={setting} needs a positive theta, a fraction in (0, 1] if any, and "
                    f"either no scaling or a scaling of {ROPE_SCALINGS} with a positive factor (and, for yarn and "
                    "llama3, the positive int original_context); no other keys")
        if self.nope_every is not None:
            unrotated = [n + 1 for n, kind in enumerate(kinds) if kind != "linear" and self.rope[kind] is None]
            every = list(range(self.nope_every, self.num_layers + 1, self.nope_every))
            if unrotated != every:
                raise ValueError(f"{self.name}: nope_every={self.nope_every} leaves layers {every[:4]}... unrotated, "
                                 f"but rope leaves {unrotated[:4]}... unrotated")

    def rope_for(self, kind: str) -> dict[str, Any] | None:
        """The rotary setting of the model's ``kind`` layers (see ``rope``).

        ``None`` where those layers do not rotate, where the model has no such layers (a linear layer has no
        positions), or where the row records no rotary positions.

        Raises:
            ValueError: if ``kind`` is not one of :data:`LAYER_KINDS`.

        Example:
            >>> cfg = load_configs()["Gemma 3 4B"]
            >>> cfg.rope_for("sliding"), cfg.rope_for("full")["theta"]
            ({'theta': 10000}, 1000000)
        """
        if kind not in LAYER_KINDS:
            raise ValueError(f"kind={kind!r} is not a layer kind; the kinds are {LAYER_KINDS}")
        return (self.rope or {}).get(kind)

    @property
    def head_dim(self) -> int:
        """Per-head size ``E``: published if stated, else ``d_model // num_heads``."""
        return self.head_dim_published or self.d_model // self.num_heads

    @property
    def value_dim(self) -> int:
        """Per-head value size: published if stated, else :attr:`head_dim`."""
        return self.value_dim_published or self.head_dim

    @property
    def n_rep(self) -> int:
        """Query heads served by each KV head."""
        return self.num_heads // self.num_kv_heads

    @property
    def attention_kind(self) -> str:
        """``"MLA"``, ``"MHA"``, ``"MQA"`` or ``"GQA"``."""
        if self.mla:
            return "MLA"
        if self.num_kv_heads == self.num_heads:
            return "MHA"
        return "MQA" if self.num_kv_heads == 1 else "GQA"

    def layer_kinds(self) -> list[str]:
        """Each layer's kind (see :data:`LAYER_KINDS`), first layer first.

        Example:
            >>> load_configs()["gpt-oss-20b"].layer_kinds()[:3]
            ['sliding', 'full', 'sliding']
        """
        pattern = self.layer_pattern or (("sliding",) if self.sliding_window else ("full",))
        return [pattern[n % len(pattern)] for n in range(self.num_layers)]

    def layer_windows(self) -> list[int | None]:
        """Each layer's window (``None``: the layer attends to the whole context), first layer first.

        Raises:
            ValueError: if a layer is neither ``full`` nor ``sliding``; use :meth:`layer_kinds`.

        Example:
            >>> load_configs()["Gemma 2 27B"].layer_windows()[:4]
            [4096, None, 4096, None]
        """
        kinds = self.layer_kinds()
        other = sorted(set(kinds) - {"full", "sliding"})
        if other:
            raise ValueError(f"{self.name} has {other} layers, which are not windows; use layer_kinds()")
        return [self.sliding_window if kind == "sliding" else None for kind in kinds]

    def cached_positions(self, context: int) -> int:
        """Positions one layer's KV cache holds for a sequence of ``context`` tokens.

        A sliding-window model keeps only the last ``sliding_window`` positions (a rolling buffer), so its
        cache stops growing at the window; other models cache every position. For a model that mixes
        windowed and global layers, use :meth:`cached_positions_per_layer`.

        Raises:
            ValueError: if ``context`` is not a non-negative int, or the model mixes windowed and global layers.

        Example:
            >>> cfgs = load_configs()
            >>> cfgs["Mistral 7B"].cached_positions(131072), cfgs["Llama 3 8B"].cached_positions(131072)
            (4096, 131072)
        """
        if len(set(self.layer_kinds())) > 1:
            raise ValueError(
                f"{self.name} mixes windowed and global layers, so its layers cache different numbers of "
                "positions; use cached_positions_per_layer(context)"
            )
        return self.cached_positions_per_layer(context)[0]

    def cached_positions_per_layer(self, context: int) -> list[int]:
        """Positions each layer's KV cache holds for a sequence of ``context`` tokens.

        Example:
            >>> sum(load_configs()["Gemma 2 27B"].cached_positions_per_layer(8192))  # 23 local + 23 global layers
            282624
        """
        if isinstance(context, bool) or not isinstance(context, int) or context < 0:
            raise ValueError(f"context must be a non-negative int (a number of tokens); got {context!r}")
        return [context if w is None else min(context, w) for w in self.layer_windows()]


    def layer_cache_numbers(self, context: int) -> list[tuple[str, int]]:
        """Each layer's kind and the numbers its cache holds for one sequence of ``context`` tokens.

        A full layer keeps a key and a value per KV head for every position (MLA: one latent of
        ``kv_latent_dim + rope_dim`` per position, shared by the heads; with a lightning indexer, its
        ``indexer_head_dim`` key as well); a sliding layer the last ``sliding_window`` positions; a chunked
        layer up to ``chunk_size`` (a whole chunk is reserved); a linear layer a state of ``value_heads x
        key_dim x value_dim`` and the last ``conv_kernel`` inputs of its short convolution (as transformers
        keeps them), whatever the context. DeepSeek-V4 keeps one tensor as key and value: its window of
        ``sliding_window`` positions plus one pooled entry per ``compress[kind]`` positions (and the
        indexer's pooled key, in compressed sparse layers); the pooling's partial window is left out. The
        last ``kv_shared_layers`` layers reuse earlier layers' caches and hold ``("shared", 0)``. An NSA layer keeps
        three sets of keys and values (the paper gives each branch its own): every position's for the selection,
        the last ``window`` positions' and one pooled pair per ``compress_stride`` positions once a whole block of
        ``compress_block`` exists (the paper's equation 6 counts ``(t - l) // d + 1``).

        Raises:
            ValueError: if ``context`` is not a non-negative int.

        Example:
            >>> load_configs()["gpt-oss-20b"].layer_cache_numbers(1000)[:2]  # 8 KV heads of 64, keys and values
            [('sliding', 131072), ('full', 1024000)]
        """
        if isinstance(context, bool) or not isinstance(context, int) or context < 0:
            raise ValueError(f"context must be a non-negative int (a number of tokens); got {context!r}")
        K, E = self.num_kv_heads, self.head_dim
        g = self.global_layers or {}
        one_tensor = self.compress is not None  # DeepSeek-V4: shared-KV MQA, the key is the value
        kv = K * (E + self.value_dim)  # a key and a value per KV head
        per_position = {
            "full": (self.mla["kv_latent_dim"] + self.mla["rope_dim"]) if self.mla
            else 2 * g.get("num_kv_heads", K) * g.get("head_dim", E) if g else kv,
            "sliding": K * E if one_tensor else kv,
            "chunked": kv,
        }
        indexer = (self.sparse or {}).get("indexer_head_dim", 0)
        out: list[tuple[str, int]] = []
        for n, kind in enumerate(self.layer_kinds()):
            if n >= self.num_layers - self.kv_shared_layers:
                out.append(("shared", 0))
            elif kind == "linear":
                lin = self.linear or {}
                conv = 2 * lin["key_heads"] * lin["key_dim"] + lin["value_heads"] * lin["value_dim"]
                out.append((kind, lin["value_heads"] * lin["key_dim"] * lin["value_dim"] + lin["conv_kernel"] * conv))
            elif kind == "native_sparse":
                nsa = self.native_sparse or {}
                pooled = (context - nsa["compress_block"]) // nsa["compress_stride"] + 1 if context >= nsa[
                    "compress_block"] else 0
                out.append((kind, kv * (context + pooled + min(context, nsa["window"]))))
            elif kind in COMPRESSED_KINDS:
                pooled = context // (self.compress or {})[kind]
                window = min(context, self.sliding_window or 0) * K * E
                out.append((kind, window + pooled * K * E + (pooled * indexer if kind == "compressed_sparse" else 0)))
            else:
                span = {"full": context, "sliding": min(context, self.sliding_window or context),
                        "chunked": min(context, self.chunk_size or context)}[kind]
                extra = indexer if kind == "full" and self.mla else 0
                out.append((kind, span * (per_position[kind] + extra)))
        return out

    def cache_bytes(self, context: int, batch: int = 1, bytes_per_number: int | Fraction = 2,
                    rope_bytes: int | Fraction | None = None) -> dict[str, int]:
        """Bytes the cache holds for ``batch`` sequences of ``context`` tokens, by layer kind, and the ``"total"``.

        ``bytes_per_number`` may be a fraction, a quantized format's bytes with its scales' share: ``q8_0`` is
        ``Fraction(34, 32)``, float8 with a float32 scale per 128 numbers ``Fraction(33, 32)``. ``rope_bytes``
        stores an MLA cache's RoPE part differently (DeepSeek-V3.2: its latent in float8, its RoPE in bfloat16,
        ``rope_bytes=2``). Each kind's bytes are rounded up to a whole byte.

        Example:
            >>> load_configs()["Llama 3 8B"].cache_bytes(8192)["total"] / 2**30  # GiB in bfloat16
            1.0
            >>> load_configs()["DeepSeek-V3"].cache_bytes(1, bytes_per_number=Fraction(33, 32), rope_bytes=2)["total"]
            40016
        """
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise ValueError(f"batch must be a positive int; got {batch!r}")
        for name, value in (("bytes_per_number", bytes_per_number), ("rope_bytes", rope_bytes)):
            if value is None and name == "rope_bytes":
                continue
            if isinstance(value, bool) or not isinstance(value, int | Fraction) or value <= 0:
                raise ValueError(f"{name} must be a positive int or Fraction; got {value!r}")
        rope_dim = (self.mla or {}).get("rope_dim", 0) if rope_bytes is not None else 0
        exact: dict[str, Fraction] = {}
        for kind, numbers in self.layer_cache_numbers(context):
            rope = context * rope_dim if kind == "full" and numbers else 0  # an MLA layer's RoPE part
            part = (numbers - rope) * Fraction(bytes_per_number) + rope * Fraction(rope_bytes or 0)
            exact[kind] = exact.get(kind, Fraction(0)) + part * batch
        out = {kind: math.ceil(b) for kind, b in exact.items()}
        out["total"] = sum(out.values())
        return out


_RENAMED = {"head_dim": "head_dim_published", "value_dim": "value_dim_published"}
_FIELDS = {f.name for f in fields(ModelConfig)} - set(_RENAMED.values()) | set(_RENAMED)


def _parse(entry: dict[str, Any]) -> ModelConfig:
    unknown = sorted(set(entry) - _FIELDS)
    if unknown:
        raise ValueError(f"{entry.get('name')}: unknown fields {unknown}; the schema has {sorted(_FIELDS)}")
    values = {_RENAMED.get(key, key): value for key, value in entry.items()}
    if values.get("layer_pattern") is not None:
        values["layer_pattern"] = tuple(values["layer_pattern"])
    return ModelConfig(**values)


class UnknownModelError(KeyError):
    """A model name that is not in the configurations file; the message lists the names that are."""

    def __str__(self) -> str:
        return str(self.args[0])


class ConfigTable(dict[str, ModelConfig]):
    """The published configurations by name; an unknown name raises :class:`UnknownModelError`."""

    def __missing__(self, name: str) -> ModelConfig:
        raise UnknownModelError(f"no published configuration named {name!r}; the file has: {', '.join(self)}")


def load_configs(names: Iterable[str] | None = None) -> ConfigTable:
    """The published configurations by name, in the file's order, or those in ``names`` in that order.

    Looking up a name the file does not have raises :class:`UnknownModelError` (a ``KeyError``) whose
    message lists the names it has; so does a name in ``names``.

    Example:
        >>> list(load_configs(["Llama 3 8B", "GPT-2 small"]))
        ['Llama 3 8B', 'GPT-2 small']
    """
    text = data_file("model_configs.json").read_text(encoding="utf-8")
    table = ConfigTable((cfg.name, cfg) for cfg in map(_parse, json.loads(text)["models"]))
    return table if names is None else ConfigTable((name, table[name]) for name in names)
