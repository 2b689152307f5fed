"""MR2 in the Hugging Face Trainer, with the real library: resume from its checkpoint, accumulation,
compute_metrics scalars read back from TensorBoard, checkpoint contents."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers", reason="the transformers extra is not installed")
pytest.importorskip("accelerate", reason="the transformers extra is not installed")

import os
import subprocess
import sys

import safetensors.torch
import torch
import torch.distributed as dist
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch import nn
from transformers import Trainer, TrainerCallback, TrainingArguments

from mr2 import MR2Loss
from mr2.integrations.transformers import (
    NO_FEATURES,
    ClassifierForTrainer,
    DisparityMetrics,
    MR2ComputeLoss,
    MR2StatisticsCallback,
)
from mr2.report.confusion import confusion_matrix
from mr2.report.tiers import TierSplit

NUM_CLASSES, IN_DIM, FEATURE_DIM = 4, 8, 6
CLASS_NAMES = ["T-shirt/top", "sea lion", "cat", "dog"]
KEYS = ["T-shirt_top", "sea_lion", "cat", "dog"]


class Pixels(torch.utils.data.Dataset):
    def __init__(self, size: int = 64, seed: int = 3) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.target = torch.arange(size) % NUM_CLASSES
        self.inputs = torch.randn(size, IN_DIM, generator=generator) + self.target[:, None].float()

    def __len__(self) -> int:
        return len(self.target)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"pixel_values": self.inputs[index], "labels": self.target[index]}


def tiny_model(**loss_options: Any) -> ClassifierForTrainer:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(IN_DIM, FEATURE_DIM), nn.Tanh(), nn.Linear(FEATURE_DIM, NUM_CLASSES))
    criterion = MR2Loss(NUM_CLASSES, feature_dim=FEATURE_DIM, momentum=0.6, **loss_options)
    return ClassifierForTrainer(net, criterion)


def make_trainer(
    model: ClassifierForTrainer, out: Path, callbacks: list[Any] = (), tiers: TierSplit | None = None,
    **options: Any,
) -> Trainer:
    settings: dict[str, Any] = {
        "output_dir": str(out),
        "per_device_train_batch_size": 8,
        "per_device_eval_batch_size": 16,
        "max_steps": 8,
        "learning_rate": 0.05,
        "lr_scheduler_type": "constant",
        "use_cpu": True,
        "report_to": "none",
        "save_strategy": "no",
        "logging_strategy": "no",
        "disable_tqdm": True,
        "seed": 0,
        "dataloader_num_workers": 0,
    }
    settings.update(options)
    return Trainer(
        model=model,
        args=TrainingArguments(**settings),
        train_dataset=Pixels(),
        eval_dataset=Pixels(size=32, seed=5),
        compute_loss_func=MR2ComputeLoss(model.criterion),
        compute_metrics=DisparityMetrics(NUM_CLASSES, CLASS_NAMES, tiers=tiers),
        callbacks=[MR2StatisticsCallback(model.criterion), *callbacks],
    )


def statistics(model: ClassifierForTrainer) -> dict[str, torch.Tensor]:
    return {name: value.clone() for name, value in model.criterion.statistics.state_dict().items()}


class StopAt(TrainerCallback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step >= self.step:
            control.should_training_stop = True


def test_resume_from_checkpoint_restores_the_statistics(tmp_path):
    uninterrupted = tiny_model()
    make_trainer(uninterrupted, tmp_path / "a").train()

    stopped = tiny_model()
    make_trainer(stopped, tmp_path / "b", [StopAt(4)], save_strategy="steps", save_steps=4).train()
    checkpoint = tmp_path / "b" / "checkpoint-4"
    saved = safetensors.torch.load_file(checkpoint / "model.safetensors")
    assert torch.equal(saved["criterion.statistics.samples_seen"], stopped.criterion.statistics.samples_seen)
    assert stopped.criterion.statistics.samples_seen.sum() == 32

    resumed = tiny_model()  # fresh statistics: they must come from the checkpoint
    make_trainer(resumed, tmp_path / "b").train(resume_from_checkpoint=str(checkpoint))
    expected = statistics(uninterrupted)
    for name, value in statistics(resumed).items():
        assert torch.equal(value, expected[name]), name
    assert resumed.criterion.statistics.samples_seen.sum() == 64


def test_accumulated_micro_batches_give_the_statistics_of_the_large_batch(tmp_path):
    # learning rate 0 keeps the features fixed; the same seed gives the same sample order.
    large, accumulated, default = tiny_model(), tiny_model(), tiny_model()
    make_trainer(large, tmp_path / "large", learning_rate=0.0, max_steps=6).train()
    make_trainer(accumulated, tmp_path / "acc", learning_rate=0.0, max_steps=6,
                 per_device_train_batch_size=4, gradient_accumulation_steps=2).train()
    assert not accumulated.criterion.statistics.deferred
    for name, value in statistics(accumulated).items():
        torch.testing.assert_close(value, statistics(large)[name], rtol=1e-5, atol=1e-5, msg=name)
    trainer = make_trainer(default, tmp_path / "def", learning_rate=0.0, max_steps=6,
                           per_device_train_batch_size=4, gradient_accumulation_steps=2)
    trainer.callback_handler.callbacks = [
        MR2StatisticsCallback(default.criterion, defer=False) if isinstance(c, MR2StatisticsCallback) else c
        for c in trainer.callback_handler.callbacks
    ]
    trainer.train()
    gap = (default.criterion.statistics.means() - large.criterion.statistics.means()).abs().max()
    assert gap > 1e-3  # one moving-average step per micro-batch


def test_accumulated_loss_is_the_mean_over_the_accumulated_batch():
    # The Trainer does not divide a compute_loss_func's loss by the accumulation steps.
    model = tiny_model()
    loss_func = MR2ComputeLoss(model.criterion)
    batch = Pixels(size=8)
    outputs = model(batch.inputs)
    full = loss_func(outputs, batch.target)
    scaled = loss_func(outputs, batch.target, num_items_in_batch=torch.tensor(32))
    torch.testing.assert_close(scaled, full * 8 / 32)
    with pytest.raises(TypeError) as error:
        loss_func(outputs["logits"], batch.target)
    assert str(error.value) == NO_FEATURES.format(kind="Tensor")


def test_compute_metrics_scalars_read_back_from_tensorboard(tmp_path):
    model = tiny_model()
    reference = TierSplit.from_accuracy([0.6, 0.2, 0.9, 0.8], 3, ranked_by="reference run")
    trainer = make_trainer(model, tmp_path, tiers=reference, report_to=["tensorboard"], eval_strategy="steps",
                           eval_steps=4, logging_strategy="steps", logging_steps=4)
    trainer.train()
    (event_file,) = (tmp_path / "runs").glob("*/events.out.tfevents.*")
    events = EventAccumulator(str(event_file.parent))
    events.Reload()
    model.eval()
    with torch.no_grad():
        data = Pixels(size=32, seed=5)
        confusion = confusion_matrix(model(data.inputs)["logits"], data.target, NUM_CLASSES).double()
    by_class = (confusion.diagonal() / confusion.sum(1)).tolist()
    for key, accuracy in zip(KEYS, by_class, strict=True):
        logged = events.Scalars(f"eval/class_accuracy/{key}")
        assert [point.step for point in logged] == [4, 8]
        assert logged[-1].value == pytest.approx(accuracy, abs=1e-6)
    assert events.Scalars("eval/worst_class_accuracy")[-1].value == pytest.approx(min(by_class), abs=1e-6)
    # eval set: 8 samples per class, so a tier's accuracy is the mean of its classes'.
    expected_tiers = {"easy": (by_class[2] + by_class[3]) / 2, "medium": by_class[0], "hard": by_class[1]}
    for tier, accuracy in expected_tiers.items():
        assert events.Scalars(f"eval/tier/{tier}")[-1].value == pytest.approx(accuracy, abs=1e-6)


def test_a_transformers_image_classifier_through_the_trainer(tmp_path):
    # A ModelOutput with .logits (ViTForImageClassification from a config: no weights here); the
    # features are the classifier's input, the checkpoint holds the statistics.
    from transformers import ViTConfig, ViTForImageClassification

    torch.manual_seed(0)
    config = ViTConfig(image_size=8, patch_size=4, num_channels=1, hidden_size=16, num_hidden_layers=1,
                       num_attention_heads=2, intermediate_size=32, num_labels=NUM_CLASSES)
    vit = ViTForImageClassification(config)
    model = ClassifierForTrainer(vit, MR2Loss(NUM_CLASSES, feature_dim=16))
    assert model.head_name == "classifier"
    images = torch.randn(8, 1, 8, 8)
    model.eval()
    with torch.no_grad():
        outputs = model(images)
        expected = vit(images).logits
        hidden = vit.vit(images).last_hidden_state[:, 0]  # the [CLS] token the classifier reads
    torch.testing.assert_close(outputs["logits"], expected)
    torch.testing.assert_close(outputs["features"], hidden)

    class Patches(Pixels):
        def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
            return {"pixel_values": self.inputs[index].view(1, 8, 1).expand(1, 8, 8).contiguous(),
                    "labels": self.target[index]}

    model.train()
    trainer = make_trainer(model, tmp_path, max_steps=2, save_strategy="steps", save_steps=2)
    trainer.train_dataset = Patches()
    trainer.eval_dataset = Patches(size=16)
    trainer.train()
    saved = safetensors.torch.load_file(tmp_path / "checkpoint-2" / "model.safetensors")
    assert torch.equal(saved["criterion.statistics.samples_seen"], model.criterion.statistics.samples_seen)
    assert model.criterion.statistics.samples_seen.sum() == 16  # 2 shuffled batches of 8
    assert trainer.evaluate()["eval_overall"] >= 0.0


@pytest.mark.distributed
@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="gloo unavailable")
def test_trainer_ddp_on_two_cpu_processes_equals_one_process_with_the_doubled_batch(tmp_path):
    # torchrun + the Trainer's own DDP (accelerate, gloo): 2 ranks x 4 samples per step. With global
    # representation pairs, the statistics AND the weights after 3 SGD steps equal one process with
    # batch 8: MR2ComputeLoss's scaling by num_items_in_batch is right under DDP.
    worker = Path(__file__).with_name("hf_ddp_worker.py")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
               str(worker), str(tmp_path)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, f"torchrun failed:\n{done.stdout}\n{done.stderr}"
    ranks = [torch.load(tmp_path / f"rank{rank}.pt", weights_only=True) for rank in range(2)]
    single = tiny_model(pairs="global")
    make_trainer(single, tmp_path / "single", max_steps=3, optim="sgd").train()
    for part, expected in (("statistics", statistics(single)), ("weights", single.model.state_dict())):
        for name, value in expected.items():
            assert torch.equal(ranks[1][part][name], ranks[0][part][name]), name
            torch.testing.assert_close(ranks[0][part][name], value, rtol=1e-5, atol=1e-6, msg=name)
