"""Runs shown blocks as a reader would, each chain of them in a child forked from this warm parent.

tests/site/test_snippets.py starts this file with the python of an environment where only the installed wheel
provides ``lessons_src``, from an empty folder outside the repository. A reader pastes a block into a fresh
``python``; a forked child is as fresh as that for what a block can see: its ``__main__`` is a new, empty module,
nothing another request did is there, and the only work done before the fork is ``import lessons_src`` (torch and
the core modules: no tensor made, no seed drawn, no thread pool started) and, where the environment has it,
``transformers`` with its ``modeling_utils`` (another 3 CPU seconds that each block comparing with a real model
repeats), which a block imports again by name anyway. Only the import time is saved. A block that leans on a name it
did not import still fails with NameError (the test module checks that the harness catches it).

Protocol: one JSON request per line on stdin, ``{"blocks": ["...", ...], "timeout": 60}``: the blocks run in
order in one ``__main__`` (the block under test alone, or the blocks above it that it says it continues, then
it), each a script, or ``-m package.module`` alone. One JSON reply per line on stdout: ``{"returncode": n,
"stdout": [what each block printed], "stderr": "...", "imported": [top-level modules the last block imported
first, and those of the preloaded ones its code imported]}``. Each request runs
in a new empty working folder. A child that runs past its timeout is killed by its own alarm (returncode -14,
SIGALRM).
"""

from __future__ import annotations

import builtins
import contextlib
import json
import linecache
import os
import runpy
import signal
import sys
import tempfile
import traceback
import types

sys.path[0] = ""  # as at the interactive prompt: the working directory first (an empty folder), not this file's

import lessons_src  # noqa: E402, F401  (the imports every block repeats: torch and the core; paid here once)

_CORE = {name.partition(".")[0] for name in sys.modules}
with contextlib.suppress(ImportError):  # the next heaviest import, which the blocks comparing with a real model
    import transformers.modeling_utils  # noqa: F401  (repeat; absent without the [transformers] extra)
# what that brought in (transformers, safetensors, huggingface_hub, ...): a block that imports one of them is still
# reported as importing it (run_blocks records the names its imports ask for), as in a fresh interpreter
PRELOADED = {name.partition(".")[0] for name in sys.modules} - _CORE


def top_level_modules() -> set[str]:
    return {name.partition(".")[0] for name in sys.modules}


def run_blocks(blocks: list[str], outputs: list[str]) -> tuple[int, set[str]]:
    """In the forked child: run ``blocks`` in one new ``__main__``, each printing into its own file of ``outputs``.

    Returns the exit status a ``python`` process would have, and the top-level modules the last block imported.
    """
    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    before = top_level_modules()
    asked: set[str] = set()  # top-level names the block's imports ask for (a preloaded one is not new in sys.modules)
    real_import = builtins.__import__

    def recording(name: str, *args: object, **kwargs: object) -> object:
        level = args[3] if len(args) > 3 else kwargs.get("level", 0)
        if level == 0:
            asked.add(name.partition(".")[0])
        return real_import(name, *args, **kwargs)  # type: ignore[arg-type]

    builtins.__import__ = recording  # type: ignore[assignment]
    try:
        for i, (block, output) in enumerate(zip(blocks, outputs, strict=True)):
            sys.stdout.flush()
            os.dup2(os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 1)
            before = top_level_modules()
            asked.clear()
            if block.startswith("-m "):
                sys.argv = [block.split()[1]]
                runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
                continue
            name = f"<block {i + 1}>"
            linecache.cache[name] = (len(block), None, block.splitlines(keepends=True), name)  # for tracebacks
            exec(compile(block, name, "exec"), main.__dict__)
    except SystemExit as stop:
        if not (stop.code is None or isinstance(stop.code, int)):
            print(stop.code, file=sys.stderr)
            return 1, set()
        return stop.code or 0, top_level_modules() - before | (asked & PRELOADED)
    except BaseException:
        traceback.print_exc()
        return 1, set()
    return 0, top_level_modules() - before | (asked & PRELOADED)


def main() -> None:
    for line in sys.stdin:
        request = json.loads(line)
        blocks = request["blocks"]
        with tempfile.TemporaryDirectory() as tmp:
            workdir = os.path.join(tmp, "cwd")
            os.mkdir(workdir)
            outputs = [os.path.join(tmp, f"stdout{i}") for i in range(len(blocks))]
            err_path, imported_path = os.path.join(tmp, "stderr"), os.path.join(tmp, "imported")
            pid = os.fork()
            if pid == 0:
                signal.alarm(int(request["timeout"]))
                os.chdir(workdir)
                os.dup2(os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 2)
                status, imported = run_blocks(blocks, outputs)
                with open(imported_path, "w", encoding="utf-8") as f:
                    json.dump(sorted(imported), f)
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(status)
            _, wait_status = os.waitpid(pid, 0)
            reply = {"returncode": os.waitstatus_to_exitcode(wait_status), "stdout": [], "imported": []}
            for path in outputs:
                if os.path.exists(path):
                    with open(path, encoding="utf-8", errors="replace") as f:
                        reply["stdout"].append(f.read())
            with open(err_path, encoding="utf-8", errors="replace") as f:
                reply["stderr"] = f.read()
            if os.path.exists(imported_path):
                with open(imported_path, encoding="utf-8") as f:
                    reply["imported"] = json.load(f)
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()
