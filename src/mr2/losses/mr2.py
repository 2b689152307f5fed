"""The MR2 objective: logit margin loss with per-class temperatures + representation margin loss."""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

import torch
from torch import nn

from mr2 import distributed
from mr2.checks import (
    CheckValues,
    MR2InputError,
    check_classification_inputs,
    check_statistics_finite,
    is_int,
    is_number,
    wants_values,
)
from mr2.functional.allocation import gamma_allocation
from mr2.functional.margin_losses import (
    additive_margin_loss,
    logit_margin_loss,
    representation_margin_loss,
)
from mr2.functional.released import released_class_normalised_mean
from mr2.statistics.class_features import ClassFeatureStatistics, Estimator

__all__ = ["VARIANTS", "MR2Loss", "MR2LossParts"]

Allocation = Literal["second_moment", "spread"]
LogitMargin = Literal["temperature", "additive"]
MarginNorm = Literal["l2", "statistics"]
Pairs = Literal["local", "global"]
RepReduction = Literal["mean", "released"]

BAD_LAMBDA = "lambda_rep must be a number >= 0; got {value!r}."
BAD_C_BAR = "c_bar must be a positive number; got {value!r}."
BAD_ALLOCATION = "allocation must be 'second_moment' (paper) or 'spread'; got {value!r}."
BAD_PAIRS = "pairs must be 'local' (default) or 'global'; got {value!r}."
BAD_REP_REDUCTION = "rep_reduction must be 'mean' (paper) or 'released'; got {value!r}."
BAD_DISTANCE_TEMPERATURE = (
    "distance_temperature must be a positive number (1 = the paper) or a string '<c>d' meaning c "
    "times the feature dimension (e.g. '10d', the released code); got {value!r}."
)
UNKNOWN_VARIANT = "unknown MR2 variant {name!r}; choose one of: {choices}."
BAD_WARMUP = "warmup_samples_per_class must be an integer >= 1; got {value!r}."
BAD_LOGIT_MARGIN = (
    "logit_margin must be 'temperature' (paper: z / gamma_y) or 'additive' (LDAM form: "
    "z_y - Delta_y); got {value!r}."
)
BAD_MARGIN_SCALE = "margin_scale (m of the additive margin) must be a number >= 0; got {value!r}."
BAD_MARGIN_NORM = (
    "distance_margin_norm must be 'l2' (the norm of the pair distances) or 'statistics' (the "
    "statistics' Lp norm, the released code); got {value!r}."
)

#: Named configurations. ``"paper"`` is the default of :class:`MR2Loss`; the others are variants
#: studied by the project (see docs/mr2.md), each labelled as NOT the paper's default.
VARIANTS: dict[str, dict[str, Any]] = {
    "paper": {},
    "centered": {"center_features": True},
    "variance": {"allocation": "spread"},
    "lp5": {"norm_p": 5.0},
    # Test-split readings on the Fashion-MNIST protocol (BENCHMARKS.md section 4): the paper's
    # representation term with T = 1 costs accuracy; without it (logit_only) or with T = d
    # (distance_1d) overall accuracy was within noise of cross-entropy there. No variant is recommended:
    # on other data the ranking changed (section 7); `mr2 tune` chooses one on the user's validation data.
    "logit_only": {"lambda_rep": 0.0},
    "distance_1d": {"distance_temperature": "1d"},
    # Corollary 1's allocation as an additive LDAM-style margin on the true logit (z_y - Delta_y)
    # instead of a temperature: NOT the paper's form (the temperature also divides a class's
    # gradient by gamma_y; an additive margin does not).
    "additive_margin": {"logit_margin": "additive"},
    "released": {
        "norm_p": 5.0,
        "estimator": "batch",
        "distance_temperature": "10d",
        "rep_reduction": "released",
        "warmup_samples_per_class": None,
        "distance_margin_norm": "statistics",
    },
}


class MR2LossParts(NamedTuple):
    """Detached parts of the last MR2 loss evaluation, for logging without a host sync.

    Attributes:
        total: 0-dim total loss.
        logit: 0-dim logit margin term.
        representation: 0-dim representation margin term (before multiplying by lambda_rep).
        temperatures: [K] the gamma used (with ``logit_margin="additive"``: the margins Delta).
        margin: 0-dim distance margin ``2 * s_bar``.
    """

    total: torch.Tensor
    logit: torch.Tensor
    representation: torch.Tensor
    temperatures: torch.Tensor
    margin: torch.Tensor


def _parse_distance_temperature(value: float | str) -> tuple[float, bool]:
    """Return (factor, per_dimension) for ``1.0`` -> (1, False) and ``'10d'`` -> (10, True)."""
    if isinstance(value, str):
        text = value.strip()
        try:
            factor = float(text[:-1]) if text.endswith("d") else float("nan")
        except ValueError:
            factor = float("nan")
        if not factor > 0:
            raise MR2InputError(BAD_DISTANCE_TEMPERATURE.format(value=value))
        return factor, True
    if not is_number(value) or not value > 0:
        raise MR2InputError(BAD_DISTANCE_TEMPERATURE.format(value=value))
    return float(value), False


class MR2Loss(nn.Module):
    r"""The MR2 training objective, called as ``loss(logits, features, target)``.

    .. math::
        \mathcal{L} = \frac{1}{B}\sum_i \Big[-\log\mathrm{softmax}(z_i/\gamma_{y_i})_{y_i}
            + \lambda \log\big(1 + \sum_{j \ne i, y_j = y_i}
              e^{(\|\phi_i - \phi_j\|^2 - 2\bar s)/T}\big)\Big],
        \qquad \gamma_y = \bar c K a_y^{1/3} / \textstyle\sum_k a_k^{1/3}

    with ``a_k = ||mu_k||^2 + s_k`` and ``s_bar`` the mean of ``s_k`` from the moving class statistics
    (:class:`~mr2.ClassFeatureStatistics`, held by this module). In training mode every call first
    folds the batch's features into the statistics and then uses them (as the released code does);
    in eval mode the statistics are frozen. Until every class has been seen
    ``warmup_samples_per_class`` times the temperatures are 1 (plain cross-entropy); setting
    :attr:`gammas_enabled` to False (e.g. for warm-up epochs) does the same.

    The defaults are the paper's: L2 statistics, cube-root allocation of ``a_k``, distance
    temperature ``T = 1``, ``lambda_rep = 0.1``, representation pairs from the local batch (under data
    parallelism each rank pairs its own samples, as the released code does; ``pairs="global"`` pairs
    over the global batch with a differentiable all-gather). Variants (see :data:`VARIANTS` and
    :meth:`from_variant`) are labelled as such.

    Args:
        num_classes: K >= 2.
        c_bar: mean temperature (overall margin strength) > 0.
        lambda_rep: weight of the representation term (0 disables it and skips its O(B^2) work).
        momentum: decay of the moving statistics (0.9 in the paper's CIFAR scripts, 0.999 ImageNet).
        feature_dim: d, or None to infer it from the first batch.
        distance_temperature: ``T`` (1 = paper) or ``"<c>d"`` for c times the feature dimension.
        allocation: ``"second_moment"`` (paper: ``a_k``) or ``"spread"`` (variance-only, ``s_k``).
        norm_p: Lp norm of the statistics (2 = paper; 5 = released code).
        center_features: statistics on globally centred features (variant).
        estimator: ``"pooled"`` moving sufficient statistics (default) or ``"batch"`` (released).
        rep_reduction: ``"mean"`` over the batch (paper) or ``"released"`` (per-class means / K,
            times d/10).
        pairs: ``"local"`` or ``"global"`` batch pairs under torch.distributed.
        warmup_samples_per_class: temperatures stay 1 until every class has been seen this many
            times (None: never wait; the released code's behaviour).
        min_temperature: lower clamp on gamma (guards a class whose statistics are ~0).
        logit_margin: ``"temperature"`` (paper: ``-log softmax(z / gamma_y)_y``) or ``"additive"``
            (variant ``additive_margin``: ``-log softmax(z - Delta_y e_y)_y`` with
            ``Delta_y = margin_scale * gamma_y / mean(gamma)``, the other logits untouched; 0
            during warm-up, i.e. plain cross-entropy).
        margin_scale: ``m``, the additive margin of a class of average allocation (logit units;
            default 0.5, LDAM's largest margin). Only used with ``logit_margin="additive"``.
        distance_margin_norm: the norm of the ``s_k`` in the distance margin ``2 s_bar``: ``"l2"``
            (default; the norm of the pair distances, whatever ``norm_p`` the allocation uses) or
            ``"statistics"`` (the statistics' Lp norm: the released code's mismatch of an L5
            spread against L2 distances; used by the ``released`` variant).
        process_group: torch.distributed group (None: default group when initialised).
        check_values: validate target range / finiteness ("auto": CPU tensors only).

    Example:
        >>> torch.manual_seed(0) and None
        >>> loss_fn = MR2Loss(num_classes=3)
        >>> logits, features = torch.randn(8, 3), torch.randn(8, 4)
        >>> target = torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])
        >>> loss = loss_fn(logits, features, target)
        >>> loss.shape, loss_fn.temperatures().shape, bool(loss_fn.parts.representation >= 0)
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
        distance_temperature: float | str = 1.0,
        allocation: Allocation = "second_moment",
        norm_p: float = 2.0,
        center_features: bool = False,
        estimator: Estimator = "pooled",
        rep_reduction: RepReduction = "mean",
        pairs: Pairs = "local",
        warmup_samples_per_class: int | None = 1,
        min_temperature: float = 1e-2,
        logit_margin: LogitMargin = "temperature",
        margin_scale: float = 0.5,
        distance_margin_norm: MarginNorm = "l2",
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
            estimator=estimator,
            process_group=process_group,
            check_values=check_values,
        )
        self.num_classes = self.statistics.num_classes
        if not is_number(c_bar) or not c_bar > 0:
            raise MR2InputError(BAD_C_BAR.format(value=c_bar))
        if not is_number(lambda_rep) or lambda_rep < 0:
            raise MR2InputError(BAD_LAMBDA.format(value=lambda_rep))
        if allocation not in ("second_moment", "spread"):
            raise MR2InputError(BAD_ALLOCATION.format(value=allocation))
        if pairs not in ("local", "global"):
            raise MR2InputError(BAD_PAIRS.format(value=pairs))
        if rep_reduction not in ("mean", "released"):
            raise MR2InputError(BAD_REP_REDUCTION.format(value=rep_reduction))
        if warmup_samples_per_class is not None and (
            not is_int(warmup_samples_per_class)
            or warmup_samples_per_class < 1
        ):
            raise MR2InputError(BAD_WARMUP.format(value=warmup_samples_per_class))
        if logit_margin not in ("temperature", "additive"):
            raise MR2InputError(BAD_LOGIT_MARGIN.format(value=logit_margin))
        if (
            not is_number(margin_scale)
            or not margin_scale >= 0
        ):
            raise MR2InputError(BAD_MARGIN_SCALE.format(value=margin_scale))
        if distance_margin_norm not in ("l2", "statistics"):
            raise MR2InputError(BAD_MARGIN_NORM.format(value=distance_margin_norm))
        self.logit_margin: LogitMargin = logit_margin
        self.margin_scale = float(margin_scale)
        self.distance_margin_norm: MarginNorm = distance_margin_norm
        self.c_bar = float(c_bar)
        self.lambda_rep = float(lambda_rep)
        self.distance_temperature = distance_temperature
        self._temperature_factor, self._temperature_per_dim = _parse_distance_temperature(
            distance_temperature
        )
        self.allocation: Allocation = allocation
        self.rep_reduction: RepReduction = rep_reduction
        self.pairs: Pairs = pairs
        self.warmup_samples_per_class = warmup_samples_per_class
        self.min_temperature = float(min_temperature)
        self.process_group = process_group
        self.check_values: CheckValues = check_values
        #: Set to False to train with temperatures 1 (e.g. during warm-up epochs).
        self.gammas_enabled = True
        self.parts: MR2LossParts | None = None

    @classmethod
    def from_variant(cls, variant: str, num_classes: int, **overrides: Any) -> MR2Loss:
        """Build a named configuration from :data:`VARIANTS`, with keyword overrides.

        Example:
            >>> MR2Loss.from_variant("released", 10).statistics.norm_p
            5.0
        """
        if variant not in VARIANTS:
            raise MR2InputError(
                UNKNOWN_VARIANT.format(name=variant, choices=", ".join(sorted(VARIANTS)))
            )
        return cls(num_classes, **{**VARIANTS[variant], **overrides})

    def extra_repr(self) -> str:
        return (
            f"c_bar={self.c_bar}, lambda_rep={self.lambda_rep}, "
            f"distance_temperature={self.distance_temperature!r}, allocation={self.allocation!r}, "
            f"rep_reduction={self.rep_reduction!r}, pairs={self.pairs!r}, "
            f"logit_margin={self.logit_margin!r}"
        )

    def allocation_statistic(self, moments: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """[K] the statistic the temperatures are allocated from (``a_k`` or ``s_k``)."""
        mean_sq_norm, spread = self.statistics.moments() if moments is None else moments
        return spread if self.allocation == "spread" else mean_sq_norm + spread

    def _ready(self, stat: torch.Tensor) -> torch.Tensor:
        """0-dim bool: the statistics are ready to allocate margins from (no host sync).

        Every class must have been seen ``warmup_samples_per_class`` times, and, for the
        ``"spread"`` allocation, at least twice (the spread of a class seen once is 0).
        """
        ready = stat.sum() > 0
        needed = self.warmup_samples_per_class
        if self.allocation == "spread":
            needed = max(needed or 0, 2)
        if needed is not None:
            ready = ready & (self.statistics.samples_seen >= needed).all()
        if not self.gammas_enabled:
            ready = torch.zeros_like(ready)
        return ready

    def temperatures(self, moments: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """[K] the current per-class temperatures gamma (ones during warm-up). No host sync.

        ``moments``: ``statistics.moments()`` if already computed this step.
        """
        stat = self.allocation_statistic(moments)
        gamma = gamma_allocation(stat, self.c_bar, check_values=False).clamp_min(self.min_temperature)
        return torch.where(self._ready(stat) & torch.isfinite(gamma), gamma, torch.ones_like(gamma))

    def additive_margins(
        self, moments: tuple[torch.Tensor, torch.Tensor] | None = None
    ) -> torch.Tensor:
        """[K] ``Delta_k = margin_scale * gamma_k / mean(gamma)`` (zeros during warm-up). No host sync.

        ``gamma / mean(gamma) = K a_k^(1/3) / sum_j a_j^(1/3)`` does not depend on ``c_bar``.
        """
        gamma = self.temperatures(moments)
        ready = self._ready(self.allocation_statistic(moments))
        delta = self.margin_scale * gamma / gamma.mean()
        return torch.where(ready, delta, torch.zeros_like(delta))

    def distance_margin(self, spread: torch.Tensor | None = None) -> torch.Tensor:
        """0-dim ``2 * s_bar``.

        ``spread``: the [K] ``s_k`` of ``statistics.moments()`` if already computed this step (used
        when it is in the norm of the margin, see ``distance_margin_norm``).
        """
        stats = self.statistics
        if self.distance_margin_norm == "l2" and stats.norm_p != 2.0:
            spread = stats.spread_l2()
        return 2.0 * stats.mean_spread(spread)

    def _temperature_value(self, feature_dim: int) -> float:
        factor = self._temperature_factor
        return factor * feature_dim if self._temperature_per_dim else factor

    def representation_term(
        self, features: torch.Tensor, target: torch.Tensor, margin: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The (unweighted) representation margin term of this batch."""
        temperature = self._temperature_value(features.shape[1])
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
        if self.rep_reduction == "released":
            per_sample = representation_margin_loss(
                features, target, margin, temperature=temperature, reduction="none", **partners
            )
            scale = features.shape[1] / 10.0
            return scale * released_class_normalised_mean(per_sample, target, self.num_classes)
        return representation_margin_loss(
            features, target, margin, temperature=temperature, reduction="mean", **partners
        )

    def forward(
        self, logits: torch.Tensor, features: torch.Tensor, target: torch.Tensor
    ) -> torch.Tensor:
        """Loss of one batch (0-dim). Updates the statistics first when in training mode.

        Args:
            logits: [B, K] classifier outputs.
            features: [B, d] penultimate features (the input of the final linear layer).
            target: [B] class ids in ``[0, K)``.
        """
        check_classification_inputs(
            logits, features, target, self.num_classes, self.check_values, finite=False
        )
        # The statistics update is computed first and applied only once it is known to keep them
        # finite; that check and the inputs' finiteness check share ONE host sync (CPU only by
        # default; on accelerators a non-finite update is skipped without a sync).
        pending = self.statistics.prepare(features, target)
        # A NaN/Inf feature makes the update's guard (built from the squared norms) non-finite, so
        # with a pending update only the logits need their own finiteness pass.
        inputs = {"logits": logits} if pending is not None else {"logits": logits, "features": features}
        if wants_values(logits, self.check_values):
            check_statistics_finite(
                inputs, None if pending is None else pending.guard, also_count={"features": features}
            )
            self.statistics.commit(pending)
        else:
            self.statistics.commit(pending, only_if_finite=True)
        moments = self.statistics.moments()
        margin = self.distance_margin(moments[1])
        if self.logit_margin == "additive":
            gamma = self.additive_margins(moments)
            logit_term = additive_margin_loss(logits, target, gamma)
        else:
            gamma = self.temperatures(moments)
            logit_term = logit_margin_loss(logits, target, gamma)
        if self.lambda_rep > 0:
            rep_term = self.representation_term(features, target, margin)
        else:
            rep_term = logit_term.new_zeros(())
        total = logit_term + self.lambda_rep * rep_term
        self.parts = MR2LossParts(total.detach(), logit_term.detach(), rep_term.detach(), gamma, margin)
        return total
