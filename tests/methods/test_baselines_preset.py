"""The baselines' companion preset runs the reference protocol with the four baselines."""

from __future__ import annotations

from mr2.config import config_to_dict
from mr2.sweep.plan import plan_sweep
from mr2.sweep.presets import load_preset


def test_baselines_preset_shares_the_protocol_and_sets_sam_on_erm():
    reference, study = load_preset("fashion-mnist"), load_preset("fashion-mnist-baselines")
    assert study.base == reference.base  # same data split, model and schedule
    assert [m.label for m in study.methods] == ["erm", "center_loss", "supcon", "hbr", "hbr_loss", "erm_sam"]
    assert study.reference == "erm" and len(study.seeds) == 5
    points = {p.label: config_to_dict(p.config) for p in plan_sweep(study) if p.seed == 0}
    assert points["erm_sam"]["method"]["name"] == "erm"
    assert points["erm_sam"]["optim"]["sam"] == {"rho": 0.05, "adaptive": False}
    assert all(points[label]["optim"]["sam"] is None for label in ("erm", "center_loss", "supcon", "hbr"))
    assert points["hbr_loss"]["method"] == {"name": "hbr", "options": {"estimator": "loss"}}
    assert {points[label]["method"]["name"] for label in ("center_loss", "supcon", "hbr")} == {
        "center_loss", "supcon", "hbr"}
