"""Runs snippets one by one, each in a child process forked from this warm parent, so imports are paid once.

A reader pastes a snippet into a fresh interpreter. A forked child is as fresh as that for what a snippet can
see: its ``__main__`` namespace is new and empty, nothing another snippet did is there, and the only work done
before the fork is ``import lessons_src`` (torch and the core modules: no tensor made, no seed drawn, no thread
pool started), which the snippet imports again by name anyway. Only the import time (about 3 CPU seconds a
snippet) is saved. A snippet that leans on a name it did not import still fails with NameError
(tests/site/test_snippets.py checks that the harness catches it).

Protocol: one JSON request per line on stdin, ``{"code": "...", "timeout": 60}`` (code is a script,
or ``-m package.module``); one JSON reply per line on stdout, ``{"returncode": n, "stdout": "...", "stderr": "..."}``.
A child that runs past its timeout is killed by its own alarm (returncode -14, SIGALRM).
"""

from __future__ import annotations

import json
import os
import runpy
import signal
import sys
import tempfile
import traceback

import lessons_src  # noqa: F401  (the imports every snippet repeats: torch and the core; paid here once)


def run_child(code: str, workdir: str) -> int:
    """In the forked child: run `code` as __main__ and return the exit status a `python` process would have."""
    try:
        if code.startswith("-m "):
            module = code.split()[1]
            sys.argv = [module]
            sys.path[0] = os.getcwd()  # `python -m` puts the working directory first
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        else:
            script = os.path.join(workdir, "snippet.py")
            with open(script, "w", encoding="utf-8") as f:
                f.write(code)
            sys.argv = [script]
            sys.path[0] = workdir  # `python script.py` puts the script's folder first
            runpy.run_path(script, run_name="__main__")
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            return stop.code or 0
        print(stop.code, file=sys.stderr)
        return 1
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


def main() -> None:
    for line in sys.stdin:
        request = json.loads(line)
        with tempfile.TemporaryDirectory() as workdir:
            out_path, err_path = os.path.join(workdir, "stdout"), os.path.join(workdir, "stderr")
            pid = os.fork()
            if pid == 0:
                signal.alarm(int(request["timeout"]))
                for fd, path in ((1, out_path), (2, err_path)):
                    os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
                status = run_child(request["code"], workdir)
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(status)
            _, wait_status = os.waitpid(pid, 0)
            reply = {"returncode": os.waitstatus_to_exitcode(wait_status)}
            for name, path in (("stdout", out_path), ("stderr", err_path)):
                with open(path, encoding="utf-8", errors="replace") as f:
                    reply[name] = f.read()
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()
