"""Fixtures of the disparity-report tests: tiny run directories written like `mr2 train` does."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest


def random_confusion(
    rng: np.random.Generator, num_classes: int, per_class: int, accuracy: np.ndarray
) -> np.ndarray:
    """A confusion matrix with `per_class` samples per class, the correct ones drawn with the
    given per-class accuracy and the errors spread uniformly over the other classes."""
    matrix = np.zeros((num_classes, num_classes), dtype=np.int64)
    for k in range(num_classes):
        correct = rng.binomial(per_class, accuracy[k])
        matrix[k, k] = correct
        if num_classes > 1:
            wrong = rng.choice([j for j in range(num_classes) if j != k], per_class - correct)
            np.add.at(matrix[k], wrong, 1)
    return matrix


def write_run(
    path: Path,
    *,
    method: str,
    seed: int | None,
    confusion: np.ndarray,
    dataset: str = "toy",
    class_names: list[str] | None = None,
    statistics: dict[str, list[float]] | None = None,
    margins: dict[str, list[float]] | None = None,
    metrics: list[dict[str, Any]] | None = None,
    validation_confusion: np.ndarray | None = None,
    run_name: str | None = None,
) -> Path:
    """Write a run directory following docs/run-directory.md."""
    path.mkdir(parents=True, exist_ok=True)
    num_classes = int(confusion.shape[0])
    (path / "config.yaml").write_text(f"method: {method}\nseed: {seed}\ndataset: {dataset}\n")
    support = confusion.sum(axis=1)
    per_class = [
        None if support[k] == 0 else float(confusion[k, k] / support[k]) for k in range(num_classes)
    ]
    final: dict[str, Any] = {
        "format_version": 1,
        "run_name": run_name if run_name is not None else f"{method}-seed{seed}",
        "method": method,
        "seed": seed,
        "dataset": {"name": dataset, "num_classes": num_classes, "class_names": class_names},
        "split": "test",
        "num_samples": int(confusion.sum()),
        "confusion_matrix": confusion.tolist(),
        "overall_accuracy": float(np.trace(confusion) / confusion.sum()),
        "per_class_accuracy": per_class,
        "class_statistics": statistics,
        "logit_margins": margins,
        "validation": None
        if validation_confusion is None
        else {"confusion_matrix": validation_confusion.tolist()},
    }
    (path / "final.json").write_text(json.dumps(final))
    if metrics is not None:
        (path / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    return path


@pytest.fixture
def make_run() -> Callable[..., Path]:
    """`make_run(path, method=..., seed=..., confusion=...)` writes a run directory."""
    return write_run


@pytest.fixture
def comparison_runs(tmp_path: Path) -> list[Path]:
    """Two methods x three seeds on a 9-class toy data set; MR2 runs carry statistics and logs."""
    rng = np.random.default_rng(0)
    num_classes = 9
    base = np.linspace(0.95, 0.35, num_classes)
    names = [f"class{k}" for k in range(num_classes)]
    paths = []
    for method, shift in (("erm", 0.0), ("mr2", 0.05)):
        for seed in range(3):
            confusion = random_confusion(rng, num_classes, 40, np.clip(base + shift, 0, 1))
            statistics = margins = metrics = None
            if method == "mr2":
                spread = (1.0 + np.arange(num_classes) * 0.2 + rng.normal(0, 0.05, num_classes)).tolist()
                norm = (4.0 + rng.normal(0, 0.1, num_classes)).tolist()
                second = (np.array(norm) + np.array(spread)).tolist()
                temps = (np.cbrt(second) / np.cbrt(second).mean()).tolist()
                statistics = {
                    "mean_sq_norm": norm,
                    "spread": spread,
                    "second_moment": second,
                    "temperatures": temps,
                }
                margins = {
                    "mean": (3.0 - 0.2 * np.arange(num_classes)).tolist(),
                    "median": (3.1 - 0.2 * np.arange(num_classes)).tolist(),
                }
                metrics = [
                    {
                        "epoch": epoch,
                        "train_loss": 2.0 / (epoch + 1),
                        "val_accuracy": 0.5 + 0.05 * epoch,
                        "temperatures": (np.array(temps) * (1 + 0.01 * epoch)).tolist(),
                        "spread": (np.array(spread) * (1 + 0.1 * epoch)).tolist(),
                        "mean_sq_norm": norm,
                    }
                    for epoch in range(4)
                ]
            paths.append(
                write_run(
                    tmp_path / f"{method}-{seed}",
                    method=method,
                    seed=seed,
                    confusion=confusion,
                    class_names=names,
                    statistics=statistics,
                    margins=margins,
                    metrics=metrics,
                    validation_confusion=random_confusion(
                        rng, num_classes, 20, np.clip(base + shift, 0, 1)
                    ),
                )
            )
    return paths
