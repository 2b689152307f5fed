"""Per-regime transform presets."""

from __future__ import annotations

import pytest
import torch
from PIL import Image

from mr2.data.transforms import NORMALIZATION, build_transform


def _image(channels: int, size: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (channels, size, size), generator=generator, dtype=torch.uint8)


@pytest.mark.parametrize("regime,channels,size", [("mnist", 1, 28), ("cifar", 3, 32)])
def test_eval_transform_is_exact_normalisation(regime: str, channels: int, size: int) -> None:
    transform = build_transform(regime, train=False)
    assert transform is not None
    image = _image(channels, size)
    out = transform(image)
    key = "fashion_mnist" if regime == "mnist" else "cifar10"
    mean, std = (torch.tensor(v)[:, None, None] for v in NORMALIZATION[key])
    assert out.dtype == torch.float32 and type(out) is torch.Tensor
    assert torch.allclose(out, (image.float() / 255 - mean) / std, atol=1e-6)


def test_cifar_training_augmentation_crops_and_flips() -> None:
    transform = build_transform("cifar", train=True)
    evaluate = build_transform("cifar", train=False)
    assert transform is not None and evaluate is not None
    image = _image(3, 32)
    padded = torch.nn.functional.pad(image, (4, 4, 4, 4))  # zero padding, as RandomCrop's
    candidates = []
    for top in range(9):
        for left in range(9):
            crop = padded[:, top : top + 32, left : left + 32]
            candidates += [evaluate(crop), evaluate(crop.flip(-1))]
    torch.manual_seed(0)
    outputs = [transform(image) for _ in range(20)]
    matches = [
        next(i for i, candidate in enumerate(candidates) if torch.equal(out, candidate))
        for out in outputs
    ]  # StopIteration (a failure) if an output is no shifted / mirrored crop
    assert len(set(matches)) > 5
    assert any(i % 2 == 1 for i in matches) and any(i % 2 == 0 for i in matches)


def test_no_augmentation_when_disabled() -> None:
    transform = build_transform("cifar", train=True, augment=False)
    evaluate = build_transform("cifar", train=False)
    assert transform is not None and evaluate is not None
    image = _image(3, 32)
    assert torch.equal(transform(image), evaluate(image))


def test_mnist_crop_is_optional() -> None:
    image = _image(1, 28)
    plain = build_transform("mnist", train=True)
    cropped = build_transform("mnist", train=True, mnist_crop=True)
    assert plain is not None and cropped is not None
    assert torch.equal(plain(image), plain(image))
    torch.manual_seed(0)
    assert any(not torch.equal(cropped(image), plain(image)) for _ in range(10))


def test_cifar_resized_for_a_larger_model() -> None:
    transform = build_transform("cifar", train=True, image_size=64)
    assert transform is not None
    assert transform(_image(3, 32)).shape == (3, 64, 64)


@pytest.mark.parametrize("train", [True, False])
def test_imagenet_accepts_pil_and_tensors(train: bool) -> None:
    transform = build_transform("imagenet", train=train, image_size=48)
    assert transform is not None
    pil = Image.new("RGB", (80, 60), (10, 20, 30))
    for image in (pil, _image(3, 70)):
        out = transform(image)
        assert out.shape == (3, 48, 48) and out.dtype == torch.float32
        assert type(out) is torch.Tensor


def test_custom_normalisation_and_none() -> None:
    transform = build_transform("mnist", train=False, mean=[0.5], std=[0.5])
    assert transform is not None
    out = transform(torch.full((1, 28, 28), 255, dtype=torch.uint8))
    assert torch.allclose(out, torch.ones(1, 28, 28))
    assert build_transform("none", train=True) is None
    with pytest.raises(ValueError, match="unknown transform regime"):
        build_transform("autoaugment", train=True)
