"""The epoch loop of a run: train, validate, record, checkpoint; resumable after any kill.

Order within an epoch (rank 0 writes): the epoch's record is appended to ``metrics.jsonl``, then the
checkpoint is written. A kill between the two leaves one record too many, which the next start cuts
back (:meth:`~mr2.rundir.RunDirectory.truncate_metrics`), so every epoch appears once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from mr2.engine.checkpoint import save_checkpoint
from mr2.engine.logger import TrainingLog
from mr2.engine.loop import train_one_epoch
from mr2.engine.trainer import Trainer
from mr2.rundir import RunDirectory

__all__ = ["fit_epochs"]


def _epoch_record(trainer: Trainer, epoch: int, result: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "epoch": epoch + 1,
        "train_loss": result.loss,
        "train_accuracy": result.accuracy,
        "lr": trainer.optimizer.param_groups[0]["lr"],
        "epoch_seconds": result.seconds,
        "samples_per_second": result.samples / max(result.seconds, 1e-9),
        **result.values,
    }
    if trainer.has_validation:
        assert trainer.data.val is not None
        val = trainer.evaluate(trainer.data.val)
        per_class = val.per_class_accuracy()
        record["val_accuracy"] = val.overall_accuracy
        record["val_per_class_accuracy"] = per_class.tolist()
        trainer.method.on_validation(epoch, per_class.float())
    class_stats = trainer.method.class_statistics()
    if class_stats is not None:
        record.update({k: v.tolist() for k, v in class_stats.items()})
    return record


def fit_epochs(
    trainer: Trainer,
    run: RunDirectory,
    log: TrainingLog,
    *,
    start_epoch: int,
    best: float,
    global_step: int,
    stop_after_epoch: int | None = None,
    on_checkpoint: Callable[[], None] | None = None,
) -> bool:
    """Train epochs ``start_epoch .. epochs - 1``; returns whether training reached the last epoch.

    Args:
        trainer: the run's objects (already restored from a checkpoint when resuming).
        run: where rank 0 writes metrics.jsonl and checkpoints.
        log: console / progress / TensorBoard output.
        start_epoch: first epoch to train (0-based; the checkpoint's epoch when resuming).
        best: best validation accuracy so far (-1: none).
        global_step: optimiser steps taken before ``start_epoch``.
        stop_after_epoch: end after that epoch with a checkpoint (a later call resumes exactly).
        on_checkpoint: called after every checkpoint written (rank 0).
    """
    config = trainer.config
    is_main = trainer.runtime.is_main
    total_epochs = config.optim.epochs
    run_start = time.perf_counter()
    for epoch in range(start_epoch, total_epochs):
        trainer.method.on_epoch_start(epoch)
        loader = trainer.train_loader(epoch)
        trainer.seed_model_noise(epoch)  # dropout: ERM's draws of this epoch, whatever came before
        first_step = global_step

        def progress(step: int, values: dict[str, float], first_step: int = first_step) -> None:
            log.step(first_step + step, values)

        result = train_one_epoch(
            trainer.train_model, trainer.method, log.progress(loader, epoch), trainer.optimizer,
            trainer.scheduler, trainer.step_setup, progress=progress,
        )
        global_step += len(loader)
        trainer.method.on_epoch_end(epoch)
        record = _epoch_record(trainer, epoch, result)
        improved = record.get("val_accuracy", -1.0) > best
        best = max(best, record.get("val_accuracy", -1.0))
        if trainer.method.wants_model_reset() and trainer.reset_epoch is None and epoch + 1 < total_epochs:
            log.message(f"epoch {epoch + 1}: {config.method.name} starts again from a fresh model")
            trainer.reset_model(epoch + 1)
            best = -1.0
        stopping = stop_after_epoch is not None and epoch + 1 >= stop_after_epoch
        if is_main:
            run.append_metrics(record)
            if config.select == "best_val" and improved:
                save_checkpoint(run.best_checkpoint, {"model": trainer.model.state_dict()})
            if stopping or (epoch + 1) % config.checkpoint_every == 0 or epoch + 1 == total_epochs:
                payload = trainer.state(epoch + 1, best)
                payload["global_step"] = global_step
                save_checkpoint(run.last_checkpoint, payload)
                if on_checkpoint is not None:
                    on_checkpoint()
        elapsed = time.perf_counter() - run_start
        log.epoch(record, elapsed / (epoch + 1 - start_epoch) * (total_epochs - epoch - 1))
        if stopping and epoch + 1 < total_epochs:
            return False
    return True
