"""Predictions files of any classifier, read as runs of the disparity report.

``mr2 report --predictions FILE[=LABEL] ...`` reports models mr2 did not train. A file holds one
model's predictions on a test set:

- ``.npz`` (``numpy.savez``) or ``.pt`` (``torch.save`` of a dict): the key ``y_true`` (true class
  ids, [N]) and either ``y_pred`` (predicted class ids, [N]) or ``logits`` ([N, K] scores, logits or
  probabilities: the prediction is their argmax, the first maximum on ties); optionally
  ``class_names`` (K strings). No other key is accepted (a typo such as ``preds`` is an error, not
  silently ignored).
- ``.csv`` with a header row: either the columns ``y_true,y_pred``, or ``y_true`` and one column per
  class holding its score (the column names are the class names unless ``--class-names`` is given).

``LABEL`` is ``method@seed`` (``mr2@0``): files of the same method with different seeds are that
method's runs, paired by seed with the reference's. Without ``@seed`` the label is the method and the
run has no seed; without a label the file's stem is the method.

Every file must describe the same test set: the same N, the same ``y_true`` (sample by sample) and
the same K. K is the logits' width, else the number of class names (``--class-names`` or the files'),
else ``1 + `` the largest class id in the files. Every problem raises :class:`PredictionsError` with
one of the message constants below, before any report file is written.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray

from mr2.report.confusion import confusion_matrix
from mr2.report.exceptions import PredictionsError
from mr2.report.run_dir import RunRecord, check_comparable

__all__ = [
    "PredictionsFile",
    "load_predictions",
    "parse_label",
    "read_class_names",
    "read_predictions",
]

NO_FILES = "no predictions file given; pass at least one .npz, .pt or .csv file"
FILE_NOT_FOUND = "predictions file {path} does not exist"
FORMAT_UNKNOWN = (
    "predictions file {path} has suffix {suffix!r}; use .npz (numpy.savez), .pt (torch.save of a "
    "dict) or .csv"
)
FILE_UNREADABLE = "predictions file {path} cannot be read: {error}"
NOT_A_MAPPING = "predictions file {path} must hold a dict of arrays (y_true, y_pred or logits), got {kind}"
KEY_MISSING = "predictions file {path} has no {key!r}; it needs y_true and either y_pred or logits"
NO_PREDICTIONS = (
    "predictions file {path} has neither 'y_pred' (class ids [N]) nor 'logits' ([N, K] scores); "
    "found keys {keys}"
)
BOTH_PREDICTIONS = (
    "predictions file {path} has both 'y_pred' and 'logits'; keep one of them (the report would "
    "not know which to trust)"
)
UNKNOWN_KEYS = (
    "predictions file {path} has unknown key(s) {keys}; accepted keys: y_true, y_pred, logits, class_names"
)
UNKNOWN_COLUMNS = (
    "predictions file {path} has unknown column(s) {columns} next to y_true,y_pred; use the columns "
    "y_true,y_pred, or y_true and one column of scores per class"
)
COLUMN_MISSING = (
    "predictions file {path} has no 'y_true' column; the header must be y_true,y_pred or y_true "
    "followed by one column per class"
)
EMPTY_FILE = "predictions file {path} holds no sample; it must hold at least one prediction"
ROW_LENGTH = "predictions file {path}, line {line}: {actual} cells, but the header has {expected}"
CELL_INVALID = "predictions file {path}, line {line}, column {column!r}: {value!r} is not a number"
WRONG_SHAPE = "predictions file {path}: {key} must have shape {expected}, got {actual}"
NOT_INTEGER = (
    "predictions file {path}: {key} must hold integer class ids, got {problem}; save the class ids "
    "(or logits as 'logits')"
)
NOT_FINITE = (
    "predictions file {path}: logits hold {count} non-finite value(s) (NaN or infinity), first in "
    "row {row}; the model diverged or the file is corrupt"
)
LABEL_OUT_OF_RANGE = (
    "predictions file {path}: {key} holds class id {value}, outside [0, {num_classes}); check the "
    "label encoding and the class names"
)
CLASS_NAMES_INVALID = "predictions file {path}: class_names must be {num_classes} strings, got {problem}"
CLASS_NAMES_FILE_INVALID = (
    "class names file {path} {problem}; write one class name per line, in class-id order"
)
NUM_CLASSES_MISMATCH = (
    "predictions files disagree on the number of classes: {first} has {first_k}, {other} has "
    "{other_k}; every file must score the same classes"
)
NUM_SAMPLES_MISMATCH = (
    "predictions files disagree on the test set: {first} has {first_n} samples, {other} has "
    "{other_n}; every file must hold predictions on the same test samples, in the same order"
)
Y_TRUE_MISMATCH = (
    "predictions files disagree on the test set: y_true of {first} and {other} differ first at "
    "sample {index} ({first_value} vs {other_value}); save every model's predictions on the same "
    "samples in the same order"
)
CLASS_NAMES_MISMATCH = (
    "the class names of {first} and {other} differ; they use different label orders and cannot be "
    "compared class by class"
)
LABEL_INVALID = (
    "label {label!r} of {path} is invalid: {problem}; write FILE=METHOD or FILE=METHOD@SEED "
    "(seed an integer), e.g. preds.npz=mr2@0"
)

DUPLICATE_LABEL = (
    "{first} and {other} are both labelled {label!r}; give each file its own label "
    "(FILE=METHOD@SEED), a repeated run would count twice in the mean over seeds"
)

_SUFFIXES = (".npz", ".pt", ".csv")
_KEYS = ("y_true", "y_pred", "logits", "class_names")


@dataclass
class PredictionsFile:
    """One file's content, checked on its own (not yet against the other files).

    Attributes:
        path: the file.
        y_true: true class ids, int64 [N].
        y_pred: predicted class ids, int64 [N] (the argmax of ``logits`` when the file has them).
        logits: the scores [N, K] (float64), or None.
        class_names: names stored in the file (or a CSV's score columns), or None.
    """

    path: Path
    y_true: NDArray[np.int64]
    y_pred: NDArray[np.int64]
    logits: NDArray[np.float64] | None = None
    class_names: list[str] | None = None

    @property
    def num_samples(self) -> int:
        """N."""
        return int(self.y_true.shape[0])

    @property
    def num_classes(self) -> int | None:
        """K when the file fixes it (logits or class names), else None."""
        if self.logits is not None:
            return int(self.logits.shape[1])
        return None if self.class_names is None else len(self.class_names)


def parse_label(label: str, path: str | Path = "") -> tuple[str, int | None]:
    """``"method@seed"`` -> ``(method, seed)``; ``"method"`` -> ``(method, None)``.

    >>> parse_label("mr2@3"), parse_label("logreg")
    (('mr2', 3), ('logreg', None))
    """
    method, at, seed_text = label.rpartition("@") if "@" in label else (label, "", "")
    if not method.strip():
        raise PredictionsError(LABEL_INVALID.format(label=label, path=path, problem="empty method"))
    if not at:
        return method, None
    try:
        seed = int(seed_text)
    except ValueError:
        raise PredictionsError(
            LABEL_INVALID.format(label=label, path=path, problem=f"seed {seed_text!r} is not an integer")
        ) from None
    return method, seed


def _split_spec(spec: str | Path) -> tuple[Path, str | None]:
    """``FILE=LABEL`` -> ``(FILE, LABEL)``; a path that exists as given has no label."""
    text = str(spec)
    if Path(text).exists() or "=" not in text:
        return Path(text), None
    path, _, label = text.rpartition("=")
    return Path(path), label


def _as_class_ids(path: Path, key: str, values: NDArray[Any]) -> NDArray[np.int64]:
    if values.ndim != 1:
        raise PredictionsError(
            WRONG_SHAPE.format(path=path, key=key, expected="[N]", actual=list(values.shape))
        )
    if values.dtype == np.bool_ or not np.issubdtype(values.dtype, np.number):
        raise PredictionsError(NOT_INTEGER.format(path=path, key=key, problem=f"dtype {values.dtype}"))
    integral = np.all(np.isfinite(values)) and np.all(values == np.round(values))
    if np.issubdtype(values.dtype, np.floating) and not integral:
        raise PredictionsError(NOT_INTEGER.format(path=path, key=key, problem="fractional values"))
    ids = values.astype(np.int64)
    if ids.size and ids.min() < 0:
        raise PredictionsError(
            LABEL_OUT_OF_RANGE.format(path=path, key=key, value=int(ids.min()), num_classes="K")
        )
    return ids


def _build(path: Path, data: dict[str, Any], column_names: list[str] | None = None) -> PredictionsFile:
    """Check the arrays of one file and build its :class:`PredictionsFile`."""
    if "y_true" not in data:
        raise PredictionsError(KEY_MISSING.format(path=path, key="y_true"))
    if "y_pred" not in data and "logits" not in data:
        raise PredictionsError(NO_PREDICTIONS.format(path=path, keys=sorted(data)))
    if "y_pred" in data and "logits" in data:
        raise PredictionsError(BOTH_PREDICTIONS.format(path=path))
    y_true = _as_class_ids(path, "y_true", np.asarray(data["y_true"]))
    if y_true.size == 0:
        raise PredictionsError(EMPTY_FILE.format(path=path))
    n = y_true.shape[0]
    logits = None
    if "logits" in data:
        scores = np.asarray(data["logits"])
        if scores.ndim != 2 or scores.shape[0] != n or scores.shape[1] == 0:
            raise PredictionsError(
                WRONG_SHAPE.format(path=path, key="logits", expected=f"[{n}, K]", actual=list(scores.shape))
            )
        if not np.issubdtype(scores.dtype, np.number) or scores.dtype == np.bool_:
            raise PredictionsError(
                WRONG_SHAPE.format(path=path, key="logits", expected="numbers", actual=str(scores.dtype))
            )
        logits = scores.astype(np.float64)
        bad = ~np.isfinite(logits)
        if bad.any():
            raise PredictionsError(
                NOT_FINITE.format(
                    path=path, count=int(bad.sum()), row=int(np.flatnonzero(bad.any(axis=1))[0])
                )
            )
        y_pred = logits.argmax(axis=1).astype(np.int64)
    else:
        y_pred = _as_class_ids(path, "y_pred", np.asarray(data["y_pred"]))
        if y_pred.shape != y_true.shape:
            raise PredictionsError(
                WRONG_SHAPE.format(path=path, key="y_pred", expected=f"[{n}]", actual=list(y_pred.shape))
            )
    names = data.get("class_names", column_names)
    class_names = None
    if names is not None:
        array = np.asarray(names)
        expected = logits.shape[1] if logits is not None else array.size
        if array.ndim != 1 or array.size != expected or array.dtype.kind not in "US":
            raise PredictionsError(
                CLASS_NAMES_INVALID.format(
                    path=path, num_classes=expected, problem=f"shape {list(array.shape)} of {array.dtype}"
                )
            )
        class_names = [str(name) for name in array.tolist()]
    return PredictionsFile(path, y_true, y_pred, logits, class_names)


def _read_mapping(path: Path) -> dict[str, Any]:
    try:
        if path.suffix == ".npz":
            with np.load(path, allow_pickle=False) as archive:
                return {key: archive[key] for key in archive.files}
        content = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # corrupt archives raise anything from zipfile, pickle or numpy
        raise PredictionsError(
            FILE_UNREADABLE.format(
                path=path, error=str(error).splitlines()[0] if str(error) else type(error).__name__
            )
        ) from error
    if not isinstance(content, dict):
        raise PredictionsError(NOT_A_MAPPING.format(path=path, kind=type(content).__name__))
    return {
        str(key): value.numpy() if isinstance(value, torch.Tensor) else value
        for key, value in content.items()
    }


def _read_csv(path: Path) -> PredictionsFile:
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            rows = list(csv.reader(handle))
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise PredictionsError(FILE_UNREADABLE.format(path=path, error=error)) from error
    rows = [row for row in rows if row]
    if not rows:
        raise PredictionsError(EMPTY_FILE.format(path=path))
    header = [cell.strip() for cell in rows[0]]
    if "y_true" not in header:
        raise PredictionsError(COLUMN_MISSING.format(path=path))
    body = rows[1:]
    if not body:
        raise PredictionsError(EMPTY_FILE.format(path=path))
    for line, row in enumerate(body, start=2):
        if len(row) != len(header):
            raise PredictionsError(
                ROW_LENGTH.format(path=path, line=line, actual=len(row), expected=len(header))
            )
    cells = np.array(body, dtype=str)
    try:
        values = cells.astype(np.float64)
    except ValueError:
        for line, row in enumerate(body, start=2):
            for column, cell in zip(header, row, strict=True):
                try:
                    float(cell)
                except ValueError:
                    raise PredictionsError(
                        CELL_INVALID.format(path=path, line=line, column=column, value=cell)
                    ) from None
        raise
    columns = dict(zip(header, values.T, strict=True))
    y_true = columns.pop("y_true")
    if "y_pred" in columns:
        if len(columns) > 1:
            unknown = [name for name in header if name not in ("y_true", "y_pred")]
            raise PredictionsError(UNKNOWN_COLUMNS.format(path=path, columns=unknown))
        return _build(path, {"y_true": y_true, "y_pred": columns["y_pred"]})
    if not columns:
        raise PredictionsError(NO_PREDICTIONS.format(path=path, keys=header))
    names = [name for name in header if name != "y_true"]
    return _build(path, {"y_true": y_true, "logits": np.stack(list(columns.values()), axis=1)}, names)


def read_predictions(path: str | Path) -> PredictionsFile:
    """Read and check one predictions file (see the module docstring for the formats).

    Raises:
        PredictionsError: the file is missing, unreadable or malformed.
    """
    path = Path(path)
    if not path.is_file():
        raise PredictionsError(FILE_NOT_FOUND.format(path=path))
    if path.suffix not in _SUFFIXES:
        raise PredictionsError(FORMAT_UNKNOWN.format(path=path, suffix=path.suffix))
    if path.suffix == ".csv":
        return _read_csv(path)
    data = _read_mapping(path)
    unknown = sorted(set(data) - set(_KEYS))
    if unknown:
        raise PredictionsError(UNKNOWN_KEYS.format(path=path, keys=unknown))
    return _build(path, data)


def read_class_names(path: str | Path) -> list[str]:
    """Class names from a text file, one per line in class-id order (blank lines at the end ignored).

    Raises:
        PredictionsError: the file is missing, empty or repeats a name.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise PredictionsError(
            CLASS_NAMES_FILE_INVALID.format(path=path, problem=f"cannot be read ({error})")
        ) from error
    names = [line.strip() for line in text.rstrip().splitlines()]
    if not names or not all(names):
        raise PredictionsError(
            CLASS_NAMES_FILE_INVALID.format(path=path, problem="holds an empty name or no name")
        )
    if len(set(names)) != len(names):
        raise PredictionsError(CLASS_NAMES_FILE_INVALID.format(path=path, problem="repeats a name"))
    return names


def _check_same_test_set(files: Sequence[PredictionsFile], class_names: list[str] | None) -> int:
    """Check that the files agree on N, y_true and K; return K."""
    first = files[0]
    for other in files[1:]:
        if other.num_samples != first.num_samples:
            raise PredictionsError(
                NUM_SAMPLES_MISMATCH.format(
                    first=first.path, first_n=first.num_samples, other=other.path, other_n=other.num_samples
                )
            )
        differs = np.flatnonzero(other.y_true != first.y_true)
        if differs.size:
            index = int(differs[0])
            raise PredictionsError(
                Y_TRUE_MISMATCH.format(
                    first=first.path,
                    other=other.path,
                    index=index,
                    first_value=int(first.y_true[index]),
                    other_value=int(other.y_true[index]),
                )
            )
    sources: list[tuple[str, int]] = []
    if class_names is not None:
        sources.append(("--class-names", len(class_names)))
    for item in files:
        if item.logits is not None:
            sources.append((str(item.path), int(item.logits.shape[1])))
        elif item.class_names is not None and class_names is None:
            sources.append((str(item.path), len(item.class_names)))
    for source, k in sources[1:]:
        if k != sources[0][1]:
            raise PredictionsError(
                NUM_CLASSES_MISMATCH.format(
                    first=sources[0][0], first_k=sources[0][1], other=source, other_k=k
                )
            )
    if sources:
        return sources[0][1]
    return 1 + max(int(max(f.y_true.max(), f.y_pred.max())) for f in files)


def _class_names(files: Sequence[PredictionsFile], given: list[str] | None) -> list[str] | None:
    """The report's class names: ``given``, else the files' (which must agree)."""
    names, source = (given, "--class-names") if given is not None else (None, "")
    for item in files:
        if item.class_names is None or (given is not None and item.path.suffix == ".csv"):
            continue  # a CSV's score columns are names only when no --class-names is given
        if names is None:
            names, source = item.class_names, str(item.path)
        elif item.class_names != names:
            raise PredictionsError(CLASS_NAMES_MISMATCH.format(first=source, other=item.path))
    return names


def load_predictions(
    specs: Sequence[str | Path],
    *,
    class_names: Sequence[str] | None = None,
) -> list[RunRecord]:
    """Read predictions files ``FILE[=LABEL]`` as comparable runs of the report.

    Args:
        specs: the files, each optionally followed by ``=method`` or ``=method@seed``.
        class_names: the K class names (overriding the names stored in ``.csv`` headers; ``.npz`` /
            ``.pt`` files that store names must agree with them).

    Returns:
        One :class:`RunRecord` per file (``path`` the file, no data set name, split ``test``).

    Raises:
        PredictionsError: a file is malformed, or the files disagree on the test set or the classes.
    """
    if not specs:
        raise PredictionsError(NO_FILES)
    labelled = [_split_spec(spec) for spec in specs]
    labels = [
        (path, parse_label(label, path) if label is not None else (path.stem, None))
        for path, label in labelled
    ]
    files = [read_predictions(path) for path, _ in labelled]
    num_classes = _check_same_test_set(files, list(class_names) if class_names is not None else None)
    names = _class_names(files, list(class_names) if class_names is not None else None)
    for item in files:
        for key, ids in (("y_true", item.y_true), ("y_pred", item.y_pred)):
            if int(ids.max()) >= num_classes:
                raise PredictionsError(
                    LABEL_OUT_OF_RANGE.format(
                        path=item.path, key=key, value=int(ids.max()), num_classes=num_classes
                    )
                )
    seen: dict[str, Path] = {}
    for path, (method, seed) in labels:
        name = method if seed is None else f"{method}@{seed}"
        if name in seen:
            raise PredictionsError(DUPLICATE_LABEL.format(first=seen[name], other=path, label=name))
        seen[name] = path
    runs = []
    for item, (path, (method, seed)) in zip(files, labels, strict=True):
        confusion = confusion_matrix(
            torch.from_numpy(item.y_pred), torch.from_numpy(item.y_true), num_classes
        ).numpy()
        name = method if seed is None else f"{method}@{seed}"
        runs.append(
            RunRecord(
                name=name,
                method=method,
                seed=seed,
                confusion=confusion,
                class_names=names,
                path=path,
            )
        )
    check_comparable(runs)
    return runs
