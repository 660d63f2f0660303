"""The exercises notebook, generated from the stubs and the catalogue so the two never disagree.

``python -m lessons_src.lab.exercises notebook docs/practice/exercises.ipynb`` writes it; a test checks
that the committed copy is what this module writes. Each exercise is a stub cell (tagged
``exercise-stub``, with the exercise's name in its metadata: the explicit marker by which the site's
build and the tests swap in the answers) followed by a cell that runs ``check``.
"""

from __future__ import annotations

import inspect
import json
from typing import TYPE_CHECKING, Any

from ... import __version__
from .catalogue import EXERCISES

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["STUB_TAG", "notebook", "notebook_json", "write_notebook"]

STUB_TAG = "exercise-stub"

_INTRO = """\
# Exercises: write multi-head attention yourself

{count} functions, from splitting the heads to learned sinks through FlexAttention. Under each heading, replace
`raise NotImplementedError` with your code, run the cell, then run the `check(...)` cell under it. The
checker runs your function on cases chosen to tell the common mistakes apart and compares it with the
course package's own code. When your answer is wrong it says where (the first differing element, with
both values) and, when your answer is one of the mistakes it knows, which one, and the lesson section
that explains it. The hints open one at a time; the solutions are on the course site's exercise pages.

**To run it** you need Python 3.11 or later with `torch` and Jupyter (Colab has them): the first code
cell installs the course's package, `lessons_src`, from its wheel when it is missing. Every check takes
well under a second on a CPU.

Shape letters, as in the lessons: `B` batch, `T` query positions, `S` key positions, `D` = `d_model`,
`H` query heads, `K` key/value heads, `E` head size, `C` latent size. Masks are bool, `True` = may attend.
"""

_INSTALL = '''\
# Installs the course's package, lessons_src, when it is missing (in Colab or any fresh environment);
# where it is installed already, this cell does nothing. WHEEL is the package's wheel: the course site's
# copy of this notebook names the site's own; this name is the file that
# `python tools/package/build_wheel.py .` writes in a copy of the repository.
WHEEL = "{wheel}"

import importlib
import importlib.util
from pathlib import Path

if importlib.util.find_spec("lessons_src") is None:
    if not WHEEL.startswith(("https://", "http://")) and not Path(WHEEL).is_file():
        raise FileNotFoundError(
            f"lessons_src is not installed and WHEEL={{WHEEL!r}} is no file here: set WHEEL to the wheel's "
            "address printed on the course site's 'Get the code' page"
        )
    %pip install --quiet {{WHEEL}}
    importlib.invalidate_caches()  # so that this running Python sees the new package
    if importlib.util.find_spec("lessons_src") is None:
        raise ModuleNotFoundError(f"installing {{WHEEL}} failed: pip's messages above say why")'''

_IMPORTS = """\
import math

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention.flex_attention import AuxRequest, flex_attention

from lessons_src.lab.exercises import check"""


def _lines(text: str) -> list[str]:
    lines = text.splitlines(keepends=True)
    if lines:
        lines[-1] = lines[-1].rstrip("\n")
    return lines


def _markdown(cell_id: str, text: str) -> dict[str, Any]:
    return {"cell_type": "markdown", "id": cell_id, "metadata": {}, "source": _lines(text)}


def _code(cell_id: str, text: str, metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"cell_type": "code", "execution_count": None, "id": cell_id, "metadata": metadata or {},
            "outputs": [], "source": _lines(text)}


def _exercise_markdown(number: int, name: str) -> str:
    ex = EXERCISES[name]
    parts = [f"## {number}. {ex.title}\n",
             f"Write `{name}`. The lesson: *{ex.lesson.title}* (`{ex.lesson.path}` on the course site).\n"]
    for i, hint in enumerate(ex.hints, 1):
        parts.append(f"<details><summary>Hint {i}</summary>\n\n{hint}\n\n</details>\n")
    return "\n".join(parts)


def notebook(wheel: str | None = None) -> dict[str, Any]:
    """The notebook as a JSON-ready dict; ``wheel`` is the first code cell's ``WHEEL`` (default: the wheel's name)."""
    wheel = wheel or f"mha_computed-{__version__}-py3-none-any.whl"
    cells = [
        _markdown("intro", _INTRO.format(count=len(EXERCISES))),
        _code("install", _INSTALL.format(wheel=wheel)),
        _code("imports", _IMPORTS),
    ]
    for number, (name, ex) in enumerate(EXERCISES.items(), 1):
        cells.append(_markdown(f"{name}-text", _exercise_markdown(number, name)))
        stub = inspect.getsource(ex.stub).rstrip("\n")
        cells.append(_code(f"{name}-stub", stub, {"tags": [STUB_TAG], "exercise": name}))
        cells.append(_code(f"{name}-check", f"check({name})"))
    return {
        "cells": cells,
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def notebook_json(wheel: str | None = None) -> str:
    """The notebook's file contents (as ``nbformat`` writes them: one-space indent, a final newline)."""
    return json.dumps(notebook(wheel), indent=1, ensure_ascii=False) + "\n"


def write_notebook(path: Path, wheel: str | None = None) -> None:
    path.write_text(notebook_json(wheel), encoding="utf-8")
