"""Every Python block the site shows runs with the published wheel alone, and pastes into Python's prompt.

The site promises (home page, Start here, Get the code) that every shown block runs once the package is
installed. The shown blocks are taken from the lesson sources in docs/ (the built HTML of markdown-exec's blocks
does not say which language a block is): every ```python fence that is shown to the reader, that is, a plain
fence, or an executed one (exec="on") with a source= option; `--8<--` includes are expanded as the build does.
Hidden blocks (exec="on" without source=) are not shown; notebooks run as notebooks, and bash and console
(`pycon`) blocks are not Python: they are left out.

* **Run with the wheel alone.** The wheel this checkout builds (tools/package/build_wheel.py, the site build's
  cache) is installed into an environment of its own, kept under .cache/snippet-venv/ by the wheel's hash, that
  borrows the project's installed dependencies, torch and every extra's, but not its checkout
  (tools/package/wheel_env.py). Each block runs there from an empty folder outside the repository, alone, as a
  reader who copies it runs it, in a child forked from one warm process (snippet_runner.py), so `import torch`
  is paid once. A whole package file shown on its page (`--8<-- "lessons_src/masks.py"`) runs as the installed
  module, `python -m lessons_src.masks`.
* **Or continue the block above, and say so.** A block that goes on from the shown block above it begins with
  the line `# continues the block above` (tools/site_build/copy_chains.py), shares that block's `session=`, and
  its copy button copies the chain: the block above (with its own chain), then it. It runs after that chain,
  and what the built page's button copies (its `data-copy`) must be that chain. A block that fails alone and
  does not say so fails the test: a reader who copies it gets a NameError.
* **Print what the page printed.** With a built site/, what a block prints must equal what its page shows under
  it, numbers followed by a time unit masked (timings differ from run to run), and every number of a block that
  times something (it may print a table of times without units).
* **Say which extra it needs.** A block that imports a module only one of the package's extras installs (the
  optional dependencies in pyproject.toml) names an extra that installs it in its first line, a comment the
  reader copies with the code: `# needs: pip install "mha-computed[toy]"`.
* **Paste into the prompt.** Each block is fed line by line to Python's interactive console, as pasting does; a
  compound statement followed directly by a dedented line, or a blank line inside an indented body, stops it
  with SyntaxError. A whole package file is a file (its page says so), not a paste: it is left out.
"""

from __future__ import annotations

import code
import html
import json
import os
import re
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib.metadata import packages_distributions
from pathlib import Path
from typing import TYPE_CHECKING

import copy_chains
import pytest
import wheel_env
from build_wheel import build_wheel
from copy_chains import CONTINUES
from shown_blocks import BLOCKS, Block, chain, copied, page_blocks

ROOT = Path(__file__).resolve().parents[2]

if TYPE_CHECKING:
    from collections.abc import Iterator

DOCS, SITE = ROOT / "docs", ROOT / "site"
TIMEOUT_S = 60
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
_EXTRA_NOTE = re.compile(rf'pip install "{re.escape(PROJECT["name"])}\[([\w,]+)\]"')
# A number with a time unit (ms, s, µs, ...) or a speed-up (3.2x, 3.2×) after it: timings differ run to run. A
# block that times something (_TIMED) may print them in a table without units: all its numbers are masked.
_TIMING = re.compile(r"\d[\d,.]*(?:e[-+]?\d+)?\s?(?:ns|µs|us|ms|s|sec|seconds|x|×)(?!\w)")
_TIMED = re.compile(r"perf_counter|median_times|timeit|time\.time\(")
_NUMBER = re.compile(r"\s*[-+]?\d[\d,.]*(?:e[-+]?\d+)?")
SCRIPTS = [b for b in BLOCKS if not b.whole_file]


def unmarked_or_misplaced(block: Block, blocks: list[Block] = BLOCKS) -> str | None:
    """Why a block that says it continues the block above cannot (None: it can, or it does not say so)."""
    if not block.continues:
        return None
    links = chain(block, blocks)
    if len(links) == 1:
        return f"{block.where} begins {CONTINUES!r}, and no shown Python block is above it on its page"
    if links[-2].whole_file or links[-2].session != block.session:
        return (f"{block.where} continues {links[-2].where}, which the build runs apart from it: give both the same "
                "session= (a whole package file cannot be continued)")
    return None


def test_the_site_shows_python_blocks() -> None:
    assert len(SCRIPTS) >= 100 and len(BLOCKS) > len(SCRIPTS)


# -- running them with the wheel alone -----------------------------------------------------------------------


@dataclass
class Reply:
    returncode: int
    stdout: list[str]  # what each block of the chain printed
    stderr: str
    imported: list[str]  # the top-level modules the last block imported first


@cache
def installed_python() -> Path:
    """The python of an environment holding this checkout's wheel (built and installed once per wheel)."""
    with tempfile.TemporaryDirectory() as tmp:
        wheel = build_wheel(Path(tmp), cache=ROOT / ".cache" / "wheels")
        return wheel_env.cached(wheel, ROOT / ".cache" / "snippet-venv")


def reader_env(home: str) -> dict[str, str]:
    """The test's environment without what points Python at the repository (PYTHONPATH) or at pytest."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "PYTHON", "VIRTUAL_ENV"))}
    env.update(HOME=home, MPLBACKEND="Agg", PYTHONWARNINGS="error::DeprecationWarning")
    return env


class Runner:
    """snippet_runner.py in the wheel's environment: each chain in a child forked from a warm parent."""

    def __init__(self, home: Path) -> None:
        self.proc = subprocess.Popen(
            [str(installed_python()), str(ROOT / "tests" / "helpers" / "snippet_runner.py")], cwd=home,
            env=reader_env(str(home)), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )

    def run(self, *blocks: str) -> Reply:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"blocks": blocks, "timeout": TIMEOUT_S}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"the block runner died (exit status {self.proc.poll()})"
        return Reply(**json.loads(line))

    def close(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=TIMEOUT_S)
        self.proc.stdout.close()


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runner]:
    r = Runner(tmp_path_factory.mktemp("reader"))
    yield r
    r.close()


def extra_modules() -> dict[str, set[str]]:
    """Each extra of pyproject.toml and the top-level modules its distributions install (``lab``: all of them)."""
    modules: dict[str, set[str]] = {}
    for module, dists in packages_distributions().items():
        for dist in dists:
            modules.setdefault(dist.lower().replace("_", "-"), set()).add(module)
    extras = PROJECT["optional-dependencies"]
    own = f"{PROJECT['name']}["

    def of(extra: str) -> set[str]:
        found: set[str] = set()
        for req in extras[extra]:
            if req.startswith(own):
                found |= {m for e in req[len(own) :].split("]")[0].split(",") for m in of(e)}
            else:
                found |= modules.get(re.split(r"[<>=!~;\[ ]", req)[0].lower().replace("_", "-"), set())
        return found

    return {extra: of(extra) for extra in extras}


EXTRA_MODULES = extra_modules()
# Extras whose modules the project's environment leaves out on purpose (Triton: 600 MB, `make test-triton` installs
# it elsewhere): a block that needs one must fail with the package's message naming it, and its page must name it.
ABSENT_EXTRAS = {"triton"}


def missing_extra(block: Block, imported: list[str]) -> str | None:
    """What ``block``'s first line should say, if the modules it imported need an extra that line does not name (the
    first line of what its button copies: a block that continues the block above says it there)."""
    needed = {m for m in imported if any(m in mods for mods in EXTRA_MODULES.values())}
    first = chain(block)[0].code.lstrip().partition("\n")[0]
    named = {e for m in _EXTRA_NOTE.finditer(first) for e in m.group(1).split(",")} if first.startswith("#") else set()
    covered = set().union(*(EXTRA_MODULES.get(e, set()) for e in named))
    if needed <= covered:
        return None
    fits = sorted((e for e, mods in EXTRA_MODULES.items() if needed <= mods), key=lambda e: len(EXTRA_MODULES[e]))
    return (f"it imports {sorted(needed)}, which the extra {fits[0]!r} installs, and its first line does not say "
            f'so; begin the block with: # needs: pip install "{PROJECT["name"]}[{fits[0]}]"')


_PAGE_BLOCK = re.compile(
    r'<div class="language-python highlight"(?: data-copy="(?P<copy>[^"]*)")?><pre>(?P<source>.*?)</pre></div>\s*'
    r'(?:<div class="language-text highlight[^"]*"><pre>(?P<printed>.*?)</pre></div>)?', re.S)


def _text(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


@dataclass(frozen=True)
class Built:
    """A Python block as built in site/: its source, what it printed (empty if nothing), what its button copies
    in place of its source (its chain; None: its source)."""

    source: str
    printed: str
    copy: str | None


@cache
def built_blocks(page: str) -> list[Built]:
    """Each Python block of ``page`` as built in site/."""
    rel = Path(page).with_suffix("")
    built = SITE / (rel.parent if rel.name == "index" else rel) / "index.html"
    return [Built(_text(m.group("source")).strip(), _text(m.group("printed") or ""),
                  None if m.group("copy") is None else html.unescape(m.group("copy")))
            for m in _PAGE_BLOCK.finditer(built.read_text(encoding="utf-8"))]


def masked(printed: str, *, timed: bool = False) -> list[str]:
    """The printed lines with timings masked (with ``timed``, every number, and the spaces that align it)."""
    mask = (lambda line: _NUMBER.sub(" #", line)) if timed else (lambda line: _TIMING.sub("#", line))
    return [mask(line).rstrip() for line in printed.strip("\n").splitlines()]


def built_block(block: Block) -> Built:
    for built in built_blocks(block.page):
        if built.source == block.shown:
            return built
    raise AssertionError(f"{block.where} is not on its built page site/{block.page}: is site/ stale?")


def fails_as_copied(block: Block, reply: Reply, blocks: list[Block] = BLOCKS) -> str | None:
    """Why ``block``, run as a reader who copies it runs it (``reply``), fails the test (None: it passes)."""
    if reply.returncode == 0:
        return None
    if len(chain(block, blocks)) > 1:
        return (f"the block {block.where} fails with the installed wheel alone, from an empty folder, after the "
                f"blocks above it that it continues:\n{copied(block, blocks)}\n---\n{reply.stderr[-3000:]}")
    return (f"the block {block.where} fails when copied alone into a fresh `python` with the installed wheel, from "
            f"an empty folder:\n{block.code}\n---\n{reply.stderr[-3000:]}\n---\nmake it run on its own (its imports, "
            "its seed, its set-up: set-up a reader needs is a function of lessons_src.lab), or, if it goes on from "
            f"the block above, begin it with the line {CONTINUES!r} (its copy button then copies both)")


@pytest.mark.parametrize("block", BLOCKS, ids=[b.where for b in BLOCKS])
def test_block_runs_with_the_wheel_alone(block: Block, runner: Runner) -> None:
    """It runs alone (or after the blocks it says it continues), says which extra it needs, prints what its page
    printed, and its button copies its chain (with a built site/)."""
    if message := unmarked_or_misplaced(block):
        pytest.fail(message)
    reply = runner.run(*(b.code for b in chain(block)))
    absent = next((e for e in ABSENT_EXTRAS if f'pip install "{PROJECT["name"]}[{e}]"' in reply.stderr), None)
    if reply.returncode != 0 and absent:  # an extra this environment does not install: the block must say so
        page = (DOCS / block.page).read_text(encoding="utf-8")
        named = f'"{PROJECT["name"]}[{absent}]"' in page
        assert named, f"{block.where} needs the [{absent}] extra; name it on its page"
        pytest.skip(f"needs the [{absent}] extra, which make test does not install (make test-triton runs it)")
    if message := fails_as_copied(block, reply):
        pytest.fail(message)
    if message := missing_extra(block, reply.imported):
        pytest.fail(f"the block {block.where} needs an extra: {message}")
    if block.whole_file or not (block.prints_text or block.continues) or not SITE.joinpath("index.html").exists():
        return
    built = built_block(block)
    want = copied(block) if block.continues else None
    assert built.copy == want, f"the copy button of {block.where} copies {built.copy!r}, not its chain {want!r}"
    if not block.prints_text:
        return
    timed = _TIMED.search(block.code) is not None
    assert masked(reply.stdout[-1], timed=timed) == masked(built.printed, timed=timed), (
        f"the block {block.where} prints, with the wheel alone, what its page did not (left: now; right: page)")


def test_blocks_see_the_installed_wheel_only(runner: Runner) -> None:
    """The repository is not importable: lessons_src is the wheel's, tools/ is not on the path, the folder is
    empty and outside the repository."""
    reply = runner.run(
        "import importlib.util, json, os, sys\nimport lessons_src\n"
        "print(json.dumps({'file': lessons_src.__file__, 'cwd': os.getcwd(), 'files': os.listdir(),"
        " 'tools': [importlib.util.find_spec(m) is not None for m in ('live_text_model', 'code_pages', 'tools')],"
        " 'path': sys.path}))\n"
    )
    assert reply.returncode == 0, reply.stderr
    seen = json.loads(reply.stdout[0])
    assert Path(seen["file"]).is_relative_to(installed_python().parents[1]), seen["file"]
    assert not Path(seen["cwd"]).is_relative_to(ROOT) and seen["files"] == []
    assert seen["tools"] == [False, False, False]
    assert str(ROOT) not in seen["path"] and seen["path"][0] == ""


def test_a_block_that_needs_earlier_state_is_caught(runner: Runner) -> None:
    """The harness really runs each chain alone: state from another request, or an import it left out, is not
    there (the runner's parent has imported torch, the child sees no name of it); a failure is reported; a
    chain's blocks share one namespace and each prints into its own output."""
    runner.run("import torch\nfrom lessons_src import MultiHeadAttention\nmha = MultiHeadAttention(8, 2)\n")
    for block, error in (("print(mha(x).shape)\n", "NameError"), ("torch.zeros(1)\n", "NameError"),
                         ("raise SystemExit('stopped')\n", "stopped")):
        reply = runner.run(block)
        assert reply.returncode != 0 and error in reply.stderr, (block, reply)
    reply = runner.run("x = 6\nprint('first')\n", "print(x * 7)\n")
    assert (reply.returncode, reply.stdout) == (0, ["first\n", "42\n"])


SAMPLE_PAGE = """\
```python exec="on" source="above" result="text" session="s"
x = 6
```

```python exec="on" source="above" result="text" session="s"
# continues the block above
x += 1
print(x)
```

```python exec="on" source="above" result="text" session="s"
# Continues the block above: x is 7.
print(x * 6)
```

```python exec="on" source="above" result="text" session="s"
print(x * 6)
```

```python exec="on" source="above" result="text" session="t"
# continues the block above
print(x)
```
"""


def test_a_block_runs_alone_unless_it_says_it_continues(runner: Runner) -> None:
    """The checker's wrong answers: a block that needs the block above and does not say so is refused (it runs
    alone and fails), as is a marker with nothing above or above in another session; a marked chain runs whole
    and passes, and its copy is the chain."""
    first, second, third, unmarked, elsewhere = blocks = page_blocks("sample.md", SAMPLE_PAGE)
    assert [b.continues for b in blocks] == [False, True, True, False, True]
    assert chain(unmarked, blocks) == [unmarked] and chain(third, blocks) == [first, second, third]
    reply = runner.run(*(b.code for b in chain(unmarked, blocks)))
    assert "NameError" in reply.stderr and CONTINUES in (fails_as_copied(unmarked, reply, blocks) or "")
    reply = runner.run(*(b.code for b in chain(third, blocks)))
    assert fails_as_copied(third, reply, blocks) is None and reply.stdout == ["", "7\n", "42\n"]
    assert copied(third, blocks) == "x = 6\n\n# continues the block above\nx += 1\nprint(x)\n\n" + third.code.strip()
    assert paste_error(copied(third, blocks)) is None
    assert unmarked_or_misplaced(third, blocks) is None
    assert "session=" in (unmarked_or_misplaced(elsewhere, blocks) or "")
    alone = page_blocks("sample.md", SAMPLE_PAGE.partition("\n\n")[2])[0]
    assert "no shown Python block is above it" in (unmarked_or_misplaced(alone, [alone]) or "")


def test_the_build_gives_a_continued_block_its_chain_to_copy() -> None:
    """The post-build step writes what test_block_runs_with_the_wheel_alone expects the button to copy: the chain
    of the sample page, rendered as markdown-exec renders it (highlighted, a printed result between blocks)."""
    blocks = page_blocks("sample.md", SAMPLE_PAGE)[:3]
    highlighted = [html.escape(b.code).replace("x", '<span class="n">x</span>') for b in blocks]
    printed = '<div class="language-text highlight result"><pre><code>7\n</code></pre></div>\n'
    rendered = [f'<div class="language-python highlight"><pre><span></span><code>{code}\n</code></pre></div>{printed}'
                for code in highlighted]
    built = copy_chains.chains("".join(rendered))
    copies = [None if m.group("copy") is None else html.unescape(m.group("copy")) for m in _PAGE_BLOCK.finditer(built)]
    assert copies == [None, copied(blocks[1], blocks), copied(blocks[2], blocks)]
    assert copy_chains.chains(built) == built  # the step can run twice
    with pytest.raises(copy_chains.ChainError):
        copy_chains.chains("".join(rendered[1:]))


def test_the_runner_agrees_with_a_fresh_interpreter(runner: Runner, tmp_path: Path) -> None:
    """The same block, run by the runner and by a new `python` of the same environment, prints the same: a seeded
    draw (the RNG is untouched before the fork), the thread count, the default dtype, the modules it imported."""
    block = ("import torch\ntorch.manual_seed(0)\nprint(torch.randn(3).tolist(), torch.get_num_threads(),"
             " torch.get_default_dtype())\n")
    fresh = subprocess.run([str(installed_python()), "-c", block], cwd=tmp_path, env=reader_env(str(tmp_path)),
                           capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    forked = runner.run(block)
    assert fresh.returncode == forked.returncode == 0, (fresh.stderr, forked.stderr)
    assert forked.stdout == [fresh.stdout]
    assert "safetensors" in runner.run("import safetensors.torch\n").imported
    assert "transformers" in runner.run("from transformers import Qwen3Config\n").imported  # preloaded, still seen


def test_extras_are_read_from_pyproject() -> None:
    assert {"safetensors"} <= EXTRA_MODULES["toy"] and "matplotlib" in EXTRA_MODULES["plot"]
    assert EXTRA_MODULES["lab"] >= EXTRA_MODULES["toy"] | EXTRA_MODULES["plot"] | EXTRA_MODULES["minilm"]
    needy = Block("p.md", 1, '# needs: pip install "mha-computed[minilm]"\nimport safetensors', None)
    assert missing_extra(needy, ["safetensors", "torch"]) is None
    said_lower = Block("p.md", 1, 'import safetensors  # pip install "mha-computed[toy]"', None)  # not a comment line
    assert "'toy'" in (missing_extra(said_lower, ["safetensors", "torch"]) or "")
    assert missing_extra(Block("p.md", 1, "import torch", None), ["torch", "numpy"]) is None


def test_timings_are_masked_and_nothing_else() -> None:
    assert masked("decode 1.25 ms, 3.2x faster, 12 s\nrows 12, bytes 4,096\n") == [
        "decode #, # faster, #", "rows 12, bytes 4,096"]
    assert masked("MHA    5.74   1.0x\nMQA   11.20", timed=True) == ["MHA # #x", "MQA #"]
    assert masked("MHA   15.01   1.2x\nMQA    1.52", timed=True) == ["MHA # #x", "MQA #"]


# -- pasting them into Python's prompt ---------------------------------------------------------------------------


class Prompt(code.InteractiveConsole):
    """Python's interactive prompt fed a paste line by line: it compiles as `python` does and runs nothing."""

    def __init__(self) -> None:
        super().__init__(filename="<stdin>")
        self.error: BaseException | None = None

    def runcode(self, code: object) -> None:
        pass

    def showsyntaxerror(self, filename: str | None = None, **kwargs: object) -> None:
        self.error = self.error or sys.exc_info()[1]


def paste_error(source: str) -> str | None:
    """Where the prompt stops a paste of ``source`` with a SyntaxError, or None."""
    prompt = Prompt()
    for n, line in enumerate([*source.splitlines(), ""], start=1):  # the last Enter ends the last statement
        prompt.push(line)
        if prompt.error is not None:
            return f"line {n}, {line!r}: {prompt.error}"
    return None


@pytest.mark.parametrize("block", SCRIPTS, ids=[b.where for b in SCRIPTS])
def test_block_pastes_into_the_prompt(block: Block) -> None:
    error = paste_error(copied(block) if block.continues else block.code)
    assert error is None, (
        f"the block {block.where}, pasted into `python`, stops at {error}: at the prompt a blank line ends an "
        "indented body, and a dedented line must follow one (put a blank line after a top-level compound "
        "statement, none inside its body)"
    )


def test_the_prompt_check_stops_where_python_does() -> None:
    assert paste_error("for i in range(2):\n    print(i)\nprint('done')\n") is not None
    assert paste_error("def f():\n    x = 1\n\n    return x\n") is not None
    assert paste_error("for i in range(2):\n    print(i)\n\nprint('done')\nif i:\n    pass\nelse:\n    pass\n") is None
    assert paste_error('x = """a\n\nb"""\nprint(x)\n') is None
