"""Run a function in N local processes joined by ``torch.distributed``, and count what they send.

:func:`launch` runs ``world_size`` local processes (one CPU thread each), joins them into one
gloo process group through a rendezvous file (``init_method="file://..."``: no network port), calls
``fn(comm, *args)`` in each with a :class:`CountingCollectives`, and returns what each rank returned, in
rank order. ``fn`` must be importable by name (a module-level function of an importable module), because
each process imports it afresh: a function defined in a notebook cell or a page's code block cannot be
sent to another process. On Linux the processes are forked from one warm process that has imported torch and
nothing else, started at the first launch and kept for the next ones: each rank starts as a fresh process would,
without paying ``import torch`` again (about 3 CPU-seconds a rank). Elsewhere each is a new ``python``
(:data:`FORK_RANKS`).

:class:`CountingCollectives` is :class:`lessons_src.parallel.Collectives` with a record of every call:
the collective, the bytes of the tensor it was given (the payload) and the bytes this rank sends over
the wire for it, which for ``P`` ranks is

* all-reduce: ``2 (P - 1) / P`` times the payload (a ring all-reduce: a reduce-scatter, then an
  all-gather, each passing ``P - 1`` chunks of ``1 / P`` of the tensor);
* all-to-all: ``(P - 1) / P`` of the payload (every chunk but the one the rank keeps);
* send/receive: the tensor sent.

The few bytes of ``all_gather_ints`` (with which Ulysses and ring attention check, before they send
anything, that every rank holds shards of one shape) are a check, not part of the algorithm, and are
not recorded. The payload is measured from the tensors; the wire bytes are that model of the algorithm (gloo's
all-reduce algorithm depends on the size; NCCL's ring uses this one).

On GPUs the same code runs with ``backend="nccl"``, one GPU per process (``torch.cuda.set_device(rank)``)
and the tensors moved to it; that path is not exercised here (no GPU).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from ..parallel import Collectives

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from torch import Tensor

__all__ = ["CommRecord", "CountingCollectives", "launch"]


@dataclass(frozen=True)
class CommRecord:
    """One collective call on one rank.

    Attributes:
        op: ``"all_reduce"``, ``"all_to_all"`` or ``"send_recv"``.
        shape: the shape of the tensor given (for all-to-all, of the whole input, all chunks).
        payload_bytes: bytes of that tensor.
        sent_bytes: bytes this rank sends for the call (see the module docstring for the model).
    """

    op: str
    shape: tuple[int, ...]
    payload_bytes: int
    sent_bytes: int


class CountingCollectives(Collectives):
    """:class:`lessons_src.parallel.Collectives` that records every call in :attr:`records`."""

    def __init__(self, group: Any = None) -> None:
        super().__init__(group)
        self.records: list[CommRecord] = []

    def all_reduce(self, t: Tensor) -> Tensor:
        P, n = self.world_size, t.numel() * t.element_size()
        self.records.append(CommRecord("all_reduce", tuple(t.shape), n, 2 * (P - 1) * n // P))
        return super().all_reduce(t)

    def all_to_all(self, chunks: Sequence[Tensor]) -> list[Tensor]:
        P = self.world_size
        n = sum(c.numel() * c.element_size() for c in chunks)
        shape = (len(chunks), *tuple(chunks[0].shape)) if chunks else ()
        self.records.append(CommRecord("all_to_all", shape, n, (P - 1) * n // P))
        return super().all_to_all(chunks)

    def send_recv(self, t: Tensor, *, to: int, frm: int) -> Tensor:
        n = t.numel() * t.element_size()
        self.records.append(CommRecord("send_recv", tuple(t.shape), n, n))
        return super().send_recv(t, to=to, frm=frm)

    def sent_bytes(self, op: str | None = None) -> int:
        """Bytes this rank sent, over every recorded call (or those of one ``op``)."""
        return sum(r.sent_bytes for r in self.records if op is None or r.op == op)

    def reset(self) -> None:
        """Forget the records so far."""
        self.records.clear()


def _target(fn: Callable[..., Any]) -> tuple[str, str]:
    module, name = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not callable(fn) or module in (None, "__main__", "__mp_main__") or "<" in name or "." in name:
        raise ValueError(
            f"launch needs a module-level function of an importable module, which each new process can import; "
            f"got {fn!r} (module {module!r}, name {name!r}). Put the function in a .py file and import it"
        )
    assert module is not None
    if getattr(importlib.import_module(module), name, None) is not fn:
        raise ValueError(f"{module}.{name} does not name {fn!r}; launch imports functions by their name")
    return module, name


def _may_form_next_time(err: Exception) -> bool:
    """Whether a new try may form the group: the rendezvous store or the TCP connections between the processes
    failed (gloo's mesh refused or timed out on a loaded machine), not the configuration."""
    return isinstance(err, dist.DistNetworkError | dist.DistStoreError) or "connect" in str(err).lower()


def _child(rank: int, world_size: int, job_dir: str) -> None:
    """What each process runs: join the group, call the function, write its result (or its error)."""
    torch.set_num_threads(1)
    job = Path(job_dir)
    module, name, args, backend = pickle.loads((job / "job.pkl").read_bytes())
    out = job / f"rank{rank}.pt"
    try:
        if backend == "nccl":  # one GPU per process (not run here: no GPU)
            torch.cuda.set_device(rank)
        try:
            rendezvous = f"file://{job / 'rendezvous'}"
            dist.init_process_group(backend, init_method=rendezvous, rank=rank, world_size=world_size)
        except RuntimeError as err:
            if _may_form_next_time(err):  # the parent tries again with a new rendezvous
                torch.save({"ok": False, "rendezvous": True, "error": str(err), "trace": f"{err}"}, out)
            raise
        try:
            fn = getattr(importlib.import_module(module), name)
            result = fn(CountingCollectives(), *args)
        finally:
            dist.destroy_process_group()
        torch.save({"ok": True, "result": result}, out)
    except BaseException as err:  # reported by the parent, with the rank
        import traceback

        if out.exists():  # already reported (the rendezvous failed)
            raise
        torch.save({"ok": False, "error": f"{type(err).__name__}: {err}", "trace": traceback.format_exc()}, out)
        raise


def launch(
    fn: Callable[..., Any], world_size: int, *args: Any, backend: str = "gloo", timeout_s: float = 120.0
) -> list[Any]:
    """Run ``fn(comm, *args)`` in ``world_size`` new local processes; return each rank's result, in rank order.

    On Linux the processes are forks of a warm process started at the first call (see the module's docstring),
    each as fresh as a new ``python`` would be: nothing of the caller's state or of earlier launches reaches it.

    Each process gets one CPU thread (``torch.set_num_threads(1)``, ``OMP_NUM_THREADS=1``), joins a
    ``backend`` process group through a rendezvous file in a fresh temporary folder, and receives a
    :class:`CountingCollectives`. If the group fails to form for a reason that may pass (gloo's TCP
    connections between the processes can be refused on a loaded machine), all processes are started again,
    up to three tries in all; any other failure ends the run at once. Results travel back through
    ``torch.save`` files (tensors, numbers, lists and dicts of them).

    Args:
        fn: a module-level function ``fn(comm, *args)`` of an importable module.
        world_size: processes to run (the parallel degree).
        *args: passed to ``fn`` in every process (picklable).
        backend: ``"gloo"`` on CPU; ``"nccl"`` on GPUs: each process then uses GPU ``rank``
            (``torch.cuda.set_device``), and ``fn`` must put its tensors on ``torch.device("cuda", comm.rank)``.
        timeout_s: seconds to wait for all processes before stopping them.

    Returns:
        ``[result of rank 0, result of rank 1, ...]``.

    Raises:
        ValueError: if ``fn`` cannot be imported by name, ``world_size`` is below 1, or this build of torch
            lacks ``backend``.
        RuntimeError: if a process fails (the message names the rank and shows its error) or the run
            takes longer than ``timeout_s``.

    Example:
        >>> from lessons_src.lab.parallel_runs import ranks_and_sizes
        >>> launch(ranks_and_sizes, 2)
        [(0, 2), (1, 2)]
    """
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be an int of at least 1 (processes to start); got {world_size!r}")
    if not dist.is_backend_available(backend):
        here = [b for b in ("gloo", "nccl", "mpi", "ucc", "xccl") if dist.is_backend_available(b)]
        raise ValueError(f"backend={backend!r} is not available in this build of torch; available here: {here}")
    module, name = _target(fn)
    for attempt in range(1, _ATTEMPTS + 1):
        try:
            return _run(module, name, args, world_size, backend, timeout_s)
        except _NoGroupError as err:  # gloo's TCP mesh did not form (seen on a loaded machine): start afresh
            if attempt == _ATTEMPTS:
                raise RuntimeError(f"launch: the process group did not form in {_ATTEMPTS} tries: {err}") from None
    raise AssertionError("unreachable")


_ATTEMPTS = 3


class _NoGroupError(Exception):
    """A rank failed inside init_process_group, before running anything of the caller's."""


def _rank_env() -> dict[str, str]:
    """The caller's environment, with one CPU thread per rank."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


class _Zygote:
    """A warm process that forks the ranks: ``import torch`` is paid once for every launch of this process.

    A fresh ``python`` per rank would import torch again, about 3 CPU-seconds each. The zygote imports this module
    (torch and torch.distributed with it) and then only forks: each rank is a copy of a process that has run
    nothing, so it starts with the state a fresh process has (no process group, random generators seeded anew
    from the system, as a new process seeds them), and it reads the job from its folder as a fresh process
    would. Each request carries the caller's working folder and environment, which the rank takes on
    (``OMP_NUM_THREADS`` and ``MKL_NUM_THREADS`` set to 1); a change to ``PYTHONPATH`` (read when Python starts)
    starts a new zygote. The zygote reaps its ranks and writes each one's exit code to ``rank<r>.exit`` in the
    job's folder. It lives as long as the process that started it (its standard input closes with it).
    """

    _CODE = "from lessons_src.lab.launch import _zygote_main; _zygote_main()"

    def __init__(self) -> None:
        self.key = self.now()
        self.proc = subprocess.Popen(  # our own interpreter, running our own code
            [sys.executable, "-c", self._CODE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=_rank_env(),
            text=True,
        )

    @staticmethod
    def now() -> tuple[int, str | None]:
        """What a warm zygote cannot take on afterwards: the process it serves, and ``PYTHONPATH``."""
        return os.getpid(), os.environ.get("PYTHONPATH")

    def start(self, rank: int, world_size: int, job_dir: str) -> int:
        """Fork rank ``rank``; returns its process id."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            request = {"rank": rank, "world_size": world_size, "job_dir": job_dir, "cwd": os.getcwd(),
                       "env": _rank_env()}
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            reply = self.proc.stdout.readline()
        except BrokenPipeError:
            reply = ""
        if not reply.strip().isdigit():
            raise RuntimeError(f"launch: the process that starts the ranks ended (exit code {self.proc.poll()})")
        return int(reply)

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


_zygote: _Zygote | None = None


def _warm_zygote() -> _Zygote:
    global _zygote
    if _zygote is not None and _zygote.key[0] != os.getpid():  # a fork of the process that started it
        _zygote = None
    if _zygote is not None and (_zygote.proc.poll() is not None or _zygote.key != _Zygote.now()):
        _zygote.close()
        _zygote = None
    if _zygote is None:
        _zygote = _Zygote()
    return _zygote


@atexit.register
def _close_zygote() -> None:
    if _zygote is not None and _zygote.key[0] == os.getpid():
        _zygote.close()


def _zygote_main() -> None:
    """The zygote's loop: for each request (a line of JSON: rank, world size, job folder, folder, environment),
    fork that rank."""
    exits: dict[int, Path] = {}

    def reap(*_: Any) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            path = exits.pop(pid, None)
            if path is not None:
                try:
                    path.with_suffix(".tmp").write_text(str(os.waitstatus_to_exitcode(status)))
                    path.with_suffix(".tmp").replace(path)
                except OSError:  # the launch already gave up and removed its folder
                    pass

    signal.signal(signal.SIGCHLD, reap)
    for line in sys.stdin:
        request = json.loads(line)
        rank, job_dir = request["rank"], request["job_dir"]
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})  # no reaping before the pid is on record
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
            torch.seed()  # a seed of its own, as a new process draws (Python's `random` reseeds itself at a fork)
            if "numpy" in sys.modules:
                sys.modules["numpy"].random.seed()
            code = 1
            try:
                os.chdir(request["cwd"])
                os.environ.clear()
                os.environ.update(request["env"])
                log = os.open(Path(job_dir) / f"rank{rank}.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
                os.dup2(os.open(os.devnull, os.O_RDONLY), 0)  # off the zygote's pipes
                os.dup2(log, 1)
                os.dup2(log, 2)
                _child(rank, request["world_size"], job_dir)
                code = 0
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        exits[pid] = Path(job_dir) / f"rank{rank}.exit"
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
        print(pid, flush=True)


def _exit_code(job: Path, rank: int) -> int | None:
    path = job / f"rank{rank}.exit"
    return int(path.read_text()) if path.exists() else None


FORK_RANKS = sys.platform.startswith("linux")
"""Whether ranks are forked from the warm zygote. Elsewhere each rank is a new ``python``: macOS's system
libraries are not safe to use in a fork of a process that has loaded them, and Windows has no fork."""


class _Ranks:
    """The ranks of one try: forked by the zygote (:data:`FORK_RANKS`), else each a new ``python``."""

    def __init__(self, world_size: int, job_dir: str) -> None:
        self.job, self.procs, self.pids = Path(job_dir), [], []
        if FORK_RANKS:
            zygote = _warm_zygote()
            self.pids = [zygote.start(r, world_size, job_dir) for r in range(world_size)]
            return
        env = _rank_env()
        code = ("import sys; from lessons_src.lab.launch import _child; "
                "_child(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])")
        for r in range(world_size):
            with (self.job / f"rank{r}.log").open("wb") as sink:
                self.procs.append(subprocess.Popen(  # our own interpreter, running our own code
                    [sys.executable, "-c", code, str(r), str(world_size), job_dir], env=env, stdout=sink, stderr=sink
                ))

    def codes(self) -> list[int | None]:
        """Each rank's exit code, None while it runs."""
        if self.procs:
            return [p.poll() for p in self.procs]
        return [_exit_code(self.job, r) for r in range(len(self.pids))]

    def stop(self) -> None:
        """Kill the ranks still running and wait until they are gone (the zygote reaps forked ones)."""
        for r, code in enumerate(self.codes()):
            if code is None and self.procs:
                self.procs[r].kill()
            elif code is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pids[r], signal.SIGKILL)
        for p in self.procs:
            p.wait()
        deadline = time.monotonic() + 10
        while None in self.codes() and time.monotonic() < deadline:
            time.sleep(0.01)


def _run(module: str, name: str, args: tuple[Any, ...], world_size: int, backend: str, timeout_s: float) -> list[Any]:
    """One try of :func:`launch`: start the ranks in a fresh folder, wait, collect their reports."""
    with tempfile.TemporaryDirectory(prefix="lessons-launch-") as job_dir:
        job = Path(job_dir)
        (job / "job.pkl").write_bytes(pickle.dumps((module, name, args, backend)))
        ranks = _Ranks(world_size, job_dir)
        logs = [job / f"rank{r}.log" for r in range(world_size)]
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline:
                codes = ranks.codes()  # every process, each round
                if None not in codes or any(codes):  # all ended, or one failed: the others would wait for it forever
                    break
                time.sleep(0.02)
        finally:
            ranks.stop()
        codes = ranks.codes()
        reports = []
        for r in range(world_size):
            out = job / f"rank{r}.pt"
            reports.append(torch.load(out, weights_only=False) if out.exists() else None)
        if any(report is not None and report.get("rendezvous") for report in reports):
            raise _NoGroupError(next(report["error"] for report in reports if report and report.get("rendezvous")))
        for r, report in enumerate(reports):
            if report is not None and not report["ok"]:
                raise RuntimeError(
                    f"launch: rank {r} of {world_size} running {module}.{name} failed:\n{report['trace']}"
                )
        for r, report in enumerate(reports):
            if report is None:
                log = logs[r].read_text(errors="replace")[-2000:] if logs[r].exists() else ""
                raise RuntimeError(
                    f"launch: rank {r} of {world_size} running {module}.{name} did not finish within {timeout_s} s "
                    f"or exited with code {codes[r]}:\n{log}"
                )
        return [report["result"] for report in reports if report is not None]
