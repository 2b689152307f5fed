"""The final evaluation of a run: its record (``final.json``, ``eval_<split>.json``: a
:class:`mr2.rundir.FinalRecord`), and the per-sample predictions of ``predictions/{test,val}.npz``.

Its format is documented in ``docs/run-directory.md``. Non-finite numbers (a class without samples)
are written as ``NaN``, as Python's ``json`` module does; ``mr2.report`` reads them back as NaN.
The predictions files hold ``y_true`` and ``y_pred`` (class ids, int16 below 32,768 classes, else
int32) in the split's sample order, the format ``mr2 report --predictions`` reads; ``mr2 tune``
chooses on ``predictions/val.npz``.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np

from mr2.engine.loop import EvalResult
from mr2.engine.trainer import Trainer
from mr2.io import atomic_write_bytes
from mr2.losses.collapse import write_collapse_record
from mr2.rundir import DatasetInfo, FinalRecord, SplitFigures, layout

__all__ = ["NO_VALIDATION", "PREDICTIONS_DIR", "Predictions", "final_record", "write_predictions"]

#: The run directory's folder of per-sample predictions (its home: the run directory's layout).
PREDICTIONS_DIR = layout.PREDICTIONS_DIR

NO_VALIDATION = (
    "the run {name!r} has no validation split (data.val_fraction is 0), so there is nothing to "
    "evaluate on 'val'; use --split test, or train with data.val_fraction > 0"
)

#: ``{split: (y_true, y_pred)}``: class ids in the split's sample order.
Predictions = dict[str, tuple[np.ndarray, np.ndarray]]


def _ids(result: EvalResult, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    targets, predictions = result.in_dataset_order()
    dtype = np.int16 if num_classes <= np.iinfo(np.int16).max else np.int32
    return targets.numpy().astype(dtype), predictions.numpy().astype(dtype)


def final_record(trainer: Trainer, split: str = "test") -> tuple[FinalRecord, Predictions]:
    """Evaluate the trainer's current model on ``split`` ("test" or "val"); every rank takes part.

    Returns the record and the per-sample predictions it was computed from: ``{split: (y_true,
    y_pred)}``. For ``split="test"`` on a run with a validation split, the record holds the
    validation figures too (``validation``, for model selection) and the predictions ``"val"``.
    """
    config, data = trainer.config, trainer.data
    dataset = data.test if split == "test" else data.val
    assert dataset is not None
    result = trainer.evaluate(dataset)
    predictions = {split: _ids(result, data.num_classes)}
    class_stats = trainer.method.class_statistics()
    margins = result.margin_summary(data.num_classes)
    validation = None
    if split == "test" and trainer.has_validation:
        assert data.val is not None
        val = trainer.evaluate(data.val)
        validation = SplitFigures(
            overall_accuracy=val.overall_accuracy,
            per_class_accuracy=tuple(val.per_class_accuracy().tolist()),
            confusion_matrix=tuple(tuple(row) for row in val.confusion.tolist()),
        )
        predictions["val"] = _ids(val, data.num_classes)
    record = FinalRecord(
        run_name=config.name,
        method=config.method.name,
        seed=config.seed,
        dataset=DatasetInfo(
            name=data.dataset_name,
            num_classes=data.num_classes,
            class_names=tuple(data.class_names),
        ),
        split=split,
        num_samples=result.num_samples,
        confusion_matrix=tuple(tuple(row) for row in result.confusion.tolist()),
        overall_accuracy=result.overall_accuracy,
        per_class_accuracy=tuple(result.per_class_accuracy().tolist()),
        class_statistics=None if class_stats is None
        else {name: tuple(values.tolist()) for name, values in class_stats.items()},
        logit_margins={name: tuple(values) for name, values in margins.items()},
        validation=validation,
    )
    return record, predictions


def write_predictions(run_dir: str | os.PathLike[str], predictions: Predictions) -> list[Path]:
    """Write ``<run_dir>/predictions/<split>.npz`` (``y_true``, ``y_pred``) atomically, one per split,
    and ``predictions/collapse.json`` when a feature-collapse guard warned in this thread since the
    run started training (:func:`mr2.losses.collapse.write_collapse_record`: ``mr2 tune`` does not
    adopt such a candidate)."""
    written = []
    for split, (y_true, y_pred) in predictions.items():
        buffer = io.BytesIO()
        np.savez(buffer, y_true=y_true, y_pred=y_pred)
        path = Path(run_dir) / PREDICTIONS_DIR / f"{split}.npz"
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, buffer.getvalue())
        written.append(path)
    write_collapse_record(Path(run_dir) / PREDICTIONS_DIR)
    return written
