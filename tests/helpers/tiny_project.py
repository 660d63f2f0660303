"""A tiny MkDocs project with the site's own configuration, built in a temporary folder.

Its mkdocs.yml INHERITs the site's (theme, hooks, markdown-exec, mkdocs-jupyter, extensions, strictness); only the
pages are its own. Used by the site checks that build one: tests/site/test_build_fails_loudly.py (a failing
block fails the build), test_generators.py (the same project under ProperDocs), test_dev_cache.py (the writer's
loop) and test_get_the_code.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml
from warm_python import WarmPython

ROOT = Path(__file__).resolve().parents[2]


class _TolerantLoader(yaml.SafeLoader):
    """Reads mkdocs.yml's plain values; tags MkDocs resolves itself (!ENV, !!python/name:...) become None."""


_TolerantLoader.add_multi_constructor("", lambda loader, suffix, node: None)


def build(
    tmp_path: Path, pages: dict[str, str], generator: str = "mkdocs", env_extra: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Build `pages` (name -> text) with the site's mkdocs.yml; return the finished `mkdocs build` process.

    ``generator``: the module that builds it (``mkdocs``, or ``properdocs``: tests/site/test_generators.py);
    ``env_extra``: variables added to the build's environment.
    """
    write_project(tmp_path, pages)
    return run_python(["-m", generator, "build", "--strict", "-f", str(tmp_path / "mkdocs.yml")], cwd=tmp_path,
                      env=build_env(env_extra), timeout=300, warm=generator == "mkdocs")


# The third-party imports of a tiny build (python -X importtime on one), paid once per test process: none reads
# the project (tests/helpers/warm_python.py).
_WARM = WarmPython(("jupytext", "markdown", "mkdocs.commands.build", "mkdocs.config", "mkdocs_jupyter.plugin",
                    "nbconvert", "pygments.lexers", "pymdownx.util", "torch"), env=lambda: build_env())


def run_python(
    args: list[str], *, cwd: Path, env: dict[str, str], timeout: float, warm: bool = True
) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` (``-m mkdocs build ...``, a script) in ``cwd`` with the environment ``env``, captured.

    With ``warm``, in a child forked from warm_python.py (third-party imports paid once per test process, not
    per build) when ``env`` starts a Python as that parent's does (the same ``PYTHON*`` variables);
    otherwise, or when ``warm`` is false (a module that must not find MkDocs already imported, like ProperDocs),
    in a new interpreter.
    """
    if warm:
        return _WARM.run(args, cwd=cwd, env=env, timeout=timeout)
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def build_env(env_extra: dict[str, str] | None = None) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "NO_MKDOCS_2_WARNING": "1", "MPLBACKEND": "Agg", **(env_extra or {})}


def write_project(tmp_path: Path, pages: dict[str, str]) -> Path:
    """Write a tiny project of `pages` (name -> text) into `tmp_path`; returns its mkdocs.yml.

    The tiny project's mkdocs.yml INHERITs the site's, so it has the same theme, plugins, extensions and
    strictness; only the pages (docs_dir, nav), the output folder and the hooks' paths are its own.
    """
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs" / "assets", docs / "assets")
    for name, text in pages.items():
        (docs / name).write_text(text, encoding="utf-8")
    hooks = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=_TolerantLoader).get("hooks", [])
    config = {
        "INHERIT": str(ROOT / "mkdocs.yml"),
        "docs_dir": str(docs),
        "site_dir": str(tmp_path / "site"),
        "nav": [{name.split(".")[0]: name} for name in pages],
        "hooks": [str(ROOT / hook) for hook in hooks],
    }
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
    return tmp_path / "mkdocs.yml"
