"""Degenerate runs: a run that predicts one class for every sample, or whose accuracy sits at chance.

A run that never learned (a learning rate too high, a loss that diverged) still has a confusion
matrix, and its figures average into a method's mean over seeds like any other run's: one seed of
ERM at 10.00 % beside two at 70 % gives ``50.0 ± 34.7``, which reads like a result. The report keeps
such a run (it is a real outcome of the configuration) but names it wherever its figures appear.

The rule, from the run's confusion matrix ``C`` (rows: true class) over ``N`` samples, ``n_k`` the
samples of class k and ``m_k`` the samples predicted as class k:

- **one class**: every sample is predicted as the same class (one ``m_k`` is ``N``);
- **at chance**: the overall accuracy is not above chance. Chance is the accuracy of a classifier
  that ignores its input and predicts class k with the run's own frequency ``m_k / N``:
  ``p0 = sum_k (n_k / N) (m_k / N)`` (Cohen's kappa's expected agreement; exactly ``1 / K`` on a test
  split with as many samples of every class, whatever the predictions). The run is at chance when
  the exact one-sided binomial test of "accuracy > p0" does not reject at the level
  :data:`CHANCE_LEVEL` (0.001): ``P(Binomial(N, p0) >= correct) >= 0.001``. A run at chance is
  flagged about 999 times in 1000; a run one point above chance on 10,000 balanced samples of 10
  classes (p = 0.0004) is not; with few test samples a weak run may be indistinguishable from chance
  and is flagged as such.

A run predicting one class is at chance too (its accuracy equals ``p0``); it is named by the first
rule, which says more.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["CHANCE_LEVEL", "DEGENERATE_MARK", "RunFlag", "flag_run"]

#: Significance level of the test "accuracy above chance": a run whose test does not reject at this
#: level is flagged as at chance.
CHANCE_LEVEL = 0.001
#: The mark a method carries in the report's tables when one of its runs is flagged.
DEGENERATE_MARK = "(!)"


@dataclass(frozen=True)
class RunFlag:
    """Why a run is flagged as degenerate.

    Attributes:
        kind: ``"one_class"`` (every sample predicted as one class) or ``"at_chance"``.
        accuracy: the run's overall accuracy.
        chance: the accuracy of a classifier that ignores its input with the run's predicted class
            frequencies (``1 / K`` on a balanced test split).
        pvalue: one-sided exact binomial p-value of "accuracy > chance".
        predicted_class: the class every sample was predicted as (``"one_class"``), else None.
        class_name: that class's name, if the run has class names.
    """

    kind: str
    accuracy: float
    chance: float
    pvalue: float
    predicted_class: int | None = None
    class_name: str | None = None

    def reason(self) -> str:
        """The flag in words: ``predicts class 3 (Dress) for every sample`` or ``at chance: ...``.

        >>> RunFlag("at_chance", 0.104, 0.1, 0.09).reason()
        'at chance: accuracy 10.40%, chance 10.00% (one-sided binomial p = 0.09)'
        """
        if self.kind == "one_class":
            label = f"class {self.predicted_class}"
            if self.class_name:
                label += f" ({self.class_name})"
            return f"predicts {label} for every sample (accuracy {100 * self.accuracy:.2f}%)"
        return (
            f"at chance: accuracy {100 * self.accuracy:.2f}%, chance {100 * self.chance:.2f}% "
            f"(one-sided binomial p = {self.pvalue:.2g})"
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dictionary, with the reason in words."""
        return {
            "kind": self.kind,
            "reason": self.reason(),
            "accuracy": self.accuracy,
            "chance": self.chance,
            "pvalue": self.pvalue,
            "predicted_class": self.predicted_class,
            "class_name": self.class_name,
        }


def flag_run(confusion: ArrayLike, class_names: Sequence[str] | None = None) -> RunFlag | None:
    """The flag of a run from its K x K confusion matrix (rows: true class), or None when the run is
    neither predicting one class nor at chance (see the module docstring for the rule).

    Example:
        >>> flag_run([[10, 0], [10, 0]], ["cat", "dog"]).reason()
        'predicts class 0 (cat) for every sample (accuracy 50.00%)'
        >>> flag_run([[6, 4], [4, 6]]).kind  # 60% of 20 samples: not above 50% beyond noise
        'at_chance'
        >>> flag_run([[90, 10], [10, 90]]) is None
        True
    """
    from scipy import stats

    matrix = np.asarray(confusion, dtype=np.float64)
    total = float(matrix.sum())
    if total <= 0:
        return None
    true_counts = matrix.sum(axis=1)
    predicted_counts = matrix.sum(axis=0)
    correct = float(np.trace(matrix))
    accuracy = correct / total
    chance = float(min(1.0, (true_counts / total) @ (predicted_counts / total)))
    n = round(total)
    pvalue = float(stats.binom.sf(round(correct) - 1, n, chance))
    used = np.flatnonzero(predicted_counts > 0)
    if used.size == 1:
        k = int(used[0])
        name = class_names[k] if class_names is not None and k < len(class_names) else None
        return RunFlag("one_class", accuracy, chance, pvalue, k, name or None)
    if math.isnan(pvalue) or pvalue >= CHANCE_LEVEL:
        return RunFlag("at_chance", accuracy, chance, pvalue)
    return None
