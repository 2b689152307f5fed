"""Reading and validating run directories (the contract of ``docs/run-directory.md``).

A run directory holds at least ``config.yaml`` (the resolved configuration) and ``final.json`` (the
final evaluation, whose presence means the run finished); ``metrics.jsonl`` (one JSON object per
epoch) is optional. :func:`load_run` reads one, :func:`load_runs` reads several and checks that they
can be compared (same data set, class count, class names, split and test set). The files are found,
and ``final.json`` is read, through :class:`mr2.rundir.RunDirectory` (its record:
:class:`mr2.rundir.FinalRecord`); a run directory left by a killed ``--overwrite`` is put back first
(:meth:`mr2.rundir.RunDirectory.recover_overwrite`).

Every problem raises :class:`RunDirectoryError` with a message constant (here, or in
:mod:`mr2.rundir` for the directory and the record's schema), naming the directory and saying how to
fix it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from numpy.typing import NDArray

from mr2.report.accuracy import confusion_accuracy
from mr2.report.exceptions import ReportError, RunDirectoryError
from mr2.report.validation import validate_confusion
from mr2.rundir import RunDirectory
from mr2.rundir.layout import FILE_UNREADABLE, JSON_TOO_DEEP
from mr2.rundir.record import FIELD_INVALID, Matrix, PerClass

__all__ = ["RunRecord", "check_comparable", "first_difference", "load_run", "load_runs"]

_CONFIG_NOT_MAPPING = "config.yaml in {path} must hold a mapping of settings, got {kind}"
SAMPLE_COUNT_MISMATCH = (
    "final.json in {path}: num_samples is {num_samples} but the confusion matrix counts {counted}; "
    "the file is inconsistent, re-run the final evaluation"
)
_METRICS_LINE_INVALID = (
    "metrics.jsonl in {path}, line {line}: not a JSON object ({error}); the file is corrupt: "
    "restore it or remove the line"
)
_NO_RUNS = "no run directory given; pass at least one directory written by `mr2 train`"
DATASET_MISMATCH = (
    "runs come from different data sets: {first} is {first_value!r} but {other} is "
    "{other_value!r}; report runs of one data set at a time"
)
NUM_CLASSES_MISMATCH = (
    "runs have different class counts: {first} has {first_value} classes but {other} has {other_value}; "
    "report runs of one data set at a time"
)
CLASS_NAMES_MISMATCH = (
    "runs disagree on the class names ({first} vs {other}); they use different label orders or "
    "data sets and cannot be compared class by class"
)
SPLIT_MISMATCH = (
    "runs were evaluated on different splits: {first} on {first_value!r}, {other} on "
    "{other_value!r}; compare runs evaluated on the same split"
)
TEST_SET_MISMATCH = (
    "runs were evaluated on different test sets: the per-class sample counts of {first} and {other} "
    "differ (first difference at class {index}: {first_value} vs {other_value}); evaluate every "
    "run on the same test set"
)
DUPLICATE_RUN = (
    "{first} and {other} are both method {method!r} with seed {seed!r}; pass each run once (a "
    "duplicated run would count twice in the mean over seeds)"
)
DUPLICATE_NAME = (
    "{first} and {other} have the same run name {name!r}; give runs distinct names (run_name in "
    "final.json)"
)
#: What every run must share with the first, in the order checked (None: not known, not compared).
_SAME = (
    ("dataset", DATASET_MISMATCH),
    ("num_classes", NUM_CLASSES_MISMATCH),
    ("class_names", CLASS_NAMES_MISMATCH),
    ("split", SPLIT_MISMATCH),
)


@dataclass
class RunRecord:
    """One evaluated run: what the report needs from its directory.

    Attributes:
        name: run name (``run_name`` of final.json, else the directory name).
        method: training method (``erm``, ``mr2``, ...).
        confusion: test confusion matrix, int64 [K, K].
        seed: random seed of the run (None if unknown; runs without a seed cannot be paired).
        dataset: data set name.
        split: evaluated split (``test``).
        class_names: K names, or None.
        validation_confusion: confusion matrix on the validation split, or None.
        validation_per_class_accuracy: per-class validation accuracy [K], or None.
        class_statistics: the method's per-class statistics by name -> [K] arrays (MR2:
            ``mean_sq_norm``, ``spread``, ``second_moment``, ``temperatures``; HBR: ``class_hardness``,
            ``resampled_count``; center loss: ``center_sq_norm``), or None.
        logit_margins: ``{"mean", "median"}`` -> [K] arrays, or None.
        metrics: the per-epoch records of metrics.jsonl (possibly empty).
        config: the resolved configuration (config.yaml).
        path: the run directory, or None for a run built in memory.
    """

    name: str
    method: str
    confusion: NDArray[np.int64]
    seed: int | None = None
    dataset: str | None = None
    split: str = "test"
    class_names: list[str] | None = None
    validation_confusion: NDArray[np.int64] | None = None
    validation_per_class_accuracy: NDArray[np.float64] | None = None
    class_statistics: dict[str, NDArray[np.float64]] | None = None
    logit_margins: dict[str, NDArray[np.float64]] | None = None
    metrics: list[dict[str, Any]] = field(default_factory=list)
    config: dict[str, Any] | None = None
    path: Path | None = None

    def __post_init__(self) -> None:
        self.confusion = validate_confusion(self.confusion)

    @property
    def num_classes(self) -> int:
        """K."""
        return int(self.confusion.shape[0])

    @property
    def label(self) -> str:
        """How error messages name the run: its directory, else its name."""
        return str(self.path) if self.path is not None else self.name

    @property
    def support(self) -> NDArray[np.int64]:
        """Test samples per class, [K]."""
        return self.confusion.sum(axis=1)

    def validation_accuracy(self) -> NDArray[np.float64] | None:
        """Per-class validation accuracy [K] (NaN: class without validation samples), or None."""
        if self.validation_confusion is not None:
            return confusion_accuracy(self.validation_confusion)
        return self.validation_per_class_accuracy


def _arrays(values: Mapping[str, PerClass] | None) -> dict[str, NDArray[np.float64]] | None:
    if values is None:
        return None
    return {key: np.asarray(series, dtype=np.float64) for key, series in values.items()}


def _confusion(path: Path, value: Matrix, field_name: str) -> NDArray[np.int64]:
    """The counts of a confusion matrix of the record (its shape is checked by the record)."""
    try:
        return validate_confusion(value)
    except (ReportError, ValueError, TypeError) as error:
        raise RunDirectoryError(
            FIELD_INVALID.format(path=path, field=field_name, problem=str(error))
        ) from error


def _read_metrics(files: RunDirectory) -> list[dict[str, Any]]:
    if not files.metrics.is_file():
        return []
    records: list[dict[str, Any]] = []
    for number, line in enumerate(files.metrics.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise RunDirectoryError(
                _METRICS_LINE_INVALID.format(path=files.path, line=number, error=error)
            ) from error
        except RecursionError:
            raise RunDirectoryError(
                _METRICS_LINE_INVALID.format(path=files.path, line=number, error=JSON_TOO_DEEP)
            ) from None
        if not isinstance(record, dict):
            raise RunDirectoryError(
                _METRICS_LINE_INVALID.format(path=files.path, line=number, error=type(record).__name__)
            )
        records.append(record)
    return records


def load_run(path: str | Path) -> RunRecord:
    """Read and validate one run directory.

    Args:
        path: the directory written by ``mr2 train``.

    Returns:
        The :class:`RunRecord`.

    Raises:
        RunDirectoryError: the directory is missing, unfinished, corrupt or inconsistent.
    """
    path = Path(path)
    files = RunDirectory(path)
    files.require_finished()
    try:
        config = yaml.safe_load(files.config_file.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        raise RunDirectoryError(
            FILE_UNREADABLE.format(file=files.config_file.name, path=path, error=error)
        ) from error
    if not isinstance(config, dict):
        raise RunDirectoryError(_CONFIG_NOT_MAPPING.format(path=path, kind=type(config).__name__))
    record = files.read_final()
    confusion = _confusion(path, record.confusion_matrix, "confusion_matrix")
    if record.num_samples is not None and record.num_samples != int(confusion.sum()):
        raise RunDirectoryError(
            SAMPLE_COUNT_MISMATCH.format(
                path=path, num_samples=record.num_samples, counted=int(confusion.sum())
            )
        )
    validation_confusion = None
    validation_accuracy = None
    if record.validation is not None:
        if record.validation.confusion_matrix is not None:
            validation_confusion = _confusion(
                path, record.validation.confusion_matrix, "validation.confusion_matrix"
            )
        if record.validation.per_class_accuracy is not None:
            validation_accuracy = np.asarray(record.validation.per_class_accuracy, dtype=np.float64)
    class_names = record.dataset.class_names
    return RunRecord(
        name=record.run_name or path.resolve().name,
        method=record.method,
        confusion=confusion,
        seed=record.seed,
        dataset=record.dataset.name,
        split=record.split,
        class_names=list(class_names) if class_names is not None else None,
        validation_confusion=validation_confusion,
        validation_per_class_accuracy=validation_accuracy,
        class_statistics=_arrays(record.class_statistics),
        logit_margins=_arrays(record.logit_margins),
        metrics=_read_metrics(files),
        config=config,
        path=path,
    )


def first_difference(first: NDArray[Any], other: NDArray[Any]) -> dict[str, int] | None:
    """Where two arrays of integers of one length first differ: ``index``, ``first_value`` and
    ``other_value`` (the fields of the messages that say so), or None where they are equal.

    Example:
        >>> first_difference(np.array([1, 2, 3]), np.array([1, 5, 4]))
        {'index': 1, 'first_value': 2, 'other_value': 5}
    """
    differs = np.flatnonzero(other != first)
    if not differs.size:
        return None
    index = int(differs[0])
    return {"index": index, "first_value": int(first[index]), "other_value": int(other[index])}


def check_comparable(runs: Sequence[RunRecord]) -> None:
    """Check that runs can be compared class by class.

    Raises:
        RunDirectoryError: no run, or runs differing in data set, class count, class names, split,
            per-class test counts, or a repeated (method, seed) or run name.
    """
    if not runs:
        raise RunDirectoryError(_NO_RUNS)
    first = runs[0]
    seen: dict[tuple[str, int | None], RunRecord] = {}
    names: dict[str, RunRecord] = {}
    for run in runs:
        for attribute, message in _SAME:
            mine, theirs = getattr(first, attribute), getattr(run, attribute)
            if mine is not None and theirs is not None and mine != theirs:
                raise RunDirectoryError(
                    message.format(first=first.label, other=run.label, first_value=mine, other_value=theirs)
                )
        difference = first_difference(first.support, run.support)
        if difference is not None:
            raise RunDirectoryError(
                TEST_SET_MISMATCH.format(first=first.label, other=run.label, **difference)
            )
        key = (run.method, run.seed)
        if run.seed is not None and key in seen:
            raise RunDirectoryError(
                DUPLICATE_RUN.format(
                    first=seen[key].label, other=run.label, method=run.method, seed=run.seed
                )
            )
        seen[key] = run
        if run.name in names:
            raise RunDirectoryError(
                DUPLICATE_NAME.format(first=names[run.name].label, other=run.label, name=run.name)
            )
        names[run.name] = run


def load_runs(paths: Sequence[str | Path]) -> list[RunRecord]:
    """Read several run directories and check that they are comparable (:func:`check_comparable`)."""
    runs = [load_run(p) for p in paths]
    check_comparable(runs)
    return runs
