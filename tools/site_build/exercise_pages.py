"""The exercise pages, rendered from the package's exercises at build time, and the notebook's download.

Called from the pages' hidden blocks (``docs/practice/exercises*.md``): each exercise's statement is its
stub from ``lessons_src/lab/exercises/stubs.py``, its hints and lesson come from the catalogue, and its
solution is the plain-torch one of ``lessons_src/lab/exercises/shown.py``, shown as a snippet that runs
alone (imports, the function, ``check``) and run here, in a fresh namespace, when the page is built: the
checker compares it with the package's answer, and a check that does not pass fails the build. Where the
answer is the package's own function, its source is shown too.

As a MkDocs hook (listed in ``mkdocs.yml``), ``on_files`` publishes ``docs/practice/exercises.ipynb``
(which mkdocs-jupyter is told to leave alone: it is a download, not a page) with its first cell's
``WHEEL = ...`` pointed at this build's wheel, as the lab's executed copy is.
"""

from __future__ import annotations

import ast
import contextlib
import html
import importlib
import inspect
import io
import json
import re
import textwrap
from pathlib import Path
from typing import Any

import site_links  # this folder is on sys.path for the hooks and the pages' blocks
from site_links import relative_link

from lessons_src.lab.exercises import EXERCISES, MISCONCEPTIONS, VARIANTS, shown, stubs

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = "practice/exercises.ipynb"
PAGES = {  # which page shows which exercises, in the catalogue's order
    "practice/exercises-heads.md": ("split_heads", "merge_heads", "attention_scores", "mha_param_count",
                                    "dimension_arithmetic"),
    "practice/exercises-masks.md": ("causal_mask", "padding_mask", "masked_softmax", "mha_forward"),
    "practice/exercises-inference.md": ("gqa_attention", "decode_step", "online_softmax", "absorb_query"),
    "practice/exercises-today.md": ("softcapped_softmax", "sink_attention", "qk_norm_scores", "gated_output",
                                    "delta_rule_step"),
    "practice/exercises-kernels.md": ("indexer_top_k", "causal_mask_mod", "flex_sink_attention",
                                     "flash_tile_step", "causal_key_ends", "lse_in_base_2"),
    "practice/exercises-serving.md": ("gqa_decode_intensity", "merge_attention_states", "left_padded_positions",
                                      "packed_step_positions", "draft_tree_mask",
                                      "quantize_tile"),
    "practice/exercises-positions.md": ("rope_interleaved",),
}
STUB_HEADER = "import torch\nfrom torch import Tensor\n"
_WHEEL_LINE = re.compile(r'^WHEEL = ".*"$', re.M)


def page_of(name: str) -> str:
    for page, names in PAGES.items():
        if name in names:
            return page
    raise ValueError(f"exercise {name!r} is on no exercise page; add it to exercise_pages.PAGES")


def number(name: str) -> int:
    return list(EXERCISES).index(name) + 1


# ---- snippets --------------------------------------------------------------------------------------------


def _shown_imports() -> dict[str, tuple[int, str]]:
    """``name -> (group, import line)`` for every name shown.py imports (``math`` first, then ``torch``)."""
    tree = ast.parse(Path(str(shown.__file__)).read_text(encoding="utf-8"))
    found: dict[str, tuple[int, str]] = {}
    for node in tree.body:
        if isinstance(node, ast.Import):
            for a in node.names:
                group = 0 if a.name == "math" else 1
                found[a.asname or a.name] = (group, f"import {a.name}" + (f" as {a.asname}" if a.asname else ""))
        elif isinstance(node, ast.ImportFrom):
            for a in node.names:
                line = f"from {node.module} import {a.name}" + (f" as {a.asname}" if a.asname else "")
                found[a.asname or a.name] = (1, line)
    return found


def solution_snippet(name: str) -> str:
    """The shown solution (plain torch) as a script that runs alone: its imports, the function, then ``check``."""
    source = textwrap.dedent(inspect.getsource(getattr(shown, name))).rstrip("\n")
    used = {n.id for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Name)} | {"torch"}  # as the stubs
    imports = _shown_imports()
    lines = sorted({imports[n] for n in used if n in imports}, key=lambda gl: (gl[0], gl[1].startswith("from"), gl[1]))
    groups = ["\n".join(line for g, line in lines if g == k) for k in (0, 1)]
    header = "\n\n".join(g for g in groups if g)
    return (f"{header}\n\n\n{source}\n\n\n# the course's checker compares it with the package's answer\n"
            f"from lessons_src.lab.exercises import check\n\ncheck({name})\n")


def stub_snippet(name: str) -> str:
    return STUB_HEADER + "\n\n" + inspect.getsource(getattr(stubs, name))


def run_alone(code: str, label: str) -> str:
    """Run ``code`` in a fresh namespace and return what it printed (an exception fails the build)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, f"<{label}>", "exec"), {"__name__": "__main__"})
    return out.getvalue()


def _package_source(dotted: str) -> tuple[str, str]:
    """``(module path, source)`` of a package object named like ``lessons_src.masks.causal_mask``."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        module = inspect.getmodule(obj)
        path = Path(str(module.__file__)).resolve().relative_to(ROOT).as_posix() if module else dotted
        return path, textwrap.dedent(inspect.getsource(obj)).rstrip("\n")
    raise ValueError(f"no such object in the package: {dotted}")


def _fence(code: str, lang: str = "python", indent: str = "", kind: str = "", title: str | None = None) -> str:
    """A fenced block; ``kind`` is its class on the page, the marker ``tests/site/test_exercise_pages.py`` reads:
    ``exercise-stub`` and ``exercise-solution`` run alone, ``package-excerpt`` (titled with the file's path) is
    an excerpt of a package file, shown as it is there."""
    body = "\n".join((indent + line) if line else "" for line in code.rstrip("\n").splitlines())
    options = " ".join([f".{lang}", *([f".{kind}"] if kind else []), *([f'title="{title}"'] if title else [])])
    return f"{indent}```{{{options}}}\n{body}\n{indent}```\n"


# ---- pages -----------------------------------------------------------------------------------------------


def render_exercise(name: str) -> str:
    """One exercise's section: statement, command, hints, the known mistakes, the solution (checked now)."""
    ex = EXERCISES[name]
    page = page_of(name)
    stub = stub_snippet(name)
    run_alone(stub, f"stub {name}")  # the statement as shown runs alone (it only defines the function)
    solution = solution_snippet(name)
    printed = run_alone(solution, f"solution {name}")
    if not printed.startswith(f"passed {name} "):
        raise RuntimeError(f"the answer to {name} does not pass its own check:\n{printed}")
    lesson = f"[{ex.lesson.title}]({relative_link(ex.lesson.page, page, ex.lesson.anchor)})"
    out = [
        f"## {number(name)}. {ex.title} {{ #{name.replace('_', '-')} }}\n",
        f"Write `{name}`; its docstring says what it must do. The lesson: {lesson}.\n",
        _fence(stub, kind="exercise-stub"),
        "Check it: `python -m lessons_src.lab.exercises check " + name + " my_attention.py`, or "
        f"`check({name})` in the notebook.\n",
    ]
    for i, hint in enumerate(ex.hints, 1):
        out.append(f'??? tip "Hint {i}"\n\n    {hint}\n')
    known = []
    for v in ex.variants:
        m = MISCONCEPTIONS[v.misconception]
        why = relative_link(m.lesson.page, page, m.lesson.anchor)
        known.append(f"    - **{m.name}**: you {v.what} ([why]({why})).")
    out.append('??? bug "The mistakes the checker names here"\n\n' + "\n".join(known) + "\n")
    sol = ['??? success "Solution in plain torch, checked when this page was built"\n',
           _fence(solution, indent="    ", kind="exercise-solution"), _fence(printed, "text", indent="    ")]
    for dotted in ex.package_code:
        path, source = _package_source(dotted)
        sol.append(f"    The same step in the package, `{dotted.rsplit('.', 1)[-1]}` (an excerpt of its file):\n")
        sol.append(_fence(source, indent="    ", kind="package-excerpt", title=path))
    out.append("\n".join(sol))
    return "\n".join(out)


def render_page(page: str) -> str:
    return "\n".join(render_exercise(name) for name in PAGES[page])


def exercise_table(page: str = "practice/exercises.md") -> str:
    rows = ["| # | write | lesson |", "| --- | --- | --- |"]
    for name, ex in EXERCISES.items():
        link = relative_link(page_of(name), page, name.replace("_", "-"))
        lesson = f"[{ex.lesson.title}]({relative_link(ex.lesson.page, page, ex.lesson.anchor)})"
        rows.append(f"| {number(name)} | [{ex.title}]({link}) | {lesson} |")
    return "\n".join(rows) + "\n"


def mistake_table(page: str = "practice/exercises.md") -> str:
    rows = ["| mistake | in exercises | explained in |", "| --- | --- | --- |"]
    for m in MISCONCEPTIONS.values():
        where = sorted({number(v.exercise) for v in VARIANTS if v.misconception == m.key})
        rows.append(f"| {m.name} | {', '.join(map(str, where))} | "
                    f"[{m.lesson.title}]({relative_link(m.lesson.page, page, m.lesson.anchor)}) |")
    return "\n".join(rows) + "\n"


def counts() -> str:
    return (f"{len(EXERCISES)} exercises, {len(VARIANTS)} known-wrong functions for "
            f"{len(MISCONCEPTIONS)} mistakes")


def notebook_links() -> str:
    """The download and "Open in Colab" links of the exercises notebook (Colab only when the repository is known)."""
    items = ['<a href="../exercises.ipynb" download>download the notebook</a>']
    if colab := site_links.current().colab_url(f"docs/{NOTEBOOK}"):
        items.append(f'<a href="{html.escape(colab)}">open it in Colab</a>')
    return '<p class="lab-links"><strong>The exercises as a notebook</strong>: ' + "; or ".join(items) + ".</p>\n"


# ---- hook ------------------------------------------------------------------------------------------------


def stamped_notebook(path: Path) -> str:
    """The notebook at ``path`` with its first code cell's ``WHEEL`` line pointing at this build's wheel."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    target = site_links.wheel_url() or site_links.wheel_name()
    first = next(c for c in nb["cells"] if c["cell_type"] == "code")
    source = "".join(first["source"])
    new, n = _WHEEL_LINE.subn(lambda _: f'WHEEL = "{target}"', source, count=1)
    if n != 1:
        raise ValueError(f'{path}: its first code cell has no line WHEEL = "..."')
    first["source"] = new.splitlines(keepends=True)
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def on_files(files: Any, config: Any, **kwargs: Any) -> Any:
    from mkdocs.structure.files import File

    old = files.get_file_from_path(NOTEBOOK)
    if old is None:  # a site without the exercises (the tests' tiny projects use these hooks too)
        return files
    if old.is_documentation_page():
        raise RuntimeError(f"{NOTEBOOK} must be a static file: list it under mkdocs-jupyter's ignore in mkdocs.yml")
    files.remove(old)
    files.append(File.generated(config, NOTEBOOK, content=stamped_notebook(Path(old.abs_src_path))))
    return files
