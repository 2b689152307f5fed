"""Linear probing: features extracted once, cached on disk by key, rebuilt when stale or corrupt."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from torch import nn

from mr2.config import ModelSection
from mr2.data.sources import InMemoryDataset
from mr2.models import feature_cache
from mr2.models.feature_cache import (
    CORRUPT_CACHE,
    NO_WEIGHTS_TO_CACHE,
    CorruptFeatureCacheWarning,
    FeatureCache,
    FeatureCacheKey,
    extract_features,
)
from mr2.models.linear_head import LinearHead
from mr2.models.registry import build_model


class CountingBackbone(nn.Module):
    """Features = a fixed linear map of the flattened input; counts forward calls."""

    def __init__(self, in_features: int = 12, dim: int = 5) -> None:
        super().__init__()
        self.linear = nn.Linear(in_features, dim)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.linear(x.flatten(1))


def _dataset(n: int = 10) -> InMemoryDataset:
    generator = torch.Generator().manual_seed(1)
    return InMemoryDataset(torch.randn(n, 3, 4, generator=generator), torch.arange(n) % 3)


def _key(**changes: object) -> FeatureCacheKey:
    key = FeatureCacheKey("counting", "sha256:abc", "toy", "train", 10, "identity")
    return replace(key, **changes)  # type: ignore[arg-type]


def test_extract_features_in_order_in_eval_mode() -> None:
    backbone = nn.Sequential(nn.Flatten(), nn.Linear(12, 6), nn.Dropout(0.5))
    backbone.train()
    data = _dataset()
    features, labels = extract_features(backbone, data, batch_size=3)
    assert backbone.training  # restored
    assert features.dtype == torch.float32 and features.shape == (10, 6)
    assert torch.equal(labels, data.targets)
    backbone.eval()
    with torch.no_grad():
        assert torch.allclose(features, backbone(data.inputs))  # dropout was off, rows in order
    assert not features.requires_grad


def test_extract_features_uses_forward_features_of_our_models() -> None:
    model = build_model(ModelSection("mlp", options={"hidden_dims": (8, 4)}), 3, (3, 4))
    features, _ = extract_features(model, _dataset(), batch_size=4)
    with torch.no_grad():
        assert torch.allclose(features, model.eval()(_dataset().inputs)[1])


def test_cache_hit_does_not_run_the_backbone(tmp_path: Path) -> None:
    cache = FeatureCache(tmp_path)
    backbone, data = CountingBackbone(), _dataset()
    features, labels = cache.get_or_extract(_key(), backbone, data, batch_size=4)
    assert backbone.calls == 3 and (cache.hits, cache.misses) == (0, 1)
    assert cache.path_for(_key()).exists()

    again, again_labels = FeatureCache(tmp_path).get_or_extract(_key(), backbone, data, batch_size=4)
    assert backbone.calls == 3  # no second extraction, even from a new cache object
    assert torch.equal(again, features) and torch.equal(again_labels, labels)
    assert [p.name for p in tmp_path.iterdir()] == [cache.path_for(_key()).name]  # no temp files


@pytest.mark.parametrize(
    "change",
    [
        {"backbone": "other"},
        {"weights": "sha256:def"},
        {"dataset": "other"},
        {"split": "test"},
        {"num_samples": 11},
        {"transform": "resize"},
    ],
)
def test_every_key_field_changes_the_file(change: dict) -> None:
    assert _key(**change).digest() != _key().digest()


def test_changed_weights_file_invalidates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    options = {"hidden_dims": (8, 4)}
    weights = tmp_path / "backbone.pt"
    torch.save(build_model(ModelSection("mlp", options=options), 3, (3, 4)).state_dict(), weights)
    config = ModelSection("mlp", weights=str(weights), options=options)
    data = _dataset()

    def key() -> FeatureCacheKey:
        return FeatureCacheKey.for_model(
            config, dataset="toy", split="train", num_samples=len(data), transform="identity"
        )

    cache = FeatureCache(tmp_path / "cache")
    first_key = key()
    cache.get_or_extract(first_key, CountingBackbone(), data)
    assert key() == first_key  # same file, same key
    cache.get_or_extract(key(), CountingBackbone(), data)
    assert (cache.hits, cache.misses) == (1, 1)

    # New weights in the same file: new key, new extraction.
    torch.save(build_model(ModelSection("mlp", options=options), 3, (3, 4)).state_dict(), weights)
    second_key = key()
    assert second_key != first_key
    backbone = CountingBackbone()
    cache.get_or_extract(second_key, backbone, data)
    assert backbone.calls > 0 and cache.misses == 2

    # The key follows the content, not the size or modification time: rewrite the file with
    # other weights of the same size, restore its mtime, and look it up from a fresh process.
    stat = weights.stat()
    torch.save(build_model(ModelSection("mlp", options=options), 3, (3, 4)).state_dict(), weights)
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert weights.stat().st_size == stat.st_size
    monkeypatch.setattr(feature_cache, "_fingerprints", {})
    assert key() not in (first_key, second_key)


def test_random_init_is_not_cached() -> None:
    with pytest.raises(ValueError) as error:
        FeatureCacheKey.for_model(
            ModelSection("resnet32"), dataset="d", split="train", num_samples=1, transform="t"
        )
    assert str(error.value) == NO_WEIGHTS_TO_CACHE.format(name="resnet32")
    hub = FeatureCacheKey.for_model(
        ModelSection("timm:vit_base_patch16_224.mae", pretrained=True),
        dataset="d",
        split="train",
        num_samples=1,
        transform="t",
    )
    assert hub.weights == "hub:timm:vit_base_patch16_224.mae"


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda path: path.write_bytes(b"not a torch file"), "UnpicklingError"),
        (lambda path: path.write_bytes(path.read_bytes()[:100]), "Error"),
        (
            lambda path: torch.save({"format": 1, "key": {}, "features": 0, "labels": 0}, path),
            "stored key differs",
        ),
    ],
    ids=["garbage", "truncated", "wrong-key"],
)
def test_corrupt_file_is_rebuilt_with_a_warning(tmp_path: Path, damage, reason: str) -> None:
    cache, data = FeatureCache(tmp_path), _dataset()
    features, _ = cache.get_or_extract(_key(), CountingBackbone(), data)
    path = cache.path_for(_key())
    damage(path)

    backbone = CountingBackbone()
    with pytest.warns(CorruptFeatureCacheWarning) as record:
        rebuilt, _ = cache.get_or_extract(_key(), backbone, data)
    message = str(record[0].message)
    assert message.startswith(CORRUPT_CACHE.split("{")[0] + str(path))
    assert reason in message and message.endswith("; rebuilding it")
    assert backbone.calls > 0 and rebuilt.shape == features.shape
    assert cache.load(_key()) is not None  # the rebuilt file is valid


def test_labels_that_no_longer_match_the_data_set_rebuild(tmp_path: Path) -> None:
    cache, data = FeatureCache(tmp_path), _dataset()
    cache.get_or_extract(_key(), CountingBackbone(), data)
    relabelled = InMemoryDataset(data.inputs, (data.targets + 1) % 3)
    with pytest.warns(CorruptFeatureCacheWarning, match="labels differ from the data set's targets"):
        _, labels = cache.get_or_extract(_key(), CountingBackbone(), relabelled)
    assert torch.equal(labels, relabelled.targets)


def test_linear_head_trains_on_cached_features(tmp_path: Path) -> None:
    # Two linearly separable classes in feature space.
    generator = torch.Generator().manual_seed(0)
    labels = torch.arange(64) % 2
    inputs = torch.randn(64, 3, 4, generator=generator) + 2.0 * labels[:, None, None]
    data = InMemoryDataset(inputs, labels)
    backbone = CountingBackbone()
    features, cached_labels = FeatureCache(tmp_path).get_or_extract(_key(num_samples=64), backbone, data)

    head = build_model(ModelSection("linear"), 2, (features.shape[1],))
    assert isinstance(head, LinearHead)
    optimizer = torch.optim.SGD(head.parameters(), lr=0.5)
    for _ in range(100):
        optimizer.zero_grad()
        logits, passed = head(features)
        nn.functional.cross_entropy(logits, cached_labels).backward()
        optimizer.step()
    assert passed is features
    accuracy = (head(features)[0].argmax(1) == cached_labels).float().mean()
    assert accuracy > 0.95
    assert backbone.calls == 1  # one extraction for 100 epochs


def test_failed_write_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken_save(obj: object, handle: object) -> None:
        handle.write(b"partial")  # type: ignore[attr-defined]
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken_save)
    cache = FeatureCache(tmp_path)
    with pytest.raises(OSError, match="disk full"):
        cache.get_or_extract(_key(), CountingBackbone(), _dataset())
    assert list(tmp_path.iterdir()) == []


def test_nothing_to_extract() -> None:
    with pytest.raises(ValueError, match="empty data set"):
        extract_features(CountingBackbone(), InMemoryDataset(torch.zeros(0, 12), torch.zeros(0)))
    with pytest.raises(ValueError, match=r"returned \[2, 3, 4\] for a batch of 2"):
        extract_features(nn.Identity(), _dataset(2))
