"""Shared by every suite of tests/ (conftest.py at the root has the hooks that reach the package's docstrings).

* **A fresh clone runs what it can.** A bare ``pytest`` collects tests/site and tests/browser only when site/
  is built (``$SITE_DIR``, else site/): otherwise it leaves them out and says so, after collecting and at the
  end, and the unit tests run. Named on the command line (``pytest tests/site``, `make site-check`), a suite
  without a site fails loudly.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
SITE_SUITES = {TESTS / "site", TESTS / "browser"}


def _named(config: pytest.Config, path: Path) -> bool:
    """Whether the command line named ``path`` or something inside it (not only a folder above it)."""
    for arg in config.args:
        named = Path(config.invocation_params.dir, arg.split("::")[0]).resolve()
        if named == path or path in named.parents:
            return True
    return False


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tiers a folder sets: every test in tests/site is marked ``site``, in tests/browser ``browser``."""
    for item in items:
        for suite in SITE_SUITES:
            if suite in item.path.parents:
                item.add_marker(suite.name)


def _site_built() -> bool:
    return (Path(os.environ.get("SITE_DIR", ROOT / "site")) / "sitemap.xml").exists()


_SKIPPED: list[str] = []


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Leave a site suite out of a collection that did not name it, when site/ is not built (its conftest and
    modules read the built site on import); pytest_terminal_summary says so."""
    if collection_path in SITE_SUITES and not _site_built() and not _named(config, collection_path):
        _SKIPPED.append(str(collection_path.relative_to(ROOT)))
        return True
    return None


def pytest_report_collectionfinish(config: pytest.Config) -> list[str]:
    return [_skip_line()] if _SKIPPED else []


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _SKIPPED:
        terminalreporter.write_line(_skip_line())


def _skip_line() -> str:
    suites = " and ".join(sorted(set(_SKIPPED)))
    return f"SKIPPED {suites}: site/ is not built (`make build`, then `make site-check`, `make browser`)"
