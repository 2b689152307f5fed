"""Execute the runs of a sweep: each in its own process, N at a time, resumable, failures isolated.

For every point the runner

1. writes the resolved configuration to ``<sweep_dir>/configs/<name>.yaml``;
2. skips the point if its run directory holds ``final.json`` with the same configuration (a finished
   run with a different configuration is reported as a failure: delete it or change the sweep);
3. otherwise trains it in a separate process, the equivalent of ``mr2 train --config <that file>``,
   with stdout and stderr appended to ``<run_dir>/train.log``. The processes are forked from a
   server that has imported torch and mr2 once (``multiprocessing``'s ``forkserver``), so a run
   starts in milliseconds rather than the seconds an interpreter needs to import torch; with
   ``nproc_per_node`` set, the command is ``python -m torch.distributed.run --standalone
   --nproc_per_node=N -m mr2 train --config <file>`` instead. ``mr2 train`` resumes from
   ``checkpoints/last.pt`` when a previous attempt was interrupted.

Up to ``workers`` runs execute at once, each limited to ``threads_per_run`` torch threads (default:
CPU cores // workers) so that parallel runs do not fight over the cores. A run that fails does not
stop the others; its outcome carries the tail of its log. Progress goes to ``stream``::

    [3/12] done mr2__c_bar=2__seed=0 (41 s), ETA 4 min
"""

from __future__ import annotations

import concurrent.futures
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TextIO

import yaml

import mr2
from mr2.config import config_to_dict
from mr2.config.diff import config_differences
from mr2.io import atomic_write_text
from mr2.sweep.plan import RunPoint

__all__ = [
    "RunOutcome",
    "SweepInterrupted",
    "config_path",
    "default_threads",
    "finished_config_mismatch",
    "run_points",
    "train_command",
    "write_config",
]

STALE_RUN = (
    "{run_dir} holds a finished run with a different configuration (differs in: {keys}); delete "
    "that directory to re-run it, or give the sweep another name / output_dir"
)
NO_FINAL = "the run ended with exit code 0 but wrote no final.json"
LOG_TAIL_LINES = 25
#: Config keys that may differ between a finished run and the plan without making it stale.
_IGNORED_KEYS = ("output_dir",)


class SweepInterrupted(KeyboardInterrupt):
    """The sweep was interrupted (Ctrl-C); running runs were stopped and keep their checkpoints."""


@dataclass
class RunOutcome:
    """What happened to one point.

    Attributes:
        point: the run point.
        status: ``done`` (trained now), ``skipped`` (finished earlier) or ``failed``.
        seconds: wall time of the attempt (0 for skipped runs).
        returncode: exit code of the training process (None if none was started).
        message: why it failed ("" otherwise).
        log_tail: the last lines of ``train.log`` for a failed run.
    """

    point: RunPoint
    status: Literal["done", "skipped", "failed"]
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


def config_path(point: RunPoint) -> Path:
    """Where the resolved configuration of ``point`` is written: ``<sweep_dir>/configs/<name>.yaml``."""
    return Path(point.config.output_dir) / "configs" / f"{point.name}.yaml"


def write_config(point: RunPoint) -> Path:
    """Write the point's resolved configuration (unchanged files are not rewritten)."""
    path = config_path(point)
    text = yaml.safe_dump(config_to_dict(point.config), sort_keys=False)
    if not path.is_file() or path.read_text() != text:
        atomic_write_text(path, text)
    return path


def train_command(point: RunPoint, *, nproc_per_node: int | None = None,
                  python: str | None = None) -> list[str]:
    """The command that trains ``point`` (its configuration file must have been written)."""
    python = python or sys.executable
    launcher = [python, "-m", "mr2"]
    if nproc_per_node is not None:
        launcher = [python, "-m", "torch.distributed.run", "--standalone",
                    f"--nproc_per_node={nproc_per_node}", "-m", "mr2"]
    return [*launcher, "train", "--config", str(config_path(point))]


def _environment(threads: int) -> dict[str, str]:
    env = dict(os.environ)
    # The child must import this very mr2, installed or not (e.g. a source checkout on PYTHONPATH).
    package_root = str(Path(mr2.__file__).resolve().parent.parent)
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if package_root not in paths:
        env["PYTHONPATH"] = os.pathsep.join([package_root, *paths])
    for variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(variable, str(threads))
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _epoch_progress(point: RunPoint) -> str:
    """``epoch 3/10`` from the run's metrics.jsonl ("starting" before the first epoch ends)."""
    done = len(point.directory.read_metrics())
    return f"epoch {done}/{point.config.optim.epochs}" if done else "starting"


#: Imported once by the fork server, so that each run starts in milliseconds instead of seconds.
_PRELOAD = (
    "mr2.cli.main",
    "mr2.cli.train",
    "mr2.engine.run",
    "mr2.engine.builders",
    "mr2.models.registry",
    "mr2.data.registry",
    "mr2.methods.registry",
    "torch.utils.tensorboard",
)


def _train_in_child(config_file: str, log_file: str, threads: int, visible_devices: str | None) -> None:
    """Body of a run's process: stdout/stderr to the log, ``threads`` torch threads, ``mr2 train``."""
    if visible_devices is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = visible_devices  # before CUDA is initialised
    fd = os.open(log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(threads)
    import torch

    torch.set_num_threads(threads)
    from mr2.cli.main import main

    try:
        code = main(["train", "--config", config_file])
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    sys.exit(code)


def _process_context() -> Any:
    """``forkserver`` (runs fork from a server that has already imported torch and mr2) where the
    platform has it, else ``spawn``; either way every run is a separate process."""
    import multiprocessing

    if "forkserver" in multiprocessing.get_all_start_methods():
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(list(_PRELOAD))
        return context
    return multiprocessing.get_context("spawn")  # pragma: no cover - Windows


class _Child:
    """A running training process: a multiprocessing child, or a subprocess (torchrun)."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def wait(self) -> int:
        if isinstance(self.handle, subprocess.Popen):
            return int(self.handle.wait())
        self.handle.join()
        return int(self.handle.exitcode if self.handle.exitcode is not None else -1)

    def alive(self) -> bool:
        if isinstance(self.handle, subprocess.Popen):
            return self.handle.poll() is None
        return bool(self.handle.is_alive())

    def terminate(self) -> None:
        if self.alive():
            self.handle.terminate()

    def kill(self) -> None:
        if self.alive():
            self.handle.kill()

    def wait_for(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds; True if it ended."""
        if isinstance(self.handle, subprocess.Popen):
            try:
                self.handle.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                return False
            return True
        self.handle.join(timeout)
        return not self.handle.is_alive()


class _Executor:
    """Starts the training processes and stops them all on interruption."""

    def __init__(
        self, threads: int, nproc_per_node: int | None, python: str | None, slots: list[str | None]
    ) -> None:
        self.threads = threads
        self.slots: queue.Queue[str | None] = queue.Queue()
        for slot in slots:
            self.slots.put(slot)
        self.env = _environment(threads)
        self.nproc_per_node = nproc_per_node
        self.python = python
        self.context = _process_context() if nproc_per_node is None and python is None else None
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.children: dict[str, _Child] = {}
        self.started: dict[str, float] = {}

    def _start(self, point: RunPoint, log_path: Path, devices: str | None) -> _Child:
        on = "" if devices is None else f", CUDA_VISIBLE_DEVICES={devices}"
        if self.context is None:
            command = train_command(point, nproc_per_node=self.nproc_per_node, python=self.python)
            env = dict(self.env)
            if devices is not None:
                env["CUDA_VISIBLE_DEVICES"] = devices
            with open(log_path, "ab") as log:
                stamp = time.strftime("%Y-%m-%d %H:%M:%S")
                log.write(f"=== mr2 sweep, {stamp}: {' '.join(command)}{on}\n".encode())
                log.flush()
                return _Child(subprocess.Popen(
                    command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
                ))
        with open(log_path, "a") as log:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            log.write(f"=== mr2 sweep, {stamp}: mr2 train --config {config_path(point)} "
                      f"({self.threads} thread{'s' if self.threads > 1 else ''}{on})\n")
        process = self.context.Process(
            target=_train_in_child,
            args=(str(config_path(point)), str(log_path), self.threads, devices),
            name=f"mr2-train-{point.name}",
        )
        process.start()
        return _Child(process)

    def run(self, point: RunPoint) -> RunOutcome:
        interrupted = RunOutcome(point, "failed", message="not started: the sweep was interrupted")
        if self.stopping.is_set():
            return interrupted
        point.run_dir.mkdir(parents=True, exist_ok=True)
        log_path = point.directory.log
        start = time.perf_counter()
        devices = self.slots.get()
        try:
            with self.lock:
                if self.stopping.is_set():
                    return interrupted
                child = self._start(point, log_path, devices)
                self.children[point.name] = child
                self.started[point.name] = time.time()
            try:
                returncode = child.wait()
            finally:
                with self.lock:
                    self.children.pop(point.name, None)
                    self.started.pop(point.name, None)
        finally:
            self.slots.put(devices)
        seconds = time.perf_counter() - start
        if returncode == 0 and point.directory.is_finished:
            return RunOutcome(point, "done", seconds, returncode)
        message = NO_FINAL if returncode == 0 else f"exit code {returncode}"
        if self.stopping.is_set():
            message = "stopped: the sweep was interrupted (it resumes from its checkpoint)"
        return RunOutcome(point, "failed", seconds, returncode, message, _tail(log_path))

    def running(self) -> list[tuple[str, float]]:
        with self.lock:
            return sorted(self.started.items(), key=lambda item: item[1])

    def stop_all(self) -> None:
        self.stopping.set()
        with self.lock:
            children = list(self.children.values())
        for child in children:
            child.terminate()
        deadline = time.time() + 30
        for child in children:
            if not child.wait_for(max(0.1, deadline - time.time())):
                child.kill()
                child.wait()


def _eta(durations: list[float], left: int, running: list[tuple[str, float]], workers: int) -> float:
    """Seconds until ``left`` unfinished runs end: the mean duration so far for each run not yet
    started, and what remains of it for each running one, spread over the workers."""
    mean = sum(durations) / len(durations)
    now = time.time()
    remaining = sum(max(0.0, mean - (now - started)) for _, started in running)
    remaining += mean * max(0, left - len(running))
    return remaining / max(1, min(workers, left))


def default_threads(workers: int) -> int:
    """``OMP_NUM_THREADS`` if set, else the CPU cores available divided among the workers (>= 1)."""
    configured = os.environ.get("OMP_NUM_THREADS", "")
    if configured.isdigit() and int(configured) > 0:
        return int(configured)
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        cores = os.cpu_count() or 1
    return max(1, cores // max(1, workers))


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
        SweepInterrupted: on Ctrl-C, after stopping the running runs (they keep their checkpoints).
    """
    out = stream if stream is not None else sys.stdout
    total = len(points)
    outcomes: dict[str, RunOutcome] = {}
    counter = 0

    def report(outcome: RunOutcome, text: str) -> None:
        nonlocal counter
        counter += 1
        outcomes[outcome.point.name] = outcome
        print(f"[{counter}/{total}] {text}", file=out, flush=True)
        if on_outcome is not None:
            on_outcome(outcome)

    pending: list[RunPoint] = []
    for point in points:
        write_config(point)
        if point.directory.is_finished:
            differs = finished_config_mismatch(point)
            if differs:
                message = STALE_RUN.format(run_dir=point.run_dir, keys=", ".join(differs))
                report(RunOutcome(point, "failed", message=message), f"FAILED {point.name}: {message}")
            else:
                report(RunOutcome(point, "skipped"), f"skipped {point.name} (finished earlier)")
            continue
        pending.append(point)

    if pending:
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
        executor = _Executor(threads, nproc_per_node, python, slots)
        durations: list[float] = []
        sweep_start = time.perf_counter()
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="mr2-sweep")
        try:
            futures = {pool.submit(executor.run, point): point for point in pending}
            waiting = set(futures)
            last_status = time.perf_counter()
            while waiting:
                done, waiting = concurrent.futures.wait(
                    waiting, timeout=min(5.0, status_every),
                    return_when=concurrent.futures.FIRST_COMPLETED,
                )
                for future in sorted(done, key=lambda f: pending.index(futures[f])):
                    outcome = future.result()
                    left = len(waiting)
                    if outcome.status == "done":
                        durations.append(outcome.seconds)
                    eta = ""
                    if durations and left:
                        eta = f", ETA {_duration(_eta(durations, left, executor.running(), workers))}"
                    if outcome.status == "done":
                        report(outcome, f"done {outcome.point.name} ({_duration(outcome.seconds)}){eta}")
                    else:
                        report(
                            outcome,
                            f"FAILED {outcome.point.name} ({outcome.message}, "
                            f"{_duration(outcome.seconds)}); log: {outcome.log_path}{eta}",
                        )
                now = time.perf_counter()
                if waiting and now - last_status >= status_every:
                    last_status = now
                    running = executor.running()
                    if running:
                        by_name = {p.name: p for p in pending}
                        parts = [
                            f"{name} {_epoch_progress(by_name[name])}"
                            for name, _ in running
                            if name in by_name
                        ]
                        print(
                            f"  ... {_duration(now - sweep_start)} elapsed; running: " + ", ".join(parts),
                            file=out,
                            flush=True,
                        )
        except KeyboardInterrupt:
            executor.stop_all()
            pool.shutdown(wait=True, cancel_futures=True)
            raise SweepInterrupted() from None
        pool.shutdown(wait=True)
    return [outcomes[p.name] for p in points]
