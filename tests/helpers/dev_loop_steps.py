"""Builds a tiny project as ``make serve`` does, one edit after another, for tests/site/test_dev_cache.py.

    python tests/helpers/dev_loop_steps.py PROJECT KEY

PROJECT holds the tiny project (``mkdocs.yml``, ``docs/``) and its own package, ``pkg/fixmod.py``, which the
pages' blocks import and every block's run appends a line to ``runs.log``. In ONE process, as ``mkdocs serve
--dirty`` does (the configuration loaded afresh, a dirty build into the same folder), it builds, makes the
next edit, builds again, ...; ``python tests/helpers/dev_loop_steps.py PROJECT KEY again``, a second process
(tests/site/test_dev_cache.py starts it after the first has ended), builds once more on the same cache, as the
next ``make serve`` does. KEY: ``real`` (dev_cache.block_key) or ``naive`` (a block's source alone: the first
three edits only, no new serve). Prints one JSON object: per step, each page's printed results and how many blocks
ran.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


INDEX = """# First heading

Some prose.

```python exec="on" session="s"
from fixmod import value, note
note()
x = value()
```

```python exec="on" session="s" result="text"
from fixmod import note
note()
print("x is", x)
```
"""
OTHER = """# Other

```python exec="on" result="text"
from fixmod import value, note
note()
print("other is", value())
```
"""
PACKAGE = """def value():
    return 1


def note():
    import pathlib

    with open(pathlib.Path(__file__).parent.parent / "runs.log", "a") as f:
        f.write("ran\\n")
"""

# name, file (from PROJECT), old text, new text
EDITS = [
    ("prose", "docs/index.md", "# First heading", "# First heading, edited"),
    ("package", "pkg/fixmod.py", "return 1", "return 2"),
    ("earlier block", "docs/index.md", "x = value()", "x = value() * 10"),
    ("later block", "docs/index.md", 'print("x is", x)', 'print("x =", x)'),
]


def naive_key(fingerprint: str, page: str, earlier: list[str], block: str) -> str:
    return hashlib.sha256(block.encode()).hexdigest()


def results(project: Path) -> dict[str, object]:
    site = project / "site"
    pages = {}
    for page in ("index", "other"):
        text = (site / ("index.html" if page == "index" else "other/index.html")).read_text(encoding="utf-8")
        pages[page] = {"heading": "First heading, edited" in text,
                       "printed": re.findall(r"(?:x is|x =|other is)\s*(?:<[^>]*>)*\s*(\d+)", text)}
    log = project / "runs.log"
    return {"pages": pages, "ran": log.read_text().count("ran") if log.exists() else 0}


def steps(project: Path, key: str, edits: list[tuple[str, str | None, str, str]]) -> dict[str, object]:
    import dev_cache
    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    if key == "naive":  # one folder for every output, each under its source's hash
        dev_cache.KEY.update({"of": naive_key, "folder": lambda: "naive"})
    out = {}
    for name, file, old, new in edits:
        if file:
            path = project / file
            text = path.read_text(encoding="utf-8")
            assert old in text, (file, old)
            path.write_text(text.replace(old, new), encoding="utf-8")
        (project / "runs.log").unlink(missing_ok=True)
        build(load_config(str(project / "mkdocs.yml")), dirty=True)
        out[name] = results(project)
    return out


def main() -> None:
    project, key, *again = sys.argv[1:]
    sys.path[:0] = [str(ROOT / "tools" / "site_build"), str(Path(project) / "pkg")]
    if again:  # a new `make serve`: a fresh site folder, the same cache, no edit
        shutil.rmtree(Path(project) / "site")
        print(json.dumps({"new serve": steps(Path(project), key, [("new serve", None, "", "")])["new serve"]}))
        return
    if key == "naive":  # enough to show the checks that catch it: no later edit, no new serve
        print(json.dumps(steps(Path(project), key, [("first build", None, "", ""), *EDITS[:3]])))
        return
    print(json.dumps(steps(Path(project), key, [("first build", None, "", ""), *EDITS])))


if __name__ == "__main__":
    main()
