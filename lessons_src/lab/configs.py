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
from dataclasses import dataclass, field
from typing import Any

from . import data_file

__all__ = ["ConfigTable", "ModelConfig", "UnknownModelError", "load_configs"]


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
        card_names: the names the source uses for our fields.
        head_dim_published: head size when the source states one that differs from ``d_model // num_heads``.
        mla: multi-head latent attention sizes (DeepSeek-V2 style), if any.
        sliding_window: positions a query attends to (itself included) when the model uses sliding-window
            attention, e.g. Mistral 7B; its KV cache is then a rolling buffer of this many positions.
        global_every: with ``sliding_window``, layers ``global_every, 2 * global_every, ...`` (counted
            from 1) attend to the whole context and the others use the window (Gemma 2: 2, local and
            global alternating; Gemma 3: 6, five local layers per global one); ``None``: every layer
            uses the window.
        context_length: the longest context the source states the model was trained or released for.
        params_billions: total parameter count in billions, as the source rounds it, when stated.
    """

    name: str
    year: int
    d_model: int
    num_heads: int
    num_kv_heads: int
    num_layers: int
    source: str
    card_names: dict[str, str] = field(default_factory=dict)
    head_dim_published: int | None = None
    mla: dict[str, int] | None = None
    sliding_window: int | None = None
    global_every: int | None = None
    context_length: int | None = None
    params_billions: float | None = None

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
        if self.sliding_window is not None and self.sliding_window < 1:
            raise ValueError(f"{self.name}: sliding_window={self.sliding_window} must be a positive number of tokens")
        if self.global_every is not None and (self.sliding_window is None or self.global_every < 2):
            raise ValueError(
                f"{self.name}: global_every={self.global_every} needs a sliding_window and must be at least 2 "
                "(every global_every-th layer is global, the others windowed)"
            )
        if self.context_length is not None and self.context_length < 1:
            raise ValueError(f"{self.name}: context_length={self.context_length} must be a positive number of tokens")
        if self.params_billions is not None and self.params_billions <= 0:
            raise ValueError(f"{self.name}: params_billions={self.params_billions} must be positive")

    @property
    def head_dim(self) -> int:
        """Per-head size ``E``: published if stated, else ``d_model // num_heads``."""
        return self.head_dim_published or self.d_model // self.num_heads

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

    def layer_windows(self) -> list[int | None]:
        """Each layer's window (``None``: the layer attends to the whole context), first layer first.

        Example:
            >>> load_configs()["Gemma 2 27B"].layer_windows()[:4]
            [4096, None, 4096, None]
        """
        if self.sliding_window is None:
            return [None] * self.num_layers
        every = self.global_every
        return [None if every and n % every == 0 else self.sliding_window for n in range(1, self.num_layers + 1)]

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
        if self.global_every is not None:
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


def _parse(entry: dict[str, Any]) -> ModelConfig:
    cfg = ModelConfig(
        name=entry["name"],
        year=int(entry["year"]),
        d_model=int(entry["d_model"]),
        num_heads=int(entry["num_heads"]),
        num_kv_heads=int(entry["num_kv_heads"]),
        num_layers=int(entry["num_layers"]),
        source=entry["source"],
        card_names=dict(entry.get("card_names", {})),
        head_dim_published=entry.get("head_dim"),
        mla=entry.get("mla"),
        sliding_window=None if entry.get("sliding_window") is None else int(entry["sliding_window"]),
        global_every=None if entry.get("global_every") is None else int(entry["global_every"]),
        context_length=None if entry.get("context_length") is None else int(entry["context_length"]),
        params_billions=None if entry.get("params_billions") is None else float(entry["params_billions"]),
    )
    return cfg


class UnknownModelError(KeyError):
    """A model name that is not in the configurations file; the message lists the names that are."""

    def __str__(self) -> str:
        return str(self.args[0])


class ConfigTable(dict[str, ModelConfig]):
    """The published configurations by name; an unknown name raises :class:`UnknownModelError`."""

    def __missing__(self, name: str) -> ModelConfig:
        raise UnknownModelError(f"no published configuration named {name!r}; the file has: {', '.join(self)}")


def load_configs() -> ConfigTable:
    """All published configurations, by name, in the file's order.

    Looking up a name the file does not have raises :class:`UnknownModelError` (a ``KeyError``) whose
    message lists the names it has.
    """
    text = data_file("model_configs.json").read_text(encoding="utf-8")
    return ConfigTable((cfg.name, cfg) for cfg in map(_parse, json.loads(text)["models"]))
