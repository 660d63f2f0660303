"""Runs the tiny projects' builds of tests/site, each in a child forked from this warm parent.

A tiny build (tests/site/test_build_fails_loudly.py and the tests that use its ``build``) spent about 4.5 of its
6 CPU seconds importing: torch (a hook imports the package), mkdocs-jupyter with nbconvert and jupytext, MkDocs,
Markdown and its extensions. This parent imports those third-party modules once; each build then runs in a child
forked from it, as ``python -m mkdocs build ...`` (or ``python SCRIPT ARGS``) would run in a new interpreter:
its own process, environment (replaced whole by the request's), working folder, ``sys.argv``, ``sys.path[0]``,
stdout and stderr (files), exit status, and atexit handlers run at its end. Nothing of the project is imported
before the fork: not the package (``lessons_src``), not a hook, not matplotlib (which reads ``MPLBACKEND`` when
imported), so every file a build could read is read by the child. The parent starts no thread and makes no
tensor before forking (torch's thread pools start on first use, in the child).

What only a new interpreter decides (the ``PYTHON*`` variables: ``PYTHONPATH``, ``PYTHONHASHSEED``, ...) is this
parent's: the client (``test_build_fails_loudly.run``) sends a request here only when the request's ``PYTHON*``
variables are this parent's, and starts a new interpreter otherwise.

Protocol: one JSON request per line on stdin, ``{"argv": [...], "cwd": "...", "env": {...}, "stdout": PATH,
"stderr": PATH}``; ``argv`` is ``["-m", module, args...]`` or ``[script, args...]``, as after ``python``. Replies,
one JSON line each on the protocol pipe (this process's stdout when it started): ``{"pid": n}`` when the child
started (the client kills it on a timeout), then ``{"returncode": n}`` when it ended.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys

# Not this file's folder (tests/site) on the path: the child sets its own sys.path[0], as `python` would.
sys.path.pop(0)

import threading

# The third-party imports of every tiny build (python -X importtime on one): none reads the project.
import jupytext  # noqa: F401
import markdown  # noqa: F401
import mkdocs.commands.build
import mkdocs.config  # noqa: F401
import mkdocs_jupyter.plugin  # noqa: F401
import nbconvert  # noqa: F401
import pygments.lexers  # noqa: F401
import pymdownx.util  # noqa: F401
import torch  # noqa: F401

PATH0 = list(sys.path)


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
        argv = list(request["argv"])  # type: ignore[call-overload]
        import runpy

        try:
            if argv[0] == "-m":  # python -m: the working folder first on the path, argv[0] the module's file
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


if __name__ == "__main__":
    main()
