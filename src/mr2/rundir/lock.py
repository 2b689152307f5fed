"""One owner per run directory: an exclusive ``flock`` on ``<run>/.lock``.

The lock is held for the whole life of a trainer (or an evaluation) and released by the operating
system when the process ends, however it ends (``kill -9`` included), so a stale lock cannot
outlive its holder. The holder writes its pid into the file so that a refused second process can
name it. ``flock`` locks belong to an open file description: a second ``RunLock`` on the same
directory fails even inside the same process.

The lock file is opened without following a symbolic link (``O_NOFOLLOW``) and must be a regular
file: a ``.lock`` that is a link, a directory or a FIFO is refused with a one-line
:class:`~mr2.io.WriteError` (a link's target is never truncated or written).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import time
from pathlib import Path
from types import TracebackType

from mr2.errors import MR2Error
from mr2.io import LINK_REFUSED, NOT_A_REGULAR_FILE, WriteError, open_no_follow

__all__ = ["LOCK_FILE", "LOCK_IS_LINK", "LOCK_NOT_A_FILE", "RunLock", "RunLockedError", "lock_holder"]

#: Why a ``.lock`` is refused (:func:`mr2.io.open_no_follow`): the reasons of its :class:`WriteError`.
LOCK_IS_LINK, LOCK_NOT_A_FILE = LINK_REFUSED, NOT_A_REGULAR_FILE

LOCK_FILE = ".lock"
_RUN_LOCKED = (
    "run directory {path} is in use by process {pid} (a trainer or evaluation holds {lock}); wait "
    "for it to end or stop it (kill {pid}), then try again"
)
#: :data:`_RUN_LOCKED` when the lock file names no pid (a holder that has not written it yet, or a
#: process other than mr2's that locked the file): "process unknown" and "kill unknown" said nothing.
RUN_LOCKED_NO_PID = (
    "run directory {path} is in use by another process: it holds {lock}, which names no pid (a "
    "process of mr2 writes its pid there at once; another program may have locked the file); wait "
    "for it to end (`fuser {lock}` names it), then try again"
)
_ATTEMPTS = 5
_RETRY_SECONDS = 0.05


class RunLockedError(MR2Error, RuntimeError):
    """Another process owns the run directory; the message names its pid."""


_PID_BYTES = 32  # a pid and a newline; a lock file holding more was not written by mr2


def _read_pid(fd: int) -> str:
    """The pid written in an open lock file (read from the descriptor, bounded), or "unknown"."""
    try:
        text = os.pread(fd, _PID_BYTES, 0).decode("ascii").strip()
    except (OSError, UnicodeDecodeError):
        return "unknown"
    return text or "unknown"


class RunLock:
    """An exclusive, non-blocking lock on a run directory.

    Example:
        >>> import tempfile
        >>> run = Path(tempfile.mkdtemp())
        >>> with RunLock(run):
        ...     lock_holder(run) == os.getpid()
        True
        >>> lock_holder(run) is None
        True
    """

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_FILE
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._fd is not None

    def acquire(self) -> RunLock:
        """Take the lock (creating the directory), or raise :class:`RunLockedError` at once."""
        if self._fd is not None:
            return self
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            reason = error.strerror or str(error)
            raise WriteError(error.errno or errno.EIO, reason, str(self.run_dir)) from None
        fd = open_no_follow(self.path, os.O_RDWR | os.O_CREAT)
        # A few short retries: :func:`lock_holder` probes take the lock for microseconds.
        for attempt in range(_ATTEMPTS):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as error:
                if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    os.close(fd)
                    raise
                if attempt + 1 == _ATTEMPTS:
                    pid = _read_pid(fd)
                    os.close(fd)
                    message = _RUN_LOCKED if pid.isdigit() else RUN_LOCKED_NO_PID
                    raise RunLockedError(
                        message.format(path=self.run_dir, pid=pid, lock=self.path)
                    ) from None
                time.sleep(_RETRY_SECONDS)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return self

    def release(self) -> None:
        """Give the lock up (the file stays; its content is stale once nobody holds the lock)."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)

    def __del__(self) -> None:
        # At interpreter shutdown the modules may be gone; the OS releases the lock anyway.
        with contextlib.suppress(Exception):
            self.release()

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


def lock_holder(run_dir: str | os.PathLike[str]) -> int | None:
    """The pid of the process holding ``run_dir``'s lock, or None when nobody holds it; -1 when it is
    held but the file names no pid (say "another process", not "process -1").

    Read-only: it creates nothing (a directory without a lock file has no holder).
    """
    path = Path(run_dir) / LOCK_FILE
    try:
        fd = open_no_follow(path, os.O_RDONLY)
    except WriteError:  # none, or a link or special file: not a lock mr2 holds
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            text = _read_pid(fd)
            return int(text) if text.isdigit() else -1
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
