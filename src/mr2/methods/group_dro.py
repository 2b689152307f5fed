"""Group DRO (Sagawa et al., ICLR 2020) with one group per class."""

from __future__ import annotations

from typing import Any

import torch

from mr2 import distributed
from mr2.checks import MR2InputError, check_num_classes
from mr2.functional.baselines import class_loss_sums, group_dro_update
from mr2.losses.eval_mode import warn_if_evaluating_in_train_mode
from mr2.methods.base import MethodContext, TrainingMethod, checked_cross_entropy
from mr2.methods.registry import register_method

__all__ = ["GroupDRO"]

_BAD_ETA = "eta (the robust step size) must be >= 0; got {value!r}."
_BAD_ADJUSTMENT = "adjustment (C of C / sqrt(n_k)) must be >= 0; got {value!r}."


@register_method("group_dro")
class GroupDRO(TrainingMethod):
    r"""Online group DRO over the classes: exponentiated-gradient class weights, weighted class losses.

    Per step, with ``l_k`` the mean cross-entropy of class ``k`` in the (global) batch and ``P`` the
    classes present in it:

    .. math::
        q_k &\leftarrow q_k \exp\big(\eta\,(l_k + C/\sqrt{n_k})\big)
            \ \text{ for } k \in P, \text{ renormalised to the mass } \textstyle\sum_{j \in P} q_j
            \text{ they held; } q_k \text{ unchanged for } k \notin P \\
        L &= \textstyle\sum_{k \in P} q_k\, l_k

    with the updated ``q`` (as kohpangwei/group_DRO ``LossComputer.compute_robust_loss``); ``q``
    starts uniform and gets no gradient. Absent classes are neither pushed down (the reference
    treats them as zero-loss classes, shrinking their weight) nor counted in ``L``. With
    ``eta = 0`` ``q`` stays uniform and ``L`` is the mean of the per-class mean losses: on a batch
    with equally many samples of every class, exactly cross-entropy. On class-balanced data
    ``C / sqrt(n_k)`` is the same for every class and cancels in the normalisation.

    Under ``torch.distributed`` the per-class loss sums and counts are all-reduced before the
    update (every rank holds the same ``q``) and each rank returns
    ``world_size * sum_k q_k S_k^{local} / n_k^{global}``, so that the engine's gradient averaging
    over ranks yields exactly the gradient of ``L`` on the global batch.

    Args:
        num_classes: K.
        eta: step size of ``q`` (0.01, the reference's ``--robust_step_size``).
        adjustment: ``C`` of the generalization adjustment (0, the reference's default).
    """

    q: torch.Tensor
    class_adjustment: torch.Tensor

    def __init__(self, num_classes: int, *, eta: float = 0.01, adjustment: float = 0.0) -> None:
        super().__init__()
        self.num_classes = check_num_classes(num_classes)
        if float(eta) < 0:
            raise MR2InputError(_BAD_ETA.format(value=eta))
        if float(adjustment) < 0:
            raise MR2InputError(_BAD_ADJUSTMENT.format(value=adjustment))
        self.eta = float(eta)
        self.adjustment = float(adjustment)
        # float64: K numbers, updated multiplicatively every step for the whole run.
        self.register_buffer("q", torch.full((num_classes,), 1.0 / num_classes, dtype=torch.float64))
        self.register_buffer("class_adjustment", torch.zeros(num_classes, dtype=torch.float64))
        self._group: Any = None

    def setup(self, context: MethodContext) -> None:
        counts = context.class_counts.to(device=context.device, dtype=torch.float64)
        self.q = self.q.to(context.device)
        self.class_adjustment = self.adjustment / counts.clamp_min(1.0).sqrt()
        self._group = context.process_group

    def forward(
        self, logits: torch.Tensor, features: torch.Tensor | None, target: torch.Tensor
    ) -> torch.Tensor:
        per_sample = checked_cross_entropy(logits, target, self.num_classes, reduction="none")
        dtype = per_sample.dtype
        local_sums, local_counts = class_loss_sums(per_sample, target, self.num_classes)
        reduced = torch.cat([local_sums.detach(), local_counts])
        world = 1
        if self.training:  # evaluation never touches q and needs no collective
            distributed.all_reduce_sum_(reduced, self._group)
            world = distributed.world_size(self._group)
        global_sums, global_counts = reduced[: self.num_classes], reduced[self.num_classes :]
        present = global_counts > 0
        denom = global_counts.clamp_min(1.0)
        class_loss = global_sums / denom
        if self.training:
            warn_if_evaluating_in_train_mode(self, "class weights q")
            with torch.no_grad():
                self.q.copy_(group_dro_update(self.q, class_loss, present, self.eta, self.class_adjustment))
        q = self.q.to(dtype)
        loss = world * (q * local_sums / denom).sum()
        self.record(
            loss=(q * class_loss).sum(),
            worst_class_loss=torch.where(present, class_loss, torch.zeros_like(class_loss)).max(),
            q_max=q.max(),
            q_min=q.min(),
        )
        return loss

