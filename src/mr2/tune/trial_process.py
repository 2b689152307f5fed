"""The leader of a ``mr2 tune --command`` trial's process group: runs the trial's shell command and
owns everything the command starts, so no process of a trial outlives the trial (or tune).

Run as a script (``python trial_process.py GRACE COMMAND``; standard library only, so it starts in
milliseconds and imports nothing of mr2). tune starts it with
:func:`mr2.sweep.processes.start_subprocess`: in a process group of its own, with the kernel's death
signal (SIGTERM when tune dies, ``kill -9`` included).

- On Linux it is a *child subreaper* (``prctl(PR_SET_CHILD_SUBREAPER)``): a process the command
  starts whose parent ends (``sleep 301 &`` after the shell exits, a double-forked daemon, a child
  that called ``setsid``) is re-parented to this leader instead of to init, so it stays a
  descendant the leader can find and reap.
- When the command's shell exits (normally or not), and when the leader is told to stop (SIGTERM,
  SIGINT or SIGHUP: tune stopping, ``--trial-timeout``, the death signal), it stops what is left:
  SIGTERM to its process group and to every descendant (found in ``/proc``), then, after ``GRACE``
  seconds, SIGKILL to whatever still runs (a training script that traps SIGTERM, as Lightning does,
  is stopped too), and reaps them. It returns at once when nothing is left.

Not reached: a process that left both the group and the leader's descendants, i.e. one re-parented
to another subreaper (a daemon started through a service manager) or running as another user, and,
where there is no subreaper (macOS, other platforms), children that left the process group. The
leader's exit status is the command's (128 + signal when the command was killed by a signal, 128 +
the stop signal when it was stopped).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time

#: Seconds between SIGTERM and SIGKILL of what a trial left running.
DEFAULT_GRACE = 2.0
#: ``prctl`` option making the caller the reaper of its orphaned descendants (Linux >= 3.4).
PR_SET_CHILD_SUBREAPER = 36
#: Seconds between two looks for what is still running while the grace lasts.
POLL_SECONDS = 0.02
#: Seconds between two looks at the command while it runs (for a stop signal, and orphans to reap).
WAIT_SECONDS = 0.1
#: Signals that stop the trial.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


#: The stop signals received so far (handled in the main loop, never by raising mid-cleanup).
_STOPS: list[int] = []


def _note_stop(signum: int, frame: object) -> None:
    _STOPS.append(signum)


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (Linux); False where impossible."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):  # pragma: no cover - no prctl
        return False


def _table() -> dict[int, tuple[int, int]] | None:
    """pid -> (parent pid, process group) of every live process, from /proc (None: no /proc)."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    table = {}
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                fields = handle.read().rpartition(b")")[2].split()
        except OSError:  # ended meanwhile
            continue
        if fields and fields[0] not in (b"Z", b"X"):  # a zombie is dead: its parent reaps it
            table[int(entry)] = (int(fields[1]), int(fields[2]))
    return table


def remaining(leader: int, group: int) -> set[int] | None:
    """The live processes of the trial other than ``leader``: the members of its process group, and
    the descendants of the leader and of those members (None: unknown, there is no /proc)."""
    table = _table()
    if table is None:
        return None
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    found = {pid for pid, (_, pgid) in table.items() if pgid == group}
    todo = [leader, *found]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    found.discard(leader)
    return found


def _signal(pids: set[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):  # ended meanwhile, or not ours to signal
            os.kill(pid, signum)


def _reap() -> None:
    """Collect every ended child (orphans re-parented here included)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def stop_all(grace: float, *, stopped: bool = False) -> None:
    """Stop everything the trial left: SIGTERM to the group and each descendant, SIGKILL to what is
    still running after ``grace`` seconds, until nothing is left; reap them.

    Without /proc (not Linux) only the group is reached, and what is in it cannot be listed: SIGTERM
    to the group; when the trial was ``stopped`` (a stop signal), SIGKILL to the group after the grace,
    this process included (its exit status is then SIGKILL's, which tune does not read on a stop).
    """
    leader, group = os.getpid(), os.getpgrp()
    _reap()
    left = remaining(leader, group)
    if left is None:  # pragma: no cover - no /proc
        with contextlib.suppress(OSError):
            os.killpg(group, signal.SIGTERM)  # this process notes it, nothing more
            if stopped:
                time.sleep(grace)
                os.killpg(group, signal.SIGKILL)
        return
    if not left:
        return
    _signal(left, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while left and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)
        _reap()
        left = remaining(leader, group) or set()
    for _ in range(50):  # SIGKILL, again for processes started meanwhile (a fork in flight)
        if not left:
            return
        _signal(left, signal.SIGKILL)
        time.sleep(POLL_SECONDS)
        _reap()
        left = remaining(leader, group) or set()


def _reap_orphans(shell: int) -> None:
    """Reap ended processes re-parented here while the command runs (never the shell: its status is
    the command's), so that they do not linger as zombies until the trial ends."""
    waitid = getattr(os, "waitid", None)
    if waitid is None:  # pragma: no cover - not on this platform; reaped at the end
        return
    for _ in range(100):
        try:
            ended = waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return
        if ended is None or ended.si_pid in (0, shell):
            return
        try:
            os.waitpid(ended.si_pid, os.WNOHANG)
        except ChildProcessError:
            return


def run(command: str, grace: float) -> int:
    """Run ``command`` with ``/bin/sh -c`` and stop what it leaves; its exit status (module docstring)."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, _note_stop)
    if os.getpgrp() != os.getpid():  # started by hand: the group stopped at the end must be this trial's
        os.setpgid(0, 0)
    become_subreaper()
    code: int | None = None
    try:
        if not _STOPS:
            shell = subprocess.Popen(["/bin/sh", "-c", command], stdin=subprocess.DEVNULL)
            while not _STOPS:
                try:
                    status = shell.wait(WAIT_SECONDS)
                except subprocess.TimeoutExpired:
                    _reap_orphans(shell.pid)
                    continue
                code = 128 - status if status < 0 else status
                break
    finally:
        stop_all(grace, stopped=code is None)
    return code if code is not None else 128 + _STOPS[0]


def main(argv: list[str]) -> int:
    return run(argv[2], float(argv[1]))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
