"""Fixed tiers given to the report (``tier_assignment``): the table's tier columns are the given
classes' mean accuracies, whatever the reference runs would rank; bad assignments are refused."""

from __future__ import annotations

import numpy as np
import pytest

from mr2.report.comparison import compare_runs, fixed_tiers
from mr2.report.exceptions import ReportError
from mr2.report.run_dir import RunRecord
from mr2.sweep.spec import SweepSpecError, spec_from_dict


def _run(method: str, seed: int, per_class_correct: list[int], n: int = 10) -> RunRecord:
    k = len(per_class_correct)
    confusion = np.zeros((k, k), dtype=np.int64)
    for c, right in enumerate(per_class_correct):
        confusion[c, c] = right
        confusion[c, (c + 1) % k] = n - right
    return RunRecord(name=f"{method}@{seed}", method=method, confusion=confusion, seed=seed)


def test_fixed_tiers_replace_the_reference_ranking():
    runs = [_run("erm", 0, [9, 8, 7, 6, 5, 4]), _run("erm", 1, [9, 8, 7, 6, 5, 4]),
            _run("m", 0, [8, 8, 8, 8, 8, 8]), _run("m", 1, [6, 7, 8, 9, 9, 9])]
    # Ranked on ERM, classes 4 and 5 would be hard; the given tiers make classes 0 and 1 hard.
    assignment = [2, 2, 1, 1, 0, 0]
    comparison = compare_runs(runs, reference="erm", tier_assignment=assignment, tiers_ranked_by="given")
    assert comparison.tiers.assignment.tolist() == assignment and comparison.tiers.ranked_by == "given"
    assert comparison.tier_source == "fixed"
    hard = comparison.tiers.names[-1]
    # Oracle: the mean over the hard classes' accuracies, per run, then over seeds.
    erm = comparison.method("erm").values[f"tier:{hard}"]
    m = comparison.method("m").values[f"tier:{hard}"]
    np.testing.assert_allclose(erm, [0.85, 0.85])
    np.testing.assert_allclose(m, [0.8, 0.65])
    ranked = compare_runs(runs, reference="erm")
    assert ranked.tiers.assignment.tolist() != assignment


@pytest.mark.parametrize("assignment", [[0, 1], [0, 2, 2, 2, 2, 2], [0, 0, 0, 0, 0, -2], [0, 0.5, 0, 0, 0, 0]])
def test_bad_tier_assignment_is_refused(assignment):
    runs = [_run("erm", 0, [9, 8, 7, 6, 5, 4]), _run("erm", 1, [9, 8, 7, 6, 5, 4])]
    with pytest.raises(ReportError, match="tier_assignment must hold one tier index per class"):
        compare_runs(runs, reference="erm", tier_assignment=assignment)


def test_fixed_tiers_unranked_class():
    split = fixed_tiers([1, -1, 0], 3, "given")
    assert split.members(1).tolist() == [0] and split.names == ("easy", "hard")


def test_sweep_spec_report_tier_assignment_is_checked():
    base = {"name": "s", "base": {"data": {"name": "synthetic"}}, "methods": {"erm": {}}, "seeds": 1}
    spec = spec_from_dict({**base, "report": {"tier_assignment": [0, 1, 2]}})
    assert spec.report.tier_assignment == [0, 1, 2]
    with pytest.raises(SweepSpecError, match=r"report\.tier_assignment"):
        spec_from_dict({**base, "report": {"tier_assignment": ["x"]}})
