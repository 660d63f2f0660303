"""What the repository says about itself is so.

* **Targets and paths**: every ``make`` target the README, CONTRIBUTING.md and the folder READMEs name in code is
  one ``make help`` lists, and every file and folder they name in code exists (from the document's folder or the
  repository's root; what a build or ``make`` creates, such as ``site/`` and ``.cache/``, is left out).
* **CI**: the README's sentence "CI runs ..." names, in order, the ``make`` steps ``.ci/run`` runs and the steps of
  ``.github/workflows/site.yml`` run, and ``make help`` agrees where it speaks of CI; the Python and Node the
  README asks for are the workflow's.
* **A door**: the README stays under 14,000 bytes, names every top-level folder in its map, and neither it nor the
  Makefile's comments hold a date or a measurement (those live in the committed bench reports and closing notes).
* **Node**: the Node.js the workflow pins satisfies the ``engines`` range of every package in ``package-lock.json``
  (read with a small semver range check written here for the forms npm packages use: ``>=X.Y.Z``, ``^X``, ``~X.Y``,
  ``X.*``, ``A || B``, ``14 >=14.17``); the pin is read as its lowest release (``"20"`` is 20.0.0).
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "site.yml"
DOCS = ("README.md", "CONTRIBUTING.md", "lessons_src/README.md", "tests/README.md", "tools/README.md")
# What a build, make or a test run creates: named in the documents, absent from a fresh clone.
GENERATED = (".venv", ".cache", "node_modules", "site/", ".venv-")

Version = tuple[int, int, int]

# --------------------------------------------------------------------------- a semver range check

_COMPARATOR = r"(>=|<=|>|<|=|\^|~)?\s*v?([0-9xX*]+(?:\.[0-9xX*]+){0,2})"


def _parts(spec: str) -> list[int]:
    """The numbers of a partial version up to its first wildcard: ``"14.17"`` -> [14, 17], ``"6.*"`` -> [6]."""
    out: list[int] = []
    for part in spec.split("."):
        if part in ("*", "x", "X"):
            break
        out.append(int(part))
    return out


def _padded(nums: list[int]) -> Version:
    a, b, c = [*nums, 0, 0, 0][:3]
    return a, b, c


def _bump(nums: list[int], i: int) -> Version:
    """The version just past ``nums[: i + 1]``: ``_bump([1, 2, 3], 0)`` is (2, 0, 0)."""
    return _padded([*nums[:i], nums[i] + 1])


def _comparator(version: Version, op: str, spec: str) -> bool:
    nums = _parts(spec)
    n = len(nums)
    head = version[:n]
    if op in ("", "="):  # an exact or partial version: 14 means 14.x.x, * anything
        return head == tuple(nums)
    if op == ">=":
        return version >= _padded(nums)
    if op == ">":  # >1.2 is >=1.3.0
        return n > 0 and head > tuple(nums)
    if op == "<":
        return version < _padded(nums)
    if op == "<=":  # <=1.2 is <1.3.0
        return head <= tuple(nums)
    if n == 0:  # ^* and ~* allow anything
        return True
    if op == "^":  # the first non-zero part may not change: ^0.2.3 is >=0.2.3 <0.3.0
        i = next((j for j, x in enumerate(nums) if x != 0), n - 1)
    else:  # ~1.2.3 and ~1.2 are <1.3.0; ~1 is <2.0.0
        i = 1 if n >= 2 else 0
    return _padded(nums) <= version < _bump(nums, i)


def satisfies(version: Version, range_: str) -> bool:
    """Whether ``version`` is in the npm range ``range_``; a form this check does not read raises ValueError."""
    for alternative in range_.split("||"):
        if not re.fullmatch(rf"\s*(?:{_COMPARATOR}\s*)*", alternative):
            raise ValueError(f"the engines range {range_!r} has a form this check does not read: {alternative!r}")
        if all(_comparator(version, op, spec) for op, spec in re.findall(_COMPARATOR, alternative)):
            return True
    return False


@pytest.mark.parametrize(
    ("version", "range_", "expected"),
    [
        ((20, 0, 0), ">=22.12.0", False), ((22, 12, 0), ">=22.12.0", True), ((20, 0, 0), ">= 14", True),
        ((20, 0, 0), ">=18.16", True), ((18, 15, 9), ">=18.16", False), ((20, 0, 0), "*", True),
        ((14, 17, 0), ">=16 || 14 >=14.17", True), ((14, 16, 0), ">=16 || 14 >=14.17", False),
        ((15, 0, 0), ">=16 || 14 >=14.17", False), ((9, 1, 0), "6.* || 8.* || >= 10.*", False),
        ((8, 3, 0), "6.* || 8.* || >= 10.*", True), ((20, 1, 0), "^18 || >=20", True), ((19, 0, 0), "^18", False),
        ((0, 2, 9), "^0.2.3", True), ((0, 3, 0), "^0.2.3", False), ((1, 2, 9), "~1.2", True),
        ((1, 3, 0), "~1.2", False), ((20, 0, 0), ">18 <20", False), ((19, 5, 0), ">18 <20", True),
    ],
)
def test_the_range_check_reads_npm_ranges(version: Version, range_: str, expected: bool) -> None:
    assert satisfies(version, range_) is expected


def test_the_range_check_refuses_a_form_it_does_not_read() -> None:
    with pytest.raises(ValueError, match="does not read"):
        satisfies((20, 0, 0), "1.2.3 - 2.3.4")


# --------------------------------------------------------------------------- Node


def workflow_steps() -> list[dict[str, object]]:
    jobs = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))["jobs"]
    return [step for job in jobs.values() for step in job.get("steps", [])]


def workflow_pin(action: str, key: str) -> str:
    """What the workflow's one ``actions/<action>`` step is given as ``key`` (``setup-node``, ``node-version``)."""
    pins = [str(s["with"][key]) for s in workflow_steps() if str(s.get("uses", "")).startswith(f"actions/{action}@")]
    assert len(pins) == 1, f"expected one {action} step with a {key} in {WORKFLOW.name}; got {pins}"
    return pins[0]


def workflow_node() -> str:
    return workflow_pin("setup-node", "node-version")


def test_the_pinned_node_satisfies_every_engines_range_in_the_lockfile() -> None:
    pin = workflow_node()
    version = _padded(_parts(pin.removeprefix("v")))
    lock = json.loads((ROOT / "package-lock.json").read_text(encoding="utf-8"))
    refused = {
        f"{path or 'the project'}@{meta.get('version', '')}: {meta['engines']['node']}"
        for path, meta in lock["packages"].items()
        if isinstance(meta.get("engines"), dict) and "node" in meta["engines"]
        and not satisfies(version, meta["engines"]["node"])
    }
    assert not refused, (
        f"the workflow pins Node {pin} (read as {'.'.join(map(str, version))}), which these packages of "
        f"package-lock.json refuse: {sorted(refused)}; pin a Node they accept, or pin them below (package.json)"
    )


# --------------------------------------------------------------------------- what the documents name

FENCE = re.compile(r"^[ \t]*(`{3,})[^\n]*\n(.*?)^[ \t]*\1[ \t]*$", re.MULTILINE | re.DOTALL)  # indented too
PATH_LIKE = re.compile(r"[\w./-]+")
EXTENSIONS = (".py", ".md", ".yml", ".yaml", ".json", ".txt", ".toml", ".ipynb", ".js", ".mjs", ".css", ".in", ".log")


def read(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


def code_of(text: str) -> tuple[list[str], list[str]]:
    """(fenced blocks, inline code spans) of a Markdown text."""
    blocks = [m.group(2) for m in FENCE.finditer(text)]
    return blocks, re.findall(r"`([^`\n]+)`", FENCE.sub("", text))


@functools.cache
def make_help() -> dict[str, str]:
    """``make help``'s lines as {target: what it says}."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")}
    out = subprocess.run(["make", "--no-print-directory", "-s", "help"], cwd=ROOT, env=env, capture_output=True,
                         text=True, check=True).stdout
    return {m[1]: m[2] for m in re.finditer(r"^\s*make (\S+)\s+(.*)$", out, re.MULTILINE)}


@pytest.mark.parametrize("doc", DOCS)
def test_every_make_target_a_document_names_is_in_make_help(doc: str) -> None:
    blocks, spans = code_of(read(doc))
    named = {t for code in blocks + spans for t in re.findall(r"(?<![\w-])make\s+([a-z][a-z0-9-]*)", code)}
    missing = sorted(named - set(make_help()))
    assert not missing, f"{doc} names make targets that make help does not list: {missing}"


@functools.cache
def _git_files() -> tuple[str, ...] | None:
    try:
        out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return tuple(out.splitlines())


def tracked_files() -> tuple[str, ...]:
    """Every file git tracks (a test that needs them is skipped outside a git checkout)."""
    files = _git_files()
    if files is None:
        pytest.skip("not a git checkout: the tracked files are unknown")
    return files


def tracked_names() -> frozenset[str]:
    """The name of every file and folder git tracks, for a bare name (``postbuild.py``) a document gives in context."""
    return frozenset(part for path in tracked_files() for part in path.split("/"))


@pytest.mark.parametrize("doc", DOCS)
def test_every_file_and_folder_a_document_names_exists(doc: str) -> None:
    """A path (``tools/dev/timed.py``, ``site_build/``) exists from the document's folder or the root; a bare name
    (``timed.py``) is the name of a tracked file."""
    here = (ROOT / doc).parent
    missing = []
    for span in code_of(read(doc))[1]:
        if not PATH_LIKE.fullmatch(span) or "..." in span or not ("/" in span or span.endswith(EXTENSIONS)):
            continue
        if span.startswith(GENERATED) or (here / span).exists() or (ROOT / span).exists():
            continue
        if "/" in span or span not in tracked_names():
            missing.append(span)
    assert not missing, f"{doc} names files or folders that do not exist: {missing}"


# --------------------------------------------------------------------------- what CI runs


def readme_ci() -> list[str]:
    """The make targets of the README's "CI runs ..." sentence, in order."""
    text = " ".join(read("README.md").split())
    sentences = [s for s in re.split(r"(?<=[.!?])\s+", text) if s.startswith("CI runs ")]
    assert len(sentences) == 1, f"the README says what CI runs once, in a sentence starting 'CI runs'; got {sentences}"
    sentence = sentences[0]
    assert "`.ci/run`" in sentence and "`.github/workflows/site.yml`" in sentence, sentence
    return re.findall(r"`make ([a-z][\w-]*)`", sentence.split(":")[0])


def ci_run_steps() -> list[str]:
    lines = [line for line in read(".ci/run").splitlines() if not line.lstrip().startswith("#")]
    return [m[1] for line in lines if (m := re.match(r"\s*(?:exec\s+)?make\s+([a-z][\w-]*)\s*$", line))]


def workflow_make_steps() -> list[str]:
    runs = [str(step["run"]) for step in workflow_steps() if "run" in step]
    return [m[1] for run in runs for line in run.splitlines() if (m := re.match(r"\s*make\s+([a-z][\w-]*)\s*$", line))]


def test_ci_runs_what_the_readme_says() -> None:
    said = readme_ci()
    assert said, "the README's 'CI runs' sentence names no make target"
    assert ci_run_steps() == said, f".ci/run runs {ci_run_steps()}; the README says CI runs {said}"
    steps = workflow_make_steps()
    assert steps == said, f"{WORKFLOW.name} runs {steps}; the README says CI runs {said}"


def test_make_help_says_what_ci_runs_as_the_readme_does() -> None:
    ci = readme_ci()
    for target, text in make_help().items():
        if "CI runs it" not in text:
            continue
        assert target in ci, f"make help says CI runs {target}; the README's CI runs {ci}"
        if "CI runs it first" in text:
            assert ci[0] == target, f"make help says CI runs {target} first; the README: {ci}"
        if after := re.search(r"CI runs it after make ([\w-]+)", text):
            assert ci.index(target) > ci.index(after[1]), f"make help: {target} after {after[1]}; the README: {ci}"


def test_the_readme_asks_for_the_python_and_node_ci_uses() -> None:
    readme = " ".join(read("README.md").split())
    python, node = re.findall(r"Python (3\.\d+)", readme), re.findall(r"Node\.js\W+(\d+)", readme)
    assert python and set(python) == {workflow_pin("setup-python", "python-version")}, python
    pin = workflow_node()
    assert node == [pin.split(".")[0]], f"the README asks for Node.js {node}; the workflow pins {pin}"


# --------------------------------------------------------------------------- a door, not a notebook

DATE = re.compile(r"\b(?:19|20)\d\d-\d\d-\d\d\b")
MEASUREMENT = re.compile(
    r"\b\d[\d,.]*\s?(?:ms|µs|s|min|minutes|seconds|CPU-s|CPU seconds|MB|GB|kB|KiB|MiB|GiB)\b", re.IGNORECASE
)


def makefile_comments() -> list[str]:
    """The Makefile's comment lines and its targets' help texts (what ``make help`` prints)."""
    out = []
    for line in read("Makefile").splitlines():
        if line.lstrip().startswith("#"):
            out.append(line)
        elif "## " in line and re.match(r"^[a-z-]+:", line):
            out.append(line.split("## ", 1)[1])
    return out


def test_the_readme_is_a_door() -> None:
    size = len((ROOT / "README.md").read_bytes())
    assert size <= 14_000, f"README.md is {size} bytes, over 14,000: move details to CONTRIBUTING.md or a folder README"


def test_the_readme_maps_every_top_level_folder() -> None:
    folders = {f"{path.split('/')[0]}/" for path in tracked_files() if "/" in path}
    table = [line for line in read("README.md").split("## Map", 1)[1].splitlines() if line.startswith("| `")]
    mapped = {line.split("`")[1] for line in table}
    assert folders <= mapped, f"the README's map has no line for {sorted(folders - mapped)}"


@pytest.mark.parametrize("name", ["README.md", "CONTRIBUTING.md", "Makefile"])
def test_no_dated_figure(name: str) -> None:
    lines = makefile_comments() if name == "Makefile" else read(name).splitlines()
    dated = [line.strip() for line in lines if DATE.search(line)]
    assert not dated, f"{name} holds dates: history lives in commits, figures in the bench reports: {dated}"


@pytest.mark.parametrize("name", ["README.md", "Makefile"])
def test_no_measurement(name: str) -> None:
    lines = makefile_comments() if name == "Makefile" else read(name).splitlines()
    measured = [line.strip() for line in lines if MEASUREMENT.search(line) and "budget" not in line]
    assert not measured, f"{name} holds measurements, which go stale: {measured}"
