"""Which trials ``mr2 tune`` runs, in which order, and what it advises: the tune's design, pure.

A :class:`Plan` is a state machine between the tune's driver and the statistics: the driver asks
:meth:`Plan.next_round` for the trials to run now (it may run them in parallel), reports each one's
figures (:meth:`Plan.record_validation` in the selection phase, :meth:`Plan.record_test` in the
confirmation phase) or its failure (:meth:`Plan.record_failure`), and asks again until the answer is
``[]``; then :meth:`Plan.advice` says what to use. Nothing here trains, reads or writes anything.

The design (:class:`Design`) has two phases.

**Selection** (VALIDATION split, seeds of the selection pool). In stage ``j`` every candidate still
in the race and the reference (ERM) are trained on the stage's new seeds, until each has
``selection_looks[j]`` seeds; after every stage but the last, :func:`mr2.tune.selection.choose` is
applied to the runs so far and only the ``keep[j]`` eligible candidates with the best mean score
stay in the race (racing over seeds; ties: the earlier candidate). After the last stage, ``choose``
on the reference and the candidates still in the race gives the :class:`~mr2.tune.selection.Choice`
(and the hard classes the confirmation scores); the ``contenders`` best eligible candidates go to
the confirmation (``gate="best"``), or only ``choose``'s recommendation when it is not ERM
(``gate="margin"``, the rule of ``mr2 tune`` until issue 37).

**Confirmation** (TEST split, fresh seeds of the confirmation pool). At look ``j`` the reference and
every contender still active are trained on the new seeds, until each has
``confirmation_looks[j]`` seeds; each active contender is then compared with the reference by
:func:`mr2.tune.verdict.judge_figures` (one-sided paired t-test of the per-seed test hard-tier
differences over the seeds so far), at the NOMINAL level ``a_j`` of that look:

- ``a_j`` spends ``alpha / m`` (``m`` = the number of contenders: Bonferroni over the contenders)
  over the looks (:func:`nominal_levels`) with a Lan-DeMets spending function (O'Brien-Fleming or
  Pocock type) or a plain split ``alpha / (m L)`` over ``L`` looks; the spent increments are the
  nominal levels themselves (union levels), so that the union bound makes the rule valid with the
  t-tests' p-values whatever the looks' dependence (conservative: the looks overlap, and a futility
  stop only removes chances);
- a contender is **adopted** when its verdict is ``confirmed`` at ``a_j``: ``p_greater < a_j`` and
  its mean test overall-accuracy change is not below minus ERM's seed standard error of test overall
  accuracy (overall accuracy not worse beyond noise). If several are, the one with the largest mean
  hard-tier difference. Everything stops;
- a contender whose hard-tier test is significant at ``a_j`` but costs overall accuracy is ruled out
  (``overall_cost``); at an interim look, one whose t statistic is at or below ``futility`` is
  dropped (a non-binding stop, which can only lower the error rate);
- after the last look, a contender not adopted is not adopted.

Why the error rate holds: the confirmation's seeds and split are fresh, so, given the choice, each
contender's sequence of test statistics is that of a new experiment; a useless contender (no better
than ERM on the test hard tier) is adopted only if one of its looks rejects, which has probability at
most the sum of its nominal levels, ``alpha / m`` (union bound; each look's one-sided paired t-test is
exact under normal seed noise; dropping a contender early only removes chances); a union over the
``m`` contenders gives at most ``alpha``, whatever the selection did. With a screen
(:attr:`Design.screen`, the default's), the screen adopts nothing and only the finalist is tested, on
the seeds after the screen, at the whole ``alpha``: those seeds are fresh given everything that chose
it (the selection, the screen and the hard classes ranked on ERM's screen runs), so a useless finalist
is adopted at most ``alpha`` of the time.

:data:`DEFAULT_DESIGN`, in words (docs/benchmarks/tune-operating-characteristics.md says how it was
chosen and what it achieves): every candidate is trained on 1 selection seed and ERM on 2; the 16
candidates with the best validation score are the contenders (no overall-accuracy guard in the
selection: with one seed per candidate it ruled out about a third of candidates equal to ERM; overall
accuracy is judged on the test split). The SCREEN adopts nothing; it has 2 seeds of the test split:
the first selection seed's runs (a selection trial predicts both splits, so that seed costs nothing)
and 1 fresh seed on which ERM and every contender are trained. The contender with the largest mean
test hard-tier change over the two (t above 0.5, overall accuracy not worse beyond noise, no unstable
run) is the finalist, and the hard classes are ranked again on ERM's screen runs. The finalist and
ERM are then trained on the seeds after the screen, 4 at a time up to 16; after 4, 8, 12 and 16 of
them the finalist's one-sided paired t-test of the test hard tier against ERM is compared with its
nominal level, O'Brien-Fleming-type spending of the whole 0.05 (union levels); it is adopted at the
first look it passes with overall accuracy not worse beyond noise, dropped at t <= 0.5 before the last
look, and ERM is kept when it does not pass. When ERM alone remains (no candidate with a score),
nothing is trained on the confirmation seeds. The default before (issue 44, part 2: the 14 best
eligible screened on 2 fresh seeds, looks at 3, 6, 9, 12) is ``SCREEN_DESIGN`` in the benchmark;
the design before issue 44's screen (racing selection 1 then 3 seeds, the 4 best confirmed with
Bonferroni over them at 3, 6 and 9 seeds) is ``RACING_DESIGN``.

A contender whose run reported a feature collapse, or that lost more than
:data:`mr2.tune.verdict.LOSS_LIMIT` ERM seed SDs on one seed, is ``unstable``: named and not adopted
(decision and reason ``unstable``).

The default uses one selection stage and the ``best`` gate; :class:`Design` also keeps racing over
selection stages (``selection_looks``, ``keep``), the ``margin`` gate, ``reference_alone`` and the
selection's overall-accuracy guard: they are steps of the plan's own state machine, the rule of
earlier releases, and what the benchmark's earlier designs run on (``RACING_DESIGN``,
``SCREEN_DESIGN`` and ``BASELINE_DESIGN`` in ``benchmarks/tune_operating_characteristics.py``;
``BASELINE_DESIGN`` is ``mr2 tune`` before issue 37 with the advice gated on ``confirmed``: one
selection round, ``choose``'s recommendation confirmed on every confirmation seed, ERM alone still
trained there when chosen).

Issue 44 measured further options and did NOT make them the default (none raised power by the rule
stated in docs/benchmarks/tune-operating-characteristics.md): binding or recursive boundaries, a
variance pooled across the contenders and a max-t (Dunnett-type) level. They are research apparatus,
in ``benchmarks/tune_research_design.py``: its ``ResearchDesign`` answers the two questions a plan
asks its design (:meth:`Design.look_levels`, :meth:`Design.look_level`) differently. ``Design``
refuses them with a pointer there.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal, TypeVar

import numpy as np

from mr2.report.tiers import assign_tiers
from mr2.tune.selection import Choice, TuneSelectionError, ValidationFigures, choose, decide
from mr2.tune.verdict import CONFIRMED, UNSTABLE, SeedFigures, Verdict, judge_figures, rescored

__all__ = [
    "DEFAULT_DESIGN",
    "PHASES",
    "REASONS",
    "SIMULATED_CONFIRMATION_TRAININGS",
    "SPENDING_RULES",
    "Advice",
    "Design",
    "Look",
    "Plan",
    "Request",
    "nominal_levels",
]

SELECTION = "selection"
CONFIRMATION = "confirmation"
#: The two phases of a tune, in order.
PHASES = (SELECTION, CONFIRMATION)
#: How the confirmation's level is spread over its looks (see :func:`nominal_levels`).
SPENDING_RULES = ("obrien_fleming", "pocock", "bonferroni")
Spending = Literal["obrien_fleming", "pocock", "bonferroni"]
Gate = Literal["best", "margin"]

# Advice.reason keys.
CONFIRMED_REASON = "confirmed"
INCONCLUSIVE = "inconclusive"
CONTRADICTED = "contradicted"
OVERALL_COST = "overall_cost"
ERM_CHOSEN = "erm_chosen"
UNSTABLE_REASON = "unstable"
NO_ELIGIBLE = "no_eligible"
ALL_FAILED = "failed"
NO_CONFIRMATION = "no_confirmation"
#: Every reason :attr:`Advice.reason` can give.
REASONS = (CONFIRMED_REASON, INCONCLUSIVE, CONTRADICTED, OVERALL_COST, UNSTABLE_REASON, ERM_CHOSEN,
           NO_ELIGIBLE, ALL_FAILED, NO_CONFIRMATION)

# Look.decision values.
ADOPT = "adopt"
CONTINUE = "continue"
FUTILITY = "futility"
STOP = "stop"
UNSTABLE_DECISION = "unstable"
FINALIST = "finalist"
SCREENED_OUT = "screened_out"

UNKNOWN_PHASE = "unknown phase {value!r}; one of: selection, confirmation"
UNKNOWN_LABEL = "unknown candidate {label!r}; the plan's candidates are: {labels}"
NO_REFERENCE = "the reference {reference!r} is not among the candidate labels {labels}"
DUPLICATE_LABEL = "candidate label {label!r} appears twice"
NOT_REQUESTED = "{phase} trial {label!r} seed {seed} was not requested in the current round"
ALREADY_RECORDED = "{phase} trial {label!r} seed {seed} is already recorded"
ROUND_NOT_DONE = "the current round is not finished; still missing: {missing}"
NOT_DONE = "the plan is not finished: call next_round() until it returns []"
REFERENCE_FAILED = (
    "the reference {reference!r} failed ({phase}, seed {seed}: {reason}); there is nothing to compare "
    "the candidates with"
)
TOO_FEW_SELECTION_SEEDS = "the selection needs at least 2 seeds; got {count}"
SEEDS_OVERLAP = "selection and confirmation seeds must be disjoint; both have {seeds}"
BAD_DESIGN = "invalid design: {detail}"
NO_REUSED_TEST = ("selection trial {label!r} seed {seed}: this design's screen reuses the selection runs' "
                  "test figures; pass test=seed_figures(...) of the trial's test split")
FAILED = "failed ({reason})"
_OVERALL_COST = "overall accuracy below ERM's by more than ERM's seed SE"
_NO_SCORE = "no score"
DROPPED = "dropped after selection stage {stage}: not among the {keep} best eligible"


# ---------------------------------------------------------------------------------------------
# The confirmation's nominal levels
# ---------------------------------------------------------------------------------------------

def _spent(rule: str, fraction: float, alpha: float) -> float:
    """Lan-DeMets spending function: the level spent by information fraction ``t`` in (0, 1].

    O'Brien-Fleming type ``2 - 2 Phi(z_{1 - alpha / 2} / sqrt(t))``; Pocock type
    ``alpha ln(1 + (e - 1) t)``.
    """
    from scipy import stats

    if fraction >= 1.0:
        return alpha
    if rule == "obrien_fleming":
        return float(2.0 * stats.norm.sf(stats.norm.isf(alpha / 2.0) / math.sqrt(fraction)))
    return alpha * math.log1p((math.e - 1.0) * fraction)


def nominal_levels(fractions: Sequence[float], alpha: float, rule: str) -> list[float]:
    """The one-sided nominal level of each look; a look rejects when its p-value is below it.

    The spending function's increments ``A(t_j) - A(t_{j-1})`` themselves (``alpha / L`` each for
    ``bonferroni``): union levels. The chance that any look rejects is at most their sum, ``alpha``,
    by the union bound, whatever the dependence between the looks: with each look's one-sided paired
    t-test exact under normal seed noise, the rule is valid at ``alpha`` without approximation
    (conservative by the looks' overlap, which is small for O'Brien-Fleming-type spending: two equal
    looks at 2.5 % give 0.15 % and 2.35 %, against 0.15 % and 2.45 % for group-sequential boundaries
    computed for normal statistics, benchmarks/tune_research_design.py).

    Example:
        >>> [round(a, 4) for a in nominal_levels([1.0], 0.05, "obrien_fleming")]
        [0.05]
        >>> [round(a, 4) for a in nominal_levels([0.5, 1.0], 0.025, "obrien_fleming")]
        [0.0015, 0.0235]
        >>> [round(a, 4) for a in nominal_levels([0.5, 1.0], 0.05, "bonferroni")]
        [0.025, 0.025]
    """
    if rule not in SPENDING_RULES:
        raise ValueError(BAD_DESIGN.format(detail=f"spending rule {rule!r} not in {SPENDING_RULES}"))
    t = [float(f) / float(fractions[-1]) for f in fractions]
    if rule == "bonferroni":
        return [alpha / len(t)] * len(t)
    spent = [_spent(rule, f, alpha) for f in t]
    return [b - a for a, b in zip([0.0, *spent[:-1]], spent, strict=True)]


# ---------------------------------------------------------------------------------------------
# The design and the plan
# ---------------------------------------------------------------------------------------------

#: Options of issue 44 measured in the benchmark and not shipped (benchmarks/tune_research_design.py).
_RESEARCH_OPTIONS = ("boundaries", "variance", "multiplicity")
RESEARCH_OPTION = ("Design has no {what} {names}: measured in the operating-characteristics benchmark "
                   "(issue 44) and not shipped, {it} in benchmarks/tune_research_design.py (ResearchDesign)")
_D = TypeVar("_D", bound="Design")


@dataclass(frozen=True)
class Design:
    """The stated rule's parameters.

    Attributes:
        alpha: one-sided level of "adopt a configuration no better than ERM on the test hard tier",
            over all contenders and looks.
        selection_looks: cumulative selection seeds per candidate at the end of each selection stage
            (clipped to the selection pool); None: one stage with the whole pool.
        keep: how many eligible candidates stay in the race after each stage but the last
            (``len(selection_looks) - 1`` values).
        gate: ``best``: the ``contenders`` best eligible candidates are confirmed, whatever their
            margin over ERM on validation; ``margin``: only ``choose``'s recommendation (beats ERM
            by more than ERM's seed standard error), none when it is ERM.
        contenders: how many candidates are confirmed (``alpha`` is split equally among them).
        confirmation_looks: cumulative fresh seeds at each look of the confirmation (clipped to the
            confirmation pool); None: one look with the whole pool.
        spending: how each contender's ``alpha / contenders`` is spread over the looks
            (:data:`SPENDING_RULES`), as union nominal levels (:func:`nominal_levels`: exactly valid
            with t-tests, conservative by the looks' overlap and by every futility stop).
        futility: at an interim look, a contender whose t statistic is at or below this is dropped
            (None: never); non-binding (a stop only lowers the error rate).
        reference_alone: when no candidate is confirmed, still train ERM on the confirmation seeds
            to report its test figures (decides nothing).
        selection_guard: ``overall``: a candidate whose validation overall accuracy is below ERM's by
            more than ERM's seed SE is not ranked in the selection (:func:`mr2.tune.selection.choose`'s
            eligibility); ``none``: every candidate with a score is ranked, and overall accuracy is
            judged by the confirmation alone (on fresh test seeds).
        screen: 0, or the fresh confirmation seeds of a screen (issue 44): ERM and every contender are
            trained on them, nothing is adopted there, and the contender with the largest mean test
            hard-tier change against ERM among those whose t statistic is above ``futility`` (0 when
            None), with overall accuracy not worse beyond noise and no unstable run, becomes the
            FINALIST (none: ERM is kept). Only the finalist goes on, tested on the seeds AFTER the
            screen (``confirmation_looks`` count from there) at the whole ``alpha``: those seeds are
            fresh and the screen adopts nothing, so a useless finalist is adopted at most ``alpha`` of
            the time, whatever picked it. Skipped when selection sends a single contender or the pool
            has fewer than ``screen + 2`` seeds (then the plain Bonferroni confirmation applies).
        screen_tiers: with a screen, the hard classes are ranked again on ERM's mean per-class TEST
            accuracy over the screen's runs (tiers as :func:`mr2.report.tiers.assign_tiers`), and the
            screen and the finalist are scored on them: the finalist's seeds are fresh, so the classes
            that look hard on the screen's seeds do not favour it (no regression to the mean), and
            the test split ranks the classes far better than a small validation split. Needs the
            screen's test figures with per-class accuracies (:func:`mr2.tune.verdict.seed_figures`);
            without them the selection's hard classes stay.
        screen_reuse: the screen also counts each contender's and ERM's TEST figures from the first
            selection seed (a selection trial predicts both splits: the run is there already), so
            ``screen`` fresh seeds give a screen of ``screen + 1`` seeds. Needs one selection seed per
            candidate (``selection_looks=(1,)``), ``screen >= 1``, ``screen_tiers`` and the test
            figures with every selection trial (:meth:`Plan.record_validation`'s ``test``). The
            finalist is still tested on the seeds after the screen only, so the error rate's argument
            is unchanged: nothing that chose the finalist is among them.
    """

    alpha: float = 0.05
    selection_looks: tuple[int, ...] | None = None
    keep: tuple[int, ...] = ()
    gate: Gate = "best"
    contenders: int = 1
    confirmation_looks: tuple[int, ...] | None = None
    spending: Spending = "obrien_fleming"
    futility: float | None = None
    reference_alone: bool = False
    selection_guard: Literal["overall", "none"] = "overall"
    screen: int = 0
    screen_tiers: bool = True
    screen_reuse: bool = False

    def __new__(cls: type[_D], *args: Any, **kwargs: Any) -> _D:
        """Refuse an option that is no longer the shipped rule's, saying where it went."""
        removed = [name for name in _RESEARCH_OPTIONS
                   if name in kwargs and name not in {f.name for f in fields(cls)}]
        if removed:
            one = len(removed) == 1
            raise TypeError(RESEARCH_OPTION.format(what="option" if one else "options",
                                                   names=", ".join(repr(n) for n in removed),
                                                   it="it is" if one else "they are"))
        return super().__new__(cls)

    def __post_init__(self) -> None:
        problems = []
        if not 0 < self.alpha < 1:
            problems.append(f"alpha {self.alpha} not in (0, 1)")
        looks = self.selection_looks
        if looks is not None and (not looks or looks[0] < 1 or list(looks) != sorted(set(looks))):
            problems.append(f"selection_looks {looks} must increase from at least 1")
        elif looks is not None and looks[-1] < 2 and not (self.screen and self.contenders > 1):
            problems.append(f"selection_looks {looks} must end at 2 seeds or more unless a screen "
                            "follows (one seed per candidate ranks, the screen and the finalist decide)")
        if len(self.keep) != (0 if looks is None else len(looks) - 1) or any(k < 1 for k in self.keep):
            problems.append(f"keep {self.keep} needs one count >= 1 per selection stage but the last")
        if self.gate not in ("best", "margin"):
            problems.append(f"gate {self.gate!r} not in ('best', 'margin')")
        if self.contenders < 1 or (self.gate == "margin" and self.contenders != 1):
            problems.append(f"contenders {self.contenders} must be >= 1 (1 with gate 'margin')")
        clooks = self.confirmation_looks
        if clooks is not None and (not clooks or clooks[0] < 2 or list(clooks) != sorted(set(clooks))):
            problems.append(f"confirmation_looks {clooks} must increase from at least 2")
        if self.spending not in SPENDING_RULES:
            problems.append(f"spending {self.spending!r} not in {SPENDING_RULES}")
        if self.selection_guard not in ("overall", "none"):
            problems.append(f"selection_guard {self.selection_guard!r} not in ('overall', 'none')")
        if self.screen < 0 or (self.screen == 1 and not self.screen_reuse):
            problems.append(f"screen {self.screen} must be 0 (no screen) or at least 2 seeds "
                            "(1 with screen_reuse)")
        if self.screen_reuse and not (self.screen >= 1 and self.selection_looks == (1,)
                                      and self.screen_tiers):
            problems.append("screen_reuse needs a screen (screen >= 1), one selection seed per candidate "
                            "(selection_looks=(1,)) and screen_tiers")
        if self.screen and self.gate != "best":
            problems.append("a screen needs gate 'best' (it picks one of several contenders)")
        if problems:
            raise ValueError(BAD_DESIGN.format(detail="; ".join(problems)))

    def to_dict(self) -> dict[str, Any]:
        return {
            "alpha": self.alpha,
            "selection_looks": None if self.selection_looks is None else list(self.selection_looks),
            "keep": list(self.keep),
            "gate": self.gate,
            "contenders": self.contenders,
            "confirmation_looks": None if self.confirmation_looks is None else list(self.confirmation_looks),
            "spending": self.spending,
            "futility": self.futility,
            "reference_alone": self.reference_alone,
            "selection_guard": self.selection_guard,
            "screen": self.screen,
            "screen_tiers": self.screen_tiers,
            "screen_reuse": self.screen_reuse,
        }

    @property
    def min_runs(self) -> int:
        """The selection runs a candidate needs to be eligible: 1 when the selection ranks on one seed
        per candidate (a screen follows), else 2 (its own seed standard error)."""
        return 1 if self.selection_looks is not None and self.selection_looks[-1] < 2 else 2

    @property
    def selection_seeds(self) -> int:
        """The selection seeds the design uses at most (ERM needs 2 for its seed standard error)."""
        return max(2, *(self.selection_looks or (3,)))

    @property
    def confirmation_seeds(self) -> int:
        """The confirmation seeds the design uses at most: the screen's and the finalist's looks."""
        return self.screen + max(self.confirmation_looks or (3,))

    # The two questions the plan asks its design about the confirmation's tests. The shipped rule's
    # answers are below; benchmarks/tune_research_design.py's ResearchDesign overrides them with the
    # options measured in the benchmark and not shipped (other boundaries, a pooled spread, max-t).

    def look_levels(self, looks: Sequence[int], contenders: int) -> list[float]:
        """Each look's nominal level for one contender: ``alpha / contenders`` (Bonferroni over the
        contenders; ``contenders`` is 1 for a screen's finalist) spent over the looks by
        :attr:`spending`, as union levels (:func:`nominal_levels`).

        Args:
            looks: the looks' cumulative seed counts (increasing).
            contenders: how many contenders share ``alpha``.

        Example:
            >>> [round(a, 4) for a in Design(contenders=2).look_levels([3, 6], 2)]
            [0.0015, 0.0235]
        """
        return nominal_levels([n / looks[-1] for n in looks], self.alpha / contenders, self.spending)

    def look_level(self, plan: Plan, level: float) -> tuple[float, tuple[float, int] | None]:
        """The level every contender's test at ``plan``'s current look is compared with, and the
        spread passed to :func:`mr2.tune.verdict.judge_figures` (None: each contender's own paired
        SD). The shipped rule: the look's nominal level (:meth:`look_levels`), each contender's own
        SD."""
        return level, None


#: The design ``mr2 tune`` uses (issue 44's screen with the selection seed's runs reused; chosen by
#: the rule stated in docs/benchmarks/tune-operating-characteristics.md, part 4, and confirmed there on
#: fresh simulator seeds and on the real-run pool).
DEFAULT_DESIGN = Design(selection_looks=(1,), gate="best", contenders=16, screen=1, screen_reuse=True,
                        selection_guard="none", confirmation_looks=(4, 8, 12, 16), spending="obrien_fleming",
                        futility=0.5)
#: Mean confirmation trainings per tune (the screen's and the finalist's) of :data:`DEFAULT_DESIGN`
#: in the operating-characteristics simulation (benchmarks/tune_operating_characteristics.py --seed 6
#: --reps 200: mean over the 10 cells and the null, +0.5, +1.0 and +2.0 scenarios with 17 candidates;
#: 28.9 under the null and 33.1 at +1.0 point).
SIMULATED_CONFIRMATION_TRAININGS = 31.7


@dataclass(frozen=True)
class Request:
    """One trial to run: a candidate on a seed, in a phase (validation figures for ``selection``,
    test figures for ``confirmation``)."""

    phase: str
    label: str
    seed: int


@dataclass(frozen=True)
class Look:
    """One contender's test at one look of the confirmation.

    Attributes:
        contender: the candidate tested.
        look: the look's index (0-based).
        seeds: the paired seeds tested so far.
        mean_difference: mean test hard-tier change against ERM (fraction).
        statistic: the paired t statistic.
        p_greater: its one-sided p-value.
        boundary: the nominal level the p-value had to be below at this look.
        overall_cost: the mean overall change is below minus ERM's seed SE.
        decision: ``adopt``, ``continue``, ``futility`` (dropped), ``overall_cost`` (ruled out) or
            ``stop`` (last look, not adopted).
    """

    contender: str
    look: int
    seeds: list[int]
    mean_difference: float
    statistic: float
    p_greater: float
    boundary: float
    overall_cost: bool
    decision: str

    def to_dict(self) -> dict[str, Any]:
        def clean(value: float) -> float | str | None:
            if math.isnan(value):
                return None
            return value if math.isfinite(value) else ("inf" if value > 0 else "-inf")

        return {"contender": self.contender, "look": self.look, "seeds": self.seeds,
                "mean_difference": clean(self.mean_difference), "statistic": clean(self.statistic),
                "p_greater": clean(self.p_greater), "boundary": clean(self.boundary),
                "overall_cost": self.overall_cost, "decision": self.decision}


@dataclass
class Advice:
    """What to do, once the plan is finished.

    Attributes:
        adopt: adopt the chosen configuration (a confirmation rejected "no better than ERM").
        use: the label to use: the adopted candidate, else the reference.
        chosen: the contender adopted, else the best contender selection sent to the confirmation
            (None when none was).
        verdict: the adopted contender's verdict at the look that adopted it, else the best
            contender's verdict at its last look (None without a confirmation of a candidate; the
            reference's own figures when only ERM ran on the confirmation seeds).
        looks: every contender's test at every look, in order.
        reason: one of :data:`REASONS`.
        contenders: the candidates sent to the confirmation, best first.
        ruled_out: candidate -> why it was ruled out (failed, not eligible, dropped, futility...).
        design: the design applied.
        screen_seeds: the fresh seeds of the screen ([] when no screen ran); its looks have index 0
            and the finalist's looks 1, 2, ...
        reused_seeds: the selection seed whose runs' test figures the screen also counted
            (:attr:`Design.screen_reuse`; [] otherwise).
        screen_tiers: the hard classes were ranked again on ERM's test runs of the screen.
        confirmation_pool: the confirmation seeds the tune was given (0: not known); fewer than
            :attr:`Design.confirmation_seeds` cut the design short, and the advice says so.
    """

    adopt: bool
    use: str
    chosen: str | None
    verdict: Verdict | None
    looks: list[Look]
    reason: str
    contenders: list[str] = field(default_factory=list)
    ruled_out: dict[str, str] = field(default_factory=dict)
    design: Design = DEFAULT_DESIGN
    screen_seeds: list[int] = field(default_factory=list)
    reused_seeds: list[int] = field(default_factory=list)
    screen_tiers: bool = False
    confirmation_pool: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "adopt": self.adopt,
            "use": self.use,
            "chosen": self.chosen,
            "reason": self.reason,
            "contenders": self.contenders,
            "verdict": None if self.verdict is None else self.verdict.to_dict(),
            "looks": [look.to_dict() for look in self.looks],
            "ruled_out": self.ruled_out,
            "design": self.design.to_dict(),
            "screen_seeds": self.screen_seeds,
            "reused_seeds": self.reused_seeds,
            "screen_tiers": self.screen_tiers,
            "confirmation_pool": self.confirmation_pool,
        }


def _decide_again(choice: Choice) -> Choice:
    """Redo :func:`mr2.tune.selection.choose`'s last step after eligibility changed (candidates the
    racing ruled out): the best eligible candidate, its margin and the recommendation."""
    return decide(choice, choice.score(choice.reference))


def _unstable_reason(verdict: Verdict) -> str:
    """Why a significant contender is not adopted: a run that collapsed or a seed lost badly."""
    parts = []
    if verdict.collapsed_seeds:
        parts.append("a run tripped the feature-collapse guard (seed(s) "
                     + ", ".join(str(s) for s in verdict.collapsed_seeds) + ")")
    if verdict.lost_seeds:
        parts.append(f"lost more than {verdict.loss_limit:g} ERM seed SDs of the test hard tier on seed(s) "
                     + ", ".join(str(s) for s in verdict.lost_seeds))
    return "significant on the hard tier but unstable: " + "; ".join(parts)


def _cumulative(looks: tuple[int, ...] | None, pool: int) -> list[int]:
    """Cumulative seed counts per stage, clipped to the pool and without repeats."""
    counts = [pool] if looks is None else [min(n, pool) for n in looks]
    return sorted(set(counts))


class Plan:
    """The trials of one tune and the advice they lead to (module docstring).

    Args:
        labels: candidate labels in order, the reference among them.
        reference: ERM's label.
        criterion: the selection criterion (:data:`mr2.tune.selection.CRITERIA`).
        selection_seeds, confirmation_seeds: the seed pools, used from the front.
        design: the rule's parameters.

    Raises:
        TuneSelectionError: no reference among the labels, a label twice, fewer than 2 selection
            seeds, or pools that share a seed.

    Example:
        >>> plan = Plan(["erm", "a"], selection_seeds=[5, 6], confirmation_seeds=[8, 9],
        ...             design=Design(gate="margin", reference_alone=True))
        >>> [(r.label, r.seed) for r in plan.next_round()]
        [('erm', 5), ('a', 5), ('erm', 6), ('a', 6)]
        >>> plan.max_trainings()  # 2 x 2 selection, 2 x 2 confirmation
        8
    """

    def __init__(self, labels: Sequence[str], *, reference: str = "erm", criterion: str = "hard_tier",
                 selection_seeds: Sequence[int], confirmation_seeds: Sequence[int],
                 design: Design = DEFAULT_DESIGN) -> None:
        self.labels = [str(label) for label in labels]
        seen: set[str] = set()
        for label in self.labels:
            if label in seen:
                raise TuneSelectionError(DUPLICATE_LABEL.format(label=label))
            seen.add(label)
        if reference not in seen:
            raise TuneSelectionError(NO_REFERENCE.format(reference=reference, labels=self.labels))
        self.reference = reference
        self.criterion = criterion
        self.selection_seeds = [int(s) for s in selection_seeds]
        self.confirmation_seeds = [int(s) for s in confirmation_seeds]
        if len(self.selection_seeds) < 2:
            raise TuneSelectionError(TOO_FEW_SELECTION_SEEDS.format(count=len(self.selection_seeds)))
        shared = sorted(set(self.selection_seeds) & set(self.confirmation_seeds))
        if shared:
            raise TuneSelectionError(SEEDS_OVERLAP.format(seeds=shared))
        self.design = design
        self._stages = _cumulative(design.selection_looks, len(self.selection_seeds))
        pool = len(self.confirmation_seeds)
        self._looks = _cumulative(design.confirmation_looks, pool) if pool >= 2 else []
        self._screen_size = design.screen if design.screen and pool >= design.screen + 2 else 0
        if self._screen_size:
            self._looks = _cumulative(design.confirmation_looks, pool - self._screen_size)
        self._looks = [n for n in self._looks if n >= 2]
        self._screening = False  # the screen's round is the current one
        self._offset = 0  # confirmation seeds before the finalist's (the screen's, once it ran)
        self._finalist: str | None = None
        self._screen_tiers: list[int] | None = None  # every class's tier, likewise
        self._screen_accuracy: list[float] | None = None  # ERM's mean per-class test accuracy there
        self._levels: list[float] = []
        self._validation: dict[str, dict[int, ValidationFigures]] = {label: {} for label in self.labels}
        self._test: dict[str, dict[int, SeedFigures]] = {label: {} for label in self.labels}
        # screen_reuse: the test figures of the first selection seed's trials (the screen's first seed)
        self._reused: dict[str, dict[int, SeedFigures]] = {label: {} for label in self.labels}
        self._active = [label for label in self.labels if label != reference]  # in the race
        self._ruled_out: dict[str, str] = {}
        self._ineligible: dict[str, str] = {}  # why a candidate was not eligible (no "not eligible: ")
        self._failed: set[str] = set()  # ruled out because a trial failed (not eligible, dropped... are not)
        self._outstanding: set[Request] = set()
        self._issued: set[Request] = set()
        self._cancelled: set[Request] = set()
        self._phase = SELECTION
        self._stage = 0  # the selection stage / confirmation look whose round is out (or next)
        self._started = False  # the current stage's round was issued
        self._done = False
        self._choice: Choice | None = None
        self._contenders: list[str] = []
        self._looks_done: list[Look] = []
        self._verdicts: dict[str, Verdict] = {}
        self._adopted: str | None = None
        self._collapsed: dict[str, list[int]] = {}  # label -> seeds of its runs that collapsed
        self._reason = ""
        self._trainings = 0

    # -- what the driver asks -----------------------------------------------------------------

    @property
    def choice(self) -> Choice | None:
        """The selection's :class:`~mr2.tune.selection.Choice` once selection is over (else None)."""
        return self._choice

    @property
    def hard_classes(self) -> list[int]:
        """The hard classes the next test figures are scored on: the selection's
        (:attr:`Choice.hard_classes`, fixed at its end; [] before), or after a screen with
        ``screen_tiers`` those ranked on ERM's test runs of the screen."""
        if self._screen_tiers is not None:  # the hard tier of the tiers ranked on ERM's screen runs
            return [k for k, t in enumerate(self._screen_tiers) if t == max(self._screen_tiers)]
        return [] if self._choice is None else self._choice.hard_classes

    @property
    def confirmation_tiers(self) -> list[int] | None:
        """Every class's tier (0 easy .. 2 hard, -1 unranked) the confirmation scores on: ranked on
        ERM's screen runs after a screen with ``screen_tiers``, else the selection's
        (:attr:`Choice.tiers`); None before the end of selection or without tiers."""
        if self._screen_tiers is not None:
            return list(self._screen_tiers)
        if self._choice is None or not any(t >= 0 for t in self._choice.tiers):
            return None
        return list(self._choice.tiers)

    @property
    def screen_accuracy(self) -> list[float] | None:
        """After a screen with ``screen_tiers``: ERM's mean per-class test accuracy over the screen's
        runs, which ranked :attr:`confirmation_tiers` (None otherwise)."""
        return None if self._screen_accuracy is None else list(self._screen_accuracy)

    @property
    def contenders(self) -> list[str]:
        """The candidates sent to the confirmation, best first ([] before the end of selection)."""
        return list(self._contenders)

    @property
    def done(self) -> bool:
        return self._done

    @property
    def trainings(self) -> int:
        """Trials requested so far."""
        return self._trainings

    def next_round(self) -> list[Request]:
        """The trials to run now, seed-major (reference first in each seed); [] when finished.

        Raises:
            TuneSelectionError: the previous round still has trials without a result.
        """
        if self._outstanding:
            missing = sorted(self._outstanding, key=lambda r: (r.seed, r.label))
            raise TuneSelectionError(ROUND_NOT_DONE.format(
                missing=", ".join(f"{r.label}@{r.seed}" for r in missing)))
        while not self._done:
            if self._started:
                self._evaluate()
                continue
            requests = self._round()
            self._started = True
            if requests:
                self._outstanding = set(requests)
                self._issued.update(requests)
                self._trainings += len(requests)
                return requests
        return []

    def record_validation(self, label: str, seed: int, figures: ValidationFigures,
                          test: SeedFigures | None = None) -> None:
        """A selection trial's validation figures, and, for a trial of the first selection seed under
        :attr:`Design.screen_reuse`, its test figures (:func:`mr2.tune.verdict.seed_figures`,
        per-class accuracies needed; the hard tier is scored again on the screen's classes; ignored
        for other trials).

        Raises:
            TuneSelectionError: the design reuses this trial's test figures and ``test`` is None.
        """
        if self.design.screen_reuse and test is None and seed == self.selection_seeds[0]:
            raise TuneSelectionError(NO_REUSED_TEST.format(label=label, seed=seed))
        request = self._take(SELECTION, label, seed)
        if request is not None:
            self._validation[request.label][request.seed] = figures
            if test is not None and request.seed == self.selection_seeds[0]:
                self._reused[request.label][request.seed] = test
            if figures.collapsed:
                self._collapsed.setdefault(request.label, []).append(request.seed)

    def record_test(self, label: str, seed: int, figures: SeedFigures) -> None:
        """A confirmation trial's test figures (:func:`mr2.tune.verdict.seed_figures` on
        :attr:`hard_classes`)."""
        request = self._take(CONFIRMATION, label, seed)
        if request is not None:
            self._test[request.label][request.seed] = figures

    def record_failure(self, phase: str, label: str, seed: int, reason: str) -> None:
        """A trial failed: the candidate is ruled out and gets no more requests; its other trials of
        the round are no longer awaited (their results, if they come, are ignored).

        Raises:
            TuneSelectionError: the reference failed (nothing to compare with).
        """
        request = self._take(phase, label, seed)
        if request is None:
            return
        if request.label == self.reference:
            raise TuneSelectionError(REFERENCE_FAILED.format(reference=self.reference, phase=phase,
                                                             seed=seed, reason=reason))
        if request.label not in self._ruled_out:
            self._ruled_out[request.label] = FAILED.format(reason=reason)
            self._failed.add(request.label)
        if request.label in self._active:
            self._active.remove(request.label)
        # Its other trials of this round are no longer awaited.
        cancelled = {r for r in self._outstanding if r.label == request.label}
        self._outstanding -= cancelled
        self._cancelled |= cancelled

    def advice(self) -> Advice:
        """What to do (only once :meth:`next_round` returned [])."""
        if not self._done:
            raise TuneSelectionError(NOT_DONE)
        best = self._adopted or self._finalist or (self._contenders[0] if self._contenders else None)
        verdict = self._verdicts.get(best) if best is not None else self._verdicts.get(self.reference)
        return Advice(
            adopt=self._adopted is not None,
            use=self._adopted or self.reference,
            chosen=best,
            verdict=verdict,
            looks=list(self._looks_done),
            reason=self._reason,
            contenders=list(self._contenders),
            ruled_out=dict(self._ruled_out),
            design=self.design,
            screen_seeds=list(self.confirmation_seeds[:self._offset]),
            reused_seeds=sorted(self._reused[self.reference]) if self._offset else [],
            screen_tiers=self._screen_tiers is not None,
            confirmation_pool=len(self.confirmation_seeds),
        )

    def max_trainings(self) -> int:
        """The most trials this plan can request (no failure): every stage and look run in full."""
        return self._selection_trainings() + self._confirmation_trainings()

    def max_confirmation_trainings(self) -> int:
        """The most confirmation trials (the screen's and the finalist's, or every contender's on every
        look) this plan can request: the runs a confirmation report may hold."""
        return self._confirmation_trainings()

    def expected_trainings(self) -> float:
        """The trials a tune of this plan is expected to request (for ``--dry-run``).

        The selection's trials do not depend on the results (counted in full). The confirmation's
        do when it looks more than once: for :data:`DEFAULT_DESIGN` with its full confirmation
        pool, the mean of the operating-characteristics simulation,
        :data:`SIMULATED_CONFIRMATION_TRAININGS` (docs/benchmarks/tune-operating-characteristics.md);
        for any other sequential design, the maximum (no simulation stands behind it).
        """
        confirmation = float(self._confirmation_trainings())
        if (self.design == DEFAULT_DESIGN and len(self._looks) > 1
                and len(self.confirmation_seeds) >= DEFAULT_DESIGN.confirmation_seeds):
            confirmation = min(confirmation, SIMULATED_CONFIRMATION_TRAININGS)
        return self._selection_trainings() + confirmation

    def _racing(self) -> list[int]:
        """Candidates in the race at each selection stage (no failure, enough eligible)."""
        racing = [len(self.labels) - 1]
        for keep in self.design.keep[:len(self._stages) - 1]:
            racing.append(min(racing[-1], keep))
        return racing

    def _selection_trainings(self) -> int:
        total, previous = max(2, self._stages[-1]), 0  # the reference's selection runs
        for n, racing in zip(self._stages, self._racing(), strict=False):
            total += racing * (n - previous)
            previous = n
        return total

    def _confirmation_trainings(self) -> int:
        m = 1 if self.design.gate == "margin" else min(self.design.contenders, self._racing()[-1])
        looks = self._looks[-1] if self._looks else 0
        if self._screen_size and m > 1:
            return self._screen_size * (1 + m) + 2 * looks
        return looks * (1 + m) if (self.design.reference_alone or m > 0) else 0

    # -- internals ----------------------------------------------------------------------------

    def _take(self, phase: str, label: str, seed: int) -> Request | None:
        """The awaited request these figures answer (None: one no longer awaited, to ignore)."""
        if phase not in PHASES:
            raise TuneSelectionError(UNKNOWN_PHASE.format(value=phase))
        if label not in self._validation:
            raise TuneSelectionError(UNKNOWN_LABEL.format(label=label, labels=self.labels))
        request = Request(phase, label, int(seed))
        if request in self._cancelled:
            self._cancelled.discard(request)
            return None
        if request not in self._outstanding:
            template = ALREADY_RECORDED if request in self._issued else NOT_REQUESTED
            raise TuneSelectionError(template.format(phase=phase, label=label, seed=seed))
        self._outstanding.discard(request)
        return request

    def _round(self) -> list[Request]:
        """The requests of the current stage or look (may be empty)."""
        if self._phase == SELECTION:
            # Each candidate in the race up to the stage's seed count; the reference to at least 2
            # (the rule needs its seed standard error from the first stage on).
            target = self._stages[self._stage]
            wanted = {label: target for label in self._active}
            wanted[self.reference] = max(2, target)
            have = {label: len(self._validation[label]) for label in wanted}
            rows = [(s, label) for label in wanted
                    for s in range(have[label], wanted[label])]
            order = {label: i for i, label in enumerate([self.reference, *self.labels])}
            rows.sort(key=lambda row: (row[0], order[row[1]] if row[1] != self.reference else -1))
            return [Request(SELECTION, label, self.selection_seeds[s]) for s, label in rows]
        elif self._screening:
            seeds = self.confirmation_seeds[:self._screen_size]
            labels = [self.reference, *self._active]
        else:
            previous = self._offset + (self._looks[self._stage - 1] if self._stage else 0)
            seeds = self.confirmation_seeds[previous:self._offset + self._looks[self._stage]]
            labels = [self.reference, *self._active]
        ordered = [label for label in self.labels if label in set(labels)]
        ordered.remove(self.reference)
        return [Request(self._phase, label, seed) for seed in seeds for label in [self.reference, *ordered]]

    def _selection_runs(self, labels: Sequence[str]) -> dict[str, list[ValidationFigures]]:
        return {label: [self._validation[label][s] for s in sorted(self._validation[label],
                                                                  key=self.selection_seeds.index)]
                for label in self.labels if label in set(labels)}

    def _ranked(self, choice: Choice, interim: bool = False) -> list[str]:
        """Eligible candidates by mean score, best first (ties: the earlier candidate). ``interim``:
        a candidate with a single run (first racing stage) counts as eligible when it passes the
        overall-accuracy guard (its own seed standard error is not needed to rank it)."""
        order = {label: i for i, label in enumerate(self.labels)}
        erm = choice.score(self.reference)
        guard = self.design.selection_guard == "overall"
        one_seed = self._stages[-1] < 2
        eligible = [s for s in choice.scores
                    if s.label != self.reference and not math.isnan(s.mean)
                    and (s.eligible or (not guard and len(s.runs) >= (1 if interim or one_seed else 2)
                                        and not s.missing_seeds)
                         or (interim and len(s.runs) == 1
                             and s.overall_mean >= erm.overall_mean - erm.overall_se))]
        eligible.sort(key=lambda s: (-s.mean, order[s.label]))
        return [s.label for s in eligible]

    def _evaluate(self) -> None:
        """The current round's results are in: decide, and move to the next stage, look or the end."""
        self._started = False
        if self._phase == SELECTION:
            self._evaluate_selection()
        else:
            self._evaluate_confirmation()

    def _evaluate_selection(self) -> None:
        interim = self._stage < len(self._stages) - 1
        seeds = self.selection_seeds[:self._stages[self._stage]]
        runs = self._selection_runs([self.reference, *self._active])
        # At an interim stage, or a one-seed selection, ERM has a seed more than the candidates.
        one_seed = self._stages[-1] < 2
        choice = choose(runs, self.criterion, self.reference, seeds=None if interim or one_seed else seeds,
                        min_runs=1 if one_seed else 2)
        ranked = self._ranked(choice, interim)
        for score in choice.scores:
            if score.label != self.reference and score.label not in ranked:
                # At a first racing stage a single run is enough to rank: the overall-accuracy guard
                # (or no score) is what left it out, not choose's "fewer than 2 runs".
                single = interim and len(score.runs) == 1
                reason = (_NO_SCORE if math.isnan(score.mean) else _OVERALL_COST) if single else score.reason
                when = f" (at selection stage {self._stage + 1}, {len(seeds)} seed(s))" if interim else ""
                if score.label not in self._ruled_out:
                    self._ineligible[score.label] = f"{reason or _OVERALL_COST}{when}"
                    self._ruled_out[score.label] = f"not eligible: {self._ineligible[score.label]}"
        if interim:
            keep = self.design.keep[self._stage] if self._stage < len(self.design.keep) else len(ranked)
            for label in ranked[keep:]:
                self._ruled_out.setdefault(label, DROPPED.format(stage=self._stage + 1, keep=keep))
            self._active = ranked[:keep]
            self._stage += 1
            return
        if self._ruled_out:
            # The final table lists every candidate with a run, those raced out or failed included
            # (not eligible, with why); the decision above is unchanged by them.
            shown = [label for label in self.labels if self._validation.get(label)]
            choice = choose(self._selection_runs(shown), self.criterion, self.reference,
                            min_runs=1 if one_seed else 2)
            for score in choice.scores:
                if score.label in self._ruled_out:  # the table's "eligible" column says why not
                    score.eligible = False
                    score.reason = self._ineligible.get(score.label, self._ruled_out[score.label])
            choice = _decide_again(choice)
        self._choice = choice
        if self.design.gate == "margin":
            self._contenders = [] if choice.is_reference else [choice.recommended]
        else:
            self._contenders = ranked[:self.design.contenders]
        self._active = list(self._contenders)
        self._phase, self._stage = CONFIRMATION, 0
        if not self._looks:
            self._finish(NO_CONFIRMATION if self._contenders else self._no_contender_reason(ranked))
            return
        if not self._contenders:
            if self.design.reference_alone:
                self._looks = self._looks[-1:]  # one round: ERM's figures only
                return
            self._finish(self._no_contender_reason(ranked))
            return
        # Bonferroni: each contender spends alpha / m over the looks; a screen: one finalist, tested
        # on fresh seeds, spends the whole alpha.
        self._screening = bool(self._screen_size) and len(self._contenders) > 1
        self._levels = self.design.look_levels(self._looks, 1 if self._screening else len(self._contenders))

    def _no_contender_reason(self, ranked: list[str]) -> str:
        return ERM_CHOSEN if ranked else (ALL_FAILED if self._all_failed() else NO_ELIGIBLE)

    def _all_failed(self) -> bool:
        others = [label for label in self.labels if label != self.reference]
        return bool(others) and all(label in self._failed for label in others)

    def _evaluate_confirmation(self) -> None:
        reference = self._test[self.reference]
        if not self._contenders:  # ERM alone (reference_alone): its figures, nothing to decide
            if len(reference) >= 2:
                self._verdicts[self.reference] = judge_figures(
                    reference, None, hard_classes=self.hard_classes, reference_label=self.reference,
                    alpha=self.design.alpha)
            ranked = self._ranked(self._choice) if self._choice is not None else []
            self._finish(self._no_contender_reason(ranked))
            return
        if self._screening:
            self._evaluate_screen()
            return
        if self._offset:  # after a screen: the finalist's and ERM's fresh seeds only
            screened = set(self.confirmation_seeds[:self._offset])
            reference = {s: f for s, f in reference.items() if s not in screened}
        last = self._stage == len(self._looks) - 1
        level, spread = self.design.look_level(self, self._levels[self._stage])
        adoptable: list[tuple[float, str]] = []
        for label in list(self._active):
            figures = self._test[label]
            if self._offset:
                figures = {s: f for s, f in figures.items() if s not in screened}
            verdict = judge_figures(reference, figures, hard_classes=self.hard_classes,
                                    reference_label=self.reference, chosen_label=label, alpha=level,
                                    spread=spread)
            self._verdicts[label] = verdict
            crossed = verdict.p_greater < level
            unstable = self._collapsed.get(label)
            if verdict.outcome == CONFIRMED and unstable:
                verdict.outcome = UNSTABLE
                verdict.collapsed_seeds = sorted(set(verdict.collapsed_seeds) | set(unstable))
            if verdict.outcome == CONFIRMED:
                decision = ADOPT
                adoptable.append((verdict.mean_difference, label))
            elif verdict.outcome == UNSTABLE:
                decision = UNSTABLE_DECISION
            elif crossed:
                decision = OVERALL_COST
            elif last:
                decision = STOP
            elif self.design.futility is not None and verdict.t_statistic <= self.design.futility:
                decision = FUTILITY
            else:
                decision = CONTINUE
            index = self._stage + (1 if self._offset else 0)  # the screen is look 0
            self._looks_done.append(Look(label, index, verdict.seeds, verdict.mean_difference,
                                         verdict.t_statistic, verdict.p_greater, level,
                                         verdict.overall_cost, decision))
            if decision in (OVERALL_COST, FUTILITY, UNSTABLE_DECISION):
                self._active.remove(label)
                self._ruled_out[label] = (
                    "significant on the hard tier but overall accuracy worse beyond noise"
                    if decision == OVERALL_COST else
                    _unstable_reason(verdict) if decision == UNSTABLE_DECISION
                    else f"futility at look {self._stage + 1}")
        if adoptable:
            order = {label: i for i, label in enumerate(self.labels)}
            self._adopted = max(adoptable, key=lambda item: (item[0], -order[item[1]]))[1]
            self._finish(CONFIRMED_REASON)
            return
        if last or not self._active:
            self._finish(self._final_reason())
            return
        self._stage += 1

    def _evaluate_screen(self) -> None:
        """The screen's results are in: the finalist (largest mean hard-tier change among the
        contenders above the futility bound, overall accuracy not worse, no unstable run), or none."""
        reference = self._screen_runs(self.reference)
        runs = {label: self._screen_runs(label) for label in self._active}
        hard = self._screen_classes()
        if hard is not None:
            reference = {s: rescored(f, hard) for s, f in reference.items()}
            runs = {label: {s: rescored(f, hard) for s, f in figures.items()}
                    for label, figures in runs.items()}
        bound = 0.0 if self.design.futility is None else self.design.futility
        passing: list[tuple[float, str]] = []
        order = {label: i for i, label in enumerate(self.labels)}
        why: dict[str, str] = {}  # why a contender above the bound cannot be the finalist
        for label in list(self._active):
            verdict = judge_figures(reference, runs[label], hard_classes=self.hard_classes,
                                    reference_label=self.reference, chosen_label=label,
                                    alpha=self.design.alpha)
            self._verdicts[label] = verdict
            # a collapsed run of its own (selection or screen); ERM's collapse is not the contender's
            unstable = (bool(self._collapsed.get(label)) or verdict.outcome == UNSTABLE
                        or any(f.collapsed for f in runs[label].values()))
            if verdict.t_statistic > bound and verdict.overall_cost:
                why[label] = "overall accuracy below ERM's by more than ERM's seed SE"
            elif verdict.t_statistic > bound and unstable:
                why[label] = "a run tripped the feature-collapse guard"
            elif verdict.t_statistic > bound and math.isfinite(verdict.mean_difference):
                passing.append((verdict.mean_difference, label))
            elif verdict.t_statistic > bound:
                why[label] = "no finite hard-tier change"
        finalist = max(passing, key=lambda item: (item[0], -order[item[1]]))[1] if passing else None
        for label in list(self._active):
            verdict = self._verdicts[label]
            decision = (FINALIST if label == finalist
                        else FUTILITY if not verdict.t_statistic > bound else SCREENED_OUT)
            self._looks_done.append(Look(label, 0, verdict.seeds, verdict.mean_difference,
                                         verdict.t_statistic, verdict.p_greater, 0.0,
                                         verdict.overall_cost, decision))
            if label != finalist:
                self._active.remove(label)
                seeds = (f"{len(verdict.seeds)} seeds, the first selection seed's among them"
                         if self.design.screen_reuse else f"{len(verdict.seeds)} fresh seeds")
                self._ruled_out[label] = (
                    f"futility at the screen ({seeds})" if decision == FUTILITY
                    else f"screened out: {why[label]} on the screen's {seeds}" if label in why
                    else f"screened out: {finalist} changed the test hard tier more on the screen's "
                         f"{seeds}")
        self._screening = False
        self._offset = self._screen_size
        self._finalist = finalist
        self._stage = 0
        if finalist is None:
            self._finish(self._final_reason())

    def _screen_runs(self, label: str) -> dict[int, SeedFigures]:
        """A contender's (or ERM's) test figures on the screen's seeds: the first selection seed's
        (with :attr:`Design.screen_reuse`) and the screen's fresh seeds."""
        return {**self._reused[label], **self._test[label]}

    def _screen_classes(self) -> list[int] | None:
        """The hard tier of ERM's mean per-class test accuracy over the screen's runs (None: no
        ``screen_tiers``, or a screen run without per-class figures)."""
        runs = [f for label in [self.reference, *self._active] for f in self._screen_runs(label).values()]
        if not self.design.screen_tiers or not all(f.per_class for f in runs):
            return None
        accuracy = np.mean([f.per_class for f in self._screen_runs(self.reference).values()], axis=0)
        ranked = np.flatnonzero(~np.isnan(accuracy))
        if ranked.size == 0:
            return None
        tiers = assign_tiers(accuracy[ranked], min(3, int(ranked.size)))
        every = np.full(accuracy.shape[0], -1, dtype=np.int64)
        every[ranked] = tiers
        self._screen_tiers = [int(t) for t in every]
        self._screen_accuracy = [float(a) for a in accuracy]
        return [int(k) for k in ranked[tiers == tiers.max()]]

    def _final_reason(self) -> str:
        decisions = {look.contender: look.decision for look in self._looks_done}
        if any(d == UNSTABLE_DECISION for d in decisions.values()):
            return UNSTABLE_REASON
        if any(d == OVERALL_COST for d in decisions.values()):
            return OVERALL_COST
        # after a screen, the finalist is the contender the advice speaks of
        best = self._finalist or (self._contenders[0] if self._contenders else None)
        verdict = self._verdicts.get(best) if best in decisions else None
        if verdict is not None and verdict.p_less < self.design.alpha:  # the best contender is worse
            return CONTRADICTED
        if self._contenders and all(label in self._ruled_out and label not in decisions
                                    for label in self._contenders):
            return ALL_FAILED
        return INCONCLUSIVE

    def _finish(self, reason: str) -> None:
        self._reason = reason
        self._active = []
        self._done = True
