"""The Benchmarks page's goals for each page's Lighthouse run, judged in one place for the report and the page.

``tools/bench/bench_site.py`` prints its verdicts with :func:`misses`, and the Benchmarks page
(``docs/reference/benchmarks.md``) reads the committed report through it, so the two cannot disagree.
"""

from __future__ import annotations

from typing import Any

QUIET_LOAD = 2.0
"""The score goal is judged only on runs started below this load average: a busy machine lowers the scores."""

OTHER_CATEGORIES = ("accessibility", "best-practices", "seo")
"""The categories besides performance, each with the goal of full marks."""


def misses(page: dict[str, Any], report: dict[str, Any]) -> list[str]:
    """The goals one page of a ``site.json`` report misses (empty: it meets every goal stated).

    The goals: a mobile performance score of at least ``budgets["performance"]`` (on a machine that was quiet,
    below :data:`QUIET_LOAD`; on a busy one, at most ``budgets["below_yardstick"]`` points below the stock page
    measured in the same run), full marks in the other categories, and at most ``budgets["page_bytes"]``
    transferred.
    """
    budgets, scores = report["budgets"], page["lighthouse"]["mobile"]["scores"]
    perf, yard = scores["performance"], report["yardstick"]["scores"]["performance"]
    found = []
    if report["machine"]["load_average_at_start"] < QUIET_LOAD:
        if perf < budgets["performance"]:
            found.append(f"performance {perf} < {budgets['performance']}")
    elif yard - perf > budgets["below_yardstick"]:
        found.append(f"performance {perf}, {yard - perf} below the stock page's {yard}")
    found += [f"{c} {scores[c]}" for c in OTHER_CATEGORIES if scores[c] < 100]
    if page["bytes"] > budgets["page_bytes"]:
        found.append(f"{page['bytes'] / 1e6:.2f} MB > {budgets['page_bytes'] / 1e6:g} MB")
    return found
