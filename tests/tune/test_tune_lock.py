"""Issue 43 items 4 and 6: one owner per tune directory whatever the way in (``tune --config`` too),
and what ended in a traceback or a hang is one line from mr2's error family (exit code 2 from the
command line): an output directory the tune cannot write, a ``.lock`` that is a directory or a link
(its target never written), a FIFO as ``--class-names``, ERM's timeout naming its log once, torch's
several-line "Weights only load failed" in a checkpoint or an arrays file."""

from __future__ import annotations

import io
import os
import threading
from pathlib import Path

import pytest
import torch

from helpers.tune_command import one_line_error as _one_line
from helpers.tune_command import tune_args as _tune
from mr2.cli.main import main
from mr2.data.errors import DatasetError
from mr2.engine.checkpoint import CheckpointError, load_checkpoint
from mr2.io import LINK_REFUSED, NOT_A_REGULAR_FILE, WEIGHTS_ONLY_REFUSED
from mr2.report.exceptions import PredictionsError
from mr2.report.predictions import read_class_names
from mr2.rundir.lock import RunLock
from mr2.tune.driver import TUNE_LOCKED


@pytest.mark.parametrize("out", ["/proc/self/x", "/proc/self/status/x"])
def test_an_output_directory_the_os_refuses_is_one_line(capsys, out):
    err = _one_line(capsys, main(_tune(Path(out))))
    assert "could not write /proc/self/" in err


def test_a_read_only_output_directory_is_one_line(tmp_path, capsys):
    if os.geteuid() == 0:  # root writes anywhere but on a read-only file system: sysfs is one
        out = Path("/sys/fs/mr2-test-out")
        if out.parent.is_dir() and os.access(out.parent, os.W_OK) and not os.statvfs(out.parent).f_flag & 1:
            try:
                out.mkdir()
            except OSError:
                pass
            else:
                out.rmdir()
                pytest.skip("no read-only directory here")
    else:
        out = tmp_path / "ro"
        out.mkdir()
        out.chmod(0o500)
    err = _one_line(capsys, main(_tune(out)))
    assert f"could not write {out}" in err


def test_a_lock_directory_in_the_tune_directory_is_one_line(tmp_path, capsys):
    (tmp_path / "c" / ".lock").mkdir(parents=True)
    err = _one_line(capsys, main(_tune(tmp_path)))
    assert NOT_A_REGULAR_FILE.format(kind="a directory") in err and str(tmp_path / "c" / ".lock") in err


def test_a_lock_link_in_the_tune_directory_is_refused_and_its_target_kept(tmp_path, capsys):
    target = tmp_path / "precious.txt"
    target.write_text("keep me\n")
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / ".lock").symlink_to(target)
    err = _one_line(capsys, main(_tune(tmp_path)))
    assert LINK_REFUSED in err
    assert target.read_text() == "keep me\n"  # before: the tune's pid
    assert not (tmp_path / "c" / "trials").exists()


def test_tune_config_takes_the_directory_lock_too(tmp_path, capsys):
    from helpers.sweeps import write_npz

    npz = write_npz(tmp_path / "data.npz", num_classes=3, dim=4, train_per_class=8, test_per_class=4)
    config = tmp_path / "run.yaml"
    config.write_text(f"data: {{name: arrays, root: {npz}, val_fraction: 0.25}}\nmodel: {{name: linear}}\n"
                      "optim: {epochs: 1}\ndevice: cpu\n")
    with RunLock(tmp_path / "out" / "t"):  # another tune (of any way in) owns the directory
        code = main(["tune", "--config", str(config), "--candidates", "erm,mr2-paper-c1", "--seeds", "2",
                     "--confirm-seeds", "2", "--output-dir", str(tmp_path / "out"), "--name", "t"])
    err = _one_line(capsys, code)
    assert err.strip() == "mr2 tune: error: " + TUNE_LOCKED.format(path=tmp_path / "out" / "t", pid=os.getpid())
    assert not (tmp_path / "out" / "t" / "selection").exists()  # before: it ran beside the owner

def _with_deadline(call, seconds: float = 20.0):
    result: list = []
    thread = threading.Thread(target=lambda: result.append(call()), daemon=True)
    thread.start()
    thread.join(seconds)
    return thread.is_alive(), result


def test_class_names_naming_a_fifo_is_one_line_not_a_hang(tmp_path, capsys):
    fifo = tmp_path / "names.txt"
    os.mkfifo(fifo)
    def read() -> str:
        try:
            read_class_names(fifo)
        except PredictionsError as error:
            return str(error)
        return ""

    hung, said = _with_deadline(read)
    if hung:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # let the blocked reader go
        pytest.fail("reading class names from a FIFO hangs")
    assert said == [f"class names file {fifo} cannot be read (it is a FIFO (named pipe), not a regular file); "
                    "write one class name per line, in class-id order"]
    err = _one_line(capsys, main(_tune(tmp_path, "--class-names", str(fifo))))
    assert f"class names file {fifo} cannot be read (it is a FIFO (named pipe), not a regular file)" in err


def test_erms_timeout_names_its_log_once(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("FAKE_FAIL", "erm:hang")
    code = main(_tune(tmp_path, "--trial-timeout", "1"))
    err = capsys.readouterr().err
    assert code == 1 and "ran longer than --trial-timeout 1 s" in err, err
    log = tmp_path / "c" / "trials" / "selection" / "erm" / "seed=0" / "train.log"
    assert err.count(f"(log: {log})") == 1, err  # before: twice


def _pickled_object(path: Path) -> None:
    torch.save({"model": {"w": torch.zeros(2)}, "other": io.StringIO("x")}, path)


def test_a_checkpoint_torch_refuses_is_one_line(tmp_path):
    path = tmp_path / "last.pt"
    _pickled_object(path)
    with pytest.raises(CheckpointError) as caught:
        load_checkpoint(path)
    message = str(caught.value)
    assert "\n" not in message and "Weights only load failed" not in message
    assert WEIGHTS_ONLY_REFUSED.split("{detail}")[0] in message and "_io.StringIO" in message


def test_an_arrays_file_torch_refuses_is_one_line(tmp_path):
    from mr2.data.arrays import load_arrays

    path = tmp_path / "data.pt"
    _pickled_object(path)
    with pytest.raises(DatasetError) as caught:
        load_arrays(path)
    message = str(caught.value)
    assert "\n" not in message and WEIGHTS_ONLY_REFUSED.split("{detail}")[0] in message
