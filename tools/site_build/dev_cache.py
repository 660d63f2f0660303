"""The writer's loop: what ``make serve`` reuses between builds, and the keys that keep it from going stale.

Only when ``$SITE_DEV_CACHE`` names a folder (``make serve`` sets ``.cache/dev``); every other build (``make
build``, ``make test``, CI, the Pages deploy) runs every block and the notebook, as before. With it:

* **Blocks** (markdown-exec's ``python`` runner, wrapped): a block's printed output is stored under
  :func:`block_key`: the inputs' fingerprint, the page, every earlier block of the page (source and options,
  whether or not it shares the session: a block may lean on the random state an earlier one left) and this
  block's source and options. A hit runs nothing. The first miss on a page first replays, silently and in
  order, the earlier blocks that were hits, so its session's globals (and the process's random state) are
  what a full run of the page would leave. A block that fails is never stored.
* **The lab notebook**: the executed copy is stored under the fingerprint and the notebook as it goes to the
  kernel (its ``WHEEL`` line already stamped).
* **Pages**: when the fingerprint of what pages are made from changes between two builds of one ``mkdocs
  serve``, every page's HTML is deleted before MkDocs looks, so ``--dirty`` rebuilds them all; the package's
  modules (and this folder's) are dropped from ``sys.modules`` so the blocks import the edited code.

:func:`inputs_fingerprint` hashes everything a block's output could depend on besides its page: every file of
the package and its data (``lessons_src/``), the build's data (``docs/_data/``), ``tools/`` (hidden blocks
import ``tools/site_build``; one reads ``tools/bench``), the files the wheel ships, ``Makefile`` (the local
address), the pinned dependencies (``requirements.txt``, ``package-lock.json``) and the Python that runs,
the environment variables that change output (``SITE_URL``, ``SITE_REPO``, ``SOURCE_DATE_EPOCH``,
``PYTHONHASHSEED``) and the git remote :mod:`site_links` derives addresses from. :func:`pages_fingerprint`
adds what shapes every page but no block: ``mkdocs.yml`` and ``docs/assets/`` (CSS the post-build step
inlines). tests/site/test_dev_cache.py builds a tiny project twice and checks that a package edit reaches
the page, that a prose edit runs no block, and that a key of the block's source alone fails both.

The outputs are stored under ``$SITE_DEV_CACHE/<fingerprint>/``, each written whole (renamed into place); when
a serve starts or the inputs change, the folders of all but the four fingerprints used last are deleted.
What no key can see: state one page's blocks leave for another's (a block must set its own seed, as
CONTRIBUTING.md asks), and the hooks' own code (MkDocs loads the hooks once per ``mkdocs serve``: restart it).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

ROOT = Path(__file__).resolve().parents[2]
ENV = "SITE_DEV_CACHE"
KEY_VERSION = "1"  # bump when what a stored entry holds changes
CODE_FOLDERS = ("lessons_src", "docs/_data", "tools")
CODE_FILES = ("pyproject.toml", "README.md", "LICENSE", "Makefile", "requirements.txt", "package-lock.json")
PAGE_INPUTS = ("mkdocs.yml", "docs/assets")
ENV_INPUTS = ("SITE_URL", "SITE_REPO", "SOURCE_DATE_EPOCH", "PYTHONHASHSEED")
MORE_INPUTS = "SITE_DEV_INPUTS"  # more files or folders blocks read, os.pathsep-separated (the tests' own package)
SHARED = {"dev_cache", "site_links"}  # modules that hold this build's state for the hooks and the blocks alike
_SKIPPED_PARTS = {"__pycache__", ".mypy_cache", ".ruff_cache"}

# Kept for the life of the process (hook modules are loaded afresh for each build of `mkdocs serve`; this
# module, imported by name, is not): the fingerprints of the last build, and the current page's blocks.
STATE: dict[str, Any] = {"code": None, "pages": None, "page": None, "blocks": [], "runs": 0, "hits": 0}


def cache_dir(environ: Mapping[str, str] = os.environ) -> Path | None:
    """The cache folder, or None: no reuse at all."""
    value = environ.get(ENV, "").strip()
    return (ROOT / value).resolve() if value else None


def _files(root: Path, names: Iterable[str]) -> list[Path]:
    found = []
    for name in names:
        path = root / name
        if path.is_file():
            found.append(path)
        elif path.is_dir():
            found += [p for p in path.rglob("*") if p.is_file() and not _SKIPPED_PARTS & set(p.parts)]
    return sorted(found)


def _hash_files(digest: Any, root: Path, names: Iterable[str]) -> None:
    for path in _files(root, names):
        digest.update(f"\0{path.relative_to(root).as_posix() if path.is_relative_to(root) else path}\0".encode())
        digest.update(path.read_bytes())


def more_inputs(environ: Mapping[str, str] = os.environ) -> list[str]:
    return [p for p in environ.get(MORE_INPUTS, "").split(os.pathsep) if p]


def inputs_fingerprint(root: Path = ROOT, environ: Mapping[str, str] = os.environ,
                       remote: str | None = None) -> str:
    """What every block's output may depend on, besides its page (see the module's docstring)."""
    digest = hashlib.sha256(f"{KEY_VERSION}\0{sys.version}\0{sys.executable}\0{remote}".encode())
    for name in ENV_INPUTS:
        digest.update(f"\0{name}={environ.get(name)}".encode())
    _hash_files(digest, root, [*CODE_FOLDERS, *CODE_FILES, *more_inputs(environ)])
    return digest.hexdigest()


def pages_fingerprint(code: str, root: Path = ROOT) -> str:
    """What every page depends on: the blocks' inputs, the configuration and the assets pages inline."""
    digest = hashlib.sha256(code.encode())
    _hash_files(digest, root, PAGE_INPUTS)
    return digest.hexdigest()


def block_key(fingerprint: str, page: str, earlier: list[str], block: str) -> str:
    """The key of a block's output: the inputs, the page, the page's earlier blocks and the block itself.

    ``earlier`` and ``block`` are :func:`describe`'s strings (source and options)."""
    digest = hashlib.sha256(f"{KEY_VERSION}\0{fingerprint}\0{page}".encode())
    for text in [*earlier, block]:
        digest.update(b"\0block\0" + text.encode())
    return digest.hexdigest()


def generation() -> str:
    """The folder of the current fingerprint's outputs (in effect a part of every key, as the fingerprint is)."""
    return str(STATE["code"])[:16]


KEY: dict[str, Callable[..., str]] = {"of": block_key, "folder": generation}


def describe(code: str, session: str | None, block_id: str | None, extra: Mapping[str, Any]) -> str:
    """A block as the key sees it: its source, session, id and options, and what the runner reads around it."""
    return json.dumps([code, session, block_id, dict(extra), os.getcwd(), os.environ.get("COLUMNS")],
                      sort_keys=True, default=str)


# ---- the store -------------------------------------------------------------------------------------------


KEEP = 4  # fingerprints whose outputs are kept (the others are deleted when `make serve` starts)


def _slot(kind: str, key: str) -> Path:
    """Where an output is stored: a folder per fingerprint of the inputs, so the outdated ones can go whole."""
    folder = cache_dir()
    assert folder is not None
    return folder / KEY["folder"]() / kind / key[:2] / key


def prune(keep: int = KEEP) -> None:
    """Keep the outputs of the ``keep`` fingerprints used last (the current one is marked used)."""
    folder = cache_dir()
    assert folder is not None
    current = folder / KEY["folder"]()
    current.mkdir(parents=True, exist_ok=True)
    os.utime(current)
    for old in sorted((d for d in folder.iterdir() if d.is_dir()), key=lambda d: d.stat().st_mtime)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def load(kind: str, key: str) -> str | None:
    try:
        return _slot(kind, key).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None


def store(kind: str, key: str, value: str) -> None:
    """Write whole or not at all (a file renamed into place), so a killed build leaves no half entry."""
    slot = _slot(kind, key)
    slot.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=slot.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(value)
    os.replace(tmp, slot)


# ---- blocks ----------------------------------------------------------------------------------------------


def start_page(src_uri: str) -> None:
    STATE["page"], STATE["blocks"] = src_uri, []


def cached_run(run: Callable[..., str], sessions: dict[str, dict[str, Any]]) -> Callable[..., str]:
    """markdown-exec's ``run`` wrapped: outputs reused under :func:`block_key` (see the module's docstring;
    looked up at each call, so the tests can put a naive key in its place and see their checks fail).

    ``sessions``: markdown-exec's globals per session, emptied when a page's first block of a session runs,
    so a rebuilt page starts from nothing, as in a full build."""

    def wrapped(code: str, returncode: int | None = None, session: str | None = None, id: str | None = None,
                **extra: Any) -> str:
        blocks: list[dict[str, Any]] = STATE["blocks"]
        text = describe(code, session, id, extra)
        key = KEY["of"](STATE["code"], str(STATE["page"]), [b["text"] for b in blocks], text)
        call = {"text": text, "code": code, "returncode": returncode, "session": session, "id": id, "extra": extra,
                "pending": False}
        if (output := load("blocks", key)) is not None:
            STATE["hits"] += 1
            blocks.append({**call, "pending": True})
            return output
        for earlier in blocks:  # replay what the hits skipped, output dropped, so the globals are right
            if earlier["pending"]:
                _run(run, sessions, blocks, earlier)
                earlier["pending"] = False
        output = _run(run, sessions, blocks, call)
        blocks.append(call)
        store("blocks", key, output)
        return output

    return wrapped


def _run(run: Callable[..., str], sessions: dict[str, dict[str, Any]], blocks: list[dict[str, Any]],
         call: dict[str, Any]) -> str:
    session = call["session"]
    if session and not any(b["session"] == session and not b["pending"] for b in blocks if b is not call):
        sessions.pop(session, None)  # this page's first run of the session: no globals from an earlier build
    STATE["runs"] += 1
    return str(run(call["code"], returncode=call["returncode"], session=session, id=call["id"], **call["extra"]))


def install() -> None:
    """Wrap markdown-exec's python runner (once per process), for ``python`` and ``pycon`` blocks alike (they
    share sessions, so both must join a page's chain of blocks)."""
    from markdown_exec._internal.formatters import pycon, python

    if not getattr(python._run_python, "_dev_cached", False):
        wrapped = cached_run(python._run_python, python._sessions_globals)
        wrapped._dev_cached = True  # type: ignore[attr-defined]
        python._run_python = pycon._run_python = wrapped


# ---- the notebook ----------------------------------------------------------------------------------------


def executed_notebook(nb: Any, resources: Any, execute: Callable[[], tuple[Any, Any]]) -> tuple[Any, Any]:
    """``execute()``'s result, or the stored copy of this notebook's run under the same inputs."""
    import nbformat

    source = nbformat.writes(nb)
    key = hashlib.sha256(f"{KEY_VERSION}\0{STATE['code']}\0{source}".encode()).hexdigest()
    if (stored := load("notebooks", key)) is not None:
        return nbformat.reads(stored, as_version=4), resources
    nb, resources = execute()
    store("notebooks", key, nbformat.writes(nb))
    return nb, resources


# ---- before each build -----------------------------------------------------------------------------------


def before_build(remote: str | None, hooks: Iterable[Any] = ()) -> bool:
    """Fingerprint the inputs; when the package's inputs changed since this process's last build, drop the
    modules blocks import from them and empty the ``functools`` caches of the ``hooks`` (modules). Returns
    whether the pages' inputs changed (every page must be rebuilt)."""
    code = inputs_fingerprint(ROOT, os.environ, remote)
    pages = pages_fingerprint(code)
    if STATE["code"] not in (None, code):
        inputs = [ROOT / "lessons_src", ROOT / "tools", *(Path(p).resolve() for p in more_inputs())]
        for name, module in list(sys.modules.items()):
            file = getattr(module, "__file__", None)
            if name not in SHARED and file and any(Path(file).resolve().is_relative_to(d) for d in inputs):
                del sys.modules[name]
        for hook in hooks:
            for value in list(vars(hook).values()):
                if callable(getattr(value, "cache_clear", None)):
                    value.cache_clear()
    changed = STATE["pages"] not in (None, pages)
    if STATE["code"] != code:
        STATE["code"] = code
        prune()
    STATE["pages"] = pages
    return changed


def forget_pages(files: Any) -> int:
    """Delete every documentation page's built HTML, so a dirty build rebuilds it; returns how many."""
    n = 0
    for file in files.documentation_pages():
        dest = Path(file.abs_dest_path)
        if dest.is_file():
            dest.unlink()
            n += 1
    return n
