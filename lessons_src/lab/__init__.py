"""The lessons' apparatus, built on the core package and never imported by it.

The core (``lessons_src.attention``, ``masks``, ``kv_cache``, ``mla``, ``rope``, ``convert``,
``interop``) is what a reader copies into a project. This subpackage is what the lessons use to teach
with it: worked examples, counters and timers (:mod:`.lesson_tools`), all-MiniLM-L6-v2 run through our
attention (:mod:`.minilm`), head scores and ablation (:mod:`.heads`), the small models trained here
(:mod:`.toy_models`), SVG figures (:mod:`.plotting`), published configurations (:mod:`.configs`), and
local multi-process runs with counted collectives (:mod:`.launch`, :mod:`.parallel_runs`).

The files the package loads ship inside it and are read with :mod:`importlib.resources`, so they load
the same from a wheel as from a checkout:

* ``artifacts/``: results of the seeded training and ablation scripts in ``tools/train/`` (the
  induction model's checkpoint and training log, the one-vs-many-heads sweep, MiniLM's head ablations), and
  the decode benchmark's report (``tools/bench/bench_decode.py``), which the lessons' shown blocks read;
* ``data/model_configs.json``: published attention configurations with their sources;
* ``data/course_text.txt``: the course's own prose, the text model's corpus (``tools/train/text_corpus.py``).

>>> sorted(ARTIFACT_FILES)[:2]
['decode_bench.json', 'induction_model.safetensors']
>>> read_artifact_json("induction_training.json")["config"]["num_layers"]
2
"""

from __future__ import annotations

import json
from importlib import resources
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

__all__ = ["ARTIFACT_FILES", "DATA_FILES", "artifact", "data_file", "read_artifact_json"]

ARTIFACT_FILES = (
    "decode_bench.json",
    "induction_model.safetensors",
    "induction_training.json",
    "minilm_ablation.json",
    "one_vs_many_heads.json",
    "text_model.safetensors",
    "text_training.json",
)
"""Every committed artifact the package loads (a test loads each from an installed wheel)."""

DATA_FILES = ("course_text.txt", "model_configs.json")
"""Every data file the package loads."""


def _resource(folder: str, name: str, known: tuple[str, ...]) -> Traversable:
    if name not in known:
        raise ValueError(f"unknown {folder} file {name!r}; the package ships {', '.join(known)}")
    return resources.files(__name__).joinpath(folder, name)


def artifact(name: str) -> Traversable:
    """One committed artifact, as an :mod:`importlib.resources` traversable (``.read_bytes()``, ``.read_text()``).

    Raises:
        ValueError: for a name not in :data:`ARTIFACT_FILES` (the message lists them).
    """
    return _resource("artifacts", name, ARTIFACT_FILES)


def data_file(name: str) -> Traversable:
    """One shipped data file (see :data:`DATA_FILES`)."""
    return _resource("data", name, DATA_FILES)


def read_artifact_json(name: str) -> Any:
    """Parse one committed JSON artifact (a training log or a measurement report)."""
    return json.loads(artifact(name).read_text(encoding="utf-8"))
