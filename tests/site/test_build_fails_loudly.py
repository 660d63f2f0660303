"""No silent failures: a lesson whose code fails makes `mkdocs build --strict` fail.

Each test builds a tiny MkDocs project with the site's own configuration (mkdocs.yml: theme, hooks,
markdown-exec, mkdocs-jupyter, extensions, strict), only the pages replaced, and checks the outcome. The
first proves that the tiny project builds when its code is fine, so the failures below are caused by the
failing code and nothing else.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest
from tiny_project import build

if TYPE_CHECKING:
    import subprocess
    from pathlib import Path

GOOD_MD = '# Fine\n\n$a^2$\n\n```python exec="on" source="above" result="text"\nprint(6 * 7)\n```\n'
FAILING_MD = '# Broken\n\n```python exec="on" source="above" result="text"\nprint(1 / 0)\n```\n'
CHECKS = "from lessons_src.lab.checks import claim, close\nimport torch\n"
TRUE_CLAIM_MD = (  # a sentence backed by a claim that holds, and a comparison that holds
    '# Claims\n\nSix sevens are more than forty.\n\n```python exec="on"\n' + CHECKS
    + 'claim("t/more-than-forty", 6 * 7 > 40, "6 * 7 = 42")\n```\n\n'
    '```python exec="on" result="text"\n' + CHECKS
    + 'close("doubled == added", torch.ones(2) * 2, torch.ones(2) + 1)\n```\n'
)
FALSE_CLAIM_MD = (  # the planted false claim: the sentence says more than the data
    '# Claims\n\nSix sevens are more than fifty.\n\n```python exec="on"\n' + CHECKS
    + 'claim("t/more-than-fifty", 6 * 7 > 50, "6 * 7 = 42")\n```\n'
)
FAILING_CLOSE_MD = (  # a printed comparison that does not hold: the page must not print it
    '# Close\n\n```python exec="on" result="text"\n' + CHECKS
    + 'close("output == reference", torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.5]))\n```\n'
)


def notebook(source: str) -> str:
    cell = {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": [source]}
    nb = {
        "cells": [{"cell_type": "markdown", "metadata": {}, "source": ["# Notebook"]}, cell],
        "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    return json.dumps(nb)


def test_the_tiny_project_builds_when_its_code_is_fine(tmp_path: Path) -> None:
    proc = build(tmp_path, {"index.md": GOOD_MD, "nb.ipynb": notebook("print(6 * 7)"), "claims.md": TRUE_CLAIM_MD})
    assert proc.returncode == 0, proc.stderr[-3000:]
    page = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert "42" in page and 'class="katex"' in page  # the block ran, the hooks rendered the math
    assert "42" in (tmp_path / "site" / "nb" / "index.html").read_text(encoding="utf-8")
    claims = (tmp_path / "site" / "claims" / "index.html").read_text(encoding="utf-8")
    assert "more than forty" in claims and "doubled == added: yes" in claims  # a true claim and a check that holds


@pytest.fixture(scope="module")
def failing_checks_build(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    """One build for both failing checks below: strict mode reports every failing block, then aborts."""
    return build(tmp_path_factory.mktemp("checks"), {"index.md": FALSE_CLAIM_MD, "close.md": FAILING_CLOSE_MD})


def test_a_false_claim_fails_the_build(failing_checks_build: subprocess.CompletedProcess[str]) -> None:
    proc = failing_checks_build
    assert proc.returncode != 0
    assert "ClaimFailed: claim 't/more-than-fifty' no longer holds: 6 * 7 = 42" in proc.stderr, proc.stderr[-3000:]


def test_a_failing_close_fails_the_build(failing_checks_build: subprocess.CompletedProcess[str]) -> None:
    proc = failing_checks_build
    assert proc.returncode != 0
    assert "CheckFailed: output == reference: 1 of 2 entries exceed the tolerance; the first, [1]" in proc.stderr, (
        proc.stderr[-3000:]
    )


def test_a_failing_exec_block_fails_the_build(tmp_path: Path) -> None:
    proc = build(tmp_path, {"index.md": FAILING_MD})
    assert proc.returncode != 0
    assert "ZeroDivisionError" in proc.stderr or "exited with errors" in proc.stderr, proc.stderr[-3000:]


@pytest.mark.slow
def test_a_failing_notebook_cell_fails_the_build(tmp_path: Path) -> None:
    proc = build(tmp_path, {"index.md": "# Home\n", "nb.ipynb": notebook("raise RuntimeError('cell failed')")})
    assert proc.returncode != 0
    assert "cell failed" in proc.stderr, proc.stderr[-3000:]


def test_a_formula_katex_cannot_parse_fails_the_build(tmp_path: Path) -> None:
    proc = build(tmp_path, {"index.md": "# Math\n\n$\\frac{1}{$\n"})
    assert proc.returncode != 0
    assert "KaTeX" in proc.stderr, proc.stderr[-3000:]
