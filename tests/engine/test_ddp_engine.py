"""The engine under torchrun with 2 gloo processes equals 1 process on the same global batches."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import yaml

from helpers import base_config, torchrun, write_spread_npz
from mr2.config import config_from_dict
from mr2.engine import train
from mr2.engine.checkpoint import load_checkpoint

WORKER = Path(__file__).with_name("ddp_train_worker.py")


@pytest.mark.distributed
@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="gloo unavailable")
@pytest.mark.parametrize("method", ["mr2"])
def test_two_processes_equal_one_process_with_double_batch(tmp_path, method):
    npz = write_spread_npz(tmp_path / "d.npz", train_per_class=41)  # 164 samples, test 59 (odd)
    common = {"method": {"name": method, "options": {"pairs": "global"}}, "data": {"val_fraction": 0.0}}
    ddp = base_config(npz, tmp_path, name="ddp", **common)
    ddp["data"] = {**ddp["data"], "val_fraction": 0.0, "batch_size": 8}
    single = base_config(npz, tmp_path, name="single", **common)
    single["data"] = {**single["data"], "val_fraction": 0.0, "batch_size": 16}
    config_file = tmp_path / "ddp.yaml"
    config_file.write_text(yaml.safe_dump(ddp))
    torchrun(WORKER, str(config_file))
    train(config_from_dict(single), quiet=True)
    a = load_checkpoint(tmp_path / "ddp" / "checkpoints" / "last.pt")
    b = load_checkpoint(tmp_path / "single" / "checkpoints" / "last.pt")
    for key in b["model"]:
        torch.testing.assert_close(a["model"][key], b["model"][key], rtol=1e-4, atol=1e-5, msg=key)
    for key in b["method"]:
        torch.testing.assert_close(a["method"][key], b["method"][key], rtol=1e-4, atol=1e-5, msg=key)
    final_ddp = json.loads((tmp_path / "ddp" / "final.json").read_text())
    final_single = json.loads((tmp_path / "single" / "final.json").read_text())
    assert final_ddp["num_samples"] == final_single["num_samples"] == 59  # no padding counted
    assert final_ddp["confusion_matrix"] == final_single["confusion_matrix"]
