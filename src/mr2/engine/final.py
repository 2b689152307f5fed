"""The final evaluation of a run: the content of ``final.json`` (and of ``eval_<split>.json``).

Its format is documented in ``docs/run-directory.md``. Non-finite numbers (a class without samples)
are written as ``NaN``, as Python's ``json`` module does; ``mr2.report`` reads them back as NaN.
"""

from __future__ import annotations

from typing import Any

from mr2.engine.trainer import Trainer

__all__ = ["FORMAT_VERSION", "NO_VALIDATION", "final_evaluation"]

FORMAT_VERSION = 1
NO_VALIDATION = (
    "the run {name!r} has no validation split (data.val_fraction is 0), so there is nothing to "
    "evaluate on 'val'; use --split test, or train with data.val_fraction > 0"
)


def final_evaluation(trainer: Trainer, split: str = "test") -> dict[str, Any]:
    """Evaluate the trainer's current model on ``split`` ("test" or "val"); every rank takes part.

    For ``split="test"`` the validation figures are included (``validation``), for model selection.
    """
    config, data = trainer.config, trainer.data
    dataset = data.test if split == "test" else data.val
    assert dataset is not None
    result = trainer.evaluate(dataset)
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
    return final
