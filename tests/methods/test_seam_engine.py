"""Every baseline driven through the seam by a miniature engine: three regimes, checkpoint resume."""

from __future__ import annotations

import pytest
import torch

from methods.baseline_helpers import REGIMES, MiniEngine, pretrained_backbone

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
EPOCHS = 4


@pytest.mark.parametrize("regime", REGIMES)
@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_trains_in_every_regime_and_resumes_exactly(name, regime):
    full = MiniEngine(name, OPTIONS[name], regime, EPOCHS)
    initial = {k: v.clone() for k, v in full.model.state_dict().items()}
    full.run_epochs(0, EPOCHS, keep_checkpoints_after=(0, 2))
    assert full.resets == ([1] if name in ("jtt", "hbr") else [])  # the two-stage methods
    trained = full.model.state_dict()
    if regime == "linear_probe":  # frozen backbone, trained head (LDAM's cosine head included)
        for key, value in pretrained_backbone().items():
            assert torch.equal(trained[f"backbone.{key}"], value)
    else:
        assert not torch.equal(trained["backbone.0.weight"], initial["backbone.0.weight"])
    assert not torch.equal(trained["classifier.weight"], initial["classifier.weight"])

    for last in (0, 2):  # resume before and after JTT's / HBR's reset, LDAM's deferred re-weighting
        done, checkpoint = full.kept[last]
        resumed = MiniEngine(name, OPTIONS[name], regime, EPOCHS)
        resumed.resume(checkpoint)
        resumed.run_epochs(last + 1, EPOCHS)
        assert resumed.losses == full.losses[done:], f"resume after epoch {last}"


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_one_step_under_bfloat16_autocast_gives_a_float32_loss(name):
    engine = MiniEngine(name, OPTIONS[name], "scratch", EPOCHS)
    method, model = engine.method, engine.model
    method.train()
    method.on_epoch_start(1)
    index = torch.arange(12)
    x, target = engine.x[index], engine.target[index]
    method.on_batch(x, target, index)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits, features = model(x)
        loss = method(logits, features, target)
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    loss.backward()
    assert model.classifier.weight.grad is not None
