"""The engine's per-sample predictions (``predictions/test.npz`` and ``val.npz`` next to final.json):
they agree with final.json's confusion matrices, follow the split's sample order (also when ranks
evaluated strided shards), and are what ``mr2 tune --config`` chooses on."""

from __future__ import annotations

import json

import numpy as np
import torch

from helpers.tune_trials import engine_config as _config
from mr2.config import load_config
from mr2.engine import EvalResult, train
from mr2.engine.samplers import shard_for_eval
from mr2.report.predictions import read_predictions


def test_a_run_writes_predictions_that_agree_with_final_json(tmp_path):
    config = load_config(_config(tmp_path), [f"output_dir={tmp_path / 'runs'}", "name=r", "optim.epochs=1"])
    final = train(config, quiet=True)
    directory = tmp_path / "runs" / "r"
    assert json.loads((directory / "final.json").read_text()) == json.loads(json.dumps(final))
    for split, confusion in (("test", final["confusion_matrix"]), ("val", final["validation"]["confusion_matrix"])):
        stored = read_predictions(directory / "predictions" / f"{split}.npz")  # the report's format
        with np.load(directory / "predictions" / f"{split}.npz") as data:
            assert set(data.files) == {"y_true", "y_pred"} and data["y_pred"].dtype == np.int16
        k = len(confusion)
        counts = np.zeros((k, k), dtype=np.int64)
        np.add.at(counts, (stored.y_true, stored.y_pred), 1)
        assert counts.tolist() == confusion
    # Test labels in the data set's order (the arrays file's test split is stored class by class).
    with np.load(tmp_path / "data.npz") as data:
        assert np.array_equal(read_predictions(directory / "predictions" / "test.npz").y_true, data["y_test"])


def test_strided_shards_are_put_back_in_the_splits_order():
    n, ranks = 11, 3
    truth = torch.arange(n) % 4
    guess = (torch.arange(n) * 7) % 4
    gathered = torch.cat([torch.tensor(shard_for_eval(n, ranks, r), dtype=torch.long) for r in range(ranks)])
    result = EvalResult(torch.zeros(4, 4, dtype=torch.long), torch.zeros(n), truth[gathered], guess[gathered], ranks)
    targets, predictions = result.in_dataset_order()
    assert torch.equal(targets, truth) and torch.equal(predictions, guess)
