"""The wheel: built reproducibly, installed into a fresh environment, it loads its own artifacts.

A checkout hides packaging mistakes (an editable install reads files straight from the repository), so
this test builds the wheel twice (same bytes), installs it with ``--no-deps`` into a new virtual
environment that borrows only the project's installed dependencies (torch, safetensors:
tools/package/wheel_env.py), and runs from a directory outside the repository, checking that the imported
package is the installed one.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
import wheel_env  # noqa: E402
from build_wheel import build_wheel, fingerprint  # noqa: E402

import lessons_src  # noqa: E402
from lessons_src.lab import ARTIFACT_FILES, DATA_FILES  # noqa: E402

pytestmark = pytest.mark.slow  # each builds or installs the wheel: seconds

CHECK = r"""
import contextlib, hashlib, importlib.metadata, io, json, sys
from importlib import resources
from pathlib import Path

import lessons_src
from lessons_src import MultiHeadAttention, MultiHeadLatentAttention
from lessons_src.lab import ARTIFACT_FILES, DATA_FILES, artifact, data_file, read_artifact_json
from lessons_src.lab.configs import load_configs
from lessons_src.lab.toy_models import load_induction_model

from lessons_src.lab.exercises import EXERCISES, check, check_file, solutions
from lessons_src.lab.exercises.__main__ import main as exercises_main

model = load_induction_model()
with contextlib.redirect_stdout(io.StringIO()):
    exercises_main(["start", "mine.py"])  # the stubs, copied out of the installed package
report = {
    "exercises_pass": all(check(getattr(solutions, n), quiet=True).passed for n in EXERCISES),
    "stubs_not_written": {r.status for r in check_file("mine.py")} == {"not written"},
    "file": lessons_src.__file__,
    "version": lessons_src.__version__,
    "dist_version": importlib.metadata.version("mha-computed"),
    "py_typed": resources.files("lessons_src").joinpath("py.typed").is_file(),
    "artifacts": {n: hashlib.sha256(artifact(n).read_bytes()).hexdigest() for n in ARTIFACT_FILES},
    "data": {n: hashlib.sha256(data_file(n).read_bytes()).hexdigest() for n in DATA_FILES},
    "json_steps": read_artifact_json("induction_training.json")["steps"],
    "model_layers": len(model.attentions),
    "configs": len(load_configs()),
    "mla": MultiHeadLatentAttention.__module__,
}
print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    a = build_wheel(tmp_path_factory.mktemp("a"), epoch="1700000000")
    b = build_wheel(tmp_path_factory.mktemp("b"), epoch="1700000000")
    assert a.name == b.name
    assert a.read_bytes() == b.read_bytes(), "two builds of the same source gave different wheels"
    return a


def test_wheel_name_and_contents(wheel: Path) -> None:
    assert wheel.name == f"mha_computed-{lessons_src.__version__}-py3-none-any.whl"
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in ARTIFACT_FILES:
        assert f"lessons_src/lab/artifacts/{name}" in names
    for name in DATA_FILES:
        assert f"lessons_src/lab/data/{name}" in names
    assert "lessons_src/py.typed" in names
    exercises = ("__init__", "__main__", "catalogue", "checker", "mistakes", "notebook", "shown", "solutions", "stubs")
    for module in exercises:
        assert f"lessons_src/lab/exercises/{module}.py" in names  # the exercises' checker ships in the wheel
    assert not any("__pycache__" in n or n.startswith("tests/") for n in names)
    meta = zipfile.ZipFile(wheel).read(f"mha_computed-{lessons_src.__version__}.dist-info/METADATA").decode()
    assert "Requires-Dist: torch>=2.5" in meta
    assert "Requires-Dist: numpy" in meta  # without it, `import torch` warns "Failed to initialize NumPy"
    for extra in ("plot", "toy", "minilm", "transformers", "lab"):
        assert f"Provides-Extra: {extra}" in meta


def test_installed_wheel_loads_its_artifacts(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    python = wheel_env.install(wheel, venv)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    proc = subprocess.run(
        [str(python), "-c", CHECK], cwd=outside, capture_output=True, text=True, check=False,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert Path(report["file"]).is_relative_to(venv), f"imported {report['file']}, not the installed wheel"
    assert report["version"] == report["dist_version"] == lessons_src.__version__
    assert report["py_typed"]
    here = ROOT / "lessons_src" / "lab"
    assert report["artifacts"] == {
        n: hashlib.sha256((here / "artifacts" / n).read_bytes()).hexdigest() for n in ARTIFACT_FILES
    }
    assert report["data"] == {n: hashlib.sha256((here / "data" / n).read_bytes()).hexdigest() for n in DATA_FILES}
    assert report["model_layers"] == 2 and report["configs"] > 0 and report["json_steps"] > 0
    assert report["mla"] == "lessons_src.mla"
    assert report["exercises_pass"] and report["stubs_not_written"]


def test_every_shipped_file_is_listed() -> None:
    """A new artifact or data file must be added to ARTIFACT_FILES / DATA_FILES (and so to this test)."""
    here = ROOT / "lessons_src" / "lab"
    assert sorted(p.name for p in (here / "artifacts").iterdir()) == sorted(ARTIFACT_FILES)
    assert sorted(p.name for p in (here / "data").iterdir()) == sorted(DATA_FILES)


def test_a_cached_wheel_is_the_built_wheel(wheel: Path, tmp_path: Path) -> None:
    """The site build's cache gives the very bytes a build gives: the first call builds and stores, the second
    copies; both equal an uncached build."""
    cache = tmp_path / "cache"
    stored = build_wheel(tmp_path / "first", epoch="1700000000", cache=cache)
    copied = build_wheel(tmp_path / "second", epoch="1700000000", cache=cache)
    assert stored.read_bytes() == copied.read_bytes() == wheel.read_bytes()
    assert [p.name for p in cache.glob("*/*.whl")] == [wheel.name]


def test_the_cache_key_changes_with_every_input(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "a.py").write_text("x = 1\n")
    key = fingerprint(src, "1700000000")
    assert fingerprint(src, "1700000000") == key
    assert fingerprint(src, "1700000001") != key  # the timestamp inside the zip
    (src / "pkg" / "a.py").write_text("x = 2\n")
    assert fingerprint(src, "1700000000") != key  # a byte
    changed = fingerprint(src, "1700000000")
    (src / "pkg" / "a.py").chmod(0o755)
    assert fingerprint(src, "1700000000") != changed  # a mode
    (src / "pkg" / "a.py").rename(src / "pkg" / "b.py")
    assert fingerprint(src, "1700000000") not in (key, changed)  # a name
