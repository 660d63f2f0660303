"""How fast ``make serve`` shows a writer's edit: the procedure of issue 47, to rerun on any machine.

    python tools/dev/serve_latency.py [--page lessons/heads-forming.md] [--repeats 5] [--port 8123]

Starts ``make serve`` on the port, and reports, each with the load average (1 min) when it was taken:

* start: seconds until MkDocs prints "Serving on", and until the page is served;
* prose: REPEATS saves of the page with its first heading edited, each timed from the save until the served
  page shows the edit (polled every 0.25 s, and counted only once the post-build step has rewritten it);
* code: REPEATS saves with a comment added to the page's first shown code block, likewise; the block and every
  later block of the page run again, so this is the page's own code time plus the rest;

each edit undone (and the undo's rebuild waited for) before the next; the medians; the blocks each rebuild ran,
from the serve's log; and whether ``git status`` is empty at the end. Leaves the page as it found it.
``--page`` defaults to the lesson whose blocks take longest (from the log of the first build when the cache is
cold, else heads-forming.md). ``--assume-deps``: pass ``-o`` for the venv and node_modules stamps to make (a
worktree sharing another checkout's environment).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
POSTBUILT = 'aria-label="Search this site"'  # page_fixes adds it: the post-build step has rewritten the page
RAN = re.compile(r"dev cache: (\S+): ran (\d+) blocks, reused (\d+) \(([\d.]+) s\)")


def load() -> float:
    return os.getloadavg()[0]


class Serve:
    def __init__(self, port: int, assume_deps: bool) -> None:
        command = ["make", "--no-print-directory", "serve", f"SERVE_FLAGS=--dev-addr 127.0.0.1:{port}"]
        if assume_deps:
            command[1:1] = ["-o", ".venv/.installed", "-o", "node_modules/.installed"]
        self.lines: list[tuple[float, str]] = []
        self.start = time.monotonic()
        self.proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append((time.monotonic(), line.rstrip()))

    def wait_for(self, text: str, timeout: float = 1800) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for t, line in self.lines:
                if text in line:
                    return t
            if self.proc.poll() is not None:
                raise RuntimeError("make serve ended:\n" + "\n".join(line for _, line in self.lines[-40:]))
            time.sleep(0.1)
        raise TimeoutError(text)

    def stop(self) -> None:
        os.killpg(self.proc.pid, 2)  # Ctrl-C to the serve's process group (make and mkdocs)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, 9)


def fetch(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return str(response.read().decode("utf-8"))
    except OSError:
        return ""


def poll(url: str, shows: str, absent: bool = False, timeout: float = 900) -> float:
    """Seconds until the page at url (post-built) shows `shows` (or no longer shows it)."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        page = fetch(url)
        if POSTBUILT in page and ((shows not in page) if absent else (shows in page)):
            return time.monotonic() - start
        time.sleep(0.25)
    raise TimeoutError(f"{url} never {'dropped' if absent else 'showed'} {shows!r}")


def heaviest(lines: list[tuple[float, str]]) -> str | None:
    runs = [(float(m.group(4)), m.group(1)) for _, line in lines if (m := RAN.search(line))]
    lessons = [r for r in runs if r[1].startswith("lessons/")]
    return max(lessons)[1] if lessons else None


def edit_heading(text: str, mark: str) -> str:
    return re.sub(r"^# (.*)$", lambda m: f"# {m.group(1)} {mark}", text, count=1, flags=re.M)


def edit_code(text: str, mark: str) -> str:
    # the first shown block: a fence with exec="on" and source=..., a comment as its first line
    return re.sub(r'^(```python [^\n]*exec="on"[^\n]*source="[^\n]*\n)', lambda m: f"{m.group(1)}# {mark}\n", text,
                  count=1, flags=re.M)


def measure(serve: Serve, path: Path, url: str, edit: object, kind: str, repeats: int) -> list[float]:
    original = path.read_text(encoding="utf-8")
    times = []
    try:
        for i in range(repeats):
            mark = f"edit{kind}{i}x{os.getpid()}"
            text = edit(original, mark)  # type: ignore[operator]
            assert text != original, f"no place for a {kind} edit in {path}"
            before, seen = load(), len(serve.lines)
            path.write_text(text, encoding="utf-8")
            took = poll(url, mark)
            ran = [RAN.search(line) for _, line in serve.lines[seen:]]
            blocks = [f"{m.group(1)}: {m.group(2)} run, {m.group(3)} reused, {m.group(4)} s" for m in ran if m]
            ran_text = "; ".join(blocks) or "no block ran"
            print(f"  {kind} {i + 1}: {took:.2f} s (load {before:.2f} -> {load():.2f}); {ran_text}", flush=True)
            times.append(took)
            path.write_text(original, encoding="utf-8")
            poll(url, mark, absent=True)
    finally:
        path.write_text(original, encoding="utf-8")
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--page", help="the page under docs/ to edit (default: the heaviest lesson)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--port", type=int, default=8123)
    parser.add_argument("--assume-deps", action="store_true")
    args = parser.parse_args()
    print(f"load at start {load():.2f}", flush=True)
    serve = Serve(args.port, args.assume_deps)
    try:
        serving = serve.wait_for("Serving on") - serve.start
        page = args.page or heaviest(serve.lines) or "lessons/heads-forming.md"
        url = f"http://127.0.0.1:{args.port}/" + (page.removesuffix(".md").removesuffix("index") + "/").lstrip("/")
        poll(url, "</html>", timeout=60)
        first_page = time.monotonic() - serve.start
        print(f"start: 'Serving on' after {serving:.1f} s, {page} served after {first_page:.1f} s "
              f"(load {load():.2f})", flush=True)
        path = ROOT / "docs" / page
        prose = measure(serve, path, url, edit_heading, "prose", args.repeats)
        code = measure(serve, path, url, edit_code, "code", args.repeats)
        print(f"median: prose edit {statistics.median(prose):.2f} s, code edit {statistics.median(code):.2f} s "
              f"(load now {load():.2f})", flush=True)
    finally:
        serve.stop()
    status = subprocess.run(["git", "status", "--short"], cwd=ROOT, capture_output=True, text=True).stdout
    print("git status after make serve: " + ("empty" if not status.strip() else "\n" + status), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
