"""``python -m lessons_src.lab.exercises``: start, check, hints, list, notebook (``--help`` says more)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .catalogue import EXERCISES, exercise
from .checker import MAX_TIME_LIMIT, TIME_LIMIT, LearnerFileError, check_file, validate_time_limit


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lessons_src.lab.exercises",
        description="Multi-head attention exercises, with a checker that names the mistake.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p_check = sub.add_parser("check", help="check one exercise, or all, in your .py file or notebook")
    p_check.add_argument("exercise", help=f"an exercise name or 'all' ({', '.join(EXERCISES)})")
    p_check.add_argument("file", type=Path, help="your .py file or .ipynb notebook")
    p_check.add_argument("--time-limit", type=float, default=TIME_LIMIT, metavar="SECONDS",
                         help=f"stop code that runs longer than this, per call (default {TIME_LIMIT:g}; at most "
                         f"{MAX_TIME_LIMIT:g}; 0: no limit)")
    p_start = sub.add_parser("start", help="write the stubs to a new file, to fill in")
    p_start.add_argument("file", type=Path)
    p_hints = sub.add_parser("hints", help="the hints of one exercise")
    p_hints.add_argument("exercise")
    sub.add_parser("list", help="the exercises")
    p_nb = sub.add_parser("notebook", help="write the exercises notebook")
    p_nb.add_argument("file", type=Path)
    args = parser.parse_args(argv)

    try:
        if args.command == "list":
            for ex in EXERCISES.values():
                print(f"{ex.name:22} {ex.title}")
            return 0
        if args.command == "hints":
            ex = exercise(args.exercise)
            for i, hint in enumerate(ex.hints, 1):
                print(f"Hint {i}: {hint}")
            print(f"Lesson: {ex.lesson.title} ({ex.lesson.path})")
            return 0
        if args.command == "start":
            from . import stubs

            if args.file.exists():
                print(f"{args.file} exists already; give a new file name", file=sys.stderr)
                return 2
            args.file.write_text(Path(str(stubs.__file__)).read_text(encoding="utf-8"), encoding="utf-8")
            print(f"wrote {args.file}: fill in each function, then run "
                  f"python -m lessons_src.lab.exercises check all {args.file}")
            return 0
        if args.command == "notebook":
            from .notebook import write_notebook

            write_notebook(args.file)
            print(f"wrote {args.file}")
            return 0
        validate_time_limit(args.time_limit, "--time-limit", allow_none=False)
        results = check_file(args.file, args.exercise, time_limit=args.time_limit)
    except (LearnerFileError, ValueError) as err:
        print(f"FAILED: {err}", file=sys.stderr)
        return 2
    for result in results:
        print(result)
    if len(results) > 1:
        passed = sum(r.passed for r in results)
        print(f"\n{passed} of {len(results)} exercises pass.")
    return 0 if all(r.passed for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
