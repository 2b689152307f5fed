"""The tune's picture: ``tune.html`` and its PNGs, written beside ``recommendation.json``.

Two figures, each with the numbers it draws in a table below it:

- **the selection's race** (``tune-race.png``): per selection stage, every candidate's validation
  score on the criterion (mean over the stage's seeds ± one seed standard error, the unit the rule
  uses; a candidate with one seed has no interval), ERM's as a line, and who went on (to the next
  stage, or to the confirmation after the last);
- **the confirmation's looks** (``tune-confirmation.png``): per contender and look, its test hard-tier
  change against ERM (mean of the per-seed paired differences, in points) with its 95% t interval,
  and the boundary: the mean change the look needed for adoption, ``t_{1 - a_j, n - 1} x SE`` with
  ``a_j`` the look's nominal level and ``SE`` the spread the verdict's t-test used (its floor
  included) over ``sqrt(n)``, so a point above its boundary is a look whose p-value was below its
  level; and (``tune-classes.png``) each contender's per-class test change against ERM, classes by
  name, hardest first (ranked on ERM's validation accuracy), the hard tier shaded.

:func:`picture_data` computes every number (pure, no matplotlib); :func:`write_picture` draws them
(matplotlib's Agg renderer, never ``pyplot``) and writes the page. Class names are used wherever a
class is named.
"""

from __future__ import annotations

import html
import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mr2.io import atomic_write_bytes, atomic_write_text
from mr2.tune.design import Advice
from mr2.tune.selection import ValidationFigures, choose
from mr2.tune.verdict import SeedFigures, judge_figures

__all__ = [
    "PICTURE_FILE",
    "ClassChange",
    "LookPoint",
    "Picture",
    "RaceEntry",
    "RaceStage",
    "picture_data",
    "stage_sizes",
    "write_picture",
]

#: The page, beside ``recommendation.json``.
PICTURE_FILE = "tune.html"
RACE_PNG = "tune-race.png"
CONFIRMATION_PNG = "tune-confirmation.png"
CLASSES_PNG = "tune-classes.png"
_CRITERION = {"hard_tier": "validation hard-tier accuracy", "worst_class": "validation worst-class accuracy",
              "overall": "validation overall accuracy"}


@dataclass(frozen=True)
class RaceEntry:
    """One candidate at one selection stage.

    Attributes:
        label: the candidate.
        seeds: its selection seeds at this stage.
        mean, se: its score's mean and seed standard error (fractions; ``se`` NaN with one seed).
        went_on: it went on to the next stage (after the last: to the confirmation).
    """

    label: str
    seeds: list[int]
    mean: float
    se: float
    went_on: bool


@dataclass(frozen=True)
class RaceStage:
    """One selection stage: ERM's entry first, then the candidates, best first."""

    number: int
    seeds: int
    entries: list[RaceEntry]


@dataclass(frozen=True)
class LookPoint:
    """One contender at one look of the confirmation (fractions; the page shows points).

    Attributes:
        contender, look: who and which look (0-based).
        seeds: the paired seeds so far.
        mean: mean test hard-tier change against ERM.
        se: the t-test's standard error (``max(sd, floor) / sqrt(n)``).
        low, high: the 95% t interval of the mean change.
        needed: the boundary: the mean change above which this look's p-value is below its level.
        level: the look's nominal level.
        decision: the plan's decision (:class:`mr2.tune.design.Look`).
    """

    contender: str
    look: int
    seeds: list[int]
    mean: float
    se: float
    low: float
    high: float
    needed: float
    level: float
    decision: str


@dataclass(frozen=True)
class ClassChange:
    """One contender's per-class test change against ERM over their paired confirmation seeds."""

    contender: str
    seeds: list[int]
    change: list[float]


@dataclass
class Picture:
    """Everything the page draws (see the module docstring)."""

    title: str
    advice: str
    criterion: str
    reference: str
    stages: list[RaceStage]
    looks: list[LookPoint]
    class_names: list[str]
    hard_classes: list[int]
    order: list[int]
    ranking: list[float]
    changes: list[ClassChange] = field(default_factory=list)
    ruled_out: dict[str, str] = field(default_factory=dict)
    report: str | None = None
    adopted: str | None = None


def stage_sizes(selection_looks: Sequence[int] | None, pool: int) -> list[int]:
    """Cumulative seeds per selection stage, clipped to the pool, as the plan runs them.

    >>> stage_sizes((1, 3), 3), stage_sizes((1, 3), 2), stage_sizes(None, 4)
    ([1, 3], [1, 2], [4])
    """
    return sorted({min(n, pool) for n in selection_looks}) if selection_looks is not None else [pool]


def _race(validation: Mapping[str, Mapping[int, ValidationFigures]], reference: str, criterion: str,
          seeds: Sequence[int], sizes: Sequence[int], attempted: set[tuple[str, int]],
          contenders: Sequence[str]) -> list[RaceStage]:
    stages = []
    labels = [reference, *(label for label in validation if label != reference)]
    for j, n in enumerate(sizes):
        wanted = {label: seeds[:max(2, n) if label == reference else n] for label in labels}
        runs = {label: [validation[label][s] for s in wanted[label]] for label in labels
                if all(s in validation.get(label, {}) for s in wanted[label])}
        if reference not in runs:
            break
        choice = choose(runs, criterion, reference)
        last = j == len(sizes) - 1
        following = seeds[n:sizes[j + 1]] if not last else []
        entries = []
        for score in choice.scores:
            went_on = (score.label in contenders if last else
                       any((score.label, s) in attempted for s in following))
            entries.append(RaceEntry(score.label, list(score.seeds), score.mean, score.se,
                                     score.label == reference or went_on))
        ref, others = entries[0], entries[1:]
        others.sort(key=lambda e: (-(e.mean if not math.isnan(e.mean) else -math.inf), labels.index(e.label)))
        stages.append(RaceStage(j + 1, n, [ref, *others]))
    return stages


def _degrees_of_freedom(t: float, p: float, n: int) -> int | float:
    """The degrees of freedom of the t distribution under which ``p`` is the one-sided p-value of
    ``t`` (``n - 1`` for a contender's own spread; more when the spread is pooled over the contenders),
    found from the look's own figures; ``n - 1`` when they do not pin it down."""
    from scipy import optimize, stats

    if not (math.isfinite(t) and t != 0 and 0 < p < 1):
        return n - 1

    def gap(log_df: float) -> float:
        return float(stats.t.sf(t, math.exp(log_df))) - p

    low, high = 0.0, math.log(1e6)
    if gap(low) * gap(high) > 0:
        return n - 1
    return math.exp(optimize.brentq(gap, low, high, xtol=1e-10))


def _looks(advice: Advice, test: Mapping[str, Mapping[int, SeedFigures]], reference: str) -> list[LookPoint]:
    """Each look's interval and boundary on the mean change's scale, from the figures the look tested:
    the standard error its t statistic used (``mean / t``; the contender's own spread, floor
    included, recomputed when the look used it) and the t distribution its p-value came from."""
    from scipy import stats

    points = []
    for look in advice.looks:
        n = len(look.seeds)
        own = judge_figures({s: test[reference][s] for s in look.seeds},
                            {s: test[look.contender][s] for s in look.seeds}, chosen_label=look.contender)
        mean, t = look.mean_difference, look.statistic
        if math.isclose(own.t_statistic, t, rel_tol=1e-9, abs_tol=1e-12) or not math.isfinite(t) or t == 0:
            se, df = max(own.sd_difference, own.sd_floor) / math.sqrt(n), float(n - 1)
        else:
            se, df = mean / t, float(_degrees_of_freedom(t, look.p_greater, n))
        half = float(stats.t.ppf(0.975, df)) * se
        needed = float(stats.t.isf(look.boundary, df)) * se
        points.append(LookPoint(look.contender, look.look, list(look.seeds), mean, se, mean - half,
                                mean + half, needed, look.boundary, look.decision))
    return points


def _class_changes(per_class: Mapping[str, Mapping[int, np.ndarray]], reference: str,
                   contenders: Sequence[str]) -> list[ClassChange]:
    changes = []
    for label in contenders:
        seeds = sorted(set(per_class.get(label, {})) & set(per_class.get(reference, {})))
        if not seeds:
            continue
        diff = np.stack([per_class[label][s] - per_class[reference][s] for s in seeds])
        with np.errstate(all="ignore"):
            mean = np.where(np.isnan(diff).all(0), np.nan, np.nanmean(np.where(np.isnan(diff), 0, diff), 0))
        changes.append(ClassChange(label, seeds, [float(v) for v in mean]))
    return changes


def picture_data(*, title: str, advice_line: str, advice: Advice, reference: str, criterion: str,
                 selection_seeds: Sequence[int], selection_looks: Sequence[int] | None,
                 validation: Mapping[str, Mapping[int, ValidationFigures]], attempted: set[tuple[str, int]],
                 test: Mapping[str, Mapping[int, SeedFigures]],
                 per_class: Mapping[str, Mapping[int, np.ndarray]], num_classes: int,
                 class_names: Sequence[str] | None, hard_classes: Sequence[int],
                 report: str | None = None) -> Picture:
    """Every number the page draws, from the figures the tune fed its plan.

    Args:
        title, advice_line: the page's heading and the advice in one line.
        advice: the plan's advice (its looks and contenders).
        reference, criterion: ERM's label and the selection criterion.
        selection_seeds, selection_looks: the selection pool and the design's stages.
        validation: label -> seed -> validation figures of every selection trial that finished.
        attempted: ``(label, seed)`` of every selection trial run (finished or failed).
        test: label -> seed -> test figures on the hard tier, of every confirmation trial (and of the
            selection trials whose test figures a screen counted, :attr:`Design.screen_reuse`).
        per_class: label -> seed -> per-class test accuracy [K] of every confirmation trial.
        num_classes: K.
        class_names: K names (None: the ids).
        hard_classes: the confirmation's hard tier.
        report: the confirmation report's page, relative to the picture (None: none).
    """
    names = [str(n) for n in class_names] if class_names is not None else [str(k) for k in range(num_classes)]
    erm = [validation[reference][s].per_class_accuracy for s in sorted(validation.get(reference, {}))]
    if erm:
        values = np.array(erm, dtype=np.float64)
        present = ~np.isnan(values)
        sums = np.where(present, values, 0).sum(0) / np.maximum(present.sum(0), 1)
        ranking = np.where(present.any(0), sums, np.nan)
    else:
        ranking = np.full(num_classes, np.nan)
    order = sorted(range(num_classes), key=lambda k: (math.isnan(ranking[k]), ranking[k], k))
    sizes = stage_sizes(selection_looks, len(selection_seeds))
    return Picture(
        title=title, advice=advice_line, criterion=criterion, reference=reference,
        stages=_race(validation, reference, criterion, list(selection_seeds), sizes, attempted,
                     advice.contenders),
        looks=_looks(advice, test, reference) if advice.looks else [],
        class_names=names, hard_classes=list(hard_classes), order=order,
        ranking=[float(v) for v in ranking],
        changes=_class_changes(per_class, reference, advice.contenders),
        ruled_out=dict(advice.ruled_out), report=report, adopted=advice.use if advice.adopt else None)


# -- drawing -----------------------------------------------------------------------------------

_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")


def _png(figure: Any) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight", metadata={"Software": None})
    return buffer.getvalue()


def _race_figure(picture: Picture) -> Any:
    from matplotlib.figure import Figure

    stages = picture.stages
    rows = max(len(stage.entries) for stage in stages)
    figure = Figure(figsize=(5.2 * len(stages), 0.9 + 0.32 * rows), layout="constrained")
    axes = figure.subplots(1, len(stages), squeeze=False)[0]
    for ax, stage in zip(axes, stages, strict=True):
        ref = stage.entries[0]
        y = np.arange(len(stage.entries))[::-1]
        for row, entry in zip(y, stage.entries, strict=True):
            color = ("black" if entry.label == picture.reference else
                     "#1f77b4" if entry.went_on else "#9a9a9a")
            if not math.isnan(entry.se):
                ax.errorbar(100 * entry.mean, row, xerr=100 * entry.se, fmt="o", color=color, capsize=3)
            else:
                ax.plot(100 * entry.mean, row, "o", color=color, markerfacecolor="white")
        ax.axvline(100 * ref.mean, color="black", linewidth=0.8, linestyle="--")
        ticks = [f"{e.label}{' (ERM)' if e.label == picture.reference else ''}" for e in stage.entries]
        ax.set_yticks(y, ticks, fontsize=8)
        went = "to the confirmation" if stage is stages[-1] else "to the next stage"
        ax.set_title(f"stage {stage.number}: {stage.seeds} seed{'s' if stage.seeds != 1 else ''}\n"
                     f"blue: went on {went}; grey: stopped; open: one seed", fontsize=9)
        criterion = _CRITERION.get(picture.criterion, picture.criterion)
        ax.set_xlabel(f"{criterion} (%), mean ± seed SE", fontsize=8)
        ax.grid(axis="x", alpha=0.3)
    return figure


def _confirmation_figure(picture: Picture) -> Any:
    from matplotlib.figure import Figure

    contenders = list(dict.fromkeys(point.contender for point in picture.looks))
    figure = Figure(figsize=(7.5, 4.2), layout="constrained")
    ax = figure.subplots()
    width = 0.6 / max(1, len(contenders))
    # Boundaries far above the intervals (few seeds, small levels) are drawn at the top edge, with
    # their value, so that the intervals stay readable.
    top = max(0.0, *(100 * p.high for p in picture.looks)) * 1.3 + 1.0
    bottom = min(0.0, *(100 * p.low for p in picture.looks)) * 1.3 - 1.0
    for i, label in enumerate(contenders):
        color = _COLORS[i % len(_COLORS)]
        points = [p for p in picture.looks if p.contender == label]
        x = np.array([p.look + 1 for p in points], dtype=np.float64) + (i - (len(contenders) - 1) / 2) * width
        mean = np.array([100 * p.mean for p in points])
        low = np.array([100 * p.low for p in points])
        high = np.array([100 * p.high for p in points])
        ax.errorbar(x, mean, yerr=[mean - low, high - mean], fmt="o-", color=color, capsize=3,
                    label=f"{label}: change, 95% interval")
        needed = np.array([100 * p.needed for p in points])
        ax.plot(x, np.minimum(needed, top), linestyle=":", marker="_", markersize=14, color=color,
                label=f"{label}: boundary (change needed to adopt)")
        for xi, value in zip(x, needed, strict=True):
            if value > top:
                ax.annotate(f"boundary {value:.0f} ^", (xi, top), textcoords="offset points", xytext=(0, -10),
                            fontsize=7, color=color, ha="center")
        for xi, p in zip(x, points, strict=True):
            word = {"futility": "futility", "overall_cost": "overall cost", "stop": "stopped",
                    "adopt": "ADOPTED" if p.contender == picture.adopted else "passed"}.get(p.decision)
            if word:
                ax.annotate(word, (xi, 100 * p.mean), textcoords="offset points", xytext=(6, -10), fontsize=7,
                            color=color)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_ylim(bottom, top)
    looks = sorted({p.look for p in picture.looks})
    seeds = {p.look: len(p.seeds) for p in picture.looks}
    ax.set_xticks([j + 1 for j in looks], [f"look {j + 1}\n{seeds[j]} seeds" for j in looks])
    hard = ", ".join(picture.class_names[k] for k in picture.hard_classes)
    ax.set_title(f"Confirmation on fresh seeds: test hard-tier change against ERM\nhard tier: {hard}",
                 fontsize=9)
    ax.set_ylabel("points (contender minus ERM, paired by seed)", fontsize=8)
    ax.legend(fontsize=7, loc="best")
    ax.grid(axis="y", alpha=0.3)
    return figure


def _classes_figure(picture: Picture) -> Any:
    from matplotlib.figure import Figure

    k = len(picture.order)
    figure = Figure(figsize=(max(6.0, 0.45 * k + 2), 4.0), layout="constrained")
    ax = figure.subplots()
    width = 0.8 / max(1, len(picture.changes))
    positions = np.arange(k)
    hard = set(picture.hard_classes)
    for position, klass in zip(positions, picture.order, strict=True):
        if klass in hard:
            ax.axvspan(position - 0.5, position + 0.5, color="#f3e0c0", zorder=0)
    for i, change in enumerate(picture.changes):
        values = [100 * change.change[klass] for klass in picture.order]
        ax.bar(positions + (i - (len(picture.changes) - 1) / 2) * width, values, width,
               color=_COLORS[i % len(_COLORS)], label=f"{change.contender} ({len(change.seeds)} seeds)")
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(positions, [picture.class_names[klass] for klass in picture.order], rotation=45, ha="right",
                  fontsize=8)
    ax.set_ylabel("test accuracy change against ERM (points)", fontsize=8)
    ax.set_title("Per class, hardest first (ranked on ERM's validation accuracy); shaded: the hard tier",
                 fontsize=9)
    if picture.changes:
        ax.legend(fontsize=7)
    return figure


def _points(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{100 * value:+.2f}"


def _percent(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{100 * value:.2f}"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], table_id: str) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1100px; margin: 1.5em auto; padding: 0 1em;
       color: #222; }
img { max-width: 100%; height: auto; border: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0 1.5em; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.5em; text-align: left; }
.advice { font-size: 1.05em; background: #f4f6fa; padding: 0.6em 0.8em; border-left: 4px solid #1f77b4; }
.box { overflow-x: auto; }
"""


def _page(picture: Picture, images: Mapping[str, str]) -> str:
    e = html.escape
    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{e(picture.title)}</title>"
             f"<style>{_STYLE}</style></head><body>", f"<h1>{e(picture.title)}</h1>",
             f"<p class='advice' id='advice'>{e(picture.advice)}</p>"]
    criterion = _CRITERION.get(picture.criterion, picture.criterion)
    parts.append("<h2>Selection: the race on the validation split</h2>")
    parts.append(f"<p>Each candidate's {e(criterion)} per stage (mean over the stage's seeds ± one seed "
                 "standard error; no interval with one seed). Who went on: to the next stage, or after the "
                 "last stage to the confirmation on fresh seeds.</p>")
    if "race" in images:
        parts.append(f"<img id='race' src='{e(images['race'])}' alt='the selection race per stage'>")
    rows = [[str(stage.number), str(stage.seeds), entry.label, _percent(entry.mean), _percent(entry.se),
             "reference" if entry.label == picture.reference else ("yes" if entry.went_on else "no")]
            for stage in picture.stages for entry in stage.entries]
    parts.append("<div class='box'>" + _table(["stage", "seeds", "candidate", f"{criterion} (%)", "seed SE",
                                               "went on"], rows, "race-table") + "</div>")
    if picture.ruled_out:
        parts.append("<p>Ruled out: " + "; ".join(f"{e(k)}: {e(v)}" for k, v in picture.ruled_out.items())
                     + "</p>")
    hard = ", ".join(picture.class_names[k] for k in picture.hard_classes)
    parts.append("<h2>Confirmation: fresh seeds, test split</h2>")
    if picture.looks:
        parts.append(f"<p>Hard tier (ranked on ERM's validation accuracy, fixed before the confirmation): "
                     f"<b id='hard-tier'>{e(hard)}</b>. Each contender's test hard-tier change against ERM "
                     "at each look (mean of the per-seed differences, 95% t interval) and its boundary: the "
                     "mean change that look needed for adoption (its p-value below the look's level).</p>")
        if "confirmation" in images:
            parts.append(f"<img id='confirmation' src='{e(images['confirmation'])}' "
                         "alt='the confirmation looks per contender'>")
        rows = [[str(p.look + 1), str(len(p.seeds)), p.contender, _points(p.mean),
                 f"{_points(p.low)} to {_points(p.high)}", _points(p.needed), f"{100 * p.level:.3g}%",
                 p.decision]
                for p in picture.looks]
        parts.append("<div class='box'>" + _table(["look", "seeds", "contender", "change (points)",
                                                   "95% interval", "boundary", "level", "decision"], rows,
                                                  "looks-table") + "</div>")
    else:
        parts.append(f"<p>No contender was confirmed (hard tier: <b id='hard-tier'>{e(hard)}</b>).</p>")
    if picture.changes:
        parts.append("<h2>Per class</h2>")
        if "classes" in images:
            parts.append(f"<img id='classes' src='{e(images['classes'])}' alt='per-class test change'>")
        rows = [[picture.class_names[k], _percent(picture.ranking[k]),
                 "hard" if k in picture.hard_classes else "",
                 *(_points(c.change[k]) for c in picture.changes)] for k in picture.order]
        headers = ["class", "ERM validation accuracy (%)", "tier",
                   *(f"{c.contender} change (points)" for c in picture.changes)]
        parts.append("<div class='box'>" + _table(headers, rows, "classes-table") + "</div>")
    if picture.report:
        parts.append(f"<p>The confirmation's full report: <a href='{e(picture.report)}'>"
                     f"{e(picture.report)}</a>; the record: "
                     "<a href='recommendation.json'>recommendation.json</a>.</p>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


def write_picture(directory: Path, picture: Picture) -> Path:
    """Draw the figures and write ``tune.html`` and its PNGs into ``directory`` (atomically); the
    page's path.

    Raises:
        ImportError: matplotlib is not installed (``pip install 'mr2[report]'``).
    """
    import matplotlib  # noqa: F401  (a clear ImportError before anything is written)

    images: dict[str, str] = {}
    figures = {"race": (RACE_PNG, _race_figure) if picture.stages else None,
               "confirmation": (CONFIRMATION_PNG, _confirmation_figure) if picture.looks else None,
               "classes": (CLASSES_PNG, _classes_figure) if picture.changes else None}
    for key, item in figures.items():
        if item is None:
            continue
        name, draw = item
        atomic_write_bytes(directory / name, _png(draw(picture)))
        images[key] = name
    page = directory / PICTURE_FILE
    atomic_write_text(page, _page(picture, images))
    return page
