"""The run-directory lock (``<dir>/.lock``) never writes through a symbolic link and refuses a lock
file that is no regular file, with one line (issue 43 item 4): before, a ``.lock`` link's target was
truncated and overwritten with a pid, and a ``.lock`` directory or an unwritable directory ended in a
traceback."""

from __future__ import annotations

import os
import stat

import pytest

from mr2.cli.main import main
from mr2.errors import MR2Error
from mr2.io import WriteError
from mr2.rundir.lock import LOCK_IS_LINK, LOCK_NOT_A_FILE, RunLock, lock_holder

TARGET_TEXT = "precious data, not a pid\n"


def test_a_lock_symlink_is_refused_and_its_target_left_untouched(tmp_path):
    target = tmp_path / "precious.txt"
    target.write_text(TARGET_TEXT)
    run = tmp_path / "run"
    run.mkdir()
    (run / ".lock").symlink_to(target)
    with pytest.raises(WriteError) as caught:
        RunLock(run).acquire()
    assert isinstance(caught.value, MR2Error)
    assert caught.value.strerror == LOCK_IS_LINK and caught.value.filename == str(run / ".lock")
    assert target.read_text() == TARGET_TEXT  # before: "<pid>\n"
    assert lock_holder(run) is None  # a probe neither follows it nor fails


def test_a_dangling_lock_symlink_creates_nothing_at_its_target(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    target = tmp_path / "elsewhere" / "created-by-the-lock"
    target.parent.mkdir()
    (run / ".lock").symlink_to(target)
    with pytest.raises(WriteError):
        RunLock(run).acquire()
    assert not target.exists()  # before: O_CREAT made the link's target


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_a_lock_that_is_no_regular_file_is_one_line(tmp_path, kind):
    run = tmp_path / "run"
    run.mkdir()
    if kind == "directory":
        (run / ".lock").mkdir()
    else:
        os.mkfifo(run / ".lock")
    with pytest.raises(WriteError) as caught:
        RunLock(run).acquire()
    expected = "a directory" if kind == "directory" else "a FIFO (named pipe)"
    assert caught.value.strerror == LOCK_NOT_A_FILE.format(kind=expected)
    assert lock_holder(run) is None  # a FIFO is not opened for reading (it would block)


def test_a_regular_lock_still_works_and_names_its_holder(tmp_path):
    run = tmp_path / "run"
    with RunLock(run):
        assert lock_holder(run) == os.getpid()
        assert (run / ".lock").read_text() == f"{os.getpid()}\n"
    assert lock_holder(run) is None


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_an_unwritable_directory_is_one_line(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    run.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        with pytest.raises(WriteError) as caught:
            RunLock(run).acquire()
    finally:
        run.chmod(stat.S_IRWXU)
    assert caught.value.filename == str(run / ".lock") and "\n" not in str(caught.value)


def test_a_lock_under_proc_is_one_line(tmp_path):
    with pytest.raises(WriteError) as caught:
        RunLock("/proc/self/x").acquire()
    assert caught.value.filename in ("/proc/self/x", "/proc/self/x/.lock")


def test_mr2_eval_of_a_run_whose_lock_is_a_link_is_one_line(tmp_path, capsys):
    target = tmp_path / "precious.txt"
    target.write_text(TARGET_TEXT)
    run = tmp_path / "run"
    run.mkdir()
    (run / ".lock").symlink_to(target)
    code = main(["eval", str(run)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert target.read_text() == TARGET_TEXT
