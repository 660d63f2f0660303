"""Run a command and report its wall time, the CPU seconds it and all its descendants used, and the load around it.

    python tools/dev/timed.py NAME LOG -- COMMAND ...

Prints one line, ``NAME: 84.2 s wall, 79.0 s CPU (user 71.3 + sys 7.7), load 1.02 -> 1.96``, and appends it to
LOG, so `make test` leaves .cache/checks/timings.txt with a line per step. With $MAKE_TEST_START (seconds since
the epoch, set by `make test`), the line also says when the step started and ended, counted from then.
Exits with the command's status.

The CPU figure counts every process the command started, however deep. A process's CPU reaches its parent's
count only when the parent waits for it, and some never are: Chromium's renderers, for one, are left to
whoever adopts them, so the browser step used to report about a quarter of what it spent. On Linux this
process therefore makes itself a *child subreaper* (prctl PR_SET_CHILD_SUBREAPER): a descendant whose parent
is gone is handed to it, and it waits for each one, which adds that one's CPU. Descendants still running
`GRACE_S` after the command ended are named on the line, uncounted.
"""

from __future__ import annotations

import ctypes
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36  # from <linux/prctl.h>
GRACE_S = 10.0


def become_subreaper() -> bool:
    """Adopt orphaned descendants (Linux); False where the system has no such thing."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return int(ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def children_left() -> list[int]:
    """Our children still running (adopted descendants included), from /proc."""
    me, left = os.getpid(), []
    for entry in os.listdir("/proc"):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except (OSError, ValueError):
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if entry.isdigit() and int(fields[1]) == me and fields[0] != "Z":
            left.append(int(entry))
    return left


def run(command: list[str]) -> tuple[int, list[int]]:
    """Run the command; wait for it and then for every descendant handed to us (up to GRACE_S).

    Returns the command's exit status and the descendants still running at the end (their CPU is not counted).
    """
    proc = subprocess.Popen(command)
    status = proc.wait()
    deadline = time.monotonic() + GRACE_S
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:  # nobody left to wait for
            return status, []
        if pid == 0:
            if time.monotonic() > deadline:
                return status, children_left()
            time.sleep(0.05)


def main() -> int:
    name, log, sep, *command = sys.argv[1:]
    if sep != "--" or not command:
        print(__doc__, file=sys.stderr)
        return 2
    become_subreaper()
    load_before, start = os.getloadavg()[0], time.monotonic()
    status, left = run(command)
    wall, load_after = time.monotonic() - start, os.getloadavg()[0]
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = float(os.environ.get("MAKE_TEST_START", "nan"))
    since = "" if t0 != t0 else f" (from {time.time() - wall - t0:.0f} s to {time.time() - t0:.0f} s)"
    user, sys_ = usage.ru_utime, usage.ru_stime
    line = (
        f"{name}{since}: {wall:.1f} s wall, {user + sys_:.1f} s CPU (user {user:.1f} + sys {sys_:.1f}), "
        f"load {load_before:.2f} -> {load_after:.2f}{'' if status == 0 else f', exit {status}'}"
        f"{f', still running after it (not counted): pids {left}' if left else ''}"
    )
    print(line, flush=True)
    Path(log).parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a", encoding="utf-8") as f:
        f.write(line + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
