"""docs/assets/js/live-text-model.js in Node, no browser: its pure functions, each taken from the file as written.

The page's behaviour is tested in a browser on the built site (tests/browser/test_live_text_model.py); these
checks need neither, so they run with the unit tests.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from lessons_src.lab.text_model import encode

JS = Path(__file__).resolve().parents[2] / "docs" / "assets" / "js" / "live-text-model.js"


def page_functions(*names: str) -> str:
    """The source of the page's one-line functions ``names``, as the file has them."""
    source = JS.read_text(encoding="utf-8")
    found = {name: re.search(rf"^ *function {name}\(.*\}}$", source, re.M) for name in names}
    missing = [name for name, m in found.items() if m is None]
    assert not missing, f"{JS.name} has no one-line function {missing}"
    return "\n".join(m.group(0) for m in found.values() if m)


def node(script: str, expression: str, arg: object) -> object:
    """``expression`` evaluated in Node after ``script``, with ``arg`` (passed as JSON) in the variable ``arg``."""
    script = f"const arg = JSON.parse(process.argv[1]);\n{script}\nprocess.stdout.write(JSON.stringify({expression}));"
    done = subprocess.run(["node", "-e", script, json.dumps(arg)], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def test_a_link_s_line_ends_are_the_text_box_s() -> None:
    """A textarea holds LF only (CRLF and a lone CR become LF): the text from a link is normalised the same way."""
    texts = ["a\r\nb", "a\rb", "a\n\rb", "a\r\r\nb\r", "tab\tand\nnewline"]
    got = node(page_functions("normalizeLineEnds"), "arg.map(normalizeLineEnds)", texts)
    assert got == ["a\nb", "a\nb", "a\n\nb", "a\n\nb\n", "tab\tand\nnewline"]


def test_the_page_s_bytes_are_text_model_encode_s_with_lone_surrogates() -> None:
    texts = ["a\ud800b", "\udc00\ud800", "\ud83d\ude42", "héllo wörld"]  # json.dumps keeps them as \ud800 escapes
    got = node("const encoder = new TextEncoder();\n" + page_functions("encode"), "arg.map(encode)", texts)
    assert got == [encode(t).tolist() for t in texts]
