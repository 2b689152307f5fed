"""Run a sweep's unfinished runs as submitit jobs: a Slurm job array (or submitit's ``local`` /
``debug`` executors, the same code path without a cluster).

- One job per unfinished run, submitted together (``executor.batch()``: one Slurm job array, at
  most ``array_parallelism`` running at once). Each job calls :class:`TrainJob`: ``mr2 train
  --config <sweep_dir>/configs/<run>.yaml`` with its output appended to ``<run>/train.log``.
- Preemption and time-outs: :class:`TrainJob` is ``submitit.helpers.Checkpointable``-style: on
  submitit's signal (SIGUSR2 before the time limit, or a preemption) it asks to be requeued, and the
  requeued job resumes the run from ``checkpoints/last.pt`` (the engine's exact resume), at most
  ``max_requeues`` times for time-outs.
- A job that fails (a real error, or its process killed) is resubmitted while the sweep waits, at
  most ``max_requeues`` times; then the run is marked failed with its log path.
- ``<sweep_dir>/submitit/jobs.json`` records, per run, the job ids, the attempt, the state, the
  submitit folder and the log paths; ``mr2 sweep status DIR`` reads it (:mod:`mr2.sweep.status`).
- Multi-GPU runs: ``gpus_per_run > 1`` on one node starts ``torchrun --standalone
  --nproc_per_node=gpus_per_run`` inside the job; ``nodes_per_run > 1`` runs one submitit task per
  GPU on each node, each exporting torch.distributed's environment from Slurm's
  (``submitit.helpers.TorchDistributedEnvironment``) before ``mr2 train``, which then initialises
  the process group from ``WORLD_SIZE`` / ``RANK`` / ``MASTER_ADDR`` as under torchrun.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from mr2.io import atomic_write_json, open_text_no_follow
from mr2.sweep.deathsignal import ORPHANED
from mr2.sweep.launcher import NEEDS_SUBMITIT, LauncherOptions
from mr2.sweep.plan import RunPoint
from mr2.sweep.processes import config_path, stop_tree, train_command
from mr2.sweep.progress import format_duration, log_tail
from mr2.sweep.runner import RunOutcome, pending_points
from mr2.sweep.spec import SweepSpecError

__all__ = [
    "JOBS_FILE",
    "RUNNING_FILE",
    "SUBMITIT_DIR",
    "OwnedExecutor",
    "Owner",
    "Tethered",
    "TrainJob",
    "read_jobs",
    "stop_leftover_jobs",
    "submit_points",
]

SUBMITIT_DIR = "submitit"
JOBS_FILE = "jobs.json"
_TRAIN_FAILED = "mr2 train exited with code {code}; log: {log}"
_GAVE_UP = "failed {attempts} time(s) (max_requeues: {max_requeues}); last: {error}"
POLL_SECONDS = 2.0


class TrainJob:
    """The function a submitit job runs: ``mr2 train`` on one run's configuration.

    Checkpointable: on a time-out or preemption submitit calls :meth:`checkpoint`, which resubmits
    this same call; ``mr2 train`` then resumes from the run's last checkpoint.
    """

    def __init__(self, config_file: str, log_file: str, gpus_per_run: int = 0, nodes_per_run: int = 1,
                 threads: int | None = None) -> None:
        self.config_file = config_file
        self.log_file = log_file
        self.gpus_per_run = gpus_per_run
        self.nodes_per_run = nodes_per_run
        self.threads = threads

    def __call__(self) -> str:
        if self.nodes_per_run > 1:
            import submitit

            submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=True)
        if self.threads is not None:
            import torch

            torch.set_num_threads(self.threads)
        with open_text_no_follow(self.log_file, append=True) as log:  # never through a link
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            job = os.environ.get("SLURM_JOB_ID") or os.environ.get("SUBMITIT_LOCAL_JOB_ID") or "?"
            log.write(f"=== mr2 sweep (submitit job {job}), {stamp}: mr2 train --config {self.config_file}\n")
            log.flush()
            if self.gpus_per_run > 1 and self.nodes_per_run == 1:
                command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                           f"--nproc_per_node={self.gpus_per_run}", "-m", "mr2", "train", "--config",
                           self.config_file]
                code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=False).returncode
            else:
                from mr2.engine.run import train_from_config_file

                with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
                    code = train_from_config_file(self.config_file)
        if code != 0:
            raise RuntimeError(_TRAIN_FAILED.format(code=code, log=self.log_file))
        return self.config_file

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        """Requeue the same call (submitit's Checkpointable protocol); the run resumes from last.pt."""
        import submitit

        return submitit.helpers.DelayedSubmission(
            TrainJob(self.config_file, self.log_file, self.gpus_per_run, self.nodes_per_run, self.threads)
        )


def slurm_executor(folder: Path, options: LauncherOptions, name: str) -> Any:
    """A submitit executor for ``options`` (Slurm, or submitit's local executor) writing into ``folder``."""
    try:
        import submitit
    except ImportError:
        raise SweepSpecError(NEEDS_SUBMITIT) from None
    kwargs: dict[str, Any] = {}
    if options.executor != "debug":
        kwargs[f"{options.executor}_max_num_timeout"] = options.max_requeues
    executor = submitit.AutoExecutor(folder=str(folder / "%j"), cluster=options.executor, **kwargs)
    parameters: dict[str, Any] = {
        "name": name,
        "timeout_min": options.timeout_min,
        "nodes": options.nodes_per_run,
        "tasks_per_node": options.tasks_per_node,
        "slurm_array_parallelism": options.array_parallelism,
    }
    if options.gpus_per_run:
        parameters["gpus_per_node"] = options.gpus_per_run
    if options.cpus_per_run is not None:
        parameters["cpus_per_task"] = options.cpus_per_run
    if options.mem_gb is not None:
        parameters["mem_gb"] = options.mem_gb
    for key in ("partition", "account", "qos", "constraint"):
        value = getattr(options, key)
        if value is not None:
            parameters[f"slurm_{key}"] = value
    if options.setup:
        parameters["slurm_setup"] = list(options.setup)
    executor.update_parameters(**parameters)
    return executor


# ------------------------------------------------------------- jobs that end with their owner
#: In a tune's submitit folder: the jobs its last run submitted (the next run stops those still running).
RUNNING_FILE = "running.json"
#: Seconds between two looks, inside a job, at whether the process that submitted it is alive.
TETHER_SECONDS = 0.5
#: Seconds the trial commands of a stopped leftover job get between SIGTERM and SIGKILL.
LEFTOVER_GRACE = 10.0
_LEFTOVERS = ("mr2 tune: stopped {count} job(s) that an earlier run of this tune left running "
              "(it was killed before it could stop them): {ids}")


def _boot_id() -> str:
    """This machine's boot id ("" where unknown): equal boot ids mean the same machine, same boot."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:  # pragma: no cover - not Linux
        return ""


def _start_time(pid: int) -> str | None:
    """A process's start time (clock ticks after boot), None when it is not running (or a zombie)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_bytes().rpartition(b")")[2].split()
    except OSError:
        return None
    return None if len(fields) < 20 or fields[0] in (b"Z", b"X") else fields[19].decode()


@dataclass(frozen=True)
class Owner:
    """The process that submits jobs, as the jobs see it: pid, start time (a reused pid is another
    process), machine (boot id) and host name."""

    pid: int
    start: str
    boot: str
    host: str

    @classmethod
    def current(cls) -> Owner:
        return cls(os.getpid(), _start_time(os.getpid()) or "", _boot_id(), socket.gethostname())

    def here(self) -> bool:
        """Whether this process runs on the owner's machine (then :meth:`alive` can tell)."""
        return bool(self.boot and self.start) and self.boot == _boot_id()

    def alive(self) -> bool:
        """Whether the owner still runs (on its machine: :meth:`here` must be true)."""
        return _start_time(self.pid) == self.start


class Tethered:
    """A job's function that ends with the process that submitted it: on the owner's machine (a local
    executor, or a Slurm job on tune's node) a thread of the job looks every :data:`TETHER_SECONDS`
    whether the owner still runs, and ends the job's process when it does not (``kill -9`` of tune
    included). The processes the job started go with it: a trial's command leader gets the kernel's
    death signal (:func:`mr2.sweep.processes.start_subprocess`) and stops all its trial started;
    submitit's controller ends when its task does. On another machine the job runs on; the next run
    of the owner stops it (:func:`stop_leftover_jobs`).
    """

    def __init__(self, owner: Owner, function: Callable[..., Any]) -> None:
        self.owner = owner
        self.function = function

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.owner.pid != os.getpid() and self.owner.here():
            if not self.owner.alive():
                os._exit(ORPHANED)
            threading.Thread(target=self._watch, name="mr2-tether", daemon=True).start()
        return self.function(*args, **kwargs)

    def _watch(self) -> None:
        while self.owner.alive():
            time.sleep(TETHER_SECONDS)
        sys.stderr.write(f"mr2: the process that submitted this job ({self.owner.pid} on {self.owner.host}) "
                         "ended; this job ends too\n")
        sys.stderr.flush()
        os._exit(ORPHANED)


def _local_controller(pid: int, folder: Path) -> bool:
    """Whether ``pid`` is a submitit local controller of ``folder`` (so a reused pid is left alone)."""
    try:
        words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    if b"submitit.local._local" not in words:
        return False
    return any(os.fsencode(folder.absolute()) in word for word in words)


def stop_leftover_jobs(folder: Path, stream: TextIO | None = None) -> list[str]:
    """Stop the jobs listed in ``folder/running.json`` by an earlier run that still run, and forget
    them; the ids stopped. Local jobs (submitit's ``local`` executor: a controller process per job, on
    this machine only): each controller and everything under it, SIGTERM, SIGKILL after
    :data:`LEFTOVER_GRACE` s. Slurm jobs: ``scancel`` (where the command exists). The caller owns the
    folder (tune's directory lock), so every job listed is a leftover."""
    file = folder / RUNNING_FILE
    try:
        with open(file, "rb") as handle:
            record = json.loads(handle.read(1 << 20))
        ids = [str(job) for job in record["jobs"]]
        executor = str(record["executor"])
        boot = str(record["owner"]["boot"])
    except (OSError, ValueError, KeyError, TypeError):  # none, or not ours to read: nothing to stop
        return []
    stopped: list[str] = []
    if executor == "local" and boot == _boot_id():
        pids = [int(job) for job in ids if job.isdigit() and _local_controller(int(job), folder)]
        if pids:
            stop_tree(pids, LEFTOVER_GRACE)
        stopped = [str(pid) for pid in pids]
    elif executor == "slurm" and ids and shutil.which("scancel"):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(["scancel", *ids], capture_output=True, timeout=120, check=False,
                           stdin=subprocess.DEVNULL)
        stopped = ids
    if stopped:
        print(_LEFTOVERS.format(count=len(stopped), ids=", ".join(stopped)),
              file=stream if stream is not None else sys.stderr, flush=True)
    with contextlib.suppress(OSError):
        file.unlink()
    return stopped


class OwnedExecutor:
    """A submitit executor whose jobs belong to this process: each job is :class:`Tethered` to it,
    and each submitted job is recorded in ``folder/running.json``; the first submission stops what an
    earlier run left there (:func:`stop_leftover_jobs`). Everything else is the wrapped executor's.
    """

    def __init__(self, executor: Any, folder: Path) -> None:
        self.executor = executor
        self.folder = folder
        self.owner = Owner.current()
        self.ids: list[str] = []
        self.checked = False

    def __getattr__(self, name: str) -> Any:
        inner = self.__dict__.get("executor")  # absent while unpickling (a job's copy of its trial source)
        if inner is None or name.startswith("__"):
            raise AttributeError(name)
        return getattr(inner, name)

    def submit(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if not self.checked:
            stop_leftover_jobs(self.folder)
            self.checked = True
        job = self.executor.submit(Tethered(self.owner, function), *args, **kwargs)
        self.ids.append(str(job.job_id))
        atomic_write_json(self.folder / RUNNING_FILE, {
            "executor": str(getattr(self.executor, "cluster", "slurm")),
            "owner": dataclasses.asdict(self.owner),
            "jobs": self.ids,
        })
        return job


def read_jobs(sweep_dir: Path) -> dict[str, Any]:
    """``<sweep_dir>/submitit/jobs.json`` ({} when the sweep was never submitted)."""
    file = sweep_dir / SUBMITIT_DIR / JOBS_FILE
    try:
        data = json.loads(file.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


class _Jobs:
    """The record of submitted jobs, rewritten atomically on every change."""

    def __init__(self, sweep_dir: Path, options: LauncherOptions) -> None:
        self.folder = sweep_dir / SUBMITIT_DIR
        self.file = self.folder / JOBS_FILE
        previous = read_jobs(sweep_dir)
        self.runs: dict[str, dict[str, Any]] = dict(previous.get("runs", {}))
        self.options = options

    def record(self, point: RunPoint, job: Any, attempt: int, state: str, error: str = "") -> None:
        entry = self.runs.setdefault(point.name, {"job_ids": []})
        job_id = str(job.job_id) if job is not None else entry.get("job_id")
        if job is not None and job_id not in entry["job_ids"]:
            entry["job_ids"].append(job_id)
        entry.update(
            job_id=job_id,
            attempt=attempt,
            state=state,
            error=error,
            train_log=str(point.directory.log),
            stdout=str(job.paths.stdout) if job is not None else entry.get("stdout"),
            stderr=str(job.paths.stderr) if job is not None else entry.get("stderr"),
            updated=time.strftime("%Y-%m-%d %H:%M:%S"),
        )
        self.save()

    def save(self) -> None:
        atomic_write_json(self.file, {
            "executor": self.options.executor,
            "folder": str(self.folder),
            "max_requeues": self.options.max_requeues,
            "runs": self.runs,
        })


def submit_points(
    points: Sequence[RunPoint],
    options: LauncherOptions,
    *,
    sweep_name: str,
    wait: bool = True,
    stream: TextIO | None = None,
    threads_per_run: int | None = None,
    on_outcome: Callable[[RunOutcome], None] | None = None,
) -> list[RunOutcome]:
    """Submit every unfinished point as a submitit job and (``wait``) follow them to the end,
    resubmitting failed jobs up to ``options.max_requeues`` times.

    Returns one outcome per point, in plan order (with ``wait=False``, the submitted runs are
    ``running``: "submitted as job <id>").

    Raises:
        SweepSpecError: submitit is not installed.
    """
    out = stream if stream is not None else sys.stdout
    outcomes, pending = pending_points(points, out)
    if not pending:
        return [outcomes[p.name] for p in points]
    sweep_dir = Path(pending[0].config.output_dir)
    executor = slurm_executor(sweep_dir / SUBMITIT_DIR, options, f"mr2-{sweep_name}")
    jobs = _Jobs(sweep_dir, options)

    def make(point: RunPoint) -> TrainJob:
        point.directory.path.mkdir(parents=True, exist_ok=True)
        return TrainJob(str(config_path(point)), str(point.directory.log), options.gpus_per_run,
                        options.nodes_per_run, threads_per_run)

    with executor.batch():
        submitted = [executor.submit(make(point)) for point in pending]
    active: dict[str, tuple[RunPoint, Any, int]] = {}
    for point, job in zip(pending, submitted, strict=True):
        jobs.record(point, job, 1, "submitted")
        active[point.name] = (point, job, 1)
    ids = sorted({str(job.job_id).split("_")[0] for job in submitted})
    print(f"submitted {len(pending)} run(s) to submitit's {options.executor} executor (job "
          f"{', '.join(ids)}); jobs recorded in {jobs.file}", file=out, flush=True)
    if not wait:
        for point, job in zip(pending, submitted, strict=True):
            outcomes[point.name] = RunOutcome(point, "running", message=f"submitted as job {job.job_id}")
        return [outcomes[p.name] for p in points]

    start = time.perf_counter()
    counter = len(outcomes)
    total = len(points)
    while active:
        time.sleep(POLL_SECONDS)
        for name, (point, job, attempt) in list(active.items()):
            if not job.done():
                if job.state not in ("PENDING", "UNKNOWN") and jobs.runs[name]["state"] != "running":
                    jobs.record(point, job, attempt, "running")
                continue
            if point.directory.is_finished:
                del active[name]
                seconds = time.perf_counter() - start
                outcome = RunOutcome(point, "done", seconds, 0)
                jobs.record(point, job, attempt, "done")
            else:
                error = str(job.exception() or f"job ended in state {job.state} without final.json")
                error = error.strip().splitlines()[-1] if error.strip() else error
                if attempt <= options.max_requeues:
                    new = executor.submit(make(point))
                    active[name] = (point, new, attempt + 1)
                    jobs.record(point, new, attempt + 1, "requeued", error)
                    print(f"  requeued {name} as job {new.job_id} (attempt {attempt + 1}; {error})",
                          file=out, flush=True)
                    continue
                del active[name]
                message = _GAVE_UP.format(attempts=attempt, max_requeues=options.max_requeues, error=error)
                jobs.record(point, job, attempt, "failed", message)
                outcome = RunOutcome(point, "failed", time.perf_counter() - start, None, message,
                                     log_tail(point.directory.log))
            counter += 1
            outcomes[name] = outcome
            if outcome.status == "done":
                text = f"done {name} ({format_duration(outcome.seconds)} since submission)"
            else:
                text = f"FAILED {name} ({outcome.message}); log: {outcome.log_path}"
            print(f"[{counter}/{total}] {text}", file=out, flush=True)
            if on_outcome is not None:
                on_outcome(outcome)
    return [outcomes[p.name] for p in points]


def job_command(point: RunPoint, options: LauncherOptions) -> str:
    """What a job runs, for ``--dry-run``."""
    nproc = options.gpus_per_run if options.gpus_per_run > 1 and options.nodes_per_run == 1 else None
    return " ".join(train_command(point, nproc_per_node=nproc, python="python"))
