"""MkDocs hooks: the way to the code. Repository and site addresses, the wheel, source links, the lab's copy.

* ``on_config``: the repository and site addresses come from :mod:`site_links` (environment, else the
  GitHub remote, else none), so ``mkdocs.yml`` types in neither. With a repository, Material's
  ``repo_url`` and ``edit_uri`` give every page a "view source" button (``content.action.view``). Under
  ``mkdocs serve``, MkDocs has already set ``site_url`` to the local address it serves at, which wins; a
  build that knows no public address gets the local one (``make serve``'s), at the root.
* ``on_files``: the package's wheel is built (reproducibly: ``SOURCE_DATE_EPOCH``, see
  ``tools/package/build_wheel.py``) and published as ``downloads/<wheel>``, so pages link it like any file.
* ``on_page_markdown``: each lesson ends with a line linking its source file and the modules its code
  imports (their reference pages, and their source on GitHub when the repository is known). Each module page
  (``reference/code/``) gets a line naming what its module defines, above its whole file, which
  ``on_page_content`` leaves out of the search index.
* ``on_page_content``: on every page, figures' drawn text and widgets' controls are left out of the search
  index too (their captions and the prose stay in).
* The lab notebook: its first cell's ``WHEEL = ...`` line is set to this site's wheel before it runs, the
  executed notebook replaces the unexecuted copy mkdocs-jupyter publishes (so the download is this build's
  run, with its outputs), and the page gets its download and "Open in Colab" links.
"""

from __future__ import annotations

import copy
import html
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

import dev_cache  # this folder is on sys.path while MkDocs loads a hook
import site_links

ROOT = Path(__file__).resolve().parents[2]
LAB = "practice/lab.ipynb"
_WHEEL_LINE = re.compile(r'^WHEEL = ".*"$', re.M)
_IMPORT = re.compile(
    r"\bfrom[ \t]+lessons_src((?:\.\w+)*)[ \t]+import[ \t]+(\([^)]*\)|[\w \t,]+)"  # from lessons_src.x import a, b
    r"|\bimport[ \t]+lessons_src((?:\.\w+)+)"  # import lessons_src.x
)
_SNIPPET = re.compile(r'--8<--\s+"(lessons_src/[\w/]+\.py)')

_state: dict[str, Any] = {"tmp": None, "executed": {}, "docs": "docs"}


def _docs_prefix(config: Any) -> str:
    """The docs folder's path in the repository (``docs``)."""
    docs = Path(config.docs_dir).resolve()
    return docs.relative_to(ROOT).as_posix() if docs.is_relative_to(ROOT) else docs.name


def on_config(config: Any, **kwargs: Any) -> Any:
    links = site_links.resolve(os.environ, site_links.git_remote(ROOT))
    # MkDocs and Material need an address (the sitemap, which instant navigation reads; canonical links).
    # Under `mkdocs serve`, MkDocs has set it to where it serves; a build that knows no public address
    # uses the local one `make serve` serves at. Pages still print the wheel's address only when public.
    if not config.site_url:
        config.site_url = links.site_url or site_links.local_url()
    if links.repo_url:
        config.repo_url = links.repo_url
        config.repo_name = links.repo_slug
        config.edit_uri = f"blob/{site_links.BRANCH}/{_docs_prefix(config)}/"
    else:
        config.repo_url = config.repo_name = config.edit_uri = None
    site_links.CURRENT = links
    _state["docs"] = _docs_prefix(config)
    _patch_notebook_execution()
    return config


def on_files(files: Any, config: Any, **kwargs: Any) -> Any:
    from mkdocs.structure.files import File

    sys.path.insert(0, str(ROOT / "tools" / "package"))
    try:
        from build_wheel import build_wheel
    finally:
        sys.path.remove(str(ROOT / "tools" / "package"))
    if _state["tmp"] is not None:
        _state["tmp"].cleanup()
    _state["tmp"] = tempfile.TemporaryDirectory()
    wheel = build_wheel(Path(_state["tmp"].name), cache=ROOT / ".cache" / "wheels")
    site_links.WHEEL_PATH = wheel
    files.append(
        File.generated(config, f"{site_links.DOWNLOADS}/{wheel.name}", abs_src_path=str(wheel))
    )
    return files


def module_page(module: str) -> str | None:
    """The reference page (relative to docs/) of a module path like ``lessons_src/lab/heads.py``."""
    rel = module.removeprefix("lessons_src/").removesuffix(".py")
    name = {"__init__": "index", "lab/__init__": "lab"}.get(rel, rel.replace("/", "-"))
    return f"reference/code/{name}.md" if (ROOT / "docs" / "reference" / "code" / f"{name}.md").exists() else None


def modules_used(markdown: str) -> list[str]:
    """The package's modules a page's code uses (``lessons_src/functional.py``, ...), most used first."""
    import importlib

    counts: dict[str, int] = {}

    def add(path: str) -> None:
        if (ROOT / path).is_file():
            counts[path] = counts.get(path, 0) + 1

    for m in _IMPORT.finditer(markdown):
        dotted = "lessons_src" + (m.group(1) if m.group(1) is not None else m.group(3))
        as_module = dotted.replace(".", "/")
        if (ROOT / f"{as_module}.py").is_file():
            add(f"{as_module}.py")
            continue
        # from a package: each imported name is a module of it, or a name it re-exports from one
        package = importlib.import_module(dotted)
        for item in (m.group(2) or "").strip("()").split(","):
            if not (name := item.split()[0] if item.split() else ""):
                continue
            if (ROOT / as_module / f"{name}.py").is_file():
                add(f"{as_module}/{name}.py")
            elif (module := sys.modules.get(getattr(getattr(package, name, None), "__module__", None) or "")):
                add(Path(str(module.__file__)).resolve().relative_to(ROOT).as_posix())
    for m in _SNIPPET.finditer(markdown):
        add(m.group(1))
    return sorted(counts, key=lambda p: (-counts[p], p))


def source_line(page_src: str, markdown: str) -> str:
    """The closing line of a lesson: its source file, and the modules its code uses."""
    links = site_links.current()
    depth = page_src.count("/")
    up = "../" * depth
    src = f"{_state['docs']}/{page_src}"
    parts = []
    for module in modules_used(markdown):
        ref = module_page(module)
        label = f"`{module.removeprefix('lessons_src/')}`"
        shown = f"[{label}]({up}{ref})" if ref else label
        if blob := links.blob_url(module):
            shown += f" ([source]({blob}))"
        parts.append(shown)
    page = f"[`{src}`]({links.blob_url(src)})" if links.repo_url else f"`{src}`"
    line = f"**Source**: this page is {page}"
    if parts:
        line += "; the code it runs is in " + ", ".join(parts)
    return line + "."


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    if page.file.src_uri.startswith("lessons/"):
        return markdown.rstrip("\n") + "\n\n" + source_line(page.file.src_uri, markdown) + "\n"
    if page.file.src_uri.startswith(CODE_PAGES) and (m := WHOLE_FILE.search(markdown)):
        return markdown[: m.start()] + defines_line(ROOT / m.group(1)) + "\n\n" + markdown[m.start() :]
    return markdown


# ---- the module pages (reference/code/) -------------------------------------------------------------------
# Each shows its whole file in a collapsible. Material's search indexed that source whole: 387 KB of the 915 KB
# index every page fetches, and the code pages outranked the lessons for the words their code uses. The
# source is left out of the index (data-search-exclude); the names the module defines, listed above it, stay
# in, so a search for a class or function still finds its page.

CODE_PAGES = "reference/code/"
WHOLE_FILE = re.compile(r'^\?\?\? abstract "The whole file, `(lessons_src/[\w/]+\.py)`"$', re.M)
_WHOLE_FILE_HTML = re.compile(r'<details class="abstract">(\s*<summary>The whole file, <code>lessons_src/)')


def public_names(path: Path) -> list[tuple[str, list[str]]]:
    """The module's public names in the order it defines them, each with its public methods (none but for a
    class): constants and aliases, functions, classes (``("KVCache", ["update", "nbytes"])``)."""
    import ast

    names: list[tuple[str, list[str]]] = []
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names += [(t.id, []) for t in targets if isinstance(t, ast.Name) and not t.id.startswith("_")]
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not node.name.startswith("_"):
            names.append((node.name, []))
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            methods = [m.name for m in node.body
                       if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef) and not m.name.startswith("_")]
            names.append((node.name, list(dict.fromkeys(methods))))  # an overloaded method once
    return names


def defines_line(path: Path) -> str:
    """The paragraph naming what the module defines: `KVCache` (`update`, `nbytes`), `repeat_kv`, ..."""
    items = [f"`{name}`" + (" (" + ", ".join(f"`{m}`" for m in methods) + ")" if methods else "")
             for name, methods in public_names(path)]
    return "**Defines**: " + ", ".join(items) + "." if items else "**Defines** no public name of its own."


# A figure's drawn text (tick labels, legends) and a widget's controls (buttons, menus, the labels of its boxes) are
# not prose: Material's search indexed them run together with the text beside them ("answerKnew itAgain" on the
# flashcards page, a figure's "0.0 0.2 0.4 0.6 0.8 1.0"). They are left out of the index; a figure keeps its
# caption, which is outside its <svg>. (Elements with a closing tag only: the search plugin forgets a skipped
# element at its end tag.)
_NOT_PROSE = re.compile(r"<(svg|button|select|label|textarea)\b(?![^>]*\bdata-search-exclude\b)")


def exclude_figures_and_controls(content: str) -> str:
    """``content`` with ``data-search-exclude=""`` on each <svg>, <button>, <select>, <label> and <textarea>."""
    return _NOT_PROSE.sub(r'<\1 data-search-exclude=""', content)  # a value: an SVG file is XML


def on_page_content(content: str, page: Any, **kwargs: Any) -> str:
    content = exclude_figures_and_controls(content)
    if page.file.src_uri == LAB:
        return lab_links(Path(LAB).name) + content
    if page.file.src_uri.startswith(CODE_PAGES):
        return _WHOLE_FILE_HTML.sub(r'<details class="abstract" data-search-exclude>\1', content, count=1)
    return content


# ---- the lab notebook -------------------------------------------------------------------------------------


def wheel_target() -> str:
    """What the notebook's first cell installs: the site's wheel, or its file name next to the notebook."""
    return site_links.wheel_url() or site_links.wheel_name()


def stamp(nb: Any) -> Any:
    """Point the first code cell's ``WHEEL = "..."`` line at this site's wheel (in place; returns nb)."""
    for cell in nb.cells:
        if cell.cell_type == "code":
            if not _WHEEL_LINE.search(cell.source):
                raise ValueError(f"the lab notebook's first code cell has no line WHEEL = \"...\":\n{cell.source}")
            cell.source = _WHEEL_LINE.sub(lambda _: f'WHEEL = "{wheel_target()}"', cell.source, count=1)
            return nb
    raise ValueError("the lab notebook has no code cell")


def _patch_notebook_execution() -> None:
    """Stamp notebooks before nbconvert executes them and keep the executed copy (mkdocs-jupyter drops it).

    Under ``make serve`` (:mod:`dev_cache`) the run of the same notebook on the same inputs is reused."""
    from nbconvert.preprocessors import ExecutePreprocessor

    if getattr(ExecutePreprocessor, "_keeps_executed", False):
        return
    original = ExecutePreprocessor.preprocess

    def preprocess(self: Any, nb: Any, resources: Any = None, km: Any = None) -> Any:
        meta = (resources or {}).get("metadata", {})
        path = Path(meta.get("path", ""), meta.get("name", "") + ".ipynb")
        if path.resolve() == (ROOT / "docs" / LAB).resolve():
            stamp(nb)

        def execute() -> Any:
            return original(self, nb, resources, km)

        nb, resources = dev_cache.executed_notebook(nb, resources, execute) if dev_cache.cache_dir() else execute()
        _state["executed"][str(path.resolve())] = copy.deepcopy(nb)
        return nb, resources

    ExecutePreprocessor.preprocess = preprocess  # type: ignore[method-assign]
    ExecutePreprocessor._keeps_executed = True  # type: ignore[attr-defined]


def executed_copy(nb: Any) -> str:
    """The executed notebook as published: outputs kept, run timings (which differ per run) dropped."""
    import nbformat

    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
    return str(nbformat.writes(nb)) + "\n"


def lab_links(page_dir_name: str) -> str:
    links = site_links.current()
    items = [f'<a href="{html.escape(page_dir_name)}" download>download this notebook</a> (this build\'s run, '
             "with its outputs)"]
    if colab := links.colab_url(f"docs/{LAB}"):
        items.append(f'<a href="{html.escape(colab)}">open it in Colab</a> (the repository\'s copy, without outputs)')
    return '<p class="lab-links"><strong>Run it yourself</strong>: ' + "; or ".join(items) + ".</p>\n"


def on_post_page(output: str, page: Any, config: Any, **kwargs: Any) -> str:
    if page.file.src_uri == LAB:
        executed = _state["executed"].get(str((ROOT / "docs" / LAB).resolve()))
        if executed is None:
            raise RuntimeError(f"{LAB} was not executed: mkdocs-jupyter must run it (execute: true)")
        dest = Path(page.file.abs_dest_path).parent / Path(LAB).name
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(executed_copy(executed), encoding="utf-8")
    return output


def on_post_build(config: Any, **kwargs: Any) -> None:
    if _state["tmp"] is not None:
        _state["tmp"].cleanup()
        _state["tmp"] = None


# ---- the repository's copy of the lab (the one Colab opens) ------------------------------------------------


def repository_wheel_target(links: site_links.Links, version: str) -> str:
    """What the repository's copy of the lab names: the wheel's full address on the site when the site's address
    is known (derived as the site's own links are: ``SITE_URL``, else the GitHub remote's Pages address), else the
    wheel's file name (the notebook's first cell then says how to go on)."""
    name = f"{site_links.distribution_name().replace('-', '_')}-{version}-py3-none-any.whl"
    return f"{links.site_url}{site_links.DOWNLOADS}/{name}" if links.site_url else name


def write_lab_address(path: Path = ROOT / "docs" / LAB) -> str:
    """Write :func:`repository_wheel_target` into the lab notebook's ``WHEEL = "..."`` line; returns it."""
    sys.path.insert(0, str(ROOT))
    import lessons_src

    target = repository_wheel_target(site_links.resolve(os.environ, site_links.git_remote(ROOT)),
                                     lessons_src.__version__)
    text = path.read_text(encoding="utf-8")
    line = re.compile(r'"WHEEL = \\"[^"\\]*\\"\\n"')
    if len(line.findall(text)) != 1:
        raise ValueError(f"{path} needs exactly one line WHEEL = \"...\" in its first code cell")
    path.write_text(line.sub(lambda _: f'"WHEEL = \\"{target}\\"\\n"', text), encoding="utf-8")
    return target


if __name__ == "__main__":  # `make lab-address`
    print(f"docs/{LAB}: WHEEL = {write_lab_address()!r}")
