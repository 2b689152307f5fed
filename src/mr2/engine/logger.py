"""What a run shows while it trains: console lines, the progress bar, and TensorBoard.

TensorBoard (``<run>/tensorboard/``, rank 0 only) receives, per epoch, every scalar of the epoch's
``metrics.jsonl`` record, the per-class validation accuracy (``val_class_accuracy/<class name>``),
the worst class and the tiers of the epoch (``val_worst_class``, ``val_tier/{easy,medium,hard}``:
the classes ranked by that epoch's validation accuracy, in thirds), and for MR2 the per-class
temperature, spread and second moment (``mr2/temperature/<class>``, ``mr2/spread/<class>``,
``mr2/second_moment/<class>``); every ``log_every`` optimiser steps of an epoch and at its last step
the step's loss and its parts (``train_step/...`` in ``tensorboard/steps/``, at the global step; an
epoch shorter than ``log_every`` still logs its last step); at the end the sorted per-class test
accuracy as a figure (``test/sorted_class_accuracy``). A resumed run purges the events after its checkpoint.

``<class>`` is the class name spelled by :func:`mr2.report.log_keys.log_keys` (every character outside
``[A-Za-z0-9_.-]`` becomes ``_``, collisions made unique), the spelling of
``ClasswiseDisparity.to_log_dict``.
"""

from __future__ import annotations

import math
import sys
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mr2.checks import is_number
from mr2.report.exceptions import MissingClassWarning
from mr2.report.log_keys import log_keys
from mr2.report.tiers import TierSplit

__all__ = ["TrainingLog", "epoch_tiers"]

#: metrics.jsonl per-class lists written to TensorBoard under ``mr2/<name>/<class>``.
CLASS_SERIES = {"temperatures": "temperature", "spread": "spread", "second_moment": "second_moment"}


def epoch_tiers(per_class: Sequence[float]) -> dict[str, float]:
    """Tier accuracies of an epoch, the classes ranked by that same epoch's accuracy (the report's
    :class:`~mr2.report.tiers.TierSplit` rule: thirds, ties by class id; NaN classes unranked).

    Example:
        >>> {k: round(v, 4) for k, v in epoch_tiers([0.9, 0.5, 0.7, 0.1, 0.3, 0.8]).items()}
        {'easy': 0.85, 'medium': 0.6, 'hard': 0.2}
    """
    values = np.asarray([np.nan if v is None else v for v in per_class], dtype=np.float64)
    if int(np.isfinite(values).sum()) < 3:
        return {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MissingClassWarning)
        split = TierSplit.from_accuracy(values, ranked_by="own accuracy")
    return {name: float(v) for name, v in zip(split.names, split.accuracy(values), strict=True)}


class TrainingLog:
    """Console, progress bar and TensorBoard output of one run (quiet off rank 0).

    Args:
        run_name: shown in console lines.
        epochs: total epochs (progress bar).
        class_names: one name per class (TensorBoard tags).
        tensorboard_dir: where event files go (None: no TensorBoard).
        enabled: False on ranks other than 0.
        quiet: no console output and no progress bar.
        start_epoch: epochs already done (a resume): events after it are purged.
        start_step: optimiser steps already done (a resume): step events after it are purged.
    """

    def __init__(
        self, run_name: str, epochs: int, class_names: Sequence[str], tensorboard_dir: Path | None,
        *, enabled: bool, quiet: bool, start_epoch: int = 0, start_step: int = 0,
    ) -> None:
        self.run_name = run_name
        self.epochs = epochs
        self.class_tags = log_keys(class_names)
        self.enabled = enabled
        self.quiet = quiet or not enabled
        self.writer: Any = None
        self.step_writer: Any = None
        self._bar: Any = None
        if enabled and tensorboard_dir is not None:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:  # pragma: no cover - tensorboard is an optional extra
                return
            purge = start_epoch + 1 if start_epoch else None
            self.writer = SummaryWriter(log_dir=str(tensorboard_dir), purge_step=purge)
            self.step_writer = SummaryWriter(
                log_dir=str(tensorboard_dir / "steps"), purge_step=start_step + 1 if start_step else None
            )

    # --------------------------------------------------------------- console
    def message(self, text: str) -> None:
        if not self.quiet:
            print(text, file=sys.stderr, flush=True)

    def progress(self, loader: Iterable[Any], epoch: int) -> Iterable[Any]:
        """``loader``, wrapped in a progress bar when stderr is a terminal."""
        self._bar = None
        if self.quiet or not sys.stderr.isatty():
            return loader
        from tqdm import tqdm

        self._bar = tqdm(loader, desc=f"epoch {epoch + 1}/{self.epochs}", leave=False)
        return self._bar

    def step(self, global_step: int, values: dict[str, float]) -> None:
        """Step-level values (every ``log_every`` steps and each epoch's last): progress-bar postfix and
        TensorBoard."""
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.set_postfix({k: f"{v:.4g}" for k, v in values.items()}, refresh=False)
        if self.step_writer is not None:
            for key, value in values.items():
                self.step_writer.add_scalar(f"train_step/{key}", value, global_step)

    # ----------------------------------------------------------------- epochs
    def epoch(self, record: dict[str, Any], eta_seconds: float) -> None:
        """One epoch's record (as written to metrics.jsonl)."""
        if not self.enabled:
            return
        self._tensorboard_epoch(record)
        self.message(
            f"[{self.run_name}] epoch {record['epoch']}/{self.epochs} loss {record['train_loss']:.4f} "
            f"train acc {record['train_accuracy']:.4f} "
            f"val acc {record.get('val_accuracy', float('nan')):.4f} "
            f"{record['samples_per_second']:.0f} samples/s, ETA {eta_seconds:.0f} s"
        )

    def _tensorboard_epoch(self, record: dict[str, Any]) -> None:
        writer = self.writer
        if writer is None:
            return
        epoch = record["epoch"]
        for key, value in record.items():
            if is_number(value) and key != "epoch":
                writer.add_scalar(key, value, epoch)
        per_class = record.get("val_per_class_accuracy")
        if per_class is not None:
            for tag, value in zip(self.class_tags, per_class, strict=False):
                if value is not None and not math.isnan(value):
                    writer.add_scalar(f"val_class_accuracy/{tag}", value, epoch)
            present = [v for v in per_class if v is not None and v == v]
            if present:
                writer.add_scalar("val_worst_class", min(present), epoch)
            for tier, value in epoch_tiers(per_class).items():
                writer.add_scalar(f"val_tier/{tier}", value, epoch)
        for key, name in CLASS_SERIES.items():
            series = record.get(key)
            if series is None:
                continue
            for tag, value in zip(self.class_tags, series, strict=False):
                if value is not None and math.isfinite(value):
                    writer.add_scalar(f"mr2/{name}/{tag}", value, epoch)
        writer.flush()

    def final(self, per_class_accuracy: Sequence[float], class_names: Sequence[str]) -> None:
        """The sorted per-class test accuracy as a TensorBoard figure."""
        if self.writer is None:
            return
        try:
            import matplotlib

            matplotlib.use("Agg", force=False)
            import matplotlib.pyplot as plt
        except ImportError:  # pragma: no cover - matplotlib comes with the train extra
            return
        pairs = sorted(
            ((a, n) for a, n in zip(per_class_accuracy, class_names, strict=False) if a == a),
            key=lambda item: item[0],
        )
        figure, axis = plt.subplots(figsize=(max(4.0, 0.25 * len(pairs)), 3.0))
        axis.bar(range(len(pairs)), [a for a, _ in pairs])
        if len(pairs) <= 40:
            axis.set_xticks(range(len(pairs)), [n for _, n in pairs], rotation=90, fontsize=7)
        axis.set_ylabel("test accuracy")
        axis.set_ylim(0, 1)
        figure.tight_layout()
        self.writer.add_figure("test/sorted_class_accuracy", figure, close=True)
        self.writer.flush()

    def close(self) -> None:
        for writer in (self.writer, self.step_writer):
            if writer is not None:
                writer.close()
        self.writer = self.step_writer = None
