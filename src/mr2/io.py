"""Atomic file writes: a reader (or a crash) sees either the old file or the new one, never a torn one.

Each writer writes to a temporary file in the destination's directory, flushes and fsyncs it, then
``os.replace``s it over the destination (atomic on POSIX and Windows within one file system).
A write that fails (disk full, read-only, permissions) raises :class:`WriteError`, an ``OSError``
with the failure's ``errno`` and the destination as ``filename``, and leaves the previous file intact.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from mr2.errors import MR2Error

__all__ = [
    "WriteError",
    "append_jsonl",
    "atomic_save_torch",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_text",
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
