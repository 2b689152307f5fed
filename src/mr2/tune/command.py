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
import os
import shlex
import signal
import string
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from mr2.report.exceptions import PredictionsError
from mr2.report.limits import DEFAULT_MAX_CLASSES
from mr2.report.predictions import read_predictions
from mr2.tune.errors import TrialError, TuneInputError
from mr2.tune.trials import SPLITS, Predictions, Trial, TrialPredictions, TrialStore

__all__ = ["PLACEHOLDERS", "CommandSource", "allow_commands", "check_command", "stop_commands"]

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
        fields = [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]
    except ValueError as error:
        raise TuneInputError(_BAD_TEMPLATE.format(error=error)) from None
    for name in fields:
        if name not in PLACEHOLDERS:
            raise TuneInputError(UNKNOWN_PLACEHOLDER.format(name=name[:40]))
    missing = [f"{{{name}}}" for name in PLACEHOLDERS if name not in fields]
    if missing:
        raise TuneInputError(MISSING_PLACEHOLDER.format(names=" or ".join(missing)))
    return template


#: The trials' command processes running in this process (their session leaders).
_RUNNING: set[subprocess.Popen[bytes]] = set()
_LOCK = threading.Lock()
_STOPPING = threading.Event()


def stop_commands(grace: float = 5.0) -> int:
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
    for process in running:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for process in running:
        try:
            process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)


@dataclass(frozen=True)
class CommandSource:
    """Runs trials with a command template (module docstring)."""

    template: str
    store: TrialStore

    def command(self, trial: Trial) -> str:
        """The command line of one trial."""
        spec = json.dumps(trial.candidate.loss_spec(), separators=(",", ":"))
        out = self.store.path(trial) / OUTPUT_DIR
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
                    process = subprocess.Popen(["/bin/sh", "-c", command], stdout=handle,
                                               stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                               start_new_session=True)
                except OSError as error:
                    raise TrialError(_NOT_STARTED.format(trial=trial.name, error=error, log=log)) from None
                _RUNNING.add(process)
            try:
                code = process.wait()
            except BaseException:  # interrupted while waiting (Ctrl-C, SIGTERM): stop the command too
                _stop([process], 5.0)
                raise
            finally:
                with _LOCK:
                    _RUNNING.discard(process)
        if code != 0:
            raise TrialError(EXIT_CODE.format(trial=trial.name, code=code, log=log))
        splits = {}
        for split in SPLITS:
            path = out / f"{split}.npz"
            if not path.is_file():
                raise TrialError(NO_PREDICTIONS.format(trial=trial.name, path=path, log=log))
            try:
                item = read_predictions(path, max_classes=max(self.store.num_classes, DEFAULT_MAX_CLASSES))
            except PredictionsError as error:
                raise TrialError(_BAD_PREDICTIONS.format(trial=trial.name, error=error, log=log)) from None
            splits[split] = (Predictions(item.y_true, logits=item.logits) if item.logits is not None
                             else Predictions(item.y_true, y_pred=item.y_pred))
        return TrialPredictions(val=splits["val"], test=splits["test"])
