"""Training objectives called as ``loss(logits, features, target)``."""

from mr2.losses.mr2 import VARIANTS, MR2Loss, MR2LossParts

__all__ = ["VARIANTS", "MR2Loss", "MR2LossParts"]
