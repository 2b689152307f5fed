"""Each paper recipe loads, builds every object and trains two steps on tiny stand-in data.

The recipes need GPUs and real data sets; here every key of the shipped file goes through the same
validation and builders, on tiny files in the same on-disk formats (CIFAR-100 pickles, an ImageNet
ImageFolder, Oxford-IIIT Pets' layout) and with local weights files in the format the recipe
documents. Only what a CPU cannot afford is scaled down, and the overrides say so:
``data.root`` and ``model.weights`` (the user's paths), the batch size, ``data.num_workers``,
the device, and the width/depth of the networks (the same model name and family, smaller).
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from PIL import Image
from torch.utils.data import DataLoader

from helpers.data_files import write_cifar as _write_cifar
from helpers.data_files import write_image_folder as _write_image_folder
from mr2.config import ModelSection, apply_overrides
from mr2.engine import TrainingSession
from mr2.engine.loop import train_one_epoch
from mr2.models.registry import build_model
from mr2.sweep import plan_sweep, spec_from_dict
from mr2.sweep.presets import preset_path

#: Smaller members of each recipe's model family (same model name, fewer / narrower layers).
TINY_VIT = {"depth": 1, "embed_dim": 32, "num_heads": 2}


def _image(path: Path, colour: tuple[int, int, int]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (12, 10), colour).save(path)


def _write_pets(root: Path, classes: tuple[str, ...] = ("Abyssinian", "basset_hound", "Bengal")) -> None:
    """oxford-iiit-pet/annotations/{trainval,test}.txt + images/*.jpg (torchvision's layout)."""
    folder = root / "oxford-iiit-pet"
    (folder / "annotations").mkdir(parents=True)
    for split, count in (("trainval", 10), ("test", 2)):
        lines = []
        for k, name in enumerate(classes):
            for i in range(count):
                image = f"{name}_{split}{i}"
                lines.append(f"{image} {k + 1} 1 1")
                _image(folder / "images" / f"{image}.jpg", (60 * k, 20 * i, 90))
        (folder / "annotations" / f"{split}.txt").write_text("\n".join(lines) + "\n")


def _weights_file(path: Path, name: str, options: dict[str, Any], input_shape: tuple[int, ...]) -> Path:
    """A weights file as the recipe documents it, for the (tiny) model the test builds."""
    if name == "resnet50":  # MoCo v2's released checkpoint: DDP-wrapped query encoder, MLP head, queue
        import torchvision

        encoder = {k: v.half() for k, v in torchvision.models.resnet50().state_dict().items()
                   if not k.startswith("fc.")}
        encoder |= {"fc.0.weight": torch.zeros(8, 2048), "fc.0.bias": torch.zeros(8),
                    "fc.2.weight": torch.zeros(4, 8), "fc.2.bias": torch.zeros(4)}
        state = {f"module.encoder_q.{k}": v for k, v in encoder.items()}
        state |= {"module.encoder_k.conv1.weight": torch.zeros(1), "module.queue": torch.zeros(4, 2)}
        torch.save({"epoch": 800, "arch": "resnet50", "state_dict": state}, path)
        return path
    else:  # a timm checkpoint of the same architecture (random values)
        model = build_model(ModelSection(name, options=options), num_classes=3, input_shape=input_shape)
        state = {k.removeprefix("backbone."): v for k, v in model.state_dict().items()
                 if not k.startswith("classifier.")}
    torch.save(state, path)
    return path


def _two_steps(session: TrainingSession) -> None:
    config = session.config
    loader = DataLoader(session.trainer.data.train, batch_size=config.data.batch_size, shuffle=True)
    batches = list(itertools.islice(loader, 2))
    assert len(batches) == 2
    trainable = [p for p in session.trainer.model.parameters() if p.requires_grad]
    before = [p.detach().clone() for p in trainable]
    session.trainer.method.on_epoch_start(0)
    result = train_one_epoch(
        session.trainer.train_model, session.trainer.method, batches, session.trainer.optimizer, session.trainer.scheduler,
        session.trainer.step_setup,
    )
    assert math.isfinite(result.loss) and result.samples == sum(len(b[1]) for b in batches)
    assert any(not torch.equal(a, p.detach()) for a, p in zip(before, trainable, strict=True))


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("stand-ins")
    _write_cifar(root / "cifar", 100, per_class_train=5, per_class_test=1)
    _write_image_folder(root / "imagenet", ("n01", "n02", "n03"), per_class=26, splits=("train",))
    _write_image_folder(root / "imagenet", ("n01", "n02", "n03"), per_class=2, splits=("val",))
    _write_pets(root / "pets")
    return {"cifar": root / "cifar", "imagenet": root / "imagenet", "pets": root / "pets", "root": root}


#: recipe -> (stand-in data, overrides scaling it to a CPU, weights (model options, input shape) or None,
#: entries trained two steps (None: all; the others are built only, where the network is big)).
RECIPES: dict[str, tuple[str, list[str], tuple[dict[str, Any], tuple[int, ...]] | None, set[str] | None]] = {
    "cifar100-resnet32": ("cifar", ["data.batch_size=16"], None, None),
    "cifar100-wrn28-10": ("cifar", ["data.batch_size=2", "optim.amp=none"], None, {"erm", "mr2"}),
    "imagenet-clip-linear-probe": ("imagenet", ["data.batch_size=16", "data.eval_batch_size=16",
                                                *(f"model.options.{k}={v}" for k, v in TINY_VIT.items())],
                                   (TINY_VIT, (3, 224, 224)), None),
    "imagenet-mae-finetune": ("imagenet", ["data.batch_size=4", "data.image_size=32", "model.options.img_size=32",
                                           *(f"model.options.{k}={v}" for k, v in TINY_VIT.items())],
                              ({**TINY_VIT, "img_size": 32}, (3, 32, 32)), None),
    "pets-moco-finetune": ("pets", ["data.batch_size=2", "data.image_size=64", "optim.amp=none"], ({}, ()),
                           None),
}


#: recipe -> (key in its weights file, backbone parameter it must be loaded into).
LOADED = {
    "pets-moco-finetune": ("module.encoder_q.conv1.weight", "conv1.weight"),
    "imagenet-mae-finetune": ("patch_embed.proj.weight", "patch_embed.proj.weight"),
}


@pytest.fixture(autouse=True)
def _one_thread():
    """One torch thread: on a 2-core machine shared with other jobs two threads run several times
    slower than one (see docs/sweeps.md)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_paper_recipe_builds_and_trains_two_steps(recipe, stand_ins, tmp_path):
    data_key, scale, weights, stepped = RECIPES[recipe]
    raw = yaml.safe_load(preset_path(recipe).read_text())
    assert raw.get("required"), "a GPU recipe must ask for the user's data (and weights) paths"
    overrides = [f"data.root={stand_ins[data_key]}", "data.num_workers=0", "device=cpu", *scale]
    if weights is not None:
        options = {**raw["base"]["model"].get("options", {}), **weights[0]}
        file = _weights_file(tmp_path / "weights.pth", raw["base"]["model"]["name"], options, weights[1])
        overrides.append(f"model.weights={file}")
    raw["base"] = apply_overrides(raw["base"], overrides)
    raw["output_dir"] = str(tmp_path / "runs")
    spec = spec_from_dict(raw, source=preset_path(recipe), default_name=recipe)
    points = plan_sweep(spec)
    assert {p.seed for p in points} == set(spec.seeds) and len(spec.seeds) >= 3
    # One run of every method entry (the first seed, and the first grid value).
    firsts = {p.label: p for p in reversed(points)}
    for label in [m.label for m in spec.methods]:
        config = firsts[label].config
        assert config.data.name == raw["base"]["data"]["name"] and config.model.name == raw["base"]["model"]["name"]
        assert config.optim.epochs == raw["base"]["optim"]["epochs"]
        session = TrainingSession(config, quiet=True)
        assert session.trainer.data.num_classes == {"cifar": 100, "imagenet": 3, "pets": 3}[data_key]
        if recipe in LOADED:  # the recipe's weights went into the backbone
            key, module = LOADED[recipe]
            saved = torch.load(config.model.weights, weights_only=True)
            expected = saved["state_dict"][key] if "state_dict" in saved else saved[key]
            assert torch.equal(session.trainer.model.backbone.get_parameter(module), expected.float())
        if stepped is None or label in stepped:
            _two_steps(session)
