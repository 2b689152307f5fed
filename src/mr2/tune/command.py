"""``mr2 tune --command``: trials run by a shell command of your own.

The command is a template with the placeholders ``{loss}`` (the candidate's loss specification, JSON,
shell-quoted: turn it into the loss with :func:`mr2.tune.loss_from_spec`), ``{seed}`` (the trial's
seed) and ``{out}`` (a per-trial directory, shell-quoted, where the command must write ``val.npz`` and
``test.npz``: ``y_true`` plus ``y_pred`` or ``logits``, the format of ``mr2 report --predictions``)::

    python train.py --loss-json {loss} --seed {seed} --out {out}

Each trial runs it with ``/bin/sh -c`` in the current directory, in a process group of its own; its
output (stdout and stderr) goes to ``trials/<phase>/<label>/seed=<s>/train.log``. When tune is
stopped (Ctrl-C, SIGTERM, SIGHUP), :func:`stop_commands` stops the running commands' process
groups. A command that exits non-zero, writes no predictions, or writes predictions tune cannot
use is a :class:`mr2.tune.TrialError` naming the trial and that log file.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shlex
import shutil
import signal
import string
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from mr2.report.exceptions import PredictionsError
from mr2.report.limits import DEFAULT_MAX_CLASSES
from mr2.report.predictions import NOT_FINITE, read_predictions
from mr2.sweep.processes import start_subprocess
from mr2.tune.errors import TrialError, TrialFailed, TuneInputError
from mr2.tune.request import TuneRequest
from mr2.tune.source import TrialResult, run_stored_trials
from mr2.tune.trials import SPLITS, Predictions, Trial, TrialPredictions, TrialStore

__all__ = [
    "PLACEHOLDERS",
    "CommandSource",
    "allow_commands",
    "check_command",
    "command_source",
    "stop_commands",
]

#: The placeholders a command must hold, each once or more.
PLACEHOLDERS = ("loss", "seed", "out")
#: The directory, inside a trial's, handed to the command as ``{out}``.
OUTPUT_DIR = "output"
MAX_COMMAND_LENGTH = 10_000

_EMPTY_COMMAND = "--command is empty; give the command that trains one trial, e.g. " \
    "'python train.py --loss-json {loss} --seed {seed} --out {out}'"
MISSING_PLACEHOLDER = (
    "--command has no {names}: mr2 substitutes {{loss}} (the loss specification, JSON), {{seed}} and {{out}} "
    "(the directory for val.npz and test.npz) per trial; e.g. "
    "'python train.py --loss-json {{loss}} --seed {{seed}} --out {{out}}'"
)
UNKNOWN_PLACEHOLDER = (
    "--command has the unknown placeholder {{{name}}}; the placeholders are {{loss}}, {{seed}} and {{out}} "
    "(write a literal brace as {{{{ or }}}})"
)
FORMAT_SPEC = (
    "--command writes {shown}: placeholders take no format spec or conversion; write {{{name}}} (mr2 "
    "substitutes and shell-quotes it)"
)
BAD_TIMEOUT = "--trial-timeout must be a number of seconds > 0; got {value}"
QUOTED_PLACEHOLDER = (
    "--command puts {{{name}}} in quotes; leave the placeholders unquoted: mr2 shell-quotes each value "
    "itself (quotes around it would break the JSON of {{loss}} or a path with spaces)"
)
_BAD_TEMPLATE = "--command is not a valid template: {error} (write a literal brace as {{{{ or }}}})"
_TOO_LONG = "--command is {length} characters long; at most {maximum}"
EXIT_CODE = "trial {trial}: the command exited with code {code} (log: {log})"
_NOT_STARTED = "trial {trial}: the command could not be started: {error} (log: {log})"
NO_PREDICTIONS = (
    "trial {trial}: the command wrote no predictions: {path} is missing; it must write val.npz and "
    "test.npz into {{out}} (log: {log})"
)
_BAD_PREDICTIONS = "trial {trial}: {error} (log: {log})"
_STOPPED = "trial {trial} was not started: tune is stopping"
TIMED_OUT = (
    "trial {trial}: the command ran longer than --trial-timeout {seconds:g} s and was stopped (log: {log})"
)
#: The trial's process-group leader (run as a script: standard library only).
TRIAL_PROCESS = str(Path(__file__).with_name("trial_process.py"))
#: Seconds between SIGTERM and SIGKILL when a trial command is stopped (tune stopped, or died).
STOP_GRACE = 2.0
#: Seconds the leader is given beyond the grace to kill and reap what its trial left.
LEADER_MARGIN = 5.0


_NON_FINITE_PART = NOT_FINITE.split("{count}")[1].split("(")[0]  # " non-finite value"
#: Lines of a failed trial's log quoted in its failure.
LOG_TAIL_LINES = 3


def _tail(log: Path) -> str:
    """``"; last lines of its log: ..."`` (the error, usually), or "" when the log says nothing more."""
    try:
        lines = [line.rstrip() for line in log.read_text(errors="replace").splitlines()[1:] if line.strip()]
    except OSError:
        return ""
    if not lines:
        return ""
    return "; last lines of its log: " + " | ".join(line[:300] for line in lines[-LOG_TAIL_LINES:])


def check_command(template: str) -> str:
    """Return ``template`` if it is a usable command template (module docstring).

    Raises:
        TuneInputError: empty, too long, malformed braces, an unknown placeholder, or a missing one.

    Example:
        >>> check_command("python t.py --loss {loss} --seed {seed} --out {out}")
        'python t.py --loss {loss} --seed {seed} --out {out}'
    """
    if not template.strip():
        raise TuneInputError(_EMPTY_COMMAND)
    if len(template) > MAX_COMMAND_LENGTH:
        raise TuneInputError(_TOO_LONG.format(length=len(template), maximum=MAX_COMMAND_LENGTH))
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as error:
        raise TuneInputError(_BAD_TEMPLATE.format(error=error)) from None
    fields = [name for _, name, _, _ in parsed if name is not None]
    for name in fields:
        if name not in PLACEHOLDERS:
            raise TuneInputError(UNKNOWN_PLACEHOLDER.format(name=name[:40]))
    for index, (_, field, spec, conversion) in enumerate(parsed):
        if field is None:
            continue
        if spec or conversion:
            extra = (f"!{conversion}" if conversion else "") + (f":{spec[:20]}" if spec else "")
            raise TuneInputError(FORMAT_SPEC.format(shown="{" + field + extra + "}", name=field))
        before = parsed[index][0][-1:]  # the text right before the placeholder, and right after it
        after = parsed[index + 1][0][:1] if index + 1 < len(parsed) else ""
        if before in ("'", '"') or after in ("'", '"'):
            raise TuneInputError(QUOTED_PLACEHOLDER.format(name=field))
    missing = [f"{{{name}}}" for name in PLACEHOLDERS if name not in fields]
    if missing:
        raise TuneInputError(MISSING_PLACEHOLDER.format(names=" or ".join(missing)))
    return template


#: The trials' command processes running in this process (their session leaders).
_RUNNING: set[subprocess.Popen[bytes]] = set()
_LOCK = threading.Lock()
_STOPPING = threading.Event()


def stop_commands(grace: float = STOP_GRACE) -> int:
    """Stop every trial command this process started and is still waiting for: SIGTERM to each
    command's process group (the shell and what it started), SIGKILL after ``grace`` seconds.
    Returns how many were running."""
    with _LOCK:
        _STOPPING.set()  # no command starts after this
        running = list(_RUNNING)
    _stop(running, grace)
    return len(running)


def allow_commands() -> None:
    """Let trial commands start again after :func:`stop_commands` (a new tune in the same process)."""
    _STOPPING.clear()


def _stop(running: list[subprocess.Popen[bytes]], grace: float) -> None:
    """SIGTERM to each command's process group. Its leader then stops everything the trial started,
    in the group or not (SIGKILL after ``grace`` seconds: :mod:`mr2.tune.trial_process`); it is given
    :data:`LEADER_MARGIN` seconds more for that, then SIGKILL goes to the group whatever still runs
    in it (a leader that did not end)."""
    for process in running:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace + LEADER_MARGIN
    for process in running:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(max(0.0, deadline - time.monotonic()))
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)


@dataclass
class CommandSource:
    """Runs trials with a command template (module docstring): a trial source of
    :mod:`mr2.tune.source`.

    Attributes:
        template: the checked command template.
        store: where the trials are kept.
        workers: trials in parallel (each its own command).
        executor: None: a thread per running trial here; a submitit executor: each trial a Slurm job.
        timeout: seconds a trial may run before it is stopped and FAILS (None: no limit).
    """

    template: str
    store: TrialStore
    workers: int = 1
    executor: Any = None
    timeout: float | None = None
    kind: str = "command"

    def record(self) -> dict[str, Any]:
        return {"kind": "command", "command": self.template}

    def num_classes(self) -> int | None:
        return self.store.num_classes

    def is_finished(self, trial: Trial) -> bool:
        return self.store.is_finished(trial)

    def describe(self, trial: Trial) -> str:
        return self.command(trial)

    def run(self, trials: Sequence[Trial], stream: TextIO) -> list[TrialResult]:
        if self.executor is not None:
            return run_stored_trials(trials, self, self.store, stream=stream, executor=self.executor,
                                     workers=self.workers, log=self.log)
        with ThreadPoolExecutor(self.workers) as pool:
            try:
                return run_stored_trials(trials, self, self.store, stream=stream, executor=pool,
                                         workers=self.workers, log=self.log)
            except BaseException:
                pool.shutdown(wait=False, cancel_futures=True)  # no queued trial starts
                stop_commands()
                raise

    def command(self, trial: Trial) -> str:
        """The command line of one trial."""
        spec = json.dumps(trial.candidate.loss_spec(), separators=(",", ":"))
        out = (self.store.path(trial) / OUTPUT_DIR).absolute()  # absolute: it cannot read as an option
        return self.template.format(loss=shlex.quote(spec), seed=trial.seed, out=shlex.quote(str(out)))

    def log(self, trial: Trial) -> Path:
        return self.store.log(trial)

    def __call__(self, trial: Trial) -> TrialPredictions:
        """Run the trial's command and read its predictions.

        Raises:
            TrialError: non-zero exit, missing or unusable predictions (naming the trial and its log).
        """
        log = self.log(trial)
        out = self.store.path(trial) / OUTPUT_DIR
        out.mkdir(parents=True, exist_ok=True)
        for split in SPLITS:  # a previous attempt's files must not pass for this one's
            (out / f"{split}.npz").unlink(missing_ok=True)
        command = self.command(trial)
        env = {**os.environ, "MR2_TUNE_TRIAL": trial.name}
        with open(log, "w", encoding="utf-8") as handle:
            handle.write(f"$ {command}\n")
            handle.flush()
            with _LOCK:
                if _STOPPING.is_set():
                    raise TrialError(_STOPPED.format(trial=trial.name))
                try:
                    # The group's leader takes the group down with tune (module docstring).
                    process = start_subprocess([sys.executable, TRIAL_PROCESS, str(STOP_GRACE), command],
                                               stdout=handle, stderr=subprocess.STDOUT,
                                               stdin=subprocess.DEVNULL, env=env)
                except OSError as error:
                    raise TrialFailed(_NOT_STARTED.format(trial=trial.name, error=error, log=log)) from None
                _RUNNING.add(process)
            try:
                code = process.wait(self.timeout)
            except subprocess.TimeoutExpired:
                _stop([process], STOP_GRACE)
                raise TrialFailed(TIMED_OUT.format(trial=trial.name, seconds=self.timeout, log=log)) from None
            except BaseException:  # interrupted while waiting (Ctrl-C, SIGTERM): stop the command too
                _stop([process], STOP_GRACE)
                raise
            finally:
                with _LOCK:
                    _RUNNING.discard(process)
        if code != 0:
            raise TrialFailed(EXIT_CODE.format(trial=trial.name, code=code, log=log) + _tail(log))
        splits = {}
        for split in SPLITS:
            path = out / f"{split}.npz"
            if not path.is_file():
                raise TrialFailed(NO_PREDICTIONS.format(trial=trial.name, path=path, log=log) + _tail(log))
            try:
                item = read_predictions(path, max_classes=max(self.store.num_classes, DEFAULT_MAX_CLASSES))
            except PredictionsError as error:
                # Non-finite logits: a diverged model, the trial failed; anything else is bad input.
                kind = TrialFailed if _NON_FINITE_PART in str(error) else TrialError
                raise kind(_BAD_PREDICTIONS.format(trial=trial.name, error=error, log=log)) from None
            splits[split] = (Predictions(item.y_true, logits=item.logits) if item.logits is not None
                             else Predictions(item.y_true, y_pred=item.y_pred))
        return TrialPredictions(val=splits["val"], test=splits["test"])


NO_MR2_INTERPRETER = (
    "warning: --command runs {word} ({path}), which cannot import mr2 ({error}): every trial would fail "
    "at `import mr2`; activate the virtual environment mr2 is installed in (source .venv/bin/activate) or "
    "write its interpreter, e.g. {suggestion}"
)


def interpreter_warning(template: str) -> str | None:
    """A warning when the command starts with a Python interpreter that cannot import mr2 (the usual
    cause of every trial failing with "exited with code 1": mr2 run from outside its ``.venv``), else
    None. Only a first word that names a Python interpreter is checked (``python``, ``python3.11``,
    ``.venv/bin/python``); ``torchrun`` or a shell script are left alone."""
    try:
        words = shlex.split(template)
    except ValueError:  # unbalanced quotes: the shell will say so in the first trial's log
        return None
    if not words or not re.fullmatch(r"python[0-9.]*", Path(words[0]).name):
        return None
    path = shutil.which(words[0])
    if path is None:
        return NO_MR2_INTERPRETER.format(word=words[0], path="not found", error="no such program",
                                         suggestion=sys.executable)
    try:
        result = subprocess.run([path, "-c", "import mr2"], capture_output=True, text=True, timeout=60,
                                stdin=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if result.returncode == 0:
        return None
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    return NO_MR2_INTERPRETER.format(word=words[0], path=path, error=lines[-1] if lines else "no output",
                                     suggestion=sys.executable)


def command_source(template: str, request: TuneRequest, *, workers: int = 1,
                   launcher: dict[str, Any] | None = None, timeout: float | None = None) -> CommandSource:
    """The command source of a tune, checked: the template, and the launcher (``slurm``: each trial a
    submitit job, its files under ``<tune>/submitit/``).

    Raises:
        TuneInputError: a bad template (:func:`check_command`).
        mr2.config.ConfigError: a bad launcher mapping, or Slurm's commands missing.
    """
    assert request.num_classes is not None
    if timeout is not None and not (math.isfinite(timeout) and timeout > 0):
        raise TuneInputError(BAD_TIMEOUT.format(value=timeout))
    source = CommandSource(check_command(template), TrialStore(request.directory, request.num_classes),
                           workers=workers, timeout=timeout)
    if launcher is not None:
        from mr2.sweep.launcher import check_launcher_available, launcher_from_dict

        options = launcher_from_dict(launcher)
        if options.name == "slurm":
            from mr2.sweep.cluster import OwnedExecutor, slurm_executor

            check_launcher_available(options)
            # Jobs that end with tune, and a record of them for the next run (mr2.sweep.cluster).
            folder = request.directory / "submitit"
            jobs = slurm_executor(folder, options, f"mr2-tune-{request.name}")
            source.executor = OwnedExecutor(jobs, folder)
    return source
