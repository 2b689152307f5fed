"""MR2 with a timm model on Fashion-MNIST: features through forward_features / forward_head.

    python examples/timm_mr2.py                          # resnet10t, 300 steps of 128 on CPU
    python examples/timm_mr2.py --model convnext_atto    # any timm classifier (pretrained=False here)
    python examples/timm_mr2.py --wrapper                # the same through ClassifierWithFeatures
    python examples/timm_mr2.py --tiny                   # seconds: the test suite's run

The recipe: create the model with ``num_classes=K``, then per batch

    features = model.forward_head(model.forward_features(images), pre_logits=True)   # [B, d]
    logits = model.get_classifier()(features)                                         # [B, K]

``features`` is the input of the classifier (after timm's pooling and head dropout), which is what
MR2's statistics and representation term are defined on; ``d = model.num_features``.
``ClassifierWithFeatures(model)`` captures the same tensor with a hook and returns
``(logits, features)`` from ``model(images)``. With ``pretrained=True`` where weights are
available, the recipe is unchanged.
"""

from __future__ import annotations

import argparse
from typing import Any

import timm
import torch

from mr2 import ClassifierWithFeatures, MR2Loss
from mr2.data.fashion_mnist import load_fashion_mnist
from mr2.metrics import ClasswiseDisparity

MEAN, STD = 0.2860, 0.3530


def logits_and_features(model: torch.nn.Module, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    features = model.forward_head(model.forward_features(images), pre_logits=True)
    return model.get_classifier()(features), features


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", default=None)
    parser.add_argument("--model", default=None, help="timm model (resnet10t; --tiny: test_efficientnet)")
    parser.add_argument("--steps", type=int, default=None, help="optimiser steps (300; --tiny: 8)")
    parser.add_argument("--batch-size", type=int, default=None, help="batch size (128; --tiny: 64)")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--wrapper", action="store_true", help="use ClassifierWithFeatures instead")
    parser.add_argument("--tiny", action="store_true", help="512 training images, a tiny model")
    args = parser.parse_args(argv)
    args.model = args.model or ("test_efficientnet" if args.tiny else "resnet10t")
    args.steps = args.steps or (8 if args.tiny else 300)
    args.batch_size = args.batch_size or (64 if args.tiny else 128)
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    data = load_fashion_mnist(args.data_root)
    x_train, y_train, x_test, y_test = data.x_train, data.y_train, data.x_test, data.y_test
    if args.tiny:
        x_train, y_train, x_test, y_test = x_train[:512], y_train[:512], x_test[:256], y_test[:256]
    x_train, x_test = ((x.float() / 255 - MEAN) / STD for x in (x_train, x_test))
    num_classes = len(data.class_names)
    torch.manual_seed(0)
    model = timm.create_model(args.model, pretrained=False, num_classes=num_classes, in_chans=1)
    wrapped = ClassifierWithFeatures(model) if args.wrapper else None

    def forward(images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return wrapped(images) if wrapped is not None else logits_and_features(model, images)

    criterion = MR2Loss(num_classes, feature_dim=model.num_features)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    generator = torch.Generator().manual_seed(0)
    model.train()
    for step in range(args.steps):
        index = torch.randint(0, len(y_train), (args.batch_size,), generator=generator)
        logits, features = forward(x_train[index])
        loss = criterion(logits, features, y_train[index])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 50 == 0 or step == args.steps - 1:
            print(f"step {step:4d}  loss {loss.item():.4f}")

    model.eval()
    criterion.eval()
    metric = ClasswiseDisparity(num_classes, class_names=data.class_names)
    with torch.no_grad():
        for images, target in zip(x_test.split(500), y_test.split(500), strict=True):
            metric.update(forward(images)[0], target)
    summary = metric.to_log_dict("test/")
    print({name: round(value, 4) for name, value in summary.items() if "class_accuracy/" not in name})
    return {"summary": summary, "statistics": criterion.statistics.state_dict(),
            "feature_dim": model.num_features}


if __name__ == "__main__":
    main()
