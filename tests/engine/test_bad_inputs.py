"""Every bad data or model input is a one-line error of `mr2 train` (exit code 2), raised before the
run directory exists."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml

from helpers import base_config, write_spread_npz
from mr2.cli.main import main
from mr2.data import errors
from mr2.data.registry import DATASETS, valid_options
from mr2.models import registry, weights


class _Payload:
    """Not a tensor: a pickle holding it is refused by ``weights_only=True``."""


def _train(config: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """Run ``mr2 train`` on ``config``; check exit 2, one line on stderr and no run directory."""
    config_file = tmp_path / "run.yaml"
    config_file.write_text(yaml.safe_dump(config))
    assert main(["train", "--config", str(config_file), "--quiet"]) == 2
    captured = capsys.readouterr()
    assert not (tmp_path / "runs").exists()  # nothing written: not even the output directory
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("mr2 train: error: ")
    return lines[0].removeprefix("mr2 train: error: ")


def _npz(path: Path, **changes: Callable[[dict[str, np.ndarray]], None]) -> Path:
    """The engine's spread data set (4 classes, 12-d) with ``changes`` applied to its arrays."""
    write_spread_npz(path)
    with np.load(path) as archive:
        content = {key: archive[key] for key in archive.files}
    for change in changes.values():
        change(content)
    np.savez(path, **content)
    return path


def test_unknown_model_name(spread_npz, tmp_path, capsys) -> None:
    config = base_config(spread_npz, tmp_path / "runs", model={"name": "nosuchnet", "options": {}})
    assert _train(config, tmp_path, capsys) == registry.UNKNOWN_MODEL.format(
        name="nosuchnet", names=", ".join(registry.MODEL_NAMES)
    )


def test_unknown_option_of_an_own_model(spread_npz, tmp_path, capsys) -> None:
    config = base_config(spread_npz, tmp_path / "runs", model={"options": {"dropoutt": 0.3}})
    assert _train(config, tmp_path, capsys) == registry.UNKNOWN_OPTIONS.format(
        name="mlp", keys="'dropoutt'", valid="hidden_dims, dropout"
    )


def test_unknown_option_of_a_torchvision_model(tmp_path, capsys) -> None:
    def images(content: dict[str, np.ndarray]) -> None:
        for split in ("x_train", "x_test"):
            n = content[split].shape[0]
            content[split] = np.random.default_rng(0).normal(size=(n, 3, 16, 16)).astype(np.float32)

    npz = _npz(tmp_path / "images.npz", images=images)
    config = base_config(
        npz, tmp_path / "runs", model={"name": "torchvision:resnet18", "options": {"dropp": 0.1}}
    )
    message = _train(config, tmp_path, capsys)
    assert message.startswith(
        "model 'torchvision:resnet18' does not take the option 'dropp' (torchvision refused it: "
    )
    assert "fix or remove it in `model.options`" in message


def test_blocked_pickle_in_model_weights(spread_npz, tmp_path, capsys) -> None:
    path = tmp_path / "weights.pt"
    torch.save({"classifier.weight": torch.zeros(4, 16), "payload": _Payload()}, path)
    config = base_config(spread_npz, tmp_path / "runs", model={"weights": str(path)})
    assert _train(config, tmp_path, capsys) == weights.WEIGHTS_REFUSED.format(
        path=path, reason=f"{__name__}._Payload is not allowed"
    )


def test_missing_weights_file(spread_npz, tmp_path, capsys) -> None:
    path = tmp_path / "absent.pt"
    config = base_config(spread_npz, tmp_path / "runs", model={"weights": str(path)})
    assert _train(config, tmp_path, capsys) == weights.WEIGHTS_NOT_FOUND.format(path=path)


def test_truncated_weights_file(spread_npz, tmp_path, capsys) -> None:
    path = tmp_path / "weights.pt"
    torch.save({"classifier.weight": torch.zeros(4, 16)}, path)
    path.write_bytes(path.read_bytes()[:40])
    config = base_config(spread_npz, tmp_path / "runs", model={"weights": str(path)})
    message = _train(config, tmp_path, capsys)
    assert message.startswith(f"{path}: cannot read the weights file (RuntimeError: ")
    assert message.endswith("re-download or re-export it")


def test_data_option_typo(tmp_path, capsys) -> None:
    config = base_config(
        tmp_path / "unused.npz",
        tmp_path / "runs",
        data={"name": "synthetic", "root": None, "options": {"num_classes": 3, "dimm": 4}},
    )
    assert _train(config, tmp_path, capsys) == errors.UNKNOWN_DATA_OPTIONS.format(
        name="synthetic", keys="'dimm'", valid=", ".join(sorted(valid_options(DATASETS["synthetic"])))
    )


def test_label_past_k_given_by_class_names(tmp_path, capsys) -> None:
    def names(content: dict[str, np.ndarray]) -> None:
        content["class_names"] = np.array(["a", "b", "c", "d"])
        content["y_train"][[5, 9]] = 4

    npz = _npz(tmp_path / "labels.npz", names=names)
    config = base_config(npz, tmp_path / "runs")
    assert _train(config, tmp_path, capsys) == errors.ARRAY_LABEL_PAST_K.format(
        path=npz, key="y_train", split="training", label=4, index=5, count=2, last=3, num_classes=4
    )


def test_stray_label_without_class_names(tmp_path, capsys) -> None:
    def stray(content: dict[str, np.ndarray]) -> None:
        content["y_test"][3] = 9

    npz = _npz(tmp_path / "labels.npz", stray=stray)
    config = base_config(npz, tmp_path / "runs")
    assert _train(config, tmp_path, capsys) == errors.ARRAY_LABEL_PAST_OTHERS.format(
        path=npz, key="y_test", split="test", label=9, index=3, count=1, top=3, num_classes=10,
        empty="4, 5, 6, 7, 8, 9",
    )


def test_float64_inputs_beyond_float32(tmp_path, capsys) -> None:
    def huge(content: dict[str, np.ndarray]) -> None:
        x = content["x_test"].astype(np.float64)
        x[2, 1], x[7, 0] = 1e300, -1e200
        content["x_test"] = x

    npz = _npz(tmp_path / "huge.npz", huge=huge)
    config = base_config(npz, tmp_path / "runs")
    assert _train(config, tmp_path, capsys) == errors.ARRAY_FLOAT32_OVERFLOW.format(
        path=npz, key="x_test", split="test", count=2, largest=1e300
    )
