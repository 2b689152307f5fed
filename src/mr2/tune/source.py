"""Trial sources: what trains a tune's trials, behind one interface the driver (:mod:`mr2.tune.driver`)
calls.

A source runs a batch of trials (:class:`mr2.tune.trials.Trial`) and returns one
:class:`TrialResult` each: the trial's validation and test predictions, or why it failed. Three
sources exist: mr2's engine (:class:`mr2.tune.engine_source.EngineSource`, ``mr2 tune --config``), a
Python function (:class:`FunctionSource`, :func:`mr2.tune.tune`) and a shell command
(:class:`mr2.tune.command.CommandSource`, ``mr2 tune --command``). The last two keep their trials in a
:class:`mr2.tune.trials.TrialStore` and run them with :func:`run_stored_trials` (progress, heartbeat,
ETA; bounded submission to an executor).

One rule for failures, for every source: a trial that raises, exits non-zero, times out, writes no
predictions or returns non-finite logits FAILED (:class:`TrialFailed`): the driver rules its candidate
out and goes on. Predictions tune cannot use at all (wrong type, wrong shapes or K, ``y_true``
differing between trials) are invalid input (:class:`mr2.tune.errors.TrialError`): the tune stops.
"""

from __future__ import annotations

import concurrent.futures
import functools
import hashlib
import inspect
import signal
import sys
import time
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TextIO

import numpy as np
from numpy.typing import NDArray

from mr2.tune.candidates import Candidate
from mr2.tune.errors import TrialError, TrialFailed, TuneInputError
from mr2.tune.text import train_fn_paste
from mr2.tune.trials import SPLITS, Trial, TrialStore, check_trial_predictions

__all__ = [
    "FUNCTION_WAY_OUT",
    "HEARTBEAT_SECONDS",
    "FunctionSource",
    "StoredTrialSource",
    "TrialFailed",
    "TrialResult",
    "TrialSource",
    "format_seconds",
    "function_identity",
    "run_stored_trials",
]

UNREADABLE = (
    "{trial} finished earlier but its stored predictions in {path} cannot be read ({error}); training it "
    "again"
)
_RETRAINED = (
    "retrain: {count} stored trial(s) in {directory} of another producer or K are no longer finished; each "
    "is trained again when the plan reaches it"
)
#: How often a line says which trials are still running (seconds).
HEARTBEAT_SECONDS = 60.0
#: What to do instead of reusing another train_fn's trials (:data:`mr2.tune.trials.PRODUCER_DIFFERS`).
FUNCTION_WAY_OUT = (
    "call tune with another name= (or output_dir=), or retrain=True to train them again with this train_fn"
)


def format_seconds(seconds: float) -> str:
    """tune's one way to write a duration (a trial's time, an ETA, an estimate): ``"42.0 s"``,
    ``"3 min 05 s"`` or ``"2 h 03 min"``.

    >>> format_seconds(4.25), format_seconds(185), format_seconds(7400)
    ('4.2 s', '3 min 05 s', '2 h 03 min')
    """
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


Arrays = tuple[NDArray[np.int64], NDArray[np.int64]]


@dataclass
class TrialResult:
    """One trial's outcome.

    Attributes:
        trial: the trial.
        predictions: split -> ``(y_true, y_pred)`` (int64) when it finished; None when it failed.
        failure: why it failed ("" when it finished).
        log: its log file, where there is one.
        seconds: its own training time (0 for a trial finished earlier).
        reused: finished by an earlier invocation.
        collapsed: a feature-collapse guard warned while it trained (its candidate is not adopted).
    """

    trial: Trial
    predictions: dict[str, Arrays] | None
    failure: str = ""
    log: Path | None = None
    seconds: float = 0.0
    reused: bool = False
    collapsed: bool = False

    @property
    def ok(self) -> bool:
        return self.predictions is not None


class TrialSource(Protocol):
    """What the driver and the runtime need of a source of trials: everything that differs between
    the ways in is a field or a method here, so that neither ever asks which source it has.

    Attributes:
        who_trains: what trains the candidates, as the start line says it.
        two_stage: whether it runs the two-stage procedures (``jtt``, ``hbr``) of a candidate set.
        stop_signals: the signals the command-line runtime turns into :meth:`stop` (besides Ctrl-C);
            () where the source handles its own.
        stopped_text: what a stopped tune says was done with its running trials.
    """

    who_trains: str
    two_stage: bool
    stop_signals: tuple[signal.Signals, ...]
    stopped_text: str

    @property
    def workers(self) -> int | None:
        """Trials run at once (None: the executor's own count)."""

    def record(self) -> dict[str, Any]:
        """How the source is recorded in ``recommendation.json`` (``{"kind": ...}``)."""

    def num_classes(self) -> int | None:
        """K when the source knows it before any trial ran (None: from the first finished trial)."""

    def class_names(self) -> list[str] | None:
        """The data's class names where the source knows them (None: the request's, or the ids)."""

    def paste(self, use: Candidate) -> tuple[str, str]:
        """``(where, block)``: how the advice tells the user to use a candidate (:mod:`mr2.tune.text`)."""

    def stop(self) -> None:
        """Stop the trials running now; none starts after this (tune is stopping)."""

    def is_finished(self, trial: Trial) -> bool:
        """Whether the trial finished earlier (reused without training)."""

    def describe(self, trial: Trial) -> str:
        """A dry run's line for the trial (what runs it)."""

    def run(self, trials: Sequence[Trial], stream: TextIO) -> list[TrialResult]:
        """Run (or reuse) every trial of the batch; one result per trial, in order."""


def _timed(call: Callable[[Trial], Any], trial: Trial) -> tuple[Any, float]:
    """``(call(trial), seconds)``: module level, so that it pickles for process pools and submitit."""
    start = time.perf_counter()
    return call(trial), time.perf_counter() - start


def _window(executor: Any, workers: int | None) -> int:
    if workers is not None:
        return max(1, workers)
    return max(1, int(getattr(executor, "_max_workers", 0) or 1))


def _error_text(error: BaseException) -> str:
    message = str(error).strip().splitlines()
    return f"{type(error).__name__}: {message[-1] if message else ''}".rstrip(": ")


def run_stored_trials(
    trials: Sequence[Trial],
    call: Callable[[Trial], Any],
    store: TrialStore,
    *,
    stream: TextIO | None = None,
    executor: Any = None,
    workers: int | None = None,
    log: Callable[[Trial], Path | None] = lambda trial: None,
    heartbeat: float = HEARTBEAT_SECONDS,
) -> list[TrialResult]:
    """Run every unfinished trial of ``trials`` with ``call`` (it returns the trial's
    :class:`mr2.tune.trials.TrialPredictions`), check and store each as it comes back; reuse the
    finished ones.

    With an ``executor`` (``submit(fn, *args)`` returning a future), at most ``workers`` trials are
    submitted at a time (default: the executor's worker count, else 1) and the next is submitted when
    one comes back; on an invalid-input error the queued ones are cancelled. While trials run, a line
    every ``heartbeat`` seconds names each running trial, its elapsed time and log; each finished
    trial prints its own duration and an ETA for the batch from the measured trial times.

    Raises:
        TrialError: invalid input (the trial's predictions cannot be used at all); trials stored before
            stay stored. A trial that fails is a :class:`TrialResult` with ``failure``, not an error.
    """
    out = stream if stream is not None else sys.stdout
    results: dict[str, TrialResult] = {}
    todo: list[Trial] = []
    discarded = store.discard_stale()
    if discarded:
        print(_RETRAINED.format(count=discarded, directory=store.root), file=out, flush=True)
    for trial in trials:
        if store.is_finished(trial):
            try:
                stored = store.read(trial)
            except TrialFailed as failed:  # stored non-finite logits: failed, as the fresh trial would
                store.forget(trial)
                results[trial.key] = TrialResult(trial, None, failure=str(failed), log=log(trial),
                                                 reused=True)
                print(f"reused {trial.name} FAILED ({failed})", file=out, flush=True)
                continue
            except (OSError, ValueError, KeyError, zipfile.BadZipFile) as error:
                # Finished, but its predictions are gone or damaged: train it again, saying so.
                store.forget(trial)
                print(UNREADABLE.format(trial=trial.name, path=store.path(trial), error=_error_text(error)),
                      file=out, flush=True)
                todo.append(trial)
                continue
            store.remember_labels(trial)
            results[trial.key] = TrialResult(trial, stored, log=log(trial), reused=True,
                                             collapsed=store.collapsed(trial))
            print(f"reused {trial.name} (finished earlier)", file=out, flush=True)
        else:
            if trial.key in store.damaged:
                print(store.damaged.pop(trial.key), file=out, flush=True)
            todo.append(trial)
    from mr2.sweep.progress import estimate_remaining  # the sweep's ETA: list scheduling of the mean trial

    durations: list[float] = []
    total = len(todo)
    done = 0
    window = 1 if executor is None else _window(executor, workers)
    running: dict[Any, tuple[Trial, float]] = {}  # future -> (trial, time.monotonic() at submission)

    def finish(trial: Trial, outcome: tuple[Any, float] | None, error: BaseException | None) -> None:
        nonlocal done
        done += 1
        trial_log = log(trial)
        seconds = 0.0 if outcome is None else outcome[1]
        failure = ""
        if error is not None:
            if isinstance(error, TrialError) and not isinstance(error, TrialFailed):
                raise error
            failure = str(error) if isinstance(error, TrialFailed) else _error_text(error)
        else:
            assert outcome is not None
            try:
                stored = check_trial_predictions(trial, outcome[0], store.num_classes, trial_log)
            except TrialFailed as failed:
                failure = str(failed)
            else:
                store.check_labels(stored, trial_log)
                store.write(stored, seconds)
                arrays = {s: (stored.y_true[s], stored.y_pred[s]) for s in SPLITS}
                results[trial.key] = TrialResult(trial, arrays, log=trial_log, seconds=seconds,
                                                 collapsed=stored.collapsed)
        if failure:
            results[trial.key] = TrialResult(trial, None, failure=failure, log=trial_log, seconds=seconds)
        durations.append(seconds)
        left = total - done
        eta = ""
        if left and durations:
            started = [(other.name, since) for other, since in running.values()]
            remaining = estimate_remaining(durations, left, started, window, now=time.monotonic())
            eta = f"; about {format_seconds(remaining)} left in this round"
        state = f"FAILED ({failure})" if failure else f"done in {format_seconds(seconds)}"
        print(f"[{done}/{total}] {trial.name} {state}{eta}", file=out, flush=True)

    if executor is None:
        for trial in todo:
            print(f"running {trial.name}" + (f" (log: {log(trial)})" if log(trial) else ""), file=out,
                  flush=True)
            try:
                outcome = _timed(call, trial)
            except Exception as error:  # a failed trial (the rule in the module docstring)
                finish(trial, None, error)
            else:
                finish(trial, outcome, None)
        return [results[t.key] for t in trials]

    queue = list(todo)
    last_beat = time.monotonic()
    try:
        while queue or running:
            while queue and len(running) < window:
                trial = queue.pop(0)
                running[executor.submit(_timed, call, trial)] = (trial, time.monotonic())
            futures = list(running)
            if all(isinstance(f, concurrent.futures.Future) for f in futures):
                finished = concurrent.futures.wait(futures, timeout=min(heartbeat, 5.0),
                                                   return_when=concurrent.futures.FIRST_COMPLETED).done
            else:
                finished = set(_poll(futures))
            for future in finished:
                trial, _ = running.pop(future)
                try:
                    outcome = future.result()
                except Exception as error:  # a failed trial (the rule in the module docstring)
                    finish(trial, None, error)
                else:
                    finish(trial, outcome, None)
            now = time.monotonic()
            if running and now - last_beat >= heartbeat:
                last_beat = now
                for trial, started in running.values():
                    where = f", log: {log(trial)}" if log(trial) else ""
                    print(f"  still running {trial.name} ({format_seconds(now - started)}{where})", file=out,
                          flush=True)
    except BaseException:
        for future in running:
            cancel = getattr(future, "cancel", None)
            if callable(cancel):
                cancel()
        raise
    return [results[t.key] for t in trials]


def _poll(futures: Sequence[Any]) -> list[Any]:
    """Futures without ``concurrent.futures`` waiting (a submitit job): those done now, after a pause."""
    done = [f for f in futures if getattr(f, "done", lambda: False)()]
    if not done:
        time.sleep(1.0)
    return done


_BAD_VERSION = (
    "version must be a string naming what train_fn trains (e.g. a git commit, or 'lr=0.1, 20 epochs'); "
    "got {value}"
)
#: At most this many characters of a version.
MAX_VERSION_LENGTH = 1000


def _plain(value: Any) -> str:
    """A bound argument as recorded: the repr of a number, string, bool, None or a tuple / list of them;
    the type's name for anything else (whose repr may hold a memory address that differs every run)."""
    simple = (bool, int, float, str, type(None))
    if isinstance(value, simple):
        return repr(value)
    if isinstance(value, (tuple, list)) and all(isinstance(item, simple) for item in value):
        return repr(value)
    return f"<{type(value).__name__}>"


def _callable_name(fn: Any) -> str:
    """``module.qualname`` of a function (of a ``functools.partial``'s function, with the arguments it
    binds: ``mod.train(lr=0.1)``; of a callable's class)."""
    bound: list[str] = []
    while isinstance(fn, functools.partial):
        keywords = [f"{key}={_plain(value)}" for key, value in sorted(fn.keywords.items())]
        bound = [*map(_plain, fn.args), *keywords, *bound]
        fn = fn.func
    target = fn if hasattr(fn, "__qualname__") else type(fn)
    name = f"{getattr(target, '__module__', None) or '?'}.{getattr(target, '__qualname__', '?')}"
    return f"{name}({', '.join(bound)})" if bound else name


def _source_digest(fn: Any) -> str | None:
    """sha256 of the function's source text (a ``functools.wraps`` wrapper: the wrapped one's), or None
    where Python has none (a builtin, a function typed into a plain interpreter)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    target = fn if inspect.isroutine(fn) or inspect.isclass(fn) else type(fn)
    try:
        text = inspect.getsource(target)
    except (OSError, TypeError):
        return None
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def function_identity(train_fn: Any, version: str | None = None) -> dict[str, Any]:
    """What trains the trials of :func:`mr2.tune.tune`, as each trial records it: the function's
    ``module.qualname``, and ``version`` when given, else a digest of the function's own source (not of
    what it calls: give ``version`` to cover that). A rerun whose identity differs is refused
    (:meth:`mr2.tune.trials.TrialStore.check_producer`).

    Raises:
        TuneInputError: ``version`` is not a string (or is longer than 1000 characters).

    Example:
        >>> identity = function_identity(format_seconds, version="v2")
        >>> identity["function"], identity["source"], identity["version"]
        ('mr2.tune.source.format_seconds', None, 'v2')
    """
    if version is not None and (not isinstance(version, str) or len(version) > MAX_VERSION_LENGTH):
        shown = repr(version) if not isinstance(version, str) else f"{len(version)} characters"
        raise TuneInputError(_BAD_VERSION.format(value=shown[:80]))
    return {"kind": "python", "function": _callable_name(train_fn),
            "source": None if version is not None else _source_digest(train_fn), "version": version}


class StoredTrialSource:
    """What the sources that keep their trials in a :class:`~mr2.tune.trials.TrialStore` share (your
    function's, your command's): K and the finished trials are the store's; no class names."""

    store: TrialStore

    def num_classes(self) -> int | None:
        return self.store.num_classes

    def is_finished(self, trial: Trial) -> bool:
        return self.store.is_finished(trial)

    def class_names(self) -> list[str] | None:
        return None


@dataclass
class FunctionSource(StoredTrialSource):
    """Trials of a Python function ``train_fn(candidate, seed) -> TrialPredictions``
    (:func:`mr2.tune.tune`)."""

    call: Callable[[Trial], Any]
    store: TrialStore
    executor: Any = None
    workers: int | None = None
    who_trains: str = "your train_fn runs the losses"
    two_stage: bool = False
    stop_signals: tuple[signal.Signals, ...] = ()
    stopped_text: str = "finished trials are kept"

    def record(self) -> dict[str, Any]:
        return {"kind": "python"}

    def paste(self, use: Candidate) -> tuple[str, str]:
        return train_fn_paste(use)

    def stop(self) -> None:
        """Nothing to stop: the trials run in this process or the executor's (an error or Ctrl-C
        cancels the queued ones, :func:`run_stored_trials`)."""

    def describe(self, trial: Trial) -> str:
        return "train_fn(candidate, seed)"

    def run(self, trials: Sequence[Trial], stream: TextIO) -> list[TrialResult]:
        return run_stored_trials(trials, self.call, self.store, stream=stream, executor=self.executor,
                                 workers=self.workers)
