"""A sweep's training processes: started N at a time, stopped together, never outliving the sweep.

Every run trains in its own process, the equivalent of ``mr2 train --config <file>`` with stdout and
stderr appended to ``<run_dir>/train.log``:

- by default forked from a server that has imported torch and mr2 once (``multiprocessing``'s
  ``forkserver``), so a run starts in milliseconds rather than the seconds an interpreter needs to
  import torch;
- with ``nproc_per_node`` (``torchrun --standalone``) or an explicit ``python``, as a subprocess in a
  process group of its own (the torchrun agent and its workers), stopped as a group.

The trainers belong to the sweep. When the sweep process ends, however it ends (``kill -9``
included), its trainers are sent SIGTERM by the kernel (Linux ``PR_SET_PDEATHSIG``):

- a forked trainer asks for the signal on the death of its parent, the fork server, and the fork
  server asks for it on the death of the sweep (:mod:`mr2.sweep.tether`), so the chain sweep ->
  fork server -> trainer ends within a moment of the sweep;
- the fork server and subprocesses are started from one thread that lives as long as the sweep
  process (:func:`in_lasting_thread`; the signal follows the thread that forked a child), never
  from a worker thread that could end first; torchrun's agent stops its workers on SIGTERM.

Both check, once the death signal is armed, that the sweep is still alive (it may have died in
between), and exit if not. SIGTERM, SIGHUP and SIGINT sent to the sweep itself are forwarded: the
sweep stops every trainer with SIGTERM (to the process group of a torchrun run), waits for them
(SIGKILL after :data:`STOP_GRACE_SECONDS`) and raises :class:`SweepInterrupted`. The runs keep
their checkpoints; the next sweep resumes them.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import multiprocessing.connection
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

import yaml

import mr2
from mr2.config import config_to_dict
from mr2.io import atomic_write_text, open_no_follow, open_text_no_follow
from mr2.sweep.deathsignal import ORPHANED, SWEEP_PID_VARIABLE, die_with_parent, process_alive
from mr2.sweep.plan import RunPoint

__all__ = [
    "STOP_GRACE_SECONDS",
    "SweepInterrupted",
    "TrainerPool",
    "TrainerProcess",
    "available_cores",
    "config_path",
    "default_threads",
    "default_workers",
    "forward_stop_signals",
    "start_process",
    "start_subprocess",
    "stop_tree",
    "train_command",
    "write_config",
]

#: Seconds a trainer is given to end after SIGTERM before it is killed.
STOP_GRACE_SECONDS = 30.0
#: Signals that stop a sweep and its trainers (forwarded as SIGTERM).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


class SweepInterrupted(KeyboardInterrupt):
    """The sweep was stopped (Ctrl-C, SIGTERM, SIGHUP); its trainers were stopped and waited for, and
    keep their checkpoints.

    Attributes:
        signum: the signal that stopped the sweep.
    """

    def __init__(self, signum: int = signal.SIGINT) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _arm_death_signal(sweep_pid: int, parent: int) -> None:
    """In a trainer: SIGTERM when ``parent`` dies; exit now if it or the sweep already died."""
    die_with_parent()
    if os.getppid() != parent or not process_alive(sweep_pid):
        os._exit(ORPHANED)


# -------------------------------------------------------------------- configs and commands
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


def child_environment(threads: int) -> dict[str, str]:
    """The environment of a trainer: this mr2 importable, ``threads`` OpenMP/MKL threads, unbuffered."""
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


def available_cores() -> int:
    """The CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        return os.cpu_count() or 1


def default_threads(workers: int) -> int:
    """``OMP_NUM_THREADS`` if set, else the CPU cores available divided among the workers (>= 1)."""
    configured = os.environ.get("OMP_NUM_THREADS", "")
    if configured.isdigit() and int(configured) > 0:
        return int(configured)
    return max(1, available_cores() // max(1, workers))


def default_workers(runs: int, *, gpus: int = 0, cores: int | None = None) -> int:
    """How many of ``runs`` runs to train at once when nobody said: one per GPU for runs on GPUs
    (``gpus`` > 0), else one per CPU core (each then gets one thread, :func:`default_threads`), never
    more than there are runs. On 2 cores, 2 runs x 1 thread finish about twice as fast as 1 run x 2
    threads (docs/sweeps.md).

    Example:
        >>> default_workers(12, cores=2), default_workers(1, cores=16), default_workers(12, gpus=4)
        (2, 1, 4)
    """
    slots = gpus if gpus > 0 else (available_cores() if cores is None else cores)
    return max(1, min(slots, runs))


# ------------------------------------------------------------------------ starting processes
#: Imported once by the fork server, so that each run starts in milliseconds instead of seconds.
_PRELOAD = (
    "mr2.sweep.tether",  # first: ties the fork server to the sweep before the slow imports
    "mr2.engine.run",
    "mr2.engine.builders",
    "mr2.models.registry",
    "mr2.data.registry",
    "mr2.methods.registry",
    "mr2.sweep.processes",
    "torch.utils.tensorboard",
)


def _train_in_child(config_file: str, log_file: str, threads: int, visible_devices: str | None,
                    sweep_pid: int) -> None:
    """Body of a forked trainer: tied to the sweep's life, output to the log, ``mr2 train``'s work."""
    _arm_death_signal(sweep_pid, os.getppid())
    if visible_devices is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = visible_devices  # before CUDA is initialised
    fd = open_no_follow(log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)  # never through a link
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(threads)
    import torch

    torch.set_num_threads(threads)
    from mr2.engine.run import train_from_config_file

    try:
        code = train_from_config_file(config_file)
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


_requests: queue.Queue[tuple[Callable[[], Any], concurrent.futures.Future[Any]]] = queue.Queue()
_spawner: threading.Thread | None = None
_spawner_lock = threading.Lock()


def _serve_requests() -> None:
    while True:
        function, future = _requests.get()
        if future.set_running_or_notify_cancel():
            try:
                future.set_result(function())
            except BaseException as error:  # handed to the caller
                future.set_exception(error)


def in_lasting_thread(function: Callable[[], Any]) -> Any:
    """Call ``function`` in a thread that lives as long as this process and return its result.

    Children must be started there: the kernel's death signal follows the thread that forked them.
    """
    global _spawner
    with _spawner_lock:
        if _spawner is None:
            _spawner = threading.Thread(target=_serve_requests, name="mr2-spawner", daemon=True)
            _spawner.start()
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()
    _requests.put((function, future))
    return future.result()


def start_subprocess(command: Sequence[str], **popen: Any) -> subprocess.Popen[bytes]:
    """``subprocess.Popen(command, **popen)`` that dies with this process, in a new process group.

    The child is started from :func:`in_lasting_thread`, asks for SIGTERM on its death, and exits at
    once if this process died before that was armed.
    """
    parent = os.getpid()

    def arm() -> None:  # runs in the child between fork and exec
        os.setpgid(0, 0)  # a process group of its own: stopped as a group (torchrun and its workers)
        die_with_parent()
        if os.getppid() != parent:
            os._exit(ORPHANED)

    process: subprocess.Popen[bytes] = in_lasting_thread(
        lambda: subprocess.Popen(list(command), preexec_fn=arm, **popen)
    )
    return process


def _start_fork_server(context: Any) -> None:
    """Start the fork server (if not running) from the lasting thread, tied to this process by
    :mod:`mr2.sweep.tether`: it, and with it every trainer, gets SIGTERM when this process dies."""
    import multiprocessing.forkserver

    os.environ[SWEEP_PID_VARIABLE] = str(os.getpid())
    in_lasting_thread(multiprocessing.forkserver.ensure_running)


#: Serialises every call that reads a multiprocessing child's exit status. ``Process.start()`` polls
#: ALL live children of the process (``multiprocessing.process._cleanup``), and the forkserver's
#: ``Popen.poll`` is not thread-safe: two threads polling one child race for its status, and the
#: loser records exit code 255 for a run that succeeded (a sweep's workers start and wait for
#: trainers from several threads). Waiting itself happens outside the lock, on the child's sentinel.
_STATUS_LOCK = threading.Lock()


def start_process(process: Any) -> None:
    """``process.start()`` under the lock that every exit-status read of a child holds."""
    with _STATUS_LOCK:
        process.start()


class TrainerProcess:
    """A running trainer: a forked child, or a subprocess leading its own process group (torchrun).

    A multiprocessing child must have been started with :func:`start_process`.
    """

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    @property
    def pid(self) -> int:
        return int(self.handle.pid)

    def alive(self) -> bool:
        if isinstance(self.handle, subprocess.Popen):
            return self.handle.poll() is None
        with _STATUS_LOCK:
            return bool(self.handle.is_alive())

    def wait(self) -> int:
        if isinstance(self.handle, subprocess.Popen):
            return int(self.handle.wait())
        self.wait_for(None)
        return int(self.handle.exitcode if self.handle.exitcode is not None else -1)

    def wait_for(self, timeout: float | None) -> bool:
        """Wait up to ``timeout`` seconds (None: until it ends); True if it ended."""
        if isinstance(self.handle, subprocess.Popen):
            try:
                self.handle.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                return False
            return True
        # Readable once the child has ended; reading its status is left to join(), under the lock.
        if not multiprocessing.connection.wait([self.handle.sentinel], timeout):
            return False
        with _STATUS_LOCK:
            self.handle.join()
        return True

    def send(self, signum: int) -> None:
        """Send ``signum`` to the trainer (to its whole process group for a subprocess)."""
        if not self.alive():
            return
        with contextlib.suppress(ProcessLookupError):
            if isinstance(self.handle, subprocess.Popen):
                os.killpg(self.pid, signum)
            else:
                os.kill(self.pid, signum)


class TrainerPool:
    """Starts trainers (each on a free device slot), tracks them, and stops them all on demand.

    Args:
        threads: torch threads per trainer.
        nproc_per_node: launch with torchrun on this many processes (a subprocess per run).
        python: run ``<python> -m mr2 train`` as a subprocess instead of forking.
        slots: one entry per worker: the ``CUDA_VISIBLE_DEVICES`` of its runs (None: unchanged).
    """

    def __init__(
        self, threads: int, nproc_per_node: int | None, python: str | None, slots: list[str | None]
    ) -> None:
        self.threads = threads
        self.slots: queue.Queue[str | None] = queue.Queue()
        for slot in slots:
            self.slots.put(slot)
        self.env = child_environment(threads)
        self.nproc_per_node = nproc_per_node
        self.python = python
        self.context = _process_context() if nproc_per_node is None and python is None else None
        if self.context is not None and self.context.get_start_method() == "forkserver":
            _start_fork_server(self.context)
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.children: dict[str, TrainerProcess] = {}
        self.started: dict[str, float] = {}

    def _start(self, point: RunPoint, log_path: Path, devices: str | None) -> TrainerProcess:
        on = "" if devices is None else f", CUDA_VISIBLE_DEVICES={devices}"
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        if self.context is None:
            command = train_command(point, nproc_per_node=self.nproc_per_node, python=self.python)
            env = dict(self.env)
            if devices is not None:
                env["CUDA_VISIBLE_DEVICES"] = devices
            with open_text_no_follow(log_path, append=True) as log:  # never through a link
                log.write(f"=== mr2 sweep, {stamp}: {' '.join(command)}{on}\n")
                log.flush()
                return TrainerProcess(start_subprocess(
                    command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
                ))
        with open_text_no_follow(log_path, append=True) as log:
            log.write(f"=== mr2 sweep, {stamp}: mr2 train --config {config_path(point)} "
                      f"({self.threads} thread{'s' if self.threads > 1 else ''}{on})\n")
        process = self.context.Process(
            target=_train_in_child,
            args=(str(config_path(point)), str(log_path), self.threads, devices, os.getpid()),
            name=f"mr2-train-{point.name}",
        )
        start_process(process)
        return TrainerProcess(process)

    def train(self, point: RunPoint) -> int | None:
        """Train ``point`` in a new process and wait for it; its exit code (None: not started
        because the pool is stopping)."""
        if self.stopping.is_set():
            return None
        directory = point.directory
        directory.path.mkdir(parents=True, exist_ok=True)
        devices = self.slots.get()
        try:
            with self.lock:
                if self.stopping.is_set():
                    return None
                child = self._start(point, directory.log, devices)
                self.children[point.name] = child
                self.started[point.name] = time.time()
            try:
                return child.wait()
            finally:
                with self.lock:
                    self.children.pop(point.name, None)
                    self.started.pop(point.name, None)
        finally:
            self.slots.put(devices)

    def running(self) -> list[tuple[str, float]]:
        """``(run name, start time)`` of the running trainers, oldest first."""
        with self.lock:
            return sorted(self.started.items(), key=lambda item: item[1])

    def pids(self) -> dict[str, int]:
        """Run name -> pid of each running trainer."""
        with self.lock:
            return {name: child.pid for name, child in self.children.items()}

    def stop_all(self, grace: float = STOP_GRACE_SECONDS) -> None:
        """Start nothing more; SIGTERM every trainer, wait, SIGKILL those still alive after ``grace``."""
        self.stopping.set()
        with self.lock:
            children = list(self.children.values())
        for child in children:
            child.send(signal.SIGTERM)
        deadline = time.time() + grace
        for child in children:
            if not child.wait_for(max(0.1, deadline - time.time())):
                child.send(signal.SIGKILL)
                child.wait()


# ------------------------------------------------------------------- stopping a process tree
def _process_table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, start time) of every live (not zombie) process, from /proc ({} without)."""
    try:
        entries = os.listdir("/proc")
    except OSError:  # pragma: no cover - no /proc (not Linux)
        return {}
    table = {}
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_bytes().rpartition(b")")[2].split()
        except OSError:  # ended meanwhile
            continue
        if len(fields) > 19 and fields[0] not in (b"Z", b"X"):
            table[int(entry)] = (int(fields[1]), fields[19].decode())  # fields 4 and 22 of proc(5)
    return table


def _tree(roots: Sequence[int], table: dict[int, tuple[int, str]]) -> dict[int, str]:
    """pid -> start time of each live root and each of its descendants."""
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    found = {pid: table[pid][1] for pid in roots if pid in table}
    todo = list(found)
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found[child] = table[child][1]
                todo.append(child)
    return found


def stop_tree(roots: Sequence[int], grace: float = STOP_GRACE_SECONDS, *,
              first: int = signal.SIGTERM) -> int:
    """Stop processes and all their descendants (Linux, from /proc): ``first`` (SIGTERM) to each, then
    SIGKILL to those still running after ``grace`` seconds. The tree is looked at again while the
    grace lasts, so a child started meanwhile is stopped too; a process is signalled only while its
    start time is the one seen (never a new process that reused a pid). Returns how many were found.

    Example:
        >>> child = subprocess.Popen(["sleep", "30"])
        >>> stop_tree([child.pid], grace=1.0), child.wait()
        (1, -15)
    """
    seen: dict[int, str] = {}

    def send(signum: int, *, new_only: bool) -> dict[int, str]:
        """Signal the tree's live processes (only those not seen before: ``new_only``); the live ones."""
        table = _process_table()
        starts = [pid for pid in (*roots, *seen)
                  if pid in table and seen.get(pid, table[pid][1]) == table[pid][1]]
        live = {}
        for pid, start in _tree(starts, table).items():
            if seen.get(pid, start) != start:
                continue  # a pid reused by a process that is not of the tree
            if not (new_only and pid in seen):
                with contextlib.suppress(OSError):
                    os.kill(pid, signum)
            seen[pid] = live[pid] = start
        return live

    if not send(first, new_only=False):
        return 0
    deadline = time.monotonic() + grace
    while send(first, new_only=True) and time.monotonic() < deadline:
        time.sleep(0.05)
    for _ in range(20):
        if not send(signal.SIGKILL, new_only=False):
            break
        time.sleep(0.05)
    return len(seen)


@contextlib.contextmanager
def forward_stop_signals() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise :class:`SweepInterrupted` like Ctrl-C does, so the
    caller stops its trainers (``except KeyboardInterrupt``). Only from the main thread (elsewhere the
    block runs with the handlers unchanged)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: FrameType | None) -> None:
        raise SweepInterrupted(signum)

    previous = {signum: signal.signal(signum, stop) for signum in STOP_SIGNALS if signum != signal.SIGINT}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
