"""The examples/ scripts' tiny runs, with the real libraries, on Fashion-MNIST (their full runs are
documented commands, not tests)."""

from __future__ import annotations

import math
from types import ModuleType

import pytest
import torch

from helpers import REPOSITORY, load_script
from mr2.data.errors import DatasetError
from mr2.data.fashion_mnist import FASHION_MNIST_CLASSES, find_fashion_mnist_files

EXAMPLES = REPOSITORY / "examples"

try:
    find_fashion_mnist_files()
    HAVE_DATA = True
except DatasetError:
    HAVE_DATA = False

pytestmark = [
    pytest.mark.skipif(not HAVE_DATA, reason="Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)"),
    pytest.mark.filterwarnings("ignore:.*LeafSpec.*is deprecated"),
    pytest.mark.filterwarnings("ignore:.*does not have many workers"),
    pytest.mark.filterwarnings("ignore:Checkpoint directory .* exists and is not empty"),
]


def load_example(name: str) -> ModuleType:
    return load_script(EXAMPLES / f"{name}.py", f"example_{name}")


def check_disparity(values: dict[str, float], prefix: str) -> None:
    by_class = [values[f"{prefix}class_accuracy/{name.replace('/', '_').replace(' ', '_')}"]
                for name in FASHION_MNIST_CLASSES]
    assert all(0.0 <= value <= 1.0 for value in by_class)
    assert values[f"{prefix}worst_class_accuracy"] == pytest.approx(min(by_class))
    assert values[f"{prefix}best_class_accuracy"] == pytest.approx(max(by_class))
    assert values[f"{prefix}mean_class_accuracy"] == pytest.approx(sum(by_class) / len(by_class))


def test_plain_loop_example_with_accumulation_and_bf16(tmp_path):
    result = load_example("plain_loop_mr2").main(
        ["--tiny", "--accumulation-steps", "2", "--bf16", "--out", str(tmp_path)]
    )
    check_disparity(result["summary"], "test/")
    statistics = result["statistics"]
    assert int(statistics["samples_seen"].sum()) == 8 * 64
    assert statistics["feature_sum"].dtype == torch.float32
    saved = torch.load(result["checkpoint"], weights_only=True)
    for name, value in statistics.items():
        assert torch.equal(saved["criterion"][f"statistics.{name}"], value), name


@pytest.mark.filterwarnings("ignore:The number of training batches")
def test_lightning_example_trains_logs_and_resumes(tmp_path):
    pytest.importorskip("lightning", reason="the lightning extra is not installed")
    example = load_example("lightning_mr2")
    first = example.main(["--tiny", "--accumulation-steps", "2", "--precision", "bf16-mixed",
                          "--out", str(tmp_path)])
    check_disparity(first["logged"], "val/")
    assert int(first["statistics"]["samples_seen"].sum()) == 8 * 64
    assert first["statistics"]["feature_sum"].dtype == torch.float32
    resumed = example.main(["--tiny", "--steps", "10", "--out", str(tmp_path),
                            "--resume", str(first["last_checkpoint"])])
    assert int(resumed["statistics"]["samples_seen"].sum()) == 10 * 64
    assert math.isfinite(resumed["logged"]["train/loss"])


def test_hf_trainer_example(tmp_path):
    pytest.importorskip("transformers", reason="the transformers extra is not installed")
    result = load_example("hf_trainer_mr2").main(
        ["--tiny", "--accumulation-steps", "2", "--bf16", "--out", str(tmp_path)]
    )
    check_disparity(result["metrics"], "eval_")
    assert int(result["statistics"]["samples_seen"].sum()) == 8 * 64
    assert result["statistics"]["feature_sum"].dtype == torch.float32
    assert sorted(path.name for path in tmp_path.glob("checkpoint-*")) == ["checkpoint-4", "checkpoint-8"]


def test_timm_example(tmp_path):
    pytest.importorskip("timm", reason="the vision extra is not installed")
    example = load_example("timm_mr2")
    recipe = example.main(["--tiny", "--wrapper"])  # the recipe itself: tests/integrations/test_timm.py
    check_disparity(recipe["summary"], "test/")
    assert recipe["statistics"]["feature_sum"].shape == (10, recipe["feature_dim"])
    assert int(recipe["statistics"]["samples_seen"].sum()) == 8 * 64
