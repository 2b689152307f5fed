"""Hardness-based resampling (HBR, arXiv 2504.07031): AUM per class, then a resampled second stage."""

from __future__ import annotations

import warnings
from typing import Any, Literal

import torch
import torch.nn.functional as F

from mr2 import distributed
from mr2.checks import is_number
from mr2.errors import check_choice, listed
from mr2.functional.representation_baselines import hardness_resampling_counts, hbr_class_sample_counts
from mr2.methods.base import MethodContext, TrainingMethod, checked_cross_entropy
from mr2.methods.registry import MethodConfigError, register_method
from mr2.methods.stages import NO_INDEX, STAGE2_TOO_EARLY, TwoStageReset, resolve_stage1
from mr2.report.margins import logit_margins

__all__ = ["HBR"]

Oversampling = Literal["random", "none"]
Undersampling = Literal["easy", "none"]
Estimator = Literal["aum", "loss"]

BAD_ALPHA = "hbr option alpha must be a number >= 1 (1: the class counts the hardness gives); got {value!r}."
BAD_OVERSAMPLING = f"hbr option oversampling must be one of {listed(Oversampling)}; got {{value!r}}."
BAD_UNDERSAMPLING = f"hbr option undersampling must be one of {listed(Undersampling)}; got {{value!r}}."
BAD_ESTIMATOR = f"hbr option estimator must be one of {listed(Estimator)}; got {{value!r}}."
#: A class holding more than this share of the resampled set is reported (warning).
DOMINANT_SHARE = 0.5
_DOMINANT_CLASS = (
    "hbr: class {k} takes {share:.1%} of the resampled training set ({count} of {total} samples; its "
    "class hardness is {hardness:.4g}): with the AUM estimator a class of mean AUM <= 0 gets inverse "
    "hardness 1e4 under the reference's offset, and the second stage then learns mostly that class. "
    "Consider method.options.estimator: loss or a longer stage 1 (docs/methods/hbr.md)."
)


@register_method("hbr")
class HBR(TwoStageReset, TrainingMethod):
    r"""Measure per-class hardness with a first ERM stage, then train afresh on a resampled set.

    Stage 1 (epochs ``0 .. T-1``): cross-entropy; each training-mode forward records every
    sample's area under the margin (AUM, the reference's default estimator),
    ``z_y - max_{k != y} z_k``, and the hardness of sample i is its mean over the stage (the
    reference averages it over the epochs of each model and then over an ensemble of models). After
    epoch ``T-1`` the class hardness ``h_k`` (mean AUM of class k) gives the per-class counts of
    :func:`~mr2.functional.representation_baselines.hbr_class_sample_counts` (harder classes get
    more samples, the total stays N), and
    :func:`~mr2.functional.representation_baselines.hardness_resampling_counts` resamples each class
    to its count: an over-full class keeps its hardest samples (``undersampling="easy"``), an
    under-full one adds uniform draws with replacement (``oversampling="random"``). The method then
    asks the engine for a fresh model (:meth:`wants_model_reset`, as JTT), and stage 2 (epochs
    ``T .. epochs-1``) trains cross-entropy on the resampled set, reshuffled each epoch.

    State (``state_dict``): ``aum_sum`` (float64 [N]: the estimator's values, AUM or loss) and
    ``aum_count`` (int64 [N]), summed over
    ranks at the end of every stage-1 epoch (so a checkpoint holds every rank's records),
    ``labels`` (int64 [N], recorded with the AUM), ``class_hardness`` (float64 [K]), ``multiplicity``
    (int64 [N], the resampled set) and ``frozen``. The oversampling draws use a
    generator seeded with the method's stream's seed (``torch.initial_seed()`` in :meth:`setup`: the
    engine's ``derive_seed(seed, "method")``, :mod:`mr2.engine.streams`), identical on every rank.

    Args:
        num_classes: K.
        stage1_epochs: T; default (None): ``max(1, round(0.2 * epochs))`` (as JTT's).
        alpha: imbalance amplification of the reference (1.0: none).
        oversampling: ``"random"`` or ``"none"``.
        undersampling: ``"easy"`` or ``"none"``.
        estimator: ``"aum"`` (the reference's default; low = hard) or ``"loss"`` (the reference's
            ``Loss`` estimator: mean per-sample cross-entropy, high = hard, never needs the shift).
    """

    plain_loss = False  # resampled epochs and a second stage

    aum_sum: torch.Tensor
    aum_count: torch.Tensor
    multiplicity: torch.Tensor
    frozen: torch.Tensor
    class_hardness: torch.Tensor
    labels: torch.Tensor
    epoch_sum: torch.Tensor
    epoch_count: torch.Tensor

    def __init__(
        self,
        num_classes: int,
        *,
        stage1_epochs: int | None = None,
        alpha: float = 1.0,
        oversampling: Oversampling = "random",
        undersampling: Undersampling = "easy",
        estimator: Estimator = "aum",
    ) -> None:
        super().__init__()
        self.init_stages(num_classes, stage1_epochs, MethodConfigError)
        if not is_number(alpha) or not alpha >= 1:
            raise MethodConfigError(BAD_ALPHA.format(value=alpha))
        check_choice(oversampling, Oversampling, BAD_OVERSAMPLING, MethodConfigError)
        check_choice(undersampling, Undersampling, BAD_UNDERSAMPLING, MethodConfigError)
        check_choice(estimator, Estimator, BAD_ESTIMATOR, MethodConfigError)
        self.estimator: Estimator = estimator
        self.alpha = float(alpha)
        self.oversampling: Oversampling = oversampling
        self.undersampling: Undersampling = undersampling
        self.register_buffer("aum_sum", torch.zeros(0, dtype=torch.float64))
        self.register_buffer("aum_count", torch.zeros(0, dtype=torch.int64))
        self.register_buffer("multiplicity", torch.zeros(0, dtype=torch.int64))
        self.register_buffer("class_hardness", torch.zeros(num_classes, dtype=torch.float64))
        # This epoch's records on this rank (folded into aum_sum / aum_count at its end).
        self.register_buffer("epoch_sum", torch.zeros(0, dtype=torch.float64), persistent=False)
        self.register_buffer("epoch_count", torch.zeros(0, dtype=torch.int64), persistent=False)
        self.register_buffer("labels", torch.zeros(0, dtype=torch.int64))
        self._group: Any = None
        self._epoch = 0
        self._index: torch.Tensor | None = None
        self._seed = 0

    def setup(self, context: MethodContext) -> None:
        self.stage1_epochs = resolve_stage1(
            "hbr", self.requested_stage1_epochs, context.epochs, MethodConfigError
        )
        n, device = context.num_train_samples, context.device
        self.aum_sum = torch.zeros(n, dtype=torch.float64, device=device)
        self.aum_count = torch.zeros(n, dtype=torch.int64, device=device)
        self.multiplicity = torch.zeros(n, dtype=torch.int64, device=device)
        self.frozen = torch.zeros((), dtype=torch.bool, device=device)
        self.class_hardness = torch.zeros(self.num_classes, dtype=torch.float64, device=device)
        self.epoch_sum = torch.zeros(n, dtype=torch.float64, device=device)
        self.epoch_count = torch.zeros(n, dtype=torch.int64, device=device)
        self.labels = torch.full((n,), -1, dtype=torch.int64, device=device)
        self._group = context.process_group
        self._seed = torch.initial_seed()

    def on_epoch_start(self, epoch: int) -> None:
        self._epoch = epoch
        self.epoch_sum.zero_()
        self.epoch_count.zero_()

    def on_batch(self, inputs: torch.Tensor, target: torch.Tensor, index: torch.Tensor) -> None:
        if self.training and self._epoch < self.stage1_epochs:
            self._index = index.to(device=self.aum_sum.device, dtype=torch.long)

    def forward(
        self, logits: torch.Tensor, features: torch.Tensor | None, target: torch.Tensor
    ) -> torch.Tensor:
        loss = checked_cross_entropy(logits, target, self.num_classes)
        dtype = loss.dtype
        if self.training and self._epoch < self.stage1_epochs:
            if self._index is None:
                raise MethodConfigError(NO_INDEX.format(method="HBR", stage="the first stage"))
            with torch.no_grad():
                z = logits.detach().to(dtype)
                if self.estimator == "aum":
                    score = logit_margins(z, target)
                else:
                    score = F.cross_entropy(z, target, reduction="none")
                self.epoch_sum.index_add_(0, self._index, score.to(torch.float64))
                self.epoch_count.index_add_(0, self._index, torch.ones_like(self._index))
                self.labels[self._index] = target.to(self.labels.device)
        self._index = None
        self.record(loss=loss)
        return loss

    def on_epoch_end(self, epoch: int) -> None:
        if epoch >= self.stage1_epochs or bool(self.frozen):
            return
        records = torch.stack([self.epoch_sum, self.epoch_count.to(torch.float64)])
        distributed.all_reduce_sum_(records, self._group)
        self.aum_sum += records[0]
        self.aum_count += records[1].round().to(torch.int64)
        self.labels.copy_(self._merged_labels())
        if epoch == self.stage1_epochs - 1:
            self._freeze()

    def _freeze(self) -> None:
        seen = self.aum_count > 0
        aum = self.aum_sum / self.aum_count.clamp_min(1).to(torch.float64)
        target = self.labels.clamp_min(0)
        hardness = torch.zeros(self.num_classes, dtype=torch.float64, device=aum.device)
        hardness.index_add_(0, target[seen], aum[seen])
        seen_per_class = torch.bincount(target[seen], minlength=self.num_classes).clamp_min(1)
        class_hardness = hardness / seen_per_class.to(torch.float64)
        high_is_hard = self.estimator == "loss"
        present = torch.bincount(target[seen], minlength=self.num_classes) > 0  # a class without
        wanted = torch.zeros(self.num_classes, dtype=torch.int64, device=aum.device)  # samples: none
        wanted[present] = hbr_class_sample_counts(
            class_hardness[present], target.numel(), self.alpha, high_is_hard=high_is_hard
        ).to(aum.device)
        generator = torch.Generator().manual_seed(self._seed)
        self.multiplicity.copy_(
            hardness_resampling_counts(
                aum, target, wanted, generator,
                undersample=self.undersampling == "easy", oversample=self.oversampling == "random",
                high_is_hard=high_is_hard,
            )
        )
        self.class_hardness.copy_(class_hardness)
        self.frozen.fill_(True)
        self._warn_if_one_class_dominates(target, class_hardness)

    def _warn_if_one_class_dominates(self, target: torch.Tensor, class_hardness: torch.Tensor) -> None:
        weights = self.multiplicity.to(torch.float64)
        counts = torch.bincount(target, weights=weights, minlength=self.num_classes)
        total, top = float(counts.sum()), int(counts.argmax())
        if self.num_classes > 2 and total > 0 and counts[top] > DOMINANT_SHARE * total:
            message = _DOMINANT_CLASS.format(k=top, share=float(counts[top]) / total, count=int(counts[top]),
                                            total=int(total), hardness=float(class_hardness[top]))
            warnings.warn(message, RuntimeWarning, stacklevel=3)

    def _merged_labels(self) -> torch.Tensor:
        """Every recorded sample's label, merged over ranks (-1: never seen on any rank)."""
        stacked, _ = distributed.all_gather_variable((self.labels + 1).unsqueeze(0), self._group)
        return stacked.max(dim=0).values - 1

    def epoch_indices(self, epoch: int, generator: torch.Generator) -> torch.Tensor | None:
        """Stage 2: the resampled index list, shuffled (the same on every rank for one generator)."""
        if epoch < self.stage1_epochs:
            return None
        if not bool(self.frozen):
            raise MethodConfigError(STAGE2_TOO_EARLY.format(method="HBR", epoch=epoch, what="the hardness",
                                                            last=self.stage1_epochs - 1))
        counts = self.multiplicity.cpu()
        indices = torch.repeat_interleave(torch.arange(counts.numel()), counts)
        return indices[torch.randperm(indices.numel(), generator=generator)]

    def log_values(self) -> dict[str, torch.Tensor]:
        """The loss and the size of the resampled set (0 until it is built)."""
        return {**super().log_values(), "resampled_size": self.multiplicity.sum()}

    def class_statistics(self) -> dict[str, torch.Tensor]:
        """Per-class hardness (mean AUM of stage 1; 0 until measured) and resampled count ([K])."""
        counts = torch.zeros(self.num_classes, dtype=torch.int64, device=self.multiplicity.device)
        counts.index_add_(0, self.labels.clamp_min(0), self.multiplicity)
        return {"class_hardness": self.class_hardness, "resampled_count": counts}
