"""Compare two lists of test ids (pytest --list-checks, or --collect-only -q) check by check.

    python tools/dev/compare_checks.py BEFORE.txt AFTER.txt

Browser checks are compared as (check, page, width) triples. The per-page tests of the suite before the shared
view fixture (tests/helpers/views.py) bundled several checks into one test; OLD_TO_NEW says which checks each
became, so a check that was bundled and is now its own test counts as kept, not as lost and added. Issue 76 moved
the unit tests into tests/core, tests/lab and tests/tools (compared as if still in tests/), ran the docstring
examples through --doctest-modules (a module's examples, one test before, one test per docstring after) and put
the benchmark reports' checks in one file (BENCH_76 says which check each old test became). Every other id is
compared as it is. Prints what was kept, moved, added and lost; exits 1 if anything was lost.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

_OLD_AXE = re.compile(
    r"^tests/browser/test_pages.py::test_axe_no_serious_violations\[(?P<page>.*)-(?P<scheme>light|dark)\]$"
)
_VIEW = re.compile(r"^(?P<test>tests/browser/[\w/]+\.py::\w+)\[(?P<width>375|1280)-(?P<page>.*)\]$")
P, L, W, T, V = (
    "tests/browser/test_pages.py::",
    "tests/browser/test_page_length.py::",
    "tests/browser/test_widgets.py::",
    "tests/browser/test_learning_path.py::",
    "tests/browser/test_live_model.py::",
)
# old test (without its page/width ids) -> [(new check, width)]; {page} is the old test's page parameter.
OLD_TO_NEW: dict[str, list[tuple[str, int]]] = {
    P + "test_page_renders_cleanly": [
        (P + c, 1280)
        for c in (
            "test_page_has_a_title",
            "test_math_is_typeset",
            "test_figures_render",
            "test_collapsibles_open_and_close",
        )
    ],
    P + "test_375px_wide_no_horizontal_scroll_and_axe_clean": [
        (P + "test_no_sideways_scroll", 375),
        (P + "test_axe_clean", 375),
    ],
    L + "test_page_fits_twelve_phone_screens": [(L + "test_page_fits_twelve_phone_screens", 375)],
    W + "test_practice_page_fits_the_page_rules": [
        (L + "test_page_fits_twelve_phone_screens", 375),
        (L + "test_at_most_1500_elements_outside_code", 375),
    ],
}
WHOLE_TESTS: dict[str, list[tuple[str, str, int]]] = {  # old tests without a page parameter
    V + "test_page_rules": [
        (L + "test_page_fits_twelve_phone_screens", "practice/live-model/", 375),
        (L + "test_at_most_1500_elements_outside_code", "practice/live-model/", 375),
    ],
    T + "test_home_formula_fits[375]": [(T + "test_home_formula_fits", "home", 375)],
    T + "test_home_formula_fits[1280]": [(T + "test_home_formula_fits", "home", 1280)],
}


_UNIT_FOLDER = re.compile(r"^tests/(?:core|lab|tools)/")
_OLD_DOCTEST = re.compile(
    r"^tests/test_docstrings\.py::test_docstring_examples_run\[lessons_src(?:\.(?P<module>\w+))?\]$"
)
_DOCTEST = re.compile(r"^lessons_src/(?P<file>\w+)\.py::")
_B = "tests/test_bench_reports.py::test_report_agrees_with_the_code_that_wrote_it"
# tests/test_bench_<report>_report.py::<test> -> the checks of tests/test_bench_reports.py it became. The old tests'
# medians recomputed from the runs a report records (a report against itself) were not kept: the point.
BENCH_76: dict[str, list[str]] = {
    f"tests/test_bench_{report}_report.py::{test}": [p if "::" in p else f"{_B}[{report}/{p}]" for p in parts]
    for report, tests in {
        "decode": {"test_report_cache_bytes_equal_the_formulas": ["counts"]},
        "flash": {"test_taken_at_the_issues_size": ["settings"], "test_analytic_bytes_are_the_shapes": ["counts"],
                  "test_medians_and_ratios_follow_from_the_runs": ["summary"]},
        "flex": {"test_the_masks_and_sizes_are_the_scripts": ["settings"],
                 "test_the_skipped_share_is_the_block_masks": ["counts"],
                 "test_medians_and_speedups_follow_from_the_runs": ["summary"]},
        "gpu": {"test_taken_on_a_named_gpu_over_the_whole_sweep": ["settings"],
                "test_medians_and_tflops_follow_from_the_runs": ["counts"], "test_the_goal_is_judged_from_the_rows":
                ["summary"], "test_flops_count_the_papers_way": ["tests/test_bench_reports.py::"
                                                                 "test_gpu_flops_count_the_papers_way"]},
        "linear": {"test_taken_at_the_models_sizes_from_1k_to_64k_tokens": ["settings"],
                   "test_bytes_measured_are_the_formulas": ["counts"],
                   "test_medians_and_ratios_follow_from_the_runs": ["summary"]},
        "long_context": {"test_memory_matches_the_formulas": ["counts"],
                         "test_ratios_and_verdicts_follow_from_the_timings": ["summary"]},
        "mechanisms": {"test_taken_at_the_issues_size": ["settings"],
                       "test_flop_counts_are_the_layers_and_their_ratios_follow": ["counts"],
                       "test_medians_and_ratios_follow_from_the_runs": ["summary"]},
        "mha_ways": {"test_raschka_setup": ["settings"], "test_every_way_measured_and_ratios_are_the_medians[forward]":
                     ["settings"], "test_every_way_measured_and_ratios_are_the_medians[forward_backward]": ["settings"],
                     "test_flops_and_share_of_matmul_rate": ["counts"], "test_ours_runs_the_fused_kernel": ["claims"]},
        "patterns": {"test_taken_from_1k_to_32k_cached_tokens": ["settings"],
                     "test_bytes_measured_are_the_bytes_computed": ["counts"],
                     "test_medians_and_ratios_follow_from_the_runs": ["summary"],
                     "test_a_window_or_chunk_cache_stops_growing": ["tests/test_bench_reports.py::"
                                                                    "test_a_window_or_chunk_cache_stops_growing"]},
        "roofline": {"test_taken_at_the_scripts_sizes_on_one_thread_and_every_core": ["settings"],
                     "test_rates_are_the_medians_of_the_recorded_samples": ["counts"]},
        "sparse": {"test_taken_at_deepseek_v32s_sizes_with_8k_cached_and_512_picked": ["settings"],
                   "test_decoding_bytes_are_the_formulas_and_selection_costs": ["counts"],
                   "test_the_prefill_selection_is_valid_and_its_kept_scores_counted": ["counts"],
                   "test_medians_and_ratios_follow_from_the_runs": ["summary"],
                   "test_a_dense_mask_of_the_selection_does_not_beat_dense_attention": ["claims"],
                   "test_the_dense_mask_of_a_block_selection_keeps_its_blocks_causally": [
                       "tests/test_bench_reports.py::test_the_dense_mask_of_a_block_selection_keeps_its_blocks_causally"]},
    }.items()
    for test, parts in tests.items()
}


def normalise(ids: list[str], figure_pages: list[str]) -> set[str]:
    """Each id as the checks it stands for: 'check | page | width' for browser page checks, else the id."""
    out: set[str] = set()
    for test_id in ids:
        test_id = _UNIT_FOLDER.sub("tests/", test_id)
        if test_id in BENCH_76:
            out.update(BENCH_76[test_id])
            continue
        if m := _OLD_DOCTEST.match(test_id):
            out.add(f"docstring examples of lessons_src/{m['module'] or '__init__'}.py")
            continue
        if m := _DOCTEST.match(test_id):
            out.add(f"docstring examples of lessons_src/{m['file']}.py")
            continue
        if m := _VIEW.match(test_id):
            out.add(f"{m['test']} | {m['page']} | {m['width']}")
            continue
        if test_id in WHOLE_TESTS:
            out.update(f"{c} | {p} | {w}" for c, p, w in WHOLE_TESTS[test_id])
            continue
        if m := _OLD_AXE.match(test_id):  # [page-scheme]
            check = "test_axe_clean" if m["scheme"] == "light" else "test_axe_clean_in_the_dark_scheme"
            out.add(f"{P}{check} | {m['page']} | 1280")
            continue
        if test_id == L + "test_figures_fit_the_phone_column":  # one test over every page with a figure
            out.update(f"{L}test_figures_fit_the_phone_column | {p} | 375" for p in figure_pages)
            continue
        for old, checks in OLD_TO_NEW.items():
            if test_id.startswith(old + ("[" if "[" not in old else "-")):
                page = test_id[len(old) + 1 : -1]
                out.update(f"{c} | {page} | {w}" for c, w in checks)
                break
        else:
            out.add(test_id)
    return out


def main(before_file: str, after_file: str) -> int:
    before_ids = [i for i in Path(before_file).read_text(encoding="utf-8").splitlines() if "::" in i]
    after_ids = [i for i in Path(after_file).read_text(encoding="utf-8").splitlines() if "::" in i]
    figure_pages = sorted({m["page"] for i in after_ids if (m := _VIEW.match(i)) and "figures_fit" in i})
    before, after = normalise(before_ids, figure_pages), normalise(after_ids, figure_pages)
    lost, added = sorted(before - after), sorted(after - before)
    print(f"before: {len(before_ids)} test ids = {len(before)} checks;", end=" ")
    print(f"after: {len(after_ids)} test ids = {len(after)} checks")
    print(f"kept: {len(before & after)}, added: {len(added)}, lost: {len(lost)}")
    by_test = Counter(a.split(" | ")[0].split("[")[0] for a in added)
    for name, n in by_test.most_common():
        print(f"  added {n:4d}  {name}")
    for name in lost:
        print(f"  LOST  {name}")
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
