"""Run a command and report its wall time, the CPU seconds it and its children used, and the load around it.

    python tools/dev/timed.py NAME LOG -- COMMAND ...

Prints one line, ``NAME: 84.2 s wall, 79.0 s CPU (user 71.3 + sys 7.7), load 1.02 -> 1.96``, and appends it to
LOG, so `make test` leaves .cache/checks/timings.txt with a line per step. With $MAKE_TEST_START (seconds since
the epoch, set by `make test`), the line also says when the step started and ended, counted from then.
Exits with the command's status.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path


def main() -> int:
    name, log, sep, *command = sys.argv[1:]
    if sep != "--" or not command:
        print(__doc__, file=sys.stderr)
        return 2
    load_before, start = os.getloadavg()[0], time.monotonic()
    status = subprocess.call(command)
    wall, load_after = time.monotonic() - start, os.getloadavg()[0]
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = float(os.environ.get("MAKE_TEST_START", "nan"))
    since = "" if t0 != t0 else f" (from {time.time() - wall - t0:.0f} s to {time.time() - t0:.0f} s)"
    user, sys_ = usage.ru_utime, usage.ru_stime
    line = (
        f"{name}{since}: {wall:.1f} s wall, {user + sys_:.1f} s CPU (user {user:.1f} + sys {sys_:.1f}), "
        f"load {load_before:.2f} -> {load_after:.2f}{'' if status == 0 else f', exit {status}'}"
    )
    print(line, flush=True)
    Path(log).parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a", encoding="utf-8") as f:
        f.write(line + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
