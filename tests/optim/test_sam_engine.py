"""``optim.sam`` through the real engine and the CLI: any method, checkpointed state, exact resume."""

from __future__ import annotations

import pytest
import torch
import yaml

from helpers import base_config, write_spread_npz
from mr2.cli.main import main
from mr2.config import config_from_dict
from mr2.engine import TrainingSession, train
from mr2.engine.checkpoint import load_checkpoint


@pytest.fixture
def spread_npz(tmp_path):
    return write_spread_npz(tmp_path / "spread.npz")


@pytest.mark.parametrize("method", ["erm", "center_loss", "mr2"])
def test_cli_train_with_sam_on_any_method(spread_npz, tmp_path, method):
    config_file = tmp_path / "run.yaml"
    config_file.write_text(yaml.safe_dump(base_config(spread_npz, tmp_path / "runs")))
    args = ["train", "--config", str(config_file), "--set", f"method.name={method}", "--set", "optim.epochs=2",
            "--set", "optim.sam.rho=0.05", "--quiet"]
    assert main(args) == 0
    run = tmp_path / "runs" / "run"
    checkpoint = load_checkpoint(run / "checkpoints" / "last.pt")
    steps = 2 * -(-128 // 16)  # 2 epochs of ceil(128 / 16) batches (160 samples, 20% held out)
    assert checkpoint["sam"] == {"rho": 0.05, "adaptive": False, "steps": steps}
    resolved = yaml.safe_load((run / "config.yaml").read_text())
    assert resolved["optim"]["sam"] == {"rho": 0.05, "adaptive": False}


def test_sam_changes_the_training_and_asam_differs_from_sam(spread_npz, tmp_path):
    def final(name, sam):
        return train(config_from_dict(base_config(spread_npz, tmp_path, name=name, optim={"epochs": 1, "sam": sam},
                                                  method={"name": "erm"})), quiet=True)
    plain, sam, asam = final("plain", None), final("sam", {"rho": 0.5}), final("asam", {"rho": 0.5, "adaptive": True})
    weights = {n: load_checkpoint(tmp_path / n / "checkpoints" / "last.pt")["model"] for n in ("plain", "sam", "asam")}
    key = next(iter(weights["plain"]))
    assert not torch.equal(weights["plain"][key], weights["sam"][key])
    assert not torch.equal(weights["sam"][key], weights["asam"][key])
    assert plain["num_samples"] == sam["num_samples"] == asam["num_samples"] == 59


@pytest.mark.parametrize("method", ["erm", "mr2"])
def test_resume_with_sam_equals_uninterrupted_run(spread_npz, tmp_path, method):
    def config(run):
        return config_from_dict(base_config(spread_npz, tmp_path, name=run, method={"name": method},
                                            optim={"epochs": 3, "sam": {"rho": 0.1, "adaptive": True}}))

    expected = train(config("whole"), quiet=True)
    assert TrainingSession(config("split"), quiet=True).fit(stop_after_epoch=1) is None
    resumed = TrainingSession(config("split"), quiet=True).fit()
    assert resumed is not None and resumed["confusion_matrix"] == expected["confusion_matrix"]
    a = load_checkpoint(tmp_path / "whole" / "checkpoints" / "last.pt")
    b = load_checkpoint(tmp_path / "split" / "checkpoints" / "last.pt")
    assert a["sam"] == b["sam"] and a["sam"]["steps"] == 3 * 8
    for part in ("model", "method"):
        for key in a[part]:
            torch.testing.assert_close(a[part][key], b[part][key], msg=f"{part}.{key}")


def test_bad_sam_config_exits_2(spread_npz, tmp_path, capsys):
    config_file = tmp_path / "run.yaml"
    config_file.write_text(yaml.safe_dump(base_config(spread_npz, tmp_path / "runs")))
    assert main(["train", "--config", str(config_file), "--set", "optim.sam.rho=-1", "--quiet"]) == 2
    assert "config key 'optim.sam.rho': must be >= 0" in capsys.readouterr().err
    assert main(["train", "--config", str(config_file), "--set", "optim.sam.radius=1", "--quiet"]) == 2
    assert "unknown config key 'optim.sam.radius'; valid keys here: rho, adaptive" in capsys.readouterr().err
