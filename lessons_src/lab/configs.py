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
