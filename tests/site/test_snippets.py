"""Every Python snippet the site shows runs on its own in a fresh interpreter.

A reader copies a code block (Material adds a copy button to each) and runs it. The shown Python blocks
are taken from the lesson sources in docs/ (the built HTML of markdown-exec's blocks does not say which
language a block is): every ```python fence that is shown to the reader, that is, a plain fence, or an
executed one (exec="on") with a source= option; `--8<--` includes are expanded as the build does. Each is
run alone in a new `python` process from the repository root, with a timeout. Hidden blocks (exec="on"
without source=) are not shown and may share a session; notebooks run in order as notebooks, and bash
and console (`pycon`) blocks are not Python scripts: they are left out. The snippets run in children forked
from one warm process (snippet_runner.py), so `import torch` is paid once per worker, not once per snippet.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
TIMEOUT_S = 60
_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*\{?[ \t]*\.?(?P<lang>[\w+-]*)(?P<options>[^\n`]*)$")
_INCLUDE = re.compile(r"^[ \t]*--8<--[ \t]*[\"'](?P<path>[^\"']+)[\"'][ \t]*$", re.M)


def fences(text: str) -> list[tuple[int, str, str, str]]:
    """(line, language, options, code) for each top-level fenced block (a fence inside a fence is content)."""
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
    """'lessons_src.attention' when the block only shows a package's source file (`--8<-- "lessons_src/attention.py"`).

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


def snippets() -> list[tuple[str, str]]:
    """(where, code) for each shown Python block; code is "-m module" for a shown package file."""
    found: dict[str, tuple[str, str]] = {}
    for md in sorted(DOCS.rglob("*.md")):
        rel = md.relative_to(DOCS)
        if any(part.startswith("_") for part in rel.parts):
            continue  # exclude_docs: _*/ is not published
        for line, lang, options, code in fences(md.read_text(encoding="utf-8")):
            if lang in {"python", "py", "python3"} and shown_python(options) and code.strip():
                module = included_module(code)
                payload = f"-m {module}" if module else expand_includes(code)
                found.setdefault(payload, (f"{rel.as_posix()}:{line}", payload))
    return sorted(found.values())


SNIPPETS = snippets()


def test_the_site_shows_python_snippets() -> None:
    assert len(SNIPPETS) >= 3


def snippet_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.update(MPLBACKEND="Agg", PYTHONPATH=str(ROOT), PYTHONWARNINGS="error::DeprecationWarning")
    return env


def run_alone(code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run `code` in a new `python` process, as a reader would."""
    script = tmp_path / "snippet.py"
    script.write_text(code, encoding="utf-8")
    args = code.split() if code.startswith("-m ") else [str(script)]
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=snippet_env(), capture_output=True, text=True, timeout=TIMEOUT_S,
        check=False,
    )


class Runner:
    """snippet_runner.py: each snippet in a child forked from a parent that has imported torch once."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("snippet_runner.py"))], cwd=ROOT, env=snippet_env(),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )

    def run(self, code: str) -> subprocess.CompletedProcess[str]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"code": code, "timeout": TIMEOUT_S}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"the snippet runner died (exit status {self.proc.poll()})"
        reply = json.loads(line)
        return subprocess.CompletedProcess(code, reply["returncode"], reply["stdout"], reply["stderr"])

    def close(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=TIMEOUT_S)
        self.proc.stdout.close()


@pytest.fixture(scope="module")
def runner() -> Iterator[Runner]:
    r = Runner()
    yield r
    r.close()


@pytest.mark.parametrize(("where", "code"), SNIPPETS, ids=[w for w, _ in SNIPPETS])
def test_snippet_runs_alone(where: str, code: str, runner: Runner) -> None:
    proc = runner.run(code)
    message = f"the snippet {where} fails in a fresh interpreter:\n{code}\n---\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, message


def test_a_snippet_that_needs_earlier_state_is_caught(runner: Runner) -> None:
    """The harness really runs each snippet alone: state from another block, or an import it left out, is not
    there (the runner's parent has imported torch, the child sees no name of it); a failure is reported."""
    runner.run("import torch\nfrom lessons_src import MultiHeadAttention\nmha = MultiHeadAttention(8, 2)\n")
    for code, error in (("print(mha(x).shape)\n", "NameError"), ("torch.zeros(1)\n", "NameError"),
                        ("raise SystemExit('stopped')\n", "stopped")):
        proc = runner.run(code)
        assert proc.returncode != 0 and error in proc.stderr, (code, proc)
    proc = runner.run("import sys\nprint(sys.argv[0].endswith('snippet.py'), 6 * 7)\n")
    assert (proc.returncode, proc.stdout) == (0, "True 42\n")


def test_the_runner_agrees_with_a_fresh_interpreter(runner: Runner, tmp_path: Path) -> None:
    """The same snippet, run by the runner and by a new `python` process, prints the same: a seeded draw (the
    RNG is untouched before the fork), its module list's shape, a module's own `-m` run."""
    code = ("import sys, torch\ntorch.manual_seed(0)\nprint(torch.randn(3).tolist(), torch.get_num_threads(),"
            " torch.get_default_dtype(), sys.path[0] == __import__('os').path.dirname(__file__))\n")
    fresh, forked = run_alone(code, tmp_path), runner.run(code)
    assert fresh.returncode == forked.returncode == 0, (fresh.stderr, forked.stderr)
    assert forked.stdout == fresh.stdout
