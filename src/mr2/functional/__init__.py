"""Pure tensor functions of MR2 (no state, no I/O)."""

from mr2.functional.allocation import BoundTerms, class_sensitive_bound, gamma_allocation
from mr2.functional.baselines import (
    cdb_class_weights,
    class_loss_sums,
    drw_class_weights,
    focal_loss,
    generalized_cross_entropy,
    group_dro_update,
    jtt_upsampled_indices,
    ldam_logits,
    ldam_margins,
    logit_adjusted_cross_entropy,
)
from mr2.functional.class_sums import ClassSums, class_sums
from mr2.functional.margin_losses import (
    additive_margin_loss,
    logit_margin_loss,
    pairwise_sq_distances,
    representation_margin_loss,
)
from mr2.functional.released import released_class_normalised_mean

__all__ = [
    "BoundTerms",
    "ClassSums",
    "additive_margin_loss",
    "cdb_class_weights",
    "class_loss_sums",
    "class_sensitive_bound",
    "class_sums",
    "drw_class_weights",
    "focal_loss",
    "gamma_allocation",
    "generalized_cross_entropy",
    "group_dro_update",
    "jtt_upsampled_indices",
    "ldam_logits",
    "ldam_margins",
    "logit_adjusted_cross_entropy",
    "logit_margin_loss",
    "pairwise_sq_distances",
    "released_class_normalised_mean",
    "representation_margin_loss",
]
