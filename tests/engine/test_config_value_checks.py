"""Values a run configuration can hold but no run can use are one-line errors before anything is
written (issue 38): an unknown device string, select: best_val without a validation split, MLP widths
that are negative or would ask for gigabytes."""

from __future__ import annotations

import pytest

from mr2.cli.main import main
from mr2.config import ConfigError, config_from_dict
from mr2.config.schema import BAD_DEVICE, BEST_VAL_WITHOUT_VALIDATION
from mr2.models.mlp import MAX_WIDTH


@pytest.mark.parametrize("device", ["banana", "cuda:abc", "cuda:", "CPU", "cuda:0:1", "gpu"])
def test_a_device_no_run_can_use_is_refused(device):
    with pytest.raises(ConfigError) as caught:
        config_from_dict({"device": device})
    assert str(caught.value) == BAD_DEVICE.format(value=device)


@pytest.mark.parametrize("device", ["auto", "cpu", "cuda", "cuda:0", "cuda:12", "mps"])
def test_the_devices_runs_use_are_accepted(device):
    assert config_from_dict({"device": device}).device == device


def test_best_val_needs_a_validation_split():
    with pytest.raises(ConfigError) as caught:
        config_from_dict({"select": "best_val", "data": {"val_fraction": 0}})
    assert str(caught.value) == BEST_VAL_WITHOUT_VALIDATION
    assert config_from_dict({"select": "best_val", "data": {"val_fraction": 0.1}}).select == "best_val"


@pytest.mark.parametrize("widths", ["[-5]", "[0]", f"[{MAX_WIDTH + 1}]", "[100000000]", "[64, -1]"])
def test_mlp_widths_are_checked_before_any_allocation(tmp_path, capsys, widths):
    code = main(["train", "--set", "data.name=synthetic", "--set", "model.name=mlp", "--set",
                 f"model.options.hidden_dims={widths}", "--set", f"output_dir={tmp_path / 'runs'}",
                 "--set", "device=cpu"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert f"hidden_dims must be integers from 1 to {MAX_WIDTH}" in err
    assert not (tmp_path / "runs").exists()
