"""The exercises notebook: the committed copy is what the package generates, and, with the pages' solutions
(plain torch, from lessons_src/lab/exercises/shown.py) swapped into its tagged stub cells, it runs top to
bottom and every check passes."""

from __future__ import annotations

import inspect
from pathlib import Path

import nbclient
import nbformat
import pytest

from lessons_src.lab.exercises import EXERCISES, shown
from lessons_src.lab.exercises.notebook import STUB_TAG, notebook_json

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "docs" / "practice" / "exercises.ipynb"


def test_committed_notebook_is_the_generated_one() -> None:
    assert NOTEBOOK.read_text(encoding="utf-8") == notebook_json(), (
        "docs/practice/exercises.ipynb is out of date: run "
        "python -m lessons_src.lab.exercises notebook docs/practice/exercises.ipynb"
    )


def test_every_exercise_has_one_tagged_stub_cell_and_a_check_after_it() -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    cells = nb.cells
    stubs = [i for i, c in enumerate(cells) if STUB_TAG in c.metadata.get("tags", [])]
    assert [cells[i].metadata["exercise"] for i in stubs] == list(EXERCISES)
    for i in stubs:
        name = cells[i].metadata["exercise"]
        assert f"def {name}(" in cells[i].source and "raise NotImplementedError" in cells[i].source
        assert cells[i + 1].source == f"check({name})"


@pytest.mark.slow
def test_notebook_with_the_answers_filled_in_passes_every_check(tmp_path: Path) -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    for cell in nb.cells:
        if STUB_TAG in cell.metadata.get("tags", []):
            cell.source = inspect.getsource(getattr(shown, cell.metadata["exercise"]))  # the pages' solution
    nbclient.NotebookClient(
        nb, kernel_name="python3", timeout=120, resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    printed = {
        c.source: "".join(o.get("text", "") for o in c.outputs) for c in nb.cells
        if c.cell_type == "code" and c.source.startswith("check(")
    }
    assert len(printed) == len(EXERCISES)
    for name in EXERCISES:
        assert printed[f"check({name})"].startswith(f"passed {name} ("), printed[f"check({name})"]
