"""MR2 in PyTorch Lightning, with the real library: checkpoint resume, logged scalars, accumulation,
and the ddp strategy on 2 CPU processes."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

pytest.importorskip("lightning", reason="the lightning extra is not installed")

import itertools

import torch
import torch.distributed as dist
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import TensorBoardLogger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from integrations.tiny_lightning import (
    NUM_CLASSES,
    TinyMR2Module,
    loader,
    statistics_state,
    trainer,
)
from mr2.integrations.lightning import (
    NO_STATISTICS,
    MR2StatisticsCallback,
    NoStatisticsWarning,
    statistics_modules,
)
from mr2.report.confusion import confusion_matrix
from mr2.report.tiers import TierSplit

pytestmark = [
    # Lightning's own deprecation of torch's pytree API and its advice on worker counts.
    pytest.mark.filterwarnings("ignore:.*LeafSpec.*is deprecated"),
    pytest.mark.filterwarnings("ignore:.*does not have many workers"),
    pytest.mark.filterwarnings("ignore:The number of training batches"),
    pytest.mark.filterwarnings("ignore:You defined a `validation_step` but have no `val_dataloader`"),
    # Resuming into the directory that holds the checkpoint is the normal case.
    pytest.mark.filterwarnings("ignore:Checkpoint directory .* exists and is not empty"),
]


def assert_same_statistics(got: dict[str, torch.Tensor], expected: dict[str, torch.Tensor], exact: bool) -> None:
    assert got.keys() == expected.keys()
    for name, value in expected.items():
        if exact:
            assert torch.equal(got[name], value), name
        else:
            torch.testing.assert_close(got[name], value, rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.parametrize("accumulate", [1, 2])
def test_resume_from_lightning_checkpoint_keeps_the_statistics(tmp_path, accumulate):
    uninterrupted = TinyMR2Module()
    trainer(tmp_path / "a", max_epochs=2, accumulate_grad_batches=accumulate).fit(uninterrupted, loader(8))

    first = TinyMR2Module()
    checkpoints = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_top_k=-1, every_n_epochs=1)
    trainer(tmp_path / "b", max_epochs=1, accumulate_grad_batches=accumulate,
            enable_checkpointing=True, callbacks=[MR2StatisticsCallback(), checkpoints]).fit(first, loader(8))
    (path,) = (tmp_path / "ckpt").glob("*.ckpt")
    saved = torch.load(path, weights_only=True)["state_dict"]
    assert torch.equal(saved["criterion.statistics.samples_seen"], torch.full((NUM_CLASSES,), 16))

    resumed = TinyMR2Module()  # fresh statistics: everything must come from the checkpoint
    again = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_top_k=-1, every_n_epochs=1)
    trainer(tmp_path / "c", max_epochs=2, accumulate_grad_batches=accumulate,
            enable_checkpointing=True, callbacks=[MR2StatisticsCallback(), again]).fit(
        resumed, loader(8), ckpt_path=str(path)
    )
    assert_same_statistics(statistics_state(resumed), statistics_state(uninterrupted), exact=True)
    assert resumed.criterion.statistics.samples_seen.tolist() == [32] * NUM_CLASSES


def test_accumulated_micro_batches_give_the_statistics_of_the_large_batch(tmp_path):
    # lr = 0 keeps the features fixed, so only the statistics' schedule differs between the runs. 64
    # samples in micro-batches of 6 with k = 2: 5 steps of 12 and a last step of 4 (a shorter group).
    large, accumulated, default = TinyMR2Module(lr=0.0), TinyMR2Module(lr=0.0), TinyMR2Module(lr=0.0)
    large_batches = [12] * 5 + [4]
    trainer(tmp_path / "large", max_epochs=1).fit(large, _sized_loader(large_batches))
    trainer(tmp_path / "acc", max_epochs=1, accumulate_grad_batches=2).fit(accumulated, loader(6))
    trainer(tmp_path / "def", max_epochs=1, accumulate_grad_batches=2,
            callbacks=[MR2StatisticsCallback(defer=False)]).fit(default, loader(6))
    assert_same_statistics(statistics_state(accumulated), statistics_state(large), exact=False)
    assert not statistics_modules(accumulated)[0].deferred  # switched off again at the end
    gap = (default.criterion.statistics.means() - large.criterion.statistics.means()).abs().max()
    assert gap > 1e-3  # without deferral: one moving-average step per micro-batch


class _LossElsewhere(TinyMR2Module):
    """The loss kept outside the module's attributes (in a plain list): Lightning cannot see it."""

    def __init__(self) -> None:
        super().__init__()
        self.losses = [self.criterion]
        del self.criterion

    def training_step(self, batch, batch_idx):
        logits, features = self(batch[0])
        return self.losses[0](logits, features, batch[1])


def test_the_callback_warns_once_when_the_module_holds_no_mr2_statistics(tmp_path):
    module, callback = _LossElsewhere(), MR2StatisticsCallback()
    with pytest.warns(NoStatisticsWarning) as caught:
        trainer(tmp_path, max_epochs=1, accumulate_grad_batches=2, callbacks=[callback]).fit(module, loader(8))
    ours = [str(w.message) for w in caught if w.category is NoStatisticsWarning]
    assert ours == [NO_STATISTICS.format(module="_LossElsewhere")]
    assert ours[0].startswith(
        "mr2.integrations.lightning.MR2StatisticsCallback: the LightningModule _LossElsewhere holds no MR2 class "
        "statistics"
    )
    assert "self.criterion = MR2Loss(...)" in ours[0]
    with warnings.catch_warnings():  # once per callback: a second fit stays quiet
        warnings.simplefilter("error", NoStatisticsWarning)
        trainer(tmp_path, max_epochs=1, callbacks=[callback]).fit(_LossElsewhere(), loader(8))


def _sized_loader(sizes: list[int]) -> torch.utils.data.DataLoader:
    data = loader(64).dataset
    bounds = torch.tensor([0, *sizes]).cumsum(0).tolist()
    batches = [list(range(start, end)) for start, end in itertools.pairwise(bounds)]
    return torch.utils.data.DataLoader(data, batch_sampler=batches)


def test_logged_disparity_scalars_read_back_from_tensorboard(tmp_path):
    # Tiers fixed from a reference run's accuracy: classes 2, 3 easy, 0 medium, 1 hard.
    reference = TierSplit.from_accuracy([0.6, 0.2, 0.9, 0.8], 3, ranked_by="reference run")
    module = TinyMR2Module(tiers=reference)
    logger = TensorBoardLogger(tmp_path, name="tb")
    trainer(tmp_path, max_epochs=2, logger=logger, log_every_n_steps=1).fit(module, loader(8), loader(16))
    events = EventAccumulator(str(Path(logger.log_dir)))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    expected_tags = {f"val/class_accuracy/{key}" for key in ("T-shirt_top", "sea_lion", "cat", "dog")}
    assert expected_tags <= tags
    assert {"val/overall", "val/worst_class_accuracy", "train/loss", "train/temperature_max"} <= tags

    module.eval()
    with torch.no_grad():
        inputs, target = loader(64).dataset.tensors
        confusion = confusion_matrix(module(inputs)[0], target, NUM_CLASSES).double()
    by_class = (confusion.diagonal() / confusion.sum(1)).tolist()
    for key, accuracy in zip(("T-shirt_top", "sea_lion", "cat", "dog"), by_class, strict=True):
        logged = events.Scalars(f"val/class_accuracy/{key}")
        assert len(logged) == 2  # one per validation epoch
        assert logged[-1].value == pytest.approx(accuracy, abs=1e-6)
    assert events.Scalars("val/worst_class_accuracy")[-1].value == pytest.approx(min(by_class), abs=1e-6)
    expected_tiers = {"easy": (by_class[2] + by_class[3]) / 2, "medium": by_class[0], "hard": by_class[1]}
    for tier, accuracy in expected_tiers.items():
        assert events.Scalars(f"val/tier/{tier}")[-1].value == pytest.approx(accuracy, abs=1e-6)


WORKER = Path(__file__).with_name("lightning_ddp_worker.py")


@pytest.mark.distributed
@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="gloo unavailable")
def test_ddp_strategy_on_two_cpu_processes_equals_one_process_with_the_doubled_batch(tmp_path):
    # Also with accumulated micro-batches: each rank adds up its own, apply_accumulated all-reduces.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
               str(WORKER), str(tmp_path)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, f"torchrun failed:\n{done.stdout}\n{done.stderr}"
    ranks = [torch.load(tmp_path / f"rank{rank}.pt", weights_only=True) for rank in range(2)]
    for run in ("plain", "accumulated"):  # identical on both ranks
        assert_same_statistics(ranks[1][run], ranks[0][run], exact=True)

    single = TinyMR2Module(lambda_rep=0.5, pairs="global")
    trainer(tmp_path / "single", max_epochs=1).fit(single, loader(16))
    assert_same_statistics(ranks[0]["plain"], statistics_state(single), exact=False)
    assert ranks[0]["plain"]["samples_seen"].tolist() == [16] * NUM_CLASSES
    # 2 ranks x 2 micro-batches of 4, applied once per optimiser step = one batch of 16.
    frozen = TinyMR2Module(lr=0.0, lambda_rep=0.5, pairs="global")
    trainer(tmp_path / "frozen", max_epochs=1).fit(frozen, loader(16))
    assert_same_statistics(ranks[0]["accumulated"], statistics_state(frozen), exact=False)
