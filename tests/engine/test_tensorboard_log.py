"""TensorBoard output of ``mr2 train``: per-class scalars, MR2's statistics, step-level losses."""

from __future__ import annotations

import json

import pytest
import torch

from helpers import base_config
from mr2.config import config_from_dict
from mr2.engine import train
from mr2.engine.logger import epoch_tiers

event_accumulator = pytest.importorskip(
    "tensorboard.backend.event_processing.event_accumulator", reason="tensorboard is not installed"
)


def _load(path):
    accumulator = event_accumulator.EventAccumulator(str(path), size_guidance={"scalars": 0, "images": 0})
    accumulator.Reload()
    return accumulator


def _series(accumulator, tag):
    return [(event.step, event.value) for event in accumulator.Scalars(tag)]


def test_tensorboard_holds_the_per_class_scalars_of_an_mr2_run(spread_npz, tmp_path):
    config = config_from_dict(base_config(spread_npz, tmp_path, optim={"epochs": 2}, log_every=3))
    train(config, quiet=True)
    run = tmp_path / "run"
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    epochs = _load(run / "tensorboard")
    names = [str(k) for k in range(4)]
    for k, name in enumerate(names):
        values = _series(epochs, f"val_class_accuracy/{name}")
        assert values == [(r["epoch"], pytest.approx(r["val_per_class_accuracy"][k])) for r in records]
        for key, tag in (("temperatures", "temperature"), ("spread", "spread"), ("second_moment", "second_moment")):
            assert _series(epochs, f"mr2/{tag}/{name}") == [
                (r["epoch"], pytest.approx(r[key][k], rel=1e-6)) for r in records
            ]
    worst = [min(r["val_per_class_accuracy"]) for r in records]
    assert [v for _, v in _series(epochs, "val_worst_class")] == pytest.approx(worst)
    hard = [epoch_tiers(r["val_per_class_accuracy"])["hard"] for r in records]
    assert [v for _, v in _series(epochs, "val_tier/hard")] == pytest.approx(hard)
    assert [v for _, v in _series(epochs, "loss_logit")] == pytest.approx([r["loss_logit"] for r in records])
    assert "test/sorted_class_accuracy" in epochs.Tags()["images"]
    steps = _load(run / "tensorboard" / "steps")
    # 128 training samples / batch 16 = 8 steps per epoch; every 3rd step of each epoch and its last
    # one, at the global step: 3, 6, 8, then 8 + 3, 8 + 6, 8 + 8.
    assert [s for s, _ in _series(steps, "train_step/loss")] == [3, 6, 8, 11, 14, 16]
    assert {"train_step/loss_logit", "train_step/loss_rep"} <= set(steps.Tags()["scalars"])


def test_epochs_shorter_than_log_every_still_log_their_last_step(spread_npz, tmp_path):
    # 8 steps per epoch, log_every 50: tensorboard/steps used to stay empty without a word.
    config = config_from_dict(
        base_config(spread_npz, tmp_path, method={"name": "erm"}, optim={"epochs": 2}, log_every=50)
    )
    train(config, quiet=True)
    run = tmp_path / "run"
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = _load(run / "tensorboard" / "steps")
    losses = _series(steps, "train_step/loss")
    assert [s for s, _ in losses] == [8, 16]
    # The last step's loss of a batch, near the epoch's mean training loss (not equal: one batch).
    for (_, value), record in zip(losses, records, strict=True):
        assert 0 < value < 3 * record["train_loss"] + 1


def test_epoch_tiers_follow_the_report_tier_rule():
    # 10 classes -> tiers of 4, 3, 3 (np.array_split), ties broken by class id.
    accuracy = [0.5, 0.9, 0.1, 0.7, 0.7, 0.3, 0.2, 0.8, 0.6, 0.4]
    ranked = sorted(range(10), key=lambda k: (-accuracy[k], k))
    expected = {
        "easy": sum(accuracy[k] for k in ranked[:4]) / 4,
        "medium": sum(accuracy[k] for k in ranked[4:7]) / 3,
        "hard": sum(accuracy[k] for k in ranked[7:]) / 3,
    }
    assert epoch_tiers(accuracy) == pytest.approx(expected)
    assert epoch_tiers([0.5, float("nan")]) == {}


def test_class_tags_use_the_metric_spelling(tmp_path):
    """The engine's TensorBoard tags and ClasswiseDisparity.to_log_dict spell class names alike
    (mr2.report.log_keys): "T-shirt/top" is T-shirt_top in both, colliding names made unique alike."""
    from mr2.engine.logger import TrainingLog

    metrics = pytest.importorskip("mr2.metrics", reason="torchmetrics is not installed")
    names = ["T-shirt/top", "sea lion", "T-shirt_top", "crème"]
    from mr2.report.log_keys import LogKeyCollisionWarning

    with pytest.warns(LogKeyCollisionWarning, match="'T-shirt_top' -> 'T-shirt_top_2'"):
        log = TrainingLog("run", 1, names, tmp_path / "tb", enabled=True, quiet=True)
    record = {
        "epoch": 1, "train_loss": 0.5, "train_accuracy": 0.5, "samples_per_second": 10.0,
        "val_per_class_accuracy": [0.25, 0.5, 0.75, 1.0], "temperatures": [1.0, 2.0, 3.0, 4.0],
    }
    log.epoch(record, 0.0)
    log.close()
    scalars = _load(tmp_path / "tb").Tags()["scalars"]
    engine_tags = sorted(t.removeprefix("val_class_accuracy/") for t in scalars if t.startswith("val_class_accuracy/"))
    metric = metrics.ClasswiseDisparity(4, class_names=names)
    metric.update(torch.arange(4), torch.arange(4))
    with pytest.warns(LogKeyCollisionWarning):
        logged = metric.to_log_dict()
    metric_keys = sorted(k.removeprefix("class_accuracy/") for k in logged if k.startswith("class_accuracy/"))
    assert engine_tags == metric_keys == sorted(["T-shirt_top", "sea_lion", "T-shirt_top_2", "cr_me"])
    assert sorted(t.removeprefix("mr2/temperature/") for t in scalars if t.startswith("mr2/temperature/")) == engine_tags
    assert _series(_load(tmp_path / "tb"), "val_class_accuracy/T-shirt_top_2") == [(1, 0.75)]
