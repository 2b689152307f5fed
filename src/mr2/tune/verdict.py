"""The verdict on ``mr2 tune``'s fresh-seed confirmation: does the chosen configuration beat ERM on
the TEST hard tier, seed for seed?

The confirmation trains ERM (plain cross-entropy training, the reference) and the chosen candidate on
fresh seeds and predicts the test split. Per confirmation seed ``s`` (paired: the seeds both have):

- ``h_s``: the chosen candidate's test hard-tier accuracy minus ERM's, where the hard tier is the
  mean of the per-class test accuracies of the hard classes ranked on ERM's VALIDATION accuracies
  (:attr:`mr2.tune.selection.Choice.hard_classes`), never on test;
- ``o_s``: the same difference of test overall accuracy.

With ``n`` paired seeds, ``d = mean(h)``, ``sd = std(h, ddof=1)`` and ``t = d / (sd / sqrt(n))``
(``n - 1`` degrees of freedom), the one-sided paired t-test p-values are
``p_greater = P(T >= t)`` and ``p_less = P(T <= t)``. ERM's seed standard error of test overall
accuracy is ``se = std(overall_ERM, ddof=1) / sqrt(n)``. The outcome, first match wins:

1. ``nothing to confirm``: ERM itself was chosen (no candidate given): ERM's figures are reported;
2. ``contradicted``: ``p_less < alpha`` (significantly worse than ERM): recommend ERM;
3. ``confirmed``: ``p_greater < alpha`` and ``mean(o) >= -se`` (costs no more than ERM's seed
   standard error overall): the one outcome under which ``mr2 tune`` advises adopting it;
4. ``unstable``: ``p_greater < alpha``, but one of its runs tripped the feature-collapse guard
   (:attr:`SeedFigures.collapsed`) or lost more than :data:`LOSS_LIMIT` ERM seed SDs of the test
   hard tier on one seed (``h_s < -LOSS_LIMIT * sd(ERM's hard tier over the seeds)``): a configuration
   that fails on some seeds can pass a t-test on the seeds where it did not fail, so it is named and
   not adopted;
5. ``gain with a cost``: ``p_greater < alpha`` but ``mean(o) < -se``: a trade-off, not adopted;
6. ``inconclusive``: neither test significant, whatever the sign of ``d``: a useless configuration
   has ``d > 0`` half the time, so the sign alone is no evidence; not adopted.

Seeds that would settle it (:func:`seeds_needed`): the smallest ``n >= 2`` at which a one-sided
paired t-test at level ``alpha`` has power ``>= power`` (default 80 %) if the true mean and SD of the
differences were the observed ``d`` and ``sd``::

    power(n) = P(T'_{n-1, delta} > t_{1-alpha, n-1}),   delta = sqrt(n) * d / sd

with ``T'`` noncentral t (``scipy.stats.nct``) and ``t_{1-alpha, n-1}`` the central t quantile. It is
a plug-in estimate: the observed effect and spread are themselves noisy on a few seeds.

A spread shared with other contenders (``spread=(sd, df)``: what a design's
:meth:`mr2.tune.design.Design.look_level` offers; the shipped rule offers none, the pooled variance
of benchmarks/tune_research_design.py does): the test uses ``max(sd_own, floor, sd_pooled)``; when
the pooled SD is the largest, the t statistic has the pooled degrees of freedom, otherwise its own
``n - 1``. Under a common variance of the differences the pooled test is exact and the rule is
conservative against it (it only ever takes a larger SD, and then with fewer degrees of freedom); a
contender whose own spread is larger keeps its own test.

The spread's floor: test accuracies move in steps (class k's in steps of ``1 / n_k``), so on a few
seeds the differences can all be the same step by chance, and a t-test would read their zero spread
as certainty (``t = inf``: seen on real trainings with 45 test images per class, a useless
configuration adopted on 3 seeds that each differed from ERM by the same one-image step). The test
therefore uses ``max(sd, sqrt(2) * rounding_sd)``: the SD that the rounding of two figures alone
gives (:attr:`SeedFigures.rounding_sd`, uniform rounding errors, Sheppard's model of grouped data).
Where the measured spread is larger, the usual case (0.02 points with 1,000 test images in each of 3
hard classes), nothing changes.

Edge cases: fewer than 2 paired seeds is an error (:data:`TOO_FEW_SEEDS`: no spread, no test; the
caller records it instead of a verdict). Zero spread of the differences with no resolution known
(figures given as numbers; ``sd = 0``, up to 1e-12): a nonzero ``d`` gives ``t = +-inf`` and
p-values 0 / 1, as in :func:`mr2.report.statistics.paired_t_test`, ``d = 0`` gives ``t = 0`` and
both p-values 1. A hard class without a test sample is left out of the
hard-tier mean (every seed the same); no hard class with a test sample is an error.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from mr2.errors import MR2Error
from mr2.report.statistics import paired_t_test

__all__ = [
    "ALPHA",
    "LOSS_LIMIT",
    "MAX_SEEDS",
    "OUTCOMES",
    "POWER",
    "SeedFigures",
    "Verdict",
    "VerdictError",
    "judge_figures",
    "one_sided_power",
    "rescored",
    "seed_figures",
    "seeds_needed",
]

CONFIRMED = "confirmed"
UNSTABLE = "unstable"
GAIN_WITH_COST = "gain with a cost"
INCONCLUSIVE = "inconclusive"
CONTRADICTED = "contradicted"
NOTHING_TO_CONFIRM = "nothing to confirm"
#: Every outcome, best first.
OUTCOMES = (CONFIRMED, UNSTABLE, GAIN_WITH_COST, INCONCLUSIVE, CONTRADICTED, NOTHING_TO_CONFIRM)
#: A seed on which the candidate's test hard tier is below ERM's by more than this many of ERM's seed
#: SDs (of its test hard tier over the confirmation seeds) makes a significant gain ``unstable``.
LOSS_LIMIT = 5.0
#: The test's level and the power the seeds-needed calculation aims at.
ALPHA = 0.05
POWER = 0.8
#: :func:`seeds_needed` gives up (returns None) beyond this many seeds.
MAX_SEEDS = 100_000
_ROUNDING = 1e-12

TOO_FEW_SEEDS = (
    "the verdict needs at least 2 confirmation seeds that both ERM and {chosen} finished; got {count} "
    "({seeds}); rerun the confirmation"
)
NO_HARD_SAMPLE = "no hard class ({classes}) has a test sample: the test hard tier cannot be scored"
NO_PER_CLASS = ("these test figures hold no per-class accuracies, so they cannot be scored on other hard "
                "classes: build them with seed_figures(y_true, y_pred, hard_classes, num_classes)")
_BAD_LEVEL = "alpha and power must lie strictly between 0 and 1; got alpha={alpha}, power={power}"


class VerdictError(MR2Error, ValueError):
    """The verdict cannot be given (too few paired seeds, inconsistent predictions); says why."""


@dataclass(frozen=True)
class SeedFigures:
    """One confirmation run's test figures (fractions in [0, 1]).

    Attributes:
        hard_tier: test hard-tier accuracy (mean of the hard classes' per-class accuracies).
        overall: test overall accuracy.
        rounding_sd: the SD of the hard-tier figure's rounding error on this test split: each hard
            class's accuracy moves in steps of ``1 / n_k``, a uniform rounding error of variance
            ``1 / (12 n_k**2)``, so ``sqrt(sum_k 1 / (12 n_k**2)) / H`` over the H hard classes with a
            test sample (0: unknown, e.g. figures given as numbers); :func:`judge_figures` floors the
            spread of the differences with it.
        collapsed: the run tripped the feature-collapse guard (:mod:`mr2.losses.collapse`).
        per_class: every class's test accuracy (NaN: no test sample); () when not known. Lets a
            design score the run on other hard classes (:func:`rescored`).
        class_counts: every class's number of test samples (with ``per_class``).
    """

    hard_tier: float
    overall: float
    rounding_sd: float = 0.0
    collapsed: bool = False
    per_class: tuple[float, ...] = ()
    class_counts: tuple[int, ...] = ()


def _hard_figures(per_class: NDArray[np.float64], count: NDArray[np.float64],
                  hard_classes: Sequence[int]) -> tuple[float, float]:
    """The hard tier (mean accuracy of the hard classes with a test sample) and its rounding SD."""
    hard = np.zeros(count.shape[0], dtype=bool)
    hard[np.asarray(hard_classes, dtype=np.int64)] = True
    present = hard & (count > 0)
    if not present.any():
        raise VerdictError(NO_HARD_SAMPLE.format(classes=sorted(int(k) for k in hard_classes)))
    rounding_sd = math.sqrt(float((1.0 / (12.0 * count[present] ** 2)).sum())) / int(present.sum())
    return float(per_class[present].mean()), rounding_sd


def rescored(figures: SeedFigures, hard_classes: Sequence[int]) -> SeedFigures:
    """The same run scored on other hard classes (needs :attr:`SeedFigures.per_class`).

    Raises:
        VerdictError: the figures hold no per-class accuracies, or no hard class has a test sample.

    Example:
        >>> f = seed_figures([0, 0, 1, 1, 2], [0, 1, 1, 1, 0], [0, 2], 3)
        >>> rescored(f, [1]).hard_tier, f.hard_tier
        (1.0, 0.25)
    """
    if not figures.per_class:
        raise VerdictError(NO_PER_CLASS)
    hard_tier, rounding_sd = _hard_figures(np.asarray(figures.per_class, dtype=np.float64),
                                           np.asarray(figures.class_counts, dtype=np.float64), hard_classes)
    return replace(figures, hard_tier=hard_tier, rounding_sd=rounding_sd)


def seed_figures(
    y_true: ArrayLike, y_pred: ArrayLike, hard_classes: Sequence[int], num_classes: int
) -> SeedFigures:
    """Test hard-tier and overall accuracy of one run's predictions.

    ``hard_tier = mean_{k in hard, n_k > 0} (#{i: y_i = k, yhat_i = k} / n_k)``; classes without a
    test sample are left out.

    Raises:
        VerdictError: no hard class has a test sample.

    Example:
        >>> figures = seed_figures([0, 0, 1, 1, 2], [0, 1, 1, 1, 0], [0, 2], 3)
        >>> figures.hard_tier, figures.overall, round(figures.rounding_sd, 4)
        (0.25, 0.6, 0.1614)
    """
    true = np.asarray(y_true, dtype=np.int64)
    pred = np.asarray(y_pred, dtype=np.int64)
    hit = (true == pred).astype(np.float64)
    count = np.bincount(true, minlength=num_classes).astype(np.float64)
    correct = np.bincount(true, weights=hit, minlength=num_classes)
    per_class = np.divide(correct, count, out=np.full(num_classes, np.nan), where=count > 0)
    hard_tier, rounding_sd = _hard_figures(per_class, count, hard_classes)
    return SeedFigures(hard_tier=hard_tier, overall=float(hit.mean()), rounding_sd=rounding_sd,
                       per_class=tuple(per_class.tolist()), class_counts=tuple(int(n) for n in count))


def one_sided_power(n: int, effect: float, alpha: float = ALPHA) -> float:
    """Power of a one-sided paired t-test at level ``alpha`` with ``n`` pairs at standardised effect
    ``effect = mean / sd`` of the differences: ``P(T'_{n-1, sqrt(n) effect} > t_{1-alpha, n-1})``.

    Example:
        >>> round(one_sided_power(10, 1.0), 4)
        0.8975
    """
    from scipy import stats

    critical = stats.t.ppf(1 - alpha, n - 1)
    return float(stats.nct.sf(critical, n - 1, math.sqrt(n) * effect))


def seeds_needed(mean: float, sd: float, *, alpha: float = ALPHA, power: float = POWER,
                 limit: int = MAX_SEEDS) -> int | None:
    """The smallest number of paired seeds ``n >= 2`` whose one-sided paired t-test at level
    ``alpha`` has at least ``power`` if the differences had this ``mean`` and ``sd``.

    None when ``mean <= 0`` (no positive effect to detect) or beyond ``limit`` seeds; 2 when
    ``sd == 0`` and ``mean > 0``. Power grows with ``n`` for a positive effect, so the search
    doubles ``n`` and then bisects.

    Example:
        >>> seeds_needed(0.01, 0.01), seeds_needed(0.005, 0.01), seeds_needed(-0.01, 0.01)
        (8, 27, None)
    """
    if not mean > 0:
        return None
    if sd <= _ROUNDING:
        return 2
    effect = mean / sd
    if one_sided_power(2, effect, alpha) >= power:
        return 2
    low, high = 2, 4  # power(low) < target
    while one_sided_power(high, effect, alpha) < power:
        if high > limit:
            return None
        low, high = high, 2 * high
    while high - low > 1:
        middle = (low + high) // 2
        if one_sided_power(middle, effect, alpha) >= power:
            high = middle
        else:
            low = middle
    return high if high <= limit else None


def _mean_sd(values: np.ndarray) -> tuple[float, float]:
    return float(values.mean()), float(values.std(ddof=1))


@dataclass
class Verdict:
    """The outcome of the confirmation (see the module docstring for the rule).

    Attributes:
        outcome: one of :data:`OUTCOMES`.
        reference: ERM's label.
        chosen: the chosen candidate's label (ERM's when ERM was chosen).
        seeds: the paired confirmation seeds (ERM's seeds when ERM was chosen).
        hard_classes: the test hard tier's classes (ranked on ERM's validation accuracies).
        reference_hard, chosen_hard: per-seed test hard-tier accuracies.
        reference_overall, chosen_overall: per-seed test overall accuracies.
        hard_differences: ``chosen - reference`` per seed (hard tier).
        overall_differences: ``chosen - reference`` per seed (overall).
        mean_difference, sd_difference: mean and SD (ddof 1) of ``hard_differences``.
        sd_floor: the least SD the test uses, ``sqrt(2) * rounding_sd`` (0: not known).
        pooled_sd, pooled_df: the spread shared with other contenders that was offered (NaN, 0: none).
        sd_used, df: the SD and the degrees of freedom of the t statistic.
        t_statistic, p_greater, p_less: the one-sided paired t-test (its SD: ``max(sd_difference,
            sd_floor, pooled_sd)``).
        reference_sd: ERM's seed SD of the test hard tier over the seeds.
        collapsed_seeds: seeds whose run (either) tripped the feature-collapse guard.
        lost_seeds: seeds on which the difference is below ``-loss_limit * reference_sd``.
        loss_limit: the limit applied (:data:`LOSS_LIMIT`).
        overall_change: mean of ``overall_differences``.
        reference_overall_se: ERM's seed standard error of test overall accuracy.
        overall_cost: the overall change is below ``-reference_overall_se``.
        power_now: the test's power at ``len(seeds)`` seeds at the observed effect (NaN if none).
        seeds_needed: :func:`seeds_needed` at the observed mean and SD (None: no positive effect or
            more than :data:`MAX_SEEDS`).
        alpha, power: the level and the target power.
    """

    outcome: str
    reference: str
    chosen: str
    seeds: list[int]
    hard_classes: list[int]
    reference_hard: list[float]
    reference_overall: list[float]
    chosen_hard: list[float] = field(default_factory=list)
    chosen_overall: list[float] = field(default_factory=list)
    hard_differences: list[float] = field(default_factory=list)
    overall_differences: list[float] = field(default_factory=list)
    mean_difference: float = math.nan
    sd_difference: float = math.nan
    sd_floor: float = 0.0
    pooled_sd: float = math.nan
    pooled_df: int = 0
    sd_used: float = math.nan
    df: int = 0
    t_statistic: float = math.nan
    p_greater: float = math.nan
    p_less: float = math.nan
    overall_change: float = math.nan
    reference_overall_se: float = math.nan
    overall_cost: bool = False
    power_now: float = math.nan
    seeds_needed: int | None = None
    alpha: float = ALPHA
    power: float = POWER
    reference_sd: float = math.nan
    collapsed_seeds: list[int] = field(default_factory=list)
    lost_seeds: list[int] = field(default_factory=list)
    loss_limit: float = LOSS_LIMIT

    def to_dict(self) -> dict[str, Any]:
        def clean(value: float) -> float | str | None:
            if math.isnan(value):
                return None
            return value if math.isfinite(value) else ("inf" if value > 0 else "-inf")

        return {
            "outcome": self.outcome,
            "reference": self.reference,
            "chosen": self.chosen,
            "seeds": self.seeds,
            "split": "test",
            "hard_classes": self.hard_classes,
            "hard_tier": {
                "reference": self.reference_hard,
                "chosen": self.chosen_hard,
                "differences": self.hard_differences,
                "mean_difference": clean(self.mean_difference),
                "sd_difference": clean(self.sd_difference),
                "sd_floor": self.sd_floor,
                "pooled_sd": clean(self.pooled_sd),
                "pooled_df": self.pooled_df,
                "sd_used": clean(self.sd_used),
                "df": self.df,
                "t_statistic": clean(self.t_statistic),
                "p_greater": clean(self.p_greater),
                "p_less": clean(self.p_less),
            },
            "overall": {
                "reference": self.reference_overall,
                "chosen": self.chosen_overall,
                "differences": self.overall_differences,
                "mean_change": clean(self.overall_change),
                "reference_seed_se": clean(self.reference_overall_se),
                "cost_beyond_se": self.overall_cost,
            },
            "alpha": self.alpha,
            "power": self.power,
            "power_now": clean(self.power_now),
            "seeds_needed": self.seeds_needed,
            "reference_sd": clean(self.reference_sd),
            "collapsed_seeds": self.collapsed_seeds,
            "lost_seeds": self.lost_seeds,
            "loss_limit": self.loss_limit,
            "test": "one-sided paired t-test over the confirmation seeds",
        }


def judge_figures(
    reference: Mapping[int, SeedFigures],
    chosen: Mapping[int, SeedFigures] | None,
    *,
    hard_classes: Sequence[int] = (),
    reference_label: str = "erm",
    chosen_label: str | None = None,
    alpha: float = ALPHA,
    power: float = POWER,
    spread: tuple[float, int] | None = None,
    loss_limit: float = LOSS_LIMIT,
) -> Verdict:
    """The verdict from per-seed test figures (seed -> :class:`SeedFigures`), paired by seed.

    Args:
        reference: ERM's figures per confirmation seed.
        chosen: the chosen candidate's, or None when ERM was chosen (``nothing to confirm``).
        hard_classes: recorded in the verdict (the figures already hold the hard-tier accuracy).
        reference_label, chosen_label: the labels to print.
        alpha: the one-sided test's level.
        power: the power the seeds-needed calculation aims at.
        spread: ``(sd, df)`` of the differences pooled with other contenders (module docstring), or
            None: the differences' own SD.
        loss_limit: a seed lost by more than this many ERM seed SDs makes a gain ``unstable``.

    Raises:
        VerdictError: fewer than 2 paired seeds (fewer than 2 ERM seeds when ERM was chosen).

    Example:
        >>> erm = {3: SeedFigures(0.70, 0.90), 4: SeedFigures(0.72, 0.91), 5: SeedFigures(0.71, 0.90)}
        >>> new = {3: SeedFigures(0.74, 0.90), 4: SeedFigures(0.75, 0.91), 5: SeedFigures(0.76, 0.90)}
        >>> verdict = judge_figures(erm, new, chosen_label="mr2-paper-c1")
        >>> verdict.outcome, round(verdict.mean_difference, 4), round(verdict.p_greater, 4)
        ('confirmed', 0.04, 0.0101)
    """
    from scipy import stats

    if not (0 < alpha < 1 and 0 < power < 1):
        raise VerdictError(_BAD_LEVEL.format(alpha=alpha, power=power))
    label = reference_label if chosen is None else (chosen_label or "the chosen candidate")
    seeds = sorted(reference) if chosen is None else sorted(set(reference) & set(chosen))
    if len(seeds) < 2:
        raise VerdictError(TOO_FEW_SEEDS.format(chosen=label, count=len(seeds), seeds=seeds))
    ref_hard = np.array([reference[s].hard_tier for s in seeds], dtype=np.float64)
    ref_overall = np.array([reference[s].overall for s in seeds], dtype=np.float64)
    verdict = Verdict(NOTHING_TO_CONFIRM, reference_label, label, [int(s) for s in seeds],
                      sorted(int(k) for k in hard_classes), ref_hard.tolist(), ref_overall.tolist(),
                      alpha=alpha, power=power)
    verdict.reference_overall_se = float(ref_overall.std(ddof=1) / math.sqrt(len(seeds)))
    if chosen is None:
        return verdict
    new_hard = np.array([chosen[s].hard_tier for s in seeds], dtype=np.float64)
    new_overall = np.array([chosen[s].overall for s in seeds], dtype=np.float64)
    hard = new_hard - ref_hard
    overall = new_overall - ref_overall
    n = len(seeds)
    mean, sd = _mean_sd(hard)
    rounding = max(f.rounding_sd for figures in (reference, chosen) for f in (figures[s] for s in seeds))
    floor = math.sqrt(2.0) * rounding
    # The SD of the test: the measured one, floored by what rounding alone gives (accuracies move in
    # steps of 1 / n_k, so a few seeds can differ by the same step by chance: a zero spread is not
    # certainty), or the spread pooled with other contenders when that is larger (module docstring).
    own = max(sd, floor)
    used, df = own, n - 1
    if spread is not None and spread[1] > 0 and spread[0] > own:
        used, df = float(spread[0]), int(spread[1])
        verdict.pooled_sd, verdict.pooled_df = float(spread[0]), int(spread[1])
    elif spread is not None:
        verdict.pooled_sd, verdict.pooled_df = float(spread[0]), int(spread[1])
    if used == sd and df == n - 1 and not (floor > 0 and sd < floor):
        t = paired_t_test(new_hard, ref_hard).statistic  # the report's paired test: one t for both
    elif used > _ROUNDING:
        t = mean / (used / math.sqrt(n))
    else:
        t = math.copysign(math.inf, mean) if abs(mean) > _ROUNDING else 0.0
    if used <= _ROUNDING and abs(mean) <= _ROUNDING:
        p_greater, p_less = 1.0, 1.0
    else:
        p_greater, p_less = float(stats.t.sf(t, df)), float(stats.t.cdf(t, df))
    verdict.sd_floor, verdict.sd_used, verdict.df = floor, used, df
    verdict.chosen_hard, verdict.chosen_overall = new_hard.tolist(), new_overall.tolist()
    verdict.hard_differences, verdict.overall_differences = hard.tolist(), overall.tolist()
    verdict.mean_difference, verdict.sd_difference, verdict.t_statistic = mean, sd, t
    verdict.p_greater, verdict.p_less = p_greater, p_less
    verdict.overall_change = float(overall.mean())
    verdict.overall_cost = verdict.overall_change < -verdict.reference_overall_se
    verdict.reference_sd = max(float(ref_hard.std(ddof=1)), floor / math.sqrt(2.0))
    verdict.loss_limit = loss_limit
    verdict.collapsed_seeds = [int(s) for s in seeds if reference[s].collapsed or chosen[s].collapsed]
    verdict.lost_seeds = [int(s) for s, h in zip(seeds, hard, strict=True)
                          if h < -loss_limit * verdict.reference_sd]
    if mean > 0:
        spread_now = used
        verdict.power_now = 1.0 if spread_now <= _ROUNDING else one_sided_power(n, mean / spread_now, alpha)
        verdict.seeds_needed = seeds_needed(mean, spread_now, alpha=alpha, power=power)
    if p_less < alpha:
        verdict.outcome = CONTRADICTED
    elif p_greater < alpha:
        if verdict.collapsed_seeds or verdict.lost_seeds:
            verdict.outcome = UNSTABLE
        else:
            verdict.outcome = GAIN_WITH_COST if verdict.overall_cost else CONFIRMED
    else:
        verdict.outcome = INCONCLUSIVE
    return verdict

