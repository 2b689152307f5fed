"""A synthetic data set whose classes differ in spread (for tests and the quick demo).

Class ``k`` is an isotropic Gaussian in ``d`` dimensions, ``N(mu_k, sigma_k^2 I)``: the means are
random directions of length ``separation``, the spreads ``sigma_k`` differ between classes
(geometrically spaced from ``min_spread`` to ``max_spread`` by default), so wide classes overlap
their neighbours more and end up harder, which is the class-wise disparity MR2 targets. The data
depend only on the seed.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from mr2.data.sources import SplitArrays

__all__ = ["default_spreads", "make_synthetic"]


def default_spreads(
    num_classes: int, min_spread: float = 0.5, max_spread: float = 2.0
) -> torch.Tensor:
    """Geometrically spaced per-class standard deviations, from ``min_spread`` to ``max_spread``.

    Example:
        >>> default_spreads(3).tolist()
        [0.5, 1.0, 2.0]
    """
    if num_classes == 1:
        return torch.tensor([min_spread], dtype=torch.float64)
    ratios = torch.arange(num_classes, dtype=torch.float64) / (num_classes - 1)
    return min_spread * (max_spread / min_spread) ** ratios


def make_synthetic(
    num_classes: int = 10,
    dim: int = 32,
    *,
    train_per_class: int = 500,
    test_per_class: int = 200,
    spreads: Sequence[float] | torch.Tensor | None = None,
    separation: float = 4.0,
    seed: int = 0,
) -> SplitArrays:
    """Gaussian classes with different spreads, deterministic from ``seed``.

    Args:
        num_classes: K.
        dim: d, the feature dimension.
        train_per_class: training samples per class (balanced).
        test_per_class: test samples per class.
        spreads: per-class standard deviations sigma_k, [K] (default: :func:`default_spreads`).
        separation: the norm of every class mean.
        seed: the generator's seed; the same seed gives the same data.

    Returns:
        float32 features [K * n, d] and int64 labels for both splits (samples grouped by class),
        class names ``class_0`` .. ``class_{K-1}``.

    Raises:
        ValueError: a size below 1 or a wrong number of spreads.

    Example:
        >>> data = make_synthetic(num_classes=3, dim=2, train_per_class=4, test_per_class=2)
        >>> data.x_train.shape, data.y_train.tolist(), data.x_test.shape
        (torch.Size([12, 2]), [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2], torch.Size([6, 2]))
    """
    if min(num_classes, dim, train_per_class, test_per_class) < 1:
        raise ValueError("num_classes, dim, train_per_class and test_per_class must be >= 1")
    sigma = (
        default_spreads(num_classes)
        if spreads is None
        else torch.as_tensor(spreads, dtype=torch.float64)
    )
    if sigma.shape != (num_classes,) or bool((sigma <= 0).any()):
        raise ValueError(f"spreads must be {num_classes} positive numbers, got {sigma.tolist()}")
    generator = torch.Generator().manual_seed(seed)
    directions = torch.randn(num_classes, dim, generator=generator, dtype=torch.float64)
    means = separation * directions / directions.norm(dim=1, keepdim=True)

    def sample(per_class: int) -> tuple[torch.Tensor, torch.Tensor]:
        labels = torch.arange(num_classes).repeat_interleave(per_class)
        noise = torch.randn(labels.numel(), dim, generator=generator, dtype=torch.float64)
        return (means[labels] + sigma[labels, None] * noise).to(torch.float32), labels

    x_train, y_train = sample(train_per_class)
    x_test, y_test = sample(test_per_class)
    return SplitArrays(
        x_train,
        y_train,
        x_test,
        y_test,
        class_names=[f"class_{k}" for k in range(num_classes)],
        source=f"synthetic(seed={seed})",
    )
