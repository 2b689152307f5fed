"""The trial store is read on resume through the bounded, checked reader of a fresh trial's predictions
(issue 43 item 5): a few-MB DEFLATE ``val.npz`` declaring more than a gigabyte is refused before any
array is allocated (before: read at 7.4 GB), a FIFO is refused without being opened (before: a hang),
stored non-finite logits FAIL the trial as fresh ones do (before: accepted), float class ids are
refused as the Python way in refuses them; a fresh command's FIFO or directory ``val.npz`` is named
as such, not "missing"."""

from __future__ import annotations

import io
import os
import threading
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest

from mr2.report.limits import DEFAULT_MAX_ARRAY_BYTES
from mr2.tune.candidates import candidates
from mr2.tune.errors import TrialError, TrialFailed
from mr2.tune.source import UNREADABLE, run_stored_trials
from mr2.tune.trials import Predictions, Trial, TrialPredictions, TrialStore, check_trial_predictions

K = 4
Y = np.array([0, 1, 2, 3] * 5)
ERM = candidates("quick")[0]
TRIAL = Trial("selection", ERM, 1)


def _store(tmp_path: Path) -> TrialStore:
    """A store holding one finished trial (y_pred on val, logits on test)."""
    store = TrialStore(tmp_path, K)
    result = TrialPredictions(val=Predictions(Y, y_pred=(Y + 1) % K), test=Predictions(Y, logits=np.eye(K)[Y]))
    store.write(check_trial_predictions(TRIAL, result, K), 1.0)
    assert store.is_finished(TRIAL)
    return store


def _val(store: TrialStore) -> Path:
    return store.path(TRIAL) / "val.npz"


def _npz(path: Path, **arrays: np.ndarray) -> None:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    path.write_bytes(buffer.getvalue())


def _deflate_bomb(path: Path, samples: int) -> None:
    """An .npz whose y_true [samples] int64 of zeros is stored with DEFLATE: a few MB on disk."""
    with (zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as archive,
          archive.open("y_true.npy", "w", force_zip64=True) as handle):
        np.lib.format.write_array_header_1_0(handle, {"descr": "<i8", "fortran_order": False, "shape": (samples,)})
        chunk, left = bytes(2**24), samples * 8
        while left:
            handle.write(chunk[:min(left, len(chunk))])
            left -= min(left, len(chunk))


@pytest.fixture(scope="module")
def bomb(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("bomb") / "val.npz"
    _deflate_bomb(path, DEFAULT_MAX_ARRAY_BYTES // 8 + 1000)  # 1 GB of int64 once read
    assert path.stat().st_size < 6 * 10**6
    return path


def test_a_stored_deflate_bomb_is_refused_before_any_array_is_allocated(tmp_path, bomb):
    store = _store(tmp_path)
    _val(store).write_bytes(bomb.read_bytes())
    tracemalloc.start()
    try:
        with pytest.raises(TrialError, match=r"declares y_true \[125001000\] int64, 1\.0 GB once read") as caught:
            store.read(TRIAL)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 50 * 10**6  # before: the whole array (1 GB), then its int64 copy
    assert not isinstance(caught.value, TrialFailed) and "\n" not in str(caught.value)


def test_a_resumed_tune_trains_a_trial_whose_stored_file_is_a_bomb_again(tmp_path, bomb):
    store = _store(tmp_path)
    _val(store).write_bytes(bomb.read_bytes())
    calls = []

    def train(trial: Trial) -> TrialPredictions:
        calls.append(trial.name)
        return TrialPredictions(val=Predictions(Y, y_pred=Y), test=Predictions(Y, y_pred=Y))

    out = io.StringIO()
    [result] = run_stored_trials([TRIAL], train, store, stream=out)
    assert calls == [TRIAL.name] and result.ok and not result.reused
    first = out.getvalue().splitlines()[0]
    assert first.startswith(UNREADABLE.split("{path}")[0].format(trial=TRIAL.name))
    assert store.read(TRIAL)["val"][1].tolist() == Y.tolist()  # the new trial's predictions


def _read_with_deadline(store: TrialStore, seconds: float = 20.0) -> BaseException | None:
    """``store.read(TRIAL)`` in a thread (a FIFO would block forever): the error it raised."""
    outcome: list[BaseException | None] = []

    def read() -> None:
        try:
            store.read(TRIAL)
            outcome.append(None)
        except BaseException as error:  # handed to the test
            outcome.append(error)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        os.close(os.open(_val(store), os.O_WRONLY | os.O_NONBLOCK))  # the blocked reader sees EOF
        thread.join(seconds)
        pytest.fail("reading a stored FIFO hangs")
    return outcome[0]


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_stored_fifo_or_directory_is_refused_without_opening_it(tmp_path, kind):
    store = _store(tmp_path)
    _val(store).unlink()
    if kind == "fifo":
        os.mkfifo(_val(store))
    else:
        _val(store).mkdir()
    error = _read_with_deadline(store)
    assert isinstance(error, TrialError) and not isinstance(error, TrialFailed)
    expected = "a FIFO (named pipe), not a regular file" if kind == "fifo" else "is a directory, not a file"
    assert expected in str(error) and "\n" not in str(error)


def test_stored_nan_logits_fail_the_trial_as_fresh_ones_do(tmp_path):
    store = _store(tmp_path)
    logits = np.eye(K)[Y]
    logits[3, 1] = np.nan
    _npz(_val(store), y_true=Y, logits=logits)
    with pytest.raises(TrialFailed, match=r"logits hold 1 non-finite value\(s\)"):
        store.read(TRIAL)
    out = io.StringIO()
    [result] = run_stored_trials([TRIAL], lambda trial: pytest.fail("not trained"), store, stream=out)
    assert not result.ok and "non-finite" in result.failure
    assert out.getvalue().startswith(f"reused {TRIAL.name} FAILED (")
    # A fresh trial with the same logits fails the same way.
    with pytest.raises(TrialFailed):
        check_trial_predictions(TRIAL, TrialPredictions(val={"y_true": Y, "logits": logits}, test={
            "y_true": Y, "y_pred": Y}), K)


@pytest.mark.parametrize("key", ["y_true", "y_pred"])
def test_stored_float_class_ids_are_refused_as_the_python_way_in_refuses_them(tmp_path, key):
    store = _store(tmp_path)
    arrays = {"y_true": Y, "y_pred": Y}
    arrays[key] = arrays[key].astype(np.float32)
    _npz(_val(store), **arrays)
    with pytest.raises(TrialError, match=f"{key} must hold integer class ids, got dtype float32"):
        store.read(TRIAL)


def test_stored_class_ids_of_another_k_are_refused(tmp_path):
    store = _store(tmp_path)
    _npz(_val(store), y_true=Y, y_pred=np.full_like(Y, K))  # class id K: out of [0, K)
    with pytest.raises(TrialError, match=r"val split: y_pred holds class ids from 4 to 4, outside \[0, 4\)"):
        store.read(TRIAL)
    _npz(_val(store), y_true=Y, logits=np.zeros((Y.size, K + 1)))
    with pytest.raises(TrialError, match="logits have 5 columns but num_classes is 4"):
        store.read(TRIAL)
