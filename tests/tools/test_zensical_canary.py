"""The Zensical canary's verdict (tools/generators/zensical_canary.py) is read from its counts, not Zensical's exit.

`make canary-zensical` needs Zensical's own environment; its committed report (docs/_data/generators/zensical.json)
is what its verdict reads, so the verdict is tested on that report and on the same report with one more thing lost.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from zensical_canary import verdict

ROOT = Path(__file__).resolve().parents[2]
SUMMARY: dict[str, Any] = json.loads((ROOT / "docs" / "_data" / "generators" / "zensical.json").read_text())["summary"]


def test_the_committed_run_passes() -> None:
    assert verdict(SUMMARY) == []


def test_one_more_failed_block_a_lost_result_or_a_lost_page_fails() -> None:
    more = copy.deepcopy(SUMMARY)
    more["failed_blocks"]["lessons/mla.md"] = ["ZeroDivisionError: division by zero"]
    assert verdict(more) == ["lessons/mla.md: 1 executed blocks raised, 0 expected"]
    fewer = copy.deepcopy(SUMMARY)
    fewer["results_found_numbers_masked"][0] -= 1
    assert verdict(fewer) == [f"1 of the {SUMMARY['results_found_numbers_masked'][1]} printed results MkDocs shows "
                              "are missing"]
    lost = copy.deepcopy(SUMMARY)
    lost["pages_missing"].append("lessons/mla.md")
    assert verdict(lost) == ["lessons/mla.md: not written"]
