"""What the repository says about itself is so.

* **Node**: the Node.js the workflow pins satisfies the ``engines`` range of every package in ``package-lock.json``
  (read with a small semver range check written here for the forms npm packages use: ``>=X.Y.Z``, ``^X``, ``~X.Y``,
  ``X.*``, ``A || B``, ``14 >=14.17``); the pin is read as its lowest release (``"20"`` is 20.0.0).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "site.yml"

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


def workflow_node() -> str:
    """The ``node-version`` the workflow's setup-node step pins (one, as a string)."""
    steps = [s for job in yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))["jobs"].values()
             for s in job.get("steps", [])]
    pins = [str(s["with"]["node-version"]) for s in steps if str(s.get("uses", "")).startswith("actions/setup-node@")]
    assert len(pins) == 1, f"expected one setup-node step with a node-version in {WORKFLOW.name}; got {pins}"
    return pins[0]


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
