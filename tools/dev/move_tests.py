"""Sort the unit tests into folders that mirror what they test, then fix every path that names a moved file.

    python tools/dev/move_tests.py               # git mv each tests/test_*.py to its folder (commit: renames only)
    python tools/dev/move_tests.py --fix-paths   # then the paths (commit apart, so git sees the moves as renames)
    python tools/dev/move_tests.py --dry-run     # print where each file would go

The rule, for ``tests/test_X.py`` still at the top of tests/:

* ``X`` in :data:`TABLE`: that folder (tests whose name is not a module's: the reason is the folder's line);
* ``X`` starts with ``bench_``: ``tools`` (the benchmark scripts' reports);
* ``lessons_src/X.py`` exists: ``core``; ``lessons_src/lab/X.py`` or ``lessons_src/lab/X/`` exists: ``lab``;
* anything else stops the script, naming the file: add it to :data:`TABLE`.

``--fix-paths`` then, for every test file in ``tests/core``, ``tests/lab`` and ``tests/tools``: makes its
``Path(__file__)`` root one level deeper, and rewrites ``tests/test_X.py`` to its new path in every tracked text
file (the Makefile's file lists, READMEs, docstrings, lessons), except committed data that records old output
(:data:`FROZEN`). Both steps can run again: a file already moved or a path already fixed is left alone.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
FOLDERS = ("core", "lab", "tools")
TABLE = {
    # core: lessons_src's modules seen together (the attention interface, its argument checks, devices, layout)
    "core": ("attention", "attention_interface", "attention_state", "bad_arguments", "bad_inputs", "chunked_cache",
             "devices", "gpu", "gqa", "layout", "rolling_cache", "sliding_window"),
    # lab: lessons_src.lab's artifacts, configurations, extras, the exercises notebook and the live model's script
    "lab": ("artifacts", "configs_cache", "configs_windows", "exercises_notebook", "lab_extras", "live_text_model_js"),
    # tools: tools/ (site_build, package, train, dev, generators) and what the repository says about itself
    "tools": ("atlas_cards", "notebook_wheel", "postbuild_html", "practice_data", "qk_norm_sweep", "repository",
              "site_links", "tests_layout", "timed", "wheel", "zensical_canary"),
}
# committed records of earlier output: the text model's corpus (a snapshot of the prose), benchmark logs
FROZEN = ("lessons_src/lab/data/", "lessons_src/lab/artifacts/", "docs/_data/bench/")
_ROOT_DEPTH = re.compile(r"Path\(__file__\)\.resolve\(\)\.(?:parents\[1\]|parent\.parent)(?![\w\[.])")


def folder(name: str) -> str:
    """The folder for ``tests/test_<name>.py``, by the rule in the module's docstring."""
    for where, names in TABLE.items():
        if name in names:
            return where
    if name.startswith("bench_"):
        return "tools"
    if (ROOT / "lessons_src" / f"{name}.py").exists():
        return "core"
    if (ROOT / "lessons_src" / "lab" / f"{name}.py").exists() or (ROOT / "lessons_src" / "lab" / name).is_dir():
        return "lab"
    raise SystemExit(f"tests/test_{name}.py: no rule says where it goes; add it to TABLE in {Path(__file__).name}")


def moves() -> dict[str, str]:
    """Old path -> new path of each test file still at the top of tests/."""
    return {f"tests/{p.name}": f"tests/{folder(p.stem.removeprefix('test_'))}/{p.name}"
            for p in sorted(TESTS.glob("test_*.py"))}


def moved() -> dict[str, str]:
    """Old path -> new path of each test file already in one of the folders."""
    return {f"tests/{p.name}": p.relative_to(ROOT).as_posix()
            for where in FOLDERS for p in sorted((TESTS / where).glob("test_*.py"))}


def fix_paths() -> list[str]:
    renames = moved()
    changed = []
    for new in renames.values():
        path = ROOT / new
        text = path.read_text(encoding="utf-8")
        fixed = _ROOT_DEPTH.sub("Path(__file__).resolve().parents[2]", text)
        if fixed != text:
            path.write_text(fixed, encoding="utf-8")
            changed.append(new)
    pattern = re.compile(r"(?<![\w/.])tests/(test_\w+\.py)\b")
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    for rel in tracked:
        if rel.startswith(FROZEN) or not (ROOT / rel).is_file():
            continue
        try:
            text = (ROOT / rel).read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        fixed = pattern.sub(lambda m: renames.get(m.group(0), m.group(0)), text)
        if fixed != text:
            (ROOT / rel).write_text(fixed, encoding="utf-8")
            changed.append(rel)
    return sorted(set(changed))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--fix-paths", action="store_true", help="fix the paths after the moves are committed")
    parser.add_argument("--dry-run", action="store_true", help="print where each file would go, move nothing")
    args = parser.parse_args()
    if args.fix_paths:
        for rel in fix_paths():
            print(f"fixed {rel}")
        return
    plan = moves()
    for old, new in plan.items():
        print(f"{old} -> {new}")
        if not args.dry_run:
            (ROOT / new).parent.mkdir(exist_ok=True)
            subprocess.run(["git", "mv", old, new], cwd=ROOT, check=True)
    if not plan:
        print("every test file is in its folder", file=sys.stderr)


if __name__ == "__main__":
    main()
