"""The Python blocks the site shows, read from the lesson sources in docs/ as the build reads them.

Shared by tests/site/test_snippets.py (each block runs with the wheel alone) and tests/browser/test_copy_chains.py
(what a block's copy button copies): a shown block is a plain ```python fence, or an executed one with a
``source=`` option, ``--8<--`` includes expanded; a block that begins ``# continues the block above`` copies its
chain (tools/site_build/copy_chains.py).
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

from copy_chains import continues

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*\{?[ \t]*\.?(?P<lang>[\w+-]*)(?P<options>[^\n`]*)$")
_INCLUDE = re.compile(r"^[ \t]*--8<--[ \t]*[\"'](?P<path>[^\"']+)[\"'][ \t]*$", re.M)
_SESSION = re.compile(r"\bsession=[\"']?([\w-]+)")
_PRINTS_TEXT = re.compile(r"""\bexec=["']?(?:on|true|1)\b.*\bresult=["']?text\b""")


@dataclass(frozen=True)
class Block:
    """One shown Python block: its page, line, code ("-m module" for a whole package file), session, and whether
    its page prints its output as text (``exec`` with ``result="text"``: not a plain block, nor Markdown or HTML)."""

    page: str
    line: int
    code: str
    session: str | None
    prints_text: bool = False

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def whole_file(self) -> bool:
        return self.code.startswith("-m ")

    @property
    def continues(self) -> bool:
        """Whether it says it continues the block above (its first line, the marker)."""
        return not self.whole_file and continues(self.code)

    @property
    def shown(self) -> str:
        """Its code as the page shows it and the copy button copies it (markdown-exec's hidden lines left out)."""
        return "\n".join(line for line in self.code.split("\n") if "markdown-exec: hide" not in line).strip()


def fences(text: str) -> list[tuple[int, str, str, str]]:
    """(line, language, options, code) for each top-level fenced block (a fence in a fence is content)."""
    lines = text.splitlines()
    found = []
    i = 0
    while i < len(lines):
        m = _OPEN.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence = m.group("indent"), m.group("fence")
        close = re.compile(rf"^{re.escape(indent)}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        j = i + 1
        while j < len(lines) and not close.match(lines[j]):
            j += 1
        body = textwrap.dedent("\n".join(lines[i + 1 : j]))
        found.append((i + 1, m.group("lang").lower(), m.group("options"), body))
        i = j + 1
    return found


def shown_python(options: str) -> bool:
    executed = re.search(r"\bexec=[\"']?(on|true|1)\b", options) is not None
    source = re.search(r"\bsource=[\"']?(\w[\w-]*)", options)
    if not executed:
        return True
    return source is not None and source.group(1) != "console"


def expand_includes(code: str) -> str:
    return _INCLUDE.sub(lambda m: (ROOT / m.group("path")).read_text(encoding="utf-8").rstrip("\n"), code)


def included_module(code: str) -> str | None:
    """'lessons_src.masks' when the block only shows a package's source file (`--8<-- "lessons_src/masks.py"`).

    Such a file is shown whole; it is run the way it runs in a reader's project, as a module of its package
    (its relative imports need the package), with `python -m`.
    """
    m = _INCLUDE.fullmatch(code.strip())
    if m is None or not m.group("path").endswith(".py"):
        return None
    path = ROOT / m.group("path")
    if not (path.parent / "__init__.py").exists():
        return None
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def page_blocks(page: str, text: str) -> list[Block]:
    """The shown Python blocks of one page's Markdown, in page order."""
    found = []
    for line, lang, options, body in fences(text):
        if lang in {"python", "py", "python3"} and shown_python(options) and body.strip():
            module = included_module(body)
            session = _SESSION.search(options)
            found.append(Block(page, line, f"-m {module}" if module else expand_includes(body),
                               session.group(1) if session else None, _PRINTS_TEXT.search(options) is not None))
    return found


def shown_blocks() -> list[Block]:
    """Every shown Python block, page by page, in page order."""
    found = []
    for md in sorted(DOCS.rglob("*.md")):
        rel = md.relative_to(DOCS)
        if not any(part.startswith("_") for part in rel.parts):  # exclude_docs: _*/ is not published
            found += page_blocks(rel.as_posix(), md.read_text(encoding="utf-8"))
    return found


BLOCKS = shown_blocks()


def chain(block: Block, blocks: list[Block] = BLOCKS) -> list[Block]:
    """What a reader who copies ``block`` runs: the block alone, or, when it says it continues the block above,
    that block's chain and then it (its copy button copies them all)."""
    if not block.continues:
        return [block]
    above = [b for b in blocks if b.page == block.page and b.line < block.line]
    return [*chain(above[-1], blocks), block] if above else [block]


def copied(block: Block, blocks: list[Block] = BLOCKS) -> str:
    """What the copy button of ``block`` copies: its chain's shown code, a blank line between blocks."""
    return "\n\n".join(b.shown for b in chain(block, blocks))
