"""Center loss, SupCon and HBR through the real engine and the CLI: outputs, checkpointed state, resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import yaml

from helpers import base_config, torchrun, write_spread_npz
from mr2.cli.main import main
from mr2.config import config_from_dict
from mr2.engine import TrainingSession, train
from mr2.engine.checkpoint import load_checkpoint

DDP_WORKER = Path(__file__).parents[1] / "engine" / "ddp_train_worker.py"
NAMES = ("center_loss", "supcon", "hbr")


@pytest.fixture
def spread_npz(tmp_path):
    return write_spread_npz(tmp_path / "spread.npz")


STATE = {"center_loss": "centers", "supcon": "head.0.weight", "hbr": "multiplicity"}


@pytest.mark.parametrize("name", NAMES)
def test_cli_train_with_set_method_name(spread_npz, tmp_path, name, capsys):
    config_file = tmp_path / "run.yaml"
    config_file.write_text(yaml.safe_dump(base_config(spread_npz, tmp_path / "runs")))
    args = ["train", "--config", str(config_file), "--set", f"method.name={name}", "--set", "optim.epochs=2",
            "--quiet"]
    assert main(args) == 0
    run = tmp_path / "runs" / "run"
    final = json.loads((run / "final.json").read_text())
    assert final["method"] == name and final["num_samples"] == 59
    checkpoint = load_checkpoint(run / "checkpoints" / "last.pt")
    assert STATE[name] in checkpoint["method"]
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    if name == "hbr":
        assert checkpoint["reset_epoch"] == 1 and bool(checkpoint["method"]["frozen"])
        assert records[-1]["resampled_size"] > 0 and len(records[-1]["class_hardness"]) == 4
    if name == "center_loss":
        assert checkpoint["method"]["centers"].shape == (4, 16) and "loss_center" in records[-1]


def test_bad_option_exits_2_naming_it(spread_npz, tmp_path, capsys):
    config_file = tmp_path / "run.yaml"
    config_file.write_text(yaml.safe_dump(base_config(spread_npz, tmp_path / "runs")))
    code = main(["train", "--config", str(config_file), "--set", "method.name=supcon",
                 "--set", "method.options.head=deep", "--quiet"])
    assert code == 2
    assert "supcon option head must be one of ['mlp', 'linear']; got 'deep'." in capsys.readouterr().err
    assert not (tmp_path / "runs" / "run" / "checkpoints").exists()


@pytest.mark.parametrize("name", NAMES)
def test_resume_from_checkpoint_equals_uninterrupted_run(spread_npz, tmp_path, name):
    options = {"hbr": {"stage1_epochs": 2}}.get(name, {})

    def config(run):
        return config_from_dict(base_config(spread_npz, tmp_path, name=run, optim={"epochs": 3},
                                            method={"name": name, "options": options}))

    expected = train(config("whole"), quiet=True)
    stops = (1, 2) if name == "hbr" else (1,)  # HBR: inside stage 1 and at its boundary
    for stop in stops:
        run = f"split{stop}"
        assert TrainingSession(config(run), quiet=True).fit(stop_after_epoch=stop) is None
        resumed = TrainingSession(config(run), quiet=True).fit()
        assert resumed is not None and resumed["confusion_matrix"] == expected["confusion_matrix"]
        a = load_checkpoint(tmp_path / "whole" / "checkpoints" / "last.pt")
        b = load_checkpoint(tmp_path / run / "checkpoints" / "last.pt")
        for part in ("model", "method"):
            for key in a[part]:
                torch.testing.assert_close(a[part][key], b[part][key], msg=f"{part}.{key}")


@pytest.mark.distributed
@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="gloo unavailable")
@pytest.mark.parametrize("name", NAMES)
def test_two_processes_equal_one_process_with_double_batch(tmp_path, name):
    """torchrun with 2 gloo ranks x batch 8 ends with the state of 1 process x batch 16 (centres,
    SupCon head over the global batch, HBR's AUM records and resampled set)."""
    npz = write_spread_npz(tmp_path / "d.npz", train_per_class=41)
    options = {"hbr": {"stage1_epochs": 1}}.get(name, {})
    runs = {}
    for run, batch in (("ddp", 8), ("single", 16)):
        config = base_config(npz, tmp_path, name=run, method={"name": name, "options": options})
        config["data"] = {**config["data"], "val_fraction": 0.0, "batch_size": batch}
        runs[run] = config
    config_file = tmp_path / "ddp.yaml"
    config_file.write_text(yaml.safe_dump(runs["ddp"]))
    torchrun(DDP_WORKER, str(config_file))
    train(config_from_dict(runs["single"]), quiet=True)
    a = load_checkpoint(tmp_path / "ddp" / "checkpoints" / "last.pt")
    b = load_checkpoint(tmp_path / "single" / "checkpoints" / "last.pt")
    for part in ("model", "method"):
        for key in b[part]:
            torch.testing.assert_close(a[part][key], b[part][key], rtol=1e-4, atol=1e-5, msg=f"{part}.{key}")
