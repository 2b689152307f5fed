"""Array / feature files (.npz, .pt): round trips and every validation error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from mr2.config import DataSection
from mr2.data import DatasetError, build_datasets, errors
from mr2.data.arrays import load_arrays


def _arrays(n_train: int = 12, n_test: int = 6, dim: int = 5, k: int = 3) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    return {
        "x_train": rng.normal(size=(n_train, dim)),
        "y_train": np.arange(n_train) % k,
        "x_test": rng.normal(size=(n_test, dim)).astype(np.float32),
        "y_test": (np.arange(n_test) + 1) % k,
    }


def _save(path: Path, content: dict[str, Any]) -> Path:
    if path.suffix == ".npz":
        np.savez(path, **content)
    else:
        torch.save(
            {k: torch.as_tensor(v) if isinstance(v, np.ndarray) else v for k, v in content.items()},
            path,
        )
    return path


@pytest.mark.parametrize("suffix", [".npz", ".pt"])
def test_round_trip(tmp_path: Path, suffix: str) -> None:
    content = _arrays()
    names = ["ant", "bee", "cow"]
    content["class_names"] = np.array(names) if suffix == ".npz" else names
    data = load_arrays(_save(tmp_path / f"features{suffix}", content))
    assert data.x_train.dtype == torch.float32 and data.y_train.dtype == torch.int64
    assert np.allclose(data.x_train.numpy(), content["x_train"].astype(np.float32))
    assert np.array_equal(data.x_test.numpy(), content["x_test"])
    assert data.y_train.tolist() == content["y_train"].tolist()
    assert data.y_test.tolist() == content["y_test"].tolist()
    assert data.class_names == names and data.num_classes == 3


def test_integer_images_are_kept(tmp_path: Path) -> None:
    content = _arrays()
    content["x_train"] = np.arange(12 * 3 * 4 * 4, dtype=np.uint8).reshape(12, 3, 4, 4)
    content["x_test"] = np.zeros((6, 3, 4, 4), dtype=np.uint8)
    data = load_arrays(_save(tmp_path / "images.npz", content))
    assert data.x_train.dtype == torch.uint8
    assert np.array_equal(data.x_train.numpy(), content["x_train"])
    assert data.class_names == ["0", "1", "2"]


def test_build_datasets_arrays(tmp_path: Path) -> None:
    content = _arrays(n_train=30)
    path = _save(tmp_path / "features.pt", content)
    bundle = build_datasets(DataSection("arrays", root=str(path), val_fraction=0.2, split_seed=1))
    assert bundle.input_shape == (5,) and bundle.regime == "none"
    assert bundle.train_class_counts.tolist() == [8, 8, 8]
    for position in range(len(bundle.train)):
        inputs, target, index = bundle.train[position]
        source = int(bundle.train.source_indices[position])
        assert index == position and target == int(content["y_train"][source])
        assert torch.equal(inputs, torch.as_tensor(content["x_train"][source], dtype=torch.float32))


def _expect(path: Path, message: str) -> None:
    with pytest.raises(DatasetError) as caught:
        load_arrays(path)
    assert str(caught.value) == message
    assert caught.value.path == str(path)


def test_missing_key(tmp_path: Path) -> None:
    content = _arrays()
    del content["y_test"]
    path = _save(tmp_path / "features.npz", content)
    _expect(
        path,
        errors.ARRAY_MISSING_KEY.format(
            path=path, missing=["y_test"], found=["x_test", "x_train", "y_train"]
        ),
    )


@pytest.mark.parametrize("suffix", [".npz", ".pt"])
def test_truncated_file(tmp_path: Path, suffix: str) -> None:
    path = _save(tmp_path / f"features{suffix}", _arrays(n_train=200))
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(DatasetError) as caught:
        load_arrays(path)
    assert str(caught.value).startswith(f"{path}: cannot read the array file (")
    assert "truncated" in str(caught.value)


def test_not_a_dict(tmp_path: Path) -> None:
    path = tmp_path / "features.pt"
    torch.save(torch.zeros(3), path)
    with pytest.raises(DatasetError, match="it holds a Tensor, not a dict"):
        load_arrays(path)


def test_single_array_npz(tmp_path: Path) -> None:
    path = tmp_path / "features.npz"
    with open(path, "wb") as handle:
        np.save(handle, np.zeros(3))
    with pytest.raises(DatasetError, match="it holds a single array, not named arrays"):
        load_arrays(path)


def test_unsupported_suffix_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"unsupported suffix '\.csv'"):
        load_arrays(tmp_path / "features.csv")
    with pytest.raises(DatasetError, match="no such file"):
        load_arrays(tmp_path / "absent.npz")


def test_labels_out_of_range(tmp_path: Path) -> None:
    content = _arrays()
    content["class_names"] = np.array(["a", "b", "c"])
    content["y_test"][2] = 3
    path = _save(tmp_path / "features.npz", content)
    _expect(
        path,
        errors.ARRAY_LABEL_PAST_K.format(
            path=path, key="y_test", split="test", label=3, index=2, count=1, last=2, num_classes=3
        ),
    )
    content["y_test"][2] = -1
    path = _save(tmp_path / "negative.npz", content)
    with pytest.raises(DatasetError, match=r"range from -1 to 2"):
        load_arrays(path)


def test_float_labels(tmp_path: Path) -> None:
    content = _arrays()
    content["y_train"] = content["y_train"].astype(np.float64)
    path = _save(tmp_path / "features.npz", content)
    _expect(
        path,
        errors.LABELS_NOT_INTEGER.format(
            path=path, what="`y_train`", dtype=torch.float64, shape=(12,)
        ),
    )


def test_empty_class(tmp_path: Path) -> None:
    content = _arrays()
    content["y_train"][content["y_train"] == 1] = 2
    path = _save(tmp_path / "features.npz", content)
    _expect(path, errors.EMPTY_CLASSES.format(path=path, classes="1 (1)", num_classes=3))


def test_not_finite(tmp_path: Path) -> None:
    content = _arrays()
    content["x_train"][3, 1] = np.nan
    content["x_train"][4, 2] = np.inf
    path = _save(tmp_path / "features.npz", content)
    _expect(path, errors.ARRAY_NOT_FINITE.format(path=path, key="x_train", count=2))


def test_bad_input_dtype(tmp_path: Path) -> None:
    content = _arrays()
    content["x_test"] = content["x_test"] > 0
    path = _save(tmp_path / "features.pt", content)
    _expect(path, errors.ARRAY_BAD_DTYPE.format(path=path, key="x_test", dtype=torch.bool))


def test_shapes_must_agree(tmp_path: Path) -> None:
    content = _arrays()
    content["x_test"] = content["x_test"][:, :4]
    path = _save(tmp_path / "features.npz", content)
    _expect(
        path,
        errors.ARRAY_BAD_SHAPE.format(
            path=path, key="x_test", shape=(6, 4), other="x_train", other_shape=(12, 5)
        ),
    )


def test_inputs_need_a_feature_axis(tmp_path: Path) -> None:
    content = _arrays()
    content["x_train"] = content["x_train"][:, 0]
    path = _save(tmp_path / "features.npz", content)
    _expect(path, errors.ARRAY_NOT_BATCHED.format(path=path, key="x_train", shape=(12,)))


def test_label_count_mismatch(tmp_path: Path) -> None:
    content = _arrays()
    content["y_train"] = content["y_train"][:-2]
    path = _save(tmp_path / "features.npz", content)
    _expect(
        path,
        errors.SIZE_MISMATCH.format(
            path=path, what="y_train", found=10, expected=12, detail="x_train has 12"
        ),
    )


def test_empty_test_split(tmp_path: Path) -> None:
    content = _arrays()
    content["x_test"] = content["x_test"][:0]
    content["y_test"] = content["y_test"][:0]
    path = _save(tmp_path / "features.npz", content)
    _expect(path, errors.NO_SAMPLES.format(path=path, split="test"))


def test_pickled_class_names_are_refused(tmp_path: Path) -> None:
    content = _arrays()
    content["class_names"] = np.array(["a", "b", "c"], dtype=object)
    path = _save(tmp_path / "features.npz", content)
    with pytest.raises(DatasetError, match="allow_pickle=False"):
        load_arrays(path)


@pytest.mark.parametrize("suffix", [".npz", ".pt"])
def test_float64_beyond_float32_is_refused(tmp_path: Path, suffix: str) -> None:
    content = _arrays()
    content["x_train"][3, 2] = -1e300
    content["x_train"][7, 0] = 3.5e38  # just past float32's largest finite value (3.4028235e38)
    content["x_train"][8, 0] = 3.4e38  # still finite in float32: kept
    path = _save(tmp_path / f"huge{suffix}", content)
    _expect(
        path,
        errors.ARRAY_FLOAT32_OVERFLOW.format(
            path=path, key="x_train", split="training", count=2, largest=1e300
        ),
    )
    content["x_train"][[3, 7], [2, 0]] = 0.0
    data = load_arrays(_save(tmp_path / f"large{suffix}", content))
    assert float(data.x_train[8, 0]) == pytest.approx(3.4e38, rel=1e-7)


def test_a_stray_label_is_named_and_a_real_gap_is_not(tmp_path: Path) -> None:
    content = _arrays()
    content["y_train"][4] = 6  # classes 0..2 and one label 6: K would be 7
    path = _save(tmp_path / "stray.npz", content)
    _expect(
        path,
        errors.ARRAY_LABEL_PAST_OTHERS.format(
            path=path, key="y_train", split="training", label=6, index=4, count=1, top=2,
            num_classes=7, empty="3, 4, 5",
        ),
    )
    content = _arrays(k=5)
    content["y_train"][content["y_train"] == 2] = 4  # class 2 dropped, 3 and 4 kept: a real gap
    content["y_test"][content["y_test"] == 2] = 3
    path = _save(tmp_path / "gap.npz", content)
    _expect(path, errors.EMPTY_CLASSES.format(path=path, classes="2 (2)", num_classes=5))


BOUNDED_CHILD = """
import json, resource, sys
from pathlib import Path
import torch
from mr2.data.arrays import load_arrays
from mr2.data.errors import DatasetError

def address_space():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024

limit = address_space() + 1536 * 2**20
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
try:
    load_arrays(sys.argv[1])
    print(json.dumps({"outcome": "accepted"}))
except DatasetError as error:
    print(json.dumps({"outcome": "error", "message": str(error)}))
"""


def _load_bounded(path: Path) -> dict[str, Any]:
    """load_arrays(path) in a child under an address-space limit of 1.5 GB above its imports."""
    import json
    import subprocess
    import sys

    completed = subprocess.run(
        [sys.executable, "-c", BOUNDED_CHILD, str(path)], capture_output=True, text=True, timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    return json.loads(completed.stdout)


@pytest.mark.parametrize("label", [10**9, 2**62])
def test_one_huge_label_builds_no_huge_class_list(tmp_path: Path, label: int) -> None:
    # Without class_names K is the largest label + 1: one label of 10^9 used to build 10^9 class names
    # and a 10^9-long count. Named from the labels present (at most N of them) instead.
    content = _arrays()
    content["y_train"][4] = label
    path = _save(tmp_path / "huge.npz", content)
    result = _load_bounded(path)
    shown = ", ".join(str(k) for k in range(3, 23))
    assert result == {"outcome": "error", "message": errors.ARRAY_LABEL_PAST_OTHERS.format(
        path=path, key="y_train", split="training", label=label, index=4, count=1, top=2,
        num_classes=label + 1, empty=shown,
    )}


def test_more_classes_than_training_samples_is_refused_without_counting_them(tmp_path: Path) -> None:
    # Two large labels (no single stray one): K = 10^9 + 1 classes for 12 training samples, so most
    # classes have none; said without a K-long count.
    content = _arrays()
    content["y_train"][4] = 10**9
    content["y_train"][5] = 10**9 - 1
    path = _save(tmp_path / "sparse.npz", content)
    result = _load_bounded(path)
    shown = ", ".join(str(k) for k in range(3, 23))
    assert result == {"outcome": "error", "message": errors.EMPTY_CLASSES.format(
        path=path, classes=f"{shown}, ... ({10**9 + 1 - 5} in all)", num_classes=10**9 + 1,
    )}
