"""Every baseline through the real engine (mr2.engine's Trainer and epoch loop, in their hook order),
in three regimes: it trains, and a run split by checkpoints resumes exactly; one step under bfloat16
autocast gives a float32 loss."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from helpers import base_config, write_spread_npz
from mr2.config import RunConfig, config_from_dict
from mr2.engine import TrainingSession
from mr2.engine.checkpoint import load_checkpoint
from mr2.models.registry import build_model

OPTIONS = {
    "erm": {"label_smoothing": 0.1},
    "lff": {},
    "jtt": {"stage1_epochs": 2, "lambda_up": 2},
    "group_dro": {"eta": 0.1},
    "ldam": {},
    "logit_adjustment": {},
    "focal": {"gamma": 2.0},
    "cdb": {"tau": 1.5},
    "center_loss": {"lambda_center": 0.5},
    "supcon": {},
    "hbr": {"stage1_epochs": 2},
}
REGIMES = ("scratch", "finetune", "linear_probe")
EPOCHS = 4
MLP = {"name": "mlp", "options": {"hidden_dims": [8, 5]}}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A tiny data file (4 classes x 12 training samples, 4 features) and a 'pretrained' backbone."""
    root = tmp_path_factory.mktemp("seam")
    npz = write_spread_npz(root / "tiny.npz", dim=4, train_per_class=12, test_per_class=5)
    with torch.random.fork_rng():
        torch.manual_seed(99)
        backbone = build_model(config_from_dict(base_config(npz, root, model=MLP)).model, 4, (4,))
    torch.save(backbone.state_dict(), root / "backbone.pt")
    return npz, root / "backbone.pt"


def _config(tiny: tuple[Path, Path], out: Path, name: str, method: str, regime: str) -> RunConfig:
    npz, weights = tiny
    sections: dict = {
        "name": name, "regime": regime, "optim": {"epochs": EPOCHS, "lr": 0.1, "warmup_epochs": 0},
        "method": {"name": method, "options": OPTIONS[method]},
        "data": {"batch_size": 12},
        "model": MLP if regime == "scratch" else {**MLP, "weights": str(weights)},
    }
    if regime == "linear_probe":
        # One feature cache per run: a cache miss draws from the RNG (the backbone is built to extract
        # the features), so a run that finds the cache starts from another head than one that did not.
        sections["cache_dir"] = str(out / f"cache-{name}")
    return config_from_dict(base_config(npz, out, **sections))


def _losses(run_dir: Path) -> list[float]:
    return [json.loads(line)["train_loss"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("regime", REGIMES)
@pytest.mark.parametrize("method", sorted(OPTIONS))
def test_trains_in_every_regime_and_resumes_exactly(tiny, tmp_path, method, regime):
    whole = TrainingSession(_config(tiny, tmp_path, "whole", method, regime), quiet=True)
    initial = {key: value.clone() for key, value in whole.model.state_dict().items()}
    final = whole.fit()
    assert final is not None
    trained = whole.model.state_dict()
    two_stage = method in ("jtt", "hbr")
    assert whole.trainer.reset_epoch == (2 if two_stage else None)  # a fresh model after stage 1
    if regime == "linear_probe":  # the backbone's cached features, a trained head
        assert whole.data.train.features.shape[1] == 5 and set(trained) == set(initial)
    elif not two_stage:
        backbone = next(key for key in trained if key.endswith("weight"))
        assert not torch.equal(trained[backbone], initial[backbone])
    head = [key for key in trained if "weight" in key][-1]
    assert not torch.equal(trained[head], initial[head])

    # The same run stopped and resumed: before and after JTT's / HBR's reset and LDAM's deferred
    # re-weighting (epochs 1 and 3), after epoch 2 for the others.
    split = _config(tiny, tmp_path, "split", method, regime)
    for stop in (1, 3) if two_stage or method == "ldam" else (2,):
        assert TrainingSession(split, quiet=True).fit(stop_after_epoch=stop) is None
        assert load_checkpoint(tmp_path / "split" / "checkpoints" / "last.pt")["epoch"] == stop
    resumed = TrainingSession(split, quiet=True).fit()
    assert resumed is not None and resumed["confusion_matrix"] == final["confusion_matrix"]
    assert _losses(tmp_path / "split") == _losses(tmp_path / "whole")
    for key, value in whole.model.state_dict().items():
        assert torch.equal(value, load_checkpoint(tmp_path / "split" / "checkpoints" / "last.pt")["model"][key])


@pytest.mark.parametrize("method", sorted(OPTIONS))
def test_one_step_under_bfloat16_autocast_gives_a_float32_loss(tiny, tmp_path, method):
    trainer = TrainingSession(_config(tiny, tmp_path, "run", method, "scratch"), quiet=True).trainer
    trainer.method.train()
    trainer.method.on_epoch_start(1)
    inputs, target, index = next(iter(trainer.train_loader(1)))
    trainer.method.on_batch(inputs, target, index)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits, features = trainer.model(inputs)
        loss = trainer.method(logits, features, target)
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    loss.backward()
    assert all(p.grad is not None for p in trainer.model.parameters())
