"""Reading and validating run directories (the contract of ``docs/run-directory.md``).

A run directory holds at least ``config.yaml`` (the resolved configuration) and ``final.json`` (the
final evaluation, whose presence means the run finished); ``metrics.jsonl`` (one JSON object per
epoch) is optional. :func:`load_run` reads one, :func:`load_runs` reads several and checks that they
can be compared (same data set, class count, class names, split and test set). A run directory left
by a killed ``--overwrite`` is put back first (:meth:`mr2.rundir.RunDirectory.recover_overwrite`).

Every problem raises :class:`RunDirectoryError` with one of the message constants below, naming the
directory and saying how to fix it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from numpy.typing import NDArray

from mr2.checks import is_int
from mr2.report.accuracy import confusion_accuracy
from mr2.report.exceptions import ReportError, RunDirectoryError
from mr2.report.validation import validate_confusion
from mr2.rundir import RunDirectory as _RunFiles
from mr2.rundir import RunDirectoryError as _RunFilesError

__all__ = ["SUPPORTED_FORMAT_VERSIONS", "RunRecord", "check_comparable", "load_run", "load_runs"]

SUPPORTED_FORMAT_VERSIONS = (1,)

RUN_DIR_NOT_FOUND = "run directory {path} does not exist; pass a directory written by `mr2 train`"
RUN_DIR_NOT_A_DIRECTORY = "{path} is a file, not a run directory; pass the directory that holds final.json"
CONFIG_MISSING = (
    "{path} has no config.yaml, so it is not a run directory written by `mr2 train` (or it was "
    "copied incompletely); copy the whole run directory"
)
RUN_UNFINISHED = (
    "{path} has no final.json: the run is unfinished, still running or crashed; wait for it to end "
    "or resume it from checkpoints/last.pt, then report again"
)
FILE_UNREADABLE = (
    "{file} in {path} cannot be parsed ({error}); the file is corrupt or half-written: re-run the "
    "final evaluation of this run (or remove it from the report)"
)
CONFIG_NOT_MAPPING = "config.yaml in {path} must hold a mapping of settings, got {kind}"
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
SAMPLE_COUNT_MISMATCH = (
    "final.json in {path}: num_samples is {num_samples} but the confusion matrix counts {counted}; "
    "the file is inconsistent, re-run the final evaluation"
)
METRICS_LINE_INVALID = (
    "metrics.jsonl in {path}, line {line}: not a JSON object ({error}); the file is corrupt: "
    "restore it or remove the line"
)
NO_RUNS = "no run directory given; pass at least one directory written by `mr2 train`"
DATASET_MISMATCH = (
    "runs come from different data sets: {first} is {first_dataset!r} but {other} is "
    "{other_dataset!r}; report runs of one data set at a time"
)
NUM_CLASSES_MISMATCH = (
    "runs have different class counts: {first} has {first_k} classes but {other} has {other_k}; "
    "report runs of one data set at a time"
)
CLASS_NAMES_MISMATCH = (
    "runs disagree on the class names ({first} vs {other}); they use different label orders or "
    "data sets and cannot be compared class by class"
)
SPLIT_MISMATCH = (
    "runs were evaluated on different splits: {first} on {first_split!r}, {other} on "
    "{other_split!r}; compare runs evaluated on the same split"
)
TEST_SET_MISMATCH = (
    "runs were evaluated on different test sets: the per-class sample counts of {first} and {other} "
    "differ (first difference at class {class_id}: {first_count} vs {other_count}); evaluate every "
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


def _to_float_array(values: Any) -> NDArray[np.float64]:
    """A list with nulls (JSON) as a float64 array with NaN."""
    return np.array([math.nan if v is None else v for v in values], dtype=np.float64)


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
        class_statistics: ``{"mean_sq_norm", "spread", "second_moment", "temperatures"}`` -> [K]
            arrays (MR2), or None.
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


def _read_json(path: Path, file: Path) -> Any:
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise RunDirectoryError(
            FILE_UNREADABLE.format(file=file.name, path=path, error=error)
        ) from error


def _per_class_lists(
    path: Path, container: Any, field_name: str, keys: Iterable[str], num_classes: int
) -> dict[str, NDArray[np.float64]] | None:
    if container is None:
        return None
    if not isinstance(container, dict):
        raise RunDirectoryError(
            FIELD_INVALID.format(path=path, field=field_name, problem="expected an object or null")
        )
    out: dict[str, NDArray[np.float64]] = {}
    for key in keys:
        values = container.get(key)
        if values is None or (isinstance(values, list) and not values):
            continue
        try:
            array = _to_float_array(values)
        except (TypeError, ValueError) as error:
            raise RunDirectoryError(
                FIELD_INVALID.format(path=path, field=f"{field_name}.{key}", problem=str(error))
            ) from error
        if array.shape != (num_classes,):
            raise RunDirectoryError(
                FIELD_INVALID.format(
                    path=path,
                    field=f"{field_name}.{key}",
                    problem=f"expected {num_classes} values, got shape {array.shape}",
                )
            )
        out[key] = array
    return out or None


def _confusion(path: Path, value: Any, field_name: str, num_classes: int) -> NDArray[np.int64]:
    try:
        matrix = validate_confusion(value)
    except (ReportError, ValueError, TypeError) as error:
        raise RunDirectoryError(
            FIELD_INVALID.format(path=path, field=field_name, problem=str(error))
        ) from error
    if matrix.shape != (num_classes, num_classes):
        raise RunDirectoryError(
            CONFUSION_SHAPE.format(path=path, shape=matrix.shape, num_classes=num_classes)
        )
    return matrix


def _read_metrics(path: Path) -> list[dict[str, Any]]:
    file = path / "metrics.jsonl"
    if not file.is_file():
        return []
    records: list[dict[str, Any]] = []
    for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise RunDirectoryError(
                METRICS_LINE_INVALID.format(path=path, line=number, error=error)
            ) from error
        if not isinstance(record, dict):
            raise RunDirectoryError(
                METRICS_LINE_INVALID.format(path=path, line=number, error=type(record).__name__)
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
    if not path.exists():
        raise RunDirectoryError(RUN_DIR_NOT_FOUND.format(path=path))
    if not path.is_dir():
        raise RunDirectoryError(RUN_DIR_NOT_A_DIRECTORY.format(path=path))
    try:
        _RunFiles(path).recover_overwrite()  # a killed --overwrite: the previous run back in place
    except _RunFilesError as error:
        raise RunDirectoryError(str(error)) from error
    if not (path / "config.yaml").is_file():
        raise RunDirectoryError(CONFIG_MISSING.format(path=path))
    if not (path / "final.json").is_file():
        raise RunDirectoryError(RUN_UNFINISHED.format(path=path))
    try:
        config = yaml.safe_load((path / "config.yaml").read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        raise RunDirectoryError(
            FILE_UNREADABLE.format(file="config.yaml", path=path, error=error)
        ) from error
    if not isinstance(config, dict):
        raise RunDirectoryError(CONFIG_NOT_MAPPING.format(path=path, kind=type(config).__name__))
    final = _read_json(path, path / "final.json")
    if not isinstance(final, dict):
        raise RunDirectoryError(FINAL_NOT_MAPPING.format(path=path, kind=type(final).__name__))
    version = final.get("format_version")
    if version not in SUPPORTED_FORMAT_VERSIONS:
        raise RunDirectoryError(
            FORMAT_UNSUPPORTED.format(
                path=path, version=version, supported=list(SUPPORTED_FORMAT_VERSIONS)
            )
        )
    for required in ("method", "dataset", "confusion_matrix"):
        if final.get(required) is None:
            raise RunDirectoryError(FIELD_MISSING.format(path=path, field=required))
    dataset = final["dataset"]
    if not isinstance(dataset, dict) or "num_classes" not in dataset:
        raise RunDirectoryError(FIELD_MISSING.format(path=path, field="dataset.num_classes"))
    num_classes = dataset["num_classes"]
    if not is_int(num_classes) or num_classes < 1:
        raise RunDirectoryError(
            FIELD_INVALID.format(
                path=path, field="dataset.num_classes", problem=f"not a positive integer: {num_classes!r}"
            )
        )
    confusion = _confusion(path, final["confusion_matrix"], "confusion_matrix", num_classes)
    num_samples = final.get("num_samples")
    if num_samples is not None and num_samples != int(confusion.sum()):
        raise RunDirectoryError(
            SAMPLE_COUNT_MISMATCH.format(
                path=path, num_samples=num_samples, counted=int(confusion.sum())
            )
        )
    class_names = dataset.get("class_names")
    if class_names is not None and (
        not isinstance(class_names, list) or len(class_names) != num_classes
    ):
        raise RunDirectoryError(
            FIELD_INVALID.format(
                path=path,
                field="dataset.class_names",
                problem=f"expected a list of {num_classes} names",
            )
        )
    seed = final.get("seed")
    if seed is not None and (not is_int(seed)):
        raise RunDirectoryError(
            FIELD_INVALID.format(path=path, field="seed", problem=f"not an integer: {seed!r}")
        )

    validation_confusion = None
    validation_accuracy = None
    validation = final.get("validation")
    if isinstance(validation, dict):
        if validation.get("confusion_matrix"):
            validation_confusion = _confusion(
                path, validation["confusion_matrix"], "validation.confusion_matrix", num_classes
            )
        lists = _per_class_lists(
            path, validation, "validation", ("per_class_accuracy",), num_classes
        )
        if lists is not None:
            validation_accuracy = lists["per_class_accuracy"]

    return RunRecord(
        name=str(final.get("run_name") or path.resolve().name),
        method=str(final["method"]),
        confusion=confusion,
        seed=seed,
        dataset=None if dataset.get("name") is None else str(dataset["name"]),
        split=str(final.get("split", "test")),
        class_names=[str(n) for n in class_names] if class_names is not None else None,
        validation_confusion=validation_confusion,
        validation_per_class_accuracy=validation_accuracy,
        class_statistics=_per_class_lists(
            path,
            final.get("class_statistics"),
            "class_statistics",
            ("mean_sq_norm", "spread", "second_moment", "temperatures"),
            num_classes,
        ),
        logit_margins=_per_class_lists(
            path, final.get("logit_margins"), "logit_margins", ("mean", "median"), num_classes
        ),
        metrics=_read_metrics(path),
        config=config,
        path=path,
    )


def check_comparable(runs: Sequence[RunRecord]) -> None:
    """Check that runs can be compared class by class.

    Raises:
        RunDirectoryError: no run, or runs differing in data set, class count, class names, split,
            per-class test counts, or a repeated (method, seed) or run name.
    """
    if not runs:
        raise RunDirectoryError(NO_RUNS)
    first = runs[0]
    seen: dict[tuple[str, int | None], RunRecord] = {}
    names: dict[str, RunRecord] = {}
    for run in runs:
        if run.dataset is not None and first.dataset is not None and run.dataset != first.dataset:
            raise RunDirectoryError(
                DATASET_MISMATCH.format(
                    first=first.label,
                    first_dataset=first.dataset,
                    other=run.label,
                    other_dataset=run.dataset,
                )
            )
        if run.num_classes != first.num_classes:
            raise RunDirectoryError(
                NUM_CLASSES_MISMATCH.format(
                    first=first.label,
                    first_k=first.num_classes,
                    other=run.label,
                    other_k=run.num_classes,
                )
            )
        if (
            run.class_names is not None
            and first.class_names is not None
            and run.class_names != first.class_names
        ):
            raise RunDirectoryError(CLASS_NAMES_MISMATCH.format(first=first.label, other=run.label))
        if run.split != first.split:
            raise RunDirectoryError(
                SPLIT_MISMATCH.format(
                    first=first.label,
                    first_split=first.split,
                    other=run.label,
                    other_split=run.split,
                )
            )
        differs = np.flatnonzero(run.support != first.support)
        if differs.size:
            k = int(differs[0])
            raise RunDirectoryError(
                TEST_SET_MISMATCH.format(
                    first=first.label,
                    other=run.label,
                    class_id=k,
                    first_count=int(first.support[k]),
                    other_count=int(run.support[k]),
                )
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
