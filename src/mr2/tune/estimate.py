"""How long ``mr2 tune``'s trials would take on this machine: measured, not guessed.

:func:`measure_step` builds the configuration's data and model with ERM (as its first run would),
trains a few steps with the thread count the runs will have and times them; :func:`estimate_text`
turns that into the one line the ``--config`` dry run prints, saying what the figure is based on and
what it leaves out (evaluation, start-up, the candidates' extra cost per step over ERM).

Your own code (``--command``, a Python ``train_fn``) can only be timed by running it: a running tune
prints :func:`remaining_text` after ERM's first trial (the expected and the most time left, from that
trial's wall time), and ``mr2 tune --command ... --dry-run --time-one-trial`` runs ERM's first trial
once in a temporary directory to print the same figures before the tune (:func:`time_one_trial`).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import torch

from mr2.config import RunConfig
from mr2.sweep.processes import default_threads
from mr2.tune.candidates import REFERENCE_LABEL
from mr2.tune.design import SELECTION, Request
from mr2.tune.engine_source import EngineSource
from mr2.tune.source import TrialSource, format_seconds

if TYPE_CHECKING:
    from mr2.tune.request import TuneRequest

__all__ = [
    "NO_ESTIMATE_COMMAND", "StepTiming", "estimate_text", "measure_step", "remaining_text",
    "time_one_trial", "tune_estimate",
]

#: The dry run's line for ``--command`` without ``--time-one-trial``.
NO_ESTIMATE_COMMAND = (
    "time estimate: none (mr2 cannot time your command without running it: add --time-one-trial to run "
    "ERM's first trial once, in a temporary directory, and time it; a tune prints its estimate after "
    "ERM's first trial)"
)
#: What a failed timed trial prints (its directory is kept for its log).
TIMED_TRIAL_FAILED = "time estimate: none: ERM's timed trial failed ({failure}); its directory {path} is kept"
#: The dry run's line for ``regime: linear_probe``: its data is built by extracting features.
_NO_ESTIMATE_LINEAR_PROBE = (
    "time estimate: none (a linear_probe run extracts its features first; the dry run does not)"
)
#: Steps timed after one untimed warm-up step.
TIMED_STEPS = 5


@dataclass(frozen=True)
class StepTiming:
    """One measurement of the configuration's training step.

    Attributes:
        seconds_per_step: mean wall time of a timed step (ERM, the configuration's model and data).
        steps_per_epoch: training batches per epoch.
        threads: torch threads it ran with (those of one run of the tune).
        device: where it ran (``cpu``, ``cuda:0``...).
        steps: how many steps were timed.
        startup_seconds: a run's start before training: a fresh Python importing mr2's engine (timed
            in a subprocess) plus building the data, the model and the method (timed here).
        validation_seconds: one evaluation pass over the validation split (each epoch has one).
        test_seconds: one pass over the test split (each run ends with one), from the validation
            pass's time per sample.
    """

    seconds_per_step: float
    steps_per_epoch: int
    threads: int
    device: str
    steps: int
    startup_seconds: float = 0.0
    validation_seconds: float = 0.0
    test_seconds: float = 0.0

    def run_seconds(self, epochs: int) -> float:
        """One run: start-up, ``epochs`` x (training steps + a validation pass), a test pass.

        >>> StepTiming(0.01, 100, 1, "cpu", 5, 2.0, 0.5, 1.0).run_seconds(3)
        7.5
        """
        per_epoch = self.steps_per_epoch * self.seconds_per_step + self.validation_seconds
        return self.startup_seconds + epochs * per_epoch + self.test_seconds


def measure_step(config: RunConfig, threads: int, steps: int = TIMED_STEPS) -> StepTiming:
    """Time ``steps`` training steps of ERM with ``config``'s data, model and optimiser on this machine
    (loading their batches included), with ``threads`` torch threads (restored afterwards), after one
    untimed step. Writes nothing."""
    from mr2.engine.builders import build_data
    from mr2.engine.loop import train_one_epoch
    from mr2.engine.runtime import Runtime, seed_everything
    from mr2.engine.trainer import Trainer

    erm = dataclasses.replace(config, method=dataclasses.replace(config.method, name="erm", options={}))
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        built = time.perf_counter()
        runtime = Runtime.start(erm)
        seed_everything(erm.seed, False)
        trainer = Trainer(erm, runtime, build_data(erm, runtime.device))
        built = time.perf_counter() - built
        loader = trainer.train_loader(0)
        batches = iter(loader)
        timed = 0

        def run(count: int) -> int:
            done = 0

            def counted() -> Iterator[object]:  # the batches are loaded inside the timed steps
                nonlocal done
                for batch in itertools.islice(batches, count):
                    done += 1
                    yield batch

            train_one_epoch(trainer.train_model, trainer.method, counted(), trainer.optimizer,
                            trainer.scheduler, trainer.step_setup)
            if runtime.device.type == "cuda":
                torch.cuda.synchronize(runtime.device)
            return done

        if run(1):  # warm-up (the loader's start, first allocations): not timed
            start = time.perf_counter()
            timed = run(steps)
            seconds = (time.perf_counter() - start) / max(1, timed)
        else:
            seconds = 0.0
        validation, test = _evaluation_seconds(trainer)
        return StepTiming(seconds, len(loader), threads, str(runtime.device), timed,
                          startup_seconds=_import_seconds() + built, validation_seconds=validation,
                          test_seconds=test)
    finally:
        torch.set_num_threads(previous)


#: Evaluation batches timed by the dry run (the pass's time is extrapolated from them).
TIMED_EVAL_BATCHES = 10


def _evaluation_seconds(trainer: Any) -> tuple[float, float]:
    """(one validation pass, one test pass) in seconds: up to :data:`TIMED_EVAL_BATCHES` evaluation
    batches of the validation split timed and scaled to the split's size, the test pass scaled from
    the same time per sample."""
    from mr2.engine.loop import evaluate

    data = trainer.data
    split = data.val if trainer.has_validation else data.test
    loader = trainer.eval_loader(split)
    batches = list(itertools.islice(iter(loader), TIMED_EVAL_BATCHES))
    if not batches:
        return 0.0, 0.0
    start = time.perf_counter()
    evaluate(trainer.model, batches, data.num_classes, trainer.device)
    seconds = time.perf_counter() - start
    per_sample = seconds / max(1, sum(len(batch[1]) for batch in batches))
    val_size = len(data.val) if trainer.has_validation else 0
    return per_sample * val_size, per_sample * len(data.test)


def _import_seconds() -> float:
    """What a fresh Python takes to import mr2's engine (each run is a process of its own)."""
    start = time.perf_counter()
    try:
        subprocess.run([sys.executable, "-c", "import mr2.engine.run"], capture_output=True, timeout=300,
                       check=False)
    except (OSError, subprocess.SubprocessError):
        return 0.0
    return time.perf_counter() - start


def estimate_text(timing: StepTiming, epochs: int, expected_runs: float, max_runs: int, workers: int) -> str:
    """The dry run's one-line time estimate from a measured step, evaluation pass and start-up.

    Example:
        >>> timing = StepTiming(0.01, 100, 1, "cpu", 5, 2.0, 0.5, 1.0)
        >>> text = estimate_text(timing, epochs=3, expected_runs=12.0, max_runs=18, workers=2)
        >>> print(text)  # doctest: +NORMALIZE_WHITESPACE
        time estimate: about 45.0 s for the 12.0 trainings expected and at most 1 min 08 s for the 18 the
        plan may run (2 at a time, each 7.5 s: start-up 2.0 s, 3 epochs x (100 steps x 0.0100 s + a
        validation pass 0.5 s), a test pass 1.0 s; measured with ERM, this configuration's model and data
        on cpu, 1 thread: 5 steps, the start-up and up to 10 evaluation batches; not included: the
        candidates' extra cost per step over ERM)
    """
    per_run = timing.run_seconds(epochs)
    expected = math.ceil(expected_runs / workers) * per_run
    most = math.ceil(max_runs / workers) * per_run
    threads = f"{timing.threads} thread{'s' if timing.threads != 1 else ''}"
    return (
        f"time estimate: about {format_seconds(expected)} for the {expected_runs:.1f} trainings expected "
        f"and at most {format_seconds(most)} for the {max_runs} the plan may run ({workers} at a time, each "
        f"{format_seconds(per_run)}: start-up {format_seconds(timing.startup_seconds)}, {epochs} epochs x "
        f"({timing.steps_per_epoch} steps x {timing.seconds_per_step:.4f} s + a validation pass "
        f"{format_seconds(timing.validation_seconds)}), a test pass {format_seconds(timing.test_seconds)}; "
        f"measured with ERM, this configuration's model and data on {timing.device}, {threads}: "
        f"{timing.steps} steps, the start-up and up to {TIMED_EVAL_BATCHES} evaluation batches; not "
        "included: the candidates' extra cost per step over ERM)"
    )


def tune_estimate(source: EngineSource) -> str:
    """The dry run's time-estimate line for an engine tune: one step measured with the threads each run
    will get (as the sweep's runner sets them), or why there is none. The runs are the plan's expected
    trainings (by simulation) and its maximum."""
    config = source.config
    if config.regime == "linear_probe":
        return _NO_ESTIMATE_LINEAR_PROBE
    threads = source.threads_per_run or default_threads(source.workers)
    timing = measure_step(config, threads)
    plan = source.request.plan()
    return estimate_text(timing, config.optim.epochs, plan.expected_trainings(), plan.max_trainings(),
                         source.workers)


def remaining_text(seconds: float, done: int, expected: float, most: int, workers: int, *,
                   timed: str = "ERM's first trial") -> str:
    """The expected and the most time left once ``done`` trainings are done, each remaining training
    taking ``seconds`` (the wall time of one of ERM's trials) and ``workers`` running at once.

    Example:
        >>> print(remaining_text(30.0, 1, 55.1, 77, 2))  # doctest: +NORMALIZE_WHITESPACE
        time estimate (ERM's first trial took 30.0 s): about 14 min 00 s for the 54.1 trainings expected
        still to run, at most 19 min 00 s for the 76 the plan may still run (2 at a time, each timed as
        that trial; not included: the candidates' extra cost per trial over ERM)
    """
    workers = max(1, int(workers))
    left_expected = max(0.0, expected - done)
    left_most = max(0, most - done)
    expected_time = format_seconds(math.ceil(left_expected / workers) * seconds)
    most_time = format_seconds(math.ceil(left_most / workers) * seconds)
    return (
        f"time estimate ({timed} took {format_seconds(seconds)}): about {expected_time} "
        f"for the {left_expected:.1f} trainings expected still to run, at most {most_time} "
        f"for the {left_most} the plan may still run ({workers} at a time, each timed as that trial; not "
        "included: the candidates' extra cost per trial over ERM)"
    )


def time_one_trial(request: TuneRequest, make_source: Callable[[TuneRequest], TrialSource], workers: int,
                   stream: TextIO) -> tuple[str, bool]:
    """Run ERM's first selection trial once, in a temporary directory (removed afterwards; kept when
    the trial fails, for its log), and give the dry run's time-estimate line for the whole tune from
    its wall time: ``(line, ok)``. The tune directory is not touched.

    Args:
        request: the tune's request (its directory is not used).
        make_source: builds the trial source for a request (the same command, workers and timeout).
        workers: trials the tune runs at once.
        stream: where the trial's progress goes.

    Raises:
        mr2.tune.errors.TrialError: the trial's predictions cannot be used (named with its log).
    """
    scratch = Path(tempfile.mkdtemp(prefix="mr2-tune-timing-"))
    timing = dataclasses.replace(request, output_dir=str(scratch))
    trial = timing.trial(Request(SELECTION, REFERENCE_LABEL, timing.seeds[0]))
    print(f"timing one trial: {trial.name} (in {scratch}, removed afterwards)", file=stream, flush=True)
    try:
        [result] = make_source(timing).run([trial], stream)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    if not result.ok:
        return TIMED_TRIAL_FAILED.format(failure=result.failure, path=scratch), False
    shutil.rmtree(scratch, ignore_errors=True)
    plan = request.plan()
    return remaining_text(result.seconds, 0, plan.expected_trainings(), plan.max_trainings(), workers,
                          timed="ERM's timed trial"), True
