"""Trials of ``mr2 tune`` for training code of your own: what a trial returns, how it is checked, and
the per-trial store that makes a tune resumable.

A trial is one (candidate, seed) of one phase (``selection`` or ``confirmation``). Its training code
returns :class:`TrialPredictions`: the validation and the test split's true class ids plus either
predicted class ids or logits. Each finished trial is stored under the tune directory::

    trials/<phase>/<label>/seed=<s>/val.npz     y_true and y_pred (or the logits given) of validation
    trials/<phase>/<label>/seed=<s>/test.npz    the same for test
    trials/<phase>/<label>/seed=<s>/trial.json  the trial's record, written last: its presence marks
                                                 the trial finished

in the format ``mr2 report --predictions`` reads (:mod:`mr2.report.predictions`), each file written
atomically. A finished trial is reused, so an interrupted tune resumes where it stopped. The choice
reads ``val.npz`` only (:meth:`TrialStore.validation`); ``test.npz`` is read for the confirmation.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from mr2.io import atomic_write_bytes, atomic_write_json
from mr2.tune.candidates import Candidate
from mr2.tune.errors import TrialError, TrialFailed

__all__ = [
    "PHASES",
    "SPLITS",
    "Predictions",
    "StoredTrial",
    "Trial",
    "TrialPredictions",
    "TrialStore",
    "check_trial_predictions",
]

#: The phases of a tune.
PHASES = ("selection", "confirmation")
#: The splits a trial predicts.
SPLITS = ("val", "test")
TRIAL_RECORD = "trial.json"

WRONG_TYPE = (
    "trial {trial}: the training code returned {kind}; it must return mr2.tune.TrialPredictions(val=..., "
    "test=...) (each a mr2.tune.Predictions or a dict with y_true and y_pred or logits){log}"
)
_BAD_SPLIT = "trial {trial}, {split} split: {problem}{log}"
Y_TRUE_DIFFERS = (
    "trial {trial}, {split} split: y_true differs from trial {first}'s ({detail}); every trial must "
    "predict the same {split} samples in the same order{log}"
)
STALE_TRIAL = (
    "{path} holds a finished trial of another tune ({key}: {found!r}, this tune: {expected!r}); delete "
    "that directory to re-run it, or give the tune another name / output directory"
)
#: A split's logits are not all finite: the trial FAILED (its candidate is ruled out), not bad input.
NON_FINITE = "logits hold NaN or infinite values (a diverged model?); they must be finite"


def _log(log: Path | None) -> str:
    return "" if log is None else f" (log: {log})"


@dataclass(frozen=True)
class Predictions:
    """One split's predictions: ``y_true`` [N] class ids and either ``y_pred`` [N] class ids or
    ``logits`` [N, K] scores (the prediction is their argmax). NumPy arrays, torch tensors or lists."""

    y_true: Any
    y_pred: Any = None
    logits: Any = None


@dataclass(frozen=True)
class TrialPredictions:
    """What a trial's training code returns: its predictions on the validation and the test split.

    Example:
        >>> import numpy as np
        >>> y = np.array([0, 1, 1])
        >>> test = {"y_true": y, "logits": np.eye(3)[:, :2]}
        >>> result = TrialPredictions(val=Predictions(y, y_pred=y), test=test)
        >>> result.val.y_pred
        array([0, 1, 1])
    """

    val: Predictions | Mapping[str, Any]
    test: Predictions | Mapping[str, Any]


@dataclass(frozen=True)
class Trial:
    """One (candidate, seed) of one phase."""

    phase: str
    candidate: Candidate
    seed: int

    @property
    def name(self) -> str:
        """``<phase>/<label>@<seed>``: how errors and logs name it."""
        return f"{self.phase}/{self.candidate.label}@{self.seed}"

    @property
    def key(self) -> str:
        """Its directory under ``trials/``."""
        return f"{self.phase}/{self.candidate.label}/seed={self.seed}"


@dataclass(frozen=True)
class StoredTrial:
    """A finished trial's checked predictions (int64 class ids; ``logits`` float when given)."""

    trial: Trial
    y_true: dict[str, NDArray[np.int64]]
    y_pred: dict[str, NDArray[np.int64]]
    logits: dict[str, NDArray[np.floating[Any]] | None]


def _to_numpy(value: Any) -> Any:
    if value is None:
        return None
    detach = getattr(value, "detach", None)
    if callable(detach):  # a torch tensor, on any device
        return value.detach().cpu().numpy()
    return np.asarray(value)


def _split_problem(y_true: Any, y_pred: Any, logits: Any, num_classes: int) -> str:
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
            return NON_FINITE
    else:
        if y_pred.shape != y_true.shape:
            return f"y_pred must have the shape of y_true {y_true.shape}; got {y_pred.shape}"
        if not np.issubdtype(y_pred.dtype, np.integer):
            return f"y_pred must hold integer class ids; got dtype {y_pred.dtype}"
    for key, ids in (("y_true", y_true), ("y_pred", y_pred)):
        if ids is not None and (int(ids.min()) < 0 or int(ids.max()) >= num_classes):
            return (f"{key} holds class ids from {int(ids.min())} to {int(ids.max())}, outside [0, "
                    f"{num_classes}) (wrong K?)")
    return ""


def check_trial_predictions(trial: Trial, result: Any, num_classes: int, log: Path | None = None
                            ) -> StoredTrial:
    """Check what a trial returned and convert it to arrays.

    Raises:
        TrialError: not a :class:`TrialPredictions`, or a split with missing, mis-shaped, non-integer,
            out-of-range (wrong K) values; the message names the trial and ``log``.
        TrialFailed: non-finite logits (a diverged model): the candidate is ruled out, the tune goes on.
    """
    if not isinstance(result, TrialPredictions):
        raise TrialError(WRONG_TYPE.format(trial=trial.name, kind=type(result).__name__, log=_log(log)))
    y_true: dict[str, NDArray[np.int64]] = {}
    y_pred: dict[str, NDArray[np.int64]] = {}
    logits: dict[str, NDArray[np.floating[Any]] | None] = {}
    for split in SPLITS:
        item = getattr(result, split)
        if isinstance(item, Mapping):
            unknown = sorted(set(map(str, item)) - {"y_true", "y_pred", "logits"})
            if unknown or "y_true" not in item:
                raise TrialError(_BAD_SPLIT.format(trial=trial.name, split=split, log=_log(log), problem=(
                    f"a dict of y_true and y_pred or logits is expected; got keys {sorted(map(str, item))}")))
            item = Predictions(item["y_true"], item.get("y_pred"), item.get("logits"))
        if not isinstance(item, Predictions):
            raise TrialError(WRONG_TYPE.format(trial=trial.name, kind=f"{split}={type(item).__name__}",
                                               log=_log(log)))
        try:
            true, pred, scores = (_to_numpy(item.y_true), _to_numpy(item.y_pred), _to_numpy(item.logits))
        except (TypeError, ValueError) as error:
            raise TrialError(_BAD_SPLIT.format(trial=trial.name, split=split, problem=f"not arrays ({error})",
                                              log=_log(log))) from None
        problem = _split_problem(true, pred, scores, num_classes)
        if problem == NON_FINITE:
            raise TrialFailed(_BAD_SPLIT.format(trial=trial.name, split=split, problem=problem,
                                                log=_log(log)))
        if problem:
            raise TrialError(_BAD_SPLIT.format(trial=trial.name, split=split, problem=problem, log=_log(log)))
        y_true[split] = true.astype(np.int64)
        logits[split] = None if scores is None else scores
        y_pred[split] = (pred if scores is None else np.argmax(scores, axis=1)).astype(np.int64)
    return StoredTrial(trial, y_true, y_pred, logits)


def _ids_dtype(num_classes: int) -> type[np.integer[Any]]:
    return np.int16 if num_classes <= np.iinfo(np.int16).max else np.int32


def _atomic_npz(path: Path, arrays: Mapping[str, Any]) -> None:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, buffer.getvalue())


class TrialStore:
    """The finished trials of one tune directory (see the module docstring for the layout)."""

    def __init__(self, directory: str | os.PathLike[str], num_classes: int) -> None:
        self.root = Path(directory) / "trials"
        self.num_classes = num_classes
        self._first: dict[str, tuple[str, NDArray[np.int64]]] = {}

    def path(self, trial: Trial) -> Path:
        """The trial's directory."""
        return self.root / trial.key

    def log(self, trial: Trial) -> Path:
        """Where a trial's command writes its output (the command source)."""
        return self.path(trial) / "train.log"

    def _record(self, trial: Trial) -> dict[str, Any]:
        return {"phase": trial.phase, "label": trial.candidate.label, "seed": trial.seed,
                "loss_spec": trial.candidate.loss_spec(), "num_classes": self.num_classes}

    def is_finished(self, trial: Trial) -> bool:
        """Whether the trial finished earlier (its record is there and matches this tune).

        Raises:
            TrialError: its record belongs to another tune (another loss specification or K).
        """
        file = self.path(trial) / TRIAL_RECORD
        if not file.is_file():
            return False
        try:
            found = json.loads(file.read_text())
        except (OSError, ValueError):
            found = {}
        expected = self._record(trial)
        for key, value in expected.items():
            if not isinstance(found, dict) or found.get(key) != value:
                shown = found.get(key) if isinstance(found, dict) else found
                raise TrialError(STALE_TRIAL.format(path=self.path(trial), key=key, expected=value,
                                                    found=shown))
        return True

    def forget(self, trial: Trial) -> None:
        """Mark a trial unfinished (its record goes; the next run of the trial rewrites its files)."""
        (self.path(trial) / TRIAL_RECORD).unlink(missing_ok=True)

    def check_labels(self, stored: StoredTrial, log: Path | None = None) -> None:
        """Every trial predicts the same samples: its ``y_true`` of each split equals the first trial's.

        Raises:
            TrialError: a split's ``y_true`` differs (naming both trials and ``log``).
        """
        for split in SPLITS:
            labels = stored.y_true[split]
            if split not in self._first:
                self._first[split] = (stored.trial.name, labels)
                continue
            first, expected = self._first[split]
            if labels.shape != expected.shape or not np.array_equal(labels, expected):
                detail = (f"{labels.size} samples vs {expected.size}" if labels.shape != expected.shape else
                          f"{int((labels != expected).sum())} of {labels.size} labels differ")
                raise TrialError(Y_TRUE_DIFFERS.format(trial=stored.trial.name, split=split, first=first,
                                                       detail=detail, log=_log(log)))

    def write(self, stored: StoredTrial, seconds: float) -> None:
        """Store a checked trial: both splits' predictions, then its record (atomically, in that order)."""
        directory = self.path(stored.trial)
        for split in SPLITS:
            arrays: dict[str, Any] = {"y_true": stored.y_true[split].astype(_ids_dtype(self.num_classes))}
            scores = stored.logits[split]
            if scores is None:
                arrays["y_pred"] = stored.y_pred[split].astype(_ids_dtype(self.num_classes))
            else:
                arrays["logits"] = scores
            _atomic_npz(directory / f"{split}.npz", arrays)
        record = {**self._record(stored.trial), "seconds": round(seconds, 3)}
        atomic_write_json(directory / TRIAL_RECORD, record)

    def read(self, trial: Trial, splits: Sequence[str] = SPLITS) -> dict[str, tuple[NDArray[np.int64],
                                                                                    NDArray[np.int64]]]:
        """``split -> (y_true, y_pred)`` of a finished trial, reading only the given splits' files."""
        result = {}
        for split in splits:
            with np.load(self.path(trial) / f"{split}.npz", allow_pickle=False) as data:
                y_true = data["y_true"].astype(np.int64)
                y_pred = (np.argmax(data["logits"], axis=1) if "logits" in data.files else data["y_pred"])
                result[split] = (y_true, y_pred.astype(np.int64))
        return result

    def validation(self, trial: Trial) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """``(y_true, y_pred)`` of the trial's VALIDATION split: the only read of the selection."""
        return self.read(trial, ("val",))["val"]

    def remember_labels(self, trial: Trial) -> None:
        """Take a stored trial's ``y_true`` as the reference of every split, if none is set yet."""
        if all(split in self._first for split in SPLITS):
            return
        for split, (y_true, _) in self.read(trial).items():
            self._first.setdefault(split, (trial.name, y_true))
