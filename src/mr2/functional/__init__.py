"""Pure tensor functions of MR2 (no state, no I/O)."""

from mr2.functional.allocation import BoundTerms, class_sensitive_bound, margin_allocation
from mr2.functional.class_sums import ClassSums, class_sums
from mr2.functional.margin_losses import (
    logit_margin_loss,
    pairwise_sq_distances,
    representation_margin_loss,
)
from mr2.functional.released import released_class_normalised_mean

__all__ = [
    "BoundTerms",
    "ClassSums",
    "class_sensitive_bound",
    "class_sums",
    "logit_margin_loss",
    "margin_allocation",
    "pairwise_sq_distances",
    "released_class_normalised_mean",
    "representation_margin_loss",
]
