"""Data sets: standard on-disk formats, seeded validation splits and per-regime transforms.

The engine calls :func:`build_datasets` with the config's :class:`~mr2.config.DataSection` and gets a
:class:`DataBundle`
whose splits yield ``(input, target, index)``. See ``docs/data.md`` for the formats and layouts.
"""

from __future__ import annotations

from mr2.data.errors import DatasetError
from mr2.data.indexed import IndexedDataset
from mr2.data.registry import (
    DATASETS,
    DataBundle,
    DatasetEntry,
    build_datasets,
    register_dataset,
)
from mr2.data.sources import InMemoryDataset, SourceSplits, SplitArrays

__all__ = [
    "DATASETS",
    "DataBundle",
    "DatasetEntry",
    "DatasetError",
    "InMemoryDataset",
    "IndexedDataset",
    "SourceSplits",
    "SplitArrays",
    "build_datasets",
    "register_dataset",
]
