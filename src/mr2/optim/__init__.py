"""Optimiser wrappers usable with any training method (SAM / ASAM: ``optim.sam``)."""

from mr2.optim.sam import SAM, frozen_batchnorm_statistics, sam_perturbation

__all__ = ["SAM", "frozen_batchnorm_statistics", "sam_perturbation"]
