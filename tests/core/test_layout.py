"""The package's layout: a core readers copy, and the lessons' apparatus (``lab``) on top of it.

* the core never imports ``lab`` (nor anything outside the standard library and torch);
* the copy rule, as a number: each core file runs when copied with the sibling files it imports at run time
  (imports used only in annotations sit under ``TYPE_CHECKING``), and those are at most **three**, not counting
  ``_checks.py`` (the shared argument checks, which import nothing of the package) and, for a file that wraps the
  layer (``convert.py``, ``interop.py``), ``layer.py`` with the cache file it recognises caches by
  (``kv_cache.py``). A file that builds on ``attention()`` needs ``functional.py``, ``masks.py`` and
  ``score_mods.py``: its three;
* ``nn.MultiheadAttention`` is mentioned in code only by ``interop.py``.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import re
import shutil
from pathlib import Path

import pytest
import warm_python

import lessons_src

PKG = Path(lessons_src.__file__).resolve().parent
CORE = sorted(p.stem for p in PKG.glob("*.py") if p.stem != "__init__")
ALLOWED_TOP_LEVEL = {"torch", "__future__", "abc", "collections", "dataclasses", "fractions", "math", "typing",
                     "functools", "warnings"}
EXTRA_IMPORTS = {"triton_flash": {"triton", "os"}}  # its optional extra, and os for TRITON_INTERPRET


def _is_type_checking(node: ast.If) -> bool:
    return isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"


@functools.cache
def imports(module: str) -> tuple[set[str], set[str], set[str]]:
    """(sibling modules imported at run time, sibling modules imported for type checking only, absolute roots)."""
    tree = ast.parse((PKG / f"{module}.py").read_text())
    runtime: set[str] = set()
    typing_only: set[str] = set()
    absolute: set[str] = set()

    def visit(nodes: list[ast.stmt], in_tc: bool) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and _is_type_checking(node):
                visit(node.body, True)
                continue
            for sub in ast.walk(node):
                if isinstance(sub, ast.ImportFrom) and sub.level > 0:
                    targets = [sub.module] if sub.module else [a.name for a in sub.names]
                    for t in targets:
                        (typing_only if in_tc else runtime).add(f"{'.' * (sub.level - 1)}{t}")
                elif isinstance(sub, ast.ImportFrom) and sub.module:
                    absolute.add(sub.module.split(".")[0])
                elif isinstance(sub, ast.Import):
                    absolute.update(a.name.split(".")[0] for a in sub.names)

    visit(tree.body, False)
    return runtime, typing_only, absolute


def closure(module: str) -> set[str]:
    seen: set[str] = set()
    todo = [module]
    while todo:
        for dep in imports(todo.pop())[0]:
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    seen.discard(module)
    return seen


def test_core_and_lab_are_where_their_readme_says() -> None:
    """lessons_src/README.md has a row for every module, the core's in its core table and the lab's in the lab's
    (tests/tools/test_repository.py checks that every file it names exists)."""
    tables: dict[str, set[str]] = {}
    section = ""
    for line in (PKG / "README.md").read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            section = "lab" if "lab/" in line else "core"
        elif line.startswith("| `") and line.split("`")[1].endswith(".py"):
            tables.setdefault(section, set()).add(line.split("`")[1].removesuffix(".py"))
    assert tables.get("core") == set(CORE)
    lab = {f"lab/{p.stem}" for p in (PKG / "lab").glob("*.py") if p.stem != "__init__"}
    assert tables.get("lab") == lab
    assert (PKG / "lab" / "__init__.py").is_file()


@pytest.mark.parametrize("module", CORE)
def test_core_file_imports_only_core_torch_and_stdlib(module: str) -> None:
    runtime, typing_only, absolute = imports(module)
    for dep in runtime | typing_only:
        assert dep in CORE, f"core file {module}.py imports {dep!r}, not a core file (lab imports core, never back)"
    allowed = ALLOWED_TOP_LEVEL | EXTRA_IMPORTS.get(module, set())
    assert absolute <= allowed, f"{module}.py imports {sorted(absolute - allowed)}"


MAX_SIBLINGS = 3
SHARED = {"_checks"}  # every core file may bring the shared checks
LAYER = {"layer", "kv_cache"}  # a file that wraps the layer brings it and the cache file it imports


def counted(needed: set[str], module: str = "") -> set[str]:
    """The siblings the copy rule counts: all but the shared checks, and the layer's own for the layer's file and a
    file that wraps it."""
    return needed - SHARED - (LAYER if "layer" in needed | {module} else set())


def test_the_copy_rule_counts_what_it_says() -> None:
    assert counted({"_checks", "functional", "masks", "score_mods"}) == {"functional", "masks", "score_mods"}
    assert counted({"_checks", "layer", "kv_cache", "functional", "masks", "score_mods"}) == {
        "functional", "masks", "score_mods"}
    assert counted({"kv_cache", "masks"}) == {"kv_cache", "masks"}  # the cache counts when no layer comes with it
    assert counted({"kv_cache", "functional"}, "layer") == {"functional"}
    assert len(counted({"a", "b", "c", "d", "_checks"})) > MAX_SIBLINGS


@pytest.mark.parametrize("module", CORE)
def test_core_file_runs_copied_with_at_most_three_siblings(module: str, tmp_path: Path) -> None:
    needed = closure(module)
    assert len(counted(needed, module)) <= MAX_SIBLINGS, (
        f"{module}.py needs {sorted(needed)} at run time: more than {MAX_SIBLINGS} besides {sorted(SHARED)} and "
        f"the layer's {sorted(LAYER)}")
    pkg = tmp_path / "mycopy"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for name in {module, *needed}:
        shutil.copy(PKG / f"{name}.py", pkg / f"{name}.py")
    # python -c in a child forked from a parent that imported torch alone (warm_python.py): 3 CPU-s less a file
    proc = warm_python.TORCH.run(["-c", f"import mycopy.{module} as m; print(sorted(m.__all__))"], cwd=tmp_path)
    if module in EXTRA_IMPORTS and importlib.util.find_spec("triton") is None:  # without its extra: says which
        assert proc.returncode == 1 and 'pip install "mha-computed[triton]"' in proc.stderr, proc.stderr
        return
    assert proc.returncode == 0, proc.stderr
    assert "lessons_src" not in proc.stderr


def test_lab_imports_the_core_only_through_the_package() -> None:
    for path in sorted((PKG / "lab").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 2:
                assert node.module in CORE, f"{path.name} imports ..{node.module}"


def test_only_interop_knows_nn_multiheadattention() -> None:
    for module in CORE:
        code = ast.unparse(ast.parse((PKG / f"{module}.py").read_text()))  # code only, docstrings kept
        tree = ast.parse(code)
        uses = [
            n for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and n.attr == "MultiheadAttention"
        ]
        assert bool(uses) == (module == "interop"), f"{module}.py uses nn.MultiheadAttention in code"


def test_top_level_exports() -> None:
    from lessons_src import MultiHeadLatentAttention
    from lessons_src.mla import MultiHeadLatentAttention as M

    assert MultiHeadLatentAttention is M
    for name in lessons_src.__all__:
        assert hasattr(lessons_src, name), name


def test_code_page_says_what_each_core_file_needs() -> None:
    """The reference page's "needs" column is the run-time closure computed here, not a hand-typed claim."""
    page = (PKG.parent / "docs" / "reference" / "code" / "index.md").read_text()
    rows = {}
    for line in page.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("[`") and "/" not in cells[0]:
            name = cells[0].split("`")[1].removesuffix(".py")
            needs = [] if cells[2] == "nothing" else cells[2].split(",")
            rows[name] = {c.strip("` ").removesuffix(".py") for c in needs}
    assert rows == {m: closure(m) for m in CORE}


def test_each_core_code_page_names_the_files_a_copier_needs() -> None:
    """A core file's page says what to copy with it: its "Part of the core" paragraph links each sibling file of
    the run-time closure computed here, and no other, or says it needs only torch (issue 77)."""
    pages = PKG.parent / "docs" / "reference" / "code"
    wrong = {}
    for module in CORE:
        text = (pages / f"{module}.md").read_text(encoding="utf-8")
        start = text.find("Part of the **core**")
        paragraph = text[start : text.find("\n\n", start)] if start >= 0 else ""
        named = set(re.findall(r"\]\((\w+)\.md\)", paragraph)) - {"index"}
        needs_only_torch = not closure(module) and "only `torch`" in paragraph
        if not paragraph or named != closure(module) or not (closure(module) or needs_only_torch):
            wrong[module] = f"names {sorted(named)}, needs {sorted(closure(module))}: {paragraph[:120]!r}"
    assert wrong == {}


def test_the_package_docstring_names_every_core_file() -> None:
    """lessons_src's docstring is the core's map, by role: every core file is on it, and nothing that is not one."""
    named = set(re.findall(r"``(\w+)\.py``", lessons_src.__doc__ or ""))
    assert named == set(CORE), f"missing {sorted(set(CORE) - named)}, not core files {sorted(named - set(CORE))}"
