"""Both wrappers that capture a classifier's features find its head the same way."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from mr2.losses.mr2 import MR2Loss
from mr2.models.feature_capture import UNKNOWN_HEAD, ClassifierWithFeatures, head_module


def _net() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 3))


def _classifier_for_trainer(model: nn.Module, head: str | None) -> nn.Module:
    from mr2.integrations.transformers import ClassifierForTrainer

    return ClassifierForTrainer(model, MR2Loss(3, feature_dim=5), head=head)


@pytest.mark.parametrize("wrap", [ClassifierWithFeatures, _classifier_for_trainer])
def test_a_missing_head_is_named_with_the_submodules(wrap) -> None:
    with pytest.raises(ValueError) as info:
        wrap(_net(), "fc")
    assert str(info.value) == UNKNOWN_HEAD.format(name="fc", names="'0', '1', '2'")


@pytest.mark.parametrize("wrap", [ClassifierWithFeatures, _classifier_for_trainer])
def test_the_features_are_the_head_input(wrap) -> None:
    net = _net()
    x = torch.randn(6, 4)
    wrapped = wrap(net, None)
    output = wrapped(x)
    features = output[1] if isinstance(output, tuple) else output["features"]
    torch.testing.assert_close(features, net[1](net[0](x)))
    assert wrapped.head_name == "2" and head_module(net) == ("2", net[2])
