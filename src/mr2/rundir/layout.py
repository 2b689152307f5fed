"""The run directory's rules, written once: layout, lock, resume truncation, clean-up, safe overwrite.

``mr2 train``, ``mr2 eval``, the sweep and the report all go through :class:`RunDirectory`:

- layout: ``config.yaml``, ``metrics.jsonl``, ``final.json``, ``eval_<split>.json``,
  ``checkpoints/{last,best}.pt``, ``tensorboard/``, ``train.log`` (the sweep's log of the trainer's
  output), ``.lock`` (see :mod:`mr2.rundir.lock`);
- the run record: ``final.json`` and ``eval_<split>.json`` are written and read as a
  :class:`~mr2.rundir.record.FinalRecord` (:meth:`RunDirectory.write_final`,
  :meth:`RunDirectory.read_final`); a reader first checks the run is there and finished
  (:meth:`RunDirectory.require_finished`);
- every file is written atomically (:mod:`mr2.io`), so a kill leaves the old or the new version;
- on resume ``metrics.jsonl`` is cut back to the checkpoint's epoch (a line is appended before the
  checkpoint is written, so a kill between the two leaves one line too many);
- temporary files of interrupted atomic writes (``.<name>.*.tmp``) are removed when a run starts;
- ``--overwrite`` replaces a run and nothing else: a directory holding anything outside the layout
  (inside ``checkpoints/``, ``predictions/`` and ``tensorboard/`` too) is refused, and so is one whose
  ``config.yaml`` is not a configuration ``mr2 train`` saved (a user's own ``config.yaml`` and
  ``metrics.jsonl`` are not a run) (:meth:`RunDirectory.check_overwritable`);
- ``--overwrite`` never loses the old run before the new one exists: the old files are moved into
  ``.overwritten/`` and deleted only once the new run has written its first checkpoint; a new run
  that fails before that gets the old files back (at once, or, after a kill, when the directory is
  next opened by ``mr2 train``, ``mr2 eval`` or ``mr2 report``: :meth:`RunDirectory.recover`);
- what the operating system would refuse (a file or a dangling link in the way, a directory that
  cannot be written) is found before anything is built (:meth:`RunDirectory.check_writable`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from mr2.config.diff import RESUMABLE_KEYS, config_differences
from mr2.config.schema import RunConfig
from mr2.io import atomic_write_json, atomic_write_text
from mr2.rundir.errors import RunDirectoryError
from mr2.rundir.lock import LOCK_FILE, RunLock, RunLockedError, lock_holder
from mr2.rundir.record import FinalRecord

__all__ = [
    "CONFIG_MISSING",
    "DANGLING_LINK",
    "FILE_UNREADABLE",
    "JSON_TOO_DEEP",
    "NOT_A_RUN_DIRECTORY",
    "NOT_WRITABLE",
    "NOT_WRITTEN_BY_TRAIN",
    "OVERWRITE_IN_PROGRESS",
    "OVERWRITE_NOT_RESTORED",
    "OVERWRITTEN_DIR",
    "PARENT_NOT_A_DIRECTORY",
    "RUN_DIR_IS_A_FILE",
    "RUN_DIR_NOT_A_DIRECTORY",
    "RUN_DIR_NOT_FOUND",
    "RUN_UNFINISHED",
    "TRAINER_LOG",
    "RunDirectory",
]

_RUN_EXISTS = (
    "run directory {path} holds a finished run (final.json). Choose another name, delete it, or "
    "pass --overwrite."
)
_CONFIG_CHANGED = (
    "run directory {path} holds {what} of a run with a different configuration "
    "(differs in: {keys}). Use another run name or --overwrite."
)
_NOT_A_RUN = "{path} is not a run directory (no config.yaml / checkpoints/last.pt)."
NOT_A_RUN_DIRECTORY = (
    "{path} is not a run directory of mr2: it holds {entries}, which no run writes; --overwrite would "
    "delete them, so nothing was changed: choose another run name or output_dir, or move them away"
)
NOT_WRITTEN_BY_TRAIN = (
    "{path} holds {entries}, but not a run written by `mr2 train`: {problem}; --overwrite would delete "
    "them, so nothing was changed: choose another run name or output_dir, or move them away"
)
#: ``{problem}`` of :data:`NOT_WRITTEN_BY_TRAIN`.
NO_SAVED_CONFIG = "it has no config.yaml (mr2 train writes it before any other file of a run)"
SAVED_CONFIG_UNREADABLE = "its config.yaml cannot be read ({error})"
SAVED_CONFIG_INCOMPLETE = (
    "its config.yaml is not a configuration mr2 train saved (that one holds every setting, resolved; "
    "this one lacks {keys})"
)
RUN_DIR_NOT_A_DIRECTORY = (
    "{path} exists and is not a directory, so it cannot be a run directory; choose another run name "
    "or output_dir, or move it away"
)
PARENT_NOT_A_DIRECTORY = (
    "{parent} is a file, not a directory, so run directory {path} cannot be created; choose another "
    "output_dir"
)
DANGLING_LINK = (
    "{link} is a symbolic link to {target}, which does not exist; create the directory it points to "
    "or remove the link"
)
NOT_WRITABLE = (
    "cannot write in {directory} ({reason}), so run directory {path} cannot be used; make it writable "
    "or choose another output_dir"
)
OVERWRITE_IN_PROGRESS = (
    "run directory {path} is being overwritten by process {pid}: the previous run is kept in {staged} "
    "until the new run writes its first checkpoint (and put back if the new run fails first); wait "
    "for that process to end (or stop it: kill {pid}), then try again"
)
#: :data:`OVERWRITE_IN_PROGRESS` when the lock file names no pid.
OVERWRITE_IN_PROGRESS_NO_PID = (
    "run directory {path} is being overwritten by another process (its lock file names no pid): the "
    "previous run is kept in {staged} until the new run writes its first checkpoint (and put back if "
    "the new run fails first); wait for that process to end, then try again"
)
OVERWRITE_NOT_RESTORED = (
    "{path} holds an interrupted --overwrite: the previous run is in {staged} and could not be put "
    "back ({error}); make {path} writable and try again, or restore it by hand: delete the other "
    "entries of {path} (not .lock) and move the entries of {staged} up into {path}"
)

# What a reader (the report, tune) is told about a directory it cannot read a finished run from.
RUN_DIR_NOT_FOUND = "run directory {path} does not exist; pass a directory written by `mr2 train`"
RUN_DIR_IS_A_FILE = "{path} is a file, not a run directory; pass the directory that holds final.json"
CONFIG_MISSING = (
    "{path} has no config.yaml, so it is not a run directory written by `mr2 train` (or it was "
    "copied incompletely); copy the whole run directory"
)
RUN_UNFINISHED = (
    "{path} has no final.json: the run is unfinished, still running or crashed; wait for it to end "
    "or resume it from checkpoints/last.pt, then report again"
)
#: ``{error}`` of :data:`FILE_UNREADABLE` for JSON nested past Python's recursion limit.
JSON_TOO_DEEP = "its JSON is nested too deep to parse (a run record is a few levels deep)"
FILE_UNREADABLE = (
    "{file} in {path} cannot be parsed ({error}); the file is corrupt or half-written: re-run the "
    "final evaluation of this run (or remove it from the report)"
)

#: Where ``--overwrite`` keeps the previous run until the new one has its first checkpoint.
OVERWRITTEN_DIR = ".overwritten"
#: The trainer's stdout/stderr when a sweep runs it (kept in place by an overwrite: it is open).
TRAINER_LOG = "train.log"
_KEPT = (LOCK_FILE, OVERWRITTEN_DIR, TRAINER_LOG)

# The layout (docs/run-directory.md, "--overwrite replaces runs, nothing else"): the only entries
# a directory may hold for ``--overwrite`` to replace it: files, directories, the files of
# ``checkpoints/``; the content of ``tensorboard/``, ``predictions/`` and ``.overwritten/`` is the
# run's own.
_LAYOUT_FILES = ("config.yaml", "metrics.jsonl", "final.json", TRAINER_LOG, LOCK_FILE)
_EVAL_FILE = re.compile(r"eval_[A-Za-z0-9_]+\.json")
_LAYOUT_DIRS = ("checkpoints", "tensorboard", "predictions", OVERWRITTEN_DIR)
_CHECKPOINT_FILES = ("last.pt", "best.pt")
#: The run's per-sample predictions (:func:`mr2.engine.final.write_predictions`).
PREDICTIONS_DIR = "predictions"
_PREDICTIONS_FILES = ("test.npz", "val.npz")
#: TensorBoard's event files (``SummaryWriter``), in ``tensorboard/`` and ``tensorboard/steps/``.
_EVENT_FILE = re.compile(r"events\.out\.tfevents\..+")
_TENSORBOARD_SUBDIRS = ("steps",)
#: Entries of the run directory that do not make it a run (the sweep writes them before the trainer).
_NOT_A_RUN_YET = (LOCK_FILE, OVERWRITTEN_DIR, TRAINER_LOG)
#: ``.<name>.<random>.tmp``: what :mod:`mr2.io` leaves of an interrupted write of ``<name>``.
_TEMPORARY = re.compile(r"\.(?P<name>.+)\.[A-Za-z0-9_]+\.tmp")
_SHOWN_ENTRIES = 5


def _is_layout_file(name: str, names: tuple[str, ...], pattern: re.Pattern[str] | None = None) -> bool:
    temporary = _TEMPORARY.fullmatch(name)
    if temporary is not None:
        name = temporary["name"]
    return name in names or (pattern is not None and pattern.fullmatch(name) is not None)


def _foreign_children(
    directory: Path,
    prefix: str,
    names: tuple[str, ...],
    pattern: re.Pattern[str] | None = None,
    subdirs: tuple[str, ...] = (),
) -> list[str]:
    """The entries of a layout directory that a run does not write there: files other than ``names``
    (or ``pattern``), directories other than ``subdirs`` (whose files are checked the same way)."""
    foreign: list[str] = []
    for child in sorted(directory.iterdir()):
        shown = f"{prefix}{child.name}"
        if child.is_symlink():
            foreign.append(shown)
        elif child.is_dir():
            if child.name in subdirs:
                foreign += _foreign_children(child, shown + "/", names, pattern)
            else:
                foreign.append(shown + "/")
        elif not child.is_file() or not _is_layout_file(child.name, names, pattern):
            foreign.append(shown)
    return foreign


def _foreign_entries(path: Path) -> list[str]:
    """The entries of ``path`` outside the run layout (directories with a trailing ``/``), the
    children of ``checkpoints/``, ``predictions/`` and ``tensorboard/`` included (``.overwritten/``
    holds a previous run, put there by an overwrite)."""
    foreign: list[str] = []
    for entry in sorted(path.iterdir()):
        if entry.is_symlink():
            foreign.append(entry.name)
        elif entry.is_dir():
            if entry.name not in _LAYOUT_DIRS:
                foreign.append(entry.name + "/")
            elif entry.name == "checkpoints":
                foreign += _foreign_children(entry, "checkpoints/", _CHECKPOINT_FILES)
            elif entry.name == PREDICTIONS_DIR:
                foreign += _foreign_children(entry, f"{PREDICTIONS_DIR}/", _PREDICTIONS_FILES)
            elif entry.name == "tensorboard":
                foreign += _foreign_children(
                    entry, "tensorboard/", (), _EVENT_FILE, subdirs=_TENSORBOARD_SUBDIRS
                )
        elif not entry.is_file() or not _is_layout_file(entry.name, _LAYOUT_FILES, _EVAL_FILE):
            foreign.append(entry.name)
    return foreign


def _missing_keys(saved: Mapping[str, Any], template: Mapping[str, Any], prefix: str = "") -> list[str]:
    """The settings of a resolved configuration (``template``, nested) that ``saved`` lacks, dotted."""
    missing: list[str] = []
    for key, value in template.items():
        if key not in saved:
            missing.append(prefix + key)
        elif isinstance(value, dict) and value:
            inner = saved[key]
            if isinstance(inner, Mapping):
                missing += _missing_keys(inner, value, f"{prefix}{key}.")
            else:
                missing.append(prefix + key)
    return missing


def _not_a_saved_config(config_file: Path) -> str | None:
    """Why ``config_file`` is not a configuration ``mr2 train`` saved (None: it is one). A saved
    configuration is resolved: it holds every setting of :class:`~mr2.config.RunConfig`, nested
    sections included; a user's own ``config.yaml`` (the settings they chose) does not."""
    if not config_file.is_file():
        return NO_SAVED_CONFIG
    try:
        saved = yaml.safe_load(config_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        return SAVED_CONFIG_UNREADABLE.format(error=reason)
    if not isinstance(saved, Mapping):
        return SAVED_CONFIG_INCOMPLETE.format(keys=f"everything: it holds a {type(saved).__name__}")
    missing = _missing_keys(saved, dataclasses.asdict(RunConfig()))
    if not missing:
        return None
    keys = ", ".join(repr(key) for key in missing[:_SHOWN_ENTRIES])
    if len(missing) > _SHOWN_ENTRIES:
        keys += f" and {len(missing) - _SHOWN_ENTRIES} more"
    return SAVED_CONFIG_INCOMPLETE.format(keys=keys)


def _shown(entries: list[str]) -> str:
    shown = ", ".join(repr(name) for name in entries[:_SHOWN_ENTRIES])
    if len(entries) > _SHOWN_ENTRIES:
        shown += f" and {len(entries) - _SHOWN_ENTRIES} more"
    return shown


class RunDirectory:
    """The files of one run, and the operations that keep them consistent.

    Example:
        >>> import tempfile
        >>> run = RunDirectory(Path(tempfile.mkdtemp()) / "erm-s0")
        >>> run.final.name, run.last_checkpoint.relative_to(run.path).as_posix()
        ('final.json', 'checkpoints/last.pt')
        >>> run.is_finished, run.holder() is None
        (False, True)
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = RunLock(self.path)

    # ----------------------------------------------------------------- layout
    @property
    def config_file(self) -> Path:
        return self.path / "config.yaml"

    @property
    def metrics(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def final(self) -> Path:
        return self.path / "final.json"

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    @property
    def last_checkpoint(self) -> Path:
        return self.checkpoints / "last.pt"

    @property
    def best_checkpoint(self) -> Path:
        return self.checkpoints / "best.pt"

    @property
    def tensorboard(self) -> Path:
        return self.path / "tensorboard"

    @property
    def log(self) -> Path:
        return self.path / TRAINER_LOG

    @property
    def overwritten(self) -> Path:
        return self.path / OVERWRITTEN_DIR

    def eval_file(self, split: str) -> Path:
        """``eval_<split>.json``: a re-evaluation by ``mr2 eval``."""
        return self.path / f"eval_{split}.json"

    @property
    def is_finished(self) -> bool:
        """Whether ``final.json`` exists (its presence means the run finished)."""
        return self.final.is_file()

    # -------------------------------------------------------------- the record
    def require_finished(self) -> None:
        """Raise :class:`RunDirectoryError` unless a reader can read a finished run here: the directory
        exists, is a directory, holds ``config.yaml`` and ``final.json``. A killed ``--overwrite`` is
        finished first (:meth:`recover_overwrite`), as the next ``mr2 train`` would."""
        if not self.path.exists():
            raise RunDirectoryError(RUN_DIR_NOT_FOUND.format(path=self.path))
        if not self.path.is_dir():
            raise RunDirectoryError(RUN_DIR_IS_A_FILE.format(path=self.path))
        self.recover_overwrite()
        if not self.config_file.is_file():
            raise RunDirectoryError(CONFIG_MISSING.format(path=self.path))
        if not self.is_finished:
            raise RunDirectoryError(RUN_UNFINISHED.format(path=self.path))

    def read_final(self) -> FinalRecord:
        """The run record of ``final.json``.

        Raises:
            RunDirectoryError: the file is missing (:data:`RUN_UNFINISHED`), cannot be parsed
                (:data:`FILE_UNREADABLE`) or does not hold a valid record
                (:meth:`FinalRecord.from_dict`).
        """
        try:
            data = json.loads(self.final.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise RunDirectoryError(RUN_UNFINISHED.format(path=self.path)) from None
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise RunDirectoryError(
                FILE_UNREADABLE.format(file=self.final.name, path=self.path, error=error)
            ) from error
        except RecursionError:
            raise RunDirectoryError(
                FILE_UNREADABLE.format(file=self.final.name, path=self.path, error=JSON_TOO_DEEP)
            ) from None
        return FinalRecord.from_dict(data, self.path)

    def write_final(self, record: FinalRecord) -> None:
        """Write ``final.json`` (atomically; its presence marks the run finished)."""
        atomic_write_json(self.final, record.to_dict())

    def write_eval(self, record: FinalRecord) -> Path:
        """Write a re-evaluation to ``eval_<record.split>.json`` (atomically); returns its path."""
        path = self.eval_file(record.split)
        atomic_write_json(path, record.to_dict())
        return path

    def read_config(self) -> dict[str, Any] | None:
        """The saved ``config.yaml`` as a dict (None when absent or not a mapping)."""
        try:
            data = yaml.safe_load(self.config_file.read_text())
        except (OSError, yaml.YAMLError):
            return None
        return data if isinstance(data, dict) else None

    def has_run_files(self) -> bool:
        """Whether anything a trainer writes is there (config aside): metrics, results, checkpoints."""
        return any(p.exists() for p in (self.metrics, self.final, self.last_checkpoint, self.tensorboard))

    def check_writable(self, *, create: bool = True) -> None:
        """Raise :class:`RunDirectoryError` when the operating system would refuse the run's files:
        the path (or a directory on the way to it) is a file or a dangling symbolic link, or the
        directory to write in (the run directory, or where it would be created) is not writable.

        Read-only: called before the data is built, so such a run fails at once with nothing
        written. ``create=False`` (``mr2 eval``): a missing directory is left to the caller.
        """
        path = self.path
        if path.is_symlink() and not path.exists():
            raise RunDirectoryError(DANGLING_LINK.format(link=path, target=os.readlink(path)))
        if path.exists():
            if not path.is_dir():
                raise RunDirectoryError(RUN_DIR_NOT_A_DIRECTORY.format(path=path))
            directory = path
        elif not create:
            return
        else:
            directory = path.parent
            while not directory.exists():
                if directory.is_symlink():
                    raise RunDirectoryError(
                        DANGLING_LINK.format(link=directory, target=os.readlink(directory))
                    )
                directory = directory.parent
            if not directory.is_dir():
                raise RunDirectoryError(PARENT_NOT_A_DIRECTORY.format(parent=directory, path=path))
        if not os.access(directory, os.W_OK | os.X_OK):
            read_only = os.statvfs(directory).f_flag & os.ST_RDONLY
            reason = "read-only file system" if read_only else "permission denied"
            raise RunDirectoryError(NOT_WRITABLE.format(directory=directory, reason=reason, path=path))

    # ------------------------------------------------------------------- lock
    def lock(self) -> RunDirectory:
        """Own the directory (see :class:`~mr2.rundir.lock.RunLock`); creates it."""
        self._lock.acquire()
        return self

    def unlock(self) -> None:
        self._lock.release()

    @property
    def locked_by_me(self) -> bool:
        return self._lock.held

    def holder(self) -> int | None:
        """The pid of the process owning this directory (None: nobody)."""
        return lock_holder(self.path)

    # ------------------------------------------------------------- clean-up
    def temporary_files(self) -> Iterator[Path]:
        """Leftovers of interrupted atomic writes (``.<name>.<random>.tmp``) anywhere in the run."""
        if not self.path.is_dir():
            return
        for file in self.path.rglob(".*.tmp"):
            if OVERWRITTEN_DIR not in file.relative_to(self.path).parts and file.is_file():
                yield file

    def remove_temporary_files(self) -> list[Path]:
        """Delete :meth:`temporary_files` (only while owning the directory)."""
        self._require_lock()
        removed = list(self.temporary_files())
        for file in removed:
            file.unlink(missing_ok=True)
        return removed

    def read_metrics(self) -> list[dict[str, Any]]:
        """The records of ``metrics.jsonl`` (complete lines that parse; a torn last line is dropped)."""
        try:
            lines = self.metrics.read_text().splitlines()
        except OSError:
            return []
        records = []
        for line in lines:
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except (json.JSONDecodeError, RecursionError):
                continue
            if isinstance(record, dict):
                records.append(record)
        return records

    def append_metrics(self, record: dict[str, Any]) -> None:
        """Add one epoch's record to ``metrics.jsonl`` (the file is rewritten atomically)."""
        lines = [json.dumps(r) for r in self.read_metrics()] + [json.dumps(record)]
        atomic_write_text(self.metrics, "\n".join(lines) + "\n")

    def truncate_metrics(self, epoch: int) -> None:
        """Keep the records of epochs ``<= epoch`` (atomically); ``epoch = 0`` removes the file."""
        self._require_lock()
        if not self.metrics.exists():
            return
        kept = [r for r in self.read_metrics() if int(r.get("epoch", 0)) <= epoch]
        if not kept:
            self.metrics.unlink()
            return
        text = "\n".join(json.dumps(r) for r in kept) + "\n"
        if text != self.metrics.read_text():
            atomic_write_text(self.metrics, text)

    # ------------------------------------------------------------- training
    def open_for_training(self, config: dict[str, Any], *, overwrite: bool) -> bool:
        """Make the (locked) directory ready for a trainer with resolved ``config``.

        Finishes a killed overwrite (:meth:`recover`); refuses a finished run unless ``overwrite``;
        refuses files of a run with another configuration (a checkpoint, or metrics / results of an
        attempt killed before its first checkpoint) unless ``overwrite``; with ``overwrite`` moves
        the previous run aside (:meth:`stage_overwrite`). Writes ``config.yaml``. Returns whether an
        overwrite was staged (then call :meth:`commit_overwrite` after the first checkpoint).
        """
        self.recover()
        staged = False
        if overwrite:
            staged = self.stage_overwrite()
        else:
            if self.is_finished:
                raise RunDirectoryError(_RUN_EXISTS.format(path=self.path))
            previous = self.read_config()
            if previous is not None and self.has_run_files():
                changed = config_differences(previous, config, ignore=RESUMABLE_KEYS)
                if changed:
                    what = "a checkpoint" if self.last_checkpoint.exists() else "files"
                    raise RunDirectoryError(
                        _CONFIG_CHANGED.format(path=self.path, what=what, keys=", ".join(changed))
                    )
        atomic_write_text(self.config_file, yaml.safe_dump(config, sort_keys=False))
        return staged

    def require_trained(self) -> None:
        """Raise :class:`RunDirectoryError` unless a config and a checkpoint are there."""
        if not self.config_file.is_file() or not self.last_checkpoint.is_file():
            raise RunDirectoryError(_NOT_A_RUN.format(path=self.path))

    # -------------------------------------------------------------- overwrite
    def check_overwritable(self) -> None:
        """Raise :class:`RunDirectoryError` unless ``--overwrite`` would delete nothing but a run:
        the directory is absent, empty (but for the lock, a sweep's ``train.log``, a staged overwrite
        or temporary files), or holds only entries of the run layout (:data:`NOT_A_RUN_DIRECTORY`,
        naming the others, inside ``checkpoints/``, ``predictions/`` and ``tensorboard/`` too) next to
        a ``config.yaml`` that ``mr2 train`` saved (:data:`NOT_WRITTEN_BY_TRAIN`: a resolved
        configuration, holding every setting).

        Read-only (no lock needed): called before anything is built, and again under the lock.
        """
        if not self.path.is_dir():
            return
        foreign = _foreign_entries(self.path)
        if foreign:
            raise RunDirectoryError(NOT_A_RUN_DIRECTORY.format(path=self.path, entries=_shown(foreign)))
        run_files = sorted(
            entry.name + ("/" if entry.is_dir() else "")
            for entry in self.path.iterdir()
            if entry.name not in _NOT_A_RUN_YET and _TEMPORARY.fullmatch(entry.name) is None
        )
        if not run_files:
            return
        problem = _not_a_saved_config(self.config_file)
        if problem is not None:
            raise RunDirectoryError(
                NOT_WRITTEN_BY_TRAIN.format(path=self.path, entries=_shown(run_files), problem=problem)
            )

    def _movable(self) -> list[Path]:
        if not self.path.is_dir():
            return []
        return sorted(p for p in self.path.iterdir() if p.name not in _KEPT)

    def stage_overwrite(self) -> bool:
        """Move every file of the previous run into ``.overwritten/`` (renames; nothing is deleted).

        Returns whether anything was moved. Call :meth:`commit_overwrite` once the new run has its
        first checkpoint, :meth:`restore_overwritten` if it fails before that.
        """
        self._require_lock()
        self.recover()
        self.check_overwritable()
        items = self._movable()
        if not items:
            return False
        self.overwritten.mkdir()
        for item in items:
            os.replace(item, self.overwritten / item.name)
        return True

    def commit_overwrite(self) -> None:
        """Delete the previous run kept by :meth:`stage_overwrite` (the new run now stands alone)."""
        self._require_lock()
        if self.overwritten.exists():
            shutil.rmtree(self.overwritten)

    def restore_overwritten(self) -> None:
        """Put the previous run back, replacing the files the failed new run wrote."""
        self._require_lock()
        if not self.overwritten.is_dir():
            return
        for item in self._movable():
            if item.is_dir():
                shutil.rmtree(item)
            else:
                item.unlink()
        for item in sorted(self.overwritten.iterdir()):
            os.replace(item, self.path / item.name)
        self.overwritten.rmdir()

    def recover(self) -> None:
        """Finish what a killed overwrite left: the new run has its first checkpoint -> drop the old
        files; otherwise -> restore them. Also removes temporary files of interrupted writes."""
        self._require_lock()
        if self.overwritten.exists():
            if self.last_checkpoint.is_file():
                self.commit_overwrite()
            else:
                self.restore_overwritten()
        self.remove_temporary_files()

    def recover_overwrite(self) -> bool:
        """For a reader (``mr2 eval``, ``mr2 report``): finish what a killed ``--overwrite`` left,
        as the next ``mr2 train`` would (:meth:`recover`), holding the lock only meanwhile.

        Returns whether there was a staged overwrite. Raises :class:`RunDirectoryError` saying where
        the previous run is when it cannot: another process holds the lock
        (:data:`OVERWRITE_IN_PROGRESS`) or the files cannot be moved (:data:`OVERWRITE_NOT_RESTORED`).
        """
        if not self.overwritten.is_dir():
            return False
        held = self.locked_by_me
        try:
            if not held:
                self._lock.acquire()
            self.recover()
        except RunLockedError:
            pid = self.holder()
            message = OVERWRITE_IN_PROGRESS if pid is not None and pid > 0 else OVERWRITE_IN_PROGRESS_NO_PID
            raise RunDirectoryError(
                message.format(path=self.path, pid=pid, staged=self.overwritten)
            ) from None
        except OSError as error:
            raise RunDirectoryError(OVERWRITE_NOT_RESTORED.format(
                path=self.path, staged=self.overwritten, error=error.strerror or error
            )) from error
        finally:
            if not held:
                self._lock.release()
        return True

    def _require_lock(self) -> None:
        if not self._lock.held:
            raise RuntimeError(f"{self.path}: this operation needs the run directory's lock (call lock())")
