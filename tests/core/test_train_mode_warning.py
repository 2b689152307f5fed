"""Issue 45 item 1: a stateful loss called in training mode with gradients disabled (evaluation code
without ``criterion.eval()``) updates its state from that batch and warns once, saying to call
``criterion.eval()``; in eval mode, or with gradients, it says nothing."""

from __future__ import annotations

import warnings

import pytest
import torch

from mr2 import MR2Loss
from mr2.losses.eval_mode import TrainModeEvaluationWarning
from mr2.losses.released import ReleasedMR2Loss
from mr2.methods.spec import loss_from_spec, loss_methods

K, D = 3, 4


def _batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(9, K, generator=g), torch.randn(9, D, generator=g), torch.arange(9) % K


def _state(loss):
    return {name: b.detach().clone() for name, b in loss.named_buffers()}


def _changed(before, after):
    return sorted(n for n in before if before[n].shape != after[n].shape or not torch.equal(before[n], after[n]))


def _spec_loss(name):
    return loss_from_spec({"method": name, "options": {}}, num_classes=K, feature_dim=D,
                          class_counts=torch.tensor([5, 3, 1]))


def _calls_under_no_grad(loss, calls=3):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.no_grad():
            for seed in range(calls):
                loss(*_batch(seed))
    return [w for w in caught if issubclass(w.category, TrainModeEvaluationWarning)]


STATEFUL = [
    ("MR2Loss", lambda: MR2Loss(K), "class statistics"),
    ("ReleasedMR2Loss", lambda: ReleasedMR2Loss.from_variant("released", K), "class statistics"),
    ("center_loss", lambda: _spec_loss("center_loss"), "class centres"),
    ("group_dro", lambda: _spec_loss("group_dro"), "class weights q"),
]


@pytest.mark.parametrize(("name", "make", "state"), STATEFUL, ids=[s[0] for s in STATEFUL])
def test_a_stateful_loss_in_train_mode_under_no_grad_warns_once_and_names_eval(name, make, state):
    loss = make()
    caught = _calls_under_no_grad(loss)
    assert len(caught) == 1, [str(w.message) for w in caught]
    message = str(caught[0].message)
    assert "criterion.eval()" in message and state in message and "training mode" in message
    assert caught[0].filename == __file__  # points at the caller's line


@pytest.mark.parametrize(("name", "make", "state"), STATEFUL, ids=[s[0] for s in STATEFUL])
def test_no_warning_in_eval_mode_or_with_gradients(name, make, state):
    loss = make()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loss(*_batch(5))  # a training call (with gradients): allocates the state, no warning
        loss.eval()
        before = _state(loss)
        with torch.no_grad():
            loss(*_batch(1))
        assert not _changed(before, _state(loss))  # eval mode: the state is frozen
        loss.train()
        logits, features, target = _batch(2)
        loss(logits.requires_grad_(), features.requires_grad_(), target)


@pytest.mark.parametrize("name", loss_methods())
def test_every_plain_loss_whose_state_moves_under_no_grad_warns(name):
    """The list above is complete: any loss of mr2 tune's specifications whose buffers change when
    called in training mode under no_grad warns (and a loss that warns did change its state)."""
    loss = _spec_loss(name)
    loss(*_batch(4))  # allocate the state in a training call
    before = _state(loss)
    caught = _calls_under_no_grad(loss, calls=1)
    assert bool(caught) == bool(_changed(before, _state(loss))), (name, _changed(before, _state(loss)))
