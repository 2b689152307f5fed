"""Execute the runs of a sweep: each in its own process, N at a time, resumable, failures isolated.

For every point the runner

1. writes the resolved configuration to ``<sweep_dir>/configs/<name>.yaml``;
2. skips the point if its run directory holds ``final.json`` with the same configuration (a finished
   run with a different configuration is reported as a failure: delete it or change the sweep);
3. if another process owns its run directory (its lock is held: another sweep or ``mr2 train`` is
   training it), waits for that process to let go of it, after the runs it can train itself, then
   uses the result: finished there, it is ``skipped`` ("finished by another process"); not finished
   (that process was stopped), the sweep trains it itself. A lock held by the sweep's own process
   (a library caller holding :class:`~mr2.rundir.RunLock`) cannot be waited for: that run is
   reported as ``running`` and left alone;
4. otherwise trains it in a separate process (:mod:`mr2.sweep.processes`), the equivalent of
   ``mr2 train --config <that file>``, which resumes from ``checkpoints/last.pt`` when a previous
   attempt was interrupted. When that trainer fails because another process took the run between
   the check and the start (two sweeps of the same spec at once), the run is not a failure: the
   sweep re-checks the lock and ``final.json`` and goes back to step 3. The trainer's exit code is
   not parsed: a failed trainer counts as having lost that race only when another process holds
   the lock, or the run has finished, once it has ended.

Up to ``workers`` runs execute at once, each limited to ``threads_per_run`` torch threads (default:
CPU cores // workers) so that parallel runs do not fight over the cores. A run that fails does not
stop the others; its outcome carries the tail of its log. The trainers never outlive the sweep
(see :mod:`mr2.sweep.processes`). Progress goes to ``stream`` (:mod:`mr2.sweep.progress`).
"""

from __future__ import annotations

import concurrent.futures
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TextIO

from mr2.config import config_to_dict
from mr2.config.diff import config_differences
from mr2.sweep.plan import RunPoint
from mr2.sweep.processes import (
    SweepInterrupted,
    TrainerPool,
    default_threads,
    forward_stop_signals,
    write_config,
)
from mr2.sweep.progress import estimate_remaining, format_duration, log_tail, running_line

__all__ = [
    "FINISHED_ELSEWHERE",
    "IN_USE",
    "RunOutcome",
    "finished_config_mismatch",
    "pending_points",
    "run_points",
]

_STALE_RUN = (
    "{run_dir} holds a finished run with a different configuration (differs in: {keys}); delete "
    "that directory to re-run it, or give the sweep another name / output_dir"
)
IN_USE = (
    "not started: {process} owns {run_dir} (another sweep or `mr2 train` is training it); "
    "re-run the sweep once it has ended to include the run"
)
_WAITING = (
    "waiting for {name}: {process} owns {run_dir} (another sweep or `mr2 train` is training it); "
    "its result is used once it ends"
)
FINISHED_ELSEWHERE = "finished by another process"


def _process(pid: int) -> str:
    """``process N``, or ``another process`` when the lock names no pid (``-1``, see
    :func:`mr2.rundir.lock_holder`)."""
    return f"process {pid}" if pid > 0 else "another process (its lock file names no pid)"
_NO_FINAL = "the run ended with exit code 0 but wrote no final.json"
_STOPPED = "stopped: the sweep was interrupted (it resumes from its checkpoint)"
_NOT_STARTED = "not started: the sweep was interrupted"
ALL_FAILED = "every run failed ({message}); the first, {name}, logged: {excerpt}"
ONLY_HEADER = (
    "nothing but its header line: the error is on this terminal above (the training process failed "
    "before it could write to train.log){hint}"
)
MAIN_GUARD_HINT = (
    "; a Python script that runs a sweep needs its code under `if __name__ == \"__main__\":`, since "
    "the runs' processes import the script again"
)
#: Lines of the first failure's train.log quoted by :data:`ALL_FAILED` (its last ones).
ALL_FAILED_LINES = 3
#: Seconds between checks of a run directory another process holds.
_WAIT_POLL_SECONDS = 0.25
#: Times a run is taken over by other processes before the sweep gives up on it.
_MAX_ATTEMPTS = 20
#: Config keys that may differ between a finished run and the plan without making it stale.
_IGNORED_KEYS = ("output_dir",)


@dataclass
class RunOutcome:
    """What happened to one point.

    Attributes:
        point: the run point.
        status: ``done`` (trained now), ``skipped`` (finished earlier, or by another process
            while the sweep waited: message :data:`FINISHED_ELSEWHERE`), ``running`` (owned by
            another process and left alone: only a lock of the sweep's own process, or with the
            Slurm launcher) or ``failed``.
        seconds: wall time of the attempt (0 for runs not attempted).
        returncode: exit code of the training process (None if none was started).
        message: why it failed or was left alone ("" otherwise).
        log_tail: the last lines of ``train.log`` for a failed run.
    """

    point: RunPoint
    status: Literal["done", "skipped", "running", "failed"]
    seconds: float = 0.0
    returncode: int | None = None
    message: str = ""
    log_tail: str = ""

    @property
    def log_path(self) -> Path:
        """``<run_dir>/train.log``."""
        return self.point.directory.log


def finished_config_mismatch(point: RunPoint) -> list[str]:
    """Config keys in which the finished run in ``point.run_dir`` differs from the plan ([] if equal).

    The rule is :func:`mr2.config.diff.config_differences` (a key the finished run's ``config.yaml``
    lacks counts as equal when the plan has the schema's default there), ignoring ``output_dir``.
    """
    directory = point.directory
    previous = directory.read_config()
    if previous is None:
        # Nothing to compare against: trust final.json, unless config.yaml is there but unreadable.
        return [f"{directory.config_file.name} (unreadable)"] if directory.config_file.exists() else []
    return config_differences(previous, config_to_dict(point.config), ignore=_IGNORED_KEYS)


def _in_use(point: RunPoint) -> RunOutcome | None:
    holder = point.directory.holder()
    if holder is None:
        return None
    message = IN_USE.format(process=_process(holder), run_dir=point.run_dir)
    return RunOutcome(point, "running", message=message)


def _finished_outcome(point: RunPoint, message: str) -> RunOutcome:
    """``skipped`` for a finished run of the planned configuration, ``failed`` for another one."""
    differs = finished_config_mismatch(point)
    if differs:
        message = _STALE_RUN.format(run_dir=point.run_dir, keys=", ".join(differs))
        return RunOutcome(point, "failed", message=message)
    return RunOutcome(point, "skipped", message=message)


def _wait_released(point: RunPoint, stopping: threading.Event) -> bool:
    """Wait until no process holds the run directory; False when the sweep is stopping first."""
    while point.directory.holder() is not None:
        if stopping.wait(_WAIT_POLL_SECONDS):
            return False
    return True


def _train(pool: TrainerPool, point: RunPoint, waiting: Callable[[RunPoint, int], None]) -> RunOutcome:
    """Train ``point``, waiting first for any other process that holds it (module docstring)."""
    outcome = RunOutcome(point, "failed", message=_NOT_STARTED)
    for _ in range(_MAX_ATTEMPTS):
        holder = point.directory.holder()
        if holder is not None:
            if holder == os.getpid():  # cannot be waited for: this process would never let go
                message = IN_USE.format(process=_process(holder), run_dir=point.run_dir)
                return RunOutcome(point, "running", message=message)
            waiting(point, holder)
            if not _wait_released(point, pool.stopping):
                return RunOutcome(point, "failed", message=_NOT_STARTED)
        if point.directory.is_finished:
            return _finished_outcome(point, FINISHED_ELSEWHERE)
        start = time.perf_counter()
        returncode = pool.train(point)
        if returncode is None:
            return RunOutcome(point, "failed", message=_NOT_STARTED)
        seconds = time.perf_counter() - start
        if returncode == 0 and point.directory.is_finished:
            return RunOutcome(point, "done", seconds, returncode)
        if pool.stopping.is_set():
            return RunOutcome(point, "failed", seconds, returncode, _STOPPED, log_tail(point.directory.log))
        message = _NO_FINAL if returncode == 0 else f"exit code {returncode}"
        outcome = RunOutcome(point, "failed", seconds, returncode, message, log_tail(point.directory.log))
        if point.directory.holder() is None and not point.directory.is_finished:
            return outcome  # a failure of its own: nobody else took the run
        # Another process took the run between the check and the start: wait for it (loop).
    return outcome


def pending_points(
    points: Sequence[RunPoint],
    out: TextIO,
    on_outcome: Callable[[RunOutcome], None] | None = None,
    *,
    wait_elsewhere: bool = False,
) -> tuple[dict[str, RunOutcome], list[RunPoint]]:
    """Write every point's configuration and sort the points out: finished (skipped, or failed when
    finished with another configuration) get their outcome now (one numbered line each on ``out``),
    and so do those owned by another process unless ``wait_elsewhere``; the others are returned to
    be trained, in plan order (with ``wait_elsewhere``, those owned by another process last)."""
    outcomes: dict[str, RunOutcome] = {}
    pending: list[RunPoint] = []
    held: list[RunPoint] = []

    def report(outcome: RunOutcome, text: str) -> None:
        outcomes[outcome.point.name] = outcome
        print(f"[{len(outcomes)}/{len(points)}] {text}", file=out, flush=True)
        if on_outcome is not None:
            on_outcome(outcome)

    for point in points:
        write_config(point)
        if point.directory.is_finished:
            differs = finished_config_mismatch(point)
            if differs:
                message = _STALE_RUN.format(run_dir=point.run_dir, keys=", ".join(differs))
                report(RunOutcome(point, "failed", message=message), f"FAILED {point.name}: {message}")
            else:
                report(RunOutcome(point, "skipped"), f"skipped {point.name} (finished earlier)")
            continue
        busy = _in_use(point)
        if busy is not None and wait_elsewhere and point.directory.holder() != os.getpid():
            held.append(point)
            continue
        if busy is not None:
            report(busy, f"running elsewhere {point.name}: {busy.message}")
            continue
        pending.append(point)
    return outcomes, pending + held


def run_points(
    points: Sequence[RunPoint],
    *,
    workers: int = 1,
    threads_per_run: int | None = None,
    nproc_per_node: int | None = None,
    devices: Sequence[int] | None = None,
    stream: TextIO | None = None,
    status_every: float = 60.0,
    python: str | None = None,
    on_outcome: Callable[[RunOutcome], None] | None = None,
) -> list[RunOutcome]:
    """Run every point that has not finished yet; return one outcome per point, in plan order.

    Args:
        points: the planned runs.
        workers: how many runs execute at once.
        threads_per_run: torch threads per run (``OMP_NUM_THREADS``, unless already set in the
            environment); default: CPU cores // workers.
        nproc_per_node: launch each run with ``torchrun --standalone --nproc_per_node=N``.
        devices: GPU ids; worker k's runs see ``devices[k * n:(k + 1) * n]`` (n = nproc_per_node or
            1) through ``CUDA_VISIBLE_DEVICES``. None: every run sees the environment's devices.
        stream: where progress lines go (default: stdout; pass ``io.StringIO()`` to silence it).
        status_every: seconds between "still running" lines (the epoch each running run is at).
        python: run each training as ``<python> -m mr2 train`` in a fresh interpreter instead of
            a forked process (default: forked from this interpreter's fork server).
        on_outcome: called with each outcome as it becomes known.

    Raises:
        SweepInterrupted: on Ctrl-C, SIGTERM or SIGHUP (from the main thread), after stopping the
            running trainers (they keep their checkpoints).
    """
    out = stream if stream is not None else sys.stdout
    total = len(points)
    outcomes, pending = pending_points(points, out, on_outcome, wait_elsewhere=True)
    counter = len(outcomes)
    announced: set[str] = set()
    print_lock = threading.Lock()

    def announce_wait(point: RunPoint, pid: int) -> None:
        with print_lock:
            if point.name in announced:
                return
            announced.add(point.name)
        print(_WAITING.format(name=point.name, process=_process(pid), run_dir=point.run_dir), file=out,
              flush=True)

    def report(outcome: RunOutcome, text: str) -> None:
        nonlocal counter
        counter += 1
        outcomes[outcome.point.name] = outcome
        print(f"[{counter}/{total}] {text}", file=out, flush=True)
        if on_outcome is not None:
            on_outcome(outcome)

    if not pending:
        return [outcomes[p.name] for p in points]

    threads = threads_per_run or default_threads(workers)
    resuming = sum(p.directory.last_checkpoint.is_file() for p in pending)
    print(
        f"running {len(pending)} of {total} runs ({resuming} resuming from a checkpoint) with "
        f"{workers} worker{'s' if workers > 1 else ''}, {threads} thread{'s' if threads > 1 else ''} "
        "each; logs in <run_dir>/train.log",
        file=out,
        flush=True,
    )
    per_run = nproc_per_node or 1
    slots: list[str | None] = [None] * workers
    if devices is not None:
        slots = [",".join(str(d) for d in devices[k * per_run:(k + 1) * per_run]) for k in range(workers)]
    trainers = TrainerPool(threads, nproc_per_node, python, slots)
    by_name = {p.name: p for p in pending}
    durations: list[float] = []
    sweep_start = time.perf_counter()
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="mr2-sweep")
    try:
        with forward_stop_signals():
            futures = {pool.submit(_train, trainers, point, announce_wait): point for point in pending}
            waiting = set(futures)
            last_status = time.perf_counter()
            while waiting:
                done, waiting = concurrent.futures.wait(
                    waiting, timeout=min(5.0, status_every), return_when=concurrent.futures.FIRST_COMPLETED
                )
                for future in sorted(done, key=lambda f: pending.index(futures[f])):
                    outcome = future.result()
                    left = len(waiting)
                    if outcome.status == "done":
                        durations.append(outcome.seconds)
                    eta = ""
                    if durations and left:
                        remaining = estimate_remaining(durations, left, trainers.running(), workers)
                        eta = f", ETA {format_duration(remaining)}"
                    if outcome.status == "done":
                        took = format_duration(outcome.seconds)
                        report(outcome, f"done {outcome.point.name} ({took}){eta}")
                    elif outcome.status == "skipped":
                        report(outcome, f"finished elsewhere {outcome.point.name} ({outcome.message}){eta}")
                    elif outcome.status == "running":
                        report(outcome, f"running elsewhere {outcome.point.name}: {outcome.message}{eta}")
                    else:
                        report(
                            outcome,
                            f"FAILED {outcome.point.name} ({outcome.message}, "
                            f"{format_duration(outcome.seconds)}); log: {outcome.log_path}{eta}",
                        )
                now = time.perf_counter()
                if waiting and now - last_status >= status_every:
                    last_status = now
                    running = [by_name[name] for name, _ in trainers.running() if name in by_name]
                    if running:
                        print(running_line(now - sweep_start, running), file=out, flush=True)
    except KeyboardInterrupt as interrupt:
        trainers.stop_all()
        pool.shutdown(wait=True, cancel_futures=True)
        signum = interrupt.signum if isinstance(interrupt, SweepInterrupted) else signal.SIGINT
        raise SweepInterrupted(signum) from None
    pool.shutdown(wait=True)
    line = all_failed_line([outcomes[p.name] for p in pending], script_main=python is None)
    if line is not None:
        print(line, file=out, flush=True)
    return [outcomes[p.name] for p in points]


def all_failed_line(attempted: Sequence[RunOutcome], *, script_main: bool = True) -> str | None:
    """One line (:data:`ALL_FAILED`) when at least two runs were attempted and every one failed with
    the same message: the common cause is then usually one, and the first failure's log says it
    (its last lines, or a traceback's last line: the exception). A log with nothing but the header
    means the process failed before writing to it; with ``script_main`` (trainers forked from a fork
    server, which imports the ``__main__`` script again) and a script as ``__main__``, the line
    names the missing ``if __name__ == "__main__":`` guard."""
    if len(attempted) < 2 or any(o.status != "failed" or o.message == _STOPPED for o in attempted):
        return None
    if len({o.message for o in attempted}) != 1:
        return None
    first = attempted[0]
    lines = [line.strip() for line in log_tail(first.log_path, lines=200).splitlines()
             if line.strip() and not line.startswith("=== mr2 sweep")]
    if lines:
        traceback = any(line.startswith("Traceback (most recent call last)") for line in lines)
        excerpt = " | ".join(lines[-1:] if traceback else lines[-ALL_FAILED_LINES:])
        excerpt = excerpt if len(excerpt) <= 400 else excerpt[:397] + "..."
    else:
        main_file = getattr(sys.modules.get("__main__"), "__file__", None)
        excerpt = ONLY_HEADER.format(hint=MAIN_GUARD_HINT if script_main and main_file else "")
    return ALL_FAILED.format(message=first.message, name=first.point.name, excerpt=excerpt)
