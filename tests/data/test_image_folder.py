"""ImageFolder trees of tiny PNG / JPEG files."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from mr2.config import DataSection
from mr2.data import DatasetError, build_datasets, errors
from mr2.data.image_folder import load_image_folder
from mr2.data.transforms import NORMALIZATION


def test_load_image_folder_targets_follow_sorted_class_dirs(
    tmp_path: Path, write_image_folder
) -> None:
    written = write_image_folder(tmp_path, classes=("zebra", "ant", "moth"), per_class=3)
    splits = load_image_folder(tmp_path)
    assert splits.class_names == ["ant", "moth", "zebra"]
    assert splits.train_targets.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert len(splits.test) == len(written["val"]) == 9
    assert splits.source == str(tmp_path)


def test_build_datasets_image_folder_decodes_pixels(tmp_path: Path, write_image_folder) -> None:
    written = write_image_folder(tmp_path, per_class=2)
    bundle = build_datasets(
        DataSection("image_folder", root=str(tmp_path), val_fraction=0.0, image_size=8)
    )
    assert bundle.class_names == ["cat", "dog", "emu"]
    assert bundle.input_shape == (3, 8, 8) and bundle.regime == "imagenet"
    assert bundle.train_class_counts.tolist() == [2, 2, 2] and len(bundle.val) == 0
    mean, std = (torch.tensor(v)[:, None, None] for v in NORMALIZATION["imagenet"])
    for i, (path, colour) in enumerate(written["val"]):
        image, target, index = bundle.test[i]
        assert (target, index) == (i // 2, i)
        assert image.shape == (3, 8, 8) and image.dtype == torch.float32
        pixels = image * std + mean
        expected = torch.tensor(colour, dtype=torch.float32)[:, None, None] / 255
        tolerance = 1e-5 if path.suffix == ".png" else 4 / 255  # JPEG is lossy
        assert torch.allclose(pixels, expected.expand_as(pixels), atol=tolerance), path
    image, _, _ = bundle.train[0]  # augmented: RandomResizedCrop(8) + flip
    assert image.shape == (3, 8, 8)


def test_test_dir_preferred_over_val(tmp_path: Path, write_image_folder) -> None:
    write_image_folder(tmp_path, splits=("train", "val"), per_class=1)
    write_image_folder(tmp_path, splits=("test",), per_class=4)
    splits = load_image_folder(tmp_path)
    assert len(splits.test) == 12


def test_missing_root(tmp_path: Path) -> None:
    with pytest.raises(DatasetError) as caught:
        load_image_folder(tmp_path / "absent")
    assert str(caught.value) == errors.IMAGE_FOLDER_MISSING.format(path=tmp_path / "absent")


def test_missing_eval_split(tmp_path: Path, write_image_folder) -> None:
    write_image_folder(tmp_path, splits=("train",))
    with pytest.raises(DatasetError) as caught:
        load_image_folder(tmp_path)
    assert str(caught.value) == errors.IMAGE_FOLDER_MISSING.format(path=tmp_path / "val")


def test_empty_class_dir(tmp_path: Path, write_image_folder) -> None:
    write_image_folder(tmp_path)
    (tmp_path / "train" / "bee").mkdir()
    (tmp_path / "val" / "bee").mkdir()
    (tmp_path / "train" / "bee" / "notes.txt").write_text("not an image")
    with pytest.raises(DatasetError) as caught:
        load_image_folder(tmp_path)
    assert str(caught.value) == errors.EMPTY_CLASSES.format(
        path=tmp_path / "train", classes="0 (bee)", num_classes=4
    )


def test_no_class_dirs(tmp_path: Path) -> None:
    (tmp_path / "train").mkdir()
    (tmp_path / "val").mkdir()
    with pytest.raises(DatasetError) as caught:
        load_image_folder(tmp_path)
    message = str(caught.value)
    assert message.startswith(f"{tmp_path / 'train'}: no image files found")
    assert "<class>/<image>.jpg" in message


def test_eval_classes_differ(tmp_path: Path, write_image_folder) -> None:
    write_image_folder(tmp_path, classes=("cat", "dog"), splits=("train",))
    write_image_folder(tmp_path, classes=("cat", "owl"), splits=("val",))
    with pytest.raises(DatasetError) as caught:
        load_image_folder(tmp_path)
    assert str(caught.value) == errors.CLASSES_DIFFER.format(
        path=tmp_path / "val", detail="only in train/: ['dog'], only in val/: ['owl']"
    )
