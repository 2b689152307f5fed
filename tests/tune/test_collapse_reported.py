"""A trial's collapse guard reaches the tune (issue 44, item 5): a candidate any of whose runs tripped
the feature-collapse guard is named and not adopted, whichever way the trials are trained (the
Python API, ``--command``, the engine). Before, nothing outside the tests ever set a run's
``collapsed`` flag, so a contender that collapsed on a seed could be adopted."""

from __future__ import annotations

import io
import json
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from helpers.tune_command import COMMAND
from helpers.tune_trials import K, simulated
from mr2 import MR2Loss
from mr2.cli.main import main
from mr2.engine.final import PREDICTIONS_DIR
from mr2.engine.final import write_predictions as write_run_predictions
from mr2.losses.collapse import (
    COLLAPSE_RECORD,
    FeatureCollapseWarning,
    collapse_recorded,
    collapse_warnings,
    reset_collapse_warnings,
)
from mr2.tune import tune, write_predictions

CANDIDATE = "mr2-logit_only-c1"  # the simulated trials' one real gain


def trip(loss: nn.Module) -> None:
    """Train ``loss`` (an MR2Loss) five steps on features that shrink 1,000-fold while the logits stay
    uniform (logit term = log K): its real collapse guard warns at step 5."""
    target = torch.arange(12) % K
    for step in range(5):
        scale = 10.0 if step == 0 else 0.01
        features = torch.randn(12, 4, generator=torch.Generator().manual_seed(step)) * scale
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FeatureCollapseWarning)
            loss(torch.zeros(12, K), features.requires_grad_(), target)


def test_a_guards_warning_is_recorded_for_its_thread_until_reset():
    reset_collapse_warnings()
    loss = MR2Loss.from_variant("paper", K)
    trip(loss)
    assert loss.collapse_guard.warned_at == 5 and collapse_warnings() == (5,)
    seen = []
    other = threading.Thread(target=lambda: seen.append(collapse_warnings()))
    other.start()
    other.join()
    assert seen == [()]  # another thread's trials do not see it
    reset_collapse_warnings()
    assert collapse_warnings() == ()


def test_write_predictions_writes_collapse_json_after_a_guard_warned_and_removes_an_old_one(tmp_path):
    data = TensorDataset(torch.randn(12, 4), torch.arange(12) % K)
    loader = DataLoader(data, batch_size=5)
    model = nn.Linear(4, K)
    reset_collapse_warnings()
    write_predictions(tmp_path, model, loader, loader, num_classes=K)
    assert not collapse_recorded(tmp_path)
    trip(MR2Loss.from_variant("paper", K))
    write_predictions(tmp_path, model, loader, loader, num_classes=K)
    assert json.loads((tmp_path / COLLAPSE_RECORD).read_text()) == {"warned_at_steps": [5]}
    reset_collapse_warnings()  # a later training in this thread without a collapse
    write_predictions(tmp_path, model, loader, loader, num_classes=K)
    assert not (tmp_path / COLLAPSE_RECORD).exists()


def _collapsing_on(seeds):
    def train_fn(candidate, seed):
        if candidate.label == CANDIDATE and seed in seeds:
            trip(candidate.make_loss())
        return simulated(candidate, seed)

    return train_fn


def test_the_python_api_does_not_adopt_a_candidate_whose_run_collapsed(tmp_path):
    # Without a collapse the simulated gain is adopted (the control) ...
    control = tune(simulated, num_classes=K, candidates="quick", output_dir=tmp_path, name="control",
                   stream=io.StringIO())
    assert control.adopt and control.record.chosen["label"] == CANDIDATE
    assert control.record.verdict["outcome"] == "confirmed"
    # ... with its guard tripped on two of the finalist's fresh seeds it is named and not adopted.
    printed = io.StringIO()
    result = tune(_collapsing_on({7, 8}), num_classes=K, candidates="quick", output_dir=tmp_path, name="t",
                  stream=printed)
    assert not result.adopt
    assert result.record.verdict["outcome"] == "unstable"
    assert result.record.verdict["collapsed_seeds"] == [7, 8]
    assert "collapse" in printed.getvalue()
    # The flag is stored with the trials: a second call reuses them and gives the same advice.
    stored = json.loads((tmp_path / "t" / "trials" / "confirmation" / CANDIDATE / "seed=7" / "trial.json")
                        .read_text())
    assert stored["collapsed"] is True
    again = tune(_collapsing_on(set()), num_classes=K, candidates="quick", output_dir=tmp_path, name="t",
                 stream=io.StringIO())
    assert not again.adopt and again.record.verdict["collapsed_seeds"] == [7, 8]


def test_a_candidate_that_collapses_on_its_selection_run_is_screened_out(tmp_path):
    printed = io.StringIO()
    result = tune(_collapsing_on(set(range(100))), num_classes=K, candidates="quick", output_dir=tmp_path,
                  stream=printed)
    assert not result.adopt
    assert "tripped the feature-collapse guard" in printed.getvalue()


def test_a_command_trial_that_wrote_collapse_json_is_not_adopted(tmp_path, capsys, monkeypatch):
    # The stand-in script writes collapse.json (as write_predictions does after a guard warned) for
    # the candidate on every seed; its trials record it and the tune keeps ERM, naming why.
    monkeypatch.setenv("FAKE_FAIL", f"{CANDIDATE}:collapse")
    args = ["tune", "--command", COMMAND, "--num-classes", str(K), "--candidates", "quick",
            "--output-dir", str(tmp_path), "--name", "c", "--workers", "2"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    record = json.loads((tmp_path / "c" / "recommendation.json").read_text())
    assert record["adopt"] is False
    assert "tripped the feature-collapse guard" in printed
    trial = tmp_path / "c" / "trials" / "selection" / CANDIDATE / "seed=0"
    assert json.loads((trial / "trial.json").read_text())["collapsed"] is True
    # Without the collapse the same trials adopt it: a rerun of another name trains afresh.
    monkeypatch.delenv("FAKE_FAIL")
    assert main([*args[:-4], "--name", "d", "--workers", "2"]) == 0
    assert json.loads((tmp_path / "d" / "recommendation.json").read_text())["adopt"] is True


def test_the_engine_writes_collapse_json_beside_a_runs_predictions_after_a_guard_warned(tmp_path):
    predictions = {"val": (np.arange(6), np.arange(6)), "test": (np.arange(6), np.arange(6))}
    reset_collapse_warnings()
    write_run_predictions(tmp_path / "a", predictions)
    assert not collapse_recorded(tmp_path / "a" / PREDICTIONS_DIR)
    trip(MR2Loss.from_variant("paper", K))
    write_run_predictions(tmp_path / "b", predictions)
    assert collapse_recorded(tmp_path / "b" / PREDICTIONS_DIR)


@pytest.mark.slow
def test_an_engine_run_reports_no_collapse_from_an_earlier_training_of_its_thread(tmp_path, monkeypatch):
    from helpers.tune_trials import engine_config

    trip(MR2Loss.from_variant("paper", K))  # an earlier training in this thread collapsed
    config = engine_config(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--config", str(config), "--quiet"]) == 0
    runs = list(Path(tmp_path).rglob(f"{PREDICTIONS_DIR}/test.npz"))
    assert len(runs) == 1 and not collapse_recorded(runs[0].parent)
    assert collapse_warnings() == ()  # the run started from nothing
