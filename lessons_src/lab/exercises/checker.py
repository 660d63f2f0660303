"""Run a learner's function against the answer, and say what is wrong in words, not a traceback.

The learner's file is executed in a fresh module made by :mod:`importlib` (a notebook's code cells are
joined first, less what IPython reads as its own: a cell magic's cell, ``%`` and ``!`` lines, ``x?`` help;
and the statements that call ``check``, so that loading runs no check), so nothing of the checker's,
the answer least of all, is in its namespace. Each exercise's cases (see :mod:`.catalogue`) are passed to
the learner's function and to the answer as separate copies. On the first difference the checker runs the
exercise's known-wrong variants (:mod:`.mistakes`) on the same cases: one that gives the learner's output
on every case names the mistake and the lesson section that explains it; otherwise the checker shows the
first differing element, its index and both values.

Each call of the learner's code (and the loading of their file) runs in a thread of its own, which the
checker waits for at most ``time_limit`` seconds: since the checker only waits, nothing that code does (a
bare ``except:`` that swallows every exception, ``sys.exit``) can keep it waiting longer or end it. At the
limit the checker says where the code was, and raises an exception in it to stop it; code that catches that
too goes on in the background until Python exits, and the checker says so.
"""

from __future__ import annotations

import ast
import ctypes
import importlib.util
import inspect
import json
import linecache
import math
import re
import sys
import textwrap
import threading
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import torch
from torch import Tensor

from .blocks import whole_rows
from .catalogue import EXERCISES, Case, Exercise, exercise
from .mistakes import MISCONCEPTIONS, Variant

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import ModuleType

__all__ = ["LearnerFileError", "Result", "check", "check_file", "check_function", "load_learner_file"]

RTOL, ATOL = 1e-4, 1e-5
TIME_LIMIT = 10.0  # seconds one call of the learner's code may run; the answers take milliseconds
MAX_TIME_LIMIT = 3600.0  # the longest limit accepted: an hour
STOP_WAIT = 0.25  # seconds the learner's code is given to stop once its time is up
T = TypeVar("T")


class LearnerFileError(Exception):
    """The learner's file cannot be used (missing, a syntax error, an error while it runs); ``str`` says why."""


class _OutOfTime(BaseException):
    """Raised in the learner's code to stop it when its time is up (not an ``Exception``: ``except Exception``
    cannot swallow it), and in the checker's thread with ``stack``, where that code was then, and ``stopped``,
    whether it stopped."""

    def __init__(self, stack: traceback.StackSummary | None = None, *, stopped: bool = True) -> None:
        super().__init__()
        self.stack = stack or traceback.StackSummary()
        self.stopped = stopped


def _limited(seconds: float | None, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)``, run in a thread of its own that this one waits for at most ``seconds`` (None or 0: no
    limit, and ``fn`` runs here); what ``fn`` raises, ``SystemExit`` included, is raised here.

    Raises:
        _OutOfTime: at the limit, with the stack ``fn`` was at, after an ``_OutOfTime`` raised in its thread
            to stop it (``stopped``: whether it did within ``STOP_WAIT`` seconds).
    """
    if not seconds:
        return fn(*args)
    outcome: list[tuple[T] | BaseException] = []

    def run() -> None:
        try:
            try:
                outcome.append((fn(*args),))
            except BaseException as err:  # handed to the checker's thread, which reports it
                outcome.append(err)
        except _OutOfTime:  # a stop that arrived as fn was returning
            pass

    worker = threading.Thread(target=run, name="learner's code", daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive() and worker.ident is not None:
        frame = sys._current_frames().get(worker.ident)
        stack = traceback.extract_stack(frame) if frame is not None else None
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(worker.ident), ctypes.py_object(_OutOfTime))
        worker.join(STOP_WAIT)
        raise _OutOfTime(stack, stopped=not worker.is_alive())
    result = outcome[0]
    if isinstance(result, BaseException):
        raise result
    return result[0]


def validate_time_limit(seconds: object, name: str = "time_limit", *, allow_none: bool = True) -> None:
    """Check a time limit given as ``name``: a number of seconds from 0 (no limit) to ``MAX_TIME_LIMIT``, or
    (with ``allow_none``) None, no limit too.

    Raises:
        ValueError: naming the value and what is accepted (NaN and infinity are not).
    """
    if seconds is None and allow_none:
        return
    if isinstance(seconds, int | float) and not isinstance(seconds, bool) and 0 <= seconds <= MAX_TIME_LIMIT:
        return
    accepted = f"{'None or ' if allow_none else ''}a number of seconds from 0 to {MAX_TIME_LIMIT:g} (0: no limit)"
    shown = f"{seconds:g}" if isinstance(seconds, float) else repr(seconds)
    raise ValueError(f"{name} must be {accepted}; got {shown}")


def _exit_call(err: SystemExit) -> str:
    """``sys.exit(0)``: the call that raised ``err``, as the learner would have written it."""
    return f"sys.exit({'' if err.code is None else repr(err.code)}) (it raised SystemExit)"


@dataclass(frozen=True)
class Result:
    """The outcome of checking one exercise. ``status``: passed, wrong, error, missing or not written."""

    exercise: str
    status: str
    message: str
    diagnosis: tuple[str, ...] = field(default=())  # keys of the known-wrong variants the answer matches

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        return self.message


# --------------------------------------------------------------------------- loading the learner's code


@dataclass(frozen=True)
class _Source:
    """Where a line of the learner's code comes from: a file, or a cell of a notebook."""

    path: str
    cell_starts: tuple[int, ...] = ()  # first line of each notebook code cell in the joined source

    def where(self, lineno: int) -> str:
        if not self.cell_starts:
            return f"{self.path}, line {lineno}"
        cell = max(i for i, start in enumerate(self.cell_starts) if start <= lineno)
        return f"{self.path}, code cell {cell + 1}, line {lineno - self.cell_starts[cell] + 1}"


_SOURCES: dict[str, _Source] = {}


_HELP = re.compile(r"\s*(\?\??\s*[\w.*]+|[\w.*]+\s*\?\??)\s*")  # IPython's help: ?name, name?, name??


def _ipython_line(line: str) -> bool:
    """Whether IPython reads ``line`` as its own command: a ``%magic``, a ``!shell`` line or a help request."""
    return line.lstrip().startswith(("%", "!")) or _HELP.fullmatch(line) is not None


def _notebook_source(path: Path, text: str) -> tuple[str, tuple[int, ...]]:
    try:
        nb = json.loads(text)
        cells = [c for c in nb["cells"] if c.get("cell_type") == "code"]
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise LearnerFileError(f"{path} is not a Jupyter notebook that can be read ({err})") from None
    parts: list[str] = []
    starts: list[int] = []
    line = 1
    for cell in cells:
        src = cell.get("source", "")
        src = "".join(src) if isinstance(src, list) else str(src)
        lines = src.splitlines() or [""]
        # what IPython reads as its own is not Python: keep the line count, drop the command
        if lines[0].startswith("%%"):  # a cell magic (%%bash, %%writefile, ...): the whole cell is its input
            lines = ["# " + ln for ln in lines]
        else:
            lines = [(ln[: len(ln) - len(ln.lstrip())] + "pass  # " + ln.strip()) if _ipython_line(ln) else ln
                     for ln in lines]
        starts.append(line)
        parts.append("\n".join(lines))
        line += len(lines)
    return "\n".join(parts) + "\n", tuple(starts)


def _without_check_calls(tree: ast.Module) -> ast.Module:
    """Each statement that calls ``check`` made a ``pass``: ``check(f)``, ``r = check(f)``, ``print(check(f))``,
    ``exercises.check(f)``, or under the name it was imported as. Loading a notebook must not run its own checks.
    Function bodies, which do not run when the file is loaded, are left as they are."""
    names = {"check"} | {alias.asname for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                         for alias in node.names if alias.name == "check" and alias.asname}

    def is_check(node: ast.AST) -> bool:
        f = node.func if isinstance(node, ast.Call) else None
        return (isinstance(f, ast.Name) and f.id in names) or (isinstance(f, ast.Attribute) and f.attr == "check")

    class LeaveOut(ast.NodeTransformer):
        def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.AST:
            return node

        visit_AsyncFunctionDef = visit_FunctionDef

        def generic_visit(self, node: ast.AST) -> ast.AST:
            if isinstance(node, ast.stmt):  # its own expressions, not the statements in its body
                own = (child for child in ast.iter_child_nodes(node) if isinstance(child, ast.expr))
                if any(is_check(n) for child in own for n in ast.walk(child)):
                    return ast.copy_location(ast.Pass(), node)
            return super().generic_visit(node)

    tree.body = [LeaveOut().visit(node) for node in tree.body]
    return ast.fix_missing_locations(tree)


def load_learner_file(path: str | Path, *, time_limit: float | None = TIME_LIMIT) -> ModuleType:
    """Execute the learner's ``.py`` file or notebook in a fresh module and return it.

    Raises:
        LearnerFileError: the file is missing, is not Python, has a syntax error, raises while it runs
            (the message names the line, not a traceback), or runs longer than ``time_limit`` seconds.
    """
    validate_time_limit(time_limit)
    p = Path(path)
    if not p.is_file():
        raise LearnerFileError(f"there is no file {p}; give the path of your .py file or notebook")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise LearnerFileError(f"{p} cannot be read as text: {err}") from None
    filename = str(p.resolve())
    if p.suffix == ".ipynb":
        code, starts = _notebook_source(p, text)
        source = _Source(str(p), starts)
    else:
        code, source = text, _Source(str(p))
    _SOURCES[filename] = source
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    try:
        tree = _without_check_calls(ast.parse(code, filename=filename))
        compiled = compile(tree, filename, "exec")
    except SyntaxError as err:
        shown = (err.text or "").rstrip()
        pointer = f"\n    {shown}\n    {' ' * max((err.offset or 1) - 1 - (len(shown) - len(shown.lstrip())), 0)}^"
        raise LearnerFileError(
            f"{source.where(err.lineno or 1)}: syntax error: {err.msg}" + (pointer if shown else "")
        ) from None
    name = f"learner_{abs(hash(filename))}"
    spec = importlib.util.spec_from_loader(name, loader=None, origin=filename)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__file__ = filename
    sys.modules[name] = module  # dataclasses and pickling look the module up while it runs
    main_block = "`if __name__ == \"__main__\":` (the checker does not run that block)"
    try:
        _limited(time_limit, exec, compiled, module.__dict__)
    except _OutOfTime as err:
        raise LearnerFileError(
            f"running {p} took over {time_limit:g} s before any check and {_stopped_at(err, filename)}\n"
            f"  Code at the top level of the file runs when it is loaded: put long runs under {main_block}"
        ) from None
    except SystemExit as err:
        raise LearnerFileError(f"running {p} called {_exit_call(err)} before any check\n  "
                               f"{_learner_line(err, filename)}\n  Put it under {main_block}") from None
    except Exception as err:
        raise LearnerFileError(f"running {p} failed before any check: {_describe_error(err, filename)}") from None
    finally:
        sys.modules.pop(name, None)
    return module


# --------------------------------------------------------------------------- running and comparing


def _clone(obj: Any) -> Any:
    if isinstance(obj, Tensor):
        return obj.clone()
    if isinstance(obj, list | tuple):
        return type(obj)(_clone(o) for o in obj)
    return obj


def _learner_line(err: BaseException, filename: str | None, *, any_file: bool = True) -> str:
    """``at my_file.py, line 7: code``: the innermost line of the learner's file in ``err``'s traceback (for an
    :class:`_OutOfTime`, in the stack the code was at), or (with ``any_file``) the innermost line of any file
    when none is the learner's; else ``""``."""
    frames = err.stack if isinstance(err, _OutOfTime) else traceback.extract_tb(err.__traceback__)
    mine = [f for f in frames if filename is not None and f.filename == filename] or (frames[-1:] if any_file else [])
    if not mine:
        return ""
    f = mine[-1]
    src = _SOURCES.get(f.filename)
    if src:
        where = src.where(f.lineno or 0)
    elif "ipykernel" in f.filename or f.filename.startswith("<ipython"):
        where = f"your notebook cell, line {f.lineno}"
    else:
        where = f"{Path(f.filename).name}, line {f.lineno}"
    line = (f.line or linecache.getline(f.filename, f.lineno or 0)).strip()
    return f"at {where}" + (f": {line}" if line else "")


def _describe_error(err: BaseException, filename: str | None) -> str:
    """``TypeError: message`` and, on the next line, where in the learner's code it was raised."""
    at = _learner_line(err, filename)
    return f"{type(err).__name__}: {err}".strip() + (f"\n  {at}" if at else "")


def _stopped_at(err: _OutOfTime, filename: str | None) -> str:
    """``was stopped``, or why it was not, then ``\n  at my_file.py, line 7: while True:``: the learner's line
    that was running when time ran out."""
    at = _learner_line(err, filename, any_file=False)
    at = f"\n  {at}" if at else ""
    if err.stopped:
        return "was stopped" + at
    return ("did not stop when told to" + at + "\n  It catches every exception (a bare `except:`?), the checker's stop "
            "included,\n  so it goes on in the background until Python exits (in a notebook: restart the kernel)")


def _outputs(fn: Callable[..., Any], case: Case) -> list[tuple[str, Any]]:
    args = _clone(case.args)
    kwargs = _clone(case.kwargs)
    out = fn(*args, **kwargs)
    return [("the value returned", out)] + [(f"{name} after the call", args[i]) for i, name in case.inplace]


def _index(idx: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(i) for i in idx) + "]"


def _value(t: Tensor) -> str:
    v = t.item()
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def _kind(x: Any) -> str:
    return f"a {type(x).__name__} of {len(x)}" if isinstance(x, tuple | list) else f"a {type(x).__name__}"


def _difference(got: Any, want: Any) -> tuple[str, str] | None:
    """``(kind, what)`` of the first difference (kind: shape, type, values, or how: right values computed from
    whole rows where the answer works block by block), or None when they agree."""
    if isinstance(want, Tensor):
        if not isinstance(got, Tensor):
            return "type", f"is a {type(got).__name__}, expected a torch.Tensor of shape {tuple(want.shape)}"
        if got.shape != want.shape:
            return "shape", f"has shape {tuple(got.shape)}, expected {tuple(want.shape)}"
        if got.dtype != want.dtype:
            return "type", f"has dtype {got.dtype}, expected {want.dtype}"
        if want.dtype == torch.bool:
            bad = got != want
        else:
            bad = ~torch.isclose(got.detach(), want, rtol=RTOL, atol=ATOL)
        if not bad.any():
            how = whole_rows(got)
            return None if how is None or whole_rows(want) else ("how", "has the right values but was not computed "
                                                                  f"block by block: your code took {how}")
        idx = tuple(int(i) for i in bad.nonzero()[0])
        n = int(bad.sum())
        return "values", (
            f"first differs at index {_index(idx)}: yours {_value(got[idx])}, expected {_value(want[idx])} "
            f"({n} of {bad.numel()} elements differ)"
        )
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return "type", f"is a {type(got).__name__}, expected a dict with keys {sorted(want)}"
        if set(got) != set(want):
            missing, extra = sorted(set(want) - set(got)), sorted(set(got) - set(want), key=str)
            return "type", f"has keys {sorted(got, key=str)}: missing {missing}, unexpected {extra}"
        for key in want:
            if (d := _difference(got[key], want[key])) is not None:
                return d[0], f"[{key!r}] " + d[1]
        return None
    if isinstance(want, tuple):
        if not isinstance(got, tuple | list) or len(got) != len(want):
            return "type", f"is {_kind(got)}, expected a tuple of {len(want)}"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            if (d := _difference(g, w)) is not None:
                return d[0], f"[{i}] " + d[1]
        return None
    if isinstance(want, int):
        if isinstance(got, bool) or not isinstance(got, int):
            return "type", f"is a {type(got).__name__} ({got!r}), expected an int"
        return None if got == want else ("values", f"is {got:,}, expected {want:,}")
    if isinstance(want, float):
        if isinstance(got, bool) or not isinstance(got, int | float):
            return "type", f"is a {type(got).__name__} ({got!r}), expected a float"
        return None if math.isclose(got, want, rel_tol=RTOL) else ("values", f"is {got:.6g}, expected {want:.6g}")
    return None if got == want else ("values", f"is {got!r}, expected {want!r}")


def _constant_ratio(got: Any, want: Any) -> float | None:
    """``c`` when ``got`` is ``c * want`` at every entry (within the tolerances), else None: the signature of a
    wrong scale, found without knowing the mistake. Entries near zero say nothing about the ratio, so ``c`` is
    the median ratio over the others, and then every entry must agree with it."""
    if not (isinstance(got, Tensor) and isinstance(want, Tensor)) or got.shape != want.shape:
        return None
    if not (got.is_floating_point() and want.is_floating_point()):
        return None
    g, w = got.detach().double().flatten(), want.detach().double().flatten()
    if not (torch.isfinite(g).all() and torch.isfinite(w).all()):
        return None
    big = w.abs() > 1e-3 * float(w.abs().max())
    if int(big.sum()) < 2:
        return None
    c = float((g[big] / w[big]).median())
    if c == 0 or abs(c - 1) < RTOL or not torch.allclose(g, c * w, rtol=RTOL, atol=ATOL):
        return None
    return c


def _same(a: Any, b: Any) -> bool:
    """Whether two outputs agree (NaN equals NaN here: a variant that makes NaN matches a learner who does), and
    were both computed block by block or both not."""
    if isinstance(a, Tensor) or isinstance(b, Tensor):
        if not (isinstance(a, Tensor) and isinstance(b, Tensor)) or a.shape != b.shape or a.dtype != b.dtype:
            return False
        if (whole_rows(a) is None) != (whole_rows(b) is None):
            return False
        if a.dtype == torch.bool:
            return bool(torch.equal(a, b))
        return bool(torch.isclose(a.detach(), b.detach(), rtol=RTOL, atol=ATOL, equal_nan=True).all())
    if isinstance(a, dict) and isinstance(b, dict):
        return set(a) == set(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, tuple | list) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=RTOL)
    return type(a) is type(b) and bool(a == b)


def _matching_variants(ex: Exercise, cases: list[Case], learner: list[list[tuple[str, Any]]]) -> list[Variant]:
    found = []
    for variant in ex.variants:
        try:
            theirs = [_outputs(variant.fn, case) for case in cases]
        except Exception:  # a variant that cannot run on a case matches nothing
            continue
        pairs = (pair for mine, t in zip(learner, theirs, strict=True) for pair in zip(mine, t, strict=True))
        if all(_same(a[1], b[1]) for a, b in pairs):
            found.append(variant)
    return found


def _by_misconception(variants: list[Variant]) -> dict[str, list[Variant]]:
    grouped: dict[str, list[Variant]] = {}
    for v in variants:
        grouped.setdefault(v.misconception, []).append(v)
    return grouped


def _what_you_did(ways: list[Variant]) -> str:
    """What the learner's code did, in words: the one known way that gives their output, or, when several
    give it (so the output cannot tell which they wrote), each of them as a possibility."""
    if len(ways) == 1:
        return f"You {ways[0].what}."
    return "Your output is what you would get if you " + ", or if you ".join(v.what for v in ways) + "."


WRAP = 72  # columns of the "Known mistake" and "Why" paragraphs (a terminal's width, less a margin)
_CODE_SPAN = re.compile(r"`[^`]*`")


def _wrap(text: str) -> str:
    """``text`` as a paragraph indented by two spaces (four after its first line), at most ``WRAP`` columns
    wide; a line breaks only between words and never inside a `code span` (one longer than a line stays
    whole)."""
    glued = _CODE_SPAN.sub(lambda m: m.group(0).replace(" ", "\x00"), text)
    filled = textwrap.fill(glued, WRAP, initial_indent="  ", subsequent_indent="    ",
                           break_long_words=False, break_on_hyphens=False)
    return filled.replace("\x00", " ")


def _params(fn: Callable[..., Any]) -> str:
    try:
        return "(" + ", ".join(inspect.signature(fn).parameters) + ")"
    except (TypeError, ValueError):
        return "(...)"


def check_function(name: str, fn: object, *, time_limit: float | None = TIME_LIMIT) -> Result:
    """Check ``fn`` as the answer to exercise ``name`` and return the :class:`Result` (never raises for bad answers).

    A call of ``fn`` that runs over ``time_limit`` seconds (``None`` or 0: no limit) is stopped, and reported.

    Raises:
        ValueError: for an unknown exercise, or a ``time_limit`` that is not ``None`` or a number of seconds
            from 0 to ``MAX_TIME_LIMIT``.
    """
    ex = exercise(name)
    validate_time_limit(time_limit)
    with warnings.catch_warnings():  # eager FlexAttention says once that it is not fused: not the learner's fault
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        return _check(name, ex, fn, time_limit)


def _check(name: str, ex: Exercise, fn: object, time_limit: float | None) -> Result:
    expected = f"{name}{_params(ex.stub)}"
    if not callable(fn):
        return Result(name, "error", f"FAILED {name}: {name} is a {type(fn).__name__}, not a function {expected}")
    cases = ex.cases()
    try:
        inspect.signature(fn).bind(*cases[0].args, **cases[0].kwargs)
    except TypeError:
        return Result(name, "error", f"FAILED {name}: the checker calls {expected}; yours is "
                      f"{getattr(fn, '__name__', name)}{_params(fn)}: change its parameters to match")
    except ValueError:
        pass  # a builtin without a signature: just call it
    code = getattr(fn, "__code__", None)
    filename = code.co_filename if code is not None else None
    learner: list[list[tuple[str, Any]]] = []
    for i, case in enumerate(cases):
        where = f"case {i + 1} of {len(cases)}: {case.label}"
        try:
            learner.append(_limited(time_limit, _outputs, fn, case))
        except _OutOfTime as err:
            return Result(name, "error", f"FAILED {name}: your function ran for over {time_limit:g} s on {where} "
                          f"and {_stopped_at(err, filename)}\n  The answer takes milliseconds on these "
                          "small inputs:\n  look for a loop that never ends (a condition that never changes)")
        except SystemExit as err:
            return Result(name, "error", f"FAILED {name}: your function called {_exit_call(err)} on {where}\n  "
                          f"{_learner_line(err, filename)}\n  A function returns its answer: `return`, not `sys.exit`")
        except NotImplementedError:
            return Result(name, "not written", f"FAILED {name}: not written yet: it raises NotImplementedError "
                          "(replace the `raise` with your code)")
        except Exception as err:
            return Result(name, "error", f"FAILED {name}: your function raised on {where}\n  "
                          + _describe_error(err, filename))
    for i, (case, mine) in enumerate(zip(cases, learner, strict=True)):
        want = _outputs(ex.reference, case)
        for (what, got), (_, expected_value) in zip(mine, want, strict=True):
            diff = _difference(got, expected_value)
            if diff is None:
                continue
            kind, text = diff
            lines = [f"FAILED {name}: on case {i + 1} of {len(cases)} ({case.label}),", f"  {what} {text}."]
            if kind not in ("values", "how"):
                return Result(name, "wrong", "\n".join(lines))
            matches = _matching_variants(ex, cases, learner)
            for key, ways in _by_misconception(matches).items():
                m = MISCONCEPTIONS[key]
                lines += [_wrap(f"Known mistake: {m.name}. {_what_you_did(ways)}"), _wrap(f"Why: {m.why}"),
                          f"  Read: {m.lesson.title} (on the course site: {m.lesson.path})"]
            if not matches and (ratio := _constant_ratio(got, expected_value)) is not None:
                lines.append(_wrap(f"Every value of yours is the expected one times {ratio:.4g}: a constant factor "
                                   "is wrong (a scale, say)."))
            if not matches:
                lines.append(f"  Stuck? Hints: python -m lessons_src.lab.exercises hints {name}; the lesson: "
                             f"{ex.lesson.title} ({ex.lesson.path})")
            return Result(name, "wrong", "\n".join(lines), tuple(v.key for v in matches))
    return Result(name, "passed", f"passed {name} ({len(cases)} cases)")


def check(
    fn_or_name: object, fn: object = None, *, quiet: bool = False, time_limit: float | None = TIME_LIMIT
) -> Result:
    """Check an answer from a notebook or a script: ``check(split_heads)`` or ``check("split_heads", fn)``.

    Prints the verdict (unless ``quiet``) and returns the :class:`Result`.

    Raises:
        ValueError: for a function whose name is no exercise (the message lists them).
    """
    if isinstance(fn_or_name, str):
        name, answer = fn_or_name, fn
    else:
        name, answer = getattr(fn_or_name, "__name__", ""), fn_or_name
        if name not in EXERCISES:
            raise ValueError(
                f"{name!r} is not the name of an exercise; name it, check('split_heads', my_fn), or call your "
                f"function by the exercise's name: {', '.join(EXERCISES)}"
            )
    result = check_function(name, answer, time_limit=time_limit)
    if not quiet:
        print(result)
    return result


def check_file(path: str | Path, name: str = "all", *, time_limit: float | None = TIME_LIMIT) -> list[Result]:
    """Check one exercise (``name``) or every exercise (``"all"``) in the learner's file or notebook.

    ``time_limit``: seconds that loading the file, and each call of a function, may run.

    Raises:
        LearnerFileError: when the file cannot be loaded (see :func:`load_learner_file`).
        ValueError: for an unknown exercise name.
    """
    names = list(EXERCISES) if name == "all" else [exercise(name).name]
    module = load_learner_file(path, time_limit=time_limit)
    results = []
    for n in names:
        if not hasattr(module, n):
            defined = sorted(k for k, v in vars(module).items() if inspect.isfunction(v) and not k.startswith("_"))
            results.append(Result(n, "missing", f"FAILED {n}: {path} defines no function named {n} (it defines: "
                                  f"{', '.join(defined) or 'no functions'})"))
            continue
        results.append(check_function(n, getattr(module, n), time_limit=time_limit))
    return results
