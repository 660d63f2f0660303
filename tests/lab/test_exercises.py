"""The exercises' checker: the answers pass, the stubs fail, every known mistake is named as itself.

The mutation matrix runs each catalogued wrong variant through the checker as if a learner had written it,
and requires the diagnosis to be that variant and no other: this is what proves that the cases tell the
mistakes apart (several coincide with one head, one KV head, n_rep = 1, T = S, T = 1 or a running maximum
that never changes). The command line is run as a learner runs it, on files with mistakes of every kind.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import io
import json
import math
import os
import pickle
import re
import select
import signal
import subprocess
import sys
import textwrap
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import pytest
import torch

from lessons_src.lab.exercises import (
    EXERCISES,
    MISCONCEPTIONS,
    VARIANTS,
    check,
    check_file,
    shown,
    solutions,
    stubs,
)
from lessons_src.lab.exercises.__main__ import main
from lessons_src.lab.exercises.checker import WRAP, LearnerFileError, check_function, load_learner_file

if TYPE_CHECKING:
    from collections.abc import Callable

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")
MISTAKE_TABLE = json.loads((ROOT / "docs" / "_data" / "exercise_mistakes.json").read_text(encoding="utf-8"))["pairs"]
SHOWN_IMPORTS = {"math", "torch", "torch.nn.attention.flex_attention"}  # from torch: Tensor; FlexAttention
REQUIRED_MISCONCEPTIONS = {  # the issue's list: each must be in the catalogue with a real wrong function
    "view_without_transpose", "scale_by_d_model", "inverted_polarity", "top_left_causal", "repeat_not_interleave",
    "softmax_over_queries", "forgot_w_o", "nan_rows", "off_by_one_cache", "no_rescale", "missing_scale", "scale_by_e",
    "heads_not_head_major",
}
REQUIRED_EXERCISES = {
    "split_heads", "merge_heads", "attention_scores", "causal_mask", "padding_mask", "masked_softmax",
    "mha_forward", "mha_param_count", "gqa_attention", "decode_step", "online_softmax", "absorb_query",
    "dimension_arithmetic",
}


@pytest.mark.parametrize("name", list(EXERCISES))
def test_the_answer_passes(name: str) -> None:
    result = check_function(name, getattr(solutions, name))
    assert result.passed, result.message


@pytest.mark.parametrize("name", list(EXERCISES))
def test_the_stub_fails_and_says_it_is_not_written(name: str) -> None:
    result = check_function(name, getattr(stubs, name))
    assert not result.passed
    assert result.status == "not written" and "NotImplementedError" in result.message


@pytest.mark.parametrize("name", list(EXERCISES))
def test_the_shown_solution_is_plain_torch_short_and_passes(name: str) -> None:
    """What the pages show a stuck learner: plain torch, at most 15 lines, checked against the package's answer."""
    fn = getattr(shown, name)
    source = inspect.getsource(fn)
    assert len(source.rstrip("\n").splitlines()) <= shown.MAX_LINES == 15, f"{name}'s shown solution:\n{source}"
    names = {n.id for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Name)}
    assert names.isdisjoint({"solutions", "lessons_src"} | set(vars(solutions)) - set(vars(shown)))
    namespace: dict[str, object] = {}
    exec(compile(SHOWN_HEADER + "\n" + textwrap.dedent(source), f"<shown {name}>", "exec"), namespace)
    result = check_function(name, namespace[name])  # runs alone after the module's imports, as the page prints it
    assert result.passed, result.message
    assert getattr(shown, name) is not getattr(solutions, name)


SHOWN_HEADER = ("import math\n\nimport torch\nfrom torch import Tensor\n"
                "from torch.nn.attention.flex_attention import AuxRequest, flex_attention\n")


def test_the_shown_solutions_import_only_math_and_torch() -> None:
    tree = ast.parse(Path(str(shown.__file__)).read_text(encoding="utf-8"))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "a relative import: shown.py must import nothing from lessons_src"
            imported.add(node.module or "")
    assert imported == SHOWN_IMPORTS, imported
    assert SHOWN_HEADER.strip() in Path(str(shown.__file__)).read_text(encoding="utf-8")


def _mistaken(name: str, changes: list[list[str]]) -> object:
    """The shown solution of ``name`` with a learner's mistake in it: each ``[old, new]`` replaces ``old``."""
    source = textwrap.dedent(inspect.getsource(getattr(shown, name)))
    for old, new in changes:
        assert old in source, f"{name}'s shown solution has no {old!r} to change"
        source = source.replace(old, new)
    from torch.nn.attention.flex_attention import AuxRequest, flex_attention

    namespace: dict[str, object] = {"math": math, "torch": torch, "Tensor": torch.Tensor, "AuxRequest": AuxRequest,
                                    "flex_attention": flex_attention}
    exec(compile(source, f"<{name} with a mistake>", "exec"), namespace)
    return namespace[name]


def test_the_mistake_table_is_every_exercise_and_mistake_the_catalogue_pairs() -> None:
    pairs = [(row["exercise"], row["mistake"]) for row in MISTAKE_TABLE]
    changes = [(row["exercise"], json.dumps(row["learner_change"])) for row in MISTAKE_TABLE]
    assert len(changes) == len(set(changes))
    assert set(pairs) == {(v.exercise, v.misconception) for v in VARIANTS}
    variants = {v.key: v for v in VARIANTS}
    for row in MISTAKE_TABLE:  # a row that writes the mistake one way of several names the variant that does
        if "variant" in row:
            assert row["variant"] in variants, f"no catalogued variant {row['variant']!r}"
            v = variants[row["variant"]]
            assert (v.exercise, v.misconception) == (row["exercise"], row["mistake"]), row
    repeated = {pair for pair in pairs if pairs.count(pair) > 1}
    assert all("variant" in row for row in MISTAKE_TABLE if (row["exercise"], row["mistake"]) in repeated)
    order = list(EXERCISES)
    assert [order.index(e) for e, _ in pairs] == sorted(order.index(e) for e, _ in pairs), "sorted by exercise"
    # the scale mistakes and the interleaved split in every exercise where they can occur
    for mistake in ("missing_scale", "scale_by_e", "scale_by_d_model"):
        assert {e for e, m in pairs if m == mistake} == {"attention_scores", "mha_forward", "gqa_attention",
                                                       "decode_step"}
    assert {e for e, m in pairs if m == "heads_not_head_major"} == {"split_heads", "merge_heads", "mha_forward",
                                                                    "absorb_query"}


@pytest.mark.parametrize("row", MISTAKE_TABLE, ids=[f"{r['exercise']}-{r['mistake']}" for r in MISTAKE_TABLE])
def test_each_exercise_and_mistake_pair_is_named(row: dict[str, object]) -> None:
    """A learner's version of the shown solution with the mistake in it is named as that mistake, and only it."""
    name, mistake = str(row["exercise"]), str(row["mistake"])
    fn = _mistaken(name, row["learner_change"])  # type: ignore[arg-type]
    result = check_function(name, fn)
    assert result.status == "wrong", result.message
    named = {v.misconception for v in VARIANTS if v.key in result.diagnosis}
    assert named == {mistake}, f"{name} with {mistake} named as {named}:\n{result.message}"
    assert f"Known mistake: {MISCONCEPTIONS[mistake].name}." in result.message
    flat = " ".join(result.message.split())
    ways = [v for v in VARIANTS if v.exercise == name]
    if "variant" in row:  # this way of writing the mistake is among those the message gives
        assert row["variant"] in result.diagnosis, f"{row['variant']} not in {result.diagnosis}:\n{result.message}"
        assert " ".join(next(v for v in ways if v.key == row["variant"]).what.split()) in flat
    # a way of writing it is stated as the learner's ("You ...") only when it is the one known way to that output
    stated = tuple(v.key for v in ways if f"You {' '.join(v.what.split())}." in flat)
    assert stated == (result.diagnosis if len(result.diagnosis) == 1 else ()), result.message


@pytest.mark.parametrize("variant", VARIANTS, ids=[v.key for v in VARIANTS])
def test_each_known_mistake_is_diagnosed_as_itself(variant: object) -> None:
    from lessons_src.lab.exercises.mistakes import Variant

    assert isinstance(variant, Variant)
    result = check_function(variant.exercise, variant.fn)
    assert result.status == "wrong", result.message
    # named as itself, and beside it only as the same mistake written another way that gives the same output
    named = {v.misconception for v in VARIANTS if v.key in result.diagnosis}
    assert variant.key in result.diagnosis and named == {variant.misconception}, (
        f"{variant.key} diagnosed as {result.diagnosis}:\n{result.message}")
    m = MISCONCEPTIONS[variant.misconception]
    flat = " ".join(result.message.split())  # the "Known mistake" and "Why" paragraphs are wrapped
    assert m.name in flat and m.lesson.path in result.message and variant.what in flat
    assert f"\n  Known mistake: {m.name}." in result.message
    lines = result.message.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("  Known mistake: "))
    end = next(i for i, line in enumerate(lines) if line.startswith("  Read: "))
    for line in lines[start:end]:  # wrapped at 72 columns, never inside a `code span`
        assert len(line) <= WRAP or line.split()[-1].endswith(("`", "`.")), f"{len(line)} columns: {line!r}"
        assert line.count("`") % 2 == 0, f"a code span broken across lines: {line!r}"


def test_the_catalogue_holds_the_exercises_and_mistakes_the_issue_lists() -> None:
    assert set(EXERCISES) >= REQUIRED_EXERCISES
    assert {v.misconception for v in VARIANTS} >= REQUIRED_MISCONCEPTIONS
    assert {v.misconception for v in VARIANTS} == set(MISCONCEPTIONS), "a misconception with no wrong function"
    assert len({v.key for v in VARIANTS}) == len(VARIANTS)
    for ex in EXERCISES.values():
        doc = ex.stub.__doc__ or ""
        assert "Shapes:" in doc or "Returns:" in doc, f"{ex.name}'s statement gives no shapes or return value"
        assert len(ex.hints) >= 2, f"{ex.name} needs progressive hints"


def test_first_case_already_separates_every_variant_from_the_answer() -> None:
    """Each exercise's first case avoids the shapes where mistakes coincide (H=1, T=S, T=1, ...)."""
    from lessons_src.lab.exercises.checker import _outputs, _same

    for v in VARIANTS:
        case = EXERCISES[v.exercise].cases()[0]
        if v.key in {"softmax_nan_rows", "softmax_renormalised_nan_rows", "online_nan_rows", "merge_nan_for_empty"}:
            continue  # these differ only on a fully masked row (two empty states), which a later case has
        assert not all(_same(a[1], b[1]) for a, b in zip(_outputs(v.fn, case), _outputs(
            getattr(solutions, v.exercise), case), strict=True)), v.key


def test_degenerate_shapes_would_hide_the_mistakes() -> None:
    """Why the cases are chosen: with one head, the reshape-only split is right; with T = S, top-left is right."""
    from lessons_src.lab.exercises.mistakes import _causal_top_left, _split_view_only

    x = torch.randn(1, 3, 4)
    assert torch.equal(_split_view_only(x, 1), solutions.split_heads(x, 1))
    assert torch.equal(_causal_top_left(4, 4), solutions.causal_mask(4, 4))
    assert not torch.equal(_causal_top_left(2, 5), solutions.causal_mask(2, 5))


def test_an_answer_from_scratch_passes_and_a_wrong_unknown_one_shows_the_first_difference() -> None:
    def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
        B, T, D = x.shape
        return x.reshape(B, T, num_heads, D // num_heads).permute(0, 2, 1, 3)

    assert check(split_heads, quiet=True).passed

    def attention_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return q @ k.transpose(-2, -1) / k.shape[-2] ** 0.5  # divides by sqrt(S), the key count: not catalogued

    result = check(attention_scores, quiet=True)
    assert result.status == "wrong" and result.diagnosis == ()
    assert "first differs at index [0, 0, 0, 0]: yours" in result.message and "expected" in result.message
    assert "hints attention_scores" in result.message
    # an unknown constant factor is still recognised as one: case 1 has E = 4, S = 5, so yours = expected * 2 / sqrt(5)
    flat = " ".join(result.message.split())
    assert f"Every value of yours is the expected one times {2 / 5**0.5:.4g}: a constant factor" in flat


def test_the_block_watch_s_examples_hold() -> None:
    import doctest

    from lessons_src.lab.exercises import blocks

    assert doctest.testmod(blocks).attempted == 3 and not doctest.testmod(blocks).failed


def test_a_right_masked_softmax_written_as_softmax_times_the_mask_renormalised_passes() -> None:
    """Equal to the answer: a softmax over every key, the hidden ones zeroed, divided by the sum where it is not 0."""
    def masked_softmax(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        p = torch.softmax(scores, dim=-1) * mask
        total = p.sum(dim=-1, keepdim=True)
        return p / torch.where(total > 0, total, 1.0)

    assert check(masked_softmax, quiet=True).passed


def test_an_online_softmax_must_work_block_by_block() -> None:
    """Issue 45: a softmax over whole rows, which ignores block_size, passed; one written block by block in
    another way than the shown solution's passes."""
    def online_softmax(x: torch.Tensor, block_size: int) -> torch.Tensor:
        lse = torch.full(x.shape[:-1], float("-inf"))  # running log of the sum of exp
        for block in torch.split(x, block_size, dim=-1):
            lse = torch.logaddexp(lse, torch.logsumexp(block, dim=-1))
        return torch.nan_to_num(torch.exp(x - lse[..., None]), nan=0.0)  # a row of only -inf: 0

    assert check(online_softmax, quiet=True).passed

    def online_softmax(x: torch.Tensor, block_size: int) -> torch.Tensor:  # type: ignore[no-redef]
        m = x.amax(dim=-1, keepdim=True)  # the whole row's maximum first: two passes, not one
        m = torch.where(m == float("-inf"), 0.0, m)
        e = torch.exp(x - m)
        return e / torch.where(e.sum(dim=-1, keepdim=True) > 0, e.sum(dim=-1, keepdim=True), 1.0)

    result = check(online_softmax, quiet=True)
    assert result.status == "wrong" and result.diagnosis == ("online_whole_rows",), result.message
    assert ("the value returned has the right values but was not computed block by block: your code took "
            "`amax` over 6 values of a row at once (block_size=2)") in result.message


def test_wrong_shape_dtype_signature_type_and_exceptions_get_messages() -> None:
    def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
        return x.view(x.shape[0], x.shape[1], num_heads, -1)  # forgot the transpose: wrong shape

    assert "has shape (2, 3, 2, 4), expected (2, 2, 3, 4)" in check(split_heads, quiet=True).message

    def causal_mask(T: int, S: int) -> torch.Tensor:
        return torch.ones(T, S).tril(S - T)

    assert "has dtype torch.float32, expected torch.bool" in check(causal_mask, quiet=True).message

    def merge_heads(y: torch.Tensor, num_heads: int) -> torch.Tensor:
        return y

    message = check(merge_heads, quiet=True).message
    assert "the checker calls merge_heads(y); yours is merge_heads(y, num_heads)" in message

    def mha_param_count(d_model: int, num_heads: int, num_kv_heads: int, bias: bool) -> float:
        return 4.0 * d_model**2

    assert "is a float (16384.0), expected an int" in check(mha_param_count, quiet=True).message

    def merge_attention_states(o1, lse1, o2, lse2):
        return o1 + o2  # the output alone, not the pair (output, lse)

    assert "the value returned is a Tensor, expected a tuple of 2" in check(merge_attention_states, quiet=True).message

    def merge_attention_states(o1, lse1, o2, lse2):
        o, lse = solutions.merge_attention_states(o1, lse1, o2, lse2)
        return o, lse[..., None]  # the right output, the lse with an extra axis

    assert "[1] has shape (1, 2, 3, 1), expected (1, 2, 3)" in check(merge_attention_states, quiet=True).message

    def padding_mask(lengths: list[int], S: int) -> torch.Tensor:
        return torch.arange(S) < lengths  # a list, not a tensor: raises

    message = check(padding_mask, quiet=True).message
    assert "your function raised on case 1 of 3" in message and "TypeError" in message
    assert "return torch.arange(S) < lengths" in message and "Traceback" not in message
    with pytest.raises(ValueError, match="not the name of an exercise"):
        check(lambda x: x)
    assert check("split_heads", 42, quiet=True).status == "error"


def _write(tmp_path: Path, name: str, code: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(code), encoding="utf-8")
    return path


def test_learner_file_is_loaded_in_a_fresh_module_without_the_answer(tmp_path: Path) -> None:
    path = _write(tmp_path, "mine.py", """
        import torch

        def split_heads(x, num_heads):
            B, T, D = x.shape
            return x.view(B, T, num_heads, D // num_heads).transpose(1, 2)
    """)
    module = load_learner_file(path)
    names = {k for k in vars(module) if not k.startswith("__")}
    assert names == {"torch", "split_heads"}
    assert check_file(path, "split_heads")[0].passed


def test_a_syntax_error_a_missing_function_and_a_crash_at_import_get_messages(tmp_path: Path) -> None:
    bad = _write(tmp_path, "bad.py", "def split_heads(x, num_heads)\n    return x\n")
    with pytest.raises(LearnerFileError, match=r"bad.py, line 1: syntax error"):
        load_learner_file(bad)
    crash = _write(tmp_path, "crash.py", "import torch\nx = torch.ones(2) @ torch.ones(3)\n")
    with pytest.raises(LearnerFileError, match=r"(?s)RuntimeError.*crash.py, line 2: x = torch.ones"):
        load_learner_file(crash)
    with pytest.raises(LearnerFileError, match="there is no file"):
        load_learner_file(tmp_path / "nowhere.py")
    other = _write(tmp_path, "other.py", "def splitheads(x, num_heads):\n    return x\n")
    (result,) = check_file(other, "split_heads")
    assert result.status == "missing"
    assert "defines no function named split_heads (it defines: splitheads)" in str(result)


def test_code_that_never_ends_is_stopped_with_the_line_it_was_on(tmp_path: Path) -> None:
    def causal_mask(T, S):  # type: ignore[no-untyped-def]
        while True:  # a learner's loop that never ends, swallowing every Exception
            try:  # noqa: SIM105 (written the way learners write it)
                T = T + 0
            except Exception:
                pass

    t0 = time.monotonic()
    result = check_function("causal_mask", causal_mask, time_limit=0.3)
    assert time.monotonic() - t0 < 5
    assert result.status == "error" and "ran for over 0.3 s on case 1 of" in result.message
    first = causal_mask.__code__.co_firstlineno
    stopped = re.search(r"and was stopped\n  at test_exercises\.py, line (\d+): ", result.message)
    assert stopped and first < int(stopped.group(1)) <= first + 5  # a line of the loop
    assert check_function("causal_mask", solutions.causal_mask, time_limit=0.3).passed  # a fast answer is untouched

    slow = _write(tmp_path, "slow.py", "import time\nwhile True:\n    time.sleep(0.01)\n")
    with pytest.raises(LearnerFileError, match=r"(?s)took over 0.3 s before any check and was stopped\n  at "
                                               r"\S*slow\.py, line [23]: .*if __name__ == "):
        load_learner_file(slow, time_limit=0.3)
    with pytest.raises(ValueError, match=r"time_limit must be None or a number of seconds from 0 to 3600 \(0: no "
                                         r"limit\); got -1"):
        check_function("causal_mask", solutions.causal_mask, time_limit=-1)


def test_a_loop_defined_in_a_notebook_cell_is_reported_in_the_cells_words() -> None:
    namespace: dict[str, object] = {}
    code = "def causal_mask(T, S):\n    while True:\n        T = T + 0\n"
    exec(compile(code, "/tmp/ipykernel_4242/1234567.py", "exec"), namespace)  # how Jupyter names a cell's code
    result = check_function("causal_mask", namespace["causal_mask"], time_limit=0.3)
    assert re.search(r"and was stopped\n  at your notebook cell, line [23]", result.message), result.message


def test_a_timer_already_running_is_left_alone() -> None:
    """The checker's limit is a wait for the thread the learner's code runs in: no signal, no timer."""
    fired: list[int] = []
    previous = signal.signal(signal.SIGALRM, lambda signum, frame: fired.append(signum))
    try:
        signal.setitimer(signal.ITIMER_REAL, 30)
        assert check_function("causal_mask", solutions.causal_mask, time_limit=5).passed
        left, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 0 < left <= 30  # still running
        assert signal.getsignal(signal.SIGALRM) is not None and not fired
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _main(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m lessons_src.lab.exercises ARGS`` as its ``main()`` in this process: the exit status and what
    it printed (read with ``contextlib.redirect_stdout``, so it works under ``capsys`` and in a forked child)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as stop:  # argparse's usage errors
            code = stop.code if isinstance(stop.code, int) else 1
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def _in_child(fn: Callable[[], T], timeout: float = 10) -> T:
    """``fn()`` in a child forked from this process (torch is imported already: it starts in milliseconds),
    killed after ``timeout`` seconds: a checker that hangs fails the test instead of hanging the suite."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: send what fn returned (or its error) and exit, skipping pytest's clean-up
        os.close(read)
        try:
            try:
                outcome: tuple[bool, object] = (True, fn())
            except BaseException:  # a SystemExit too: the test's failure, sent back
                outcome = (False, traceback.format_exc())
            with os.fdopen(write, "wb") as pipe:
                pickle.dump(outcome, pipe)
        finally:
            os._exit(0)
    os.close(write)
    try:
        with os.fdopen(read, "rb") as pipe:
            if not select.select([pipe], [], [], timeout)[0]:
                pytest.fail(f"still running after {timeout} s: the checker did not stop the learner's code")
            ok, value = pickle.load(pipe)
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert ok, value
    return value  # type: ignore[no-any-return]


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lessons_src.lab.exercises", *args], cwd=cwd, capture_output=True, text=True,
        check=False, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
    )


@pytest.mark.slow
def test_command_line_start_check_and_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first two runs are real `python -m lessons_src.lab.exercises` processes; the rest call its main()
    in this process (the same code after the interpreter starts, without a torch import each)."""
    proc = _cli("start", "mine.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    proc = _cli("check", "all", "mine.py", cwd=tmp_path)
    assert proc.returncode == 1 and f"0 of {len(EXERCISES)} exercises pass" in proc.stdout
    assert proc.stdout.count("not written yet") == len(EXERCISES) and "Traceback" not in proc.stdout + proc.stderr

    monkeypatch.chdir(tmp_path)
    _write(tmp_path, "done.py", "from lessons_src.lab.exercises.solutions import *  # noqa\n")
    proc = _main("check", "all", "done.py")
    assert proc.returncode == 0 and f"{len(EXERCISES)} of {len(EXERCISES)} exercises pass" in proc.stdout

    _write(tmp_path, "wrong.py", """
        import torch

        def gqa_attention(q, k, v):
            n_rep = q.shape[1] // k.shape[1]
            k, v = k.repeat(1, n_rep, 1, 1), v.repeat(1, n_rep, 1, 1)
            return torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-1) @ v
    """)
    proc = _main("check", "gqa_attention", "wrong.py")
    assert proc.returncode == 1 and "Known mistake: `repeat` instead of `repeat_interleave`" in proc.stdout
    assert "lessons/gqa-mqa/#a-silent-bug-repeat-instead-of-repeat_interleave" in proc.stdout

    _write(tmp_path, "broken.py", "def split_heads(x, num_heads):\n    return x.view(\n")
    proc = _main("check", "split_heads", "broken.py")
    assert proc.returncode == 2 and "syntax error" in proc.stderr and "Traceback" not in proc.stderr
    proc = _main("check", "no_such_exercise", "done.py")
    assert proc.returncode == 2 and "no exercise called 'no_such_exercise'" in proc.stderr
    _write(tmp_path, "loop.py", "def split_heads(x, num_heads):\n    while True:\n        pass\n")
    proc = _main("check", "split_heads", "loop.py", "--time-limit", "0.5")
    assert proc.returncode == 1 and "ran for over 0.5 s" in proc.stdout
    assert re.search(r"and was stopped\n  at loop\.py, line [23]: ", proc.stdout)
    proc = _main("hints", "online_softmax")
    assert proc.returncode == 0 and "Hint 2:" in proc.stdout


SWALLOWS_EVERYTHING = """\
import time


def split_heads(x, num_heads):
    while True:  # waits for something that never comes, and the bare except swallows everything
        try:
            time.sleep(0.01)
        except:  # noqa: E722
            continue
"""


def test_a_loop_that_swallows_every_exception_is_still_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 45: a bare `except: continue` caught the SIGALRM-raised stop, and `check` ran forever."""
    _write(tmp_path, "greedy.py", SWALLOWS_EVERYTHING)
    monkeypatch.chdir(tmp_path)
    t0 = time.monotonic()
    proc = _in_child(lambda: _main("check", "split_heads", "greedy.py", "--time-limit", "0.5"))
    assert time.monotonic() - t0 < 5
    assert proc.returncode == 1 and "FAILED split_heads: your function ran for over 0.5 s on case 1 of" in proc.stdout
    assert re.search(r"\n  at greedy\.py, line [5-9]: ", proc.stdout), proc.stdout
    assert "did not stop when told to" in proc.stdout and "goes on in the background" in proc.stdout


def test_a_function_that_calls_sys_exit_is_an_error_not_a_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 45: `sys.exit(0)` in a learner's function made `check all` print nothing and exit 0."""
    _write(tmp_path, "exits.py", """
        import sys

        from lessons_src.lab.exercises.solutions import causal_mask  # noqa: F401

        def split_heads(x, num_heads):
            sys.exit(0)
    """)
    monkeypatch.chdir(tmp_path)
    proc = _main("check", "all", "exits.py")
    assert proc.returncode == 1, proc
    assert re.search(r"FAILED split_heads: your function called sys\.exit\(0\) \(it raised SystemExit\) on case 1 "
                     r"of \d+: .*\n  at exits\.py, line 7: sys\.exit\(0\)", proc.stdout), proc.stdout
    assert "passed causal_mask" in proc.stdout and f"1 of {len(EXERCISES)} exercises pass" in proc.stdout
    _write(tmp_path, "quits.py", "import sys\n\nsys.exit('done')\n")
    with pytest.raises(LearnerFileError, match=r"running \S*quits\.py called sys\.exit\('done'\) \(it raised "
                                               r"SystemExit\) before any check\n  at \S*quits\.py, line 3"):
        load_learner_file(tmp_path / "quits.py")


@pytest.mark.parametrize("limit", ["nan", "inf", "1e300", "-2", "3601"])
def test_a_time_limit_that_is_no_number_of_seconds_is_refused_up_front(
    limit: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 45: `--time-limit nan` was accepted, and the failure was later blamed on a correct file."""
    _write(tmp_path, "done.py", "from lessons_src.lab.exercises.solutions import *  # noqa\n")
    monkeypatch.chdir(tmp_path)
    proc = _main("check", "causal_mask", "done.py", "--time-limit", limit)
    accepted = "a number of seconds from 0 to 3600 (0: no limit)"
    assert proc.returncode == 2 and f"--time-limit must be {accepted}; got {float(limit):g}" in proc.stderr, proc
    assert "done.py" not in proc.stderr
    with pytest.raises(ValueError, match=re.escape(f"time_limit must be None or {accepted}; got {float(limit):g}")):
        check_function("causal_mask", solutions.causal_mask, time_limit=float(limit))
    with pytest.raises(ValueError, match="time_limit must be None or"):
        check(solutions.causal_mask, quiet=True, time_limit=float(limit))


def test_a_notebook_is_checked_with_its_magics_and_check_calls_left_out(tmp_path: Path) -> None:
    cells = [
        "%pip install --quiet something\nimport torch\nfrom lessons_src.lab.exercises import check",
        "def causal_mask(T, S):\n    return torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T)",
        "check(causal_mask)",
        "def padding_mask(lengths, S):\n    return torch.arange(S) < lengths",
    ]
    nb = {"cells": [{"cell_type": "code", "source": c, "metadata": {}, "outputs": []} for c in cells],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / "mine.ipynb"
    path.write_text(json.dumps(nb), encoding="utf-8")
    ok, crash = check_file(path, "causal_mask")[0], check_file(path, "padding_mask")[0]
    assert ok.passed
    assert "mine.ipynb, code cell 4, line 2: return torch.arange(S) < lengths" in crash.message
    cells[1] = "def causal_mask(T, S)\n    return None"
    nb["cells"][1]["source"] = cells[1]
    path.write_text(json.dumps(nb), encoding="utf-8")
    with pytest.raises(LearnerFileError, match=r"mine\.ipynb, code cell 2, line 1: syntax error"):
        load_learner_file(path)


def _notebook(tmp_path: Path, *cells: str) -> Path:
    nb = {"cells": [{"cell_type": "code", "source": c, "metadata": {}, "outputs": []} for c in cells],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / "mine.ipynb"
    path.write_text(json.dumps(nb), encoding="utf-8")
    return path


NOTEBOOK_ANSWER = ("import torch\nfrom lessons_src.lab.exercises import check\n\n"
                   "def split_heads(x, num_heads):\n    B, T, D = x.shape\n"
                   "    return x.view(B, T, num_heads, D // num_heads).transpose(1, 2)")


@pytest.mark.parametrize("cell", [
    "%%bash\necho hello\nls -l | head -n 2",
    "%%writefile notes.txt\nnot Python: (",
    "torch.softmax?",
    "?torch.softmax\ntorch.tril??\nx = 1",
    "result = check(split_heads)",
    "print(check(split_heads))",
    "from lessons_src.lab.exercises import check as verify\nif True:\n    verify(split_heads).passed",
    "for _ in range(2):\n    check('split_heads', split_heads)",
], ids=["bash-cell", "writefile-cell", "help-after", "help-before", "assigned", "in-print", "aliased", "in-a-loop"])
def test_a_notebook_s_cell_magics_help_lines_and_checks_are_left_out(
    cell: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 45: a `%%bash` cell or a `torch.softmax?` line was a syntax error, though Jupyter runs them; and a
    check that was not a bare `check(...)` statement ran while the notebook loaded, so it printed twice."""
    path = _notebook(tmp_path, NOTEBOOK_ANSWER, cell, "def causal_mask(T, S):\n    return T @ S")
    (result,) = check_file(path, "split_heads")
    assert result.passed, result.message
    assert capsys.readouterr().out == "", "a check ran while the notebook was loaded"
    (crash,) = check_file(path, "causal_mask")  # the lines after the left-out ones are still counted right
    assert "mine.ipynb, code cell 3, line 2: return T @ S" in crash.message, crash.message


def test_every_lesson_link_names_a_heading_of_its_page() -> None:
    """Checked again on the built site (tests/site/test_exercise_pages.py); this catches a typo without a build."""
    import re

    from markdown.extensions.toc import slugify

    links = [ex.lesson for ex in EXERCISES.values()] + [m.lesson for m in MISCONCEPTIONS.values()]
    for link in links:
        text = (ROOT / "docs" / link.page).read_text(encoding="utf-8")
        anchors = set()
        for heading in re.findall(r"^#{1,6} (.+)$", text, flags=re.M):
            explicit = re.search(r"\{ *#([\w-]+)", heading)
            anchors.add(explicit.group(1) if explicit else slugify(heading, "-"))
        assert link.anchor in anchors, f"{link.page} has no heading with id {link.anchor!r}"


def test_the_kernel_exercises_answers_are_attentions() -> None:
    """The references of the three kernel exercises (issue 78) against attention itself: two tiles folded by
    ``flash_tile_step`` give ``attention()``'s output; ``causal_key_ends`` is the Triton kernel's bound,
    ``(i_block + 1) * block_q + S - T`` clamped into ``[0, S]``; ``lse_in_base_2`` is ``torch.logsumexp``."""
    from lessons_src import attention

    g = torch.Generator().manual_seed(0)
    T, S, E = 5, 7, 4
    q, k, v = torch.randn(T, E, generator=g), torch.randn(S, E, generator=g), torch.randn(S, E, generator=g)
    scores = (q @ k.T / E**0.5).masked_fill(~torch.ones(T, S, dtype=torch.bool).tril(S - T), float("-inf"))
    m, l, acc = torch.full((T,), float("-inf")), torch.zeros(T), torch.zeros(T, E)
    for j0, j1 in ((0, 3), (3, S)):  # two tiles of keys
        step = solutions.flash_tile_step(m, l, acc, scores[:, j0:j1], v[j0:j1])
        m, l, acc = step["m"], step["l"], step["acc"]
    want = attention(q[None, None], k[None, None], v[None, None], is_causal=True).output[0, 0]
    torch.testing.assert_close(acc / l[:, None], want)
    for T_, S_, b in [(6, 10, 4), (7, 3, 2), (5, 5, 2), (1, 9, 4), (9, 9, 4)]:
        kernel = [min(max((i + 1) * b + S_ - T_, 0), S_) for i in range(-(-T_ // b))]
        assert solutions.causal_key_ends(T_, S_, b) == kernel
    x = torch.randn(3, 7, generator=g)
    x[1] = float("-inf")
    torch.testing.assert_close(solutions.lse_in_base_2(x, 3), torch.logsumexp(x, dim=-1))
