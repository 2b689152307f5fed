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
else ``1 + `` the largest class id in the files. K may not exceed ``max_classes``
(:data:`mr2.report.limits.DEFAULT_MAX_CLASSES`, ``mr2 report --max-classes``): a class id, a logits
width or a list of names above it is refused, naming the file and the label, before any K x K matrix
is allocated (an ``.npz`` array's shape is read from its header before the array is loaded).

What a file declares is bounded before it is read, whatever its compression: the arrays of an ``.npz``
(from the members' headers), the storages of a ``.pt`` (from its archive's member sizes) and the
values its lists would expand to (counted through shared references, not expanded) may take at most
``max_array_bytes`` (:data:`mr2.report.limits.DEFAULT_MAX_ARRAY_BYTES`, 1 GB; ``mr2 report
--max-array-bytes``) once read; a ``.csv`` file's size is bounded the same way. A few-MB DEFLATE
archive declaring 300 million samples is refused before any array is allocated.

Every problem raises :class:`PredictionsError` with one of the message constants below, before any
report file is written.
"""

from __future__ import annotations

import array
import csv
import difflib
import math
import os
import pickle
import re
import stat
import unicodedata
import warnings
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray

from mr2.checks import is_int
from mr2.io import ReadRefused, read_bounded
from mr2.report.confusion import confusion_matrix
from mr2.report.exceptions import PredictionsError
from mr2.report.limits import DEFAULT_MAX_ARRAY_BYTES, DEFAULT_MAX_CLASSES, confusion_bytes, format_bytes
from mr2.report.run_dir import RunRecord, check_comparable, first_difference

__all__ = [
    "NonFinitePredictions",
    "PredictionsFile",
    "load_predictions",
    "parse_label",
    "predictions_problem",
    "read_class_names",
    "read_predictions",
]



class NonFinitePredictions(PredictionsError):
    """A file's logits hold NaN or infinite values (:data:`NOT_FINITE`): a diverged model, or a
    corrupt file (``mr2 tune`` fails the trial instead of refusing its input)."""


#: Arrays whose logits are not all finite (:func:`predictions_problem`).
LOGITS_NOT_ALL_FINITE = "logits hold NaN or infinite values (a diverged model?); they must be finite"


def predictions_problem(y_true: NDArray[Any], y_pred: NDArray[Any] | None, logits: NDArray[Any] | None,
                        num_classes: int) -> str:
    """The one check of predictions already in memory, against a known K: what is wrong with
    ``y_true`` [N] and either ``y_pred`` [N] or ``logits`` [N, K] ("" when nothing): shapes, no
    sample, dtypes that are not integer class ids (logits: not real), a logits width other than K,
    class ids outside ``[0, K)``. ``mr2 tune`` checks every trial's predictions with it, fresh or
    stored, and every validation figure it scores
    (:meth:`mr2.tune.selection.ValidationFigures.from_predictions`).

    Raises:
        NonFinitePredictions: well-formed logits that are not all finite (a diverged model).

    Example:
        >>> predictions_problem(np.array([0, 1]), np.array([1, 2]), None, 2)
        'y_pred holds class ids from 1 to 2, outside [0, 2) (wrong K?)'
    """
    if y_true.ndim != 1 or y_true.size == 0:
        return f"y_true must be a non-empty 1-D array of class ids; got shape {y_true.shape}"
    if not np.issubdtype(y_true.dtype, np.integer):
        return f"y_true must hold integer class ids; got dtype {y_true.dtype}"
    if (y_pred is None) == (logits is None):
        return "give exactly one of y_pred (class ids [N]) and logits ([N, K] scores)"
    if logits is not None:
        if logits.ndim != 2 or logits.shape[0] != y_true.shape[0]:
            return f"logits must have shape [{y_true.shape[0]}, {num_classes}]; got {logits.shape}"
        if logits.shape[1] != num_classes:
            return (f"logits have {logits.shape[1]} columns but num_classes is {num_classes} (wrong K: "
                    "one column per class)")
        if not np.issubdtype(logits.dtype, np.floating) and not np.issubdtype(logits.dtype, np.integer):
            return f"logits must be real numbers; got dtype {logits.dtype}"
        if not np.isfinite(logits).all():
            raise NonFinitePredictions(LOGITS_NOT_ALL_FINITE)
    else:
        assert y_pred is not None
        if y_pred.shape != y_true.shape:
            return f"y_pred must have the shape of y_true {y_true.shape}; got {y_pred.shape}"
        if not np.issubdtype(y_pred.dtype, np.integer):
            return f"y_pred must hold integer class ids; got dtype {y_pred.dtype}"
    for key, ids in (("y_true", y_true), ("y_pred", y_pred)):
        if ids is not None and (int(ids.min()) < 0 or int(ids.max()) >= num_classes):
            return (f"{key} holds class ids from {int(ids.min())} to {int(ids.max())}, outside [0, "
                    f"{num_classes}) (wrong K?)")
    return ""


_NO_FILES = "no predictions file given; pass at least one .npz, .pt or .csv file"
FILE_NOT_FOUND = "predictions file {path} does not exist"
_NOT_A_FILE = "predictions file {path} is a directory, not a file; give the .npz, .pt or .csv file itself"
NOT_A_REGULAR_FILE = (
    "predictions file {path} is {kind}, not a regular file; save the predictions to a .npz, .pt or .csv file"
)
FORMAT_UNKNOWN = (
    "predictions file {path} has suffix {suffix!r}; use .npz (numpy.savez), .pt (torch.save of a "
    "dict) or .csv"
)
FILE_UNREADABLE = "predictions file {path} cannot be read: {error}"
_PICKLE_REFUSED = (
    "torch.load(weights_only=True) refused it; a .pt predictions file must be torch.save of a dict "
    "of tensors, lists, numbers and strings (other pickled objects are never loaded)"
)
_NOT_A_MAPPING = "predictions file {path} must hold a dict of arrays (y_true, y_pred or logits), got {kind}"
_KEY_MISSING = "predictions file {path} has no {key!r}; it needs y_true and either y_pred or logits"
_NO_PREDICTIONS = (
    "predictions file {path} has neither 'y_pred' (class ids [N]) nor 'logits' ([N, K] scores); "
    "found keys {keys}"
)
_BOTH_PREDICTIONS = (
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
    "predictions file {path} has no 'y_true' column (found {found}); the header must be "
    "y_true,y_pred or y_true followed by one column per class{hint}"
)
COLUMNS_UNEXPECTED = (
    "predictions file {path} has the columns {found}; expected y_true,y_pred (class ids), or y_true "
    "followed by one score column per class (at least 2){hint}"
)
DID_YOU_MEAN = "; did you mean {name!r} for {column!r}?"
COLUMN_REPEATED = "predictions file {path} has the column {column!r} twice; every column name must be unique"
EMPTY_FILE = "predictions file {path} holds no sample; it must hold at least one prediction"
_ROW_LENGTH = "predictions file {path}, line {line}: {actual} cells, but the header has {expected}"
CELL_INVALID = "predictions file {path}, line {line}, column {column!r}: {value!r} is not a number"
_WRONG_SHAPE = "predictions file {path}: {key} must have shape {expected}, got {actual}"
NOT_INTEGER = (
    "predictions file {path}: {key} must hold integer class ids, got {problem}; save the class ids "
    "(or logits as 'logits')"
)
LOGITS_NOT_REAL = (
    "predictions file {path}: logits must be real numbers (integer or floating point), got dtype {dtype}"
)
NOT_FINITE = (
    "predictions file {path}: logits hold {count} non-finite value(s) (NaN or infinity), first in "
    "row {row}; the model diverged or the file is corrupt"
)
LABEL_OUT_OF_RANGE = (
    "predictions file {path}: {key} holds class id {value}, outside [0, {num_classes}); check the "
    "label encoding and the class names"
)
TOO_MANY_CLASSES = (
    "predictions file {path}: {what}, more than the limit of {limit} classes (the report's K x K "
    "confusion matrix would take {size}); check the label encoding (class ids 0 to K-1), or raise "
    "the limit with --max-classes"
)
NAMES_ABOVE_LIMIT = (
    "holds {count} names, more than the limit of {limit} classes (a K x K confusion matrix of "
    "{size}); raise the limit with --max-classes"
)
_GIVEN_NAMES_ABOVE_LIMIT = (
    "class_names gives {count} names, more than the limit of {limit} classes (a K x K confusion "
    "matrix of {size}); raise max_classes"
)
MAX_CLASSES_INVALID = "the class limit (--max-classes) must be a positive integer, got {value!r}"
MAX_ARRAY_BYTES_INVALID = (
    "the limit on a predictions file's arrays (--max-array-bytes) must be a positive integer (bytes), "
    "got {value!r}"
)
ARRAYS_TOO_LARGE = (
    "predictions file {path} declares {what}, {size} once read (uncompressed; class ids as int64, "
    "scores as float64), more than the limit of {limit} per predictions file; check the file (its "
    "sample count and dtypes), or raise the limit with --max-array-bytes (max_array_bytes in Python)"
)
LIST_TOO_DEEP = (
    "predictions file {path}: {key!r} holds lists nested more than {limit} deep; save class ids [N], "
    "logits [N, K] and class names [K] as tensors or flat lists"
)
ARRAY_TRUNCATED = (
    "predictions file {path}: array {key!r} declares shape {shape} ({size}) but the archive stores "
    "{stored}; the file is truncated or corrupt"
)
TENSOR_OVER_STORAGE = (
    "predictions file {path}: tensor {key!r} has shape {shape} ({size}) but its storage holds "
    "{stored} (an expanded or overlapping view); save a contiguous copy, e.g. {key}.contiguous()"
)
CLASS_NAMES_INVALID = (
    "predictions file {path}: class_names must be {num_classes} distinct non-empty strings, got {problem}"
)
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
_NUMERIC_KINDS = "iuf"  # signed, unsigned, floating (not bool, complex, timedelta, strings, objects)
_HEADER_SHOWN = 12  # columns of a CSV header quoted in a message
_MAX_LIST_DEPTH = 32  # a .pt value's lists: 2 levels are used (logits), numpy stops at 64
_VALUE_BYTES = 8  # what numpy makes of a list's number (int64, float64), per value
_NAME_BYTES = 4096  # a class names file's bound: this many bytes per class of --max-classes
_CSV_BYTES_PER_BYTE = 8  # a CSV cell takes at least one byte ("0," or ","), and 8 once read (float64)


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
    if _has_control_character(label):
        raise PredictionsError(
            LABEL_INVALID.format(label=label, path=path, problem="it holds a control character")
        )
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
    if os.path.exists(text) or "=" not in text:  # os.path: False (not an error) for a NUL or a long name
        return Path(text), None
    path, _, label = text.rpartition("=")
    return Path(path), label


def _has_control_character(text: str) -> bool:
    return any(unicodedata.category(char) == "Cc" for char in text)


def _too_many(path: Path, what: str, num_classes: int, max_classes: int) -> PredictionsError:
    return PredictionsError(
        TOO_MANY_CLASSES.format(
            path=path, what=what, limit=max_classes, size=format_bytes(confusion_bytes(num_classes))
        )
    )


def _id_text(value: Any) -> str:
    """A class id as written in a message (integral: checked before)."""
    number = float(value) if isinstance(value, np.floating) else int(value)
    if isinstance(number, float):
        return str(int(number)) if abs(number) < 1e18 else f"{number:.6g}"
    return str(number)


def _array(path: Path, key: str, value: Any) -> NDArray[Any]:
    """``value`` as an array; a ragged or unconvertible value is refused."""
    try:
        return np.asarray(value)
    except (ValueError, TypeError, OverflowError) as error:
        raise PredictionsError(
            _WRONG_SHAPE.format(path=path, key=key, expected="an array", actual=str(error).splitlines()[0])
        ) from error


def _as_class_ids(path: Path, key: str, values: NDArray[Any], max_classes: int) -> NDArray[np.int64]:
    if values.ndim != 1:
        raise PredictionsError(
            _WRONG_SHAPE.format(path=path, key=key, expected="[N]", actual=list(values.shape))
        )
    if values.dtype.kind not in _NUMERIC_KINDS:
        raise PredictionsError(NOT_INTEGER.format(path=path, key=key, problem=f"dtype {values.dtype}"))
    if values.dtype.kind == "f":
        if not np.all(np.isfinite(values)):
            raise PredictionsError(NOT_INTEGER.format(path=path, key=key, problem="NaN or infinite values"))
        if not np.all(values == np.round(values)):
            raise PredictionsError(NOT_INTEGER.format(path=path, key=key, problem="fractional values"))
    if values.size:
        low, high = values.min(), values.max()
        if low < 0:
            raise PredictionsError(
                LABEL_OUT_OF_RANGE.format(path=path, key=key, value=_id_text(low), num_classes="K")
            )
        if high >= max_classes:  # compared in the file's dtype: exact for uint64 and huge floats
            raise _too_many(path, f"{key} holds class id {_id_text(high)}", int(high) + 1, max_classes)
    return values.astype(np.int64, copy=False)


def _class_name_list(path: Path, array: NDArray[Any], expected: int) -> list[str]:
    """The names of ``class_names`` (a 1-D array of ``expected`` strings), distinct and non-empty."""
    if array.ndim != 1 or array.size != expected or array.dtype.kind not in "US":
        raise PredictionsError(
            CLASS_NAMES_INVALID.format(
                path=path, num_classes=expected, problem=f"shape {list(array.shape)} of {array.dtype}"
            )
        )
    try:
        names = [n.decode("utf-8") if isinstance(n, bytes) else str(n) for n in array.tolist()]
    except UnicodeDecodeError:
        raise PredictionsError(
            CLASS_NAMES_INVALID.format(path=path, num_classes=expected, problem="bytes that are not UTF-8")
        ) from None
    first_seen: dict[str, int] = {}
    for class_id, name in enumerate(names):
        if not name.strip():
            raise PredictionsError(
                CLASS_NAMES_INVALID.format(
                    path=path, num_classes=expected, problem=f"an empty name (class {class_id})"
                )
            )
        if _has_control_character(name):
            raise PredictionsError(
                CLASS_NAMES_INVALID.format(
                    path=path,
                    num_classes=expected,
                    problem=f"a control character in {name!r} (class {class_id})",
                )
            )
        if name in first_seen:
            raise PredictionsError(
                CLASS_NAMES_INVALID.format(
                    path=path,
                    num_classes=expected,
                    problem=f"the name {name!r} twice (classes {first_seen[name]} and {class_id})",
                )
            )
        first_seen[name] = class_id
    return names


def _build(
    path: Path, data: dict[str, Any], max_classes: int, column_names: list[str] | None = None
) -> PredictionsFile:
    """Check the arrays of one file and build its :class:`PredictionsFile`."""
    if "y_true" not in data:
        raise PredictionsError(_KEY_MISSING.format(path=path, key="y_true"))
    if "y_pred" not in data and "logits" not in data:
        raise PredictionsError(_NO_PREDICTIONS.format(path=path, keys=sorted(data)))
    if "y_pred" in data and "logits" in data:
        raise PredictionsError(_BOTH_PREDICTIONS.format(path=path))
    y_true = _as_class_ids(path, "y_true", _array(path, "y_true", data["y_true"]), max_classes)
    if y_true.size == 0:
        raise PredictionsError(EMPTY_FILE.format(path=path))
    n = y_true.shape[0]
    logits = None
    if "logits" in data:
        scores = _array(path, "logits", data["logits"])
        if scores.ndim != 2 or scores.shape[0] != n or scores.shape[1] == 0:
            raise PredictionsError(
                _WRONG_SHAPE.format(path=path, key="logits", expected=f"[{n}, K]", actual=list(scores.shape))
            )
        if scores.dtype.kind not in _NUMERIC_KINDS:
            raise PredictionsError(LOGITS_NOT_REAL.format(path=path, dtype=scores.dtype))
        if scores.shape[1] > max_classes:
            raise _too_many(path, f"logits have {scores.shape[1]} columns", scores.shape[1], max_classes)
        logits = scores.astype(np.float64, copy=False)
        bad = ~np.isfinite(logits)
        if bad.any():
            raise NonFinitePredictions(
                NOT_FINITE.format(
                    path=path, count=int(bad.sum()), row=int(np.flatnonzero(bad.any(axis=1))[0])
                )
            )
        y_pred = logits.argmax(axis=1).astype(np.int64)
    else:
        y_pred = _as_class_ids(path, "y_pred", _array(path, "y_pred", data["y_pred"]), max_classes)
        if y_pred.shape != y_true.shape:
            raise PredictionsError(
                _WRONG_SHAPE.format(path=path, key="y_pred", expected=f"[{n}]", actual=list(y_pred.shape))
            )
    names = data.get("class_names", column_names)
    class_names = None
    if names is not None:
        array = _array(path, "class_names", names)
        if logits is None and array.ndim == 1 and array.size > max_classes:
            raise _too_many(path, f"class_names hold {array.size} names", array.size, max_classes)
        class_names = _class_name_list(path, array, logits.shape[1] if logits is not None else array.size)
    if class_names is not None:  # the file names its K classes: its ids must lie below K
        for key, ids in (("y_true", y_true), ("y_pred", y_pred)):
            if int(ids.max()) >= len(class_names):
                raise PredictionsError(
                    LABEL_OUT_OF_RANGE.format(
                        path=path, key=key, value=int(ids.max()), num_classes=len(class_names)
                    )
                )
    return PredictionsFile(path, y_true, y_pred, logits, class_names)


def _too_large(path: Path, what: str, size: int, max_array_bytes: int) -> PredictionsError:
    return PredictionsError(
        ARRAYS_TOO_LARGE.format(
            path=path, what=what, size=format_bytes(size), limit=format_bytes(max_array_bytes)
        )
    )


def _not_an_archive(path: Path) -> PredictionsError:
    """The error for an ``.npz`` that is no zip archive (np.load is never asked: it would load a bare
    ``.npy`` whatever its header declares)."""
    try:
        with path.open("rb") as handle:
            magic = handle.read(6)
    except OSError as error:
        return PredictionsError(FILE_UNREADABLE.format(path=path, error=error))
    if magic == b"\x93NUMPY":
        return PredictionsError(_NOT_A_MAPPING.format(path=path, kind="a single numpy array"))
    return PredictionsError(
        FILE_UNREADABLE.format(path=path, error="it is not a zip archive (numpy.savez writes one)")
    )


def _npz_members(path: Path, max_classes: int, max_array_bytes: int) -> None:
    """Check an ``.npz`` archive's keys and each array's header (shape, dtype) before loading any:
    unknown keys, a logits width above ``max_classes``, a shape larger than the bytes stored (a
    few-kB file declaring terabytes) and arrays above ``max_array_bytes`` in all (a DEFLATE member
    stores far fewer bytes than it declares) are refused without allocating."""
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError):
        raise _not_an_archive(path) from None
    declared_arrays: list[tuple[str, int]] = []
    with archive:
        members = {info.filename.removesuffix(".npy"): info for info in archive.infolist()}
        unknown = sorted(set(members) - set(_KEYS))
        if unknown:
            raise PredictionsError(UNKNOWN_KEYS.format(path=path, keys=unknown))
        for key, info in members.items():
            try:
                with archive.open(info) as handle:
                    version = np.lib.format.read_magic(handle)
                    read_header = (
                        np.lib.format.read_array_header_1_0
                        if version == (1, 0)
                        else np.lib.format.read_array_header_2_0
                    )
                    shape, _, dtype = read_header(handle)
                    header_bytes = handle.tell()
            except Exception:  # a malformed member: np.load reports it
                continue
            if key == "logits" and len(shape) == 2 and shape[1] > max_classes:
                raise _too_many(path, f"logits have {shape[1]} columns", shape[1], max_classes)
            declared = math.prod(shape) * dtype.itemsize
            stored = max(info.file_size - header_bytes, 0)
            if not dtype.hasobject and declared > stored:
                raise PredictionsError(
                    ARRAY_TRUNCATED.format(
                        path=path,
                        key=key,
                        shape=list(shape),
                        size=format_bytes(declared),
                        stored=format_bytes(stored),
                    )
                )
            shown = "[" + ", ".join(str(n) for n in shape) + "]"
            widened = math.prod(shape) * _VALUE_BYTES if dtype.kind in _NUMERIC_KINDS + "b" else declared
            declared_arrays.append((f"{key} {shown} {dtype.name}", max(declared, widened)))
    total = sum(size for _, size in declared_arrays)
    if total > max_array_bytes:
        what = ", ".join(text for text, _ in declared_arrays)
        raise _too_large(path, what, total, max_array_bytes)


def _pt_declared(path: Path, max_array_bytes: int) -> None:
    """Refuse a ``.pt`` file whose content would take more than ``max_array_bytes``: a torch.save
    archive's members by their uncompressed sizes (torch.load reads DEFLATE members too), any other
    file by its size."""
    try:
        with zipfile.ZipFile(path) as archive:
            declared = sum(info.file_size for info in archive.infolist())
            what = "the members of a torch.save archive"
    except (zipfile.BadZipFile, OSError, ValueError):
        declared, what = path.stat().st_size, "a legacy torch.save file"
    if declared > max_array_bytes:
        raise _too_large(path, what, declared, max_array_bytes)


def _list_values(path: Path, key: str, value: Any) -> int:
    """How many values numpy would make of ``value`` (nested lists, tuples, tensors): counted through
    shared references (a list repeated a thousand times is counted a thousand times, without
    expanding it), refusing lists nested past :data:`_MAX_LIST_DEPTH`."""
    counted: dict[int, int] = {}

    def count(item: Any, depth: int) -> int:
        if isinstance(item, torch.Tensor):
            return int(item.numel())
        if not isinstance(item, (list, tuple)):
            return 1
        if depth >= _MAX_LIST_DEPTH:
            raise PredictionsError(LIST_TOO_DEEP.format(path=path, key=key, limit=_MAX_LIST_DEPTH))
        if id(item) not in counted:
            counted[id(item)] = sum(count(child, depth + 1) for child in item)
        return counted[id(item)]

    return count(value, 0)


def _check_lists(path: Path, content: dict[str, Any], max_array_bytes: int) -> None:
    """Refuse a ``.pt``'s values that would take more than ``max_array_bytes`` as int64 / float64
    arrays, before any conversion: lists (a 7-kB pickle of shared references can ask numpy for
    gigabytes) and narrow tensors (200 MB of uint8 class ids are 1.6 GB as int64)."""
    described: list[tuple[str, int]] = []
    for key, value in content.items():
        if isinstance(value, torch.Tensor):
            shown = "[" + ", ".join(str(n) for n in value.shape) + "]"
            dtype = str(value.dtype).removeprefix("torch.")
            described.append((f"{key} {shown} {dtype}", int(value.numel()) * _VALUE_BYTES))
        elif isinstance(value, (list, tuple)):
            values = _list_values(path, str(key), value)
            if values * _VALUE_BYTES > max_array_bytes:
                raise _too_large(
                    path, f"lists of {values} values in {str(key)!r}", values * _VALUE_BYTES, max_array_bytes
                )
            described.append((f"{key}: lists of {values} values", values * _VALUE_BYTES))
    total = sum(size for _, size in described)
    if total > max_array_bytes:
        raise _too_large(path, ", ".join(text for text, _ in described), total, max_array_bytes)


def _check_storage(path: Path, key: str, value: Any) -> None:
    """Refuse a ``.pt`` tensor whose shape needs more bytes than its storage holds: an expanded
    (stride-0) or overlapping view, which a few-kB file can use to declare gigabytes that converting
    it would allocate."""
    if not isinstance(value, torch.Tensor) or value.layout != torch.strided:
        return
    itemsize = value.element_size()
    declared = int(value.numel()) * itemsize
    stored = max(int(value.untyped_storage().nbytes()) - int(value.storage_offset()) * itemsize, 0)
    if declared > stored:
        raise PredictionsError(
            TENSOR_OVER_STORAGE.format(
                path=path,
                key=key,
                shape=list(value.shape),
                size=format_bytes(declared),
                stored=format_bytes(stored),
            )
        )


def _as_numpy(value: Any) -> Any:
    """A tensor of a ``.pt`` file as a numpy array (bfloat16 widened to float32); other values as is."""
    if not isinstance(value, torch.Tensor):
        return value
    value = value.detach().cpu()
    if value.dtype == torch.bfloat16:
        value = value.float()
    return value.resolve_conj().resolve_neg().numpy()


def _read_mapping(path: Path, max_classes: int, max_array_bytes: int) -> dict[str, Any]:
    if path.suffix == ".npz":
        _npz_members(path, max_classes, max_array_bytes)
    else:
        _pt_declared(path, max_array_bytes)
    try:
        if path.suffix == ".npz":
            # Our own handle: np.load leaks the one it opens when a "PK" file is no zip archive.
            with path.open("rb") as handle:
                loaded = np.load(handle, allow_pickle=False)
                if not isinstance(loaded, np.lib.npyio.NpzFile):  # a bare .npy saved under .npz
                    raise PredictionsError(_NOT_A_MAPPING.format(path=path, kind="a single numpy array"))
                with loaded as archive:
                    return {key: archive[key] for key in archive.files}
        with warnings.catch_warnings():
            # torch's notes on a refused or unusual pickle (protocol, sparse checks): the error says it.
            warnings.simplefilter("ignore", UserWarning)
            content = torch.load(path, map_location="cpu", weights_only=True)
        if isinstance(content, dict):
            for key, value in content.items():
                _check_storage(path, str(key), value)
            _check_lists(path, content, max_array_bytes)
            content = {str(key): _as_numpy(value) for key, value in content.items()}
    except PredictionsError:
        raise
    except pickle.UnpicklingError as error:
        raise PredictionsError(FILE_UNREADABLE.format(path=path, error=_PICKLE_REFUSED)) from error
    except Exception as error:  # corrupt archives raise anything from zipfile, pickle, numpy or torch
        raise PredictionsError(
            FILE_UNREADABLE.format(
                path=path, error=str(error).splitlines()[0] if str(error) else type(error).__name__
            )
        ) from error
    if not isinstance(content, dict):
        raise PredictionsError(_NOT_A_MAPPING.format(path=path, kind=type(content).__name__))
    return content


def _columns_text(header: Sequence[str]) -> str:
    """A CSV header for a message, on one line (control characters escaped; the first columns of a
    wide one, each cut at 40 characters)."""
    shown = [
        "".join(repr(char)[1:-1] if unicodedata.category(char) == "Cc" else char for char in column[:40])
        + ("..." if len(column) > 40 else "")
        for column in header[:_HEADER_SHOWN]
    ]
    if len(header) <= _HEADER_SHOWN:
        return ",".join(shown)
    return ",".join(shown) + f",... ({len(header)} columns)"


def _near_miss(header: Sequence[str]) -> str:
    """``DID_YOU_MEAN`` for the first column (among the first few) that looks like a misspelt y_true
    or y_pred, or ``""``."""
    for column in header[:_HEADER_SHOWN]:
        if column in ("y_true", "y_pred"):
            continue
        folded = re.sub(r"[^a-z]", "", column.lower())
        if folded in ("ytrue", "ypred"):
            return DID_YOU_MEAN.format(name=f"y_{folded[1:]}", column=column)
        match = difflib.get_close_matches(column.lower(), ["y_true", "y_pred"], n=1, cutoff=0.8)
        if match:
            return DID_YOU_MEAN.format(name=match[0], column=column)
    return ""


def _csv_header(path: Path, first: list[str], max_classes: int) -> list[str]:
    """The header row's column names, checked (y_true present, no repeat, y_true,y_pred or scores)."""
    header = [cell.strip() for cell in first]
    found = _columns_text(header)
    if "y_true" not in header:
        raise PredictionsError(COLUMN_MISSING.format(path=path, found=found, hint=_near_miss(header)))
    seen: set[str] = set()
    for column in header:
        if column in seen:
            raise PredictionsError(COLUMN_REPEATED.format(path=path, column=column))
        seen.add(column)
    if "y_pred" in header:
        if len(header) > 2:
            unknown = [name for name in header if name not in ("y_true", "y_pred")]
            raise PredictionsError(UNKNOWN_COLUMNS.format(path=path, columns=unknown))
    else:
        if len(header) - 1 > max_classes:
            raise _too_many(path, f"logits have {len(header) - 1} columns", len(header) - 1, max_classes)
        hint = _near_miss(header)
        if len(header) < 3 or hint:
            raise PredictionsError(COLUMNS_UNEXPECTED.format(path=path, found=found, hint=hint))
    return header


def _cell_text(cell: str) -> str:
    """A cell for a message: its first 40 characters."""
    return cell if len(cell) <= 40 else cell[:40] + f"... ({len(cell)} characters)"


def _read_csv(path: Path, max_classes: int, max_array_bytes: int) -> PredictionsFile:
    """Read a CSV file row by row into one float64 buffer (8 bytes a cell, no list of strings), after
    bounding its size: a cell takes at least one byte of the file, so the values take at most
    :data:`_CSV_BYTES_PER_BYTE` times the file's size."""
    size = path.stat().st_size
    if size * _CSV_BYTES_PER_BYTE > max_array_bytes:
        raise _too_large(
            path, f"a CSV file of {format_bytes(size)}", size * _CSV_BYTES_PER_BYTE, max_array_bytes
        )
    values = array.array("d")
    header: list[str] = []
    num_rows = 0
    try:
        # utf-8-sig: a byte-order mark (Excel's "CSV UTF-8") is not part of the first column's name.
        with path.open(newline="", encoding="utf-8-sig") as handle:
            for row in csv.reader(handle):
                if not row:
                    continue
                if not header:
                    header = _csv_header(path, row, max_classes)
                    continue
                num_rows += 1
                line = num_rows + 1  # among the non-empty lines, the header being line 1
                if len(row) != len(header):
                    raise PredictionsError(
                        _ROW_LENGTH.format(path=path, line=line, actual=len(row), expected=len(header))
                    )
                for column, cell in zip(header, row, strict=True):
                    try:
                        values.append(float(cell))
                    except ValueError:
                        raise PredictionsError(
                            CELL_INVALID.format(path=path, line=line, column=column, value=_cell_text(cell))
                        ) from None
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise PredictionsError(FILE_UNREADABLE.format(path=path, error=error)) from error
    if not header or not num_rows:
        raise PredictionsError(EMPTY_FILE.format(path=path))
    table = np.frombuffer(values, dtype=np.float64).reshape(num_rows, len(header))
    columns = dict(zip(header, table.T, strict=True))
    y_true = columns.pop("y_true")
    if "y_pred" in columns:
        return _build(path, {"y_true": y_true, "y_pred": columns["y_pred"]}, max_classes)
    names = [name for name in header if name != "y_true"]
    scores = np.stack(list(columns.values()), axis=1)
    return _build(path, {"y_true": y_true, "logits": scores}, max_classes, names)


def _special_file_kind(path: Path) -> str | None:
    """What ``path`` is when it exists but is no regular file (a FIFO, a socket, a device), else None."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    for test, kind in (
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return kind
    return "a special file"


def _check_max_classes(max_classes: object) -> int:
    if not is_int(max_classes) or max_classes < 1:
        raise PredictionsError(MAX_CLASSES_INVALID.format(value=max_classes))
    return max_classes


def _check_max_array_bytes(max_array_bytes: object) -> int:
    if not is_int(max_array_bytes) or max_array_bytes < 1:
        raise PredictionsError(MAX_ARRAY_BYTES_INVALID.format(value=max_array_bytes))
    return max_array_bytes


def read_predictions(
    path: str | Path,
    *,
    max_classes: int = DEFAULT_MAX_CLASSES,
    max_array_bytes: int = DEFAULT_MAX_ARRAY_BYTES,
    integer_ids: bool = False,
) -> PredictionsFile:
    """Read and check one predictions file (see the module docstring for the formats).

    Args:
        path: the file.
        max_classes: the largest K the file may make (class ids below it, at most this many logits
            columns or class names).
        max_array_bytes: the most bytes the file's arrays may take once read (uncompressed), checked
            from what the file declares before anything of that size is allocated.
        integer_ids: an ``.npz`` / ``.pt`` file's class ids must have an integer dtype (``mr2 tune``'s
            trials, as its Python way in checks them); by default whole floats pass (a CSV's cells).

    Raises:
        PredictionsError: the file is missing, unreadable or malformed, asks for more classes, or
            declares more than ``max_array_bytes``.
    """
    max_classes = _check_max_classes(max_classes)
    max_array_bytes = _check_max_array_bytes(max_array_bytes)
    path = Path(path)
    if os.path.isdir(path):
        raise PredictionsError(_NOT_A_FILE.format(path=path))
    if not os.path.isfile(path):  # os.path: False (not an error) for a NUL byte or a too-long name
        kind = _special_file_kind(path)
        if kind is not None:
            raise PredictionsError(NOT_A_REGULAR_FILE.format(path=path, kind=kind))
        raise PredictionsError(FILE_NOT_FOUND.format(path=path))
    if path.suffix not in _SUFFIXES:
        raise PredictionsError(FORMAT_UNKNOWN.format(path=path, suffix=path.suffix))
    if path.suffix == ".csv":
        return _read_csv(path, max_classes, max_array_bytes)
    data = _read_mapping(path, max_classes, max_array_bytes)
    unknown = sorted(set(data) - set(_KEYS))
    if unknown:
        raise PredictionsError(UNKNOWN_KEYS.format(path=path, keys=unknown))
    if integer_ids:
        for key in ("y_true", "y_pred"):
            dtype = _array(path, key, data[key]).dtype if key in data else None
            if dtype is not None and dtype.kind not in "iu":
                raise PredictionsError(NOT_INTEGER.format(path=path, key=key, problem=f"dtype {dtype}"))
    return _build(path, data, max_classes)


def read_class_names(path: str | Path, *, max_classes: int = DEFAULT_MAX_CLASSES) -> list[str]:
    """Class names from a text file, one per line in class-id order (blank lines at the end ignored).

    Raises:
        PredictionsError: the file is missing, empty, repeats a name or holds more than
            ``max_classes`` names.
    """
    max_classes = _check_max_classes(max_classes)
    path = Path(path)
    try:
        text = read_bounded(path, max_classes * _NAME_BYTES).decode("utf-8")
    except (OSError, UnicodeDecodeError, ReadRefused) as error:
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
    if any(_has_control_character(name) for name in names):
        raise PredictionsError(
            CLASS_NAMES_FILE_INVALID.format(path=path, problem="holds a control character in a name")
        )
    if len(names) > max_classes:
        problem = NAMES_ABOVE_LIMIT.format(
            count=len(names), limit=max_classes, size=format_bytes(confusion_bytes(len(names)))
        )
        raise PredictionsError(CLASS_NAMES_FILE_INVALID.format(path=path, problem=problem))
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
        difference = first_difference(first.y_true, other.y_true)
        if difference is not None:
            raise PredictionsError(Y_TRUE_MISMATCH.format(first=first.path, other=other.path, **difference))
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
    max_classes: int = DEFAULT_MAX_CLASSES,
    max_array_bytes: int = DEFAULT_MAX_ARRAY_BYTES,
) -> list[RunRecord]:
    """Read predictions files ``FILE[=LABEL]`` as comparable runs of the report.

    Args:
        specs: the files, each optionally followed by ``=method`` or ``=method@seed``.
        class_names: the K class names (overriding the names stored in ``.csv`` headers; ``.npz`` /
            ``.pt`` files that store names must agree with them).
        max_classes: the largest K (see the module docstring); checked before any K x K matrix is
            allocated.
        max_array_bytes: the most bytes one file's arrays may take once read (see the module
            docstring); checked before they are loaded.

    Returns:
        One :class:`RunRecord` per file (``path`` the file, no data set name, split ``test``).

    Raises:
        PredictionsError: a file is malformed, or the files disagree on the test set or the classes.
    """
    max_classes = _check_max_classes(max_classes)
    max_array_bytes = _check_max_array_bytes(max_array_bytes)
    if not specs:
        raise PredictionsError(_NO_FILES)
    if class_names is not None and len(class_names) > max_classes:
        count = len(class_names)
        raise PredictionsError(
            _GIVEN_NAMES_ABOVE_LIMIT.format(
                count=count, limit=max_classes, size=format_bytes(confusion_bytes(count))
            )
        )
    labelled = [_split_spec(spec) for spec in specs]
    labels = [
        (path, parse_label(label, path) if label is not None else (path.stem, None))
        for path, label in labelled
    ]
    files = [
        read_predictions(path, max_classes=max_classes, max_array_bytes=max_array_bytes)
        for path, _ in labelled
    ]
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
