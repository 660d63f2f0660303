"""The lab notebook runs top to bottom in a fresh environment, installing the package from the wheel itself.

A fresh virtual environment borrows only the project's installed third-party packages (torch, Jupyter's
kernel machinery) through a plain path line in a .pth file, as tests/tools/test_wheel.py does, leaving out the
project's own editable install: it has no lessons_src. The repository's notebook, with its first cell's
WHEEL pointed at a locally built wheel, is run by nbclient from that environment's Python, in a directory
outside the repository, with pip kept off the network: the first cell must install the wheel, every later
cell must run, and the lessons_src they import must be the installed wheel's.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
from build_wheel import build_wheel  # noqa: E402

pytestmark = pytest.mark.slow  # the notebook runs in a fresh environment with the wheel: seconds

RUN = r"""
import sys
import nbclient, nbformat

nb = nbformat.read(sys.argv[1], as_version=4)
nbclient.NotebookClient(nb, kernel_name="python3", timeout=120, resources={"metadata": {"path": "."}}).execute()
nbformat.write(nb, sys.argv[2])
"""
WHERE = "import json, lessons_src\nprint(json.dumps({'file': lessons_src.__file__, 'v': lessons_src.__version__}))"


def fresh_environment(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A virtual environment with the project's third-party packages and no lessons_src: (its python, env)."""
    venv = tmp_path / "venv"
    # No pip of its own: `%pip` runs the borrowed pip, which installs into this environment (and sees the
    # borrowed setuptools and torch, so it needs no index).
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    # The project's packages minus its own editable install (whose metadata would make pip skip the wheel).
    deps = tmp_path / "deps"
    deps.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.lower().startswith(("mha_computed", "__editable__", "lessons_src")):
            (deps / entry.name).symlink_to(entry)
    Path(site, "project_deps.pth").write_text(f"{deps}\n")
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path), "MPLBACKEND": "Agg",
           "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "JUPYTER_PLATFORM_DIRS": "1"}
    return python, env


def test_lab_runs_in_a_fresh_environment_from_the_wheel(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path / "dist", epoch="1700000000")
    python, env = fresh_environment(tmp_path)
    venv = tmp_path / "venv"

    nb = nbformat.read(ROOT / "docs" / "practice" / "lab.ipynb", as_version=4)
    first = next(c for c in nb.cells if c.cell_type == "code")
    first.source, n = re.subn(r'^WHEEL = ".*"$', f'WHEEL = "{wheel}"', first.source, flags=re.M)
    assert n == 1, "the lab's first code cell has no WHEEL line"
    nb.cells.append(nbformat.v4.new_code_cell(WHERE))
    work = tmp_path / "elsewhere"
    work.mkdir()
    nbformat.write(nb, work / "lab.ipynb")

    proc = subprocess.run(
        [str(python), "-c", RUN, "lab.ipynb", "executed.ipynb"], cwd=work, env=env,
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    done = nbformat.read(work / "executed.ipynb", as_version=4)
    code = [c for c in done.cells if c.cell_type == "code"]
    assert all(c.execution_count for c in code), "a cell did not run"
    assert not any(o.output_type == "error" for c in code for o in c.outputs)
    report = json.loads("".join(o.text for o in code[-1].outputs if o.output_type == "stream"))
    assert Path(report["file"]).is_relative_to(venv), f"the lab imported {report['file']}, not the installed wheel"
    assert wheel.name == f"mha_computed-{report['v']}-py3-none-any.whl"
    # the lessons' cells printed what they print on the site (e.g. the parameter count of the GPT-2 layer)
    printed = "".join(o.get("text", "") for c in code for o in c.outputs)
    assert "by hand == MultiHeadAttention: yes" in printed  # through lessons_src.lab.checks, in the wheel too


def test_lab_without_a_wheel_address_says_how_to_go_on(tmp_path: Path) -> None:
    """A copy that knows no wheel address (the repository's, with no site address known) and finds no wheel
    file stops at its first cell with the steps to take, not with a FileNotFoundError."""
    python, env = fresh_environment(tmp_path)
    nb = nbformat.read(ROOT / "docs" / "practice" / "lab.ipynb", as_version=4)
    first = next(c for c in nb.cells if c.cell_type == "code")
    first.source = re.sub(r'^WHEEL = ".*"$', 'WHEEL = "mha_computed-0.0.0-py3-none-any.whl"', first.source, flags=re.M)
    nb.cells = [first]
    work = tmp_path / "elsewhere"
    work.mkdir()
    nbformat.write(nb, work / "lab.ipynb")
    run = RUN.replace("timeout=120,", "timeout=120, allow_errors=True,")
    proc = subprocess.run([str(python), "-c", run, "lab.ipynb", "executed.ipynb"], cwd=work, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    outputs = nbformat.read(work / "executed.ipynb", as_version=4).cells[0].outputs
    printed = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    errors = [o.ename for o in outputs if o.output_type == "error"]
    assert "'Get the code' page" in printed and "replace 'mha_computed-0.0.0-py3-none-any.whl'" in printed
    assert errors == ["SystemExit"], errors  # stops Run All before the lessons' cells, with no traceback
