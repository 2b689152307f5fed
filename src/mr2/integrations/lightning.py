"""PyTorch Lightning: train with :class:`~mr2.MR2Loss` and log class-wise disparity.

What a ``LightningModule`` needs (see examples/lightning_mr2.py and docs/integrations.md):

- the loss as an attribute of the module (``self.criterion = MR2Loss(...)``): its class statistics
  are then buffers of the module, in every checkpoint Lightning writes, restored by
  ``trainer.fit(ckpt_path=...)`` and moved by ``.to()``; pass ``feature_dim`` so that the buffers
  have their shape before DDP wraps the module;
- :class:`MR2StatisticsCallback`: with ``accumulate_grad_batches = k > 1`` it makes the statistics
  add up the ``k`` micro-batches and applies them once per optimiser step (the statistics of one
  batch of ``k`` times the size); with ``k = 1`` it does nothing; when the module holds no MR2
  statistics (the loss is not one of its attributes) it warns once with
  :class:`NoStatisticsWarning` at the start of training;
- :func:`log_mr2_parts` in ``training_step`` and :func:`log_disparity` at the end of a validation
  epoch: both go through ``LightningModule.log_dict`` with scalar values only.

Under the ``ddp`` strategy the statistics are all-reduced inside the loss (every rank holds the same
values, so DDP's buffer broadcast from rank 0 changes nothing), and ``ClasswiseDisparity`` sums its
confusion matrix over the ranks: its logged values are already global.
"""

from __future__ import annotations

import warnings
from typing import Any

from torch import nn

from mr2.extras import needs_extra
from mr2.statistics.accumulation import apply_accumulation, begin_accumulation, end_accumulation

with needs_extra("mr2.integrations.lightning", "lightning", "lightning"):
    import lightning.pytorch as pl

from mr2.losses.mr2 import MR2Loss
from mr2.metrics.classwise_disparity import ClasswiseDisparity
from mr2.statistics.class_features import ClassFeatureStatistics

__all__ = [
    "MR2StatisticsCallback",
    "NoStatisticsWarning",
    "log_disparity",
    "log_mr2_parts",
    "statistics_modules",
]

#: The warning of :class:`MR2StatisticsCallback` for a module without MR2 statistics.
NO_STATISTICS = (
    "mr2.integrations.lightning.MR2StatisticsCallback: the LightningModule {module} holds no MR2 class "
    "statistics (no MR2Loss or ClassFeatureStatistics among its submodules), so the callback does nothing: "
    "no deferral under gradient accumulation, and Lightning's checkpoints will not hold the statistics. "
    "Make the loss an attribute of the module in __init__ (self.criterion = MR2Loss(...))."
)


class NoStatisticsWarning(UserWarning):
    """:class:`MR2StatisticsCallback` found no MR2 statistics on the ``LightningModule``."""


def statistics_modules(module: nn.Module) -> list[ClassFeatureStatistics]:
    """Every :class:`~mr2.ClassFeatureStatistics` inside ``module`` (e.g. an ``MR2Loss``'s)."""
    return [child for child in module.modules() if isinstance(child, ClassFeatureStatistics)]


class MR2StatisticsCallback(pl.Callback):
    """Gradient accumulation for MR2's class statistics inside a Lightning ``Trainer``.

    Without this callback every micro-batch is one moving-average step of the statistics (those of
    a run at the micro-batch size, see :class:`~mr2.ClassFeatureStatistics`). With it, and
    ``Trainer(accumulate_grad_batches=k)``, the statistics of the module's ``MR2Loss`` add the
    micro-batches up and apply them once, in ``on_before_optimizer_step`` (after the last
    micro-batch's backward, on every rank), so they equal the statistics of one batch of ``k``
    micro-batches. The last, shorter group of an epoch is applied at its own optimiser step.

    The statistics are found among the module's submodules (:func:`statistics_modules`), so the loss
    must be an attribute of the ``LightningModule``; when none is found at the start of training the
    callback warns once (:class:`NoStatisticsWarning`) and does nothing.

    Args:
        defer: True/False to force deferral on/off; None (default): on when
            ``trainer.accumulate_grad_batches > 1``.
    """

    def __init__(self, defer: bool | None = None) -> None:
        self.defer = defer
        self._warned = False

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        defer = trainer.accumulate_grad_batches > 1 if self.defer is None else self.defer
        found = statistics_modules(pl_module)
        if not found and not self._warned:
            self._warned = True
            message = NO_STATISTICS.format(module=type(pl_module).__name__)
            warnings.warn(message, NoStatisticsWarning, stacklevel=2)
        begin_accumulation(found, defer=defer)

    def on_before_optimizer_step(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any
    ) -> None:
        apply_accumulation(statistics_modules(pl_module))

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        end_accumulation(statistics_modules(pl_module))


def log_mr2_parts(
    module: pl.LightningModule, criterion: MR2Loss, prefix: str = "train/", **log_kwargs: Any
) -> dict[str, Any]:
    """Log the last MR2 evaluation's scalar parts (no host sync) and return what was logged.

    Names: ``{prefix}loss``, ``{prefix}logit_term``, ``{prefix}representation_term``,
    ``{prefix}distance_margin``, ``{prefix}temperature_min`` and ``{prefix}temperature_max``.
    ``log_kwargs`` go to ``log_dict`` (e.g. ``prog_bar=True``). Nothing is logged before the first
    call of the loss.
    """
    parts = criterion.parts
    if parts is None:
        return {}
    values = {
        f"{prefix}loss": parts.total,
        f"{prefix}logit_term": parts.logit,
        f"{prefix}representation_term": parts.representation,
        f"{prefix}distance_margin": parts.margin,
        f"{prefix}temperature_min": parts.logit_margins.min(),
        f"{prefix}temperature_max": parts.logit_margins.max(),
    }
    module.log_dict(values, **log_kwargs)
    return values


def log_disparity(
    module: pl.LightningModule,
    metric: ClasswiseDisparity,
    prefix: str = "val/",
    *,
    reset: bool = True,
    **log_kwargs: Any,
) -> dict[str, float]:
    """Log ``metric.to_log_dict(prefix)`` through ``module.log_dict`` and reset the metric.

    Call it from ``on_validation_epoch_end`` (or ``on_train_epoch_end``) after updating ``metric``
    in every step. The values are Python floats (overall, worst/best class, difference, tiers when
    the metric has a fixed :class:`~mr2.report.TierSplit`, one ``class_accuracy/<name>`` per class),
    computed from the confusion matrix summed over the ranks, so every rank logs the same values;
    ``sync_dist`` defaults to True all the same (the mean of equal values: Lightning otherwise warns
    at every epoch-level key under DDP; pass ``sync_dist=False`` to skip those all-reduces with very
    many classes). Returns the logged dictionary.
    """
    values = metric.to_log_dict(prefix)
    log_kwargs.setdefault("sync_dist", True)
    module.log_dict(values, **log_kwargs)
    if reset:
        metric.reset()
    return values
