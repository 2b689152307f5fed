"""Linear probing's feature cache: extract a frozen backbone's features once and keep them on disk.

Running a frozen ViT-B/16 over a data set costs the same every epoch, and the head learns nothing
from repeating it. :func:`extract_features` runs the backbone once (eval mode, no autograd);
:class:`FeatureCache` keeps the result on disk under a key that changes whenever the backbone, its
weights or the data change; :class:`~mr2.models.linear_head.LinearHead` is then trained on the
cached ``[N, d]`` features, orders of magnitude faster than running the backbone each epoch.

Typical use::

    cache = FeatureCache("~/.cache/mr2/features")
    key = FeatureCacheKey.for_model(config, dataset="flowers102", split="train",
                                    num_samples=len(train_set), transform=repr(eval_transform))
    features, labels = cache.get_or_extract(key, model, train_set, batch_size=256, device="cuda")
    head = LinearHead(features.shape[1], num_classes)  # train on InMemoryDataset(features, labels)

Use the evaluation transform (no random augmentation) for the cached features: they are computed
once and reused every epoch.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from mr2.io import atomic_save_torch
from mr2.models.classifier import BackboneClassifier

if TYPE_CHECKING:
    from mr2.config import ModelSection

__all__ = [
    "CorruptFeatureCacheWarning",
    "FeatureCache",
    "FeatureCacheKey",
    "extract_features",
    "weights_fingerprint",
]

CORRUPT_CACHE = "feature cache file {path} is unreadable or inconsistent ({reason}); rebuilding it"
_EMPTY_DATASET = "cannot extract features from an empty data set"
_BAD_FEATURES = "the backbone returned {shape} for a batch of {batch}; expected [batch, d] features"
NO_WEIGHTS_TO_CACHE = (
    "model {name!r} has neither weights nor pretrained=True: its features are random and are not cached"
)

_CACHE_FORMAT = 1
_HASH_CHUNK = 1 << 20


class CorruptFeatureCacheWarning(UserWarning):
    """A cached feature file could not be read or does not match its key; it is rebuilt."""


def _features_of(backbone: nn.Module, inputs: torch.Tensor) -> torch.Tensor:
    forward_features = getattr(backbone, "forward_features", None)
    if isinstance(backbone, BackboneClassifier) and callable(forward_features):
        return forward_features(inputs)
    output = backbone(inputs)
    if isinstance(output, (tuple, list)):  # a (logits, features) model
        output = output[1]
    return output


@torch.no_grad()
def extract_features(
    backbone: nn.Module,
    dataset: Dataset[Any],
    batch_size: int = 256,
    device: str | torch.device = "cpu",
    num_workers: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run a frozen backbone over a data set, in order, in eval mode and without autograd.

    Args:
        backbone: a :class:`~mr2.models.classifier.BackboneClassifier` (its ``forward_features``
            is used), a model returning ``(logits, features)``, or a module returning features.
        dataset: items ``(input, target, ...)`` (extra entries, e.g. an index, are ignored).
        batch_size: samples per forward pass.
        device: where the backbone runs (it is moved there and left there).
        num_workers: DataLoader worker processes.

    Returns:
        ``(features, labels)``: float32 ``[N, d]`` and int64 ``[N]`` on the CPU, row ``i`` for
        item ``i`` of the data set.

    Example:
        >>> from mr2.data.sources import InMemoryDataset
        >>> data = InMemoryDataset(torch.randn(5, 3), torch.tensor([0, 1, 0, 1, 1]))
        >>> features, labels = extract_features(nn.Linear(3, 2), data, batch_size=2)
        >>> features.shape, labels.tolist()
        (torch.Size([5, 2]), [0, 1, 0, 1, 1])
    """
    if len(dataset) == 0:  # type: ignore[arg-type]
        raise ValueError(_EMPTY_DATASET)
    was_training = backbone.training
    backbone.eval().to(device)
    pin = torch.device(device).type == "cuda"
    loader = DataLoader(
        dataset, batch_size=batch_size, shuffle=False, num_workers=num_workers, pin_memory=pin
    )
    feature_batches: list[torch.Tensor] = []
    label_batches: list[torch.Tensor] = []
    try:
        for batch in loader:
            inputs, targets = batch[0], batch[1]
            features = _features_of(backbone, inputs.to(device, non_blocking=True))
            if features.dim() != 2 or features.shape[0] != inputs.shape[0]:
                raise ValueError(_BAD_FEATURES.format(shape=list(features.shape), batch=inputs.shape[0]))
            feature_batches.append(features.float().cpu())
            label_batches.append(torch.as_tensor(targets, dtype=torch.int64).cpu())
    finally:
        backbone.train(was_training)
    return torch.cat(feature_batches), torch.cat(label_batches)


_fingerprints: dict[tuple[str, int, int], str] = {}


def weights_fingerprint(path: str | os.PathLike[str]) -> str:
    """``"sha256:<hex>"`` of a weights file's content (cached per path, size and mtime).

    The content hash (not the path) identifies the weights: moving or copying the file keeps the
    key, rewriting it with other weights changes it.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     path = Path(tmp) / "w.pt"
        ...     _ = path.write_bytes(b"abc")
        ...     weights_fingerprint(path)[:20]
        'sha256:ba7816bf8f01c'
    """
    file = Path(path).resolve()
    stat = file.stat()
    memo = (str(file), stat.st_size, stat.st_mtime_ns)
    if memo not in _fingerprints:
        digest = hashlib.sha256()
        with file.open("rb") as handle:
            while chunk := handle.read(_HASH_CHUNK):
                digest.update(chunk)
        _fingerprints[memo] = "sha256:" + digest.hexdigest()
    return _fingerprints[memo]


@dataclass(frozen=True)
class FeatureCacheKey:
    """What the cached features depend on; its :meth:`digest` names the cache file.

    Attributes:
        backbone: the architecture and its options (e.g. ``'timm:vit_base_patch16_224 {...}'``).
        weights: the weights' identity: :func:`weights_fingerprint` of a local file,
            ``"hub:<name>"`` for downloaded weights.
        dataset: data set name.
        split: ``"train"``, ``"val"``, ``"test"``, ...
        num_samples: number of items (a changed subset changes the key).
        transform: description of the input transform (``repr`` of a torchvision ``Compose``).

    Example:
        >>> key = FeatureCacheKey("small_cnn", "sha256:00", "fashion_mnist", "train", 54000, "none")
        >>> len(key.digest())
        64
    """

    backbone: str
    weights: str
    dataset: str
    split: str
    num_samples: int
    transform: str

    def digest(self) -> str:
        """sha256 (hex) of the key's fields, in a canonical JSON encoding."""
        encoded = json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(encoded.encode()).hexdigest()

    @classmethod
    def for_model(
        cls,
        config: ModelSection,
        *,
        dataset: str,
        split: str,
        num_samples: int,
        transform: str,
    ) -> FeatureCacheKey:
        """The key of the features of the backbone built from ``config``.

        Raises:
            ValueError: if ``config`` has neither ``weights`` nor ``pretrained`` (randomly
                initialised features are not worth caching, and not reproducible by key).
        """
        if config.weights is not None:
            weights = weights_fingerprint(config.weights)
            if config.weights_key_prefix:
                weights += f" prefix={config.weights_key_prefix}"
        elif config.pretrained:
            weights = f"hub:{config.name}"
        else:
            raise ValueError(NO_WEIGHTS_TO_CACHE.format(name=config.name))
        options = json.dumps(config.options, sort_keys=True, default=repr)
        return cls(
            backbone=f"{config.name} {options}",
            weights=weights,
            dataset=dataset,
            split=split,
            num_samples=int(num_samples),
            transform=transform,
        )


class FeatureCache:
    """Features of a frozen backbone stored as ``<digest>.pt`` files in a directory.

    Each file holds the features (float32 ``[N, d]``), the labels (int64 ``[N]``) and the key they
    were computed for. Writes are atomic (temporary file in the same directory, then
    ``os.replace``), so a crash never leaves a torn file under the final name. A file that cannot
    be read, or whose content does not match its key, triggers a
    :class:`CorruptFeatureCacheWarning` and is rebuilt.

    Args:
        directory: where the files live (created on first write).

    Attributes:
        hits: lookups answered from disk since construction.
        misses: lookups that had to extract.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory).expanduser()
        self.hits = 0
        self.misses = 0

    def path_for(self, key: FeatureCacheKey) -> Path:
        """The file holding the features of ``key``."""
        return self.directory / f"{key.digest()}.pt"

    def load(
        self, key: FeatureCacheKey, expected_labels: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The cached ``(features, labels)`` of ``key``, or ``None`` if absent or corrupt.

        Args:
            key: what to look up.
            expected_labels: if given, the cached labels must equal them (a data set whose
                content changed under the same name and length is caught here).
        """
        path = self.path_for(key)
        if not path.exists():
            return None
        reason = None
        try:
            entry = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as error:  # any unreadable file (truncated, garbage, wrong format)
            reason = f"{type(error).__name__}: {error}".splitlines()[0][:200]
        else:
            reason = _inconsistency(entry, key, expected_labels)
        if reason is not None:
            warnings.warn(
                CORRUPT_CACHE.format(path=path, reason=reason), CorruptFeatureCacheWarning, stacklevel=2
            )
            path.unlink(missing_ok=True)
            return None
        return entry["features"], entry["labels"]

    def save(self, key: FeatureCacheKey, features: torch.Tensor, labels: torch.Tensor) -> Path:
        """Store ``(features, labels)`` under ``key`` atomically; returns the file's path."""
        path = self.path_for(key)
        entry = {
            "format": _CACHE_FORMAT,
            "key": asdict(key),
            "features": features.detach().float().cpu().contiguous(),
            "labels": labels.detach().to(torch.int64).cpu().contiguous(),
        }
        atomic_save_torch(path, entry)
        return path

    def get_or_extract(
        self,
        key: FeatureCacheKey,
        backbone: nn.Module,
        dataset: Dataset[Any],
        *,
        batch_size: int = 256,
        device: str | torch.device = "cpu",
        num_workers: int = 0,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The features of ``dataset`` under ``backbone``: from disk when cached, else extracted
        with :func:`extract_features` and stored.

        If ``dataset`` has a ``targets`` tensor, cached labels must equal it.
        """
        targets = getattr(dataset, "targets", None)
        expected = torch.as_tensor(targets, dtype=torch.int64) if targets is not None else None
        cached = self.load(key, expected_labels=expected)
        if cached is not None:
            self.hits += 1
            return cached
        self.misses += 1
        features, labels = extract_features(backbone, dataset, batch_size, device, num_workers)
        self.save(key, features, labels)
        return features, labels


def _inconsistency(entry: Any, key: FeatureCacheKey, expected_labels: torch.Tensor | None) -> str | None:
    """Why a loaded cache entry cannot be used for ``key`` (``None``: it can)."""
    if not isinstance(entry, dict) or entry.get("format") != _CACHE_FORMAT:
        return "not a feature cache entry of this version"
    if entry.get("key") != asdict(key):
        return "stored key differs"
    features, labels = entry.get("features"), entry.get("labels")
    if not isinstance(features, torch.Tensor) or not isinstance(labels, torch.Tensor):
        return "missing tensors"
    if features.dim() != 2 or labels.shape != (features.shape[0],):
        return f"features {list(features.shape)} and labels {list(labels.shape)} do not match"
    if features.shape[0] != key.num_samples:
        return f"{features.shape[0]} rows for {key.num_samples} samples"
    if expected_labels is not None and not torch.equal(labels, expected_labels.cpu()):
        return "labels differ from the data set's targets"
    return None
