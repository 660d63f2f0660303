"""``python ...`` runs for the tests, each in a child forked from a warm parent that imported the slow modules once.

Some checks start Python many times to run something as a new interpreter would: the tiny projects' MkDocs builds
of tests/site (test_build_fails_loudly.py's ``run_python``: about 4.5 of a tiny build's 6 CPU seconds were
imports: torch, mkdocs-jupyter with nbconvert and jupytext, MkDocs, Markdown), the core files run copied alone
(tests/core/test_layout.py: 3 CPU seconds each, nearly all torch's import). Started as ``python warm_python.py MODULE
...``, this parent imports those third-party modules once; each run is then a child forked from it, as ``python
-m MODULE ARGS``, ``python SCRIPT ARGS`` or ``python -c CODE`` would run in a new interpreter: its own process,
environment (replaced whole by the request's), working folder, ``sys.argv``, ``sys.path[0]``, ``__main__``,
stdout and stderr (files), exit status, and atexit handlers run at its end. The parent imports only the modules
it is given (never the project: not the package, not a hook, not matplotlib, which reads ``MPLBACKEND`` when
imported), so every file a run could read is read by the child; it starts no thread and makes no tensor before
forking (torch's thread pools start on first use, in the child).

What only a new interpreter decides (the ``PYTHON*`` variables: ``PYTHONPATH``, ``PYTHONHASHSEED``, ...) is the
parent's: :class:`WarmPython` sends a run here only when its ``PYTHON*`` variables are the parent's, and starts a
new interpreter otherwise.

Protocol: one JSON request per line on stdin, ``{"argv": [...], "cwd": "...", "env": {...}, "stdout": PATH,
"stderr": PATH}``, ``argv`` as after ``python``. Replies, one JSON line each on the protocol pipe (this process's
stdout when it started): ``{"pid": n}`` when the child started (the client kills it on a timeout), then
``{"returncode": n}`` when it ended.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import types
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

import threading

PATH0: list[str] = []


def run_child(request: dict[str, object], proto: int) -> None:
    """In the forked child: become the requested ``python`` run, then exit with its status. Never returns."""
    code = 1
    try:
        os.close(proto)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)  # the requests are the parent's to read
        os.dup2(os.open(str(request["stdout"]), os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 1)
        os.dup2(os.open(str(request["stderr"]), os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 2)
        os.chdir(str(request["cwd"]))
        os.environ.clear()
        os.environ.update(request["env"])  # type: ignore[arg-type]
        if "numpy" in sys.modules:  # numpy's global generator, seeded when imported: a fresh one, as a new process has
            sys.modules["numpy"].random.seed()  # (random and tempfile reseed themselves after a fork)
        argv = list(request["argv"])  # type: ignore[call-overload]
        import runpy

        try:
            if argv[0] == "-c":  # python -c: the working folder ('') first on the path, a new __main__
                sys.path[:] = ["", *PATH0]
                sys.argv = ["-c", *argv[2:]]
                main = types.ModuleType("__main__")
                sys.modules["__main__"] = main
                exec(compile(argv[1], "<string>", "exec"), main.__dict__)
            elif argv[0] == "-m":  # python -m: the working folder first on the path, argv[0] the module's file
                sys.path[:] = [os.getcwd(), *PATH0]
                sys.argv = argv[1:]
                runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
            else:  # python SCRIPT: the script's folder first on the path
                script = os.path.abspath(argv[0])
                sys.path[:] = [os.path.dirname(script), *PATH0]
                sys.argv = [script, *argv[1:]]
                runpy.run_path(script, run_name="__main__")
            code = 0
        except SystemExit as stop:
            if stop.code is None or isinstance(stop.code, int):
                code = stop.code or 0
            else:
                print(stop.code, file=sys.stderr)
                code = 1
        except BaseException:  # what a new interpreter does with an uncaught exception
            import traceback

            traceback.print_exc()
            code = 1
        threading._shutdown()  # type: ignore[attr-defined]  # as at an interpreter's exit: join its threads
        import atexit

        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # a closed stream: nothing left to write
                stream.flush()
        os._exit(code)


def main() -> None:
    sys.path.pop(0)  # not this file's folder (tests/): the child sets its own sys.path[0], as `python` would
    for module in sys.argv[1:]:
        importlib.import_module(module)
    global PATH0
    PATH0 = list(sys.path)
    # The protocol keeps its own copy of stdout; fd 1 becomes /dev/null, so nothing else can write into it.
    proto = os.dup(1)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    assert threading.active_count() == 1, "a thread before fork: " + repr(threading.enumerate())

    def reply(message: dict[str, int]) -> None:
        os.write(proto, (json.dumps(message) + "\n").encode())

    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            run_child(request, proto)
        reply({"pid": pid})
        _, status = os.waitpid(pid, 0)
        reply({"returncode": os.waitstatus_to_exitcode(status)})


class WarmPython:
    """This file run as the warm parent of ``preload``'s modules, started on first use, with the environment ``env()``.

    ``run`` is ``subprocess.run([sys.executable, *args], ...)`` captured as text, in a child of that parent when the
    run's ``PYTHON*`` variables are the parent's (else in a new interpreter). One run at a time (a lock).
    """

    def __init__(self, preload: tuple[str, ...], env: Callable[[], dict[str, str]] = lambda: dict(os.environ)) -> None:
        self.preload, self.env_of = preload, env
        self.lock = threading.Lock()
        self.proc: subprocess.Popen[bytes] | None = None
        self._env: dict[str, str] | None = None

    @property
    def env(self) -> dict[str, str]:
        if self._env is None:
            self._env = self.env_of()
        return self._env

    def start(self) -> subprocess.Popen[bytes]:
        if self.proc is None:
            self.proc = subprocess.Popen([sys.executable, __file__, *self.preload], cwd=os.path.dirname(__file__),
                                         env=self.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            atexit.register(self.close)
        return self.proc

    def _reply(self, proc: subprocess.Popen[bytes], timeout: float | None) -> dict[str, int] | None:
        assert proc.stdout is not None
        if timeout is not None and not select.select([proc.stdout], [], [], timeout)[0]:
            return None
        line = proc.stdout.readline()
        assert line, f"the warm python died (exit status {proc.poll()})"
        return dict(json.loads(line))

    def run(self, args: list[str], *, cwd: str | os.PathLike[str], env: dict[str, str] | None = None,
            timeout: float | None = None) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ) if env is None else env
        command = [sys.executable, *args]
        if {k: v for k, v in env.items() if k.startswith("PYTHON")} != {
            k: v for k, v in self.env.items() if k.startswith("PYTHON")
        }:
            return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                                  check=False)
        with self.lock, tempfile.TemporaryDirectory() as tmp:
            proc = self.start()
            assert proc.stdin is not None
            out, err = os.path.join(tmp, "stdout"), os.path.join(tmp, "stderr")
            request = {"argv": args, "cwd": os.fspath(cwd), "env": env, "stdout": out, "stderr": err}
            proc.stdin.write((json.dumps(request) + "\n").encode())
            proc.stdin.flush()
            pid = self._reply(proc, None)["pid"]  # type: ignore[index]
            ended = self._reply(proc, timeout)
            if ended is None:
                os.kill(pid, signal.SIGKILL)
                self._reply(proc, None)
                raise subprocess.TimeoutExpired(command, timeout or 0)
            text = []
            for path in (out, err):
                with open(path, encoding="utf-8", errors="replace") as f:
                    text.append(f.read())
            return subprocess.CompletedProcess(command, ended["returncode"], text[0], text[1])

    def close(self) -> None:
        if self.proc is not None and self.proc.stdin is not None:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)
            self.proc.stdout.close()  # type: ignore[union-attr]
            self.proc = None


# Shared by the unit tests that run core files or scripts which import torch (one parent per test process).
TORCH = WarmPython(("torch",))


if __name__ == "__main__":
    main()
