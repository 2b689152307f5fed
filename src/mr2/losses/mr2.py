"""The MR2 objective: logit margin loss with per-class temperatures + representation margin loss.

Two temperatures appear in MR2 and the names keep them apart: the per-class LOGIT temperatures
``gamma_y`` (:meth:`MR2Loss.logit_temperatures`, floored at ``min_logit_temperature``) divide the
logits, and the DISTANCE temperature ``T`` (``distance_temperature``) divides the squared pair
distances of the representation term. The knobs that only reproduce the released research code live
on :class:`mr2.losses.released.ReleasedMR2Loss`, not here.

:meth:`MR2Loss.forward` labels its parts with :func:`torch.profiler.record_function` (they show in a
``torch.profiler`` trace and its ``key_averages()``; they are recorded only while a profiler runs, so
they cost nothing otherwise):

- ``"mr2.statistics_update"``: input checks and the class statistics' update;
- ``"mr2.temperatures"``: the moments, the distance margin (left to :attr:`MR2Loss.parts` in a training
  step whose features need no gradient) and the per-class logit temperatures (additive margins with
  ``logit_margin="additive"``);
- ``"mr2.logit_loss"``: the logit margin term;
- ``"mr2.representation_margin"``: the representation margin term (absent when ``lambda_rep = 0`` and in
  a training step whose features need no gradient, e.g. a linear probe).
"""

from __future__ import annotations

import contextlib
import inspect
import math
from typing import Any, Literal, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd import profiler

from mr2 import distributed
from mr2.checks import (
    CheckValues,
    MR2InputError,
    _sum_of,
    check_classification_inputs,
    check_features,
    check_logits,
    check_statistics_finite,
    is_int,
    is_number,
    wants_values,
)
from mr2.functional.margin_losses import (
    representation_margin_loss,
    scaled_logit_loss,
    shifted_logit_loss,
)
from mr2.functional.reduction import reduce_loss
from mr2.losses.collapse import CollapseGuard
from mr2.losses.eval_mode import warn_if_evaluating_in_train_mode
from mr2.statistics.class_features import ClassFeatureStatistics

__all__ = ["DEFAULT_VARIANT", "PROFILER_LABELS", "VARIANTS", "MR2Loss", "MR2LossParts"]

Allocation = Literal["second_moment", "spread"]
LogitMargin = Literal["temperature", "additive"]
Pairs = Literal["local", "global"]

#: The :func:`torch.profiler.record_function` labels of :meth:`MR2Loss.forward`, in call order.
PROFILER_LABELS = (
    "mr2.statistics_update",
    "mr2.temperatures",
    "mr2.logit_loss",
    "mr2.representation_margin",
)


_NOTHING = contextlib.nullcontext()  # reusable: one object instead of one per call


def _label(name: str) -> contextlib.AbstractContextManager[Any]:
    """``record_function(name)`` while a profiler runs, else nothing (an unconditional label has a
    measurable cost per call at small sizes)."""
    if profiler._is_profiler_enabled:
        return profiler.record_function(name)
    return _NOTHING


_BAD_LAMBDA = "lambda_rep must be a number >= 0; got {value!r}."
_BAD_C_BAR = "c_bar must be a positive number; got {value!r}."
_BAD_ALLOCATION = "allocation must be 'second_moment' (paper) or 'spread'; got {value!r}."
_BAD_PAIRS = "pairs must be 'local' (default) or 'global'; got {value!r}."
_BAD_DISTANCE_TEMPERATURE = (
    "distance_temperature must be a positive number T (1 = the paper's formula; with "
    "distance_temperature_per_dim=True it is c in T = c times the feature dimension; left out: T = d, "
    "the default; the string '<c>d' is ReleasedMR2Loss's spelling); got {value!r}."
)
_BAD_PER_DIM = "distance_temperature_per_dim must be true or false; got {value!r}."
_UNKNOWN_VARIANT = "unknown MR2 variant {name!r}; choose one of: {choices}."
_RELEASED_OPTIONS_ONLY = (
    "{cls} has no option(s) {names}: they reproduce the released research code; build the loss with "
    "mr2.losses.released.ReleasedMR2Loss (or ReleasedMR2Loss.from_variant) instead."
)
_BAD_WARMUP = "warmup_samples_per_class must be an integer >= 1; got {value!r}."
_BAD_LOGIT_MARGIN = (
    "logit_margin must be 'temperature' (paper: z / gamma_y) or 'additive' (LDAM form: "
    "z_y - Delta_y); got {value!r}."
)
_BAD_MARGIN_SCALE = "margin_scale (m of the additive margin) must be a number >= 0; got {value!r}."

#: The paper's formula for the distance temperature, ``T = 1``, spelt out: every variant defined as "the
#: paper's form with one change" pins it, so that its meaning does not follow :class:`MR2Loss`'s default.
_PAPER_DISTANCE_TEMPERATURE: dict[str, Any] = {
    "distance_temperature": 1.0,
    "distance_temperature_per_dim": False,
}

#: Named configurations (docs/mr2.md, "Variants"). ``"paper"`` is the paper's formula, ``T = 1`` explicitly
#: (NOT :class:`MR2Loss`'s default since issue 39: it collapses the features of a standard training script,
#: docs/mr2.md "The default"); the others are variants studied by the project, each labelled as such.
#: ``"released"`` uses the released code's knobs: build it with
#: ``ReleasedMR2Loss.from_variant("released", K)``.
VARIANTS: dict[str, dict[str, Any]] = {
    "paper": dict(_PAPER_DISTANCE_TEMPERATURE),
    "centered": {**_PAPER_DISTANCE_TEMPERATURE, "center_features": True},
    "variance": {**_PAPER_DISTANCE_TEMPERATURE, "allocation": "spread"},
    "lp5": {**_PAPER_DISTANCE_TEMPERATURE, "norm_p": 5.0},
    # Test-split readings on the Fashion-MNIST protocol (BENCHMARKS.md section 4): the paper's
    # representation term with T = 1 costs accuracy; without it (logit_only) or with T = d
    # (distance_1d) overall accuracy was within noise of cross-entropy there. On other data the ranking
    # changed (sections 7, 7b); `mr2 tune` chooses on the user's validation data.
    "logit_only": {**_PAPER_DISTANCE_TEMPERATURE, "lambda_rep": 0.0},
    # The default of MR2Loss (DEFAULT_VARIANT): T = d, chosen by the rule of docs/mr2.md "The default".
    "distance_1d": {"distance_temperature": 1.0, "distance_temperature_per_dim": True},
    # Corollary 1's allocation as an additive LDAM-style margin on the true logit (z_y - Delta_y)
    # instead of a temperature: NOT the paper's form (the temperature also divides a class's
    # gradient by gamma_y; an additive margin does not). Representation term as in the paper (T = 1).
    "additive_margin": {**_PAPER_DISTANCE_TEMPERATURE, "logit_margin": "additive"},
    "released": {
        "norm_p": 5.0,
        "estimator": "batch",
        "distance_temperature": "10d",
        "rep_reduction": "released",
        "warmup_samples_per_class": None,
        "distance_margin_norm": "statistics",
    },
}

#: The variant :class:`MR2Loss`'s defaults compute (``MR2Loss(K)`` is
#: ``MR2Loss.from_variant(DEFAULT_VARIANT, K)``) and the default of the engine's ``method: mr2``.
DEFAULT_VARIANT = "distance_1d"


def _spread_of(
    state: torch.Tensor, version: int, count: torch.Tensor, sq_norm_sum: torch.Tensor
) -> torch.Tensor:
    """[K] ``s_k`` (L2) of pooled statistics from their state ``S`` (at its version ``version``) and
    the moving ``n_k`` and ``Q_k``: the values :meth:`ClassFeatureStatistics.moments
    <mr2.statistics.class_features.ClassFeatureStatistics.moments>` computes. NaN when the state was
    changed in place since (by code other than the statistics' own methods, which call
    ``before_write`` first)."""
    if state._version != version:
        return torch.full_like(count, float("nan"))
    safe_count = count.clamp_min(1e-12)
    raw_norm = torch.linalg.vector_norm(state, dim=-1).square() / safe_count.square()
    return (sq_norm_sum / safe_count - raw_norm).clamp_min(0.0)


class MR2LossParts(NamedTuple):
    """Detached parts of the last MR2 loss evaluation, for logging without a host sync.

    Attributes:
        total: 0-dim total loss (the loss returned).
        logit: 0-dim logit margin term.
        representation: 0-dim representation margin term (before multiplying by lambda_rep); NaN
            when a training step left it out because the features need no gradient
            (:meth:`MR2Loss.forward`).
        logit_margins: [K] the per-class parameters of the logit margin used: the logit temperatures
            gamma (``logit_margin="temperature"``) or the additive margins Delta
            (``logit_margin="additive"``).
        margin: 0-dim distance margin ``2 * s_bar``.
    """

    total: torch.Tensor
    logit: torch.Tensor
    representation: torch.Tensor
    logit_margins: torch.Tensor
    margin: torch.Tensor


def keyword_options(cls: type[nn.Module]) -> dict[str, Any]:
    """The keyword options of ``cls.__init__`` (and of the classes it passes ``**options`` to) with
    their defaults, e.g. every option of :class:`MR2Loss` or of a subclass."""
    options: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        if issubclass(klass, MR2Loss):
            for name, parameter in inspect.signature(klass.__init__).parameters.items():
                if parameter.kind is inspect.Parameter.KEYWORD_ONLY:
                    options[name] = parameter.default
    return options


class MR2Loss(nn.Module):
    r"""The MR2 training objective, called as ``loss(logits, features, target)``.

    .. math::
        \mathcal{L} = \frac{1}{B}\sum_i \Big[-\log\mathrm{softmax}(z_i/\gamma_{y_i})_{y_i}
            + \lambda \log\big(1 + \sum_{j \ne i, y_j = y_i}
              e^{(\|\phi_i - \phi_j\|^2 - 2\bar s)/T}\big)\Big],
        \qquad \gamma_y = \bar c K a_y^{1/3} / \textstyle\sum_k a_k^{1/3}

    with ``a_k = ||mu_k||^2 + s_k`` and ``s_bar`` the mean of ``s_k`` from the moving class statistics
    (:class:`~mr2.ClassFeatureStatistics`, held by this module). ``gamma_y`` are the per-class LOGIT
    temperatures, ``T`` the DISTANCE temperature. In training mode every call first folds the batch's
    features into the statistics and then uses them (as the released code does); in eval mode the
    statistics are frozen. Until every class has been seen ``warmup_samples_per_class`` times the
    logit temperatures are 1 (plain cross-entropy); setting :attr:`gammas_enabled` to False (e.g. for
    warm-up epochs) does the same.

    The defaults are the paper's except the distance temperature: L2 statistics, cube-root allocation
    of ``a_k``, ``lambda_rep = 0.1``, representation pairs from the local batch (under data
    parallelism each rank pairs its own samples, as the released code does; ``pairs="global"`` pairs
    over the global batch with a differentiable all-gather), and ``T = d`` (the feature dimension;
    variant ``distance_1d``, :data:`DEFAULT_VARIANT`) where the paper's formula has ``T = 1``: at
    ``T = 1`` the representation term collapsed the features of a standard training script (the rule
    and the measurements: docs/mr2.md, "The default"). The paper's formula is
    ``MR2Loss.from_variant("paper", K)``; other variants (see :data:`VARIANTS` and :meth:`from_variant`)
    are labelled as such; the released research code's arithmetic (``T = 10 d``) is
    ``ReleasedMR2Loss.from_variant("released", K)``.

    In training mode the loss watches for collapsed features (:class:`~mr2.losses.collapse.CollapseGuard`,
    a check every few steps without a host sync on the others) and warns once with
    :class:`~mr2.losses.collapse.FeatureCollapseWarning`.

    Args:
        num_classes: K >= 2.
        c_bar: mean logit temperature (overall margin strength) > 0.
        lambda_rep: weight of the representation term (0 disables it and skips its O(B^2) work).
        momentum: decay of the moving statistics (0.9 in the paper's CIFAR scripts, 0.999 ImageNet).
        feature_dim: d, or None to infer it from the first batch (or :meth:`setup`).
        distance_temperature: the distance temperature ``T`` > 0 (1 = the paper's formula), or with
            ``distance_temperature_per_dim`` the factor c of ``T = c d``. None (default): ``T = d``.
        distance_temperature_per_dim: read ``distance_temperature`` as c in ``T = c d`` (d the feature
            dimension). None (default): True when ``distance_temperature`` is left out (``T = d``),
            False when it is given (``distance_temperature=2.0`` is ``T = 2``).
        allocation: ``"second_moment"`` (paper: ``a_k``) or ``"spread"`` (variance-only, ``s_k``).
        norm_p: Lp norm of the statistics (2 = paper; 5 = released code). The distance margin
            ``2 s_bar`` stays in the L2 norm of the pair distances whatever ``norm_p`` is.
        center_features: statistics on globally centred features (variant).
        pairs: ``"local"`` or ``"global"`` batch pairs under torch.distributed.
        warmup_samples_per_class: logit temperatures stay 1 until every class has been seen this many
            times (None: never wait; the released code's behaviour).
        min_logit_temperature: lower clamp on gamma (guards a class whose statistics are ~0).
        logit_margin: ``"temperature"`` (paper: ``-log softmax(z / gamma_y)_y``) or ``"additive"``
            (variant ``additive_margin``: ``-log softmax(z - Delta_y e_y)_y`` with
            ``Delta_y = margin_scale * gamma_y / mean(gamma)``, the other logits untouched; 0
            during warm-up, i.e. plain cross-entropy).
        margin_scale: ``m``, the additive margin of a class of average allocation (logit units;
            default 0.5, LDAM's largest margin). Only used with ``logit_margin="additive"``.
        process_group: torch.distributed group (None: default group when initialised); see
            :meth:`setup`.
        check_values: validate target range / finiteness ("auto": CPU tensors only).

    Example:
        >>> torch.manual_seed(0) and None
        >>> loss_fn = MR2Loss(num_classes=3)
        >>> logits, features = torch.randn(8, 3), torch.randn(8, 4, requires_grad=True)
        >>> target = torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])
        >>> loss = loss_fn(logits, features, target)
        >>> loss.shape, loss_fn.logit_temperatures().shape, bool(loss_fn.parts.representation >= 0)
        (torch.Size([]), torch.Size([3]), True)
    """

    def __init__(
        self,
        num_classes: int,
        *,
        c_bar: float = 1.0,
        lambda_rep: float = 0.1,
        momentum: float = 0.9,
        feature_dim: int | None = None,
        distance_temperature: float | None = None,
        distance_temperature_per_dim: bool | None = None,
        allocation: Allocation = "second_moment",
        norm_p: float = 2.0,
        center_features: bool = False,
        pairs: Pairs = "local",
        warmup_samples_per_class: int | None = 1,
        min_logit_temperature: float = 1e-2,
        logit_margin: LogitMargin = "temperature",
        margin_scale: float = 0.5,
        process_group: Any = None,
        check_values: CheckValues = "auto",
    ) -> None:
        super().__init__()
        self.statistics = ClassFeatureStatistics(
            num_classes,
            feature_dim,
            momentum=momentum,
            norm_p=norm_p,
            center=center_features,
            process_group=process_group,
            check_values=check_values,
        )
        self.num_classes = self.statistics.num_classes
        if not is_number(c_bar) or not c_bar > 0:
            raise MR2InputError(_BAD_C_BAR.format(value=c_bar))
        if not is_number(lambda_rep) or lambda_rep < 0:
            raise MR2InputError(_BAD_LAMBDA.format(value=lambda_rep))
        if distance_temperature is not None and (
            not is_number(distance_temperature) or not distance_temperature > 0
        ):
            raise MR2InputError(_BAD_DISTANCE_TEMPERATURE.format(value=distance_temperature))
        if distance_temperature_per_dim is not None and not isinstance(distance_temperature_per_dim, bool):
            raise MR2InputError(_BAD_PER_DIM.format(value=distance_temperature_per_dim))
        if distance_temperature_per_dim is None:  # the default T = d; a given T is T itself
            distance_temperature_per_dim = distance_temperature is None
        factor = 1.0 if distance_temperature is None else float(distance_temperature)
        if allocation not in ("second_moment", "spread"):
            raise MR2InputError(_BAD_ALLOCATION.format(value=allocation))
        if pairs not in ("local", "global"):
            raise MR2InputError(_BAD_PAIRS.format(value=pairs))
        if warmup_samples_per_class is not None and (
            not is_int(warmup_samples_per_class)
            or warmup_samples_per_class < 1
        ):
            raise MR2InputError(_BAD_WARMUP.format(value=warmup_samples_per_class))
        if logit_margin not in ("temperature", "additive"):
            raise MR2InputError(_BAD_LOGIT_MARGIN.format(value=logit_margin))
        if (
            not is_number(margin_scale)
            or not margin_scale >= 0
        ):
            raise MR2InputError(_BAD_MARGIN_SCALE.format(value=margin_scale))
        self.logit_margin: LogitMargin = logit_margin
        self.margin_scale = float(margin_scale)
        self.c_bar = float(c_bar)
        self.lambda_rep = float(lambda_rep)
        #: As given (ReleasedMR2Loss: possibly the string ``"<c>d"``); ``T`` is
        #: :meth:`distance_temperature_value`.
        self.distance_temperature: float | str = factor
        self._distance_factor = factor
        self.distance_temperature_per_dim: bool = distance_temperature_per_dim
        self.allocation: Allocation = allocation
        self.pairs: Pairs = pairs
        self.warmup_samples_per_class = warmup_samples_per_class
        self.min_logit_temperature = float(min_logit_temperature)
        self.process_group = process_group
        self.check_values: CheckValues = check_values
        #: Set to False to train with logit temperatures 1 (e.g. during warm-up epochs).
        self.gammas_enabled = True
        self._parts: MR2LossParts | None = None
        # A training step that leaves the representation term out defers what only the parts need
        # (see :attr:`parts`): (total, logit term, gamma, s_k of the margin, seen), all detached; after
        # a steady probe step (the loss, None, gamma, what s_k is computed from, None) instead.
        self._deferred_parts: tuple[Any, ...] | None = None
        #: Whether the last call left out the representation term (a training step whose features need
        #: no gradient; see :meth:`forward`).
        self.representation_skipped = False
        #: Whether a steady training step may take the straight-line path of :meth:`_steady_probe_step`
        #: (features without a gradient) or :meth:`_steady_train_step` (the general path's values;
        #: False: always the general path, for tests).
        self.steady_probe_path = True
        #: Warns once when the features collapse (:mod:`mr2.losses.collapse`); None switches it off.
        self.collapse_guard: CollapseGuard | None = CollapseGuard(self.num_classes)

    @property
    def parts(self) -> MR2LossParts | None:
        """:class:`MR2LossParts` of the last call (None before the first).

        After a training step that left the representation term out (:meth:`forward`), the NaN of
        ``representation`` and the ``margin`` are computed here, when first read, from tensors the
        step kept (the statistics' values of that step, whatever happened to them since): such a step
        does not spend operations on what only logging reads.
        """
        if self._parts is None and self._deferred_parts is not None:
            total, logit_term, gamma, margin_spread, seen = self._deferred_parts
            if isinstance(margin_spread, tuple):  # a steady linear-probe step: from its state
                margin_spread = _spread_of(*margin_spread)
            if seen is None:  # every class was known to have been seen at that step
                seen = torch.ones(margin_spread.shape, dtype=torch.bool, device=margin_spread.device)
            margin = 2.0 * self.statistics.mean_spread(margin_spread, seen)
            rep_term = logit_term.new_full((), float("nan"))
            self._parts = MR2LossParts(total, logit_term, rep_term, gamma, margin)
            self._deferred_parts = None
        return self._parts

    @parts.setter
    def parts(self, value: MR2LossParts | None) -> None:
        self._parts, self._deferred_parts = value, None

    @classmethod
    def from_variant(cls, variant: str, num_classes: int, **overrides: Any) -> MR2Loss:
        """Build a named configuration from :data:`VARIANTS`, with keyword overrides.

        An override of ``distance_temperature`` replaces the variant's distance temperature as a
        whole (with ``distance_temperature_per_dim`` unless that is given too). ``"released"`` (the
        released code's knobs) needs ``ReleasedMR2Loss.from_variant``.

        Example:
            >>> MR2Loss.from_variant("lp5", 10).statistics.norm_p
            5.0
        """
        options = cls.variant_options(variant)
        if "distance_temperature" in overrides:  # a given T replaces the variant's T as a whole
            options.pop("distance_temperature_per_dim", None)
        options.update(overrides)
        foreign = sorted(set(options) - set(keyword_options(cls)))
        if foreign:
            raise MR2InputError(_RELEASED_OPTIONS_ONLY.format(cls=cls.__name__, names=foreign))
        return cls(num_classes, **options)

    @staticmethod
    def variant_options(variant: str) -> dict[str, Any]:
        """The options of the named configuration ``variant`` of :data:`VARIANTS` (a copy)."""
        if variant not in VARIANTS:
            raise MR2InputError(
                _UNKNOWN_VARIANT.format(name=variant, choices=", ".join(sorted(VARIANTS)))
            )
        return dict(VARIANTS[variant])

    def setup(self, feature_dim: int | None = None, process_group: Any = None) -> None:
        """Wire the loss to a run: the feature width d (allocating the statistics' [K, d] state now
        instead of at the first batch; a different d than the loss already has is an error) and the
        torch.distributed group of this loss and its statistics (None: the default group)."""
        self.process_group = process_group
        self.statistics.process_group = process_group
        if feature_dim is not None:
            self.statistics._materialise(feature_dim)

    def extra_repr(self) -> str:
        return (
            f"c_bar={self.c_bar}, lambda_rep={self.lambda_rep}, "
            f"distance_temperature={self.distance_temperature!r}, "
            f"distance_temperature_per_dim={self.distance_temperature_per_dim}, "
            f"allocation={self.allocation!r}, pairs={self.pairs!r}, logit_margin={self.logit_margin!r}"
        )

    def allocation_statistic(self, moments: tuple[torch.Tensor | None, ...] | None = None) -> torch.Tensor:
        """[K] the statistic the logit temperatures are allocated from (``a_k`` or ``s_k``).

        ``a_k`` of the default statistics (pooled, L2, not centred) is ``Q_k / n_k``, the moving mean
        of ``||x||^2`` over the class (equal to ``||mu_k||^2 + s_k`` to rounding; the steady
        linear-probe step of :meth:`forward` then needs no moments); otherwise ``||mu_k||_p^2 + s_k``.
        ``moments``: ``statistics.moments()`` if already computed this step (then ``||mu_k||^2 + s_k``
        from them), or what ``statistics._moments`` returns, whose third item is ``Q_k / n_k`` of the
        default statistics.
        """
        statistics = self.statistics
        if self.allocation == "second_moment":
            if moments is not None and len(moments) > 2 and moments[2] is not None:
                return moments[2]
            if (
                moments is None
                and statistics.estimator == "pooled"
                and statistics.norm_p == 2.0
                and not statistics.center
            ):
                return statistics._buffer("sq_norm_sum") / statistics._buffer("count").clamp_min(1e-12)
        mean_sq_norm, spread = statistics.moments() if moments is None else moments[:2]
        assert mean_sq_norm is not None and spread is not None
        return spread if self.allocation == "spread" else mean_sq_norm + spread

    def _ready(self, stat: torch.Tensor) -> torch.Tensor:
        """0-dim bool: the statistics are ready to allocate margins from (no host sync).

        Every class must have been seen ``warmup_samples_per_class`` times, and, for the
        ``"spread"`` allocation, at least twice (the spread of a class seen once is 0).
        """
        ready = stat.sum() > 0
        needed = self._warmup_needed()
        if needed is not None:
            ready = ready & (self.statistics.samples_seen >= needed).all()
        if not self.gammas_enabled:
            ready = torch.zeros_like(ready)
        return ready

    def logit_temperatures(
        self,
        moments: tuple[torch.Tensor | None, ...] | None = None,
        seen: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """[K] the current per-class logit temperatures gamma (ones during warm-up). No host sync.

        ``moments``: ``statistics.moments()`` if already computed this step (values >= 0); ``seen``:
        ``statistics.seen()`` if already computed (it decides a warm-up of one sample per class).
        """
        stat = self.allocation_statistic(moments)
        # gamma_allocation's arithmetic without its argument checks and its clamp_min(0): every
        # allocation statistic is >= 0 or NaN here (sums of squares; the spread is clamped), where
        # clamp_min(0) changes no value (the cube root of -0.0 is +0.0 either way).
        statistics = self.statistics
        root = stat.pow(1.0 / 3.0)
        scaled = root * statistics._scalar(self.c_bar * stat.shape[0], root)  # c_bar K a_k^(1/3)
        gamma = (scaled / root.sum()).clamp_min(self.min_logit_temperature)
        if not self.gammas_enabled:
            return torch.ones_like(gamma)
        # The values of torch.where(self._ready(stat) & isfinite(gamma), gamma, 1) in fewer operations:
        # _ready's "stat.sum() > 0" needs no test of its own here, since stat >= 0 and a sum that is 0 or
        # NaN makes root.sum() 0 or NaN in gamma_allocation, so every gamma is NaN (clamp_min keeps NaN).
        # Not ready: gamma / False turns every gamma (> 0 or NaN) into inf or NaN; nan_to_num then
        # makes each non-finite gamma 1 (two operations where isfinite, & and where take six).
        # Every class known to have been seen (ClassFeatureStatistics.all_seen_known): a warm-up of one
        # sample per class is over, and gamma / True would change no value.
        needed = self._warmup_needed()
        if needed is not None and not (needed == 1 and statistics.all_seen_known()):
            if needed == 1 and seen is not None:
                ready = seen.all()
            else:
                ready = (statistics.samples_seen >= needed).all()
            gamma = gamma / ready
        return torch.nan_to_num(gamma, nan=1.0, posinf=1.0, neginf=1.0)

    def _warmup_needed(self) -> int | None:
        """Observations of every class before the logit margins apply (None: no wait)."""
        needed = self.warmup_samples_per_class
        if self.allocation == "spread":
            needed = max(needed or 0, 2)
        return needed

    def additive_margins(
        self, moments: tuple[torch.Tensor | None, ...] | None = None
    ) -> torch.Tensor:
        """[K] ``Delta_k = margin_scale * gamma_k / mean(gamma)`` (zeros during warm-up). No host sync.

        ``gamma / mean(gamma) = K a_k^(1/3) / sum_j a_j^(1/3)`` does not depend on ``c_bar``.
        """
        gamma = self.logit_temperatures(moments)
        ready = self._ready(self.allocation_statistic(moments))
        delta = self.margin_scale * gamma / gamma.mean()
        return torch.where(ready, delta, torch.zeros_like(delta))

    def _margin_spread(self, spread: torch.Tensor | None) -> torch.Tensor | None:
        """The [K] ``s_k`` of the distance margin: in the L2 norm of the pair distances."""
        stats = self.statistics
        return stats.spread_l2() if stats.norm_p != 2.0 else spread

    def distance_margin(
        self, spread: torch.Tensor | None = None, seen: torch.Tensor | None = None
    ) -> torch.Tensor:
        """0-dim ``2 * s_bar``.

        ``spread``: the [K] ``s_k`` of ``statistics.moments()`` if already computed this step (used
        when the statistics are in the L2 norm); ``seen``: ``statistics.seen()`` if already computed.
        """
        return 2.0 * self.statistics.mean_spread(self._margin_spread(spread), seen)

    def distance_temperature_value(self, feature_dim: int) -> float:
        """The distance temperature ``T`` for features of width ``feature_dim``."""
        factor = self._distance_factor
        return factor * feature_dim if self.distance_temperature_per_dim else factor

    def collapse_advice(self, feature_dim: int) -> str:
        """The cause and the fix that :class:`~mr2.losses.collapse.FeatureCollapseWarning` names.

        Example:
            >>> paper = MR2Loss.from_variant("paper", 10)
            >>> print(paper.collapse_advice(128))  # doctest: +NORMALIZE_WHITESPACE
            The representation term pulls same-class features together (lambda_rep = 0.1, distance
            temperature T = 1, the paper's formula): use MR2Loss(num_classes), whose default is T = d
            (here 128), lower lambda_rep (0 turns the term off) or lower the learning rate (docs/mr2.md,
            "The default").
        """
        if self.lambda_rep == 0:
            return (
                "lambda_rep = 0, so the representation term is not the cause: lower the learning rate, and "
                "check that the features given to the loss are the input of the final linear layer."
            )
        temperature = self.distance_temperature_value(feature_dim)
        if temperature < feature_dim:
            paper = ", the paper's formula" if temperature == 1.0 else ""
            fix = f"use MR2Loss(num_classes), whose default is T = d (here {feature_dim})"
        else:
            paper = ""
            fix = (
                "raise T further (distance_temperature=10, distance_temperature_per_dim=True is the released "
                "code's T = 10 d)"
            )
        return (
            f"The representation term pulls same-class features together (lambda_rep = {self.lambda_rep:g}, "
            f"distance temperature T = {temperature:g}{paper}): {fix}, lower lambda_rep (0 turns the term "
            'off) or lower the learning rate (docs/mr2.md, "The default").'
        )

    def _reduce_pairs(self, per_sample: torch.Tensor, target: torch.Tensor, feature_dim: int) -> torch.Tensor:
        """The representation margin term from its per-sample terms [B]: their mean over the batch."""
        return reduce_loss(per_sample, "mean")

    def representation_term(
        self, features: torch.Tensor, target: torch.Tensor, margin: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The (unweighted) representation margin term of this batch."""
        temperature = self.distance_temperature_value(features.shape[1])
        margin = self.distance_margin() if margin is None else margin
        partners: dict[str, Any] = {}
        if self.pairs == "global" and distributed.is_distributed(self.process_group):
            # The ranks' batch sizes once per step, for both gathers.
            sizes = distributed.gather_sizes(features.shape[0], features.device, self.process_group)
            partner_features, offset = distributed.all_gather_with_grad(
                features, self.process_group, sizes
            )
            partner_target, _ = distributed.all_gather_variable(target, self.process_group, sizes)
            partners = {
                "partner_features": partner_features,
                "partner_target": partner_target,
                "self_offset": offset,
            }
        per_sample = representation_margin_loss(
            features, target, margin, temperature=temperature, reduction="none", **partners
        )
        return self._reduce_pairs(per_sample, target, features.shape[1])

    def _steady_update(
        self, logits: torch.Tensor, features: torch.Tensor, target: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The steady steps' first part (:meth:`_steady_probe_step`, :meth:`_steady_train_step`): the
        input checks, the statistics' update (:meth:`ClassFeatureStatistics._steady_step
        <mr2.statistics.class_features.ClassFeatureStatistics._steady_step>`) and the logit temperatures
        from ``a_k = Q_k / n_k`` (:meth:`allocation_statistic`), both in one compiled call where numba
        is installed (:meth:`ClassFeatureStatistics._fused_steady_step
        <mr2.statistics.class_features.ClassFeatureStatistics._fused_steady_step>`; docs/mr2.md, "The
        fused CPU step"); returns the fresh ``(n_k clamped at 1e-12, Q_k, gamma)``. The last step's
        deferred parts are dropped (restored if the update refuses the batch)."""
        check_logits(logits, target, self.num_classes)
        check_features(features, target)
        statistics = self.statistics
        attributes = self.__dict__
        # This step replaces the deferred parts of the last: the statistics' write hook has nothing to
        # keep for them (restored if the update refuses the batch).
        last = attributes["_deferred_parts"]
        attributes["_deferred_parts"] = None
        with torch.no_grad():
            try:
                fused = statistics._fused_steady_step(
                    features, target, logits, self.c_bar * self.num_classes, self.min_logit_temperature
                )
                if fused is not None:  # one compiled function (numba installed; its docstring)
                    return fused
                count, sq_norm_sum = statistics._steady_step(features, target, logits)
            except BaseException:
                attributes["_deferred_parts"] = last
                raise
            # logit_temperatures() with every class seen (no readiness test), in place on fresh
            # tensors (the same arithmetic). The buffers hold copies of count and sq_norm_sum: count
            # may be clamped in place (what it is kept for, _spread_of, clamps it the same way).
            root = torch.div(sq_norm_sum, count.clamp_min_(1e-12)).pow_(1.0 / 3.0)
            total = root.sum()
            gamma = root.mul_(statistics._scalar(self.c_bar * self.num_classes, root)).div_(total)
            gamma = gamma.clamp_min_(self.min_logit_temperature).nan_to_num_(1.0, 1.0, 1.0)
        return count, sq_norm_sum, gamma

    def _steady_probe_step(
        self, logits: torch.Tensor, features: torch.Tensor, target: torch.Tensor
    ) -> torch.Tensor:
        """:meth:`forward`'s training step whose features need no gradient (a linear probe), once
        every class is known to have been seen, on CPU with the default statistics and logit
        temperatures (the conditions in :meth:`forward`), as straight-line code: :meth:`_steady_update`
        and the logit term; the spreads ``s_k`` of the distance margin, which only :attr:`parts`
        reads, are computed when it is read (or before the statistics next change). Issue 47: 34
        dispatched operations where the general path takes 42 (43 before), and little Python; the
        values are the general path's bit for bit (tests/core/test_steady_probe_step.py). Where numba
        is installed, the update and the temperatures are one compiled call instead (values within
        rounding: tests/core/test_fused_step.py)."""
        count, sq_norm_sum, gamma = self._steady_update(logits, features, target)
        statistics = self.statistics
        attributes = self.__dict__
        # scaled_logit_loss: the logits divided by their row's temperature, the built-in loss.
        logit_term = F.cross_entropy(logits / gamma.index_select(0, target).unsqueeze(1), target)
        attributes["representation_skipped"] = True
        attributes["_parts"] = None
        state = statistics._buffers["feature_sum"]
        assert state is not None
        # What the parts are finished from when read: the loss, the state (changed in place by the
        # next update, which first calls before_write), the fresh n_k and Q_k. The loss is kept
        # detached, so that the step's autograd graph is freed with its backward, not a step later
        # (in a scratch loop 0.03-0.06x of a K = 10 linear-probe step; within the noise of the
        # benchmark's loop: docs/benchmarks/log.md).
        detached = logit_term.detach()
        attributes["_deferred_parts"] = (
            detached, detached, gamma, (state, state._version, count, sq_norm_sum), None
        )
        statistics.__dict__["before_write"] = self._settle_deferred_parts
        return logit_term

    def _steady_train_step(
        self, logits: torch.Tensor, features: torch.Tensor, target: torch.Tensor
    ) -> torch.Tensor:
        """:meth:`forward`'s training step whose features need a gradient, under the conditions of
        :meth:`_steady_probe_step` otherwise: :meth:`_steady_update`, the spreads ``s_k`` (no seen
        mask, every class being seen), the distance margin ``2 s_bar`` as their mean over the K
        classes, the logit term and the representation term as the general path computes them.
        Issue 47: the general path's Python and a few operations less per step; its values bit for bit
        (tests/core/test_steady_train_step.py)."""
        gamma = self._steady_update(logits, features, target)[2]
        attributes = self.__dict__
        with torch.no_grad():
            # The spreads as the general path computes them (the norm cache refreshed: one [K, d] pass).
            margin_spread = self._margin_spread(self.statistics._moments(None)[1])
            assert margin_spread is not None
            # mean_spread with every class seen: (s * seen).sum() / seen.sum() is s.sum() / K.
            margin = 2.0 * (margin_spread.sum() / self.num_classes)
        logit_term = F.cross_entropy(logits / gamma.index_select(0, target).unsqueeze(1), target)
        rep_term = self.representation_term(features, target, margin)
        total = logit_term + self.lambda_rep * rep_term
        attributes["representation_skipped"] = False
        attributes["_parts"] = MR2LossParts(
            total.detach(), logit_term.detach(), rep_term.detach(), gamma, margin
        )
        if self.collapse_guard is not None:
            self.collapse_guard.observe(features, target, logit_term, self.collapse_advice)
        return total

    def __getstate__(self) -> dict[str, Any]:
        # A copy or a pickle keeps the deferred spreads' values (a tensor's version counter, which
        # _spread_of checks, does not survive a copy).
        self._settle_deferred_parts()
        state: dict[str, Any] = super().__getstate__()
        return state

    def _settle_deferred_parts(self) -> None:
        """Compute the spreads a deferred :attr:`parts` reads from the statistics' state now (their
        ``before_write`` hook: the state is about to change)."""
        deferred = self.__dict__["_deferred_parts"]
        if deferred is not None and isinstance(deferred[3], tuple):
            spread = _spread_of(*deferred[3])
            self.__dict__["_deferred_parts"] = (*deferred[:3], spread, deferred[4])

    def forward(
        self, logits: torch.Tensor, features: torch.Tensor, target: torch.Tensor
    ) -> torch.Tensor:
        """Loss of one batch (0-dim). Updates the statistics first when in training mode.

        Its parts run under the profiler labels of :data:`PROFILER_LABELS` (module docstring).

        A training step (training mode, gradients enabled) whose ``features`` need no gradient (a
        linear probe on cached features, or detached features) does not compute the representation
        term: it is a constant there whose gradient reaches no parameter. The statistics are still
        updated and the logit term uses them; the loss returned (and ``parts.total``) is then the logit
        term alone, ``parts.representation`` is NaN and :attr:`representation_skipped` is True. In
        eval mode, or with gradients disabled, the term is always computed (its value is reported).
        Calling the loss in training mode with gradients disabled (evaluation code without
        ``criterion.eval()``) updates the statistics from that batch and warns once
        (:class:`~mr2.losses.eval_mode.TrainModeEvaluationWarning`).

        Args:
            logits: [B, K] classifier outputs.
            features: [B, d] penultimate features (the input of the final linear layer).
            target: [B] class ids in ``[0, K)``.
        """
        statistics = self.statistics
        if (  # the usual training step on CPU, every class seen (docs/mr2.md): Python reads only
            self.steady_probe_path
            and self.training
            and self.lambda_rep > 0
            and torch.is_grad_enabled()
            and not profiler._is_profiler_enabled
            and self.logit_margin == "temperature"
            and self.allocation == "second_moment"
            and self.gammas_enabled
            and self.warmup_samples_per_class in (None, 1)
            and logits.dtype == features.dtype
            and logits.device == features.device == target.device
            and target.dtype == torch.long
            and target.dim() == 1
            and target.shape[0] > 0
            and wants_values(logits, self.check_values)
            and statistics.steady_step_applies(features)
        ):
            if features.requires_grad:
                return self._steady_train_step(logits, features, target)
            return self._steady_probe_step(logits, features, target)
        warn_if_evaluating_in_train_mode(self, "class statistics")
        # Plain attributes of this step are set in __dict__ (nn.Module's __setattr__ costs about a
        # microsecond each, per step).
        attributes = self.__dict__
        with _label("mr2.statistics_update"):
            # The target's range is read once per step: by the statistics' count where it checks the
            # range (ClassFeatureStatistics.counts_check_range), else here.
            check_values = False if statistics.counts_check_range(features) else self.check_values
            check_classification_inputs(
                logits, features, target, self.num_classes, check_values, finite=False
            )
            # The statistics update is computed first and applied only once it is known to keep them
            # finite; that check and the inputs' finiteness check share ONE host sync (CPU only by
            # default; on accelerators a non-finite update is skipped without a sync). One no_grad
            # context for the update and the check.
            with torch.no_grad():
                pending = statistics._prepare(features, target)
                # A NaN/Inf feature makes the update's guard (built from the squared norms)
                # non-finite, so with a pending update only the logits need their own finiteness pass.
                if wants_values(logits, self.check_values):
                    # The usual case (a pending update, float logits) in three operations: the logits'
                    # sum plus the guard is finite only when both are (a finite sum may still overflow:
                    # the exact check below then decides).
                    guard = None if pending is None else pending.guard
                    if (
                        guard is None
                        or not logits.is_floating_point()
                        or not math.isfinite(float(_sum_of(logits) + guard))
                    ):
                        inputs = {"logits": logits}
                        if pending is None:
                            inputs["features"] = features
                        check_statistics_finite(inputs, guard, also_count={"features": features})
                    statistics._commit(pending)
                else:
                    statistics._commit(pending, only_if_finite=True)
        with _label("mr2.temperatures"):
            # The seen mask is not built once every class is known to have been seen (None: all True).
            seen = None if statistics.all_seen_known() else statistics.seen()
            moments = statistics._moments(seen)
            spread = moments[1]
            # A training step whose features need no gradient (a linear probe on cached features,
            # detached features): the representation term is a constant there, its gradient reaches no
            # parameter, so it is not computed (a Python attribute decides: no host sync), and the
            # distance margin, which only it and the logged parts use, is left to :attr:`parts`.
            skipped = attributes["representation_skipped"] = (
                self.lambda_rep > 0
                and self.training
                and torch.is_grad_enabled()
                and not features.requires_grad
            )
            if skipped:  # the s_k distance_margin reads, kept for parts
                margin_spread, margin = self._margin_spread(spread), None
            else:
                margin_spread, margin = None, self.distance_margin(spread, seen)
            if self.logit_margin == "additive":
                gamma = self.additive_margins(moments)
            else:
                gamma = self.logit_temperatures(moments, seen)
        with _label("mr2.logit_loss"):
            # The inputs were checked above (the target's range read once per step).
            if self.logit_margin == "additive":
                logit_term = shifted_logit_loss(logits, target, gamma)
            else:
                logit_term = scaled_logit_loss(logits, target, gamma)
        if margin is None:  # representation_skipped: the parts are finished when read
            assert margin_spread is not None
            detached = logit_term.detach()
            attributes["_parts"] = None
            attributes["_deferred_parts"] = (detached, detached, gamma, margin_spread, seen)
            return logit_term
        if self.lambda_rep > 0:
            with _label("mr2.representation_margin"):
                rep_term = self.representation_term(features, target, margin)
        else:
            rep_term = logit_term.new_zeros(())
        total = logit_term + self.lambda_rep * rep_term
        self._parts = MR2LossParts(total.detach(), logit_term.detach(), rep_term.detach(), gamma, margin)
        self._deferred_parts = None
        # A host read every few steps only; features without a gradient (a linear probe) cannot
        # collapse by training, so they are not watched (a skipped step returned above).
        if self.training and self.collapse_guard is not None and features.requires_grad:
            self.collapse_guard.observe(features, target, logit_term, self.collapse_advice)
        return total
