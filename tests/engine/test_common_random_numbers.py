"""Common random numbers: two methods on one seed share initial weights, batches, augmented inputs and
dropout draws (mr2.engine.streams); a resumed run draws what an uninterrupted one does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from helpers import base_config
from mr2.config import config_from_dict
from mr2.engine import TrainingSession, train
from mr2.engine.checkpoint import load_checkpoint

EPOCHS = 2


@pytest.fixture
def images_npz(tmp_path: Path) -> Path:
    """4 classes of random 28 x 28 uint8 images (augmented by RandomCrop(28, padding=2))."""
    rng = np.random.default_rng(0)
    path = tmp_path / "images.npz"
    np.savez(path, x_train=rng.integers(0, 256, (160, 1, 28, 28), dtype=np.uint8), y_train=np.arange(160) % 4,
             x_test=rng.integers(0, 256, (40, 1, 28, 28), dtype=np.uint8), y_test=np.arange(40) % 4)
    return path


def _config(npz: Path, out: Path, name: str, method: dict[str, Any], seed: int = 3) -> Any:
    return config_from_dict(base_config(
        npz, out, name=name, seed=seed, method=method,
        model={"name": "mlp", "options": {"hidden_dims": [32, 16], "dropout": 0.5}},
        data={"name": "arrays", "root": str(npz), "val_fraction": 0.2, "batch_size": 16, "eval_batch_size": 32,
              "augment": True, "options": {"regime": "mnist", "mnist_crop": True}},
        optim={"name": "sgd", "lr": 0.05, "epochs": EPOCHS, "warmup_epochs": 1},
    ))


def _record(npz: Path, out: Path, method: dict[str, Any], seed: int = 3) -> dict[str, Any]:
    """Initial weights, then every training step's inputs, sample indices and dropout masks."""
    session = TrainingSession(_config(npz, out, f"{method['name']}-{seed}", method, seed), quiet=True)
    model = session.trainer.model
    initial = {k: v.detach().clone() for k, v in model.state_dict().items()}
    steps: list[dict[str, torch.Tensor]] = []

    def inputs_hook(module: nn.Module, args: tuple[Any, ...]) -> None:
        if module.training:
            steps.append({"inputs": args[0].detach().clone()})

    def dropout_hook(module: nn.Module, args: tuple[Any, ...]) -> None:
        if module.training:  # the generator's state that the dropout mask is drawn from
            steps[-1][f"dropout{len(steps[-1])}"] = torch.get_rng_state()

    model.register_forward_pre_hook(inputs_hook)
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.register_forward_pre_hook(dropout_hook)
    original_on_batch = session.trainer.method.on_batch
    indices: list[torch.Tensor] = []

    def on_batch(inputs: torch.Tensor, target: torch.Tensor, index: torch.Tensor) -> None:
        indices.append(index.clone())
        original_on_batch(inputs, target, index)

    session.trainer.method.on_batch = on_batch  # type: ignore[method-assign]
    session.fit()
    return {"initial": initial, "steps": steps, "indices": indices}


@pytest.mark.parametrize("candidate", [
    {"name": "mr2", "options": {"variant": "logit_only"}},
    {"name": "ldam"},  # its cosine head is drawn at construction
    {"name": "lff"},  # a biased model (built, and with dropout in every step)
])
def test_a_candidate_on_a_seed_sees_ermss_weights_batches_augmentations_and_dropout(images_npz, tmp_path, candidate):
    erm = _record(images_npz, tmp_path, {"name": "erm"})
    other = _record(images_npz, tmp_path, candidate)
    for key, value in erm["initial"].items():
        if candidate["name"] == "ldam" and key.startswith("classifier."):
            continue  # LDAM replaces the classifier by its own (cosine) head
        torch.testing.assert_close(other["initial"][key], value, rtol=0, atol=0, msg=key)
    steps = len(erm["steps"])
    assert steps == EPOCHS * 8 == len(other["steps"]) == len(erm["indices"])  # 128 training images / 16
    for step in range(steps):
        assert torch.equal(other["indices"][step], erm["indices"][step]), step
        for key, value in erm["steps"][step].items():
            assert torch.equal(other["steps"][step][key], value), (step, key)
    assert not torch.equal(erm["steps"][0]["dropout1"], erm["steps"][0]["dropout2"])  # a stream, used


def test_another_seed_draws_other_augmentations_and_masks(images_npz, tmp_path):
    first = _record(images_npz, tmp_path, {"name": "erm"}, seed=3)
    second = _record(images_npz, tmp_path, {"name": "erm"}, seed=4)
    assert not torch.equal(first["steps"][0]["dropout1"], second["steps"][0]["dropout1"])

    def first_epoch_images(record: dict[str, Any]) -> dict[int, torch.Tensor]:
        return {int(i): x for step, index in zip(record["steps"][:8], record["indices"][:8], strict=True)
                for i, x in zip(index, step["inputs"], strict=True)}

    a, b = first_epoch_images(first), first_epoch_images(second)
    assert sorted(a) == sorted(b) and len(a) == 128
    different = sum(not torch.equal(a[i], b[i]) for i in a)  # RandomCrop(28, padding=2): 25 offsets
    assert different > 100


def test_jtt_second_stage_starts_from_the_initial_weights(images_npz, tmp_path):
    session = TrainingSession(_config(images_npz, tmp_path, "jtt", {"name": "jtt"}), quiet=True)
    trainer = session.trainer
    initial = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    torch.rand(1000)  # whatever was drawn since
    with torch.no_grad():
        for p in trainer.model.parameters():
            p.add_(1.0)
    trainer.reset_model(0)
    for key, value in trainer.model.state_dict().items():
        torch.testing.assert_close(value, initial[key], rtol=0, atol=0, msg=key)
    session.close()


def _augmented_item(dataset: Any, base_seed: int, position: int, index: int) -> torch.Tensor:
    """The oracle: the transform run after seeding torch's CPU generator with the item's seed."""
    from mr2.engine.streams import _item_seed

    state = torch.get_rng_state()
    torch.manual_seed(_item_seed(base_seed, position))
    item = dataset[index][0]
    torch.set_rng_state(state)
    return item


def test_augmentation_depends_on_the_position_only_not_on_ranks_or_other_draws(images_npz, tmp_path):
    from mr2.data.registry import build_datasets
    from mr2.engine.samplers import ShardedEpochSampler
    from mr2.engine.streams import PositionedSampler, SeededItems

    config = _config(images_npz, tmp_path, "x", {"name": "erm"})
    train_set = build_datasets(config.data).train
    seeded = SeededItems(train_set, base_seed=12345)
    single = list(PositionedSampler(ShardedEpochSampler(torch.arange(len(train_set)), 1, 0, seed=1)))
    global_items = {p: seeded[(p, i)][0] for p, i in single}
    torch.manual_seed(0)
    before = torch.get_rng_state()
    for rank in range(3):
        for position, index in PositionedSampler(ShardedEpochSampler(torch.arange(len(train_set)), 3, rank, seed=1)):
            torch.rand(7)  # other draws in between change nothing
            item = seeded.__getitems__([(position, index)])[0][0]
            if position < len(single):
                assert single[position][1] == index
                assert torch.equal(item, global_items[position]), (rank, position)
    assert not torch.equal(torch.get_rng_state(), before)  # the torch.rand above, not the transform
    position, index = single[5]
    assert torch.equal(global_items[position], _augmented_item(train_set, 12345, position, index))
    # and augmentation is really random: the same image at two positions differs
    assert not torch.equal(seeded[(0, index)][0], seeded[(1, index)][0])


def test_random_stream_keeps_its_place_and_leaves_the_global_stream_alone():
    from mr2.engine.streams import RandomStream, derive_seed

    stream = RandomStream(derive_seed(0, "method"))
    torch.manual_seed(1)
    expected_global = torch.rand(4)
    reference = torch.Generator().manual_seed(derive_seed(0, "method"))
    expected_stream = torch.rand(6, generator=reference)
    torch.manual_seed(1)
    with stream.active():
        first = torch.rand(3)
    state = stream.state_dict()
    with stream.active():
        second = torch.rand(3)
    assert torch.equal(torch.rand(4), expected_global)
    assert torch.equal(torch.cat([first, second]), expected_stream)
    restored = RandomStream(0)
    restored.load_state_dict(state)
    with restored.active():
        assert torch.equal(torch.rand(3), second)
    assert derive_seed(0, "augment", 1) != derive_seed(0, "augment", 2) != derive_seed(1, "augment", 2)
    assert 0 <= derive_seed(2**40, "x") < 2**63


@pytest.mark.parametrize("method", ["erm", "lff"])
def test_resume_with_augmentation_dropout_and_a_method_stream_is_exact(images_npz, tmp_path, method):
    whole = _config(images_npz, tmp_path, "whole", {"name": method})
    split = _config(images_npz, tmp_path, "split", {"name": method})
    expected = train(whole, quiet=True)
    assert TrainingSession(split, quiet=True).fit(stop_after_epoch=1) is None
    torch.rand(100)  # the next process's generators start elsewhere
    resumed = TrainingSession(split, quiet=True).fit()
    assert resumed is not None and resumed["confusion_matrix"] == expected["confusion_matrix"]
    a = load_checkpoint(tmp_path / "whole" / "checkpoints" / "last.pt")
    b = load_checkpoint(tmp_path / "split" / "checkpoints" / "last.pt")
    for part in ("model", "method"):
        for key in a[part]:
            torch.testing.assert_close(a[part][key], b[part][key], rtol=0, atol=0, msg=key)
