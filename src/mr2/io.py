"""Atomic file writes: a reader (or a crash) sees either the old file or the new one, never a torn one.

Each writer writes to a temporary file in the destination's directory, flushes and fsyncs it, then
``os.replace``s it over the destination (atomic on POSIX and Windows within one file system).
A write that fails (disk full, read-only, permissions) raises :class:`WriteError`, an ``OSError``
with the failure's ``errno`` and the destination as ``filename``, and leaves the previous file intact.

A file written in place (a lock file, a log appended to) is opened with :func:`open_no_follow`: never
through a symbolic link (``O_NOFOLLOW``), never blocking on a FIFO, and only when it is a regular file;
anything else is a one-line :class:`WriteError` (a link's target is never truncated or written).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, TextIO

from mr2.errors import MR2Error

__all__ = [
    "LINK_REFUSED",
    "NOT_A_REGULAR_FILE",
    "WEIGHTS_ONLY_REFUSED",
    "ReadRefused",
    "WriteError",
    "append_jsonl",
    "atomic_save_torch",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_text",
    "load_error_text",
    "open_no_follow",
    "open_text_no_follow",
    "read_bounded",
]


_UMASK_LOCK = threading.Lock()


class WriteError(MR2Error, OSError):
    """A file could not be written; its previous version (if any) is intact.

    ``errno`` and ``strerror`` are those of the operating system's failure (``ENOSPC``, ``EFBIG``,
    ``EROFS``, ``EACCES``, ...), ``filename`` the destination (not the temporary file).
    """


class _RecordingWriter:
    """A file's ``write`` / ``flush`` that remembers the first ``OSError``: ``torch.save`` reports
    a failed write of its buffer as a RuntimeError without the operating system's error."""

    def __init__(self, handle: IO[Any]) -> None:
        self.handle = handle
        self.error: OSError | None = None

    def write(self, data: Any) -> int:
        try:
            return self.handle.write(data)
        except OSError as error:
            self.error = self.error or error
            raise

    def flush(self) -> None:
        self.handle.flush()


#: Why a path is not written in place: a symbolic link, or no regular file (the ``strerror`` of the
#: :class:`WriteError`; the CLI prints "could not write PATH: REASON").
LINK_REFUSED = (
    "it is a symbolic link; mr2 never writes through one (the link's target would be overwritten): remove "
    "the link, then try again"
)
NOT_A_REGULAR_FILE = (
    "it is {kind}, not a regular file: remove it (mr2 creates the file itself), then try again"
)
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def file_kind(mode: int) -> str:
    """What a ``st_mode`` that is no regular file is, in words ("a directory", "a FIFO (named pipe)")."""
    return next((kind for test, kind in _KINDS if test(mode)), "a special file")


def open_no_follow(path: str | os.PathLike[str], flags: int, mode: int = 0o666) -> int:
    """A descriptor of ``path`` opened with ``flags`` (``os.O_RDWR | os.O_CREAT``, ...), never through a
    symbolic link (``O_NOFOLLOW``), never blocking (``O_NONBLOCK``: a FIFO), not inherited; the file
    must be a regular file.

    Raises:
        WriteError: ``path`` is a symbolic link, a directory or another non-regular file, or cannot be
            opened (read-only file system, permissions, a missing directory); one line naming it.
    """
    flags |= os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, mode)
    except OSError as error:
        if error.errno == errno.ELOOP:
            reason = LINK_REFUSED
        elif error.errno == errno.EISDIR:
            reason = NOT_A_REGULAR_FILE.format(kind="a directory")
        else:
            reason = error.strerror or str(error)
        raise WriteError(error.errno or errno.EIO, reason, os.fspath(path)) from None
    file_mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(file_mode):
        os.close(fd)
        raise WriteError(errno.EINVAL, NOT_A_REGULAR_FILE.format(kind=file_kind(file_mode)), os.fspath(path))
    os.set_blocking(fd, True)  # O_NONBLOCK was for opening a FIFO; a regular file's writes block anyway
    return fd


def open_text_no_follow(path: str | os.PathLike[str], *, append: bool = False) -> TextIO:
    """``open(path, "a" if append else "w", encoding="utf-8")`` through :func:`open_no_follow` (a log
    written in place: a link there is refused, not followed).

    Raises:
        WriteError: as :func:`open_no_follow`.
    """
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else 0)
    fd = open_no_follow(path, flags)
    if not append:
        os.ftruncate(fd, 0)  # after the checks: O_TRUNC would empty a FIFO's or a device's peer first
    return os.fdopen(fd, "a" if append else "w", encoding="utf-8")


class ReadRefused(MR2Error, ValueError):
    """A file :func:`read_bounded` will not read (no regular file, or larger than its bound); the
    message is the reason, for the caller's one-line error ("class names file X: <reason>")."""


def read_bounded(path: str | os.PathLike[str], max_bytes: int) -> bytes:
    """The bytes of a small file, read only when it is a regular file of at most ``max_bytes`` (checked
    on the open descriptor before reading: a FIFO is opened without blocking and refused, a device or
    a huge file is never read).

    Raises:
        ReadRefused: no regular file, or more than ``max_bytes``.
        OSError: it cannot be opened or read (missing, permissions).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ReadRefused(f"it is {file_kind(info.st_mode)}, not a regular file")
        if info.st_size > max_bytes:
            raise ReadRefused(f"it holds {info.st_size:,} bytes, more than the {max_bytes:,} such a file may")
        os.set_blocking(fd, True)
        chunks, left = [], max_bytes + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > max_bytes:  # it grew since fstat
        raise ReadRefused(f"it holds more than the {max_bytes:,} bytes such a file may")
    return data


def _umask() -> int:
    """The process's umask (read by setting and restoring it, under a lock)."""
    with _UMASK_LOCK:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


@contextmanager
def _atomic_file(path: str | os.PathLike[str], mode: str) -> Iterator[Any]:
    destination = Path(path)
    try:
        destination.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{destination.name}.", suffix=".tmp", dir=destination.parent)
    except OSError as error:
        raise WriteError(error.errno, error.strerror or str(error), str(destination)) from error
    writer: _RecordingWriter | None = None
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; results get the run's usual mode
        with os.fdopen(fd, mode) as handle:
            writer = _RecordingWriter(handle)
            yield writer
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, destination)
    except BaseException as error:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        failure = error if isinstance(error, OSError) else writer.error if writer is not None else None
        if failure is not None and not isinstance(error, WriteError):
            raise WriteError(failure.errno, failure.strerror or str(failure), str(destination)) from error
        raise


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    with _atomic_file(path, "wb") as handle:
        handle.write(data)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    with _atomic_file(path, "w") as handle:
        handle.write(text)


def atomic_write_json(path: str | os.PathLike[str], obj: Any, *, indent: int | None = 2) -> None:
    """Serialise ``obj`` as JSON (NaN written as ``NaN``) and write it to ``path`` atomically."""
    atomic_write_text(path, json.dumps(obj, indent=indent) + "\n")


def atomic_save_torch(path: str | os.PathLike[str], obj: Any) -> None:
    """``torch.save`` ``obj`` to ``path`` atomically (torch imported here: the text and JSON writers
    serve the command line's fast paths, which import no torch)."""
    import torch

    with _atomic_file(path, "wb") as handle:
        torch.save(obj, handle)


#: torch.load(weights_only=True) refusing a pickle, in one line (torch says it in several, with advice
#: to load it unsafely).
WEIGHTS_ONLY_REFUSED = (
    "torch.load(weights_only=True) refused it: {detail} (no code was run; a file mr2 reads holds "
    "tensors, numbers, strings, lists and dicts only)"
)


def load_error_text(error: BaseException) -> str:
    """What a failed ``torch.load`` (or ``np.load``) says, on one line: torch's several-line "Weights only
    load failed" becomes :data:`WEIGHTS_ONLY_REFUSED` naming what it refused; anything else its first
    non-empty line (or the exception's type).

    >>> load_error_text(RuntimeError("PytorchStreamReader failed reading zip archive\\nmore"))
    'PytorchStreamReader failed reading zip archive'
    """
    text = str(error).strip()
    if text.startswith("Weights only load failed") or (
            type(error).__name__ == "UnpicklingError" and "WeightsUnpickler" in text):
        marker = "WeightsUnpickler error:"
        detail = text.split(marker, 1)[1].strip() if marker in text else "it holds other pickled objects"
        detail = detail.splitlines()[0].split(". ")[0].rstrip(".")
        return WEIGHTS_ONLY_REFUSED.format(detail=detail[:300])
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0][:500] if lines else type(error).__name__


def append_jsonl(path: str | os.PathLike[str], record: dict[str, Any]) -> None:
    """Append one JSON line to ``path``, rewriting the file atomically.

    Rewriting (rather than appending in place) keeps the file valid if the process dies mid-write;
    the files this is used for (one line per epoch) stay small.
    """
    destination = Path(path)
    previous = destination.read_text() if destination.exists() else ""
    if previous and not previous.endswith("\n"):
        previous += "\n"
    atomic_write_text(destination, previous + json.dumps(record) + "\n")
