"""``mr2 tune`` from Python: :func:`tune` (your own training function) and :func:`describe_tune` (its
dry run: the same call, nothing run). Both check their arguments in :func:`_prepared_tune`, which
builds a :class:`mr2.tune.request.TuneRequest` and a :class:`mr2.tune.source.FunctionSource`; :func:`tune`
then calls the one driver, :func:`mr2.tune.driver.run_tune`; mr2's engine with a run configuration is
``mr2 tune --config`` (:mod:`mr2.tune.engine_source`).

Tune's parameters are written once, in :func:`_prepared_tune`'s signature: :func:`tune` and
:func:`describe_tune` take them (:func:`_with_parameters_of`), so type checkers, IDEs and ``help()``
show the same list for both.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, ParamSpec, TextIO, TypeVar

from mr2.losses.collapse import collapse_warnings, reset_collapse_warnings
from mr2.tune.candidates import DEFAULT_CANDIDATE_SET, Candidate
from mr2.tune.design import DEFAULT_DESIGN, Design
from mr2.tune.driver import TuneResult, describe, run_tune
from mr2.tune.errors import TuneInputError
from mr2.tune.request import TuneRequest, make_request
from mr2.tune.source import FUNCTION_WAY_OUT, FunctionSource, function_identity
from mr2.tune.trials import Producer, Trial, TrialPredictions, TrialStore

__all__ = ["NOT_CALLABLE", "NO_SUBMIT", "describe_tune", "tune"]

NOT_CALLABLE = "train_fn must be callable as train_fn(candidate, seed); got {kind}"
NO_SUBMIT = (
    "executor must have submit(fn, *args) (a concurrent.futures.Executor or a submitit executor); got {kind}"
)

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _train(train_fn: Callable[[Candidate, int], Any], trial: Trial) -> Any:
    """Run one trial of :func:`tune` (module level, so that it pickles for process pools and submitit);
    a collapse guard that warned in its training marks the result (where it ran, in its thread)."""
    reset_collapse_warnings()
    result = train_fn(trial.candidate, trial.seed)
    if collapse_warnings() and isinstance(result, TrialPredictions):
        result = replace(result, collapsed=True)
    return result


@dataclass(frozen=True)
class _PreparedTune:
    """A call of :func:`tune`, checked: the request, the source of its trials and where it prints."""

    request: TuneRequest
    source: FunctionSource
    stream: TextIO | None


def _prepared_tune(
    train_fn: Callable[[Candidate, int], TrialPredictions],
    *,
    num_classes: int,
    candidates: str | Sequence[Candidate] = DEFAULT_CANDIDATE_SET,
    seeds: int | str | Sequence[int] | None = None,
    confirm_seeds: int | str | Sequence[int] | None = None,
    criterion: str = "hard_tier",
    output_dir: str | Path,
    name: str = "tune",
    class_names: Sequence[str] | None = None,
    executor: Any = None,
    workers: int | None = None,
    design: Design = DEFAULT_DESIGN,
    stream: TextIO | None = None,
    version: str | None = None,
    retrain: bool = False,
) -> _PreparedTune:
    """Tune's parameters (the one list; :func:`tune`'s docstring says what each is), checked: the
    request (:func:`mr2.tune.request.make_request`) and its trial store, whose trials must be
    ``train_fn``'s (or ``retrain``). Nothing is written.

    Raises:
        TuneInputError: bad arguments.
        TrialError: stored trials of another ``train_fn``, version or K.
    """
    if not callable(train_fn):
        raise TuneInputError(NOT_CALLABLE.format(kind=type(train_fn).__name__))
    if executor is not None and not callable(getattr(executor, "submit", None)):
        raise TuneInputError(NO_SUBMIT.format(kind=type(executor).__name__))
    request = make_request(num_classes=num_classes, candidates=candidates, seeds=seeds,
                           confirm_seeds=confirm_seeds, criterion=criterion, output_dir=output_dir, name=name,
                           class_names=class_names, design=design)
    assert request.num_classes is not None
    producer = Producer(function_identity(train_fn, version), "train_fn", FUNCTION_WAY_OUT)
    store = TrialStore(request.directory, request.num_classes, producer, retrain=bool(retrain))
    source = FunctionSource(partial(_train, train_fn), store, executor=executor, workers=workers)
    return _PreparedTune(request, source, stream)


def _with_parameters_of(prepare: Callable[_P, object]) -> Callable[[Callable[..., _R]], Callable[_P, _R]]:
    """Give the decorated function ``prepare``'s parameters: type checkers and IDEs read them from this
    function's type, ``help()`` and :func:`inspect.signature` from the ``__signature__`` it sets (the
    decorated function's own return annotation kept)."""

    def decorate(function: Callable[..., _R]) -> Callable[_P, _R]:
        returns = inspect.signature(function).return_annotation
        function.__signature__ = inspect.signature(prepare).replace(  # type: ignore[attr-defined]
            return_annotation=returns)
        return function

    return decorate


@_with_parameters_of(_prepared_tune)
def tune(*args: Any, **kwargs: Any) -> TuneResult:
    """Choose among loss candidates on YOUR training code's validation predictions, confirm on fresh
    seeds, and advise: adopt the chosen loss only when the confirmation says so at the design's stated
    error rate, else keep ERM. Writes ``recommendation.json`` and the confirmation report under
    ``output_dir/name``.

    ``train_fn(candidate, seed)`` trains one trial and returns :class:`mr2.tune.TrialPredictions`
    (validation and test: ``y_true`` plus ``y_pred`` or ``logits``). It should call
    ``candidate.seed_everything(seed)`` first, train with ``loss = candidate.make_loss()`` (an
    ``nn.Module`` called as ``loss(logits, features, target)``; ``features``, the penultimate layer, is
    needed when ``loss.needs_features``; ``loss.parameters()`` belong in the optimiser), and predict the
    same validation and test samples in the same order in every trial.

    A trial that raises or returns non-finite logits FAILED: its candidate is ruled out and the tune
    goes on (ERM failing ends it).

    Args:
        train_fn: the training function (picklable, i.e. defined at module level, when ``executor`` is
            a process pool or a submitit executor).
        num_classes: K.
        candidates: ``"full"`` (the default; its losses: two-stage procedures need ``mr2 tune
            --config``), ``"quick"`` or a list of :class:`mr2.tune.Candidate` including ``erm``.
        seeds: the selection seed pool (a count from 0, or a list; at least 2; default: what the
            design uses, ``design.selection_seeds``: 2 for the default design).
        confirm_seeds: the fresh confirmation seed pool (a count after the selection seeds, or a list;
            default: what the design uses, ``design.confirmation_seeds``: 17 for the default design;
            the plan trains only the seeds its looks need).
        criterion: ``hard_tier``, ``worst_class`` or ``overall``.
        output_dir: where the tune directory goes.
        name: the tune directory's name.
        class_names: K class names for the report.
        executor: a :class:`concurrent.futures.Executor` (or a submitit executor: trials become Slurm
            jobs) to run trials in parallel; None runs them one after another in this process.
        workers: trials submitted to ``executor`` at a time (default: its worker count).
        design: the procedure (:class:`mr2.tune.design.Design`; the default is the stated rule of
            docs/tune.md).
        stream: progress and results (default stdout).
        version: what ``train_fn`` trains, in your words (e.g. a git commit, or ``"lr=0.1, 20 epochs"``);
            recorded by every trial in place of the default digest of ``train_fn``'s own source. Change
            it whenever something ``train_fn`` calls changes what a trial trains.
        retrain: train again the stored trials of another ``train_fn``, version or K instead of
            refusing them.

    Returns:
        :class:`mr2.tune.driver.TuneResult` (``result.adopt``; ``result.recommended.make_loss()`` is the
        loss to use: the adopted one, else ERM's cross-entropy).

    Raises:
        TuneInputError: bad arguments (nothing written).
        TrialError: ``train_fn`` returned something tune cannot use (wrong type, wrong K, ``y_true``
            differing between trials); finished trials are kept and reused by the next call.
        TuneSelectionError: ERM failed, or no choice could be made.

    Running the same call again reuses every finished trial (resume). Each trial records what trained
    it: ``train_fn``'s ``module.qualname`` (with the numbers and strings a ``functools.partial`` binds)
    and either ``version`` or a digest of ``train_fn``'s source.
    A call whose record differs from the stored trials' (another function, an edited one, another
    version) is refused before any trial runs (a :class:`TrialError` naming the difference): pass
    another ``name``, or ``retrain=True``. A wrapper made with ``functools.wraps(train_fn)`` keeps
    ``train_fn``'s record.
    """
    prepared = _prepared_tune(*args, **kwargs)
    return run_tune(prepared.request, prepared.source, stream=prepared.stream)


@_with_parameters_of(_prepared_tune)
def describe_tune(*args: Any, **kwargs: Any) -> str:
    """The dry run of :func:`tune` (``mr2 tune --dry-run`` for the Python way in): the rule, the
    design, the expected and maximum trainings and the first round's trials with their state
    (``finished`` when a previous call stored them). Nothing runs and nothing is written.

    Takes :func:`tune`'s arguments: the same call with ``describe_tune`` in place of ``tune``. They are
    checked as :func:`tune` checks them, the stored trials included (they must be ``train_fn``'s, with
    ``version`` when given, unless ``retrain``); ``train_fn`` is not called and ``stream`` is not used
    (the description is returned).

    Raises:
        TuneInputError: bad arguments, exactly as :func:`tune` would.
        TrialError: stored trials of another ``train_fn``, version or K (without ``retrain``).
    """
    prepared = _prepared_tune(*args, **kwargs)
    return describe(prepared.request, prepared.source)
