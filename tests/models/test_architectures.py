"""Every model returns (logits [B, K], features [B, d]) with d = feature_dim; freezing trains the head only."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from mr2.config import ModelSection
from mr2.models.classifier import BackboneClassifier
from mr2.models.registry import (
    BAD_INPUT_SHAPE,
    MODEL_REFUSED,
    NO_HUB_WEIGHTS,
    UNKNOWN_MODEL,
    WEIGHTS_AND_PRETRAINED,
    build_model,
    feature_dim_of,
)
from mr2.models.resnet_cifar import BAD_SHORTCUT, ResNetCifar
from mr2.models.torchvision_models import TORCHVISION_FAMILIES, UNSUPPORTED_TORCHVISION

pytest.importorskip("torchvision")
pytest.importorskip("timm")

# Parameter counts with K = 7: ResNet-32 0.46M (He et al. 2016), WRN-28-10 36.5M (Zagoruyko &
# Komodakis 2016; 36,479,194 with K = 10).
PAPER_SIZES = {"resnet32": 464_154 - 3 * 65, "wrn28_10": 36_479_194 - 3 * 641}

# (name, options, input_shape, expected feature_dim). The big networks get small inputs (they are
# size-agnostic: global pooling) to keep the file fast on a 2-core CPU.
CASES = [
    ("small_cnn", {}, (1, 28, 28), 256),
    ("small_cnn", {"hidden_dim": 128, "channels": (8, 16, 32)}, (3, 32, 32), 128),
    ("mlp", {}, (1, 28, 28), 256),
    ("mlp", {"hidden_dims": (64, 32)}, (20,), 32),
    ("resnet32", {}, (3, 32, 32), 64),
    ("resnet32", {"shortcut": "B"}, (3, 32, 32), 64),
    ("wrn28_10", {}, (3, 8, 8), 640),
    ("resnet50", {}, (3, 16, 16), 2048),
    ("vit_b_16", {}, (3, 16, 16), 768),
    ("torchvision:resnet18", {}, (3, 32, 32), 512),
    ("timm:test_vit", {"img_size": 32}, (3, 32, 32), 64),
    ("timm:test_resnet", {}, (1, 32, 32), 96),
    ("timm:test_convnext", {}, (3, 32, 32), 64),
    ("linear", {}, (640,), 640),
]


@pytest.mark.parametrize(
    ("name", "options", "input_shape", "feature_dim"),
    CASES,
    ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)],
)
def test_output_shapes_and_feature_dim(
    name: str, options: dict, input_shape: tuple[int, ...], feature_dim: int
) -> None:
    num_classes = 7
    model = build_model(ModelSection(name, options=options), num_classes, input_shape)
    model.eval()
    x = torch.randn(2, *input_shape)
    with torch.no_grad():
        logits, features = model(x)
        only_features = model.forward_features(x)
    assert isinstance(model, BackboneClassifier)
    assert logits.shape == (2, num_classes)
    assert features.shape == (2, feature_dim)
    assert model.feature_dim == feature_dim == feature_dim_of(model)
    assert model.num_classes == num_classes
    assert isinstance(model.classifier, nn.Linear)
    assert model.classifier.in_features == feature_dim
    assert model.classifier.out_features == num_classes
    torch.testing.assert_close(only_features, features)
    # The features are exactly the input of the final linear layer.
    torch.testing.assert_close(logits, model.classifier(features))
    if name in PAPER_SIZES and not options:
        assert sum(p.numel() for p in model.parameters()) == PAPER_SIZES[name]


def test_resnet32_layers() -> None:
    model = build_model(ModelSection("resnet32"), 10, (3, 32, 32))
    convs = [m for m in model.backbone.modules() if isinstance(m, nn.Conv2d)]
    assert len(convs) == 31  # 1 stem conv + 3 stages x 5 blocks x 2 convs; +1 fc = 32 layers
    option_b = build_model(ModelSection("resnet32", options={"shortcut": "B"}), 10, (3, 32, 32))
    assert sum(p.numel() for p in option_b.parameters()) > PAPER_SIZES["resnet32"]


def test_bad_resnet_options() -> None:
    with pytest.raises(ValueError) as error:
        ResNetCifar(10, shortcut="C")  # type: ignore[arg-type]
    assert str(error.value) == BAD_SHORTCUT.format(shortcut="C")
    with pytest.raises(ValueError, match="depth 6n\\+2"):
        ResNetCifar(10, depth=33)


def test_unknown_name_lists_valid_names() -> None:
    with pytest.raises(ValueError) as error:
        build_model(ModelSection("resnet9000"), 10, (3, 32, 32))
    assert str(error.value) == UNKNOWN_MODEL.format(
        name="resnet9000", names="small_cnn, mlp, resnet32, wrn28_10, resnet50, vit_b_16, linear"
    )
    with pytest.raises(ValueError, match="timm has no model named 'no_such_net'"):
        build_model(ModelSection("timm:no_such_net"), 10, (3, 32, 32))
    with pytest.raises(ValueError) as error:
        build_model(ModelSection("torchvision:alexnet"), 10, (3, 32, 32))
    families = ", ".join(f"{family}*" for family in TORCHVISION_FAMILIES)
    unsupported = UNSUPPORTED_TORCHVISION.format(name="alexnet", families=families)
    assert str(error.value) == MODEL_REFUSED.format(name="torchvision:alexnet", error=unsupported)
    assert "resnet*" in families and "vit_*" in families


def test_bad_input_shapes() -> None:
    with pytest.raises(ValueError) as error:
        build_model(ModelSection("linear"), 10, (3, 32, 32))
    assert str(error.value) == BAD_INPUT_SHAPE.format(name="linear", expected="(d,)", shape=(3, 32, 32))
    with pytest.raises(ValueError, match="expects input_shape \\(C, H, W\\)"):
        build_model(ModelSection("resnet32"), 10, (3072,))
    with pytest.raises(ValueError, match="takes 3-channel images"):
        build_model(ModelSection("resnet50"), 10, (1, 28, 28))


def test_pretrained_is_explicit_and_exclusive(tmp_path) -> None:
    with pytest.raises(ValueError) as error:
        build_model(ModelSection("small_cnn", pretrained=True), 10, (1, 28, 28))
    assert str(error.value) == NO_HUB_WEIGHTS.format(name="small_cnn")
    with pytest.raises(ValueError) as error:
        build_model(ModelSection("timm:test_vit", weights="w.pt", pretrained=True), 10, (3, 32, 32))
    assert str(error.value) == WEIGHTS_AND_PRETRAINED


def test_feature_dim_of_plain_modules() -> None:
    assert feature_dim_of(nn.Sequential(nn.Linear(8, 5), nn.ReLU(), nn.Linear(5, 3))) == 5
    with pytest.raises(ValueError, match="cannot tell the feature dimension of ReLU"):
        feature_dim_of(nn.ReLU())


@pytest.mark.parametrize("name", ["small_cnn", "timm:test_resnet"])
def test_frozen_backbone_trains_only_the_head(name: str) -> None:
    shape = (1, 28, 28) if name == "small_cnn" else (3, 32, 32)
    model = build_model(ModelSection(name, freeze_backbone=True), 5, shape)
    model.train()
    assert model.training and not model.backbone.training  # batch-norm statistics stay fixed
    running = {k: v.clone() for k, v in model.backbone.state_dict().items()}
    logits, features = model(torch.randn(4, *shape))
    logits.sum().backward()
    assert not features.requires_grad
    for parameter in model.backbone.parameters():
        assert not parameter.requires_grad and parameter.grad is None
    assert model.classifier.weight.grad is not None and model.classifier.bias.grad is not None
    for key, value in model.backbone.state_dict().items():
        assert torch.equal(value, running[key]), key

    model.freeze_backbone(False)
    model.train()
    assert model.backbone.training
    logits, _ = model(torch.randn(4, *shape))
    logits.sum().backward()
    assert all(p.grad is not None for p in model.backbone.parameters())
