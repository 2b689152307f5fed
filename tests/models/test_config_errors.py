"""Bad model configs raise ModelConfigError / WeightsFileError with messages naming what is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from helpers import base_config, write_spread_npz
from mr2.cli.errors import user_errors
from mr2.cli.main import main
from mr2.config import ModelSection
from mr2.models.registry import (
    LIBRARY_REFUSED_OPTION,
    MODEL_REFUSED,
    OPTION_WRONG_TYPE,
    UNKNOWN_OPTIONS,
    ModelConfigError,
    build_model,
    model_options,
)
from mr2.models.resnet_cifar import BAD_SHORTCUT
from mr2.models.weights import (
    WEIGHTS_NOT_FOUND,
    WeightsFileError,
    WeightsFileNotFoundError,
    load_state_dict_file,
)

pytest.importorskip("torchvision")
pytest.importorskip("timm")

#: Written out by hand from the constructors, minus what the registry fills in itself.
OWN_OPTIONS = {
    "small_cnn": ("channels", "hidden_dim", "dropout"),
    "mlp": ("hidden_dims", "dropout"),
    "resnet32": ("shortcut", "base_width"),
    "wrn28_10": ("dropout",),
    "linear": (),
}
_SHAPES = {"small_cnn": (1, 28, 28), "mlp": (6,), "resnet32": (3, 32, 32), "wrn28_10": (3, 32, 32),
           "linear": (6,)}


def test_model_config_errors_are_user_errors() -> None:
    assert issubclass(ModelConfigError, user_errors()) and issubclass(WeightsFileError, user_errors())
    assert issubclass(ModelConfigError, ValueError)
    assert issubclass(WeightsFileNotFoundError, FileNotFoundError)
    assert issubclass(WeightsFileNotFoundError, WeightsFileError)


def test_own_models_list_their_options() -> None:
    for name, options in OWN_OPTIONS.items():
        assert model_options(name) == options, name


@pytest.mark.parametrize("name", sorted(OWN_OPTIONS))
def test_a_typo_names_the_key_and_the_valid_ones(name: str) -> None:
    with pytest.raises(ModelConfigError) as caught:
        build_model(ModelSection(name, options={"dropoutt": 0.3, "num_classes": 4}), 3, _SHAPES[name])
    assert str(caught.value) == UNKNOWN_OPTIONS.format(
        name=name, keys="'dropoutt', 'num_classes'", valid=", ".join(OWN_OPTIONS[name]) or "none"
    )


def test_every_listed_option_is_taken() -> None:
    # wrn28_10 is left out: 36.5M parameters, and its one option is used by the CIFAR-100 preset.
    values = {"channels": [4, 8], "hidden_dim": 16, "dropout": 0.1, "hidden_dims": [8, 4],
              "shortcut": "B", "base_width": 8}
    for name in ("small_cnn", "mlp", "resnet32", "linear"):
        options = {key: values[key] for key in OWN_OPTIONS[name]}
        model = build_model(ModelSection(name, options=options), 3, _SHAPES[name])
        logits, _ = model.eval()(torch.zeros(2, *_SHAPES[name]))
        assert logits.shape == (2, 3), name


def test_a_refused_value_is_a_model_config_error() -> None:
    with pytest.raises(ModelConfigError) as caught:
        build_model(ModelSection("resnet32", options={"shortcut": "C"}), 3, (3, 32, 32))
    assert str(caught.value) == MODEL_REFUSED.format(
        name="resnet32", error=BAD_SHORTCUT.format(shortcut="C")
    )
    with pytest.raises(ModelConfigError, match="'torchvision:alexnet' cannot be built"):
        build_model(ModelSection("torchvision:alexnet"), 3, (3, 32, 32))


@pytest.mark.parametrize(
    ("name", "library", "shape"),
    [("timm:test_vit", "timm", (3, 32, 32)), ("torchvision:resnet18", "torchvision", (3, 32, 32))],
)
def test_library_models_name_the_refused_option(name: str, library: str, shape: tuple[int, ...]) -> None:
    options = {"img_size": 32} if library == "timm" else {}
    with pytest.raises(ModelConfigError) as caught:
        build_model(ModelSection(name, options={**options, "drop_ratee": 0.1}), 3, shape)
    error = caught.value.__cause__
    assert isinstance(error, TypeError)
    assert str(caught.value) == LIBRARY_REFUSED_OPTION.format(
        name=name, key="drop_ratee", library=library, error=error
    )


def test_unreadable_weights_files(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as missing:
        build_model(ModelSection("mlp", weights=str(tmp_path / "absent.pt")), 3, (6,))
    assert isinstance(missing.value, WeightsFileError)
    assert str(missing.value) == WEIGHTS_NOT_FOUND.format(path=tmp_path / "absent.pt")
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a checkpoint " * 8)
    corrupt = tmp_path / "corrupt.safetensors"
    corrupt.write_bytes(b"\x00" * 64)
    for path in (garbage, corrupt):
        with pytest.raises(WeightsFileError) as caught:
            load_state_dict_file(path)
        message = str(caught.value)
        assert message.startswith(f"{path}: cannot read the weights file (") and "\n" not in message


#: (model, option, a value of the wrong type, the expected type as the message says it). Each of these
#: used to be a raw TypeError from the constructor or torch (or, for a bool, a model silently built
#: with dropout=True).
WRONG_TYPES = [
    ("mlp", "dropout", "0.3", "a number"),
    ("mlp", "dropout", True, "a number"),
    ("mlp", "hidden_dims", 64, "a list of integers"),
    ("mlp", "hidden_dims", [64.5], "a list of integers"),
    ("mlp", "hidden_dims", ["a"], "a list of integers"),
    ("mlp", "hidden_dims", "64", "a list of integers"),
    ("small_cnn", "channels", 8, "a list of integers"),
    ("small_cnn", "hidden_dim", 2.5, "an integer"),
    ("small_cnn", "hidden_dim", None, "an integer"),
    ("resnet32", "base_width", "16", "an integer"),
    ("resnet32", "shortcut", 1, "one of 'A', 'B'"),
    ("wrn28_10", "dropout", "x", "a number"),
]


@pytest.mark.parametrize(("name", "key", "value", "expected"), WRONG_TYPES)
def test_a_wrong_option_type_names_the_key_and_the_type(name: str, key: str, value: object, expected: str) -> None:
    with pytest.raises(ModelConfigError) as caught:
        build_model(ModelSection(name, options={key: value}), 3, _SHAPES[name])
    assert str(caught.value) == OPTION_WRONG_TYPE.format(
        name=name, key=key, expected=expected, value=repr(value), type=type(value).__name__
    )
    assert "\n" not in str(caught.value)


def test_right_types_in_yaml_spellings_are_taken() -> None:
    # YAML gives lists for sequences and ints where a float is meant; both are fine.
    model = build_model(ModelSection("mlp", options={"hidden_dims": (8, 4), "dropout": 0}), 3, (6,))
    assert [m.out_features for m in model.modules() if isinstance(m, torch.nn.Linear)] == [8, 4, 3]
    build_model(ModelSection("small_cnn", options={"channels": [4], "hidden_dim": 8}), 3, (1, 28, 28))


def test_mr2_train_refuses_a_wrong_option_type_before_writing(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    npz = write_spread_npz(tmp_path / "spread.npz")
    config = base_config(npz, tmp_path / "runs", model={"options": {"hidden_dims": [32, 16], "dropout": "0.3"}})
    config_file = tmp_path / "run.yaml"
    config_file.write_text(yaml.safe_dump(config))
    assert main(["train", "--config", str(config_file), "--quiet"]) == 2
    captured = capsys.readouterr()
    assert not (tmp_path / "runs").exists()
    assert captured.err == "mr2 train: error: " + OPTION_WRONG_TYPE.format(
        name="mlp", key="dropout", expected="a number", value="'0.3'", type="str"
    ) + "\n"
