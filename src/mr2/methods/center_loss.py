"""Center loss (Wen et al., ECCV 2016) joint with cross-entropy (``method: center_loss``)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from mr2 import distributed
from mr2.checks import check_classification_inputs, check_num_classes, is_number
from mr2.errors import check_choice, listed
from mr2.functional.class_sums import class_sums
from mr2.functional.reduction import working_dtype
from mr2.functional.representation_baselines import CenterUpdate, center_distances, center_update
from mr2.losses.eval_mode import warn_if_evaluating_in_train_mode
from mr2.methods.base import MethodContext, TrainingMethod
from mr2.methods.registry import MethodConfigError, register_method

__all__ = ["CenterLoss"]

BAD_LAMBDA = "center_loss option lambda_center must be a number >= 0; got {value!r}."
BAD_ALPHA = "center_loss option alpha must be a number in (0, 1]; got {value!r}."
BAD_UPDATE = f"center_loss option update must be one of {listed(CenterUpdate)}; got {{value!r}}."
_NOT_SET_UP = "CenterLoss.setup(context) must run before training: the centres are sized to the features."


@register_method("center_loss")
class CenterLoss(TrainingMethod):
    r"""Cross-entropy plus a pull of every feature towards its class centre.

    .. math::
        \mathcal{L} = \frac{1}{B}\sum_i \Big[-\log\mathrm{softmax}(z_i)_{y_i}
            + \frac{\lambda}{2}\|\phi(x_i) - c_{y_i}\|_2^2\Big]

    The centres ``c`` [K, d] are a buffer, not parameters: the loss's gradient reaches the features
    only, and after each training batch (under ``no_grad``, float32) the centres move by
    :func:`~mr2.functional.representation_baselines.center_update` at their own rate ``alpha``
    (``update="paper"``: Wen et al.'s rule, ``"reference"``: KaiyangZhou/pytorch-center-loss's SGD
    step on the centres). Under torch.distributed the batch's per-class counts and feature sums are
    all-reduced before the update, so every rank holds the same centres (2 ranks x B = 1 x 2B).
    They start from a standard normal draw (as the reference's ``torch.randn``), from a generator
    seeded with ``init_seed`` so that every rank and every resume starts from the same centres.

    ``log_values()``: ``loss_ce`` and ``loss_center`` (the mean squared distance, before lambda/2).

    Args:
        num_classes: K.
        lambda_center: lambda (0.003, the paper's face-recognition value; the reference's
            ``weight_cent = w`` is ``lambda = 2 w``).
        alpha: the centres' rate (0.5, the paper's and the reference's).
        update: ``"paper"`` or ``"reference"``.
        init_seed: seed of the centres' initial draw.

    Example:
        >>> method = CenterLoss(3, lambda_center=0.0)
        >>> from mr2.methods.base import MethodContext
        >>> method.setup(MethodContext(3, 6, torch.ones(3), 4, torch.device("cpu"), 1))
        >>> z, f, y = torch.randn(6, 3), torch.randn(6, 4), torch.tensor([0, 1, 2, 0, 1, 2])
        >>> bool(torch.isclose(method(z, f, y), F.cross_entropy(z, y)))
        True
    """

    reads_features = True

    centers: torch.Tensor

    def __init__(
        self,
        num_classes: int,
        *,
        lambda_center: float = 0.003,
        alpha: float = 0.5,
        update: CenterUpdate = "paper",
        init_seed: int = 0,
    ) -> None:
        super().__init__()
        self.num_classes = check_num_classes(num_classes)
        if not is_number(lambda_center) or lambda_center < 0:
            raise MethodConfigError(BAD_LAMBDA.format(value=lambda_center))
        if not is_number(alpha) or not 0 < alpha <= 1:
            raise MethodConfigError(BAD_ALPHA.format(value=alpha))
        check_choice(update, CenterUpdate, BAD_UPDATE, MethodConfigError)
        self.lambda_center = float(lambda_center)
        self.alpha = float(alpha)
        self.update: CenterUpdate = update
        self.init_seed = int(init_seed)
        self.register_buffer("centers", torch.zeros(0))
        self._group: Any = None

    def setup(self, context: MethodContext) -> None:
        generator = torch.Generator().manual_seed(self.init_seed)
        centers = torch.randn(self.num_classes, context.feature_dim, generator=generator)
        self.centers = centers.to(context.device)
        self._group = context.process_group

    def forward(
        self, logits: torch.Tensor, features: torch.Tensor, target: torch.Tensor
    ) -> torch.Tensor:
        check_classification_inputs(logits, features, target, self.num_classes)
        if self.centers.dim() != 2:
            raise MethodConfigError(_NOT_SET_UP)
        ce = F.cross_entropy(logits.to(working_dtype(logits)), target)
        distance = center_distances(features, self.centers, target).mean()
        loss = ce + 0.5 * self.lambda_center * distance
        if self.training:
            warn_if_evaluating_in_train_mode(self, "class centres")
            self._update_centers(features.detach(), target)
        self.record(loss_ce=ce, loss_center=distance)
        return loss

    @torch.no_grad()
    def _update_centers(self, features: torch.Tensor, target: torch.Tensor) -> None:
        sums = class_sums(features.float(), target, self.num_classes)
        packed = torch.cat([sums.counts.unsqueeze(1).float(), sums.feature_sums.float()], dim=1)
        distributed.all_reduce_sum_(packed, self._group)
        self.centers.copy_(center_update(self.centers, packed[:, 0], packed[:, 1:], self.alpha, self.update))

    def class_statistics(self) -> dict[str, torch.Tensor]:
        """Per-class squared norm of the centre ([K])."""
        return {"center_sq_norm": self.centers.pow(2).sum(dim=1)}
