"""Hyperparameter selection on the VALIDATION split (the test split is never looked at).

For every method entry with several settings (combinations of its grid values), each setting is
scored by the mean over its finished seeds of a validation metric read from ``final.json``'s
``validation`` section:

- ``val_accuracy``: overall validation accuracy;
- ``val_worst_class``: accuracy of the worst class on the validation split.

The best mean wins; ties go to the setting listed first in the sweep file. Only the selected setting
enters the main comparison table; every setting is listed in a secondary table with its validation
score, its number of finished seeds and (for information, not used for the choice) its test figures.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mr2.errors import MR2Error
from mr2.report.run_dir import RunRecord
from mr2.report.statistics import mean_std
from mr2.sweep.plan import RunPoint

__all__ = ["Selection", "SelectionError", "SettingScore", "select_settings", "validation_metric"]

_NO_VALIDATION = (
    "run {run} has no validation results in final.json, so {label}'s settings cannot be compared "
    "without looking at the test split; set data.val_fraction > 0 in the sweep's base configuration"
)


class SelectionError(MR2Error, ValueError):
    """Hyperparameters cannot be selected (a run without validation results)."""


def validation_metric(run: RunRecord, select_by: str) -> float:
    """The run's validation score: ``val_accuracy`` (overall) or ``val_worst_class``; NaN if absent.

    Example:
        >>> run = RunRecord("r", "erm", np.eye(2, dtype=np.int64),
        ...                 validation_confusion=np.array([[3, 1], [0, 4]]))
        >>> validation_metric(run, "val_accuracy"), validation_metric(run, "val_worst_class")
        (0.875, 0.75)
    """
    if select_by == "val_accuracy":
        if run.validation_confusion is not None:
            total = run.validation_confusion.sum()
            return float(np.trace(run.validation_confusion) / total) if total else math.nan
        accuracy = run.validation_accuracy()
        if accuracy is None or np.all(np.isnan(accuracy)):
            return math.nan
        return float(np.nanmean(accuracy))
    if select_by == "val_worst_class":
        accuracy = run.validation_accuracy()
        if accuracy is None or np.all(np.isnan(accuracy)):
            return math.nan
        return float(np.nanmin(accuracy))
    raise ValueError(f"unknown selection metric {select_by!r}")


@dataclass
class SettingScore:
    """One setting of a method entry and its validation score over seeds.

    Attributes:
        label: the method entry.
        setting: ``((key, value), ...)`` of its grid axes with several values.
        setting_name: as in the run names (``c_bar=2``; "" for an entry without grid).
        planned_seeds: seeds planned for the setting.
        runs: the finished runs, by seed.
        scores: the validation score of each finished run.
        mean: mean score (NaN without finished runs).
        std: std over seeds (ddof = 1; NaN with fewer than 2).
        selected: whether this setting was chosen.
    """

    label: str
    setting: tuple[tuple[str, Any], ...]
    setting_name: str
    planned_seeds: list[int]
    runs: list[RunRecord] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    mean: float = math.nan
    std: float = math.nan
    selected: bool = False

    @property
    def complete(self) -> bool:
        """Every planned seed finished."""
        return len(self.runs) == len(self.planned_seeds)

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "setting": {key: value for key, value in self.setting},
            "setting_name": self.setting_name,
            "planned_seeds": self.planned_seeds,
            "finished_runs": [run.name for run in self.runs],
            "seeds": [run.seed for run in self.runs],
            "scores": [None if math.isnan(s) else s for s in self.scores],
            "mean": None if math.isnan(self.mean) else self.mean,
            "std": None if math.isnan(self.std) else self.std,
            "selected": self.selected,
        }


@dataclass
class Selection:
    """The settings of every method entry and the chosen one.

    Attributes:
        select_by: the validation metric.
        settings: label -> its settings, in sweep order.
    """

    select_by: str
    settings: dict[str, list[SettingScore]]

    def selected(self, label: str) -> SettingScore | None:
        """The chosen setting of ``label`` (None if none of its runs finished)."""
        for score in self.settings[label]:
            if score.selected:
                return score
        return None

    def tuned_labels(self) -> list[str]:
        """Entries with more than one setting (where a choice was made)."""
        return [label for label, scores in self.settings.items() if len(scores) > 1]

    def selected_runs(self) -> list[RunRecord]:
        """The runs of every entry's chosen setting, their ``method`` renamed to the entry label."""
        runs = []
        for label in self.settings:
            chosen = self.selected(label)
            if chosen is not None:
                runs += [dataclasses.replace(run, method=label) for run in chosen.runs]
        return runs

    def to_dict(self) -> dict[str, Any]:
        return {
            "select_by": self.select_by,
            "split": "validation",
            "selected": {
                label: (None if (chosen := self.selected(label)) is None else chosen.setting_name)
                for label in self.settings
            },
            "settings": {label: [s.to_dict() for s in scores] for label, scores in self.settings.items()},
        }


def select_settings(
    points: Sequence[RunPoint], runs: dict[str, RunRecord], select_by: str = "val_accuracy"
) -> Selection:
    """Score every setting on the validation split and choose the best of each method entry.

    Args:
        points: the sweep's planned runs.
        runs: point name -> its finished run (points without an entry did not finish).
        select_by: ``val_accuracy`` or ``val_worst_class``.

    Raises:
        SelectionError: an entry with several settings whose runs lack validation results.
    """
    settings: dict[str, dict[str, SettingScore]] = {}
    for point in points:
        by_setting = settings.setdefault(point.label, {})
        score = by_setting.get(point.setting_name)
        if score is None:
            score = by_setting[point.setting_name] = SettingScore(
                point.label, point.setting, point.setting_name, []
            )
        score.planned_seeds.append(point.seed)
        run = runs.get(point.name)
        if run is not None:
            score.runs.append(run)
    for label, by_setting in settings.items():
        scores = list(by_setting.values())
        several = len(scores) > 1
        for score in scores:
            score.scores = [validation_metric(run, select_by) for run in score.runs]
            if several:
                for run, value in zip(score.runs, score.scores, strict=True):
                    if math.isnan(value):
                        raise SelectionError(_NO_VALIDATION.format(run=run.label, label=label))
            score.mean, score.std, _ = mean_std(score.scores) if score.scores else (math.nan, math.nan, 0)
        candidates = [s for s in scores if s.runs]
        if not candidates:
            continue
        if several:
            best = max(candidates, key=lambda s: (s.mean, -scores.index(s)))
        else:
            best = candidates[0]
        best.selected = True
    return Selection(select_by, {label: list(by.values()) for label, by in settings.items()})
