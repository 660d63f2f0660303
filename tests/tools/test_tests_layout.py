"""The tests' own layout (tests/README.md): each unit test in the folder of what it tests, and no test that edits
``sys.path`` or imports another test module (shared code is a helper in tests/helpers/, on pytest's pythonpath)."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
TEST_FILES = sorted(p for p in TESTS.rglob("*.py") if p.name.startswith("test_") or p.name == "conftest.py")


def _move_tests():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("move_tests", ROOT / "tools" / "dev" / "move_tests.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def edits_of_sys_path(tree: ast.AST) -> list[int]:
    """Lines that change ``sys.path`` (code only: a child's script in a string is not the test's own)."""
    lines = []
    for node in ast.walk(tree):
        target = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            target = node.func.value  # sys.path.insert(...), .append, .extend
        elif isinstance(node, ast.Assign | ast.AugAssign):
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            target = target.value if isinstance(target, ast.Subscript) else target
        if isinstance(target, ast.Attribute) and target.attr == "path" and isinstance(target.value, ast.Name) \
                and target.value.id == "sys":
            lines.append(node.lineno)
    return sorted(lines)


def imported_test_modules(tree: ast.AST) -> list[str]:
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names if a.name.split(".")[-1].startswith("test_")]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[-1].startswith("test_"):
            names.append(node.module)
    return names


@pytest.mark.parametrize("path", TEST_FILES, ids=lambda p: str(p.relative_to(TESTS)))
def test_no_test_edits_sys_path_or_imports_another_test(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    assert edits_of_sys_path(tree) == [], f"{path.name} edits sys.path: add the folder to pythonpath in pyproject.toml"
    assert imported_test_modules(tree) == [], f"{path.name} imports a test module: share through tests/helpers/"


def test_the_checks_find_what_they_look_for() -> None:
    tree = ast.parse("import sys\nsys.path.insert(0, 'x')\nsys.path[:0] = ['y']\nsys.path += ['z']\n"
                     "s = 'sys.path.insert(0, 1)'\nfrom test_links import parse\nimport test_mla\n")
    assert edits_of_sys_path(tree) == [2, 3, 4]
    assert imported_test_modules(tree) == ["test_links", "test_mla"]


def test_every_unit_test_is_in_the_folder_of_what_it_tests() -> None:
    """tools/dev/move_tests.py's rule places each file where it is; a new tests/test_*.py is sorted by running it."""
    move_tests = _move_tests()
    assert sorted(TESTS.glob("test_*.py")) == [], "run python tools/dev/move_tests.py (then --fix-paths)"
    for where in move_tests.FOLDERS:
        for path in sorted((TESTS / where).glob("test_*.py")):
            assert move_tests.folder(path.stem.removeprefix("test_")) == where, path
