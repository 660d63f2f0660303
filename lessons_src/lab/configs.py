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

__all__ = ["ModelConfig", "load_configs"]


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
    params_billions: float | None = None

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

    def cached_positions(self, context: int) -> int:
        """Positions the KV cache holds for a sequence of ``context`` tokens.

        A sliding-window model keeps only the last ``sliding_window`` positions (a rolling buffer), so its
        cache stops growing at the window; other models cache every position.

        Example:
            >>> cfgs = load_configs()
            >>> cfgs["Mistral 7B"].cached_positions(131072), cfgs["Llama 3 8B"].cached_positions(131072)
            (4096, 131072)
        """
        if isinstance(context, bool) or not isinstance(context, int) or context < 0:
            raise ValueError(f"context must be a non-negative int (a number of tokens); got {context!r}")
        return context if self.sliding_window is None else min(context, self.sliding_window)


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
        params_billions=None if entry.get("params_billions") is None else float(entry["params_billions"]),
    )
    if cfg.num_heads % cfg.num_kv_heads != 0:
        raise ValueError(f"{cfg.name}: num_heads={cfg.num_heads} is not a multiple of num_kv_heads={cfg.num_kv_heads}")
    if cfg.head_dim_published is None and cfg.d_model % cfg.num_heads != 0:
        raise ValueError(f"{cfg.name}: d_model={cfg.d_model} is not divisible by num_heads={cfg.num_heads}")
    if cfg.sliding_window is not None and cfg.sliding_window < 1:
        raise ValueError(f"{cfg.name}: sliding_window={cfg.sliding_window} must be a positive number of positions")
    if cfg.params_billions is not None and cfg.params_billions <= 0:
        raise ValueError(f"{cfg.name}: params_billions={cfg.params_billions} must be positive")
    return cfg


def load_configs() -> dict[str, ModelConfig]:
    """All published configurations, by name, in the file's order."""
    text = data_file("model_configs.json").read_text(encoding="utf-8")
    return {cfg.name: cfg for cfg in map(_parse, json.loads(text)["models"])}
