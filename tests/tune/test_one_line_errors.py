"""Issue 43 item 6: what ended in a traceback or was silently accepted now ends in one line from
mr2's error family (exit code 2 from the command line): a deep or huge ``trial.json``, float class ids
or a FIFO / directory as a command's ``val.npz`` (not "missing"), a sampler whose order may change."""

from __future__ import annotations

import sys
import tracemalloc

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, SubsetRandomSampler, TensorDataset, WeightedRandomSampler

from helpers.tune_command import one_line_error as _one_line
from helpers.tune_command import tune_args as _tune
from mr2.cli.main import main
from mr2.tune.candidates import candidates
from mr2.tune.errors import TrialError, TuneInputError
from mr2.tune.script import LOADER_SAMPLER, write_predictions
from mr2.tune.trials import Trial, TrialStore


def _unfinished_or_one_line(store: TrialStore, trial: Trial) -> None:
    """A damaged record marks no finished trial, or is refused with one line of mr2's error family."""
    try:
        assert not store.is_finished(trial)
    except TrialError as error:
        assert "\n" not in str(error) and len(str(error)) < 2000


def test_a_200000_deep_trial_record_is_not_a_recursion_error(tmp_path):
    store = TrialStore(tmp_path, 3)
    trial = Trial("selection", candidates("quick")[0], 1)
    store.path(trial).mkdir(parents=True)
    (store.path(trial) / "trial.json").write_text("[" * 200_000 + "]" * 200_000)
    _unfinished_or_one_line(store, trial)  # before: RecursionError


def test_a_huge_trial_record_is_not_read(tmp_path):
    store = TrialStore(tmp_path, 3)
    trial = Trial("selection", candidates("quick")[0], 1)
    store.path(trial).mkdir(parents=True)
    with open(store.path(trial) / "trial.json", "wb") as handle:
        handle.truncate(2 * 10**9)  # a sparse 2 GB file
    tracemalloc.start()
    try:
        _unfinished_or_one_line(store, trial)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 50 * 10**6  # before: read whole (2 GB)


WRITER = """
import argparse, os, sys
import numpy as np
parser = argparse.ArgumentParser()
parser.add_argument("--loss-json"); parser.add_argument("--seed"); parser.add_argument("--out")
args = parser.parse_args()
os.makedirs(args.out, exist_ok=True)
y = np.arange(60) % 6
mode = os.environ["WRITE_MODE"]
for split in ("val", "test"):
    path = os.path.join(args.out, split + ".npz")
    if mode == "float":
        np.savez(path, y_true=y.astype(np.float64), y_pred=y)
    elif mode == "fifo":
        os.mkfifo(path)
    elif mode == "directory":
        os.mkdir(path)
"""


@pytest.mark.parametrize(("mode", "message"), [
    ("float", "y_true must hold integer class ids, got dtype float64"),
    ("fifo", "is a FIFO (named pipe), not a regular file"),
    ("directory", "is a directory, not a file"),
])
def test_what_a_command_writes_is_checked_as_the_python_way_in_checks_it(tmp_path, capsys, monkeypatch, mode,
                                                                         message):
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    monkeypatch.setenv("WRITE_MODE", mode)
    command = f"{sys.executable} {script} --loss-json {{loss}} --seed {{seed}} --out {{out}}"
    err = _one_line(capsys, main(_tune(tmp_path / "out", command=command)))  # a FIFO is never opened
    assert "trial selection/erm@0: predictions file " in err and message in err
    assert "is missing" not in err  # before: a FIFO or a directory was "missing"; a float y_true passed


def _loader(sampler=None) -> DataLoader:
    data = TensorDataset(torch.randn(12, 3), torch.arange(12) % 3)
    return DataLoader(data, batch_size=4, sampler=sampler)


@pytest.mark.parametrize("sampler", [SubsetRandomSampler(range(12)), WeightedRandomSampler([1.0] * 12, 12)],
                         ids=["subset-random", "weighted-random"])
def test_write_predictions_refuses_a_sampler_whose_order_may_change(tmp_path, sampler):
    model = nn.Linear(3, 3)
    with pytest.raises(TuneInputError) as caught:
        write_predictions(tmp_path, model, _loader(sampler), _loader())
    assert str(caught.value) == LOADER_SAMPLER.format(split="val", attribute="sampler",
                                                      kind=f"a {type(sampler).__name__}")
    assert not list(tmp_path.iterdir())


def test_write_predictions_takes_a_sequential_loader_and_a_list_of_indices(tmp_path):
    model = nn.Linear(3, 3)
    files = write_predictions(tmp_path, model, _loader(list(range(12))), _loader())
    with np.load(files["val"]) as data:
        assert data["y_true"].tolist() == [i % 3 for i in range(12)]


