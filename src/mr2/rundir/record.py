"""The run record: the content of ``final.json`` (and of ``eval_<split>.json``) as one typed value.

The engine writes a :class:`FinalRecord` (:meth:`FinalRecord.to_dict`, through
:meth:`mr2.rundir.RunDirectory.write_final`) and every reader (the report, ``mr2 tune``) reads it back
through :meth:`FinalRecord.from_dict` (:meth:`mr2.rundir.RunDirectory.read_final`), so the format is
written once. The format is documented in ``docs/run-directory.md``.

Per-class figures are tuples of K numbers (NaN: undefined, written as ``NaN`` and read back from
``NaN`` or ``null``). ``class_statistics`` holds whatever per-class statistics the method records,
under their own names (MR2: ``mean_sq_norm``, ``spread``, ``second_moment``, ``temperatures``; HBR:
``class_hardness``, ``resampled_count``; center loss: ``center_sq_norm``).

What the reader checks is the schema: the format version, the required fields (``method``,
``dataset.num_classes``, ``confusion_matrix``), the types of the others and the length of every
per-class list, the shape of the confusion matrices; a problem raises
:class:`~mr2.rundir.errors.RunDirectoryError` naming the file. The counts of the confusion matrix
(non-negative integers summing to ``num_samples``) are checked by the report
(:func:`mr2.report.run_dir.load_run`).

Example:
    >>> record = FinalRecord(method="erm", dataset=DatasetInfo(num_classes=2),
    ...                      confusion_matrix=((3, 1), (0, 4)), per_class_accuracy=(0.75, 1.0))
    >>> FinalRecord.from_dict(record.to_dict(), "runs/erm") == record
    True
    >>> FinalRecord.from_dict({**record.to_dict(), "format_version": 9}, "runs/erm")
    Traceback (most recent call last):
    ...
    mr2.rundir.errors.RunDirectoryError: final.json in runs/erm has format_version 9; this mr2 reads \
versions [1]: upgrade mr2 or re-evaluate the run with this version
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mr2.rundir.errors import RunDirectoryError
from mr2.value_types import is_int, is_number

__all__ = [
    "CONFUSION_SHAPE",
    "FIELD_INVALID",
    "FIELD_MISSING",
    "FINAL_NOT_MAPPING",
    "FORMAT_UNSUPPORTED",
    "FORMAT_VERSION",
    "SUPPORTED_FORMAT_VERSIONS",
    "DatasetInfo",
    "FinalRecord",
    "SplitFigures",
]

#: The version this mr2 writes.
FORMAT_VERSION = 1
#: The versions this mr2 reads.
SUPPORTED_FORMAT_VERSIONS = (1,)

FINAL_NOT_MAPPING = "final.json in {path} must hold a JSON object, got {kind}"
FORMAT_UNSUPPORTED = (
    "final.json in {path} has format_version {version!r}; this mr2 reads versions {supported}: "
    "upgrade mr2 or re-evaluate the run with this version"
)
FIELD_MISSING = (
    "final.json in {path} lacks the field {field!r}; it was not written by a finished `mr2 train` "
    "(see docs/run-directory.md)"
)
FIELD_INVALID = "final.json in {path}: field {field!r} is invalid: {problem}"
CONFUSION_SHAPE = (
    "final.json in {path}: confusion_matrix has shape {shape} but dataset.num_classes is "
    "{num_classes}; the file is inconsistent, re-run the final evaluation"
)

#: K per-class numbers (NaN: undefined).
PerClass = tuple[float, ...]
#: A K x K matrix of counts, rows: true class.
Matrix = tuple[tuple[int, ...], ...]
_SPLIT_FIELDS = ("overall_accuracy", "per_class_accuracy", "confusion_matrix")


@dataclass(frozen=True)
class DatasetInfo:
    """The evaluated data set: ``dataset`` of final.json.

    Attributes:
        num_classes: K.
        name: the data set's name (None: unknown).
        class_names: K names (None: unnamed).
    """

    num_classes: int
    name: str | None = None
    class_names: tuple[str, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "num_classes": self.num_classes,
            "class_names": None if self.class_names is None else list(self.class_names),
        }


@dataclass(frozen=True)
class SplitFigures:
    """The figures of one more split (``validation`` of final.json); each may be absent (None).

    Attributes:
        overall_accuracy: accuracy over the split's samples.
        per_class_accuracy: [K] per-class accuracy.
        confusion_matrix: [K, K] counts.
    """

    overall_accuracy: float | None = None
    per_class_accuracy: PerClass | None = None
    confusion_matrix: Matrix | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "overall_accuracy": self.overall_accuracy,
            "per_class_accuracy": _list(self.per_class_accuracy),
            "confusion_matrix": _rows(self.confusion_matrix),
        }


@dataclass(frozen=True)
class FinalRecord:
    """The final evaluation of a run (``final.json``) or a re-evaluation (``eval_<split>.json``).

    Attributes:
        method: the training method (``erm``, ``mr2``, ...).
        dataset: the data set.
        confusion_matrix: [K, K] counts on ``split`` (rows: true class).
        run_name: the run's name (None: unknown; readers use the directory's name).
        seed: the run's seed (None: unknown).
        split: the evaluated split (``test`` or ``val``).
        num_samples: evaluated samples.
        overall_accuracy: accuracy over them.
        per_class_accuracy: [K] (NaN: a class without samples).
        class_statistics: the method's per-class statistics by name, each [K] (None: it has none).
        logit_margins: ``mean`` and ``median`` per-class logit margin, each [K].
        validation: the validation split's figures (None: the run has no validation split).
        checkpoint: the checkpoint evaluated (``eval_<split>.json`` only: ``last.pt`` / ``best.pt``).
        format_version: :data:`FORMAT_VERSION`.
    """

    method: str
    dataset: DatasetInfo
    confusion_matrix: Matrix
    run_name: str | None = None
    seed: int | None = None
    split: str = "test"
    num_samples: int | None = None
    overall_accuracy: float | None = None
    per_class_accuracy: PerClass | None = None
    class_statistics: Mapping[str, PerClass] | None = None
    logit_margins: Mapping[str, PerClass] | None = None
    validation: SplitFigures | None = None
    checkpoint: str | None = None
    format_version: int = FORMAT_VERSION

    @property
    def num_classes(self) -> int:
        """K."""
        return self.dataset.num_classes

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of final.json, its keys in the file's order (``validation`` and
        ``checkpoint`` only when present)."""
        out: dict[str, Any] = {
            "format_version": self.format_version,
            "run_name": self.run_name,
            "method": self.method,
            "seed": self.seed,
            "dataset": self.dataset.to_dict(),
            "split": self.split,
            "num_samples": self.num_samples,
            "confusion_matrix": _rows(self.confusion_matrix),
            "overall_accuracy": self.overall_accuracy,
            "per_class_accuracy": _list(self.per_class_accuracy),
            "class_statistics": _lists(self.class_statistics),
            "logit_margins": _lists(self.logit_margins),
        }
        if self.validation is not None:
            out["validation"] = self.validation.to_dict()
        if self.checkpoint is not None:
            out["checkpoint"] = self.checkpoint
        return out

    @classmethod
    def from_dict(cls, data: Any, run_dir: str | os.PathLike[str]) -> FinalRecord:
        """Read and check the JSON object of ``<run_dir>/final.json``.

        Per-class lists that are null or empty are left out; a mapping of them with none left is
        None.

        Raises:
            RunDirectoryError: not an object, an unsupported ``format_version``, a required field
                missing, a field of the wrong type or a per-class list of the wrong length; the
                message names the file and the field.
        """
        reader = _Reader(run_dir)
        if not isinstance(data, dict):
            raise RunDirectoryError(FINAL_NOT_MAPPING.format(path=reader.path, kind=type(data).__name__))
        version = data.get("format_version")
        if version not in SUPPORTED_FORMAT_VERSIONS:
            raise RunDirectoryError(FORMAT_UNSUPPORTED.format(
                path=reader.path, version=version, supported=list(SUPPORTED_FORMAT_VERSIONS)
            ))
        for required in ("method", "dataset", "confusion_matrix"):
            if data.get(required) is None:
                raise reader.missing(required)
        dataset = reader.dataset(data["dataset"])
        k = dataset.num_classes
        validation = data.get("validation")
        return cls(
            method=str(data["method"]),
            dataset=dataset,
            confusion_matrix=reader.matrix(data["confusion_matrix"], "confusion_matrix", k),
            run_name=None if not data.get("run_name") else str(data["run_name"]),
            seed=reader.optional_int(data.get("seed"), "seed"),
            split=str(data.get("split", "test")),
            num_samples=reader.optional_int(data.get("num_samples"), "num_samples"),
            overall_accuracy=reader.optional_number(data.get("overall_accuracy"), "overall_accuracy"),
            per_class_accuracy=reader.per_class(data.get("per_class_accuracy"), "per_class_accuracy", k),
            class_statistics=reader.per_class_mapping(data.get("class_statistics"), "class_statistics", k),
            logit_margins=reader.per_class_mapping(data.get("logit_margins"), "logit_margins", k),
            validation=reader.split_figures(validation, "validation", k) if isinstance(validation, dict)
            else None,
            checkpoint=None if data.get("checkpoint") is None else str(data["checkpoint"]),
            format_version=int(version),
        )


def _list(values: PerClass | None) -> list[float] | None:
    return None if values is None else list(values)


def _rows(matrix: Matrix | None) -> list[list[int]] | None:
    return None if matrix is None else [list(row) for row in matrix]


def _lists(mapping: Mapping[str, PerClass] | None) -> dict[str, list[float]] | None:
    return None if mapping is None else {key: list(values) for key, values in mapping.items()}


class _Reader:
    """The checks of :meth:`FinalRecord.from_dict`, each raising the message for its field."""

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.path = run_dir

    def missing(self, field: str) -> RunDirectoryError:
        return RunDirectoryError(FIELD_MISSING.format(path=self.path, field=field))

    def invalid(self, field: str, problem: str) -> RunDirectoryError:
        return RunDirectoryError(FIELD_INVALID.format(path=self.path, field=field, problem=problem))

    def dataset(self, value: Any) -> DatasetInfo:
        if not isinstance(value, dict) or "num_classes" not in value:
            raise self.missing("dataset.num_classes")
        k = value["num_classes"]
        if not is_int(k) or k < 1:
            raise self.invalid("dataset.num_classes", f"not a positive integer: {k!r}")
        names = value.get("class_names")
        if names is not None and (not isinstance(names, list) or len(names) != k):
            raise self.invalid("dataset.class_names", f"expected a list of {k} names")
        return DatasetInfo(
            num_classes=k,
            name=None if value.get("name") is None else str(value["name"]),
            class_names=None if names is None else tuple(str(name) for name in names),
        )

    def optional_int(self, value: Any, field: str) -> int | None:
        if value is not None and not is_int(value):
            raise self.invalid(field, f"not an integer: {value!r}")
        return value

    def optional_number(self, value: Any, field: str) -> float | None:
        if value is not None and not is_number(value):
            raise self.invalid(field, f"not a number: {value!r}")
        return value

    def matrix(self, value: Any, field: str, k: int) -> Matrix:
        rows = value if isinstance(value, list) and all(isinstance(row, list) for row in value) else []
        if not rows or any(len(row) != len(rows[0]) for row in rows):
            raise self.invalid(field, f"expected {k} rows of {k} counts")
        if (len(rows), len(rows[0])) != (k, k):
            raise RunDirectoryError(CONFUSION_SHAPE.format(path=self.path, shape=(len(rows), len(rows[0])),
                                                           num_classes=k))
        for row in rows:
            for count in row:
                if not is_number(count):
                    raise self.invalid(field, f"not a number: {count!r}")
        return tuple(tuple(row) for row in rows)

    def per_class(self, value: Any, field: str, k: int) -> PerClass | None:
        if value is None or (isinstance(value, list) and not value):
            return None
        if not isinstance(value, list):
            raise self.invalid(field, f"expected a list of {k} numbers")
        for item in value:
            if item is not None and not is_number(item):
                raise self.invalid(field, f"not a number: {item!r}")
        if len(value) != k:
            raise self.invalid(field, f"expected {k} values, got shape ({len(value)},)")
        return tuple(math.nan if item is None else item for item in value)

    def per_class_mapping(self, value: Any, field: str, k: int) -> dict[str, PerClass] | None:
        if value is None:
            return None
        if not isinstance(value, dict):
            raise self.invalid(field, "expected an object or null")
        out = {}
        for key, values in value.items():
            parsed = self.per_class(values, f"{field}.{key}", k)
            if parsed is not None:
                out[str(key)] = parsed
        return out or None

    def split_figures(self, value: dict[str, Any], field: str, k: int) -> SplitFigures:
        overall, per_class, matrix = (value.get(key) for key in _SPLIT_FIELDS)
        return SplitFigures(
            overall_accuracy=self.optional_number(overall, f"{field}.overall_accuracy"),
            per_class_accuracy=self.per_class(per_class, f"{field}.per_class_accuracy", k),
            confusion_matrix=self.matrix(matrix, f"{field}.confusion_matrix", k) if matrix else None,
        )
