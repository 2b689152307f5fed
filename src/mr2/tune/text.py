"""What ``mr2 tune`` prints: the rule, the validation table, its warnings, the verdict.

Written to be read without the paper: ERM is explained where it first appears in each block, every
``±`` says what it is (``seed SE``: the standard error of a mean over seeds, ``std(ddof=1) / sqrt(n)``;
``SD``: a standard deviation) and over how many seeds, the criterion's column is marked, and the
validation size per class is named, with a warning below :data:`MIN_SAMPLES_PER_CLASS`.
Accuracies are percentages; differences are percentage points.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from mr2.tune.selection import MIN_SAMPLES_PER_CLASS, Choice
from mr2.tune.verdict import (
    CONFIRMED,
    CONTRADICTED,
    MAX_SEEDS,
    NOT_CONFIRMED,
    NOTHING_TO_CONFIRM,
    SUPPORTED,
    Verdict,
)

if TYPE_CHECKING:
    from mr2.report.tiers import TierSplit

__all__ = [
    "ERM_AT_FIRST_USE",
    "choice_table",
    "choice_text",
    "hard_tier_note",
    "size_warning",
    "verdict_text",
]

#: How ERM is introduced at its first use in a block.
ERM_AT_FIRST_USE = "ERM (plain cross-entropy training, the reference)"
SMALL_VALIDATION_WARNING = (
    "WARNING: only {median:g} validation samples per class (median; min {min}) score each candidate, "
    "below {limit}: scores this noisy choose ERM most of the time, even when a candidate is better, and "
    "a candidate chosen on them may owe it to noise. A larger validation split makes the choice "
    "informative."
)
_COLUMN = {
    "hard_tier": "validation hard-tier accuracy",
    "worst_class": "validation worst-class accuracy",
    "overall": "validation overall accuracy",
}


def _percent(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{100 * value:.2f}"


def _points(value: float) -> str:
    if math.isnan(value):
        return "n/a"
    if math.isinf(value):
        return "+inf" if value > 0 else "-inf"
    return f"{100 * value:+.2f}"


def _p(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.3g}"


def size_warning(choice: Choice) -> str | None:
    """The small-validation warning (None when the median class has at least
    :data:`MIN_SAMPLES_PER_CLASS` scored samples, or the size is unknown)."""
    if not choice.noisy or choice.samples_per_class is None:
        return None
    low, median = choice.samples_per_class
    return SMALL_VALIDATION_WARNING.format(median=median, min=low, limit=MIN_SAMPLES_PER_CLASS)


def choice_table(choice: Choice) -> str:
    """Markdown table of every candidate's validation figures, with what ± means and which column is
    the criterion above it.

    Example:
        >>> from mr2.tune.selection import ValidationFigures, choose
        >>> runs = {label: [ValidationFigures(f"{label}@{s}", s, 0.8, (0.9, 0.8, 0.7)) for s in (0, 1)]
        ...         for label in ("erm", "m")}
        >>> print(choice_table(choose(runs, "overall")).splitlines()[-2])
        | erm = ERM (recommended) | 2 | 80.00 ± 0.00 | 80.00 ± 0.00 | reference |
    """
    criterion = _COLUMN[choice.criterion]
    lines = [
        f"Validation figures of each candidate over its selection seeds (column 'seeds'), in %; "
        f"± is the seed SE (standard error of the mean over those seeds). The criterion is "
        f"'{criterion}'. {choice.reference} = {ERM_AT_FIRST_USE}.",
        "",
        f"| candidate | seeds | {criterion} (criterion), mean ± seed SE | validation overall accuracy, "
        "mean ± seed SE | eligible |",
        "|---|---|---|---|---|",
    ]
    for score in choice.scores:
        name = f"{score.label} = ERM" if score.label == choice.reference else score.label
        mark = " (recommended)" if score.label == choice.recommended else ""
        eligible = "reference" if score.label == choice.reference else (
            "yes" if score.eligible else f"no: {score.reason}")
        lines.append(
            f"| {name}{mark} | {len(score.runs)} | {_percent(score.mean)} ± {_percent(score.se)} | "
            f"{_percent(score.overall_mean)} ± {_percent(score.overall_se)} | {eligible} |"
        )
    return "\n".join(lines)


def _size_line(choice: Choice) -> str:
    if choice.samples_per_class is None:
        return "Validation size per class: unknown (per-class figures only)."
    low, median = choice.samples_per_class
    where = "in each scoring half" if choice.tier_rule == "split_half" else "scored"
    return f"Validation samples per class {where}: min {low}, median {median:g}."


def choice_text(choice: Choice) -> str:
    """The table, the tier rule applied, the validation size (and its warning) and the outcome.

    Example:
        >>> from mr2.tune.selection import ValidationFigures, choose
        >>> import numpy as np
        >>> y = np.repeat(np.arange(3), 20)
        >>> runs = {label: [ValidationFigures.from_predictions(f"{label}@{s}", s, y, y, 3) for s in (0, 1)]
        ...         for label in ("erm", "m")}
        >>> text = choice_text(choose(runs))
        >>> "min 10, median 10." in text, "WARNING: only 10 validation samples per class" in text
        (True, True)
    """
    parts = [choice_table(choice), ""]
    if choice.criterion == "hard_tier":
        parts.append(
            "Hard tier: ranked on one half of each class's validation samples, scored on the other, "
            "both ways averaged (split-half rule)." if choice.tier_rule == "split_half" else
            "Hard tier: ranked and scored on the same validation samples (per-sample predictions "
            "unavailable), which flatters the candidates against ERM."
        )
    parts.append("Hard classes of the confirmation's test hard tier (ranked on all of ERM's validation "
                 f"samples): {', '.join(str(k) for k in choice.hard_classes)}.")
    parts.append(_size_line(choice))
    warning = size_warning(choice)
    if warning:
        parts.append(warning)
    parts += ["", choice.explanation]
    return "\n".join(parts)


def _figures_lines(verdict: Verdict) -> list[str]:
    n = len(verdict.seeds)
    classes = ", ".join(str(k) for k in verdict.hard_classes) or "see the choice"
    ref_hard = sum(verdict.reference_hard) / n
    ref_sd = math.sqrt(sum((v - ref_hard) ** 2 for v in verdict.reference_hard) / (n - 1))
    lines = [
        f"  ERM's test hard tier (classes {classes}, ranked on ERM's validation accuracies): "
        f"{_percent(ref_hard)}% ± {_percent(ref_sd / math.sqrt(n))} (seed SE over {n} seeds)",
    ]
    if verdict.outcome == NOTHING_TO_CONFIRM:
        return lines
    lines += [
        f"  {verdict.chosen} minus ERM, test hard tier: {_points(verdict.mean_difference)} "
        f"points (mean of the per-seed differences ± SD {_percent(verdict.sd_difference)} over {n} "
        f"seeds); one-sided paired t-test: p = {_p(verdict.p_greater)} for a gain, "
        f"p = {_p(verdict.p_less)} for a loss",
        f"  {verdict.chosen} minus ERM, test overall accuracy: {_points(verdict.overall_change)} points "
        f"(mean over {n} seeds); the cost allowed is ERM's seed SE of overall accuracy over {n} seeds, "
        f"{_percent(verdict.reference_overall_se)} points",
    ]
    return lines


def _seeds_sentence(verdict: Verdict) -> str:
    now = f"{100 * verdict.power_now:.0f}%" if not math.isnan(verdict.power_now) else "n/a"
    if verdict.seeds_needed is None:
        needed = f"more than {MAX_SEEDS:,} confirmation seeds"
    else:
        needed = f"{verdict.seeds_needed} confirmation seeds"
    return (
        f"If the true effect and spread were the observed ones, {needed} would give a one-sided paired "
        f"t-test at level {verdict.alpha:g} a power of {100 * verdict.power:.0f}% to show it (its power "
        f"with the {len(verdict.seeds)} seeds run: {now})."
    )


def _classes(classes: list[int]) -> str:
    if len(classes) > 10:
        return f"{len(classes)} classes"
    return f"classes {', '.join(str(k) for k in classes)}"


def hard_tier_note(verdict: Verdict | None, tiers: TierSplit) -> str:
    """A line for below the confirmation table when its hard tier (the last of ``tiers``, the
    confirmation report's) is not the verdict's, else ``""``.

    The verdict's hard classes were ranked on ERM's selection runs, before the confirmation; the
    table's tiers are ranked on the confirmation's own ERM runs (validation split), so with a noisy
    ranking the two hard columns cover different classes.

    Example:
        >>> from mr2.report.tiers import TierSplit
        >>> from mr2.tune.verdict import SeedFigures, judge_figures
        >>> erm = {3: SeedFigures(0.70, 0.9), 4: SeedFigures(0.72, 0.9)}
        >>> verdict = judge_figures(erm, erm, chosen_label="m", hard_classes=[4, 5])
        >>> hard_tier_note(verdict, TierSplit.from_accuracy([0.9, 0.8, 0.7, 0.6, 0.2, 0.1], 3))
        ''
        >>> hard_tier_note(verdict, TierSplit.from_accuracy([0.9, 0.1, 0.7, 0.6, 0.8, 0.2], 3)).split(";")[1]
        " they share 1 of 2 classes, so the table's hard column is not the verdict's figure."
    """
    if verdict is None or not verdict.hard_classes:
        return ""
    ours = sorted(int(k) for k in tiers.members(len(tiers.names) - 1))
    theirs = sorted(int(k) for k in verdict.hard_classes)
    if ours == theirs:
        return ""
    shared = len(set(ours) & set(theirs))
    return (
        f"Note: the table's hard tier ({_classes(ours)}: ranked on the confirmation's own ERM runs) is "
        f"not the verdict's ({_classes(theirs)}: ranked on ERM's selection runs, fixed before the "
        f"confirmation); they share {shared} of {len(theirs)} classes, so the table's hard column is not "
        "the verdict's figure."
    )


def verdict_text(verdict: Verdict, paste: str | None = None) -> str:
    """The verdict in words, its figures, and the pasteable block where the outcome allows it.

    Args:
        verdict: the confirmation's verdict.
        paste: the chosen configuration, ready to paste (printed, indented, with ``confirmed`` and,
            with its caveat, ``supported``; the other outcomes print what to do instead).

    Example:
        >>> from mr2.tune.verdict import SeedFigures, judge_figures
        >>> erm = {3: SeedFigures(0.70, 0.9), 4: SeedFigures(0.72, 0.9)}
        >>> worse = {3: SeedFigures(0.69, 0.9), 4: SeedFigures(0.70, 0.9)}
        >>> print(verdict_text(judge_figures(erm, worse, chosen_label="m"), "method: m").splitlines()[0])
        Verdict on the confirmation (test split, fresh seeds 3, 4): NOT CONFIRMED
    """
    seeds = ", ".join(str(s) for s in verdict.seeds)
    lines = [
        f"Verdict on the confirmation (test split, fresh seeds {seeds}): {verdict.outcome.upper()}",
        f"  {ERM_AT_FIRST_USE}" + (
            f", label {verdict.reference}." if verdict.outcome == NOTHING_TO_CONFIRM else
            f", against {verdict.chosen}, the configuration chosen on validation; paired by seed."),
        *_figures_lines(verdict),
        "",
    ]
    ref = "ERM"
    significant = f"p = {_p(verdict.p_greater)} < {verdict.alpha:g}"
    keep_erm = (f"{ref} is the safe default: keep plain cross-entropy training (in an mr2 configuration "
                "`method: {name: erm}`).")
    if verdict.outcome == NOTHING_TO_CONFIRM:
        lines.append(f"{ref} was chosen on validation: there is nothing to confirm. Keep plain "
                     "cross-entropy training (in an mr2 configuration `method: {name: erm}`).")
        return "\n".join(lines)
    if verdict.outcome == CONFIRMED:
        lines.append(f"Confirmed: {verdict.chosen} beats {ref} on the test hard tier ({significant}) and "
                     f"costs no more than {ref}'s seed SE overall.")
    elif verdict.outcome == SUPPORTED and verdict.overall_cost:
        lines.append(
            f"Supported, with a cost: the test hard-tier gain is significant ({significant}) but overall "
            f"accuracy changes by {_points(verdict.overall_change)} points, more than {ref}'s seed SE "
            f"({_percent(verdict.reference_overall_se)}). A trade-off to judge: use it only if the hard "
            "classes matter more to you than that overall cost."
        )
    elif verdict.outcome == SUPPORTED:
        lines.append(
            f"Supported, not settled: the direction held ({_points(verdict.mean_difference)} points on the "
            f"test hard tier) but not beyond noise (p = {_p(verdict.p_greater)}). {_seeds_sentence(verdict)} "
            "Use it with this caveat, or confirm on that many fresh seeds first."
        )
    elif verdict.outcome == NOT_CONFIRMED:
        lines.append(
            f"Not confirmed: on fresh seeds the test hard tier changed by {_points(verdict.mean_difference)} "
            f"points (zero or negative): the gain seen on validation did not hold. {keep_erm}"
        )
    elif verdict.outcome == CONTRADICTED:
        lines.append(
            f"Contradicted: {verdict.chosen} is significantly worse than {ref} on the test hard tier "
            f"(p = {_p(verdict.p_less)} < {verdict.alpha:g} for a loss). Do not use it; recommend {ref}. "
            f"{keep_erm}"
        )
    if verdict.pasteable and paste:
        caveat = "" if verdict.outcome == CONFIRMED else " (with the caveat above)"
        lines += ["", f"Paste into your run configuration{caveat}:", "",
                  "\n".join("    " + line for line in paste.rstrip("\n").splitlines())]
    return "\n".join(lines)
