"""Fuzz of what a resumed tune reads from its trial store and of the script helpers (issue 43 item 6,
extending :mod:`tests.tune.test_fuzz_tune_inputs`): a stored ``val.npz`` / ``test.npz`` / ``trial.json``
damaged every way a disk, a user or an adversary can (truncated, bytes flipped, other keys, dtypes and
shapes, headers declaring gigabytes, FIFOs, directories, devices, links, deep or huge JSON) is reused,
trained again (saying so) or fails its trial, or stops the tune with one line of mr2's error family,
in bounded time and memory: never another exception, never a hang. The same for the script helpers'
arguments and for ``write_predictions`` fed odd batches."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import struct
import time
import tracemalloc
import zipfile

import numpy as np
import pytest
import torch
from torch import nn

from mr2.errors import MR2Error
from mr2.tune.candidates import candidates
from mr2.tune.script import add_trial_arguments, write_predictions
from mr2.tune.source import run_stored_trials
from mr2.tune.trials import Predictions, Trial, TrialPredictions, TrialStore, check_trial_predictions

K = 4
Y = np.arange(24) % K
TRIAL = Trial("selection", candidates("quick")[0], 1)


def _npz_bytes(**arrays: object) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)  # type: ignore[arg-type]
    return buffer.getvalue()


def _declaring(shape: tuple[int, ...], descr: str = "<i8") -> bytes:
    """An .npz whose y_true header declares ``shape`` but stores a few bytes."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive, archive.open("y_true.npy", "w") as handle:
        np.lib.format.write_array_header_1_0(handle, {"descr": descr, "fortran_order": False, "shape": shape})
        handle.write(b"\0" * 64)
    return buffer.getvalue()


def _arrays(rng: random.Random) -> bytes:
    """A well-formed .npz of random keys, dtypes and shapes."""
    n = rng.choice([0, 1, Y.size, Y.size + 1])
    dtypes = [np.int8, np.int64, np.uint64, np.float16, np.float64, np.bool_, np.complex64, "U3", "S2"]
    pick = {}
    for key in rng.sample(["y_true", "y_pred", "logits", "class_names", "extra"], rng.randint(0, 4)):
        shape = {"logits": (n, rng.choice([1, K, K + 1]))}.get(key, rng.choice([(n,), (n, 2), ()]))
        values = np.random.default_rng(rng.randrange(10**6)).integers(-3, 2**40, size=shape)
        dtype = rng.choice(dtypes)
        with np.errstate(all="ignore"):
            array = values.astype(dtype)
        if rng.random() < 0.2 and array.dtype.kind == "f" and array.size:
            array.flat[0] = rng.choice([np.nan, np.inf])
        pick[key] = array
    return _npz_bytes(**pick)


def _damage(store: TrialStore, rng: random.Random, case: int) -> str:
    """Damage one of the stored trial's files; what was done."""
    name = rng.choice(["val.npz", "test.npz", "trial.json"])
    path = store.path(TRIAL) / name
    data = path.read_bytes()
    kind = case % 12
    path.unlink()
    if kind == 0:
        path.write_bytes(data[: rng.randrange(len(data))])
    elif kind == 1:
        flipped = bytearray(data)
        for _ in range(rng.randint(1, 20)):
            flipped[rng.randrange(len(flipped))] = rng.randrange(256)
        path.write_bytes(bytes(flipped))
    elif kind == 2:
        path.write_bytes(rng.randbytes(rng.randint(0, 3000)))
    elif kind == 3:
        path.write_bytes(_arrays(rng) if name != "trial.json" else json.dumps(rng.choice(
            [[], {}, None, 1e308, "x", {"phase": None}, {"seed": 10**400}]), default=str).encode())
    elif kind == 4:
        path.write_bytes(_declaring(rng.choice([(10**12,), (2**62 // 8,), (10**6, 10**6), (0,)]),
                                    rng.choice(["<i8", "<f8", "|b1", "<U100"])))
    elif kind == 5:
        os.mkfifo(path)
    elif kind == 6:
        path.mkdir()
    elif kind == 7:
        path.symlink_to("/dev/zero")
    elif kind == 8:
        path.symlink_to(path.with_name("nowhere"))
    elif kind == 9:
        depth = rng.choice([1000, 200_000])
        path.write_bytes(b"[" * depth + b"]" * depth if name == "trial.json" else b"PK" + b"\0" * depth)
    elif kind == 10:
        with open(path, "wb") as handle:
            handle.truncate(rng.choice([5 * 10**9, 10**6]))  # sparse: nothing written
    else:
        path.write_bytes(b"\xff\xfe" + data)
    return f"{name}: damage {kind}"


def _train(trial: Trial) -> TrialPredictions:
    return TrialPredictions(val=Predictions(Y, y_pred=Y), test=Predictions(Y, logits=np.eye(K)[Y]))


@pytest.mark.parametrize("case", range(96))
def test_a_damaged_store_is_reused_retrained_failed_or_one_line(tmp_path, case):
    rng = random.Random(case)
    store = TrialStore(tmp_path, K)
    first = TrialPredictions(val=Predictions(Y, y_pred=(Y + 1) % K), test=Predictions(Y, logits=np.eye(K)[Y]))
    store.write(check_trial_predictions(TRIAL, first, K), 1.0)
    what = _damage(store, rng, case)
    out = io.StringIO()
    started = time.monotonic()
    tracemalloc.start()
    try:
        [result] = run_stored_trials([TRIAL], _train, TrialStore(tmp_path, K), stream=out)
    except MR2Error as error:
        assert "\n" not in str(error) and len(str(error)) < 3000, what
        outcome = "refused"
    else:
        outcome = "reused" if result.reused and result.ok else "failed" if not result.ok else "trained"
        if result.ok:
            assert result.predictions is not None
            assert {split: (arrays[0].tolist(), arrays[1].shape) for split, arrays in result.predictions.items()} \
                == {"val": (Y.tolist(), Y.shape), "test": (Y.tolist(), Y.shape)}, what
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        with contextlib.suppress(OSError):  # a FIFO left for the next case
            os.close(os.open(store.path(TRIAL) / "val.npz", os.O_WRONLY | os.O_NONBLOCK))
    assert time.monotonic() - started < 60, what
    assert peak < 100 * 10**6, (what, peak)
    assert outcome in ("reused", "trained", "failed", "refused")
    for line in out.getvalue().splitlines():
        assert len(line) < 3000, what


ARGS = ["--loss-json", "--seed", "--out", "{", "[" * 50_000, "-1", "1" * 5000, "2" * 25, "x", "", "/dev/null",
        '{"method": "focal", "options": {"gamma": "2"}}', '{"method": "erm", "method": "erm"}', "nan",
        '{"method": "center_loss", "options": {"lambda_center": 1e400}}', "\0", "--help2", "=", "0x10"]


@pytest.mark.parametrize("case", range(120))
def test_the_trial_arguments_parse_or_stop_with_one_line(case, capsys):
    rng = random.Random(case)
    argv = [rng.choice(ARGS) for _ in range(rng.randint(0, 6))]
    parser = add_trial_arguments(argparse.ArgumentParser(prog="train.py"))
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:
        err = capsys.readouterr().err.strip().splitlines()
        assert stop.code == 2 and err[-1].startswith("train.py: error: "), err
        assert len(err[-1]) < 3000 + len(" ".join(argv))  # argparse repeats what it did not recognise
        return
    assert isinstance(args.seed, int) and args.seed >= 0 and isinstance(args.loss_json, dict)


class _Model(nn.Module):
    def __init__(self, rng: random.Random) -> None:
        super().__init__()
        self.kind = rng.choice(["logits", "pair", "nan", "int", "1d", "wide", "list"])

    def forward(self, x: torch.Tensor) -> object:
        logits = torch.zeros(x.shape[0], K)
        if self.kind == "pair":
            return logits, x
        if self.kind == "nan":
            return logits.fill_(float("nan"))
        if self.kind == "int":
            return logits.long()
        if self.kind == "1d":
            return logits[:, 0]
        if self.kind == "wide":
            return torch.zeros(x.shape[0], K + 3)
        if self.kind == "list":
            return logits.tolist()
        return logits


def _batches(rng: random.Random) -> list[object]:
    batches: list[object] = []
    for _ in range(rng.randint(0, 3)):
        n = rng.choice([0, 1, 3])
        labels = rng.choice([torch.arange(n) % K, torch.arange(n).float(), torch.full((n,), -1),
                             torch.full((n,), K), torch.zeros(n, 2, dtype=torch.long), [0] * n, "y"])
        inputs = torch.zeros(n, 2)
        batches.append(rng.choice([(inputs, labels), [inputs, labels, None], (inputs,), inputs, {"x": inputs}]))
    return batches


@pytest.mark.parametrize("case", range(80))
def test_write_predictions_writes_valid_files_or_one_line(tmp_path, case):
    rng = random.Random(case)
    try:
        files = write_predictions(tmp_path / "out", _Model(rng), _batches(rng), _batches(rng),
                                  num_classes=rng.choice([None, K]))
    except MR2Error as error:
        assert "\n" not in str(error) and len(str(error)) < 3000
        assert not (tmp_path / "out" / "val.npz").exists()  # both splits are checked before writing
        return
    from mr2.report.predictions import read_predictions

    for split in ("val", "test"):
        item = read_predictions(files[split], integer_ids=True)
        assert item.y_true.dtype == np.int64 and item.logits is not None and np.isfinite(item.logits).all()
        header = struct.unpack("<H", files[split].read_bytes()[4:6])[0]  # a zip archive (PK\3\4)
        assert header >= 10
