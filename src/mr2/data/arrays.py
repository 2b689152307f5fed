"""Array / feature files: any user data set or pre-extracted features.

One file holds both splits under the keys ``x_train``, ``y_train``, ``x_test``, ``y_test`` and,
optionally, ``class_names``:

* ``.npz`` (``numpy.savez``), read with ``allow_pickle=False``; ``class_names`` a string array
  (``np.array(names, dtype=str)``);
* ``.pt`` (``torch.save`` of a dict of tensors), read with ``weights_only=True``; ``class_names``
  a list of strings.

Inputs are ``[N, d]`` features or ``[N, C, H, W]`` images, floating or integer; labels integer
class ids ``0..K-1`` with ``K = len(class_names)`` (default: the largest label + 1). The reader
checks shapes, dtypes, finite values (also after the conversion of floating inputs to float32), the
label range (naming a label past K) and that every class has training samples.

Example:
    >>> import tempfile
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = f"{tmp}/features.npz"
    ...     np.savez(path, x_train=rng.normal(size=(6, 4)), y_train=np.array([0, 1, 2, 0, 1, 2]),
    ...              x_test=rng.normal(size=(3, 4)), y_test=np.array([2, 1, 0]))
    ...     data = load_arrays(path)
    >>> data.x_train.dtype, data.num_classes, data.class_names
    (torch.float32, 3, ['0', '1', '2'])
"""

from __future__ import annotations

import os
import pickle
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mr2.data import errors
from mr2.data.errors import DatasetError
from mr2.data.sources import SplitArrays
from mr2.data.validation import (
    check_labels,
    check_no_empty_classes,
    check_same_length,
    first_label_at_or_above,
)
from mr2.io import load_error_text

__all__ = ["ARRAY_KEYS", "ARRAY_SUFFIXES", "load_arrays"]

ARRAY_KEYS = ("x_train", "y_train", "x_test", "y_test")
ARRAY_SUFFIXES = (".npz", ".pt")
_SPLITS = {"x_train": "training", "y_train": "training", "x_test": "test", "y_test": "test"}

_HOW_TO_SAVE = {
    ".npz": "numpy.savez(path, x_train=..., y_train=..., x_test=..., y_test=...)",
    ".pt": "torch.save({'x_train': ..., 'y_train': ..., 'x_test': ..., 'y_test': ...}, path)",
}


def _unreadable(path: Path, reason: str) -> DatasetError:
    kind = {".npz": "numpy .npz", ".pt": "torch .pt"}.get(path.suffix, "`.npz` or `.pt`")
    how = _HOW_TO_SAVE.get(path.suffix, " or ".join(_HOW_TO_SAVE.values()))
    return DatasetError(
        errors.ARRAY_UNREADABLE.format(path=path, reason=reason, kind=kind, how=how), path=path
    )


def _read_npz(path: Path) -> dict[str, Any]:
    try:
        content: dict[str, Any] = {}
        # Our own handle, so it is closed even when numpy fails on a corrupt archive.
        with open(path, "rb") as handle:
            archive = np.load(handle, allow_pickle=False)
            if not isinstance(archive, np.lib.npyio.NpzFile):
                raise _unreadable(path, "it holds a single array, not named arrays")
            with archive:
                for key in archive.files:
                    array = archive[key]
                    content[key] = (
                        array.tolist() if array.dtype.kind in "US" else torch.from_numpy(array)
                    )
        return content
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError) as exc:
        raise _unreadable(path, f"{type(exc).__name__}: {load_error_text(exc)}") from exc


def _read_pt(path: Path) -> dict[str, Any]:
    try:
        content = torch.load(path, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, EOFError, pickle.UnpicklingError, ValueError) as exc:
        raise _unreadable(path, f"{type(exc).__name__}: {load_error_text(exc)}") from exc
    if not isinstance(content, dict):
        raise _unreadable(path, f"it holds a {type(content).__name__}, not a dict")
    return {
        str(key): torch.as_tensor(value) if isinstance(value, np.ndarray) else value
        for key, value in content.items()
    }


def _check_inputs(path: Path, key: str, x: Any) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise _unreadable(path, f"`{key}` is a {type(x).__name__}, not an array")
    if not (x.dtype.is_floating_point or (not x.dtype.is_complex and x.dtype != torch.bool)):
        raise DatasetError(errors.ARRAY_BAD_DTYPE.format(path=path, key=key, dtype=x.dtype), path)
    if x.ndim < 2:
        raise DatasetError(
            errors.ARRAY_NOT_BATCHED.format(path=path, key=key, shape=tuple(x.shape)), path
        )
    if x.dtype.is_floating_point:
        bad = int((~torch.isfinite(x)).sum())
        if bad:
            raise DatasetError(
                errors.ARRAY_NOT_FINITE.format(path=path, key=key, count=bad), path=path
            )
        converted = x.to(torch.float32)
        overflow = torch.isinf(converted)
        count = int(overflow.sum())
        if count:
            raise DatasetError(
                errors.ARRAY_FLOAT32_OVERFLOW.format(
                    path=path, key=key, split=_SPLITS[key], count=count,
                    largest=float(x[overflow].abs().max()),
                ),
                path=path,
            )
        x = converted
    return x


def _check_label_array(path: Path, key: str, y: Any) -> torch.Tensor:
    if not isinstance(y, torch.Tensor):
        raise _unreadable(path, f"`{key}` is a {type(y).__name__}, not an array")
    # The range is checked once K is known; here only the dtype and the shape.
    return check_labels(path, y, num_classes=None, what=f"`{key}`")


def _check_below(path: Path, labels: dict[str, torch.Tensor], num_classes: int) -> None:
    """Name the first label at or past K (``class_names`` gave K)."""
    for key, y in labels.items():
        found = first_label_at_or_above(y, num_classes)
        if found is not None:
            label, index, count = found
            raise DatasetError(
                errors.ARRAY_LABEL_PAST_K.format(
                    path=path, key=key, split=_SPLITS[key], label=label, index=index, count=count,
                    last=num_classes - 1, num_classes=num_classes,
                ),
                path=path,
            )


_SHOWN_EMPTY = 20  # empty classes named in a message


def _missing(present: list[int], num_classes: int, limit: int = _SHOWN_EMPTY) -> list[int]:
    """The first ``limit`` ids of ``0..num_classes-1`` not in ``present`` (sorted, distinct): found by
    walking the labels present, never a K-long array (K may be 10^9 when one label is)."""
    missing: list[int] = []
    expected = 0
    for value in [*present, num_classes]:
        while expected < value and len(missing) < limit:
            missing.append(expected)
            expected += 1
        if len(missing) >= limit:
            break
        expected = value + 1
    return missing


def _check_no_stray_label(path: Path, labels: dict[str, torch.Tensor], num_classes: int) -> None:
    """Without ``class_names``: a single label far past the others (K inferred from it) is named,
    instead of the empty classes it leaves below it; with more classes than training samples (some
    classes are then empty), the empty classes are named. Both from the labels present (at most N),
    without a K-long count."""
    present = torch.unique(labels["y_train"]).tolist()
    empty = _missing(present, num_classes)
    if not empty:
        return
    gap = empty[0]
    above = torch.cat([y[y >= gap] for y in labels.values()]).unique() if gap else torch.zeros(0)
    if gap == 0 or above.numel() != 1:  # a real gap: the empty classes (if K is not small)
        if num_classes > labels["y_train"].numel():
            listed = ", ".join(str(k) for k in empty) + f", ... ({num_classes - len(present)} in all)"
            raise DatasetError(
                errors.EMPTY_CLASSES.format(path=path, classes=listed, num_classes=num_classes),
                path=path,
            )
        return
    for key, y in labels.items():
        found = first_label_at_or_above(y, gap)
        if found is not None:
            label, index, count = found
            shown = ", ".join(str(k) for k in empty)
            raise DatasetError(
                errors.ARRAY_LABEL_PAST_OTHERS.format(
                    path=path, key=key, split=_SPLITS[key], label=label, index=index, count=count,
                    top=gap - 1, num_classes=num_classes, empty=shown,
                ),
                path=path,
            )


def load_arrays(path: str | os.PathLike[str]) -> SplitArrays:
    """Load and validate an array file (``.npz`` or ``.pt``).

    Args:
        path: the file.

    Returns:
        The splits as tensors (floating inputs as float32, labels int64).

    Raises:
        DatasetError: unreadable or truncated file, missing keys, wrong dtypes or shapes, NaN or
            infinite inputs (also floating inputs beyond float32's range), labels out of range (a
            label past K is named with its split), class names that do not match, or a class
            without training samples.
    """
    path = Path(path)
    if path.suffix not in ARRAY_SUFFIXES:
        raise _unreadable(path, f"unsupported suffix {path.suffix!r}; use .npz or .pt")
    if not path.is_file():
        raise _unreadable(path, "no such file")
    content = _read_npz(path) if path.suffix == ".npz" else _read_pt(path)
    missing = [key for key in ARRAY_KEYS if key not in content]
    if missing:
        raise DatasetError(
            errors.ARRAY_MISSING_KEY.format(path=path, missing=missing, found=sorted(content)),
            path=path,
        )
    x_train = _check_inputs(path, "x_train", content["x_train"])
    x_test = _check_inputs(path, "x_test", content["x_test"])
    y_train = _check_label_array(path, "y_train", content["y_train"])
    y_test = _check_label_array(path, "y_test", content["y_test"])
    check_same_length(
        path, "y_train", y_train.numel(), x_train.shape[0], f"x_train has {x_train.shape[0]}"
    )
    check_same_length(path, "y_test", y_test.numel(), x_test.shape[0], f"x_test has {x_test.shape[0]}")
    if x_train.shape[1:] != x_test.shape[1:]:
        raise DatasetError(
            errors.ARRAY_BAD_SHAPE.format(
                path=path,
                key="x_test",
                shape=tuple(x_test.shape),
                other="x_train",
                other_shape=tuple(x_train.shape),
            ),
            path=path,
        )
    for split, x in (("training", x_train), ("test", x_test)):
        if x.shape[0] == 0:
            raise DatasetError(errors.NO_SAMPLES.format(path=path, split=split), path=path)
    labels = {"y_train": y_train, "y_test": y_test}
    names = content.get("class_names")
    if names is None:
        num_classes = int(torch.cat([y_train, y_test]).max()) + 1
        if int(torch.cat([y_train, y_test]).min()) >= 0:
            _check_no_stray_label(path, labels, num_classes)  # before K names are built
        class_names = [str(k) for k in range(num_classes)]
    else:
        if isinstance(names, torch.Tensor) or not all(isinstance(n, str) for n in names):
            raise _unreadable(path, "`class_names` must be a list / array of strings")
        class_names = list(names)
        num_classes = len(class_names)
        _check_below(path, labels, num_classes)
    y_train = check_labels(path, y_train, num_classes, what="`y_train`")
    y_test = check_labels(path, y_test, num_classes, what="`y_test`")
    check_no_empty_classes(path, y_train, num_classes, class_names)
    return SplitArrays(x_train, y_train, x_test, y_test, class_names, source=str(path))
