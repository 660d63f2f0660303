"""A virtual environment with the wheel installed and the project's dependencies borrowed, not its checkout.

A checkout hides packaging mistakes (an editable install reads files straight from the repository), so the tests
that check what a reader gets (tests/tools/test_wheel.py, tests/site/test_snippets.py) install the wheel with
``--no-deps`` into a new environment that borrows the project's installed dependencies (torch and every extra's):
a plain path line in a ``.pth`` file adds the project's ``site-packages`` after the environment's own, but does
not run the ``.pth`` files inside it, so the project's editable checkout is not importable there.
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path


def install(wheel: Path, venv: Path) -> Path:
    """Create ``venv`` with ``wheel`` installed and the running interpreter's packages borrowed; its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps", "--no-index",
         str(wheel)],
        check=True,
    )
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    Path(site, "project_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def cached(wheel: Path, cache: Path) -> Path:
    """The python of an environment made by :func:`install`, kept under ``cache`` and reused for the same wheel."""
    key = hashlib.sha256(wheel.read_bytes() + sys.executable.encode()).hexdigest()[:16]
    venv = cache / key
    if not venv.exists():  # made whole, then renamed into place: a folder that exists is complete
        cache.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=cache))
        install(wheel, staging / "venv")
        with contextlib.suppress(OSError):  # another process made it first
            (staging / "venv").rename(venv)
        shutil.rmtree(staging)
    return venv / "bin" / "python"
