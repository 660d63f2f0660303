"""The post-build step: everything that only rewrites the built HTML, in one pass over ``site/``.

It needs no generator: it reads the built site's files and rewrites them in place, so it runs the same after
``mkdocs build``, ``mkdocs serve``'s rebuilds, ``properdocs build`` or any generator that writes the same HTML.
MkDocs calls it last, from this module's ``on_post_build`` hook (mkdocs.yml); by hand:

    python tools/site_build/postbuild.py site/          # or: make postbuild

In order, on every HTML file of the site:

1. :mod:`readable`: printed results marked, wide tables made phone cards (before math is rendered in them);
2. :mod:`math_render`: every formula typeset with KaTeX (one ``node`` run for the whole site; a formula KaTeX
   rejects stops the step with an error naming the page), scripts from other hosts removed;
3. :mod:`page_fixes`: accessibility and loading fixes, KaTeX's and the widgets' CSS inlined where used;
4. :mod:`figures`: each figure's SVGs moved to content-hashed files behind a ``<picture>``;
5. :mod:`copy_chains`: the copy button of a block that continues the one above copies the whole chain;

then KaTeX's fonts copied and unused assets removed. A page the step already rewrote is left as it is.

Under ``make serve`` (``$SITE_DEV_CACHE`` set, :mod:`dev_cache`), the hook rewrites only the HTML files MkDocs
wrote in this build (``--dirty`` rebuilds write only the edited pages) and the 404 page; which of
markdown-exec's assets are used is still read from every page, so the unused ones are the same.

``SITE_POSTBUILD=skip`` in the environment makes the hook do nothing (the test that proves the step alone gives
the same site builds that way, then runs the step by hand).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling modules, when run as a script or -m

import copy_chains
import dev_cache
import figures
import math_render
import page_fixes
import readable

SKIP_ENV = "SITE_POSTBUILD"


def _page_url(rel: Path) -> str:
    """The page's URL from the site's root ("" for index.html, "a/b/" for a/b/index.html, "a.html" for a.html)."""
    return "" if rel.as_posix() == "index.html" else (
        rel.parent.as_posix() + "/" if rel.name == "index.html" else rel.as_posix())


def run(site_dir: Path, only: set[str] | None = None) -> int:
    """Rewrite the built site in ``site_dir`` in place; returns the number of HTML files rewritten.

    ``only``: the HTML files (paths from ``site_dir``) to rewrite, the others being rewritten already; None:
    every one."""
    site_dir = Path(site_dir)
    if not (site_dir / "index.html").is_file():
        raise FileNotFoundError(f"{site_dir} holds no built site (no index.html): build it first")
    files = sorted(site_dir.rglob("*.html"))
    names = [f.relative_to(site_dir).as_posix() for f in files]
    original = {name: f.read_bytes().decode("utf-8") for name, f in zip(names, files, strict=True)}  # newlines kept
    if only is not None:
        names = [name for name in names if name in only]
        files = [site_dir / name for name in names]
    pages = {name: readable.mark(original[name]) for name in names}
    pages = math_render.render_pages(pages)
    used = page_fixes.uses({**original, **pages}.values())  # the pages left as they are count too
    changed = 0
    for name, f in zip(names, files, strict=True):
        rel = Path(name)
        template = rel.as_posix() == "404.html"  # a theme template, not a page: the head's fixes only
        page = math_render.drop_remote_scripts(pages[name]) if not template else pages[name]
        page = page_fixes.fix_page(page, None if template else len(rel.parent.parts), used)
        page = figures.externalize(page, _page_url(rel), site_dir)
        page = copy_chains.chains(page) if not template else page
        if page != original[name]:
            f.write_bytes(page.encode("utf-8"))
            changed += 1
    math_render.copy_fonts(site_dir)
    page_fixes.remove_unused_assets(site_dir, used)
    return changed


_written: set[str] = set()  # the HTML files MkDocs writes in this build


def on_pre_build(config: Any, **kwargs: Any) -> None:
    _written.clear()  # `mkdocs serve` loads the hooks once, then builds again and again
    _written.add("404.html")


def on_post_page(output: str, page: Any, **kwargs: Any) -> str:
    _written.add(page.file.dest_uri)
    return output


def on_post_build(config: Any, **kwargs: Any) -> None:
    if os.environ.get(SKIP_ENV) == "skip":
        return
    run(Path(config["site_dir"]), only=_written if dev_cache.cache_dir() else None)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python tools/site_build/postbuild.py SITE_DIR", file=sys.stderr)
        return 2
    try:
        n = run(Path(argv[0]))
    except (FileNotFoundError, math_render.KatexError) as e:
        print(f"postbuild: {e}", file=sys.stderr)
        return 1
    print(f"postbuild: {n} HTML files rewritten in {argv[0]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
