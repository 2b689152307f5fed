"""Sharded sampling equals one process's order; checkpoints restore RNG states; atomic writes."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from mr2.engine.checkpoint import CheckpointError, load_checkpoint, rng_state, save_checkpoint, set_rng_state
from mr2.engine.samplers import ShardedEpochSampler, shard_for_eval
from mr2.io import append_jsonl, atomic_write_text


def test_two_shards_cover_the_single_process_batches():
    indices = torch.arange(22)
    single = ShardedEpochSampler(indices, 1, 0, seed=5)
    shards = [ShardedEpochSampler(indices, 2, r, seed=5) for r in range(2)]
    for sampler in (single, *shards):
        sampler.set_epoch(3)
    order = list(single)
    parts = [list(s) for s in shards]
    assert len(parts[0]) == len(parts[1]) == 11
    for step in range(0, 11, 4):  # global batch 8 = 2 ranks x 4
        together = sorted(parts[0][step : step + 4] + parts[1][step : step + 4])
        assert together == sorted(order[2 * step : 2 * step + 8])


def test_epoch_changes_order_and_padding_repeats_start():
    sampler = ShardedEpochSampler(torch.arange(5), 2, 1, seed=0)
    first = list(sampler)
    sampler.set_epoch(1)
    assert list(sampler) != first or len(first) == 1
    assert len(sampler.global_order()) == 6


def test_eval_shards_are_disjoint_and_complete():
    shards = [shard_for_eval(11, 3, r) for r in range(3)]
    assert sorted(i for shard in shards for i in shard) == list(range(11))


def test_rng_state_round_trip_through_a_checkpoint(tmp_path):
    torch.manual_seed(3)
    random.seed(3)
    np.random.seed(3)
    state = rng_state()
    expected = (torch.rand(3), random.random(), np.random.rand())
    save_checkpoint(tmp_path / "c.pt", {"rng": state})
    torch.manual_seed(99)
    random.seed(99)
    np.random.seed(99)
    set_rng_state(load_checkpoint(tmp_path / "c.pt")["rng"])
    again = (torch.rand(3), random.random(), np.random.rand())
    torch.testing.assert_close(again[0], expected[0])
    assert again[1:] == expected[1:]


def test_corrupt_checkpoint_names_the_file(tmp_path):
    path = tmp_path / "last.pt"
    path.write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match=r"last\.pt cannot be read"):
        load_checkpoint(path)


def test_atomic_write_keeps_old_file_when_writer_fails(tmp_path):
    path = tmp_path / "x.json"
    atomic_write_text(path, "old")

    class Boom:
        def __reduce__(self):
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        save_checkpoint(path, {"x": Boom()})
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]


def test_append_jsonl_appends_lines(tmp_path):
    path = tmp_path / "m.jsonl"
    append_jsonl(path, {"a": 1})
    append_jsonl(path, {"a": 2})
    assert path.read_text() == '{"a": 1}\n{"a": 2}\n'
