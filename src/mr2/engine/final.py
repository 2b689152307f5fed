"""The final evaluation of a run: the content of ``final.json`` (and of ``eval_<split>.json``), and
the per-sample predictions of ``predictions/{test,val}.npz``.

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
from typing import Any

import numpy as np

from mr2.engine.loop import EvalResult
from mr2.engine.trainer import Trainer
from mr2.io import atomic_write_bytes

__all__ = ["FORMAT_VERSION", "NO_VALIDATION", "PREDICTIONS_DIR", "final_evaluation", "final_outputs",
           "write_predictions"]

#: The run directory's folder of per-sample predictions.
PREDICTIONS_DIR = "predictions"

FORMAT_VERSION = 1
NO_VALIDATION = (
    "the run {name!r} has no validation split (data.val_fraction is 0), so there is nothing to "
    "evaluate on 'val'; use --split test, or train with data.val_fraction > 0"
)


def final_evaluation(trainer: Trainer, split: str = "test") -> dict[str, Any]:
    """Evaluate the trainer's current model on ``split`` ("test" or "val"); every rank takes part.

    For ``split="test"`` the validation figures are included (``validation``), for model selection.
    """
    return final_outputs(trainer, split)[0]


def _ids(result: EvalResult, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    targets, predictions = result.in_dataset_order()
    dtype = np.int16 if num_classes <= np.iinfo(np.int16).max else np.int32
    return targets.numpy().astype(dtype), predictions.numpy().astype(dtype)


def final_outputs(trainer: Trainer, split: str = "test"
                  ) -> tuple[dict[str, Any], dict[str, tuple[np.ndarray, np.ndarray]]]:
    """:func:`final_evaluation`'s content and the per-sample predictions it was computed from:
    ``{split: (y_true, y_pred)}`` (and ``"val"`` with ``split="test"`` when the run has validation)."""
    config, data = trainer.config, trainer.data
    dataset = data.test if split == "test" else data.val
    assert dataset is not None
    result = trainer.evaluate(dataset)
    predictions = {split: _ids(result, data.num_classes)}
    final: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "run_name": config.name,
        "method": config.method.name,
        "seed": config.seed,
        "dataset": {
            "name": data.dataset_name,
            "num_classes": data.num_classes,
            "class_names": data.class_names,
        },
        "split": split,
        "num_samples": result.num_samples,
        "confusion_matrix": result.confusion.tolist(),
        "overall_accuracy": result.overall_accuracy,
        "per_class_accuracy": result.per_class_accuracy().tolist(),
        "class_statistics": None,
        "logit_margins": result.margin_summary(data.num_classes),
    }
    class_stats = trainer.method.class_statistics()
    if class_stats is not None:
        final["class_statistics"] = {k: v.tolist() for k, v in class_stats.items()}
    if split == "test" and trainer.has_validation:
        assert data.val is not None
        val = trainer.evaluate(data.val)
        final["validation"] = {
            "overall_accuracy": val.overall_accuracy,
            "per_class_accuracy": val.per_class_accuracy().tolist(),
            "confusion_matrix": val.confusion.tolist(),
        }
        predictions["val"] = _ids(val, data.num_classes)
    return final, predictions


def write_predictions(run_dir: str | os.PathLike[str], predictions: dict[str, tuple[np.ndarray, np.ndarray]]
                      ) -> list[Path]:
    """Write ``<run_dir>/predictions/<split>.npz`` (``y_true``, ``y_pred``) atomically, one per split."""
    written = []
    for split, (y_true, y_pred) in predictions.items():
        buffer = io.BytesIO()
        np.savez(buffer, y_true=y_true, y_pred=y_pred)
        path = Path(run_dir) / PREDICTIONS_DIR / f"{split}.npz"
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, buffer.getvalue())
        written.append(path)
    return written
