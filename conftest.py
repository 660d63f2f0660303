"""pytest's hooks that reach beyond tests/: the package's docstring examples, and the list of collected checks.

**Docstring examples.** ``--doctest-modules`` (``pyproject.toml``) collects the examples of every module of the
core (``testpaths`` names ``lessons_src/*.py``). Each example starts from one seed, so an unseeded one cannot
pass or fail by luck; a core module without an example is a collection error (every module shows one); and
``lessons_src/triton_flash.py``'s examples, CPU tensors through Triton's interpreter, are skipped with the reason
unless Triton is installed and ``TRITON_INTERPRET=1`` (``make test-triton``).

**``--list-checks FILE``** writes the id of every collected test to FILE, one per line. `make test` writes the
lists to .cache/checks/ (unit.txt, site.txt, browser.txt), so a change to the suites can be compared check by
check with tools/dev/compare_checks.py. A browser check's id names its page and width:
``tests/browser/test_pages.py::test_axe_clean[375-lessons/mla/]``. Under pytest-xdist the first worker writes it.

The tests' own shared fixtures and hooks are in tests/conftest.py; their helper modules in tests/helpers/.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Generator

ROOT = Path(__file__).resolve().parent
CORE = ROOT / "lessons_src"
TRITON = CORE / "triton_flash.py"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--list-checks", metavar="FILE", default=None, help="write every collected test id to FILE")


def pytest_collection_finish(session: pytest.Session) -> None:
    target = session.config.getoption("--list-checks")
    worker = getattr(session.config, "workerinput", {}).get("workerid", "gw0")
    if target and worker == "gw0":
        path = Path(target)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"{item.nodeid}\n" for item in session.items), encoding="utf-8")


def _triton_skip_reason() -> str | None:
    if importlib.util.find_spec("triton") is None:
        return "needs Triton, the [triton] extra: `make test-triton` installs it and runs these examples"
    if os.environ.get("TRITON_INTERPRET") != "1":
        return "its examples use CPU tensors: TRITON_INTERPRET=1 (`make test-triton`)"
    return None


class _Skipped(pytest.File):
    """A module whose examples cannot run here: skipped with the reason, never imported (a failed import would leave
    a half-made module in sys.modules for the tests that import it on purpose)."""

    reason = ""

    def collect(self) -> list[pytest.Item]:
        pytest.skip(self.reason)


@pytest.hookimpl(wrapper=True)
def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> Generator[None, list, list]:
    """The core's modules are collected for their examples only; the tests and their helpers, never for examples."""
    collected = yield
    doctests = [c for c in collected if type(c).__name__ == "DoctestModule"]
    if file_path.parent != CORE:
        return [c for c in collected if c not in doctests]
    if file_path == TRITON and doctests and (reason := _triton_skip_reason()):
        skipped = _Skipped.from_parent(parent, path=file_path)
        skipped.reason = reason
        return [skipped]
    return doctests


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    """A core module whose docstrings show no example fails collection, naming itself."""
    report = yield
    if isinstance(collector, _Skipped):  # named by its own path, not this file's line
        where = (str(collector.path), 0, f"Skipped: {collector.reason}")
        return pytest.CollectReport(collector.nodeid, "skipped", where, [])
    if not isinstance(collector, pytest.File) or collector.path.parent != CORE:
        return report
    if report.passed and not report.result:
        report.outcome = "failed"
        report.longrepr = f"{collector.path.relative_to(ROOT)} has no docstring example: every core module shows one"
    return report


@pytest.fixture(autouse=True)
def _one_seed_per_example(request: pytest.FixtureRequest) -> None:
    """Each docstring example starts from torch.manual_seed(0), so none passes or fails by luck."""
    if isinstance(request.node, pytest.DoctestItem):
        import torch

        torch.manual_seed(0)
