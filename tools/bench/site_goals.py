"""The goals for each page's Lighthouse run, judged in one place for the report and the page that shows it.

``tools/bench/bench_site.py`` prints its verdicts with :func:`misses`, and that page
(``docs/reference/site-measured.md``) reads the committed report through it, so the two cannot disagree.
"""

from __future__ import annotations

from typing import Any

QUIET_LOAD = 2.0
"""The score goal is judged only on runs started below this load average: a busy machine lowers the scores."""

OTHER_CATEGORIES = ("accessibility", "best-practices", "seo")
"""The categories besides performance, each with the goal of full marks."""


QUIET_OTHER_CPU = 0.5
"""While Lighthouse runs, other processes may use at most this many cores for the score goal to be judged."""


def busiest_load(report: dict[str, Any]) -> float:
    """The highest load average the report records: at its start, or sampled while Lighthouse ran (newer reports).

    Lighthouse and its Chromium count in the load average too (about 3 on two cores, on their own), so reports
    that sample what *other* processes used (``other_cpu_max``) are judged by that instead (:func:`quiet`).
    """
    machine = report["machine"]
    return float(max(machine["load_average_at_start"], machine.get("load_average_max", 0.0)))


def quiet(report: dict[str, Any]) -> bool:
    """Whether nothing else loaded the machine, so the score goal itself is judged.

    Newer reports: the load average was below :data:`QUIET_LOAD` at the start, before the bench started anything,
    and processes outside the bench used at most :data:`QUIET_OTHER_CPU` cores in every interval sampled while
    Lighthouse ran. Older reports, which did not sample that: the load average stayed below :data:`QUIET_LOAD`.
    """
    machine = report["machine"]
    if "other_cpu_max" in machine:
        return machine["load_average_at_start"] < QUIET_LOAD and machine["other_cpu_max"] <= QUIET_OTHER_CPU
    return busiest_load(report) < QUIET_LOAD


def misses(page: dict[str, Any], report: dict[str, Any]) -> list[str]:
    """The goals one page of a ``site.json`` report misses (empty: it meets every goal stated).

    The goals: a mobile performance score of at least ``budgets["performance"]`` (on a machine that stayed quiet,
    :func:`quiet`; on a busy one, at most
    ``budgets["below_yardstick"]`` points below the stock page measured in the same run), full marks in the other
    categories, and at most ``budgets["page_bytes"]`` transferred.
    """
    budgets, scores = report["budgets"], page["lighthouse"]["mobile"]["scores"]
    perf, yard = scores["performance"], report["yardstick"]["scores"]["performance"]
    found = []
    if quiet(report):
        if perf < budgets["performance"]:
            found.append(f"performance {perf} < {budgets['performance']}")
    elif yard - perf > budgets["below_yardstick"]:
        found.append(f"performance {perf}, {yard - perf} below the stock page's {yard}")
    found += [f"{c} {scores[c]}" for c in OTHER_CATEGORIES if scores[c] < 100]
    if page["bytes"] > budgets["page_bytes"]:
        found.append(f"{page['bytes'] / 1e6:.2f} MB > {budgets['page_bytes'] / 1e6:g} MB")
    return found
