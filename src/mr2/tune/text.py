"""What ``mr2 tune`` prints: the rule (:func:`rule_text`), the validation table, its warnings, the verdict.

Written to be read without the paper: ERM is explained where it first appears in each block, every
``±`` says what it is (``seed SE``: the standard error of a mean over seeds, ``std(ddof=1) / sqrt(n)``;
``SD``: a standard deviation) and over how many seeds, the criterion's column is marked, and the
validation size per class is named, with a warning below :data:`MIN_SAMPLES_PER_CLASS`.
Accuracies are percentages; differences are percentage points.
"""

from __future__ import annotations

import json
import math
import textwrap
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal

import yaml

from mr2.report.tables import format_percent
from mr2.tune.selection import MIN_SAMPLES_PER_CLASS, Choice
from mr2.tune.verdict import NOTHING_TO_CONFIRM, Verdict

if TYPE_CHECKING:
    from mr2.tune.candidates import Candidate
    from mr2.tune.design import Advice, Design, Look

__all__ = [
    "ERM_AT_FIRST_USE",
    "HAPPENED",
    "PASTES",
    "advice_text",
    "choice_explanation",
    "choice_table",
    "choice_text",
    "class_list",
    "config_paste",
    "design_text",
    "early_size_warning",
    "look_lines",
    "rule_text",
    "script_paste",
    "seeds_needed",
    "size_warning",
    "train_fn_paste",
    "verdict_lines",
    "what_happened",
]

#: How ERM is introduced at its first use in a block.
ERM_AT_FIRST_USE = "ERM (plain cross-entropy training, the reference)"
SMALL_VALIDATION_WARNING = (
    "WARNING: only {median:g} validation samples per class (median; min {min}) score each candidate, "
    "below {limit}: the validation ranking is noisy, so the screen on fresh test seeds does most of the "
    "finding. Measured by simulation with 10 per class: a +1.0-point gain is adopted in 68-84% of tunes "
    "where the test split is clean and 21-44% where it is noisy (docs/tune.md, 'Operating "
    "characteristics'). The advice stays safe (the finalist's test on fresh seeds keeps adopting a "
    "useless configuration at or below its stated rate); a larger validation split makes the ranking "
    "informative."
)
#: Each criterion's name: the rule's score and the table's column.
_COLUMN = {
    "hard_tier": "validation hard-tier accuracy",
    "worst_class": "validation worst-class accuracy",
    "overall": "validation overall accuracy",
}


def rule_text(criterion: str, reference: str = "erm", gate: str = "margin", min_runs: int = 2,
              guard: bool = True, reuse: bool = False) -> str:
    """The selection's rule (:mod:`mr2.tune.selection`) in words, printed before anything runs and
    with the result. ``gate`` is the design's (:class:`mr2.tune.design.Design`): ``margin``, the best
    eligible candidate goes on only if it beats the reference by a seed standard error; ``best``, the
    best eligible candidates go on whatever their margin (how many: the design). ``min_runs``: the
    runs a candidate needs (1: a design that ranks on one seed per candidate, ``Design.min_runs``).
    ``guard``: the overall-accuracy guard applies (``Design.selection_guard == "overall"``);
    ``reuse``: the screen reads the first selection seed's test predictions (``Design.screen_reuse``).

    Example:
        >>> print(rule_text("overall").split(". ")[0])
        ERM (plain cross-entropy training, the reference) is what every candidate must beat
    """
    ref = reference.upper()
    name = _COLUMN[criterion]
    intro = f"{ref} (plain cross-entropy training, the reference) is what every candidate must beat. "
    if criterion == "hard_tier":
        tiers = (
            "Each class's validation samples are split into two fixed halves (the same for every run). "
            f"The classes are ranked into tiers (easy/medium/hard) by {ref}'s mean per-class accuracy on "
            "one half, and every run, ERM's included, is scored by its hard-tier accuracy on the other "
            "half; the same with the halves swapped, and the two scores are averaged, so no sample both "
            "makes a class hard and scores it. "
        )
    else:
        tiers = ""
    runs = "has fewer than 2 runs, " if min_runs >= 2 else ""
    eligible = (f"{runs}or its mean validation overall accuracy is below {ref}'s by more than {ref}'s seed "
                "standard error" if guard else
                f"{runs}or has no score (no overall-accuracy guard here: the test split judges it)")
    split = ("Only the validation split ranks; the screen (the design) also reads the test predictions "
             "of the first selection seed's runs, and the advice comes from fresh seeds alone." if reuse else
             "Only the validation split is read here; test results come from fresh seeds (the design says "
             "how they are used).")
    return (
        f"{intro}{tiers}Each candidate is scored by its mean {name} over the selection seeds (± is the "
        f"standard error of that mean over the seeds). A candidate is not eligible if it misses a "
        f"selection seed, {eligible}. {_gate_text(gate, ref)} {split}"
    )


def _gate_text(gate: str, ref: str) -> str:
    if gate == "best":
        return ("The best eligible candidates go to the confirmation on fresh seeds, whatever their margin "
                f"over {ref} (how many: the design); the advice comes from the fresh seeds alone.")
    return (f"The best eligible candidate is recommended if its score beats {ref}'s by more than {ref}'s "
            f"seed standard error of that score; otherwise the recommendation is {ref}.")


def _screen_seeds(advice: Advice) -> str:
    """The screen's seeds in words: "2 fresh seeds", or with the selection seed's runs reused
    "2 seeds: the selection seed 0's runs and 1 fresh"."""
    fresh = len(advice.screen_seeds)
    if not advice.reused_seeds:
        return f"{fresh} fresh seeds"
    reused = ", ".join(str(s) for s in advice.reused_seeds)
    return f"{fresh + len(advice.reused_seeds)} seeds: the selection seed {reused}'s runs and {fresh} fresh"


def _points(value: float) -> str:
    if math.isnan(value):
        return "n/a"
    if math.isinf(value):
        return "+inf" if value > 0 else "-inf"
    return f"{100 * value:+.2f}"


def _p(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.3g}"


def class_list(classes: Sequence[int], class_names: Sequence[str] | None = None) -> str:
    """Classes as printed: by name with the id when the names are known, else by id.

    Example:
        >>> names = ["top", "trouser", "pullover", "dress", "coat", "sandal", "shirt"]
        >>> class_list([6, 4], names), class_list([6, 4])
        ('shirt (6), coat (4)', '6, 4')
    """
    if class_names is None:
        return ", ".join(str(k) for k in classes)
    return ", ".join(f"{class_names[k]} ({k})" for k in classes)


def size_warning(choice: Choice) -> str | None:
    """The small-validation warning (None when the median class has at least
    :data:`MIN_SAMPLES_PER_CLASS` scored samples, or the size is unknown)."""
    if not choice.noisy or choice.samples_per_class is None:
        return None
    low, median = choice.samples_per_class
    return SMALL_VALIDATION_WARNING.format(median=median, min=low, limit=MIN_SAMPLES_PER_CLASS)


def choice_table(choice: Choice, contenders: Sequence[str] | None = None) -> str:
    """Markdown table of every candidate's validation figures, with what ± means and which column is
    the criterion above it. ``contenders``: those sent to the confirmation (the design's ``best`` gate;
    None: the ``margin`` gate, whose choice is marked recommended).

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
        if contenders is None:
            mark = " (recommended)" if score.label == choice.recommended else ""
        else:
            mark = " (to the confirmation)" if score.label in contenders else ""
        eligible = "reference" if score.label == choice.reference else (
            "yes" if score.eligible else f"no: {score.reason}")
        lines.append(
            f"| {name}{mark} | {len(score.runs)} | {format_percent(score.mean)} ± "
            f"{format_percent(score.se)} | {format_percent(score.overall_mean)} ± "
            f"{format_percent(score.overall_se)} | {eligible} |"
        )
    return "\n".join(lines)


def _size_line(choice: Choice) -> str:
    if choice.samples_per_class is None:
        return "Validation size per class: unknown (per-class figures only)."
    low, median = choice.samples_per_class
    where = " in each scoring half" if choice.criterion == "hard_tier" else ""
    return f"Validation samples per class{where}: min {low}, median {median:g}."


def choice_explanation(choice: Choice, contenders: Sequence[str] | None = None) -> str:
    """The selection's outcome in plain sentences (recorded as ``selection.explanation``).
    ``contenders``: those sent to the confirmation (the design's ``best`` gate); None: the ``margin``
    gate, whose outcome is ``choice.recommended``."""
    ref = choice.reference.upper()
    name = _COLUMN[choice.criterion]
    erm_score = choice.score(choice.reference)
    excluded = [s for s in choice.scores if s.label != choice.reference and s.missing_seeds]
    missing = "".join(
        f" {s.label} is not eligible: it misses selection seed(s) {s.missing_seeds}." for s in excluded
    )
    if erm_score.missing_seeds:
        missing += (f" {ref} misses selection seed(s) {erm_score.missing_seeds}: its figures are over "
                    f"{len(erm_score.runs)} seeds.")
    if choice.best is None or (contenders is not None and not contenders):
        outcome = (f"the recommendation is {ref}" if contenders is None else
                   f"nothing goes to the confirmation and the advice is {ref}")
        return (
            f"No candidate is eligible (each misses a selection seed, has fewer than 2 runs, or loses "
            f"more than one standard error of {ref}'s validation overall accuracy): {outcome}.{missing}"
        )
    best = choice.score(choice.best)
    points = f"{100 * choice.margin:+.2f} points vs a seed standard error of {100 * choice.threshold:.2f}"
    if contenders is not None:
        return (
            f"{best.label} has the best {name} ({100 * best.mean:.2f}% vs {ref}'s "
            f"{100 * erm_score.mean:.2f}%, {points}). To the confirmation on fresh seeds (the "
            f"{len(contenders)} best eligible, whatever their margin over {ref}; the advice comes from the "
            f"fresh seeds alone): {', '.join(contenders)}.{missing}"
        )
    if choice.recommended == choice.best:
        return (
            f"{best.label} has the best {name} ({100 * best.mean:.2f}% vs {ref}'s "
            f"{100 * erm_score.mean:.2f}%, {points}): it is recommended.{missing}"
        )
    return (
        f"No candidate beats {ref}'s {name} by more than its seed standard error "
        f"(best: {best.label}, {points}): the recommendation is {ref}, plain "
        f"cross-entropy.{missing}"
    )


def choice_text(choice: Choice, contenders: Sequence[str] | None = None,
                class_names: Sequence[str] | None = None) -> str:
    """The table, the tier rule applied, the validation size (and its warning) and the outcome; the
    hard classes by name when ``class_names`` are given.

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
    parts = [choice_table(choice, contenders), ""]
    if choice.criterion == "hard_tier":
        parts.append("Hard tier: ranked on one half of each class's validation samples, scored on the "
                     "other, both ways averaged (split-half rule).")
    parts.append("Hard classes of the confirmation's test hard tier (ranked on all of ERM's validation "
                 f"samples): {class_list(choice.hard_classes, class_names)}.")
    parts.append(_size_line(choice))
    warning = size_warning(choice)
    if warning:
        parts.append(warning)
    parts += ["", choice_explanation(choice, contenders)]
    return "\n".join(parts)


def verdict_lines(verdict: Verdict, class_names: Sequence[str] | None = None,
                  ranked_on: str = "ERM's validation accuracies", *, screen: bool = False) -> list[str]:
    """The figures of a verdict, one line each (ERM's test hard tier; the change and its test); the
    hard classes by name when ``class_names`` are given; ``ranked_on``: what ranked them; ``screen``:
    the verdict is a screen's, which has no level (it adopts nothing)."""
    n = len(verdict.seeds)
    classes = class_list(verdict.hard_classes, class_names) or "see the choice"
    ref_hard = sum(verdict.reference_hard) / n
    ref_sd = math.sqrt(sum((v - ref_hard) ** 2 for v in verdict.reference_hard) / (n - 1))
    lines = [
        f"  ERM's test hard tier (classes {classes}, ranked on {ranked_on}): "
        f"{format_percent(ref_hard)}% ± {format_percent(ref_sd / math.sqrt(n))} (seed SE over {n} seeds)",
    ]
    if verdict.outcome == NOTHING_TO_CONFIRM:
        return lines
    lines += [
        f"  {verdict.chosen} minus ERM, test hard tier: {_points(verdict.mean_difference)} "
        f"points (mean of the per-seed differences ± SD {format_percent(verdict.sd_difference)} over {n} "
        f"seeds){_floor_note(verdict)}; one-sided paired t-test: p = {_p(verdict.p_greater)} for a gain"
        f"{'' if screen else f' (level {_level(verdict.alpha)})'}, p = {_p(verdict.p_less)} for a loss",
        f"  {verdict.chosen} minus ERM, test overall accuracy: {_points(verdict.overall_change)} points "
        f"(mean over {n} seeds); the cost allowed is ERM's seed SE of overall accuracy over {n} seeds, "
        f"{format_percent(verdict.reference_overall_se)} points",
    ]
    return lines


def _floor_note(verdict: Verdict) -> str:
    """Said when the test used the spread's floor instead of the measured SD (mr2.tune.verdict)."""
    if not verdict.sd_floor or not verdict.sd_difference < verdict.sd_floor:
        return ""
    return (f"; the test uses SD {format_percent(verdict.sd_floor)}, the spread the rounding of the test "
            "split's accuracies alone gives")


def early_size_warning(samples: tuple[int, float]) -> str | None:
    """The small-validation warning from ``(min, median)`` scored samples per class, printed right
    after ERM's first trial (None at :data:`MIN_SAMPLES_PER_CLASS` or more)."""
    low, median = samples
    if median >= MIN_SAMPLES_PER_CLASS:
        return None
    return SMALL_VALIDATION_WARNING.format(median=median, min=low, limit=MIN_SAMPLES_PER_CLASS)


def design_text(design: Design) -> str:
    """The design in one paragraph: how seeds are spent and what decides the advice.

    Example:
        >>> from mr2.tune.design import Design
        >>> design_text(Design(gate="margin")).split(";")[0]
        'Selection: every candidate on every selection seed'
    """
    if design.selection_looks is None:
        selection = "Selection: every candidate on every selection seed"
    elif design.selection_looks == (1,):
        selection = "Selection: every candidate on 1 validation seed (ERM on 2)"
    else:
        stages = ", then ".join(
            f"{n} seed{'s' if n != 1 else ''}"
            + (f" (the {design.keep[i]} best eligible stay)" if i < len(design.keep) else "")
            for i, n in enumerate(design.selection_looks))
        selection = f"Selection, racing over seeds: every candidate on {stages}"
    if design.gate == "margin":
        gate = ("the best eligible candidate goes to the confirmation if it beats ERM by more than ERM's "
                "seed standard error")
    else:
        eligible = ("" if design.selection_guard == "none" else " eligible")
        gate = (f"the {design.contenders} best{eligible} candidates go to the confirmation"
                if design.contenders > 1 else f"the best{eligible} candidate goes to the confirmation")
        if design.selection_guard == "none":
            gate += " (no overall-accuracy guard here: the screen and the finalist's test judge it)"
    looks = ("every confirmation seed at once" if design.confirmation_looks is None else
             "looks at " + ", ".join(str(n) for n in design.confirmation_looks) + " fresh seeds")
    split = f" (alpha / {design.contenders} each)" if design.contenders > 1 else ""
    if design.screen and design.contenders > 1:
        bound = 0 if design.futility is None else design.futility
        tiers = (" The hard classes are then ranked again on ERM's test runs of the screen."
                 if design.screen_tiers else "")
        screen = (f"A screen of {design.screen + 1} seeds (the test figures of the first selection seed's "
                  f"runs and {design.screen} fresh seed{'s' if design.screen > 1 else ''} on which ERM and "
                  "every contender are trained) adopts nothing" if design.screen_reuse else
                  f"A screen of {design.screen} seeds trains ERM and every contender and adopts nothing")
        return (
            f"{selection}; {gate}. Confirmation on the test split with fresh seeds. {screen}: the "
            f"contender with the largest test hard-tier gain (t above {bound:g}, overall accuracy not "
            f"worse beyond noise) is the FINALIST.{tiers} The finalist alone goes on, against ERM on the "
            f"seeds after the screen, {looks}: it is ADOPTED only if a one-sided paired t-test of its test "
            f"hard-tier gain over ERM on those seeds rejects 'no better than ERM' at level {design.alpha:g} "
            f"over its looks, spent by the {design.spending.replace('_', '-')} rule, "
            "and its test overall accuracy is not below ERM's by more than ERM's seed standard error. "
            "Otherwise the advice is ERM."
        )
    return (
        f"{selection}; {gate}. Confirmation on the test split with fresh seeds, {looks}: a contender is "
        f"ADOPTED only if a one-sided paired t-test of its test hard-tier gain over ERM rejects 'no better "
        f"than ERM' at level {design.alpha:g} over all contenders and looks{split}, spent by the "
        f"{design.spending.replace('_', '-')} rule, and its test overall accuracy "
        "is not below ERM's by more than ERM's seed standard error. Otherwise the advice is ERM."
    )


_REASONS = {
    "confirmed": "",
    "contradicted": ("Contradicted: on fresh seeds the best contender is significantly worse than ERM on the "
                     "hard tier."),
    "erm_chosen": "No candidate was sent to the confirmation: none beat ERM on validation.",
    "no_eligible": "No candidate was eligible (see the table above).",
    "failed": "Every candidate failed (see the failures above).",
    "no_confirmation": "No confirmation could be run.",
}

#: The kinds of :func:`what_happened` (``confirmation.what_happened`` in ``recommendation.json``):
#: ``adopted``; a confirmation that kept ERM because its contenders showed ``no_gain``, a ``gain_below_level``
#: (positive, not significant at the look's level), were stopped for ``futility`` at an interim look,
#: were significant at a ``overall_cost`` or ``unstable`` (a collapsed run, a seed lost badly), or
#: ``contradicted`` (significantly worse); or the plan's
#: reason when nothing was confirmed (``erm_chosen``, ``no_eligible``, ``failed``, ``no_confirmation``).
HAPPENED = ("adopted", "no_gain", "gain_below_level", "futility", "overall_cost", "unstable", "contradicted",
            "erm_chosen", "no_eligible", "failed", "no_confirmation")
Happened = Literal["adopted", "no_gain", "gain_below_level", "futility", "overall_cost", "unstable",
                   "contradicted", "erm_chosen", "no_eligible", "failed", "no_confirmation"]
_DECISION = {
    "adopt": "ADOPTED",
    "continue": "goes on to the next look",
    "futility": "stopped for futility",
    "overall_cost": "significant, but a cost in overall accuracy: ruled out",
    "unstable": "significant, but unstable: ruled out",
    "finalist": "the FINALIST: goes on alone, on fresh seeds",
    "screened_out": "screened out (the finalist gained more)",
}


def _level(value: float) -> str:
    return f"{100 * value:.3g}%"


def _join(labels: Sequence[str]) -> str:
    return labels[0] if len(labels) == 1 else f"{', '.join(labels[:-1])} and {labels[-1]}"


def _looks_text(looks: Sequence[int]) -> str:
    numbers = sorted(set(looks))
    return (f"look {numbers[0]}" if len(numbers) == 1
            else "looks " + _join([str(n) for n in numbers]))


def _look_name(advice: Advice, look: Look) -> str:
    """``screen`` or ``look j`` (after a screen, the finalist's looks count from 1)."""
    if advice.screen_seeds:
        return "the screen" if look.look == 0 else f"look {look.look}"
    return f"look {look.look + 1}"


def _last_looks(advice: Advice) -> dict[str, Look]:
    """Each contender's last look (in the contenders' order)."""
    last: dict[str, Look] = {}
    for look in advice.looks:
        last[look.contender] = look
    return {label: last[label] for label in advice.contenders if label in last} | {
        label: look for label, look in last.items() if label not in advice.contenders}


def what_happened(advice: Advice) -> tuple[Happened, str]:
    """Why the advice is what it is, from the confirmation's looks (their typed decisions,
    :class:`mr2.tune.design.Look`): ``(kind, sentence)``, ``kind`` one of :data:`HAPPENED`.

    Example:
        >>> from mr2.tune.design import Advice, Look
        >>> stopped = [Look(c, 0, [9, 10, 11], -0.005, -0.8, 0.75, 1.5e-5, False, "futility") for c in "ab"]
        >>> advice = Advice(False, "erm", "a", None, stopped, "inconclusive", ["a", "b"])
        >>> kind, sentence = what_happened(advice)
        >>> kind, sentence.split(":")[0]
        ('futility', 'Stopped for futility at look 1 (3 fresh seeds)')
    """
    if advice.adopt:
        return "adopted", ""
    if advice.reason in ("erm_chosen", "no_eligible", "failed", "no_confirmation"):
        return advice.reason, _REASONS[advice.reason]  # type: ignore[return-value]
    last = _last_looks(advice)
    verdict = advice.verdict
    costly = [label for label, look in last.items() if look.decision == "overall_cost"]
    if advice.reason == "overall_cost" or costly:
        if not costly and verdict is not None:
            costly = [verdict.chosen]
        gains = ", ".join(f"{label} {_points(last[label].mean_difference)} points at look "
                          f"{last[label].look + 1}" for label in costly if label in last)
        sentence = (f"A cost in overall accuracy, not adopted: {_join(costly)} gained on the test hard tier "
                    f"significantly{f' ({gains})' if gains else ''}, but lost more overall accuracy than "
                    "ERM's seed standard error.")
        if verdict is not None and verdict.chosen in costly:
            sentence += (f" {verdict.chosen}: overall accuracy {_points(verdict.overall_change)} points, "
                         f"the cost allowed {format_percent(verdict.reference_overall_se)} points.")
        return "overall_cost", sentence
    unstable = [label for label, look in last.items() if look.decision == "unstable"]
    if unstable:
        why = "; ".join(f"{label}: {advice.ruled_out[label]}" for label in unstable
                        if label in advice.ruled_out)
        return "unstable", (f"Unstable, not adopted: {_join(unstable)} gained on the test hard tier "
                            f"significantly, but not steadily{f' ({why})' if why else ''}.")
    if advice.reason == "contradicted":
        sentence = _REASONS["contradicted"]
        if verdict is not None and not math.isnan(verdict.mean_difference):
            sentence += (f" {verdict.chosen}: {_points(verdict.mean_difference)} points over "
                         f"{len(verdict.seeds)} seeds, p = {_p(verdict.p_less)} for a loss.")
        return "contradicted", sentence
    futile = [label for label, look in last.items() if look.decision == "futility"]
    reached = [label for label, look in last.items() if look.decision not in ("futility", "screened_out")]
    screened = [label for label, look in last.items() if look.decision == "screened_out"]
    # After a screen, the finalist is the contender with a look after it (look 0 is the screen).
    finalist = next((label for label, look in last.items() if look.look > 0), None) \
        if advice.screen_seeds else None
    if finalist is not None and last[finalist].decision == "futility":
        look = last[finalist]
        screen = next((s for s in advice.looks if s.contender == finalist and s.look == 0), None)
        gain = "the largest gain" if screen is None else \
            f"{_points(screen.mean_difference)} points, the largest gain"
        bound = "" if advice.design.futility is None else f", at or below {advice.design.futility:g}"
        return "futility", (
            f"The finalist {finalist} ({gain} on the screen's {_screen_seeds(advice)}) "
            f"was stopped for futility at look {look.look} ({len(look.seeds)} fresh seeds after the "
            f"screen): {_points(look.mean_difference)} points on the test hard tier, t = "
            f"{look.statistic:.2f}{bound}; the other contenders did not pass the screen.")
    if advice.screen_seeds and screened and not reached and finalist is None:  # no finalist: why, each
        reasons = "; ".join(f"{label}: {advice.ruled_out[label]}" for label in [*screened, *futile]
                            if label in advice.ruled_out)
        return "futility", (f"No finalist at the screen ({_screen_seeds(advice)}), so "
                            f"nothing went on to be tested: {reasons}.")
    if futile and not reached and advice.screen_seeds and all(last[label].look == 0 for label in futile):
        changes = ", ".join(f"{label} {_points(last[label].mean_difference)}" for label in futile)
        floor = 0 if advice.design.futility is None else advice.design.futility
        return "futility", (
            f"Stopped for futility at the screen ({_screen_seeds(advice)}): no contender "
            f"showed enough gain on the test hard tier to become the finalist (t above {floor:g}); mean "
            f"changes in points: {changes}.")
    if futile and not reached:
        seeds = sorted({len(last[label].seeds) for label in futile})
        who = ("the contender" if len(futile) == 1 else "both contenders" if len(futile) == 2
               else f"all {len(futile)} contenders")
        changes = ", ".join(f"{label} {_points(last[label].mean_difference)}" for label in futile)
        bound = "" if advice.design.futility is None else f" (t at or below {advice.design.futility:g})"
        return "futility", (
            f"Stopped for futility at {_looks_text([last[label].look + 1 for label in futile])} "
            f"({'/'.join(str(n) for n in seeds)} fresh seeds): {who} showed too little gain on the test "
            f"hard tier to go on{bound}; mean changes in points: {changes}. The confirmation ended early, "
            "before its last look.")
    if reached:
        label = max(reached, key=lambda c: last[c].mean_difference)
        look = last[label]
        mean, n = look.mean_difference, len(look.seeds)
        p, level = look.p_greater, look.boundary
    elif verdict is not None and not math.isnan(verdict.mean_difference):
        label, mean, n, p, level = (verdict.chosen, verdict.mean_difference, len(verdict.seeds),
                                    verdict.p_greater, verdict.alpha)
    else:
        return "no_gain", "No gain could be shown on fresh seeds."
    others = (f" ({_join(futile)} stopped for futility at "
              f"{_looks_text([last[c].look + 1 for c in futile])})" if futile else "")
    if advice.screen_seeds and (futile or screened):
        others = f" ({_join([*screened, *futile])} did not pass the screen)"
    if not mean > 0:
        return "no_gain", (f"No gain: on fresh seeds {label}'s mean change of the test hard tier against ERM "
                           f"was {_points(mean)} points over {n} seeds{others}.")
    statistic = last[label].statistic if reached else (verdict.t_statistic if verdict else math.nan)
    return "gain_below_level", (
        f"A gain below the level: on fresh seeds {label} gained {_points(mean)} points on the test hard tier "
        f"over {n} seeds, not significant at the level its look allots (p = {_p(p)} for a gain; needed "
        f"below {_level(level)}){others}. A useless configuration shows a positive mean change half the "
        "time: this is not evidence enough to change." + _short_pool(advice, mean, statistic, n))


def _short_pool(advice: Advice, mean: float, statistic: float, n: int) -> str:
    """What a confirmation pool smaller than the design's cost, and the seeds a decision would need
    (issue 44: ``--confirm-seeds 3`` told a +2-point contender KEEP ERM without a word on it)."""
    design, pool = advice.design, advice.confirmation_pool
    full = design.confirmation_seeds
    if design.confirmation_looks is None or not 0 < pool < full:  # None: the design takes any pool
        return ""
    skipped = "the screen was skipped and " if design.screen and not advice.screen_seeds else ""
    last = max(design.confirmation_looks)
    screen = f"a screen of {design.screen} and looks up to {last}" if design.screen else f"looks up to {last}"
    sentence = (f" The confirmation pool had {pool} seeds, fewer than the {full} the design uses ({screen}), "
                f"so {skipped}this test had {n} seeds.")
    level = _last_level(design)
    needed = seeds_needed(mean, mean * math.sqrt(n) / statistic if statistic > 0 else math.nan, level)
    if needed is not None:
        sentence += (f" At the gain and spread seen here, one test at {_level(level)} (the level of the "
                     f"design's last look) would need about {needed} paired seeds (optimistic: the best of "
                     "several candidates usually looks better than it is).")
    return sentence + (
        f" A decision at the stated error rate needs the design's {full} (--confirm-seeds {full}, "
        f"confirm_seeds={full} in Python); a second run reuses these seeds, and deciding on it because "
        "this one fell short can adopt a useless configuration up to about twice the stated rate.")


def _last_level(design: Design) -> float:
    """The nominal level of the design's last look for its finalist (or each contender, without a
    screen) when the whole confirmation pool is given."""
    looks = design.confirmation_looks or (design.confirmation_seeds,)
    return design.look_levels(looks, 1 if design.screen else design.contenders)[-1]


def seeds_needed(mean: float, sd: float, level: float, limit: int = 1000) -> int | None:
    """The fewest paired seeds at which a one-sided t-test at ``level`` would pass for a true mean
    difference ``mean`` with spread ``sd`` (its t statistic ``mean * sqrt(n) / sd`` above the critical
    t with ``n - 1`` degrees of freedom); None when not within ``limit`` or not defined.

    Example:
        >>> seeds_needed(1.0, 1.0, 0.05)  # 1.0 * sqrt(5) = 2.24 > 2.13 (4 df); 2.0 < 2.35 at 4 seeds
        5
    """
    import numpy as np
    from scipy import stats

    if not (mean > 0 and sd > 0 and math.isfinite(mean) and math.isfinite(sd)):
        return None
    n = np.arange(2, limit + 1)
    passes = mean * np.sqrt(n) / sd > stats.t.isf(level, n - 1)
    return int(n[np.argmax(passes)]) if passes.any() else None


def _adopt_limits(advice: Advice) -> list[str]:
    """What the ADOPT line's error rate assumes and covers (issue 44): roughly normal per-seed
    differences, the user's test split, and what the fresh seeds without a failure rule out."""
    verdict = advice.verdict
    if verdict is None or not verdict.seeds:
        return []
    n = len(verdict.seeds)
    return [
        f"  The {100 * advice.design.alpha:g}% holds when the per-seed differences from ERM are roughly "
        "normal, and it is about your test split (the gain there is itself measured with a sampling error "
        "over its images).",
        f"  None of its {n} fresh seeds collapsed or lost more than {verdict.loss_limit:g} of ERM's seed "
        f"SDs: a configuration that fails on more than about 3/{n} = {100 * 3 / n:.0f}% of seeds is ruled "
        "out (95%); one that fails more rarely is not, and can pass on the seeds where it did not fail.",
    ]


def look_lines(advice: Advice) -> list[str]:
    """Every contender's test at every look of the confirmation, one line each, with its decision."""
    if not advice.looks:
        return []
    lines = ["Looks of the confirmation (test hard tier, contender minus ERM, paired by seed; a contender "
             "is adopted at a look when its one-sided p for a gain is below the look's level"
             + ("; the screen adopts nothing" if advice.screen_seeds else "") + "):"]
    final = max(look.look for look in advice.looks)
    for look in advice.looks:
        if look.decision == "stop" or (look.decision == "continue" and look.look == final):
            what = "last look: not adopted, " + ("a gain below the level" if look.mean_difference > 0
                                                 else "no gain")
        elif look.decision == "adopt" and not (advice.adopt and look.contender == advice.use):
            what = f"passed its level too; {advice.use} was adopted (the larger gain)"
        else:
            what = _DECISION.get(look.decision, look.decision)
        screen = bool(advice.screen_seeds) and look.look == 0
        level = "" if screen else f"; level {_level(look.boundary)}"
        lines.append(f"  {_look_name(advice, look)} ({len(look.seeds)} seeds): {look.contender} "
                     f"{_points(look.mean_difference)} points (t = {look.statistic:.2f}, "
                     f"p = {_p(look.p_greater)}{level}): {what}")
    return lines


def config_paste(use: Candidate) -> tuple[str, str]:
    """``(where, block)`` for mr2's engine: the ``method:`` block of a run configuration."""
    block = yaml.safe_dump({"method": use.method_block()}, sort_keys=False).rstrip("\n")
    return "paste into your run configuration", block


def script_paste(use: Candidate) -> tuple[str, str]:
    """``(where, block)`` for a training script (``--command``): the loss specification."""
    return ("in your training script, mr2.tune.loss_from_spec(spec, num_classes=K) builds the loss from",
            "loss_spec: " + json.dumps(use.loss_spec(), separators=(",", ":")))


def train_fn_paste(use: Candidate) -> tuple[str, str]:
    """``(where, block)`` for a Python ``train_fn``: ``make_loss()``, and the same as a specification."""
    return ("in your train_fn, result.recommended.make_loss() builds the loss; the same as a spec",
            script_paste(use)[1])


#: Each way in's paste (:func:`advice_text` given the name a source records).
PASTES: dict[str, Callable[[Candidate], tuple[str, str]]] = {
    "engine": config_paste, "command": script_paste, "python": train_fn_paste}


def advice_text(advice: Advice, use: Candidate,
                paste: Callable[[Candidate], tuple[str, str]] | str = script_paste,
                class_names: Sequence[str] | None = None) -> str:
    """The advice, printed last: the confirmation's looks and verdict, then ADOPT with the block to
    paste, or KEEP ERM and what happened (:func:`what_happened`); the last line says what to do.

    Args:
        paste: ``(where, block)`` of a candidate for the way in (the source's ``paste``), or its
            name in :data:`PASTES`.
        class_names: the hard classes are named with them.
    """
    where, block = (PASTES[paste] if isinstance(paste, str) else paste)(use)
    lines = []
    if advice.verdict is not None and advice.verdict.outcome != NOTHING_TO_CONFIRM:
        seeds = ", ".join(str(s) for s in advice.verdict.seeds)
        ranked_on = ("ERM's test accuracies on the screen's seeds "
                     + ", ".join(str(s) for s in [*advice.reused_seeds, *advice.screen_seeds])) \
            if advice.screen_tiers \
            else "ERM's validation accuracies"
        screened = set(advice.reused_seeds) | set(advice.screen_seeds)
        if advice.screen_seeds and set(advice.verdict.seeds) <= screened:  # no finalist: the screen's
            fresh = len(set(advice.verdict.seeds) - set(advice.reused_seeds))
            reused = ", ".join(str(s) for s in advice.reused_seeds)
            where = (f"seeds {seeds}: the selection seed {reused}'s runs and {fresh} fresh"
                     if advice.reused_seeds else f"fresh seeds {seeds}")
            lines += [f"Verdict on the screen (test split, {where}; the screen adopts nothing), "
                      f"{advice.verdict.chosen} against {ERM_AT_FIRST_USE}, paired by seed:",
                      *verdict_lines(advice.verdict, class_names, ranked_on, screen=True), ""]
        else:
            after = " after the screen" if advice.screen_seeds else ""
            lines += [f"Verdict on the confirmation (test split, fresh seeds {seeds}{after}), "
                      f"{advice.verdict.chosen} against {ERM_AT_FIRST_USE}, paired by seed:",
                      *verdict_lines(advice.verdict, class_names, ranked_on), ""]
    looks = look_lines(advice)
    if looks:
        lines += [*looks, ""]
    if advice.adopt:
        lines += [
            f"ADOPT {use.label}: on fresh seeds it beats ERM on the test hard tier at the stated error rate "
            f"(adopting a configuration no better than ERM happens at most {100 * advice.design.alpha:g}% of "
            "the time) and costs no more than ERM's seed standard error overall.",
            *_adopt_limits(advice),
            "",
            f"Use it: {where}:",
            "",
            textwrap.indent(block, "    "),
        ]
    else:
        why = what_happened(advice)[1]
        lines += [
            f"KEEP {ERM_AT_FIRST_USE}. {why}".rstrip(),
            "",
            f"Use plain cross-entropy training: {where}:",
            "",
            textwrap.indent(block, "    "),
        ]
    return "\n".join(lines)
