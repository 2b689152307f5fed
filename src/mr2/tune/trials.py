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
atomically. A finished trial is reused, so an interrupted tune resumes where it stopped. The
selection scores ``val.npz`` only; ``test.npz`` is scored in the confirmation.

A trial's record names what produced it (``producer``: the command template and a digest of each file
it names, or the training function's name and a digest of its source or the ``version`` given; see
:func:`mr2.tune.command.command_identity` and :func:`mr2.tune.source.function_identity`). Before any
trial runs, :meth:`TrialStore.check_producer` compares every stored record's producer with this tune's:
a difference is refused (:data:`PRODUCER_DIFFERS`, naming it and the way out its source gives, a
:class:`Producer`), since reusing those trials would mix two trainings' predictions in one choice; with
``retrain`` they are trained again.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from mr2.io import atomic_write_bytes, atomic_write_json, read_bounded
from mr2.tune.candidates import Candidate
from mr2.tune.errors import TrialError, TrialFailed

if TYPE_CHECKING:
    from mr2.tune.design import Request

__all__ = [
    "PRODUCER_DIFFERS",
    "SPLITS",
    "Predictions",
    "Producer",
    "StoredTrial",
    "Trial",
    "TrialPredictions",
    "TrialStore",
    "check_trial_predictions",
    "class_ids",
    "read_trial_file",
]

#: The splits a trial predicts (and :func:`mr2.tune.script.write_predictions` writes).
SPLITS = ("val", "test")
TRIAL_RECORD = "trial.json"
#: The largest trial.json read (one is a few hundred bytes; a longer one is damaged).
MAX_RECORD_BYTES = 1_000_000

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
#: Stored trials of another producer (command, script, training function or version): never reused.
PRODUCER_DIFFERS = (
    "{directory} holds finished trials (e.g. {trial}) of another {what}: {difference}; reusing them would "
    "mix two trainings in one choice: {way_out}"
)
#: Who trained the stored trials, by their record's ``producer.kind``, in :data:`PRODUCER_DIFFERS`.
_TRAINED_BY = {"command": "mr2 tune --command", "python": "a Python train_fn"}
#: The keys of a producer record compared one by one, in this order (a record has those of its source).
_COMPARED = ("command", "files", "function", "version", "source")
#: A trial whose record cannot be read: it is not finished (the record is written last), so it runs again.
_DAMAGED_RECORD = "{trial}: its record {path} is damaged ({problem}); training it again"
_SHOWN_CHARS = 100


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
    #: A feature-collapse guard warned while this trial trained
    #: (:func:`mr2.losses.collapse.collapse_warnings`): the candidate is not adopted. :func:`mr2.tune.tune`
    #: sets it itself after ``train_fn`` returns; ``mr2 tune --command`` from a ``collapse.json`` beside
    #: the predictions.
    collapsed: bool = False


def class_ids(item: Predictions) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """``(y_true, y_pred)`` of checked predictions as int64 class ids (``y_pred``: the logits' argmax
    where there are logits)."""
    y_pred = item.y_pred if item.logits is None else np.argmax(item.logits, axis=1)
    return np.asarray(item.y_true, dtype=np.int64), np.asarray(y_pred, dtype=np.int64)


@dataclass(frozen=True)
class Trial:
    """One (candidate, seed) of one phase: the plan's :class:`mr2.tune.design.Request` (phase, label,
    seed; the plan is pure and knows labels only) bound to its :class:`Candidate` by
    :meth:`mr2.tune.request.TuneRequest.trial`, the one place a request becomes a trial."""

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

    @property
    def request(self) -> Request:
        """The plan's request this trial answers."""
        from mr2.tune.design import Request

        return Request(self.phase, self.candidate.label, self.seed)


@dataclass(frozen=True)
class StoredTrial:
    """A finished trial's checked predictions (int64 class ids; ``logits`` float when given)."""

    trial: Trial
    y_true: dict[str, NDArray[np.int64]]
    y_pred: dict[str, NDArray[np.int64]]
    logits: dict[str, NDArray[np.floating[Any]] | None]
    collapsed: bool = False


def _to_numpy(value: Any) -> Any:
    if value is None:
        return None
    detach = getattr(value, "detach", None)
    if callable(detach):  # a torch tensor, on any device
        return value.detach().cpu().numpy()
    return np.asarray(value)


def _check_split(trial: Trial, split: str, y_true: Any, y_pred: Any, logits: Any, num_classes: int,
                 log: Path | None) -> None:
    """Check one split's arrays with the one checker of predictions
    (:func:`mr2.report.predictions.predictions_problem`).

    Raises:
        TrialFailed: non-finite logits (a diverged model).
        TrialError: anything else wrong.
    """
    from mr2.report.predictions import NonFinitePredictions, predictions_problem

    try:
        problem = predictions_problem(y_true, y_pred, logits, num_classes)
    except NonFinitePredictions as error:
        raise TrialFailed(_BAD_SPLIT.format(trial=trial.name, split=split, problem=error,
                                            log=_log(log))) from None
    if problem:
        raise TrialError(_BAD_SPLIT.format(trial=trial.name, split=split, problem=problem, log=_log(log)))


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
        _check_split(trial, split, true, pred, scores, num_classes, log)
        y_true[split] = true.astype(np.int64)
        logits[split] = None if scores is None else scores
        y_pred[split] = (pred if scores is None else np.argmax(scores, axis=1)).astype(np.int64)
    return StoredTrial(trial, y_true, y_pred, logits, collapsed=bool(result.collapsed))


def read_trial_file(trial: Trial, split: str, path: Path, num_classes: int, log: Path | None = None
                    ) -> Predictions:
    """One split's predictions file of a trial, fresh (a command's ``{out}/val.npz``) or stored (a
    resumed tune's ``trials/.../val.npz``): the one reader of both, ``mr2 report --predictions``'s
    (:func:`mr2.report.predictions.read_predictions`: what the archive declares is bounded before any
    array is loaded, a FIFO or a directory is refused without opening it), with integer class ids and
    the checks of :func:`check_trial_predictions` (K, shapes, ids in range, finite logits).

    Raises:
        TrialFailed: non-finite logits (a diverged model: the candidate is ruled out).
        TrialError: anything else (unreadable, too large, wrong keys, dtypes, shapes or K), naming the
            trial, the file and ``log``.
    """
    from mr2.report.exceptions import PredictionsError
    from mr2.report.limits import DEFAULT_MAX_CLASSES
    from mr2.report.predictions import NonFinitePredictions, read_predictions

    try:
        item = read_predictions(path, max_classes=max(num_classes, DEFAULT_MAX_CLASSES), integer_ids=True)
    except PredictionsError as error:
        # Non-finite logits: a diverged model, the trial failed; anything else is bad input.
        failed = isinstance(error, NonFinitePredictions)
        raise (TrialFailed if failed else TrialError)(f"trial {trial.name}: {error}{_log(log)}") from None
    predictions = (Predictions(item.y_true, logits=item.logits) if item.logits is not None
                   else Predictions(item.y_true, y_pred=item.y_pred))
    _check_split(trial, split, item.y_true, predictions.y_pred, predictions.logits, num_classes, log)
    return predictions


def _ids_dtype(num_classes: int) -> type[np.integer[Any]]:
    return np.int16 if num_classes <= np.iinfo(np.int16).max else np.int32


def _atomic_npz(path: Path, arrays: Mapping[str, Any]) -> None:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, buffer.getvalue())


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN_CHARS else text[:_SHOWN_CHARS] + "...'"


def _text_difference(stored: str, now: str) -> str:
    """Where two strings part: ``'...FAKE_LR=0.1 python...'`` against ``'...FAKE_LR=0.2 python...'``."""
    start = next((i for i, (a, b) in enumerate(zip(stored, now, strict=False)) if a != b),
                 min(len(stored), len(now)))
    left = max(0, start - 25)

    def part(text: str) -> str:
        piece = text[left:start + 25]
        return repr(("..." if left else "") + piece + ("..." if start + 25 < len(text) else ""))

    return f"stored {part(stored)}, now {part(now)}"


def producer_difference(stored: Any, now: Mapping[str, Any]) -> str:
    """How a stored trial's producer differs from this tune's, in words ("" when they are the same)."""
    if stored == dict(now):
        return ""
    if stored is None:
        return "its record names no producer (written by an earlier mr2, which did not record one)"
    if not isinstance(stored, Mapping):
        return f"its record's producer is unreadable ({_shown(stored)})"
    if stored.get("kind") != now.get("kind"):
        then, this = (_TRAINED_BY.get(str(record.get("kind")), _shown(record.get("kind")))
                      for record in (stored, now))
        return f"they were trained by {then}, this tune by {this}"
    for key in _COMPARED:  # the keys a record lacks are equal (None): each kind compares its own
        if stored.get(key) != now.get(key):
            return _key_difference(key, stored, now)
    return f"producer {_shown(dict(now))}, stored {_shown(stored)}"


def _key_difference(key: str, stored: Mapping[str, Any], now: Mapping[str, Any]) -> str:
    """How the producer records differ at ``key`` (one of :data:`_COMPARED`; they differ there)."""
    if key == "command":
        if not isinstance(stored.get("command"), str):
            return f"the command is {_shown(now.get('command'))}, stored {_shown(stored.get('command'))}"
        return "the command differs: " + _text_difference(stored["command"], str(now["command"]))
    if key == "files":
        stored_files = stored.get("files")
        before: Mapping[str, Any] = stored_files if isinstance(stored_files, Mapping) else {}
        after: Mapping[str, Any] = now.get("files") or {}
        for name in sorted(set(before) | set(after), key=str):
            if name not in after:
                return f"{name} changed: it is no longer a file here (it was when they were trained)"
            if name not in before:
                return f"{name} changed: it is a file now, and was none when they were trained"
            if before[name] != after[name]:
                return (f"{name} changed since they were trained (sha256 {str(before[name])[:12]}... then, "
                        f"{str(after[name])[:12]}... now)")
        return f"the files are {_shown(after)}, stored {_shown(stored_files)}"
    if key == "source":
        return (f"its source changed since they were trained ({now.get('function')}: sha256 "
                f"{str(stored.get(key))[:12]}... then, {str(now.get(key))[:12]}... now)")
    words = {"function": "the training function is", "version": "version is"}[key]
    return f"{words} {_shown(now.get(key))}, stored {_shown(stored.get(key))}"


@dataclass(frozen=True)
class Producer:
    """What trains a tune's trials, as its source gives it to the :class:`TrialStore`.

    Attributes:
        record: recorded in each trial's record (``producer``) and compared with the stored ones'
            (:func:`mr2.tune.source.function_identity`, :func:`mr2.tune.command.command_identity`).
        what: what :data:`PRODUCER_DIFFERS` calls it (``train_fn``, ``command``).
        way_out: what :data:`PRODUCER_DIFFERS` says to do instead of reusing another producer's trials.
    """

    record: Mapping[str, Any]
    what: str
    way_out: str


class TrialStore:
    """The finished trials of one tune directory (see the module docstring for the layout).

    Args:
        directory: the tune directory.
        num_classes: K.
        producer: what trains this tune's trials (recorded in each trial's record and compared with the
            stored ones' before any trial runs); None records and checks nothing.
        retrain: train stored trials of another producer (or another tune) again instead of refusing.
    """

    def __init__(self, directory: str | os.PathLike[str], num_classes: int,
                 producer: Producer | None = None, *, retrain: bool = False) -> None:
        self.root = Path(directory) / "trials"
        self.num_classes = num_classes
        self.producer = producer
        self.retrain = retrain
        self._first: dict[str, tuple[str, NDArray[np.int64]]] = {}
        self._checked = False
        self._stale: set[str] = set()
        #: trial key -> why its record could not be read (the trial runs again).
        self.damaged: dict[str, str] = {}

    def path(self, trial: Trial) -> Path:
        """The trial's directory."""
        return self.root / trial.key

    def log(self, trial: Trial) -> Path:
        """Where a trial's command writes its output (the command source)."""
        return self.path(trial) / "train.log"

    def _record(self, trial: Trial) -> dict[str, Any]:
        record = {"phase": trial.phase, "label": trial.candidate.label, "seed": trial.seed,
                  "loss_spec": trial.candidate.loss_spec(), "num_classes": self.num_classes}
        if self.producer is not None:
            record["producer"] = dict(self.producer.record)
        return record

    @staticmethod
    def _load_record(file: Path) -> tuple[dict[str, Any] | None, str]:
        """``(record, "")``, or ``(None, why)`` when the file is not a readable JSON object."""
        try:
            found = json.loads(read_bounded(file, MAX_RECORD_BYTES))  # a FIFO or a huge file: refused
        except (OSError, UnicodeDecodeError, ValueError, RecursionError) as error:
            return None, f"{type(error).__name__}: {str(error).splitlines()[0][:80] if str(error) else ''}"
        if not isinstance(found, dict):
            return None, f"a JSON {type(found).__name__}, not an object"
        return found, ""

    def check_producer(self) -> None:
        """Before any trial runs: every stored trial was trained by this tune's producer.

        Done once per store, on the first :meth:`is_finished`. With ``retrain``, the trials of another
        producer are marked unfinished (they run again and their files are rewritten).

        Raises:
            TrialError: a stored trial of another producer (:data:`PRODUCER_DIFFERS`, naming the
                difference and the way out).
        """
        if self._checked or self.producer is None:
            return
        self._checked = True
        if not self.root.is_dir():
            return
        from mr2.tune.design import PHASES

        def order(file: Path) -> tuple[int, str, int]:  # selection first, then by label and seed
            phase, label, seed = file.parent.relative_to(self.root).parts
            number = seed.removeprefix("seed=")
            return (PHASES.index(phase) if phase in PHASES else len(PHASES), label,
                    int(number) if number.isdigit() and len(number) < 10 else -1)

        for file in sorted(self.root.glob(f"*/*/seed=*/{TRIAL_RECORD}"), key=order):
            found, _ = self._load_record(file)
            if found is None:
                continue  # damaged: not a finished trial (is_finished says so and it runs again)
            difference = producer_difference(found.get("producer"), self.producer.record)
            key = str(file.parent.relative_to(self.root))
            if self.retrain and (difference or found.get("num_classes") != self.num_classes):
                self._stale.add(key)
                continue
            if not difference:
                continue
            phase, label, seed = key.split("/")
            raise TrialError(PRODUCER_DIFFERS.format(
                directory=self.root.parent, trial=f"{phase}/{label}@{seed.removeprefix('seed=')}",
                what=self.producer.what, difference=difference, way_out=self.producer.way_out))

    def is_finished(self, trial: Trial) -> bool:
        """Whether the trial finished earlier (its record is there and matches this tune). A record
        that cannot be read marks no finished trial: it is noted in :attr:`damaged` and the trial runs
        again.

        Raises:
            TrialError: a stored trial of another producer (:meth:`check_producer`), or its record
                belongs to another tune (another loss specification or K), unless ``retrain``.
        """
        self.check_producer()
        file = self.path(trial) / TRIAL_RECORD
        if trial.key in self._stale or not file.is_file():
            return False
        found, problem = self._load_record(file)
        if found is None:
            self.damaged[trial.key] = _DAMAGED_RECORD.format(trial=trial.name, path=file, problem=problem)
            return False
        expected = self._record(trial)
        for key, value in expected.items():
            if key == "producer":
                continue  # compared over the whole store by check_producer
            if found.get(key) != value:
                if self.retrain:
                    return False
                raise TrialError(STALE_TRIAL.format(path=self.path(trial), key=key, expected=value,
                                                    found=found.get(key)))
        return True

    def discard_stale(self) -> int:
        """With ``retrain``: remove the records of the stored trials of another producer or K, before
        the first trial runs, so that none of them is taken for this tune's later (each runs again when
        the plan reaches it). Returns how many. A dry run calls :meth:`is_finished` only: nothing goes."""
        self.check_producer()
        for key in sorted(self._stale):
            (self.root / key / TRIAL_RECORD).unlink(missing_ok=True)
        count = len(self._stale)
        self._stale.clear()
        return count

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
        if stored.collapsed:
            record["collapsed"] = True
        atomic_write_json(directory / TRIAL_RECORD, record)

    def collapsed(self, trial: Trial) -> bool:
        """Whether a finished trial's record says a collapse guard warned while it trained."""
        found, _ = self._load_record(self.path(trial) / TRIAL_RECORD)
        return found is not None and found.get("collapsed") is True

    def read(self, trial: Trial, splits: Sequence[str] = SPLITS) -> dict[str, tuple[NDArray[np.int64],
                                                                                    NDArray[np.int64]]]:
        """``split -> (y_true, y_pred)`` of a finished trial, reading only the given splits' files
        through the bounded, checked reader of a fresh trial's (:func:`read_trial_file`).

        Raises:
            TrialFailed: stored non-finite logits (the trial failed, as it would fresh).
            TrialError: a stored file that cannot be used (missing, too large, a FIFO, corrupt...).
        """
        return {split: class_ids(read_trial_file(trial, split, self.path(trial) / f"{split}.npz",
                                                 self.num_classes))
                for split in splits}

    def remember_labels(self, trial: Trial) -> None:
        """Take a stored trial's ``y_true`` as the reference of every split, if none is set yet."""
        if all(split in self._first for split in SPLITS):
            return
        for split, (y_true, _) in self.read(trial).items():
            self._first.setdefault(split, (trial.name, y_true))
