"""Supervised contrastive learning (Khosla et al., NeurIPS 2020), one stage with cross-entropy."""

from __future__ import annotations

from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from mr2 import distributed
from mr2.checks import check_classification_inputs, check_num_classes, is_int, is_number
from mr2.errors import check_choice, listed
from mr2.functional.reduction import working_dtype
from mr2.functional.representation_baselines import supervised_contrastive_loss
from mr2.methods.base import MethodContext, TrainingMethod
from mr2.methods.registry import MethodConfigError, register_method

__all__ = ["SupCon"]

Head = Literal["mlp", "linear"]
Pairs = Literal["global", "local"]

BAD_POSITIVE = "supcon option {name} must be a number > 0; got {value!r}."
BAD_WEIGHT = "supcon option weight must be a number >= 0; got {value!r}."
BAD_HEAD = f"supcon option head must be one of {listed(Head)}; got {{value!r}}."
BAD_PAIRS = f"supcon option pairs must be one of {listed(Pairs)}; got {{value!r}}."
BAD_DIM = "supcon option projection_dim must be an integer >= 1; got {value!r}."
_NOT_SET_UP = "SupCon.setup(context) must run before training: the projection head is sized to the features."


def _positive(name: str, value: object) -> float:
    if not is_number(value) or not value > 0:
        raise MethodConfigError(BAD_POSITIVE.format(name=name, value=value))
    return float(value)


@register_method("supcon")
class SupCon(TrainingMethod):
    r"""Cross-entropy on the classifier plus SupCon on an L2-normalised projection of the features.

    .. math::
        \mathcal{L} = \frac{1}{B}\sum_i \Big[-\log\mathrm{softmax}(z_i)_{y_i}
            + w\,\ell^{sup}_i\big(v\big)\Big], \qquad v_i = \frac{g(\phi(x_i))}{\|g(\phi(x_i))\|_2}

    with ``g`` the projection head (HobbitLong/SupContrast's ``mlp``: Linear(d, d), ReLU,
    Linear(d, 128); or ``linear``) and ``l^sup`` the SupCon loss of
    :func:`~mr2.functional.representation_baselines.supervised_contrastive_loss`: positives are the
    other samples of the same class in the batch; with ``pairs="global"`` (default) under
    torch.distributed, the contrasts are the GLOBAL batch (a differentiable all-gather, as MR2's
    ``pairs: global``), so 2 ranks x B give the gradients of 1 process x 2B. The head's parameters
    belong to the method (optimised with the model, averaged over ranks by the engine) and are
    initialised from ``init_seed``, identically on every rank.

    ``log_values()``: ``loss_ce`` and ``loss_supcon`` (before the weight).

    One stage, one view: the paper pre-trains the encoder with SupCon alone on two augmented views
    and then trains a linear classifier on frozen features; here both terms train together on the
    engine's single view (docs/methods/supcon.md says why).

    Args:
        num_classes: K.
        temperature: tau (0.1).
        base_temperature: tau_b of the reference's ``tau / tau_b`` scaling (0.07).
        weight: w, the weight of the SupCon term (1.0).
        head: ``"mlp"`` or ``"linear"``.
        projection_dim: width of the projection (128).
        pairs: ``"global"`` or ``"local"`` batch under torch.distributed.
        init_seed: seed of the head's initialisation.

    Example:
        >>> from mr2.methods.base import MethodContext
        >>> method = SupCon(3, weight=0.0)
        >>> method.setup(MethodContext(3, 6, torch.ones(3), 4, torch.device("cpu"), 1))
        >>> z, f, y = torch.randn(6, 3), torch.randn(6, 4), torch.tensor([0, 1, 2, 0, 1, 2])
        >>> bool(torch.isclose(method(z, f, y), F.cross_entropy(z, y)))
        True
    """

    reads_features = True
    needs_feature_dim = True

    def __init__(
        self,
        num_classes: int,
        *,
        temperature: float = 0.1,
        base_temperature: float = 0.07,
        weight: float = 1.0,
        head: Head = "mlp",
        projection_dim: int = 128,
        pairs: Pairs = "global",
        init_seed: int = 0,
    ) -> None:
        super().__init__()
        self.num_classes = check_num_classes(num_classes)
        self.temperature = _positive("temperature", temperature)
        self.base_temperature = _positive("base_temperature", base_temperature)
        if not is_number(weight) or weight < 0:
            raise MethodConfigError(BAD_WEIGHT.format(value=weight))
        check_choice(head, Head, BAD_HEAD, MethodConfigError)
        check_choice(pairs, Pairs, BAD_PAIRS, MethodConfigError)
        if not is_int(projection_dim) or projection_dim < 1:
            raise MethodConfigError(BAD_DIM.format(value=projection_dim))
        self.weight = float(weight)
        self.head_kind: Head = head
        self.projection_dim = projection_dim
        self.pairs: Pairs = pairs
        self.init_seed = int(init_seed)
        self.head: nn.Module | None = None
        self._group: Any = None

    def setup(self, context: MethodContext) -> None:
        d = context.feature_dim
        with torch.random.fork_rng(devices=[]):
            torch.default_generator.manual_seed(self.init_seed)  # CPU only: CUDA's stream untouched
            if self.head_kind == "mlp":
                head: nn.Module = nn.Sequential(
                    nn.Linear(d, d), nn.ReLU(inplace=True), nn.Linear(d, self.projection_dim)
                )
            else:
                head = nn.Linear(d, self.projection_dim)
        self.head = head.to(context.device)
        self._group = context.process_group

    def embed(self, features: torch.Tensor) -> torch.Tensor:
        """The L2-normalised projection ``v`` [B, projection_dim] (float32 at least)."""
        if self.head is None:
            raise MethodConfigError(_NOT_SET_UP)
        projected = self.head(features)
        return F.normalize(projected.to(working_dtype(projected)), dim=1)

    def forward(
        self, logits: torch.Tensor, features: torch.Tensor, target: torch.Tensor
    ) -> torch.Tensor:
        check_classification_inputs(logits, features, target, self.num_classes)
        ce = F.cross_entropy(logits.to(working_dtype(logits)), target)
        if self.weight == 0:
            self.record(loss_ce=ce)
            return ce
        embeddings = self.embed(features)
        contrasts, contrast_target, offset = embeddings, target, 0
        if self.pairs == "global" and distributed.is_distributed(self._group):
            contrasts, offset = distributed.all_gather_with_grad(embeddings, self._group)
            contrast_target, _ = distributed.all_gather_variable(target, self._group)
        supcon = supervised_contrastive_loss(
            embeddings, target, contrasts, contrast_target, anchor_offset=offset,
            temperature=self.temperature, base_temperature=self.base_temperature,
        ).mean()
        self.record(loss_ce=ce, loss_supcon=supcon)
        return ce + self.weight * supcon
