"""A run directory whose lock is held by a process that wrote no pid in it is reported as held by
"another process", not by "process unknown" (with "kill unknown") or "process -1"."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from mr2.rundir import RunDirectory, RunDirectoryError, RunLock, RunLockedError, layout, lock_holder
from mr2.rundir import lock as lock_module


def _hold_without_pid(run_dir: Path) -> int:
    """Lock ``run_dir/.lock`` the way another program would: flock, and no pid written."""
    run_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(run_dir / ".lock", os.O_RDWR | os.O_CREAT, 0o666)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


def test_a_lock_without_a_pid_names_no_pid(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    fd = _hold_without_pid(run_dir)
    try:
        assert lock_holder(run_dir) == -1
        with pytest.raises(RunLockedError) as caught:
            RunLock(run_dir).acquire()
        assert str(caught.value) == lock_module.RUN_LOCKED_NO_PID.format(path=run_dir, lock=run_dir / ".lock")
        text = str(caught.value).replace(str(tmp_path), "TMP")  # pytest's tmp path may hold "-1" ("pytest-103")
        assert "unknown" not in text and "-1" not in text
        (run_dir / layout.OVERWRITTEN_DIR).mkdir()
        with pytest.raises(RunDirectoryError) as caught_overwrite:
            RunDirectory(run_dir).recover_overwrite()
        assert str(caught_overwrite.value) == layout.OVERWRITE_IN_PROGRESS_NO_PID.format(
            path=run_dir, staged=run_dir / layout.OVERWRITTEN_DIR
        )
    finally:
        os.close(fd)
