"""Build the package's wheel reproducibly: the same source gives the same bytes.

The wheel is built from a clean copy of what it ships (``pyproject.toml``, ``README.md``, ``LICENSE`` and
``lessons_src/`` without caches), so the build leaves nothing behind in the checkout, with
``SOURCE_DATE_EPOCH`` fixing the timestamps inside the zip (from the last commit, or the given value).
No build isolation: the pinned setuptools of the project's environment builds it, with no download.

With a ``cache`` folder (the site build passes ``.cache/wheels``), a wheel already built from the same bytes
(the shipped files, their names and modes, the timestamp, and the Python, pip, setuptools and wheel versions) is
copied instead of built again: every build of ``make test`` (two of the site, a dozen tiny ones) used to spend
seconds on the same wheel.

Usage: ``python tools/package/build_wheel.py OUT_DIR`` prints the wheel's path.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ("pyproject.toml", "README.md", "LICENSE")


def source_date_epoch() -> str:
    """``$SOURCE_DATE_EPOCH``, else the last commit's time, else 1980-01-01 (the zip format's earliest date)."""
    if os.environ.get("SOURCE_DATE_EPOCH"):
        return os.environ["SOURCE_DATE_EPOCH"]
    try:
        out = subprocess.run(
            ["git", "log", "-1", "--format=%ct"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        out = ""
    return out or "315532800"


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "absent"


def fingerprint(src: Path, epoch: str) -> str:
    """What decides the wheel's bytes: every file under ``src`` (name, mode, content), the timestamp, the tools."""
    digest = hashlib.sha256()
    tools = [sys.version] + [_version(name) for name in ("pip", "setuptools", "wheel")]
    digest.update("\0".join([epoch, *tools]).encode())
    for path in sorted(src.rglob("*")):
        digest.update(f"\0{path.relative_to(src).as_posix()}\0{path.stat().st_mode:o}\0".encode())
        if path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()[:32]


def build_wheel(out_dir: Path, *, epoch: str | None = None, cache: Path | None = None) -> Path:
    """Build the wheel into ``out_dir`` and return its path (from ``cache`` when it holds this source's wheel)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    epoch = epoch or source_date_epoch()
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        for name in SHIPPED:
            shutil.copy2(ROOT / name, src / name)
        caches = shutil.ignore_patterns("__pycache__", "*.pyc")
        shutil.copytree(ROOT / "lessons_src", src / "lessons_src", ignore=caches)
        for path in sorted(src.rglob("*")):  # the zip stores modes: make them independent of the umask
            path.chmod(0o755 if path.is_dir() else 0o644)
        slot = cache / fingerprint(src, epoch) if cache is not None else None
        if slot is not None and (hits := sorted(slot.glob("*.whl"))):
            dest = out_dir / hits[0].name
            shutil.copyfile(hits[0], dest)
            return dest
        env = {**os.environ, "SOURCE_DATE_EPOCH": epoch, "PYTHONHASHSEED": "0"}
        wheel_dir = Path(tmp) / "wheel"
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
             "--wheel-dir", str(wheel_dir), str(src)],
            env=env, capture_output=True, text=True, check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"building the wheel failed:\n{proc.stdout}\n{proc.stderr}")
        (wheel,) = wheel_dir.glob("*.whl")
        dest = out_dir / wheel.name
        shutil.copyfile(wheel, dest)
        if slot is not None:  # stored whole or not at all: a folder is renamed into place
            slot.parent.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(dir=slot.parent))
            shutil.copyfile(wheel, staging / wheel.name)
            try:
                staging.rename(slot)
            except OSError:  # another build stored it first
                shutil.rmtree(staging)
    return dest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir", type=Path)
    print(build_wheel(parser.parse_args().out_dir))


if __name__ == "__main__":
    main()
