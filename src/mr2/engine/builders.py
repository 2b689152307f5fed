"""Build a run's data and model from its config (the engine's only contact with those packages)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset

from mr2.config import RunConfig

__all__ = ["FeatureDataset", "RunData", "build_data", "build_model_for"]


@dataclass
class RunData:
    """Data sets of a run after the regime is applied (features for a linear probe)."""

    train: Dataset[Any]
    val: Dataset[Any] | None
    test: Dataset[Any]
    num_classes: int
    class_names: list[str]
    train_class_counts: torch.Tensor
    input_shape: tuple[int, ...]
    dataset_name: str


class FeatureDataset(Dataset[tuple[torch.Tensor, int, int]]):
    """Pre-extracted features as a data set of ``(feature, target, index)`` (linear probing)."""

    def __init__(self, features: torch.Tensor, targets: torch.Tensor) -> None:
        self.features = features
        self.targets = targets.long()

    def __len__(self) -> int:
        return int(self.targets.numel())

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int, int]:
        return self.features[index], int(self.targets[index]), index


def build_data(config: RunConfig, device: torch.device) -> RunData:
    """The run's data sets; for ``regime: linear_probe`` the frozen backbone's cached features."""
    from mr2.data.registry import build_datasets

    data = config.data
    bundle = build_datasets(
        dataclasses.replace(data, augment=data.augment and config.regime != "linear_probe")
    )
    parts = RunData(
        train=bundle.train,
        val=bundle.val,
        test=bundle.test,
        num_classes=bundle.num_classes,
        class_names=list(bundle.class_names),
        train_class_counts=bundle.train_class_counts,
        input_shape=tuple(bundle.input_shape),
        dataset_name=data.name,
    )
    if config.regime != "linear_probe":
        return parts
    # Extraction (a cache miss) draws from the global generators (the backbone's construction, the
    # DataLoader's base seed) and a cache hit would not: run it on forked generators so a run's result
    # does not depend on whether its features were cached.
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        return _extract_features(config, parts, device)


def _extract_features(config: RunConfig, parts: RunData, device: torch.device) -> RunData:
    """Replace the image data sets by the frozen backbone's features (cached on disk)."""
    from mr2.models.feature_cache import FeatureCache, FeatureCacheKey, extract_features
    from mr2.models.registry import build_model

    model_config = config.model
    backbone = build_model(model_config, parts.num_classes, parts.input_shape).to(device)
    cache = FeatureCache(config.cache_dir or Path(config.output_dir) / ".feature-cache")
    cacheable = model_config.weights is not None or model_config.pretrained
    data = config.data
    identity = (
        f"{data.name} root={data.root} val_fraction={data.val_fraction} "
        f"split_seed={data.split_seed} imbalance_factor={data.imbalance_factor} "
        f"train_per_class={data.train_per_class} "
        f"image_size={data.image_size} options={sorted(data.options.items())}"
    )
    splits: dict[str, FeatureDataset | None] = {}
    for split in ("train", "val", "test"):
        dataset = getattr(parts, split)
        if dataset is None or len(dataset) == 0:
            splits[split] = None
            continue
        if cacheable:
            key = FeatureCacheKey.for_model(
                model_config, dataset=identity, split=split, num_samples=len(dataset),
                transform=repr(getattr(dataset, "transform", None)),
            )
            features, labels = cache.get_or_extract(
                key, backbone, dataset, batch_size=data.eval_batch_size, device=device,
                num_workers=data.num_workers,
            )
        else:  # random weights: nothing worth caching
            features, labels = extract_features(
                backbone, dataset, data.eval_batch_size, device, data.num_workers
            )
        splits[split] = FeatureDataset(features, labels)
    train, test = splits["train"], splits["test"]
    assert train is not None and test is not None
    parts.train, parts.val, parts.test = train, splits["val"], test
    parts.input_shape = (int(train.features.shape[1]),)
    return parts


def build_model_for(config: RunConfig, data: RunData) -> nn.Module:
    """The trainable model: the configured network, or a linear head on cached features."""
    if config.regime == "linear_probe":
        from mr2.models.linear_head import LinearHead

        return LinearHead(data.input_shape[0], data.num_classes)
    from mr2.models.registry import build_model

    return build_model(config.model, data.num_classes, data.input_shape)
