"""Markdown for the "Get the code" page and the home page's links, computed at build time.

Called from the pages' hidden blocks. Everything printed is read from the package, ``pyproject.toml``,
the wheel this build published, the Makefile and the addresses :mod:`site_links` resolved; nothing is typed
in, and a link to the repository appears only when the build knows the repository.
"""

from __future__ import annotations

import functools
import hashlib
import tomllib
import zipfile
from typing import TYPE_CHECKING

import site_links

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

ROOT = site_links.ROOT


def _wheel_file() -> Path:
    """The wheel this build publishes (set by the hook)."""
    site_links.wheel_name()  # raises when the hook did not build it
    assert site_links.WHEEL_PATH is not None
    return site_links.WHEEL_PATH


TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"  # PyTorch's own index of CPU-only wheels


def torch_cpu() -> str:
    """The line that installs PyTorch's CPU-only build (pip's default torch on Linux is the CUDA build)."""
    return (
        "First PyTorch, in its CPU-only build, which runs every block of this site. On Linux a plain "
        "`pip install torch` fetches the CUDA build, several gigabytes; skip this line if you already have "
        "PyTorch or want the GPU build (the macOS and Windows wheels on PyPI have no CUDA; "
        "[PyTorch's install page](https://pytorch.org/get-started/locally/) gives the line for each platform):\n\n"
        "```bash\n"
        f"pip install torch --index-url {TORCH_CPU_INDEX}\n"
        "```\n\n"
        "Then the package:\n\n"
    )


def install(page_depth: int = 0) -> str:
    """How to install the wheel: from the site's address when known, else from a downloaded copy."""
    return torch_cpu() + _install_wheel(page_depth)


def _install_wheel(page_depth: int) -> str:
    dist = site_links.distribution_name()
    name = site_links.wheel_name()
    wheel = _wheel_file()
    data = wheel.read_bytes()
    facts = (f"The wheel, `{name}`, is {len(data) / 1024:.0f} KiB; its SHA-256 is "
             f"`{hashlib.sha256(data).hexdigest()}`.")
    if url := site_links.wheel_url():
        return (
            "```bash\n"
            f'pip install "{dist}[lab] @ {url}"  # the package and everything the lessons use\n'
            f"pip install {url}  # the core only: needs just torch\n"
            "```\n\n" + facts + "\n"
        )
    rel = "../" * page_depth + f"{site_links.DOWNLOADS}/{name}"
    return (
        f"Download [the wheel]({rel}), then, in the folder you saved it in:\n\n"
        "```bash\n"
        f'pip install "./{name}[lab]"  # the package and everything the lessons use\n'
        f"pip install ./{name}  # the core only: needs just torch\n"
        "```\n\n" + facts + "\n"
    )


def contents() -> str:
    """A table of the package's modules, core then lab, with each one's first docstring line."""
    names = set(zipfile.ZipFile(_wheel_file()).namelist())
    rows = ["| part | module | what it is |", "| --- | --- | --- |"]
    for part, modules in site_links.module_summaries().items():
        for path, summary in modules:
            if path not in names:
                raise ValueError(f"{path} is in the package but not in the wheel {site_links.wheel_name()}")
            rows.append(f"| {part} | `{path}` | {summary.replace('|', '/')} |")
    shipped = sorted(n for n in names if n.startswith("lessons_src/") and not n.endswith(".py"))
    files = ", ".join(f"`{n.removeprefix('lessons_src/')}`" for n in shipped)
    return "\n".join(rows) + f"\n\nBesides the code, the wheel holds the files the lab loads: {files}.\n"


def needs() -> str:
    """The run-time requirements: the core's dependencies, then each extra with what it is for."""
    dist = site_links.distribution_name()
    rows = ["| install | adds | for |", "| --- | --- | --- |"]
    core = ", ".join(f"`{d}`" for d in site_links.dependencies())
    rows.append(f"| `{dist}` | {core} | the core (`lessons_src`) |")
    for extra, reqs, why in site_links.extras():
        rows.append(f"| `{dist}[{extra}]` | {', '.join(f'`{r}`' for r in reqs)} | {why} |")
    return "\n".join(rows) + "\n"


def _direct_requirements(name: str) -> list[str]:
    """The installed distribution ``name``'s own requirements (no extras), canonical names."""
    from importlib.metadata import requires

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    found = []
    for line in requires(name) or []:
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            found.append(str(canonicalize_name(req.name)))
    return found


def _closure(names: list[str], direct: Callable[[str], list[str]] = _direct_requirements) -> set[str]:
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += direct(name)
    return seen


def lab_extra() -> str:
    """What ``[lab]`` pulls in, read from this build's installed distributions' metadata."""
    dist = site_links.distribution_name()
    # each distribution's metadata read once in this call (it was read 211 times: 2 CPU-s of a build, cProfile)
    direct = functools.cache(_direct_requirements)
    extras = {name: reqs for name, reqs, _ in site_links.extras()}
    core = [r.split(">")[0].split("=")[0].strip() for r in site_links.dependencies()]
    lab = sorted({r for name in ("plot", "toy", "minilm") for r in extras[name]})
    added = _closure(lab, direct) - _closure(core, direct)
    small = _closure(sorted({r for name in ("plot", "toy") for r in extras[name]}), direct) - _closure(core, direct)
    base = _closure(core, direct)
    heaviest = max(extras["minilm"], key=lambda r: len(_closure([r], direct) - base))  # the one that pulls in most
    chain = []
    for middle in direct(heaviest):
        brings = [r for r in direct(middle) if r not in base and r not in lab]
        named = [f"`{b}`" for b in brings]
        chain.append(f"`{middle}`, which brings " + (", ".join(named[:-1]) + " and " + named[-1] if len(named) > 1
                                                      else "".join(named)))
    return (
        f"`{dist}[lab]` adds {len(added)} distributions to the core's (counted in this build's environment), "
        f"{len(_closure([heaviest], direct) - base)} of them with `{heaviest}`, the packaged weights of "
        f"all-MiniLM-L6-v2 that the lessons on trained heads load: it brings " + "; ".join(chain) + ". "
        f"For the figures and the models trained here alone, `{dist}[plot,toy]` adds {len(small)}.\n"
    )


def licence() -> str:
    """The code's licence, from pyproject.toml and the LICENSE file (linked on GitHub when known)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    first = (ROOT / "LICENSE").read_text(encoding="utf-8").splitlines()[0].strip()
    blob = site_links.current().blob_url("LICENSE")
    where = f"[`LICENSE`]({blob})" if blob else "`LICENSE`"
    return (f"The code is under the {project['license']} licence (the {first} text is in {where}, and in the "
            "wheel).\n")


def clone() -> str:
    """How to clone the repository and run the site, only when the repository is known."""
    links = site_links.current()
    if not links.repo_url:
        return ""
    name = links.repo_url.rsplit("/", 1)[1]
    return (
        "## Clone the repository\n\n"
        f"The source of the package, the lessons and this site is at [{links.repo_slug}]({links.repo_url}). "
        "With Python 3.11, Node.js and npm:\n\n"
        "```bash\n"
        f"git clone {links.repo_url}.git && cd {name}\n"
        f"make serve  # the site with live reload at {site_links.local_url()}\n"
        "make test   # lint, unit tests, strict site build, site and browser checks\n"
        "```\n\n"
        "The first `make` creates `.venv/` and `node_modules/` and installs the pinned dependencies.\n"
    )


def home(get_the_code: str = "get-the-code/") -> str:
    """The home page's way to the code: the "Get the code" page (its URL from the home page: MkDocs does not
    rewrite links in a block's output), and the repository when known."""
    links = site_links.current()
    text = (f"[**Get the code**]({get_the_code}): install the package the lessons run from this site's wheel, "
            "with one `pip install`, and see what it holds and needs.")
    if not links.repo_url:
        return text + "\n"
    name = links.repo_url.rsplit("/", 1)[1]
    return (
        text + f" The source of everything here is in the repository [{links.repo_slug}]({links.repo_url}):\n\n"
        "```bash\n"
        f"git clone {links.repo_url}.git && cd {name}\n"
        f"make serve   # first run creates .venv and installs everything; then {site_links.local_url()}\n"
        "make test    # unit tests, strict site build, checks on the built site\n"
        "```\n"
    )
