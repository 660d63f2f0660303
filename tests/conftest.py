"""Shared by every suite: `--list-checks FILE` writes the id of every collected test to FILE, one per line.

`make test` writes the lists to .cache/checks/ (unit.txt, site.txt, browser.txt), so a change to the suites can
be compared check by check with tools/dev/compare_checks.py. A browser check's id names its page and width:
``tests/browser/test_pages.py::test_axe_clean[375-lessons/mla/]``. Under pytest-xdist the first worker writes it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--list-checks", metavar="FILE", default=None, help="write every collected test id to FILE")


def pytest_collection_finish(session: pytest.Session) -> None:
    target = session.config.getoption("--list-checks")
    worker = getattr(session.config, "workerinput", {}).get("workerid", "gw0")
    if target and worker == "gw0":
        path = Path(target)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"{item.nodeid}\n" for item in session.items), encoding="utf-8")
