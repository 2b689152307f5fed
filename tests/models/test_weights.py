"""Loading weights from a local file: round trips give identical outputs; mismatches name the keys."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch
from torch import nn

from mr2.config import ModelSection
from mr2.models.registry import build_model
from mr2.models.torchvision_models import TorchvisionClassifier
from mr2.models.weights import (
    NO_STATE_DICT,
    WEIGHTS_NOT_FOUND,
    WEIGHTS_REFUSED,
    WeightsFileError,
    WeightsMismatchError,
    load_state_dict_file,
)

torchvision = pytest.importorskip("torchvision")
timm = pytest.importorskip("timm")


def _settle_batch_norm(model: nn.Module, shape: tuple[int, ...]) -> None:
    """One training-mode forward so running statistics differ from their initial values."""
    model.train()
    with torch.no_grad():
        model(torch.randn(8, *shape))
    model.eval()


def _outputs(model: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    model.eval()
    with torch.no_grad():
        return model(x)


@pytest.mark.parametrize(
    ("name", "shape"),
    [("small_cnn", (1, 28, 28)), ("mlp", (1, 28, 28)), ("resnet32", (3, 32, 32))],
)
def test_round_trip_own_models(tmp_path: Path, name: str, shape: tuple[int, ...]) -> None:
    source = build_model(ModelSection(name), 6, shape)
    _settle_batch_norm(source, shape)
    path = tmp_path / "weights.pt"
    torch.save(source.state_dict(), path)

    loaded = build_model(ModelSection(name, weights=str(path), load_head=True), 6, shape)
    x = torch.randn(3, *shape)
    for got, want in zip(_outputs(loaded, x), _outputs(source, x)):
        assert torch.equal(got, want)

    # Without load_head the backbone is loaded and the head is a fresh one (any class count).
    torch.manual_seed(123)
    fresh_head = build_model(ModelSection(name, weights=str(path)), 4, shape)
    logits, features = _outputs(fresh_head, x)
    assert torch.equal(features, _outputs(source, x)[1])
    assert logits.shape == (3, 4)


def test_checkpoint_layouts_are_unwrapped(tmp_path: Path) -> None:
    source = build_model(ModelSection("small_cnn"), 10, (1, 28, 28))
    state = source.state_dict()
    layouts = {
        "model.pt": {"model": state, "epoch": 3, "optimizer": {"lr": 0.1}},
        "state_dict.pt": {"state_dict": {f"module.{k}": v for k, v in state.items()}},
        "compiled.pt": {f"_orig_mod.{k}": v for k, v in state.items()},
    }
    x = torch.randn(2, 1, 28, 28)
    want = _outputs(source, x)
    for file_name, content in layouts.items():
        torch.save(content, tmp_path / file_name)
        config = ModelSection("small_cnn", weights=str(tmp_path / file_name), load_head=True)
        got = _outputs(build_model(config, 10, (1, 28, 28)), x)
        assert all(torch.equal(a, b) for a, b in zip(got, want)), file_name


def test_safetensors_file(tmp_path: Path) -> None:
    safetensors_torch = pytest.importorskip("safetensors.torch")
    source = build_model(ModelSection("mlp"), 3, (12,))
    path = tmp_path / "weights.safetensors"
    safetensors_torch.save_file(source.state_dict(), str(path))
    loaded = build_model(ModelSection("mlp", weights=str(path), load_head=True), 3, (12,))
    x = torch.randn(2, 12)
    assert torch.equal(_outputs(loaded, x)[0], _outputs(source, x)[0])


def test_torchvision_native_state_dict_round_trip(tmp_path: Path) -> None:
    library_model = torchvision.models.resnet18(num_classes=7)
    _settle_batch_norm(library_model, (3, 32, 32))
    path = tmp_path / "resnet18.pt"
    torch.save(library_model.state_dict(), path)

    model = build_model(
        ModelSection("torchvision:resnet18", weights=str(path), load_head=True), 7, (3, 32, 32)
    )
    x = torch.randn(2, 3, 32, 32)
    logits, _ = _outputs(model, x)
    with torch.no_grad():
        assert torch.equal(logits, library_model(x))

    # A head for another task: the file's fc (7 classes) is ignored, not an error...
    model = build_model(ModelSection("torchvision:resnet18", weights=str(path)), 3, (3, 32, 32))
    assert _outputs(model, x)[0].shape == (2, 3)
    # ... unless it is asked for.
    with pytest.raises(WeightsMismatchError, match=r"\(2\): weight: \(7, 512\) vs \(3, 512\)"):
        model.load_weights(library_model.state_dict(), load_head=True)


def test_torchvision_vit_head_is_split_from_heads_head() -> None:
    def tiny_vit() -> nn.Module:
        return torchvision.models.VisionTransformer(
            image_size=32,
            patch_size=16,
            num_layers=1,
            num_heads=2,
            hidden_dim=8,
            mlp_dim=16,
            num_classes=5,
        )

    library_model = tiny_vit().eval()
    model = TorchvisionClassifier("vit_tiny", tiny_vit(), 5)
    assert model.feature_dim == 8
    model.load_weights(library_model.state_dict(), load_head=True)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(_outputs(model, x)[0], library_model(x))


@pytest.mark.parametrize("layout", ["timm", "ours"])
def test_timm_round_trip(tmp_path: Path, layout: str) -> None:
    library_model = timm.create_model("test_resnet", num_classes=5)
    _settle_batch_norm(library_model, (3, 32, 32))
    if layout == "timm":
        state = library_model.state_dict()
    else:
        wrapped = build_model(ModelSection("timm:test_resnet"), 5, (3, 32, 32))
        wrapped.backbone.load_state_dict(library_model.state_dict(), strict=False)
        wrapped.classifier.load_state_dict(library_model.get_classifier().state_dict())
        state = wrapped.state_dict()
    path = tmp_path / "test_resnet.pt"
    torch.save(state, path)

    model = build_model(ModelSection("timm:test_resnet", weights=str(path), load_head=True), 5, (3, 32, 32))
    x = torch.randn(2, 3, 32, 32)
    logits, _ = _outputs(model, x)
    with torch.no_grad():
        assert torch.equal(logits, library_model(x))


def test_timm_vit_position_embedding_is_resized_by_timm(tmp_path: Path) -> None:
    library_model = timm.create_model("test_vit", num_classes=0, img_size=32)
    path = tmp_path / "vit.pt"
    torch.save(library_model.state_dict(), path)
    config = ModelSection("timm:test_vit", weights=str(path), options={"img_size": 48})
    model = build_model(config, 4, (3, 48, 48))
    assert _outputs(model, torch.randn(1, 3, 48, 48))[1].shape == (1, 64)


def test_mismatch_names_the_keys_and_changes_nothing(tmp_path: Path) -> None:
    source = build_model(ModelSection("small_cnn"), 10, (1, 28, 28))
    state = source.state_dict()
    del state["backbone.1.weight"]
    state["backbone.99.weight"] = torch.zeros(1)
    state["backbone.14.weight"] = torch.zeros(3, 3)  # the hidden Linear
    path = tmp_path / "broken.pt"
    torch.save(state, path)

    target = build_model(ModelSection("small_cnn"), 10, (1, 28, 28))
    before = {k: v.clone() for k, v in target.state_dict().items()}
    with pytest.raises(WeightsMismatchError) as error:
        target.load_weights(load_state_dict_file(path), load_head=True, source=str(path))
    message = str(error.value)
    assert message.startswith(f"the weights in {path} do not fit SmallCNN.backbone:")
    assert "missing keys (1): 1.weight" in message
    assert "unexpected keys (1): 99.weight" in message
    assert "shape mismatches (1): 14.weight: (3, 3) vs (256, 1152)" in message
    assert all(torch.equal(v, before[k]) for k, v in target.state_dict().items())


def test_foreign_layout_is_reported_key_by_key(tmp_path: Path) -> None:
    path = tmp_path / "other.pt"
    torch.save(nn.Linear(3, 2).state_dict(), path)
    with pytest.raises(WeightsMismatchError, match=r"unexpected keys \(2\): weight, bias"):
        build_model(ModelSection("mlp", weights=str(path)), 2, (3,))


def test_timm_mismatch_names_the_keys(tmp_path: Path) -> None:
    state = timm.create_model("test_vit", num_classes=0, img_size=32).state_dict()
    del state["cls_token"]
    state["extra.weight"] = torch.zeros(1)
    path = tmp_path / "vit.pt"
    torch.save(state, path)
    config = ModelSection("timm:test_vit", weights=str(path), options={"img_size": 32})
    with pytest.raises(WeightsMismatchError) as error:
        build_model(config, 4, (3, 32, 32))
    assert '"cls_token"' in str(error.value) and '"extra.weight"' in str(error.value)


def test_key_prefix_selects_a_moco_encoder(tmp_path: Path) -> None:
    encoder = torchvision.models.resnet18()
    encoder.fc = nn.Sequential(nn.Linear(512, 64), nn.ReLU(), nn.Linear(64, 16))  # MoCo v2 MLP head
    encoder.eval()
    trunk = {f"module.encoder_q.{k}": v for k, v in encoder.state_dict().items()}
    checkpoint = {"state_dict": trunk | {"module.queue": torch.zeros(16, 8)}, "epoch": 200}
    path = tmp_path / "moco.pth.tar"
    torch.save(checkpoint, path)

    config = ModelSection("torchvision:resnet18", weights=str(path), weights_key_prefix="encoder_q.")
    model = build_model(config, 10, (3, 32, 32))
    x = torch.randn(2, 3, 32, 32)
    encoder.fc = nn.Identity()
    with torch.no_grad():
        assert torch.equal(_outputs(model, x)[1], encoder(x))

    config.load_head = True  # the MLP head does not fit a linear classifier
    with pytest.raises(WeightsMismatchError, match=r"unexpected keys \(4\): fc.0.weight, fc.0.bias"):
        build_model(config, 10, (3, 32, 32))
    config.weights_key_prefix = "encoder_x."
    with pytest.raises(WeightsMismatchError, match=r"no key of .* starts with 'encoder_x\.'"):
        build_model(config, 10, (3, 32, 32))


class _NotATensor:
    pass


def test_files_without_weights(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as missing:
        load_state_dict_file(tmp_path / "absent.pt")
    assert str(missing.value) == WEIGHTS_NOT_FOUND.format(path=tmp_path / "absent.pt")

    path = tmp_path / "no_weights.pt"
    torch.save({"epoch": 1, "config": {"lr": 0.1}}, path)
    with pytest.raises(WeightsMismatchError) as error:
        load_state_dict_file(path)
    assert str(error.value) == NO_STATE_DICT.format(path=path, keys="config, epoch")

    # weights_only=True: a pickle that would run code (any non-allowlisted class) is refused.
    path = tmp_path / "code.pt"
    torch.save({"weight": torch.zeros(1), "payload": _NotATensor()}, path)
    with pytest.raises(WeightsFileError) as refused:
        load_state_dict_file(path)
    assert str(refused.value) == WEIGHTS_REFUSED.format(
        path=path, reason=f"{__name__}._NotATensor is not allowed"
    )
    assert isinstance(refused.value.__cause__, pickle.UnpicklingError)
