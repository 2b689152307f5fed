"""Whole runs: ``mr2 train`` (:func:`train`, :class:`TrainingSession`, :func:`train_from_config_file`),
``mr2 eval`` (:func:`evaluate_run`).

The order of a run's start is what makes bad input harmless: the configuration is validated, the
run directory is checked (read-only: it can be written, no other process owns it, and for
``--overwrite`` it holds nothing but a run's files), the data and model are built — every one of
these may fail with a clear error while nothing has been written — and only then does rank 0 take
the directory's lock (:mod:`mr2.rundir`), finish or refuse what an earlier attempt left, and write.
A write that fails later (disk full, permissions) is a :class:`RunError` saying so (:data:`DISK_FULL`,
:data:`WRITE_FAILED`); the files written before are intact.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import yaml

from mr2.config import RunConfig, config_from_dict, config_to_dict, load_config
from mr2.engine.builders import RunData, build_data
from mr2.engine.checkpoint import CheckpointError, load_checkpoint
from mr2.engine.final import NO_VALIDATION, final_record, write_predictions
from mr2.engine.fit import fit_epochs
from mr2.engine.logger import TrainingLog
from mr2.engine.runtime import RunError, Runtime, seed_everything
from mr2.engine.trainer import Trainer
from mr2.errors import COMMAND_ERROR, COMMAND_WRITE_FAILED, MR2Error
from mr2.io import WriteError
from mr2.losses.collapse import reset_collapse_warnings
from mr2.rundir import RunDirectory, RunDirectoryError, RunLock, RunLockedError

__all__ = [
    "DISK_FULL", "WRITE_FAILED", "RunError", "TrainingSession", "evaluate_run", "train",
    "train_from_config_file",
]

_NO_BEST = (
    "{path} was trained with select: best_val but has no checkpoints/best.pt (no epoch improved the "
    "validation accuracy, or it was deleted); pass --checkpoint last"
)
DISK_FULL = (
    "the disk is full (writing {file}: {reason}); the run's files are written atomically, so its last "
    "checkpoint and results are intact: free space, then run the same command again (training "
    "resumes from the last checkpoint)"
)
WRITE_FAILED = (
    "cannot write {file} ({reason}); the run's files are written atomically, so nothing written "
    "before is lost: make {path} writable, then run the same command again"
)
#: Out of space: no space, quota exceeded, file size limit (``RLIMIT_FSIZE``).
_DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)

#: Errors that rank 0 may raise while preparing the run directory (passed on to the other ranks).
_RUN_DIR_ERRORS = (RunDirectoryError, RunLockedError, CheckpointError, RunError)


def _write_failure(error: OSError, run: RunDirectory) -> RunError:
    """The one-line error of a failed write into the run directory (disk full, permissions, ...)."""
    template = DISK_FULL if error.errno in _DISK_FULL_ERRNOS else WRITE_FAILED
    return RunError(template.format(file=error.filename or run.path, reason=error.strerror or error,
                                    path=run.path))


def _is_write_failure(error: BaseException) -> bool:
    """A failed write of a run file, or running out of space anywhere (TensorBoard's files too)."""
    return isinstance(error, WriteError) or (isinstance(error, OSError) and error.errno in _DISK_FULL_ERRNOS)


def _probe_owner(run: RunDirectory) -> None:
    """Fail at once, writing nothing, when another process owns the run directory."""
    pid = run.holder()
    if pid is not None:
        RunLock(run.path).acquire()  # raises RunLockedError naming the holder


class TrainingSession:
    """A run's objects and its run directory: ``mr2 train`` is ``TrainingSession(config).fit()``.

    Building a session validates everything (data, model, method, options) before any file is
    written; then rank 0 owns the run directory until :meth:`fit` returns or :meth:`close`.

    Attributes:
        config: the resolved configuration.
        runtime: device, ranks, precision.
        run: the run directory.
        data: the run's data sets.
        trainer: model, method, optimiser, schedule (drive it directly for custom loops).
    """

    def __init__(self, config: RunConfig, *, overwrite: bool = False, quiet: bool = False) -> None:
        self.config = config
        self.quiet = quiet
        self.runtime = Runtime.start(config)
        self.run = RunDirectory(Path(config.output_dir) / config.name)
        if self.runtime.is_main:
            self.run.check_writable()
            _probe_owner(self.run)
            if overwrite:
                self.run.check_overwritable()
        seed_everything(config.seed, config.deterministic)
        self.data: RunData = build_data(config, self.runtime.device)
        self.trainer = Trainer(config, self.runtime, self.data)
        self._staged_overwrite = bool(
            self.runtime.on_main_first(lambda: self._open(overwrite), _RUN_DIR_ERRORS)
        )
        self.runtime.barrier()

    def _open(self, overwrite: bool) -> bool:
        try:
            self.run.lock()
        except OSError as error:
            raise _write_failure(error, self.run) from error
        try:
            return self.run.open_for_training(config_to_dict(self.config), overwrite=overwrite)
        except BaseException as error:
            self.run.unlock()
            if isinstance(error, OSError):
                raise _write_failure(error, self.run) from error
            raise

    # Convenience views of the trainer's objects.
    @property
    def model(self) -> Any:
        return self.trainer.model

    @property
    def method(self) -> Any:
        return self.trainer.method

    @property
    def device(self) -> Any:
        return self.runtime.device

    @property
    def run_dir(self) -> Path:
        return self.run.path

    def predict_train_set(self) -> Any:
        return self.trainer.predict_train_set()

    def close(self) -> None:
        """Give the run directory up (also done by :meth:`fit` when it returns)."""
        self.run.unlock()

    # -------------------------------------------------------------------- fit
    def _resume(self) -> tuple[int, float, int]:
        """Restore the last checkpoint if there is one; cut metrics.jsonl back to its epoch."""
        start, best, step = 0, -1.0, 0
        if self.run.last_checkpoint.exists():
            payload = load_checkpoint(self.run.last_checkpoint)
            start, best = self.trainer.load_state(payload)
            step = int(payload.get("global_step", 0))
            self._log(f"resumed {self.run.path} after epoch {start}")
        if self.runtime.is_main:
            self.run.truncate_metrics(start)
            if start == 0 and self.run.tensorboard.exists():
                shutil.rmtree(self.run.tensorboard)  # events of an attempt killed before epoch 1
        return start, best, step

    def _log(self, message: str) -> None:
        if self.runtime.is_main and not self.quiet:
            import sys

            print(message, file=sys.stderr, flush=True)

    def fit(self, stop_after_epoch: int | None = None) -> dict[str, Any] | None:
        """Train (resuming from ``checkpoints/last.pt`` if present), evaluate, write final.json.

        ``stop_after_epoch`` ends the session after that epoch with a checkpoint and no final
        evaluation (returns None): a later session's ``fit()`` resumes exactly where it stopped.
        """
        try:
            return self._fit(stop_after_epoch)
        except BaseException as error:
            if self.runtime.is_main and self._staged_overwrite and self.run.locked_by_me:
                self.run.restore_overwritten()  # the new run failed before its first checkpoint
            if isinstance(error, OSError) and _is_write_failure(error):
                raise _write_failure(error, self.run) from error
            raise
        finally:
            self.close()

    def _committed(self) -> None:
        if self._staged_overwrite:
            self.run.commit_overwrite()
            self._staged_overwrite = False

    def _fit(self, stop_after_epoch: int | None) -> dict[str, Any] | None:
        config = self.config
        start, best, step = self._resume()
        log = TrainingLog(
            config.name, config.optim.epochs, self.data.class_names, self.run.tensorboard,
            enabled=self.runtime.is_main, quiet=self.quiet, start_epoch=start, start_step=step,
        )
        # What a collapse guard reports is this run's (the predictions' collapse.json): a worker that
        # trained another run before starts from nothing (a resumed run reports its own steps only).
        reset_collapse_warnings()
        try:
            finished = fit_epochs(
                self.trainer, self.run, log, start_epoch=start, best=best, global_step=step,
                stop_after_epoch=stop_after_epoch, on_checkpoint=self._committed,
            )
            if not finished:
                return None
            if config.select == "best_val" and self.run.best_checkpoint.exists():
                self.trainer.model.load_state_dict(load_checkpoint(self.run.best_checkpoint)["model"])
            record, predictions = final_record(self.trainer, "test")
            final = record.to_dict()
            if self.runtime.is_main:
                write_predictions(self.run.path, predictions)  # before final.json, which marks the end
                self.run.write_final(record)
                log.final(final["per_class_accuracy"], self.data.class_names)
                self._log(
                    f"[{config.name}] test accuracy {final['overall_accuracy']:.4f} -> {self.run.final}"
                )
            self.runtime.barrier()
            return final
        finally:
            log.close()


def train(config: RunConfig, *, overwrite: bool = False, quiet: bool = False) -> dict[str, Any]:
    """Train one run as configured and return its final evaluation (also written to final.json)."""
    final = TrainingSession(config, overwrite=overwrite, quiet=quiet).fit()
    assert final is not None
    return final


#: The errors a command reports on one line (exit code 2): bad input, whose message says how to fix it.
_USER_ERRORS = (MR2Error,)


def train_from_config_file(
    config_file: str | os.PathLike[str] | None,
    overrides: Sequence[str] = (),
    *,
    overwrite: bool = False,
    quiet: bool = False,
    command: str = "mr2 train",
) -> int:
    """What ``mr2 train --config FILE [--set KEY=VALUE ...]`` does, as a function that returns its exit code.

    Loads the configuration (notes on stderr), trains, prints ``test accuracy ...`` on stdout and
    returns 0. Bad input (an :class:`~mr2.errors.MR2Error`, a run directory's error) and a write the
    operating system refuses are one line on stderr, prefixed with ``command``, and return 2; anything
    else is a bug and raises. The command line and every run of a sweep train through it.
    """
    try:
        notes: list[str] = []
        config = load_config(config_file, overrides, notes)
        for note in notes:
            print(f"{command}: note: {note}", file=sys.stderr)
        final = train(config, overwrite=overwrite, quiet=quiet)
    except WriteError as error:  # the operating system refused a write: not a bug of mr2's
        print(COMMAND_WRITE_FAILED.format(command=command, path=error.filename, reason=error.strerror),
              file=sys.stderr)
        return 2
    except _USER_ERRORS as error:
        print(COMMAND_ERROR.format(command=command, error=error), file=sys.stderr)
        return 2
    print(f"test accuracy {final['overall_accuracy']:.4f} ({config.output_dir}/{config.name}/final.json)")
    return 0


def evaluate_run(
    run_dir: str | os.PathLike[str],
    split: str = "test",
    checkpoint: Literal["auto", "last", "best"] = "auto",
) -> dict[str, Any]:
    """Re-evaluate a finished or interrupted run on ``split`` ("test" or "val"); writes
    ``eval_<split>.json`` in the run directory.

    ``checkpoint="auto"`` evaluates what final.json was computed from: ``best.pt`` for a run with
    ``select: best_val`` (when it exists), else ``last.pt``.
    """
    run = RunDirectory(run_dir)
    run.recover_overwrite()
    run.check_writable(create=False)
    run.require_trained()
    config = config_from_dict(yaml.safe_load(run.config_file.read_text()))
    config.output_dir, config.name = str(run.path.parent), run.path.name
    if split == "val" and config.data.val_fraction == 0:
        raise RunError(NO_VALIDATION.format(name=config.name))
    use_best = checkpoint == "best" or (checkpoint == "auto" and config.select == "best_val"
                                        and run.best_checkpoint.exists())
    if use_best and not run.best_checkpoint.exists():
        raise RunError(_NO_BEST.format(path=run.path))
    runtime = Runtime.start(config)
    if runtime.is_main:
        _probe_owner(run)
    seed_everything(config.seed, config.deterministic)
    data = build_data(config, runtime.device)
    trainer = Trainer(config, runtime, data)
    runtime.on_main_first(lambda: _lock_for_writing(run), _RUN_DIR_ERRORS)
    try:
        trainer.load_model_weights(load_checkpoint(run.last_checkpoint))
        if use_best:
            trainer.model.load_state_dict(load_checkpoint(run.best_checkpoint)["model"])
        record, _ = final_record(trainer, split)
        record = dataclasses.replace(record, checkpoint="best.pt" if use_best else "last.pt")
        if runtime.is_main:
            try:
                run.write_eval(record)
            except WriteError as error:
                raise _write_failure(error, run) from error
        runtime.barrier()
        return record.to_dict()
    finally:
        run.unlock()


def _lock_for_writing(run: RunDirectory) -> RunDirectory:
    try:
        return run.lock()
    except OSError as error:
        raise _write_failure(error, run) from error
