"""Fine-grained sets through torchvision's classes: tiny copies in the exact layouts, and errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from mr2.config import DataSection
from mr2.data import DatasetError, build_datasets, errors
from mr2.data.fine_grained import FINE_GRAINED, load_fine_grained


def _jpeg(path: Path, colour: tuple[int, int, int] = (120, 30, 200)) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (10, 8), colour).save(path)


@pytest.mark.parametrize("name", sorted(FINE_GRAINED))
def test_missing_root_lists_expected_files(tmp_path: Path, name: str) -> None:
    spec = FINE_GRAINED[name]
    with pytest.raises(DatasetError) as caught:
        load_fine_grained(name, tmp_path / "absent")
    assert str(caught.value) == errors.FINE_GRAINED_MISSING.format(
        name=spec.title,
        path=tmp_path / "absent",
        reason="the directory does not exist",
        layout=spec.layout,
        how_to_get=spec.how_to_get,
    )


@pytest.mark.parametrize("name", sorted(FINE_GRAINED))
def test_empty_root_wraps_torchvision_error(tmp_path: Path, name: str) -> None:
    spec = FINE_GRAINED[name]
    with pytest.raises(DatasetError) as caught:
        load_fine_grained(name, tmp_path)
    message = str(caught.value)
    assert message.startswith(f"{spec.title}: could not read the data set under ")
    assert str(tmp_path / spec.folder) in message
    assert spec.layout in message
    assert caught.value.__cause__ is not None  # torchvision's own error is kept as the cause


def test_flowers102_checksum_failure_is_explained(tmp_path: Path) -> None:
    folder = tmp_path / "flowers-102"
    _jpeg(folder / "jpg" / "image_00001.jpg")
    (folder / "imagelabels.mat").write_bytes(b"not the real file")
    (folder / "setid.mat").write_bytes(b"not the real file")
    with pytest.raises(DatasetError, match="md5-checked"):
        load_fine_grained("flowers102", tmp_path)


def _write_food101(root: Path) -> None:
    folder = root / "food-101"
    train = {"pizza": ["pizza/11", "pizza/12"], "apple_pie": ["apple_pie/1", "apple_pie/2"]}
    test = {"apple_pie": ["apple_pie/3"], "pizza": ["pizza/13"]}
    for split, content in (("train", train), ("test", test)):
        (folder / "meta").mkdir(parents=True, exist_ok=True)
        (folder / "meta" / f"{split}.json").write_text(json.dumps(content))
        for items in content.values():
            for item in items:
                _jpeg(folder / "images" / f"{item}.jpg")


def test_food101_from_tiny_files(tmp_path: Path) -> None:
    _write_food101(tmp_path)
    splits = load_fine_grained("food101", tmp_path)
    assert splits.class_names == ["apple_pie", "pizza"]
    assert sorted(splits.train_targets.tolist()) == [0, 0, 1, 1]
    assert sorted(splits.test_targets.tolist()) == [0, 1]
    image, target = splits.train[0]
    assert image.size == (10, 8) and target == int(splits.train_targets[0])

    # The data set's own folder is accepted as root too, and the engine sees 3-tuples.
    bundle = build_datasets(
        DataSection("food101", root=str(tmp_path / "food-101"), val_fraction=0.0, image_size=16)
    )
    inputs, target, index = bundle.test[1]
    assert inputs.shape == (3, 16, 16) and index == 1
    assert target == int(bundle.test.targets[1])
    assert bundle.input_shape == (3, 16, 16)


def test_food101_test_classes_must_match(tmp_path: Path) -> None:
    _write_food101(tmp_path)
    (tmp_path / "food-101" / "meta" / "test.json").write_text(json.dumps({"pizza": ["pizza/13"]}))
    with pytest.raises(DatasetError) as caught:
        load_fine_grained("food101", tmp_path)
    assert str(caught.value) == errors.CLASSES_DIFFER.format(
        path=tmp_path / "food-101",
        detail="only in the training split: ['apple_pie'], only in the test split: []",
    )


def test_oxford_pets_from_tiny_files(tmp_path: Path) -> None:
    folder = tmp_path / "oxford-iiit-pet"
    rows = {
        "trainval": ["Abyssinian_1 1 1 1", "Abyssinian_2 1 1 1", "basset_hound_1 2 2 1"],
        "test": ["Abyssinian_3 1 1 1", "basset_hound_2 2 2 1"],
    }
    (folder / "annotations").mkdir(parents=True)
    for split, lines in rows.items():
        (folder / "annotations" / f"{split}.txt").write_text("\n".join(lines) + "\n")
        for line in lines:
            _jpeg(folder / "images" / f"{line.split()[0]}.jpg")
    splits = load_fine_grained("oxford_pets", tmp_path)
    assert splits.class_names == ["Abyssinian", "Basset Hound"]
    assert splits.train_targets.tolist() == [0, 0, 1]
    assert splits.test_targets.tolist() == [0, 1]
    assert splits.test[1][1] == 1


def test_fgvc_aircraft_from_tiny_files(tmp_path: Path) -> None:
    data = tmp_path / "fgvc-aircraft-2013b" / "data"
    data.mkdir(parents=True)
    (data / "variants.txt").write_text("707-320\nA300B4\nDC-10\n")
    rows = {
        "trainval": ["1000001 707-320", "1000002 DC-10", "1000003 A300B4", "1000004 DC-10"],
        "test": ["1000005 A300B4", "1000006 707-320", "1000007 DC-10"],
    }
    for split, lines in rows.items():
        (data / f"images_variant_{split}.txt").write_text("\n".join(lines) + "\n")
        for line in lines:
            _jpeg(data / "images" / f"{line.split()[0]}.jpg")
    splits = load_fine_grained("fgvc_aircraft", tmp_path)
    assert splits.class_names == ["707-320", "A300B4", "DC-10"]
    assert splits.train_targets.tolist() == [0, 2, 1, 2]
    assert splits.test_targets.tolist() == [1, 0, 2]


def test_fgvc_aircraft_unknown_class_is_explained(tmp_path: Path) -> None:
    data = tmp_path / "fgvc-aircraft-2013b" / "data"
    data.mkdir(parents=True)
    (data / "variants.txt").write_text("707-320\n")
    (data / "images_variant_trainval.txt").write_text("1000001 Concorde\n")
    with pytest.raises(DatasetError, match="KeyError: 'Concorde'"):
        load_fine_grained("fgvc_aircraft", tmp_path)


def test_flowers102_train_is_train_plus_val() -> None:
    assert FINE_GRAINED["flowers102"].train_splits == ("train", "val")


def test_stanford_cars_from_tiny_files(tmp_path: Path) -> None:
    scipy_io = pytest.importorskip("scipy.io", reason="reading Stanford Cars needs scipy")
    folder = tmp_path / "stanford_cars"
    (folder / "devkit").mkdir(parents=True)

    def annotations(rows: list[tuple[str, int]]) -> np.ndarray:
        records = np.zeros(len(rows), dtype=[("fname", object), ("class", object)])
        for i, (fname, label) in enumerate(rows):
            records[i] = (fname, np.uint8(label))
        return records

    train_rows = [("00001.jpg", 1), ("00002.jpg", 2), ("00003.jpg", 2)]
    test_rows = [("00001.jpg", 2), ("00002.jpg", 1)]
    scipy_io.savemat(folder / "devkit" / "cars_train_annos.mat", {"annotations": annotations(train_rows)})
    scipy_io.savemat(folder / "cars_test_annos_withlabels.mat", {"annotations": annotations(test_rows)})
    names = np.array(["AM General Hummer SUV 2000", "Acura RL Sedan 2012"], dtype=object)
    scipy_io.savemat(folder / "devkit" / "cars_meta.mat", {"class_names": names})
    for directory, rows in (("cars_train", train_rows), ("cars_test", test_rows)):
        for fname, _ in rows:
            _jpeg(folder / directory / fname)
    splits = load_fine_grained("stanford_cars", tmp_path)
    assert splits.class_names == ["AM General Hummer SUV 2000", "Acura RL Sedan 2012"]
    assert splits.train_targets.tolist() == [0, 1, 1]
    assert splits.test_targets.tolist() == [1, 0]
    assert splits.train_targets.dtype == torch.int64
