"""Nothing stale reaches a page of ``make serve``: what tools/site_build/dev_cache.py reuses, on a tiny project.

tests/helpers/dev_loop_steps.py builds a tiny project (the site's configuration, two pages whose blocks import the
project's own package) as ``mkdocs serve --dirty`` does, one edit after another in one process, then once more in
a new process on the same cache. The checks below hold with the real key; the last test runs the same steps
with a key of the block's source alone and shows that the checks catch it (it reuses the outputs of the
package's old code and of the session's old earlier block).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from dev_loop_steps import INDEX, OTHER, PACKAGE
from tiny_project import build_env, run_python, write_project

ROOT = Path(__file__).resolve().parents[2]

import dev_cache  # noqa: E402


def run_steps(tmp: Path, key: str) -> dict[str, Any]:
    write_project(tmp, {"index.md": INDEX, "other.md": OTHER})
    (tmp / "pkg").mkdir()
    (tmp / "pkg" / "fixmod.py").write_text(PACKAGE, encoding="utf-8")
    env = build_env({"SITE_DEV_CACHE": str(tmp / "cache"), "SITE_DEV_INPUTS": str(tmp / "pkg")})
    out: dict[str, Any] = {}
    # The edits in one process; for the real key, then a new process on the same cache (a new `make serve`).
    for again in ([], ["again"]) if key == "real" else ([],):
        proc = run_python([str(ROOT / "tests" / "helpers" / "dev_loop_steps.py"), str(tmp), key, *again], cwd=tmp,
                          env=env, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        out.update(json.loads(proc.stdout.splitlines()[-1]))
    return out


@pytest.fixture(scope="module")
def steps(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return run_steps(tmp_path_factory.mktemp("dev-real"), "real")


def test_the_first_build_runs_every_block(steps: dict[str, Any]) -> None:
    first = steps["first build"]
    assert first["ran"] == 3
    assert first["pages"]["index"]["printed"] == ["1"] and first["pages"]["other"]["printed"] == ["1"]


def test_a_prose_edit_runs_no_block(steps: dict[str, Any]) -> None:
    prose = steps["prose"]
    assert prose["pages"]["index"]["heading"], "the edited heading is on the page"
    assert prose["ran"] == 0 and prose["pages"]["index"]["printed"] == ["1"]


def package_edit_shows(steps: dict[str, Any]) -> bool:
    pages = steps["package"]["pages"]
    return bool(pages["index"]["printed"] == ["2"] and pages["other"]["printed"] == ["2"])


def session_edit_shows(steps: dict[str, Any]) -> bool:
    return bool(steps["earlier block"]["pages"]["index"]["printed"] == ["20"])


def test_a_package_edit_reaches_every_page(steps: dict[str, Any]) -> None:
    assert package_edit_shows(steps), steps["package"]  # the other page's source did not change: rebuilt anyway


def test_an_earlier_block_edit_reaches_the_later_blocks_of_its_session(steps: dict[str, Any]) -> None:
    assert session_edit_shows(steps), steps["earlier block"]


def test_a_later_block_edit_reruns_it_on_the_session_its_earlier_blocks_left(steps: dict[str, Any]) -> None:
    later = steps["later block"]
    assert later["pages"]["index"]["printed"] == ["20"]  # x replayed from the reused first block, not undefined
    assert later["ran"] == 2  # the reused first block replayed, then the edited one; the other page untouched


def test_a_new_serve_on_the_same_inputs_runs_no_block(steps: dict[str, Any]) -> None:
    again = steps["new serve"]
    assert again["ran"] == 0
    assert again["pages"] == {**steps["later block"]["pages"]}


def test_every_input_changes_the_fingerprint(tmp_path: Path) -> None:
    files = [*dev_cache.CODE_FILES, *(f"{folder}/some/f.py" for folder in dev_cache.CODE_FOLDERS)]
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("a")
    before = dev_cache.inputs_fingerprint(tmp_path, {}, None)
    for name in files:
        (tmp_path / name).write_text("b")
        after = dev_cache.inputs_fingerprint(tmp_path, {}, None)
        assert after != before, name
        before = after
    for variable in dev_cache.ENV_INPUTS:
        assert dev_cache.inputs_fingerprint(tmp_path, {variable: "x"}, None) != before, variable
    assert dev_cache.inputs_fingerprint(tmp_path, {}, "git@github.com:o/r.git") != before  # the git remote
    assert dev_cache.pages_fingerprint(before, tmp_path) != dev_cache.pages_fingerprint(after + "x", tmp_path)


def test_the_checks_catch_a_cache_keyed_on_the_block_source_alone(tmp_path: Path) -> None:
    naive = run_steps(tmp_path, "naive")
    assert naive["prose"]["ran"] == 0  # reuses as much...
    assert not package_edit_shows(naive), naive["package"]  # ...but shows the package's old output
    assert not session_edit_shows(naive), naive["earlier block"]  # ...and the session's old state


def test_only_the_outputs_of_the_last_fingerprints_are_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(dev_cache.ENV, str(tmp_path))
    monkeypatch.setitem(dev_cache.STATE, "code", "0" * 64)
    for i in range(1, 6):
        (tmp_path / (f"{i}" * 16)).mkdir()
        os.utime(tmp_path / (f"{i}" * 16), (i, i))
    dev_cache.prune(keep=3)
    assert sorted(d.name[0] for d in tmp_path.iterdir()) == ["0", "4", "5"]  # the current one, marked used now
