"""Research options of ``mr2 tune``'s design (issue 44), measured in the operating-characteristics
benchmark and NOT shipped: the options, and a :class:`ResearchDesign` that carries them into the
shipped :class:`mr2.tune.design.Plan`.

None of them raised power by the rule stated in docs/benchmarks/tune-operating-characteristics.md
(which gives every figure), so :mod:`mr2.tune.design` holds the shipped rule only (union nominal
levels, each contender's own variance, Bonferroni over the contenders). Kept here so that the
benchmark's designs that use them (``benchmarks/tune_operating_characteristics.py``'s ``DESIGNS``,
``benchmarks/tune_design_search.py``) still run, bit for bit as when they were measured:

- ``boundaries="recursive"``: the group-sequential boundaries computed for normal statistics
  (:func:`spending_boundaries`, Armitage-McPherson-Rowe recursive integration; slightly liberal with
  t-tests on few seeds);
- ``boundaries="binding"``: the levels of one-sided paired t-tests at the looks' seed counts with the
  futility stops counted on (:func:`binding_levels`): it passed its simulated rule (+4.3 points at
  +0.5 with the null at 3.8 % instead of 2.7 %), but on real trainings it found nothing more and
  adopted a useless configuration in 6.5 % of the new-user study's null tunes instead of 2.9 %
  (BENCHMARKS.md section 10d);
- ``variance="pooled"``: each contender's t-test uses the larger of its own SD and the two-way
  residual pooled over ERM and every contender (:func:`pooled_spread`);
- ``multiplicity="max_t"`` (needs ``variance="pooled"``): the contenders share each look's level
  through their largest t (Dunnett-type, :func:`max_t_level`) instead of Bonferroni.

How a plan uses them: the shipped :class:`~mr2.tune.design.Plan` asks its design for the
confirmation's nominal levels (:meth:`mr2.tune.design.Design.look_levels`) and, at each look, for
the level and the spread the contenders' tests use (:meth:`mr2.tune.design.Design.look_level`);
:class:`ResearchDesign` overrides both. So a ``ResearchDesign`` goes wherever a ``Design`` goes (the
benchmark's ``Plan``, ``benchmarks/tune_real_runs.py``, ``mr2.tune.tune(design=...)`` in
studies/tune_new_user/replay.py) and is honoured there; :func:`research` turns a shipped design into
one with research options.

Imported by path under the name ``tune_research_design`` (the benchmarks are scripts, not a package):
``_research_module`` in benchmarks/tune_operating_characteristics.py (which the other benchmark
scripts load), ``helpers.load_script`` in tests/benchmarks/test_research_design*.py.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from mr2.tune.design import BAD_DESIGN, SPENDING_RULES, Design, _spent, nominal_levels

if TYPE_CHECKING:
    from mr2.tune.design import Plan

__all__ = [
    "BINDING_DRAWS",
    "BINDING_SEED",
    "BOUNDARIES",
    "MULTIPLICITIES",
    "VARIANCES",
    "ResearchDesign",
    "binding_levels",
    "levels",
    "max_t_critical",
    "max_t_level",
    "pooled_spread",
    "research",
    "spending_boundaries",
]

#: How the nominal levels are derived from the spending (see :func:`levels`).
BOUNDARIES = ("union", "recursive", "binding")
Boundaries = Literal["union", "recursive", "binding"]
#: Null sequences of paired differences behind the ``binding`` levels (:func:`binding_levels`), and
#: the generator's seed: the levels are a fixed function of the design.
BINDING_DRAWS = 2_000_000
BINDING_SEED = 44
#: How each look's test gets its spread (see :func:`pooled_spread`).
VARIANCES = ("own", "pooled")
Variance = Literal["own", "pooled"]
#: How the level is shared among the contenders (see :func:`max_t_critical`).
MULTIPLICITIES = ("bonferroni", "max_t")
Multiplicity = Literal["bonferroni", "max_t"]


# ---------------------------------------------------------------------------------------------
# Group-sequential boundaries for normal statistics, and levels with a binding futility stop
# ---------------------------------------------------------------------------------------------

def spending_boundaries(fractions: Sequence[float], alpha: float, rule: str,
                        *, step: float = 0.01) -> list[float]:
    """One-sided group-sequential boundaries on the normal scale (upper z critical values).

    For a standardised statistic observed at information fractions ``t_1 < ... < t_L = 1`` (its
    values at two looks correlated ``sqrt(t_i / t_j)``), the boundaries ``c_j`` satisfy::

        P(Z_1 < c_1, ..., Z_{j-1} < c_{j-1}, Z_j >= c_j) = A(t_j) - A(t_{j-1})

    under the null, ``A`` the spending function of ``rule`` (``obrien_fleming`` or ``pocock``,
    Lan & DeMets 1983) with ``A(1) = alpha``. Computed by the recursive numerical integration of
    Armitage, McPherson and Rowe (1969) on the score scale ``S_j = Z_j sqrt(t_j)`` (independent
    normal increments of variance ``t_j - t_{j-1}``), on a grid of width ``step``, each ``c_j``
    found by root search (``scipy.optimize.brentq``). ``rule="bonferroni"`` gives
    ``z_{1 - alpha / L}`` at every look (no integration: valid for any dependence).

    Args:
        fractions: increasing information fractions in (0, 1]; the last is taken as 1.
        alpha: one-sided level over all looks.
        rule: one of :data:`SPENDING_RULES`.
        step: the integration grid's spacing on the score scale.

    Returns:
        ``[c_1, ..., c_L]`` (``inf`` where nothing is spent).

    Example (two equally spaced looks, one-sided 2.5 %; gsDesign's ``sfLDOF`` and ``sfLDPocock``
    give 2.963, 1.969 and 2.157, 2.201):
        >>> [round(c, 3) for c in spending_boundaries([0.5, 1.0], 0.025, "obrien_fleming")]
        [2.963, 1.969]
        >>> [round(c, 3) for c in spending_boundaries([0.5, 1.0], 0.025, "pocock")]
        [2.157, 2.201]
    """
    return list(_boundaries(tuple(float(f) for f in fractions), float(alpha), rule, float(step)))


@functools.lru_cache(maxsize=256)
def _boundaries(fractions: tuple[float, ...], alpha: float, rule: str, step: float) -> tuple[float, ...]:
    from scipy import optimize, stats

    if rule not in SPENDING_RULES:
        raise ValueError(BAD_DESIGN.format(detail=f"spending rule {rule!r} not in {SPENDING_RULES}"))
    t = np.asarray(fractions, dtype=np.float64) / float(fractions[-1])
    if rule == "bonferroni":
        return (float(stats.norm.isf(alpha / t.size)),) * int(t.size)
    spent = [_spent(rule, float(f), alpha) for f in t]
    increments = np.diff(np.concatenate([[0.0], spent]))
    bounds: list[float] = []
    grid = np.zeros(0)
    density = np.zeros(0)  # sub-density of S_j on the continuation region, on ``grid``
    previous = 0.0
    for j, (fraction, pi) in enumerate(zip(t, increments, strict=True)):
        delta = fraction - previous
        sd = math.sqrt(delta)
        if j == 0:
            c = float(stats.norm.isf(pi)) if pi > 0 else math.inf
            bounds.append(c)
            upper = c * math.sqrt(fraction) if math.isfinite(c) else 10.0 * sd
            grid = _grid(-10.0 * sd, upper, step)
            density = stats.norm.pdf(grid, scale=sd)
            previous = fraction
            continue
        spacing = grid[1] - grid[0]
        weights = np.full(grid.size, spacing)
        weights[[0, -1]] = spacing / 2.0
        mass = density * weights
        if pi <= 0:
            c = math.inf
        else:
            low, high = grid[0] - 10 * sd, grid[-1] + 10 * sd
            b = optimize.brentq(_excess_crossing, low, high, args=(grid, mass, sd, float(pi)), xtol=1e-10)
            c = b / math.sqrt(fraction)
        bounds.append(float(c))
        upper = c * math.sqrt(fraction) if math.isfinite(c) else grid[-1] + 10 * sd
        new_grid = _grid(grid[0] - 10.0 * sd, upper, step)
        density = (stats.norm.pdf((new_grid[:, None] - grid[None, :]) / sd) / sd) @ mass
        grid = new_grid
        previous = fraction
    return tuple(bounds)


def _grid(low: float, high: float, step: float) -> np.ndarray:
    """Points from ``low`` to ``high`` (both included) about ``step`` apart."""
    return np.linspace(low, high, max(math.ceil((high - low) / step) + 1, 3))


def _excess_crossing(bound: float, grid: np.ndarray, mass: np.ndarray, sd: float, target: float) -> float:
    """P(S_{j+1} >= bound, still running at look j) minus ``target``; ``mass`` = the continuation
    sub-density of ``S_j`` times the quadrature weights on ``grid``, ``sd`` = the increment's SD."""
    from scipy import stats

    return float(np.sum(mass * stats.norm.sf((bound - grid) / sd))) - target



def levels(fractions: Sequence[float], alpha: float, rule: str, boundaries: str = "union") -> list[float]:
    """The one-sided nominal level of each look, as :func:`mr2.tune.design.nominal_levels` (the
    shipped union levels) or, with ``boundaries="recursive"``, ``1 - Phi(c_j)`` of
    :func:`spending_boundaries`: exact for normal statistics; applied to t-tests with few seeds (the
    "significance level" approach of Jennison & Turnbull, 2000, section 3.8) slightly liberal (two
    looks at 3 and 6 seeds, 2.5 %: 2.54 % for O'Brien-Fleming type, 2.75 % for Pocock type, by Monte
    Carlo). ``binding`` levels depend on the looks' seed counts: :func:`binding_levels`.

    Example:
        >>> [round(a, 4) for a in levels([0.5, 1.0], 0.025, "obrien_fleming")]
        [0.0015, 0.0235]
        >>> [round(a, 4) for a in levels([0.5, 1.0], 0.025, "obrien_fleming", "recursive")]
        [0.0015, 0.0245]
    """
    from scipy import stats

    if boundaries not in ("union", "recursive"):
        raise ValueError(BAD_DESIGN.format(detail=f"boundaries {boundaries!r} not in ('union', 'recursive')"))
    if rule not in SPENDING_RULES:
        raise ValueError(BAD_DESIGN.format(detail=f"spending rule {rule!r} not in {SPENDING_RULES}"))
    if rule == "bonferroni" or boundaries == "union":
        return nominal_levels(fractions, alpha, rule)
    t = [float(f) / float(fractions[-1]) for f in fractions]
    return [float(stats.norm.sf(c)) for c in spending_boundaries(t, alpha, rule)]


def binding_levels(looks: Sequence[int], alpha: float, rule: str, futility: float | None) -> list[float]:
    """The nominal levels of one-sided paired t-tests at ``looks`` seeds with a BINDING futility stop.

    The rule: at look ``j`` (``looks[j]`` seeds) the test rejects when its p-value is below
    ``a_j``; at every look but the last, a sequence whose t statistic is at or below ``futility``
    stops (None: never). Under the null (mean paired difference 0, normal seed noise) the joint law
    of the t statistics at the looks does not depend on the noise's SD, so the levels can be
    computed once: look 0's is the spending function's first increment, exactly (its t quantile);
    each later look's critical t is set so that the chance of rejecting by that look, among the
    :data:`BINDING_DRAWS` null sequences (generator seed :data:`BINDING_SEED`) that neither rejected
    nor stopped for futility before, is the spending function's cumulative level there. The
    probability of rejecting at any look is then ``alpha`` up to the Monte Carlo error (SE about
    ``sqrt(alpha / BINDING_DRAWS)``, 0.016 % at 5 %), against the union bound's ``alpha`` minus what
    the futility stops take from it (:func:`mr2.tune.design.nominal_levels`): the futility stops are
    counted on, so they must be obeyed (the plan always does). A sequence stopping at a bound
    below ``futility`` (or 0) is never a rejection: a critical t is never below them.

    Example:
        >>> union = nominal_levels([3 / 12, 6 / 12, 9 / 12, 1.0], 0.05, "obrien_fleming")
        >>> binding = binding_levels([3, 6, 9, 12], 0.05, "obrien_fleming", 0.5)
        >>> binding[0] == union[0], binding[-1] > 2 * union[-1]
        (True, True)
    """
    if rule not in SPENDING_RULES:
        raise ValueError(BAD_DESIGN.format(detail=f"spending rule {rule!r} not in {SPENDING_RULES}"))
    counts = tuple(int(n) for n in looks)
    if not counts or counts[0] < 2 or list(counts) != sorted(set(counts)):
        raise ValueError(BAD_DESIGN.format(detail=f"binding looks {counts} must increase from at least 2"))
    return list(_binding_levels(counts, float(alpha), rule, None if futility is None else float(futility)))


@functools.lru_cache(maxsize=32)
def _binding_levels(looks: tuple[int, ...], alpha: float, rule: str,
                    futility: float | None) -> tuple[float, ...]:
    from scipy import stats

    last = len(looks) - 1
    spent = [alpha * (j + 1) / len(looks) if rule == "bonferroni" else _spent(rule, n / looks[-1], alpha)
             for j, n in enumerate(looks)]
    paths = _null_t_paths(looks, BINDING_DRAWS, np.random.default_rng(BINDING_SEED))
    alive = np.ones(BINDING_DRAWS, dtype=bool)
    lowest = max(0.0, futility or 0.0)
    rejected, levels = 0, []
    for j, n in enumerate(looks):
        column = paths[:, j]
        if j == 0:
            c = float(stats.t.isf(spent[0], n - 1))
        else:
            k = math.floor(spent[j] * BINDING_DRAWS) - rejected  # rejections this look may add
            candidates = column[alive]
            c = math.inf if k <= 0 or candidates.size == 0 else float(
                np.partition(candidates, max(candidates.size - k, 0))[max(candidates.size - k, 0)])
        c = max(c, lowest)
        hit = alive & (column >= c)
        rejected += int(hit.sum())
        alive &= ~hit
        if futility is not None and j < last:
            alive &= column > futility
        levels.append(float(stats.t.sf(c, n - 1)))
    return tuple(levels)


def _null_t_paths(looks: tuple[int, ...], draws: int, rng: np.random.Generator,
                  chunk: int = 200_000) -> np.ndarray:
    """One-sample t statistics at ``looks`` of ``draws`` sequences of standard normal differences."""
    counts = np.asarray(looks)
    out = np.empty((draws, counts.size))
    for start in range(0, draws, chunk):
        x = rng.standard_normal((min(chunk, draws - start), int(counts[-1])))
        total = np.cumsum(x, axis=1)[:, counts - 1]
        squares = np.cumsum(x * x, axis=1)[:, counts - 1]
        mean = total / counts
        var = (squares - counts * mean * mean) / (counts - 1)
        out[start:start + x.shape[0]] = mean / np.sqrt(var / counts)
    return out


# ---------------------------------------------------------------------------------------------
# A spread shared by the contenders, and a level shared through their largest t
# ---------------------------------------------------------------------------------------------

def pooled_spread(blocks: Sequence[np.ndarray]) -> tuple[float, int]:
    """The SD of a paired difference pooled over every method's runs, and its degrees of freedom.

    Each block is a ``[methods, seeds]`` array of test hard-tier figures (ERM and the contenders that
    ran all of the block's seeds: the seeds of one look). Under the two-way model
    ``y_ms = mu_m + b_s + e_ms`` (a method effect, a seed effect shared by every method on that seed,
    independent ``e_ms ~ N(0, sigma^2)``), a block's interaction residual
    ``y_ms - ybar_m. - ybar_.s + ybar_..`` has sum of squares ``sigma^2 chi^2`` with
    ``(M - 1)(S - 1)`` degrees of freedom, independent of the methods' means in that block and of the
    other blocks: pooled over the blocks it estimates ``sigma^2`` independently of every mean
    difference a look tests, and a paired difference has SD ``sqrt(2) sigma``.

    Returns:
        ``(sqrt(2) * sigma_hat, df)``; ``(nan, 0)`` without a block of 2 methods and 2 seeds.

    Example:
        >>> block = np.array([[0.70, 0.72, 0.71], [0.74, 0.75, 0.76]])
        >>> sd, df = pooled_spread([block])
        >>> round(sd, 4), df, round(float(np.std(block[1] - block[0], ddof=1)), 4)
        (0.01, 2, 0.01)
    """
    squares, df = 0.0, 0
    for block in blocks:
        y = np.asarray(block, dtype=np.float64)
        if y.ndim != 2 or y.shape[0] < 2 or y.shape[1] < 2:
            continue
        residual = y - y.mean(1, keepdims=True) - y.mean(0, keepdims=True) + y.mean()
        squares += float((residual ** 2).sum())
        df += (y.shape[0] - 1) * (y.shape[1] - 1)
    if df == 0:
        return math.nan, 0
    return math.sqrt(2.0 * squares / df), df


def _max_t_tail(c: float, m: int, df: int, rho: float = 0.5) -> float:
    """P(max_i T_i > c) for ``m`` equicorrelated (``rho``) standard t variables with ``df`` degrees of
    freedom sharing one denominator: ``T_i = (sqrt(rho) W + sqrt(1 - rho) X_i) / S``,
    ``S = sqrt(chi^2_df / df)``; Gauss-Hermite quadrature over W, Gauss-Legendre over the log of the
    chi-square's distribution function (so the small values of S, where the tail lives, are resolved)."""
    from scipy import special

    w_nodes, w_weights = _hermite()
    scale, weights = _chi_nodes(min(int(df), 1000))
    a, b = math.sqrt(rho), math.sqrt(1.0 - rho)
    inner = special.ndtr((c * scale[:, None] - a * w_nodes[None, :]) / b)  # [U, W]
    tail = -np.expm1(m * np.log(np.clip(inner, 1e-300, 1.0)))
    return float(weights @ tail @ w_weights)


@functools.lru_cache(maxsize=1)
def _hermite() -> tuple[np.ndarray, np.ndarray]:
    nodes, weights = np.polynomial.hermite_e.hermegauss(96)
    return nodes, weights / math.sqrt(2.0 * math.pi)


@functools.lru_cache(maxsize=256)
def _chi_nodes(df: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes ``S`` and weights for ``E[f(S)]``, ``S = sqrt(chi^2_df / df)``: ``p = e^t`` the
    distribution function, Gauss-Legendre in ``t`` over ``[-60, 0]`` (the rest has mass e^-60)."""
    from scipy import stats

    nodes, weights = np.polynomial.legendre.leggauss(240)
    t = 30.0 * (nodes - 1.0)  # [-60, 0]
    p = np.exp(t)
    scale = np.sqrt(stats.chi2.ppf(p, df) / df)
    return scale, 30.0 * weights * p


@functools.lru_cache(maxsize=1024)
def max_t_critical(m: int, df: int, level: float) -> float:
    """The one-sided critical value ``c`` with ``P(max of m T_i > c) = level`` for ``m`` t statistics
    with ``df`` degrees of freedom, one shared SD and pairwise correlation 1/2: the contenders'
    paired t statistics at one look, each the difference of a contender's and ERM's means over the
    same seeds, divided by the pooled SD (Dunnett's many-to-one comparison, one-sided).

    Example (Dunnett's one-sided tables give 2.16 for 4 comparisons, infinite df, 5 %; 1 comparison
    is the t quantile):
        >>> round(max_t_critical(4, 10_000, 0.05), 2), round(max_t_critical(1, 8, 0.05), 3)
        (2.16, 1.86)
    """
    from scipy import optimize, stats

    if m == 1:
        return float(stats.t.isf(level, df))
    low = float(stats.t.isf(level, df))  # one comparison: a lower bound
    high = float(stats.t.isf(level / m, df))  # Bonferroni: an upper bound
    if not (_max_t_tail(high, m, df) < level < _max_t_tail(low, m, df)):
        return high  # the quadrature cannot resolve so small a level: Bonferroni's (conservative)
    return float(optimize.brentq(lambda c: _max_t_tail(c, m, df) - level, low, high, xtol=1e-9))


def max_t_level(m: int, df: int, level: float) -> float:
    """The per-contender nominal level that spends ``level`` over ``m`` contenders through their
    largest t (:func:`max_t_critical`): ``P(T_df > c)``; between ``level / m`` (Bonferroni) and
    ``level``.

    Example:
        >>> round(max_t_level(4, 30, 0.0125) / (0.0125 / 4), 2)  # about a sixth more than Bonferroni
        1.17
    """
    from scipy import stats

    return float(stats.t.sf(max_t_critical(int(m), int(df), float(level)), int(df)))



# ---------------------------------------------------------------------------------------------
# A design carrying the research options
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ResearchDesign(Design):
    """A :class:`mr2.tune.design.Design` with the research options; with their defaults
    (``union``, ``own``, ``bonferroni``) it is the shipped rule.

    Attributes:
        boundaries: ``union`` (the shipped levels), ``recursive`` (group-sequential boundaries for
            normal statistics, :func:`levels`) or ``binding`` (the levels of one-sided paired t-tests
            at the looks' seed counts with the futility stops counted on, :func:`binding_levels`:
            each contender's chance of a false adoption is its whole share of ``alpha``, not less;
            the plan always obeys the futility stop).
        variance: ``own``: each contender's t-test uses the SD of its own differences; ``pooled``:
            the larger of that and the spread pooled over ERM and every contender's runs
            (:func:`pooled_spread`), with the pooled degrees of freedom when the pooled SD is used.
        multiplicity: ``bonferroni``: each contender gets ``alpha / contenders``; ``max_t`` (needs
            ``variance="pooled"``): the look's level is shared by the contenders through the
            distribution of the largest of their t statistics (:func:`max_t_level`).
    """

    boundaries: Boundaries = "union"
    variance: Variance = "own"
    multiplicity: Multiplicity = "bonferroni"

    def __post_init__(self) -> None:
        super().__post_init__()
        problems = []
        if self.boundaries not in BOUNDARIES:
            problems.append(f"boundaries {self.boundaries!r} not in {BOUNDARIES}")
        if self.variance not in VARIANCES:
            problems.append(f"variance {self.variance!r} not in {VARIANCES}")
        if self.multiplicity not in MULTIPLICITIES:
            problems.append(f"multiplicity {self.multiplicity!r} not in {MULTIPLICITIES}")
        elif self.multiplicity == "max_t" and self.variance != "pooled":
            problems.append("multiplicity 'max_t' needs variance 'pooled' (one SD for the t statistics)")
        if self.boundaries == "binding" and (self.variance != "own" or self.multiplicity != "bonferroni"):
            problems.append("boundaries 'binding' are computed for each contender's own t-test: variance "
                            "'own' and multiplicity 'bonferroni'")
        if self.screen and (self.variance != "own" or self.multiplicity != "bonferroni"):
            problems.append("a screen tests one finalist: variance 'own' and multiplicity 'bonferroni'")
        if problems:
            raise ValueError(BAD_DESIGN.format(detail="; ".join(problems)))

    def to_dict(self) -> dict[str, Any]:
        """:meth:`mr2.tune.design.Design.to_dict` with the research fields, where ``Design.to_dict``
        had them when they were its fields (the benchmark's printed designs read as before)."""
        out: dict[str, Any] = {}
        for key, value in super().to_dict().items():
            out[key] = value
            if key == "spending":
                out["boundaries"] = self.boundaries
            elif key == "reference_alone":
                out["variance"], out["multiplicity"] = self.variance, self.multiplicity
        return out

    def look_levels(self, looks: Sequence[int], contenders: int) -> list[float]:
        """Bonferroni's share of ``alpha`` (or the whole, with ``max_t``: :meth:`look_level` shares
        it at each look) spent over the looks by :attr:`boundaries`."""
        share = 1 if self.multiplicity == "max_t" else contenders
        if self.boundaries == "binding":
            return binding_levels(looks, self.alpha / share, self.spending, self.futility)
        return levels([n / looks[-1] for n in looks], self.alpha / share, self.spending, self.boundaries)

    def look_level(self, plan: Plan, level: float) -> tuple[float, tuple[float, int] | None]:
        """With ``pooled`` variance the spread of :func:`look_spread`; with ``max_t`` the look's
        level shared by the contenders through their largest t at the pooled df (Bonferroni's
        ``level / m`` without a pooled df)."""
        spread = look_spread(plan) if self.variance == "pooled" else None
        if self.multiplicity == "max_t":
            # Dunnett-type: the contenders' t statistics share the pooled SD and ERM's runs; a contender
            # using its own (larger) SD and fewer df rejects only where the pooled max-t would.
            m = len(plan.contenders)
            level = max_t_level(m, spread[1], level) if spread and spread[1] > 0 else level / m
        return level, spread


def look_spread(plan: Plan) -> tuple[float, int]:
    """:func:`pooled_spread` over a plan's confirmation looks so far: per look, ERM and every contender
    that has all of that look's seeds (their test hard-tier figures). Reads the plan's state (its
    looks' seed counts, the current look, the test figures recorded): research code, kept next to
    the one design that needs it; tests/benchmarks/test_research_design_pooled.py checks it against
    a replica of the confirmation."""
    blocks = []
    previous = 0
    for n in plan._looks[:plan._stage + 1]:
        seeds = plan.confirmation_seeds[previous:n]
        previous = n
        rows = [[plan._test[label][s].hard_tier for s in seeds]
                for label in [plan.reference, *plan.contenders]
                if all(s in plan._test[label] for s in seeds)]
        if len(rows) >= 2:
            blocks.append(np.array(rows))
    return pooled_spread(blocks)


def research(design: Design, **changes: Any) -> ResearchDesign:
    """``design`` (shipped or research) as a :class:`ResearchDesign`, with ``changes``
    (:func:`dataclasses.replace`'s).

    Example:
        >>> from mr2.tune.design import DEFAULT_DESIGN
        >>> research(DEFAULT_DESIGN, boundaries="binding").boundaries, research(DEFAULT_DESIGN).screen
        ('binding', 1)
    """
    values = {f.name: getattr(design, f.name) for f in fields(design)}
    return ResearchDesign(**{**values, **changes})
