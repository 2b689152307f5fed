"""``mr2 tune --command``: trials run by a shell command of your own.

The command is a template with the placeholders ``{loss}`` (the candidate's loss specification, JSON:
turn it into the loss with :func:`mr2.tune.loss_from_spec`), ``{seed}`` (the trial's seed) and
``{out}`` (a per-trial directory where the command must write ``val.npz`` and ``test.npz``: ``y_true``
plus ``y_pred`` or ``logits``, the format of ``mr2 report --predictions``)::

    python train.py --loss-json {loss} --seed {seed} --out {out}

Shell safety by construction: the values never pass through a shell parser. Each trial's environment
holds them (:data:`ENVIRONMENT`: ``MR2_LOSS``, ``MR2_SEED``, ``MR2_OUT``) and each placeholder becomes
a double-quoted reference to its variable (``{out}`` runs as ``"$MR2_OUT"``): one word, whatever the
value holds. That holds only outside quotes, so :func:`check_command` refuses a placeholder inside
quotes of any kind (a quote-aware scan of the template: ``sh -c "... {out} ..."`` is refused; in a nested
shell's quoted script write ``"$MR2_OUT"`` instead, which also stands for the placeholder; ``{seed}``
may sit inside ``$((...))``, where it runs as the number ``$MR2_SEED``). As a second
guard, an output directory or name holding ``$``, a backtick or a control character is refused
(:data:`UNSAFE_OUTPUT`), so even a template that runs a value as code (``eval``) cannot start a command
substitution from it.

Each trial records what produced it (:func:`command_identity`: the template and a digest of each
existing file it names); a rerun with another command or a changed script is refused before any trial
(:meth:`mr2.tune.trials.TrialStore.check_producer`), or trains them again with ``--retrain``.

Each trial runs it with ``/bin/sh -c`` in the current directory, in a process group of its own; its
output (stdout and stderr) goes to ``trials/<phase>/<label>/seed=<s>/train.log``. When tune is
stopped (Ctrl-C, SIGTERM, SIGHUP), the source stops the process groups of the commands it runs
(:meth:`CommandSource.stop`). A command that exits non-zero, writes no predictions, or writes
predictions tune cannot use is a :class:`mr2.tune.TrialError` naming the trial and that log file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
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

from mr2.io import open_text_no_follow
from mr2.losses.collapse import COLLAPSE_RECORD, collapse_recorded
from mr2.sweep.processes import start_subprocess
from mr2.tune.candidates import Candidate
from mr2.tune.errors import TrialError, TrialFailed, TuneInputError
from mr2.tune.request import TuneRequest
from mr2.tune.source import StoredTrialSource, TrialResult, run_stored_trials
from mr2.tune.text import script_paste
from mr2.tune.trial_process import DEFAULT_GRACE
from mr2.tune.trials import SPLITS, Producer, Trial, TrialPredictions, TrialStore, read_trial_file

__all__ = [
    "ENVIRONMENT",
    "PLACEHOLDERS",
    "CommandSource",
    "RunningCommands",
    "check_command",
    "command_identity",
    "command_source",
    "stop_processes",
]

#: The placeholders a command must hold, each once or more.
PLACEHOLDERS = ("loss", "seed", "out")
#: The environment variable that holds each placeholder's value in a trial; ``{name}`` runs as ``"$VAR"``.
ENVIRONMENT = {"loss": "MR2_LOSS", "seed": "MR2_SEED", "out": "MR2_OUT"}
#: Files named by a command larger than this are digested over their first this many bytes (and size).
MAX_DIGEST_BYTES = 64 * 1024 * 1024
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
_BAD_TIMEOUT = "--trial-timeout must be a number of seconds > 0; got {value}"
#: What to do instead of reusing another command's trials (:data:`mr2.tune.trials.PRODUCER_DIFFERS`).
_WAY_OUT = (
    "give this tune another --name (or --output-dir), or add --retrain to train them again with this command"
)
QUOTED_PLACEHOLDER = (
    "--command puts {{{name}}} inside quotes; leave the placeholders unquoted (mr2 passes each value as one "
    "word, whatever it holds), or, inside a nested shell's quoted script (sh -c '...'), write \"$MR2_LOSS\", "
    "\"$MR2_SEED\" and \"$MR2_OUT\" instead: each trial's environment holds them"
)
UNSAFE_OUTPUT = (
    "the trials' output directory {path} holds {what}, which a shell could run as code when a command "
    "re-reads {{out}}; choose an --output-dir and --name without $, backticks or control characters"
)
_BAD_TEMPLATE = "--command is not a valid template: {error} (write a literal brace as {{{{ or }}}})"
_TOO_LONG = "--command is {length} characters long; at most {maximum}"
EXIT_CODE = "trial {trial}: the command exited with code {code} (log: {log})"
_NOT_STARTED = "trial {trial}: the command could not be started: {error} (log: {log})"
NO_PREDICTIONS = (
    "trial {trial}: the command wrote no predictions: {path} is missing; it must write val.npz and "
    "test.npz into {{out}} (log: {log})"
)
_STOPPED = "trial {trial} was not started: tune is stopping"
TIMED_OUT = (
    "trial {trial}: the command ran longer than --trial-timeout {seconds:g} s and was stopped (log: {log})"
)
#: The trial's process-group leader (run as a script: standard library only).
TRIAL_PROCESS = str(Path(__file__).with_name("trial_process.py"))
#: Seconds between SIGTERM and SIGKILL when a trial command is stopped (tune stopped, or died): the
#: leader's own default.
STOP_GRACE = DEFAULT_GRACE
#: Seconds the leader is given beyond the grace to kill and reap what its trial left.
LEADER_MARGIN = 5.0


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


def _placeholder_contexts(parsed: list[tuple[str, str | None, str | None, str | None]]) -> list[str]:
    """Where each placeholder of a parsed template sits, for a POSIX shell (bash's ``$'...'`` too):
    ``"command"`` (unquoted, at the top or inside ``$(...)``: a ``"$VAR"`` reference there is one word),
    ``"arith"`` (inside ``$((...))``, where a plain ``$VAR`` is read as a number) or ``"quotes"``
    (inside '...', "...", $'...', `...` or ${...}, or right after a backslash).

    A scan of the literal text with a stack of contexts: single quotes end at the next ``'``; double
    quotes honour backslash escapes and open ``$(`` / ``${`` / backticks; ``$(`` opens a fresh command
    context that its matching ``)`` closes; a ``#`` that starts a word comments out the rest of the line.

    Example:
        >>> import string
        >>> parsed = string.Formatter().parse("sh -c 'run {out}' $(cat {loss}) $(({seed}+1))")
        >>> _placeholder_contexts(list(parsed))
        ['quotes', 'command', 'arith']
    """
    modes = ["command"]  # the open contexts, innermost last
    depths = [0]  # open parentheses in each context
    opens = {"'": "single", '"': "double", "`": "backtick"}
    dollar = {"(": "subst", "{": "param", "'": "ansi"}
    contexts = []
    escaped = False  # the previous character was a backslash outside single quotes
    previous = " "

    def push(mode: str) -> None:
        modes.append(mode)
        depths.append(0)

    def pop() -> None:
        modes.pop()
        depths.pop()

    for literal, field, _, _ in parsed:
        i = 0
        while i < len(literal):
            char = literal[i]
            following = literal[i + 1] if i + 1 < len(literal) else ""
            mode = modes[-1]
            if escaped:
                escaped = False
            elif mode == "single":
                if char == "'":
                    pop()
            elif char == "\\":
                escaped = True
            elif mode in ("ansi", "backtick"):
                if char == {"ansi": "'", "backtick": "`"}[mode]:
                    pop()
            elif mode in ("double", "param"):
                if (mode, char) in (("double", '"'), ("param", "}")):
                    pop()
                elif char == "`" or (mode == "param" and char in "'\""):
                    push(opens[char])
                elif char == "$" and literal.startswith("$((", i):
                    push("arith")
                    i += 2
                elif char == "$" and following in ("(", "{"):
                    push(dollar[following])
                    i += 1
            elif mode == "arith":
                if char == "(":
                    depths[-1] += 1
                elif char == ")" and depths[-1]:
                    depths[-1] -= 1
                elif char == ")" and following == ")":
                    pop()
                    i += 1
            else:  # "command" (the top) or "subst" (inside $(...))
                if char in opens:
                    push(opens[char])
                elif char == "$" and literal.startswith("$((", i):
                    push("arith")
                    i += 2
                elif char == "$" and following in dollar:
                    push(dollar[following])
                    i += 1
                elif char == "(":
                    depths[-1] += 1
                elif char == ")" and depths[-1]:
                    depths[-1] -= 1
                elif char == ")" and mode == "subst":
                    pop()
                elif char == "#" and (previous.isspace() or previous in ";&|()"):
                    end = literal.find("\n", i)
                    i = len(literal) if end < 0 else end
                    continue
            previous = char
            i += 1
        if field is not None:
            quoted = escaped or modes[-1] not in ("command", "subst", "arith")
            contexts.append("quotes" if quoted else "arith" if modes[-1] == "arith" else "command")
            escaped = False
            previous = "x"  # a placeholder is a word's text
    return contexts


def _mentions_variable(template: str, name: str) -> bool:
    """Whether the template's text refers to the placeholder's environment variable (``$MR2_OUT``, or
    ``${MR2_OUT}``, written ``${{MR2_OUT}}`` in the template)."""
    return re.search(r"\$(\{)?" + ENVIRONMENT[name] + r"(?(1)\}|\b)", template) is not None


def check_command(template: str) -> str:
    """Return ``template`` if it is a usable command template (module docstring).

    A placeholder may also be given by its environment variable (``"$MR2_OUT"`` for ``{out}``), the way
    to pass it into a nested shell's quoted script.

    Raises:
        TuneInputError: empty, too long, malformed braces, an unknown placeholder, a placeholder inside
            quotes (:data:`QUOTED_PLACEHOLDER`), or a missing one.

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
    for _, field, spec, conversion in parsed:
        if field is not None and (spec or conversion):
            extra = (f"!{conversion}" if conversion else "") + (f":{spec[:20]}" if spec else "")
            raise TuneInputError(FORMAT_SPEC.format(shown="{" + field + extra + "}", name=field))
    for field, context in zip(fields, _placeholder_contexts(parsed), strict=True):
        if context == "quotes" or (context == "arith" and field != "seed"):  # {seed} alone is a number
            raise TuneInputError(QUOTED_PLACEHOLDER.format(name=field))
    text = "".join(literal for literal, _, _, _ in parsed)  # what the shell sees, less the placeholders
    missing = [f"{{{name}}}" for name in PLACEHOLDERS
               if name not in fields and not _mentions_variable(text, name)]
    if missing:
        raise TuneInputError(MISSING_PLACEHOLDER.format(names=" or ".join(missing)))
    return template


class RunningCommands:
    """The trial commands one :class:`CommandSource` started and still waits for, and its stop flag:
    after :meth:`stop`, no command starts. A copy sent to another process (a submitit job) starts
    empty: each process stops the commands it started."""

    def __init__(self) -> None:
        self._running: set[subprocess.Popen[bytes]] = set()
        self._lock = threading.Lock()
        self._stopping = threading.Event()

    def __getstate__(self) -> dict[str, Any]:
        return {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__()  # type: ignore[misc]

    def start(self, trial: Trial, command: list[str], **options: Any) -> subprocess.Popen[bytes]:
        """Start a trial's process-group leader, unless a stop came first.

        Raises:
            TrialError: tune is stopping (the trial was not started).
            OSError: the process could not be started.
        """
        with self._lock:
            if self._stopping.is_set():
                raise TrialError(_STOPPED.format(trial=trial.name))
            process = start_subprocess(command, **options)
            self._running.add(process)
        return process

    def done(self, process: subprocess.Popen[bytes]) -> None:
        with self._lock:
            self._running.discard(process)

    def stop(self, grace: float = STOP_GRACE) -> int:
        """Stop every command still running: SIGTERM to each command's process group (the shell and
        what it started), SIGKILL after ``grace`` seconds (:func:`stop_processes`); no command starts
        after this. Returns how many were running."""
        with self._lock:
            self._stopping.set()
            running = list(self._running)
        stop_processes(running, grace)
        return len(running)


def stop_processes(running: list[subprocess.Popen[bytes]], grace: float = STOP_GRACE) -> None:
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
class CommandSource(StoredTrialSource):
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
    #: The commands this source runs now, and its stop flag.
    commands: RunningCommands = dataclasses.field(default_factory=RunningCommands, repr=False, compare=False)
    who_trains: str = "your command runs the losses"
    two_stage: bool = False
    #: The runtime stops the commands on these signals (and on Ctrl-C).
    stop_signals: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGHUP)
    stopped_text: str = "the running trials' commands were stopped, finished trials are kept"

    def record(self) -> dict[str, Any]:
        return {"kind": "command", "command": self.template}

    def paste(self, use: Candidate) -> tuple[str, str]:
        return script_paste(use)

    def stop(self) -> None:
        self.commands.stop()

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
                self.stop()
                raise

    def values(self, trial: Trial) -> dict[str, str]:
        """Each placeholder's value for one trial."""
        spec = json.dumps(trial.candidate.loss_spec(), separators=(",", ":"))
        out = (self.store.path(trial) / OUTPUT_DIR).absolute()  # absolute: it cannot read as an option
        return {"loss": spec, "seed": str(trial.seed), "out": str(out)}

    def command(self, trial: Trial) -> str:
        """The command line of one trial as shown (dry run, the first line of its log): each value
        shell-quoted. What runs is :meth:`shell_command` with :meth:`environment`."""
        quoted = {name: shlex.quote(value) for name, value in self.values(trial).items()}
        return self.template.format(**quoted)

    def shell_command(self, trial: Trial) -> str:
        """What ``/bin/sh -c`` runs: the template with each placeholder a double-quoted reference to its
        environment variable (``{out}`` -> ``"$MR2_OUT"``; ``{seed}`` inside ``$((...))`` -> ``$MR2_SEED``,
        a number there), the same for every trial; the values are in :meth:`environment`, so no shell
        ever parses them."""
        parsed = list(string.Formatter().parse(self.template))
        contexts = iter(_placeholder_contexts(parsed))
        parts = []
        for literal, field, _, _ in parsed:
            parts.append(literal)
            if field is not None:
                reference = f"${ENVIRONMENT[field]}"
                parts.append(reference if next(contexts) == "arith" else f'"{reference}"')
        return "".join(parts)

    def environment(self, trial: Trial) -> dict[str, str]:
        """The variables added to a trial's environment: each placeholder's value, and the trial's name."""
        values = self.values(trial)
        return {**{ENVIRONMENT[name]: value for name, value in values.items()}, "MR2_TUNE_TRIAL": trial.name}

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
        for name in (*(f"{split}.npz" for split in SPLITS), COLLAPSE_RECORD):
            (out / name).unlink(missing_ok=True)  # a previous attempt's files must not pass for this one's
        command = self.shell_command(trial)
        env = {**os.environ, **self.environment(trial)}
        with open_text_no_follow(log) as handle:  # a train.log link is refused, never written through
            handle.write(f"$ {self.command(trial)}\n")
            handle.flush()
            try:
                # The group's leader takes the group down with tune (module docstring).
                leader = [sys.executable, TRIAL_PROCESS, str(STOP_GRACE), command]
                process = self.commands.start(trial, leader, stdout=handle, stderr=subprocess.STDOUT,
                                              stdin=subprocess.DEVNULL, env=env)
            except OSError as error:
                raise TrialFailed(_NOT_STARTED.format(trial=trial.name, error=error, log=log)) from None
            try:
                code = process.wait(self.timeout)
            except subprocess.TimeoutExpired:
                stop_processes([process])
                raise TrialFailed(TIMED_OUT.format(trial=trial.name, seconds=self.timeout, log=log)) from None
            except BaseException:  # interrupted while waiting (Ctrl-C, SIGTERM): stop the command too
                stop_processes([process])
                raise
            finally:
                self.commands.done(process)
        if code != 0:
            raise TrialFailed(EXIT_CODE.format(trial=trial.name, code=code, log=log) + _tail(log))
        splits = {}
        for split in SPLITS:
            path = out / f"{split}.npz"
            if not os.path.lexists(path):  # a FIFO or a directory there is no "missing" file: the reader says
                raise TrialFailed(NO_PREDICTIONS.format(trial=trial.name, path=path, log=log) + _tail(log))
            # The one reader of a trial's file, fresh or stored (bounded; integer ids; finite logits).
            splits[split] = read_trial_file(trial, split, path, self.store.num_classes, log)
        # write_predictions wrote collapse.json beside them: a collapse guard warned in its training.
        return TrialPredictions(val=splits["val"], test=splits["test"], collapsed=collapse_recorded(out))


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


def _digest(path: Path) -> str:
    """sha256 of a file's content (of its first :data:`MAX_DIGEST_BYTES` and its size, past that)."""
    digest = hashlib.sha256()
    size = path.stat().st_size
    with open(path, "rb") as handle:
        left = MAX_DIGEST_BYTES
        while left > 0 and (block := handle.read(min(1 << 20, left))):
            digest.update(block)
            left -= len(block)
    return digest.hexdigest() if size <= MAX_DIGEST_BYTES else f"{digest.hexdigest()}+{size}"


def command_identity(template: str) -> dict[str, Any]:
    """What trains the trials of a command, as each trial records it: the template, and a digest of
    each file it names (a word of the template, or the value of a ``--flag=value`` word, that is an
    existing regular file from the current directory: the script, a data or configuration file).

    What a command reads without naming it (a module the script imports, a file at a fixed path, an
    environment variable) is not seen: give the tune a new ``--name`` (or ``--retrain``) when that
    changes.

    Example:
        >>> command_identity("python no-such-file.py {loss} {seed} {out}")
        {'kind': 'command', 'command': 'python no-such-file.py {loss} {seed} {out}', 'files': {}}
    """
    files: dict[str, str] = {}
    try:
        words = shlex.split(template.format(**{name: "_" for name in PLACEHOLDERS}))
    except (ValueError, KeyError, IndexError):  # unbalanced quotes: the first trial's log will say so
        words = []
    for word in words:
        for candidate in dict.fromkeys((word, word.split("=", 1)[1] if word.startswith("-") and "=" in word
                                        else word)):
            path = Path(candidate)
            try:
                if candidate and path.is_file():
                    files[candidate] = _digest(path)
            except OSError as error:  # unreadable: recorded as such (a change to readable is a change)
                files[candidate] = f"unreadable ({error.strerror or error})"
    return {"kind": "command", "command": template, "files": files}


def _unsafe_output(directory: Path) -> str:
    """What in the trials' output path a shell could run ("" when nothing)."""
    text = str(directory.absolute())
    if "$" in text:
        return "a '$'"
    if "`" in text:
        return "a backtick"
    bad = next((char for char in text if ord(char) < 32 or ord(char) == 127), None)
    return "" if bad is None else f"the control character {bad!r}"


def command_source(template: str, request: TuneRequest, *, workers: int = 1,
                   launcher: dict[str, Any] | None = None, timeout: float | None = None,
                   retrain: bool = False, check_output: bool = True) -> CommandSource:
    """The command source of a tune, checked: the template, the output directory, and the launcher
    (``slurm``: each trial a submitit job, its files under ``<tune>/submitit/``).

    Args:
        retrain: train again the stored trials of another command or script (or K) instead of
            refusing them (``--retrain``).
        check_output: refuse an output directory with ``$``, a backtick or a control character
            (:data:`UNSAFE_OUTPUT`; tests turn it off to show the substitution alone is safe).

    Raises:
        TuneInputError: a bad template (:func:`check_command`) or output directory.
        mr2.config.ConfigError: a bad launcher mapping, or Slurm's commands missing.
    """
    assert request.num_classes is not None
    if timeout is not None and not (math.isfinite(timeout) and timeout > 0):
        raise TuneInputError(_BAD_TIMEOUT.format(value=timeout))
    check_command(template)
    unsafe = _unsafe_output(request.directory)
    if check_output and unsafe:
        raise TuneInputError(UNSAFE_OUTPUT.format(path=repr(str(request.directory.absolute())), what=unsafe))
    producer = Producer(command_identity(template), "command", _WAY_OUT)
    store = TrialStore(request.directory, request.num_classes, producer, retrain=retrain)
    source = CommandSource(template, store, workers=workers, timeout=timeout)
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
