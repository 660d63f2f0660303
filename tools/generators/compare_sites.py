"""Compare two built sites file by file: what another generator changes in the site MkDocs builds.

    python tools/generators/compare_sites.py site .cache/site-properdocs --generator "ProperDocs 1.6.7" \\
        --out docs/_data/generators/properdocs.json

Each file is identical, only in one site, or different. A different file is classed by what it takes to make
the two the same: "generator meta tag only" (both ``<meta name="generator">`` tags masked); "numbers in printed
output" (also the numbers inside ``<pre>`` blocks masked, with the spaces that align them: timings the lessons
measure at build, different in any two builds, as tests/site/test_reproducible.py allows); "numbers" (a JSON
file, its numbers masked so: the search index holds those timings too); else "other". The first differing lines
of every file not identical once the tag is masked are kept (at most MAX_SHOWN files). The report is JSON,
written with sorted keys; a summary is printed.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
from pathlib import Path

GENERATOR = re.compile(rb'<meta name="generator" content="([^"]*)">')
_PRE = re.compile(rb"<pre\b.*?</pre>", re.S)
_DIGITS = re.compile(rb"[\d.,\s]+")  # numbers and the spaces that align them in a column
MAX_SHOWN = 20


def kind(name: str, a: bytes, b: bytes) -> str:
    """Why two versions of one file differ (the classes of the module's docstring)."""
    a, b = GENERATOR.sub(b"", a), GENERATOR.sub(b"", b)
    if a == b:
        return "generator meta tag only"

    def pre_digits(data: bytes) -> bytes:
        return _PRE.sub(lambda m: _DIGITS.sub(b"#", m.group(0)), data)

    if name.endswith(".html") and pre_digits(a) == pre_digits(b):
        return "numbers in printed output"
    if name.endswith(".json") and _DIGITS.sub(b"#", a) == _DIGITS.sub(b"#", b):
        return "numbers"
    return "other"


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def first_difference(a: bytes, b: bytes, context: int = 1) -> list[str]:
    """The first hunk of a line diff of two texts, at most 12 lines of at most 200 characters."""
    lines_a = a.decode("utf-8", "replace").splitlines()
    lines_b = b.decode("utf-8", "replace").splitlines()
    hunk: list[str] = []
    for line in list(difflib.unified_diff(lines_a, lines_b, "reference", "other", n=context, lineterm=""))[2:]:
        if line.startswith("@@") and hunk:
            break
        hunk.append(line[:200])
    return hunk[:12]


def compare(reference: Path, other: Path) -> dict:
    a, b = tree(reference), tree(other)
    kinds: dict[str, list[str]] = {}
    tags = set()
    for name in sorted(set(a) & set(b)):
        if a[name] != b[name]:
            tags.update(m.decode() for m in GENERATOR.findall(b[name]))
            kinds.setdefault(kind(name, a[name], b[name]), []).append(name)
    shown = [n for k, names in sorted(kinds.items()) if k != "generator meta tag only" for n in names]
    return {
        "files_in_reference": len(a),
        "files_in_other": len(b),
        "identical": sum(1 for n in set(a) & set(b) if a[n] == b[n]),
        "only_in_reference": sorted(set(a) - set(b)),
        "only_in_other": sorted(set(b) - set(a)),
        "differing_by_kind": {k: len(names) for k, names in sorted(kinds.items())},
        "generator_tag": {
            "reference": sorted({m.decode() for data in a.values() for m in GENERATOR.findall(data)}),
            "other": sorted(tags),
        },
        "differences": [
            {"file": n, "kind": next(k for k, names in kinds.items() if n in names),
             "first_difference": first_difference(GENERATOR.sub(b"", a[n]), GENERATOR.sub(b"", b[n]))}
            for n in shown[:MAX_SHOWN]
        ],
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("reference", type=Path, help="the site MkDocs built (site/)")
    parser.add_argument("other", type=Path, help="the same site built by another generator")
    parser.add_argument("--generator", required=True, help='the other generator, e.g. "ProperDocs 1.6.7"')
    parser.add_argument("--out", type=Path, help="where to write the JSON report")
    args = parser.parse_args(argv)
    for site in (args.reference, args.other):
        if not (site / "index.html").is_file():
            parser.error(f"{site} holds no built site (no index.html)")
    report = {"generator": args.generator, "reference": str(args.reference), "other": str(args.other),
              **compare(args.reference, args.other)}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"{args.generator} vs {args.reference}: {report['identical']} files identical; differing, by kind: "
          f"{report['differing_by_kind']}; {len(report['only_in_reference'])} only in {args.reference}, "
          f"{len(report['only_in_other'])} only in {args.other}")
    for d in report["differences"]:
        print(f"  {d['file']} ({d['kind']}):\n    " + "\n    ".join(d["first_difference"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
