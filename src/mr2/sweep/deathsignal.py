"""The kernel's death signal (Linux ``PR_SET_PDEATHSIG``): a child that dies with its parent.

The signal is sent when the *thread* that forked the child ends, not the whole parent process, so a
child that must live as long as a process has to be started from a thread that lives that long.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from pathlib import Path
from typing import Any

__all__ = ["DEATH_SIGNAL", "ORPHANED", "SWEEP_PID_VARIABLE", "die_with_parent", "process_alive"]

#: ``prctl`` option: the signal the calling process receives when its parent thread ends.
PR_SET_PDEATHSIG = 1
#: The signal a sweep's trainers (and its fork server) get when the sweep dies.
DEATH_SIGNAL = signal.SIGTERM
#: Exit status of a process whose sweep died before its death signal was armed.
ORPHANED = 3
#: Environment variable naming the sweep process (read by :mod:`mr2.sweep.tether`).
SWEEP_PID_VARIABLE = "MR2_SWEEP_PID"


def _load_libc() -> Any:
    if not sys.platform.startswith("linux"):
        return None  # pragma: no cover - the death signal is Linux only
    return ctypes.CDLL(None, use_errno=True)


#: Loaded before any fork (a forked child of a threaded process must not dlopen).
_LIBC = _load_libc()


def die_with_parent(signum: int = DEATH_SIGNAL) -> bool:
    """Ask the kernel to send ``signum`` to this process when its parent thread ends (Linux).

    Returns False where the platform has no such mechanism. Safe between fork and exec (no import,
    no allocation beyond the call).

    Example:
        >>> import subprocess, sys
        >>> code = "from mr2.sweep.deathsignal import die_with_parent; print(die_with_parent())"
        >>> subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip()
        'True'
    """
    if _LIBC is None:  # pragma: no cover - not Linux
        return False
    if _LIBC.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"prctl(PR_SET_PDEATHSIG): {os.strerror(error)}")
    return True


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (dead, not yet reaped by its parent).

    Example:
        >>> process_alive(os.getpid())
        True
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - someone else's process
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # pragma: no cover - no /proc
        return True
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")
