"""Every registered method through the real engine; JTT's reset survives a resume; linear probe."""

from __future__ import annotations

import json
import math

import pytest
import torch

from helpers import base_config
from mr2.config import ModelSection, config_from_dict
from mr2.engine import TrainingSession, train
from mr2.engine.checkpoint import load_checkpoint
from mr2.methods.registry import available_methods
from mr2.models.registry import build_model

OPTIONS = {"jtt": {"stage1_epochs": 1, "lambda_up": 3}, "cdb": {"tau": 1.5}, "hbr": {"estimator": "loss"}}
CHANCE = 0.25  # 4 balanced classes (spread_npz); an untrained network scores 0.03 here


@pytest.mark.parametrize("method", available_methods())
def test_every_method_learns_through_the_engine(spread_npz, tmp_path, method):
    # Separable Gaussian classes: two epochs take every method well above chance (lowest: cdb, 0.73).
    # HBR's loss estimator: with AUM and one stage-1 epoch its stage 2 learns one class (its warning).
    config = config_from_dict(
        base_config(spread_npz, tmp_path, name=method, optim={"epochs": 2},
                    method={"name": method, "options": OPTIONS.get(method, {})})
    )
    final = train(config, quiet=True)
    assert final["num_samples"] == 59 and final["overall_accuracy"] > 2 * CHANCE
    losses = [json.loads(line)["train_loss"] for line in (tmp_path / method / "metrics.jsonl").read_text().splitlines()]
    assert len(losses) == 2 and all(math.isfinite(loss) and loss > 0 for loss in losses)


def test_jtt_resets_the_model_and_resumes_identically_after_the_reset(spread_npz, tmp_path):
    def config(name):
        return config_from_dict(
            base_config(spread_npz, tmp_path, name=name, optim={"epochs": 3},
                        method={"name": "jtt", "options": {"stage1_epochs": 1, "lambda_up": 4}})
        )
    whole = train(config("whole"), quiet=True)
    session = TrainingSession(config("split"), quiet=True)
    assert session.fit(stop_after_epoch=2) is None
    assert load_checkpoint(tmp_path / "split" / "checkpoints" / "last.pt")["reset_epoch"] == 1
    resumed = TrainingSession(config("split"), quiet=True).fit()
    assert resumed is not None and resumed["confusion_matrix"] == whole["confusion_matrix"]
    # Stage 2 trains on the upsampled set: its epochs hold more samples than stage 1's.
    sizes = [json.loads(line)["samples_per_second"] * json.loads(line)["epoch_seconds"]
             for line in (tmp_path / "whole" / "metrics.jsonl").read_text().splitlines()]
    assert sizes[1] > sizes[0] + 1


def test_jtt_eval_pass_uses_engine_predictions(spread_npz, tmp_path):
    config = config_from_dict(
        base_config(spread_npz, tmp_path, optim={"epochs": 2},
                    method={"name": "jtt", "options": {"stage1_epochs": 1, "error_source": "eval_pass"}})
    )
    session = TrainingSession(config, quiet=True)
    predicted, target = session.predict_train_set()
    xs = torch.stack([session.data.train[i][0] for i in range(len(session.data.train))])
    with torch.no_grad():
        expected = session.model.eval()(xs)[0].argmax(1)
    assert torch.equal(predicted, expected)
    assert torch.equal(target, session.data.train.targets)
    assert session.fit() is not None


def _probe_configs(spread_npz, tmp_path):
    """Linear-probe run configurations by name: one saved MLP backbone, one feature cache."""
    backbone = build_model(ModelSection(name="mlp", options={"hidden_dims": [24, 10]}), 4, (12,))
    weights = tmp_path / "backbone.pt"
    torch.save(backbone.state_dict(), weights)

    def config(name):
        return config_from_dict(
            base_config(spread_npz, tmp_path, name=name, regime="linear_probe",
                        cache_dir=str(tmp_path / "cache"), optim={"epochs": 2},
                        model={"name": "mlp", "weights": str(weights), "options": {"hidden_dims": [24, 10]}})
        )
    return config


def test_linear_probe_trains_a_head_on_cached_features(spread_npz, tmp_path):
    config = _probe_configs(spread_npz, tmp_path)
    first = TrainingSession(config("a"), quiet=True)
    assert first.model.feature_dim == 10 and sum(p.numel() for p in first.model.parameters()) == 10 * 4 + 4
    features = first.data.train.features
    xs = torch.stack([x for x, _, _ in first.data.train])  # the probe's inputs are the features
    torch.testing.assert_close(xs, features)
    cached = sorted(p.name for p in (tmp_path / "cache").iterdir())
    assert len(cached) == 3  # train, val, test
    mtimes = {p: p.stat().st_mtime_ns for p in (tmp_path / "cache").iterdir()}
    second = TrainingSession(config("b"), quiet=True)  # served from the cache
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "cache").iterdir()} == mtimes
    torch.testing.assert_close(second.data.train.features, features)
    final = first.fit()
    assert final is not None and final["num_samples"] == 59


def test_linear_probe_result_does_not_depend_on_the_feature_cache(spread_npz, tmp_path):
    # A cache miss extracts features (a DataLoader draws from the global generator), a hit does not:
    # the head's initialisation and the shuffling must not see the difference.
    config = _probe_configs(spread_npz, tmp_path)
    miss = TrainingSession(config("miss"), quiet=True)
    hit = TrainingSession(config("hit"), quiet=True)  # same seed, features from the cache
    for a, b in zip(miss.model.state_dict().values(), hit.model.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    first, second = miss.fit(), hit.fit()
    assert first is not None and second is not None
    assert first["confusion_matrix"] == second["confusion_matrix"]
    assert first["logit_margins"] == second["logit_margins"]
