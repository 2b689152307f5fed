"""Bad model configs raise ModelConfigError / WeightsFileError with messages naming what is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from mr2.cli.errors import user_errors
from mr2.config import ModelSection
from mr2.models.registry import (
    LIBRARY_REFUSED_OPTION,
    MODEL_REFUSED,
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
    assert ModelConfigError in user_errors() and WeightsFileError in user_errors()
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
