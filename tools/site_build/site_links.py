"""Where the code lives: the repository and the site's addresses, resolved once per build, never typed in.

The addresses come, in this order, from

1. the environment the workflow sets: ``SITE_REPO`` (``owner/name``, from ``github.repository``) and
   ``SITE_URL`` (the Pages base URL, from ``actions/configure-pages``);
2. the checkout's ``origin`` remote, when it is on GitHub: the repository, and its Pages address
   (``https://owner.github.io/name/``);
3. nothing: a build that knows no repository shows no repository link (never a placeholder), and one that
   knows no site address links its own files relatively.

``mkdocs_code_hooks.py`` resolves them when the site's configuration is loaded and keeps the result in
:data:`CURRENT`; the "Get the code" page and the home page read it from their hidden blocks (this module is
imported once, so they see the hook's value).
"""

from __future__ import annotations

import ast
import posixpath
import re
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from collections.abc import Mapping

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "lessons_src"
DOWNLOADS = "downloads"  # the folder of the site that holds the wheel
BRANCH = "main"  # the branch the workflow deploys from; source links point at it

_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})"  # a GitHub user or organisation
_REPO = r"[A-Za-z0-9._-]{1,100}"
_SLUG = re.compile(rf"^({_NAME})/({_REPO})$")
_REMOTE = re.compile(
    rf"^(?:https?://(?:[^@/]+@)?github\.com/|ssh://git@github\.com/|git@github\.com:)({_NAME})/({_REPO}?)(?:\.git)?/?$"
)


@dataclass(frozen=True)
class Links:
    """The resolved addresses. ``repo_url`` is ``None`` when no repository is known, ``site_url`` when no
    site address is (the site then links its own files relatively)."""

    repo_url: str | None
    site_url: str | None
    repo_from: str  # where repo_url came from: "SITE_REPO", "git remote" or "none"
    site_from: str  # where site_url came from: "SITE_URL", "SITE_REPO", "git remote", "mkdocs serve" or "none"

    @property
    def repo_slug(self) -> str | None:
        return urlsplit(self.repo_url).path.strip("/") if self.repo_url else None

    def blob_url(self, path: str) -> str | None:
        """The page on GitHub that shows ``path`` (relative to the repository root), or None."""
        return f"{self.repo_url}/blob/{BRANCH}/{path}" if self.repo_url else None

    def colab_url(self, path: str) -> str | None:
        """Google Colab's address that opens the notebook ``path`` of the repository, or None."""
        if not self.repo_url:
            return None
        return f"https://colab.research.google.com/github/{self.repo_slug}/blob/{BRANCH}/{path}"


def github_repo(remote: str) -> tuple[str, str] | None:
    """``(owner, name)`` of a GitHub remote URL (https, ssh or scp-like), or None for any other host.

    >>> github_repo("git@github.com:octo-org/multi-head-attention.git")
    ('octo-org', 'multi-head-attention')
    >>> github_repo("https://gitlab.com/octo-org/x.git") is None
    True
    """
    match = _REMOTE.match(remote.strip())
    return (match.group(1), match.group(2)) if match and match.group(2) else None


def pages_url(owner: str, name: str) -> str:
    """GitHub Pages' default address for a repository: the user site for ``owner.github.io``, else a sub-path."""
    host = f"{owner.lower()}.github.io"
    return f"https://{host}/" if name.lower() == host else f"https://{host}/{name}/"


def git_remote(root: Path = ROOT) -> str | None:
    """The ``origin`` remote's URL, or None (no git, no repository, no remote)."""
    try:
        proc = subprocess.run(
            ["git", "remote", "get-url", "origin"], cwd=root, capture_output=True, text=True, check=False
        )
    except OSError:
        return None
    return proc.stdout.strip() or None if proc.returncode == 0 else None


def _site_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in {"http", "https"} or not parts.netloc or parts.query or parts.fragment:
        raise ValueError(
            f"SITE_URL={value!r} is not a site's base address; expected http(s)://host/path/, "
            "e.g. https://octo-org.github.io/multi-head-attention/"
        )
    return value.rstrip("/") + "/"


def resolve(env: Mapping[str, str], remote: str | None) -> Links:
    """The repository and site addresses from the environment, else the GitHub remote, else none.

    ``env`` is the process environment (``SITE_REPO``, ``SITE_URL``; empty values count as unset, as a
    workflow expression that evaluates to nothing gives); ``remote`` is the ``origin`` remote's URL or None.

    Raises:
        ValueError: ``SITE_REPO`` is not ``owner/name`` or ``SITE_URL`` is not an http(s) base address.
    """
    repo: tuple[str, str] | None = None
    repo_from = "none"
    if slug := env.get("SITE_REPO", "").strip():
        match = _SLUG.match(slug)
        if not match:
            raise ValueError(f"SITE_REPO={slug!r} is not a GitHub repository; expected owner/name, e.g. octo-org/mha")
        repo, repo_from = (match.group(1), match.group(2)), "SITE_REPO"
    elif remote and (found := github_repo(remote)):
        repo, repo_from = found, "git remote"
    if url := env.get("SITE_URL", "").strip():
        site_url: str | None = _site_url(url)
        site_from = "SITE_URL"
    elif repo:
        site_url, site_from = pages_url(*repo), repo_from
    else:
        site_url, site_from = None, "none"
    repo_url = f"https://github.com/{repo[0]}/{repo[1]}" if repo else None
    return Links(repo_url=repo_url, site_url=site_url, repo_from=repo_from, site_from=site_from)


def local_url(makefile: Path = ROOT / "Makefile") -> str:
    """The address ``make serve`` serves at, read from the Makefile's ``mkdocs serve --dev-addr``."""
    match = re.search(r"mkdocs serve --dev-addr (\S+)", makefile.read_text(encoding="utf-8"))
    if not match:
        raise ValueError(f"{makefile} has no `mkdocs serve --dev-addr HOST:PORT` in its serve target")
    return f"http://{match.group(1)}/"


def page_url(src: str) -> str:
    """The directory URL of a page, relative to the site's root: ``lessons/pitfalls.md`` -> ``lessons/pitfalls/``."""
    return "" if src == "index.md" else src.removesuffix("index.md").removesuffix(".md").rstrip("/") + "/"


def relative_link(target: str, page: str, anchor: str = "") -> str:
    """A link from ``page`` to ``target`` (both Markdown sources under docs/), as the built site's relative URL.

    MkDocs does not rewrite the links in a block's output, so they are written as the built pages' URLs.
    """
    here = page_url(page) or "."
    rel = posixpath.relpath(page_url(target) or ".", here)
    return (rel.rstrip("/") + "/" if rel != "." else "./") + (f"#{anchor}" if anchor else "")


CURRENT: Links | None = None  # set by mkdocs_code_hooks.on_config for the build in progress
WHEEL_PATH: Path | None = None  # the wheel this build publishes, set by mkdocs_code_hooks.on_files


def current() -> Links:
    if CURRENT is None:
        raise RuntimeError("addresses unresolved: build the page with tools/site_build/mkdocs_code_hooks.py")
    return CURRENT


def wheel_name() -> str:
    if WHEEL_PATH is None:
        raise RuntimeError("the wheel is not built: the page must be built with tools/site_build/mkdocs_code_hooks.py")
    return WHEEL_PATH.name


def wheel_url() -> str | None:
    """The wheel's absolute address on the site, or None when the site's address is unknown."""
    site = current().site_url
    return f"{site}{DOWNLOADS}/{wheel_name()}" if site else None


# ---- what the package holds and needs, read from the package and pyproject.toml -------------------------


def module_summaries(package: Path = PACKAGE) -> dict[str, list[tuple[str, str]]]:
    """``{"core": [(path, first docstring line), ...], "lab": [...]}`` for every module of the package."""
    parts: dict[str, list[tuple[str, str]]] = {"core": [], "lab": []}
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package.parent).as_posix()
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        first = doc.strip().splitlines()[0] if doc.strip() else ""
        parts["lab" if "/lab/" in rel else "core"].append((rel, first))
    return parts


def extras(pyproject: Path = ROOT / "pyproject.toml") -> list[tuple[str, list[str], str]]:
    """``[(extra, requirements, the comment above it in pyproject.toml), ...]`` for every optional extra."""
    text = pyproject.read_text(encoding="utf-8")
    table = tomllib.loads(text)["project"]["optional-dependencies"]
    comments: dict[str, str] = {}
    pending: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            pending.append(stripped.lstrip("# "))
            continue
        key = re.match(r"^([A-Za-z0-9_-]+)\s*=", stripped)
        if key and key.group(1) in table:
            comments[key.group(1)] = " ".join(pending)
        pending = []
    return [(name, list(reqs), comments.get(name, "")) for name, reqs in table.items()]


def dependencies(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    return list(tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["dependencies"])


def distribution_name(pyproject: Path = ROOT / "pyproject.toml") -> str:
    return str(tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["name"])
