"""Hyperparameter selection reads the validation split only."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mr2.report import RunRecord
from mr2.sweep import SelectionError, plan_sweep, select_settings, spec_from_dict
from mr2.sweep.selection import validation_metric

BASE = {"data": {"name": "synthetic"}, "model": {"name": "mlp"}}


def _confusion(accuracies: list[float], per_class: int = 20) -> np.ndarray:
    """2 classes, per-class accuracies as given, errors to the other class."""
    matrix = np.zeros((2, 2), dtype=np.int64)
    for k, accuracy in enumerate(accuracies):
        correct = round(accuracy * per_class)
        matrix[k, k], matrix[k, 1 - k] = correct, per_class - correct
    return matrix


def _run(name: str, seed: int, val: list[float], test: list[float]) -> RunRecord:
    return RunRecord(name, "mr2", _confusion(test), seed=seed, validation_confusion=_confusion(val))


def _points():
    spec = spec_from_dict({"base": BASE, "methods": {"erm": {}, "mr2": {"method.options.c_bar": [0.5, 2]}},
                           "seeds": [0, 1]})
    return plan_sweep(spec)


def test_the_best_validation_setting_wins_even_when_the_test_split_disagrees():
    points = _points()
    # c_bar=0.5: better on validation, much worse on test; c_bar=2: the opposite.
    runs = {
        "erm__seed=0": RunRecord("erm__seed=0", "erm", _confusion([0.7, 0.7]), seed=0,
                                 validation_confusion=_confusion([0.7, 0.7])),
        "mr2__c_bar=0.5__seed=0": _run("a0", 0, val=[0.9, 0.8], test=[0.5, 0.5]),
        "mr2__c_bar=0.5__seed=1": _run("a1", 1, val=[0.85, 0.8], test=[0.5, 0.55]),
        "mr2__c_bar=2__seed=0": _run("b0", 0, val=[0.6, 0.6], test=[1.0, 0.95]),
        "mr2__c_bar=2__seed=1": _run("b1", 1, val=[0.6, 0.65], test=[1.0, 1.0]),
    }
    selection = select_settings(points, runs, "val_accuracy")
    chosen = selection.selected("mr2")
    assert chosen is not None and chosen.setting_name == "c_bar=0.5"
    assert chosen.mean == pytest.approx((0.85 + 0.825) / 2) and chosen.complete
    assert [r.name for r in chosen.runs] == ["a0", "a1"]
    assert selection.tuned_labels() == ["mr2"]
    erm = selection.selected("erm")
    assert erm is not None and not erm.complete and erm.planned_seeds == [0, 1]  # seed 1 never finished
    main = selection.selected_runs()
    assert [(r.name, r.method) for r in main] == [("erm__seed=0", "erm"), ("a0", "mr2"), ("a1", "mr2")]
    recorded = selection.to_dict()
    assert recorded["split"] == "validation" and recorded["selected"] == {"erm": "", "mr2": "c_bar=0.5"}
    assert recorded["settings"]["mr2"][1]["setting"] == {"method.options.c_bar": 2}


def test_worst_class_selection_and_ties_go_to_the_first_setting():
    points = _points()
    runs = {
        "mr2__c_bar=0.5__seed=0": _run("a0", 0, val=[1.0, 0.5], test=[0.5, 0.5]),
        "mr2__c_bar=2__seed=0": _run("b0", 0, val=[0.7, 0.7], test=[0.5, 0.5]),
    }
    chosen = select_settings(points, runs, "val_worst_class").selected("mr2")
    assert chosen is not None and chosen.setting_name == "c_bar=2"  # 0.70 > 0.50 (overall: 0.75 > 0.70)
    assert select_settings(points, runs, "val_accuracy").selected("mr2").setting_name == "c_bar=0.5"
    tied = {
        "mr2__c_bar=0.5__seed=0": _run("a0", 0, val=[0.7, 0.7], test=[0.5, 0.5]),
        "mr2__c_bar=2__seed=0": _run("b0", 0, val=[0.7, 0.7], test=[0.9, 0.9]),
    }
    assert select_settings(points, tied).selected("mr2").setting_name == "c_bar=0.5"
    assert select_settings(points, {}).selected("mr2") is None


def test_choosing_without_a_validation_split_is_an_error():
    runs = {"mr2__c_bar=0.5__seed=0": RunRecord("a0", "mr2", _confusion([0.5, 0.5]), seed=0)}
    with pytest.raises(SelectionError, match=r"has no validation results in final\.json"):
        select_settings(_points(), runs)
    single = spec_from_dict({"base": BASE, "methods": {"erm": {}}})
    lone = {"erm__seed=0": RunRecord("e", "erm", _confusion([0.5, 0.5]), seed=0)}
    chosen = select_settings(plan_sweep(single), lone).selected("erm")  # nothing to choose: fine
    assert chosen is not None and math.isnan(chosen.mean)


def test_validation_metric_falls_back_to_per_class_accuracy():
    run = RunRecord("r", "erm", _confusion([0.5, 0.5]),
                    validation_per_class_accuracy=np.array([0.8, np.nan, 0.6]))
    assert validation_metric(run, "val_accuracy") == pytest.approx(0.7)
    assert validation_metric(run, "val_worst_class") == pytest.approx(0.6)
    assert math.isnan(validation_metric(RunRecord("r", "erm", _confusion([1, 1])), "val_accuracy"))
