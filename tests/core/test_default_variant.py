"""The default of MR2Loss (issue 39): T = d; the paper's formula stays exactly T = 1 by name."""

from __future__ import annotations

import pytest
import torch

from core import oracles
from mr2 import MR2Loss
from mr2.losses import DEFAULT_VARIANT, VARIANTS, ReleasedMR2Loss
from mr2.losses.mr2 import keyword_options
from mr2.methods.registry import build_method

#: The variants defined as "the paper's form with one change": each keeps the paper's T = 1.
PAPER_FORM_VARIANTS = ("paper", "centered", "variance", "lp5", "logit_only", "additive_margin")


def _settings(loss: MR2Loss) -> dict:
    """Everything that defines what the loss computes (its options, resolved)."""
    stats = loss.statistics
    return {
        "c_bar": loss.c_bar, "lambda_rep": loss.lambda_rep, "factor": loss._distance_factor,
        "per_dim": loss.distance_temperature_per_dim, "allocation": loss.allocation, "pairs": loss.pairs,
        "warmup": loss.warmup_samples_per_class, "min_gamma": loss.min_logit_temperature,
        "logit_margin": loss.logit_margin, "margin_scale": loss.margin_scale, "momentum": stats.momentum,
        "norm_p": stats.norm_p, "center": stats.center, "estimator": stats.estimator,
    }


def _batch(b=24, k=4, d=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    target = torch.arange(b) % k
    features = torch.randn(b, d, generator=g, dtype=torch.float64) * (1 + target.unsqueeze(1)) + 2
    logits = torch.randn(b, k, generator=g, dtype=torch.float64) * 2
    # features that need a gradient: a training step without one leaves the representation term out
    return logits, features.requires_grad_(), target


def test_the_default_is_the_default_variant_and_divides_squared_distances_by_d():
    assert DEFAULT_VARIANT == "distance_1d"
    default = MR2Loss(10)
    assert _settings(default) == _settings(MR2Loss.from_variant(DEFAULT_VARIANT, 10))
    assert [default.distance_temperature_value(d) for d in (1, 64, 128)] == [1.0, 64.0, 128.0]
    # The engine's `method: mr2` without a variant and ReleasedMR2Loss without options: the same loss.
    assert _settings(build_method("mr2", 10).loss) == _settings(default)
    assert _settings(ReleasedMR2Loss(10)) == _settings(default)


@pytest.mark.parametrize("variant", PAPER_FORM_VARIANTS)
def test_the_paper_and_its_one_change_variants_keep_t_equal_one(variant):
    loss = MR2Loss.from_variant(variant, 10)
    assert [loss.distance_temperature_value(d) for d in (1, 64, 2048)] == [1.0, 1.0, 1.0]
    assert VARIANTS[variant]["distance_temperature"] == 1.0
    assert VARIANTS[variant]["distance_temperature_per_dim"] is False
    # Through the engine's method too, and with the released code's class.
    assert build_method("mr2", 10, variant=variant).loss.distance_temperature_value(64) == 1.0
    assert ReleasedMR2Loss.from_variant(variant, 10).distance_temperature_value(64) == 1.0


def test_paper_variant_is_the_papers_formula_in_float64():
    """The loss of the 'paper' variant against the float64 oracles with T = 1 (nothing from the library)."""
    loss_fn = MR2Loss.from_variant("paper", 4, momentum=0.5)
    logits, features, target = _batch()
    got = loss_fn(logits, features, target)
    _, mean_sq_norm, spread = oracles.pooled_statistics([(features, target)], 4, momentum=0.5)
    gamma = oracles.gamma_allocation([m + s for m, s in zip(mean_sq_norm, spread)], 1.0)
    logit_term = oracles.logit_margin_loss(logits, target, torch.tensor(gamma, dtype=torch.float64))
    rep = oracles.representation_terms(features, target, 2 * sum(spread) / 4, temperature=1.0)
    assert got.item() == pytest.approx(logit_term + 0.1 * sum(rep) / len(rep), rel=1e-6)  # the statistics are float32 buffers


def test_default_is_the_papers_formula_with_t_equal_d_in_float64():
    loss_fn = MR2Loss(4, momentum=0.5)
    logits, features, target = _batch()
    got = loss_fn(logits, features, target)
    _, mean_sq_norm, spread = oracles.pooled_statistics([(features, target)], 4, momentum=0.5)
    gamma = oracles.gamma_allocation([m + s for m, s in zip(mean_sq_norm, spread)], 1.0)
    logit_term = oracles.logit_margin_loss(logits, target, torch.tensor(gamma, dtype=torch.float64))
    rep = oracles.representation_terms(features, target, 2 * sum(spread) / 4, temperature=6.0)
    assert got.item() == pytest.approx(logit_term + 0.1 * sum(rep) / len(rep), rel=1e-6)  # the statistics are float32 buffers


@pytest.mark.parametrize(
    ("options", "temperature"),
    [
        ({}, 64.0),  # the default: T = d
        ({"distance_temperature": 2.0}, 2.0),  # a given T is T itself, as before the default changed
        ({"distance_temperature": 1.0}, 1.0),
        ({"distance_temperature": 2.0, "distance_temperature_per_dim": True}, 128.0),
        ({"distance_temperature_per_dim": True}, 64.0),
        ({"distance_temperature_per_dim": False}, 1.0),  # the paper's T = 1
    ],
)
def test_an_explicit_distance_temperature_keeps_its_meaning(options, temperature):
    assert MR2Loss(4, **options).distance_temperature_value(64) == temperature
    assert ReleasedMR2Loss(4, **options).distance_temperature_value(64) == temperature
    assert build_method("mr2", 4, **options).loss.distance_temperature_value(64) == temperature


def test_the_released_variant_keeps_t_equal_ten_d():
    loss = ReleasedMR2Loss.from_variant("released", 10)
    assert loss.distance_temperature == "10d" and loss.distance_temperature_value(128) == 1280.0


def test_loss_options_list_the_defaults_as_none():
    options = keyword_options(MR2Loss)
    assert options["distance_temperature"] is None and options["distance_temperature_per_dim"] is None
