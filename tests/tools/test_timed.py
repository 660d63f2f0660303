"""tools/dev/timed.py, the timer of `make test`'s steps, counts the CPU of every descendant of the command."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# A child that forks a grandchild and exits at once without waiting for it: the grandchild, orphaned, burns
# BURN_S of CPU. Chromium's renderers are left behind like this, and their CPU was missing from the step's line.
BURN_S = 1.0
ORPHAN = textwrap.dedent(f"""
    import os, time
    if os.fork() == 0:
        if os.fork() == 0:
            start = time.process_time()
            while time.process_time() - start < {BURN_S}:
                pass
            os._exit(0)
        os._exit(0)
    os.wait()
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="child subreapers are a Linux feature")
def test_an_orphaned_grandchilds_cpu_is_counted(tmp_path: Path) -> None:
    log = tmp_path / "timings.txt"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools/dev/timed.py"), "orphan", str(log), "--", sys.executable, "-c", ORPHAN],
        capture_output=True, text=True, timeout=60, check=True,
    )
    cpu = float(re.search(r"([\d.]+) s CPU", proc.stdout).group(1))  # type: ignore[union-attr]
    assert cpu >= 0.8 * BURN_S, proc.stdout
    assert log.read_text(encoding="utf-8") == proc.stdout


def test_the_commands_exit_status_is_passed_on(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools/dev/timed.py"), "fails", str(tmp_path / "t.txt"), "--",
         sys.executable, "-c", "raise SystemExit(3)"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert proc.returncode == 3 and proc.stdout.rstrip().endswith("exit 3"), proc.stdout
