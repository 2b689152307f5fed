"""Loss specifications (:mod:`mr2.tune.loss_spec`): every candidate that is a loss round-trips through
its JSON specification and the loss it builds equals the engine's method on the same batches."""

from __future__ import annotations

import json
import math

import pytest
import torch

from mr2.methods.base import MethodContext
from mr2.methods.registry import UNKNOWN_OPTIONS, build_method
from mr2.methods.spec import BAD_CLASS_COUNTS, LossSpecError
from mr2.tune import Candidate, TuneInputError, candidates, loss_from_spec
from mr2.tune.candidates import NO_NUM_CLASSES
from mr2.tune.loss_spec import (
    ENGINE_ONLY,
    NEEDS_FEATURE_DIM,
    NEEDS_FEATURES,
    NUM_CLASSES_DIFFER,
    UNKNOWN_LOSS,
    engine_only_methods,
    loss_methods,
    parse_loss_spec,
)

LOSS_METHODS = loss_methods()
ENGINE_ONLY_METHODS = engine_only_methods()

K, D, B = 5, 6, 20
#: Every loss the candidate sets hold, and focal (a loss a specification may name, in no candidate set).
FOREIGN = [*candidates("full", losses_only=True), Candidate("focal", "focal", {"gamma": 2.0})]


def _batch(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, K, generator=generator, dtype=torch.float64)
    features = torch.randn(B, D, generator=generator, dtype=torch.float64)
    target = torch.arange(B) % K
    return logits, features, target


def _engine_method(candidate: Candidate) -> torch.nn.Module:
    method = build_method(candidate.method, K, **candidate.options)
    method.setup(MethodContext(num_classes=K, num_train_samples=0, class_counts=torch.ones(K, dtype=torch.int64),
                               feature_dim=D, device=torch.device("cpu"), epochs=1))
    return method.double()


def test_the_sources_candidate_sets():
    assert [c.label for c in candidates("quick", losses_only=True)] == [c.label for c in candidates("quick")]
    assert all(c.is_loss for c in FOREIGN)
    engine_only = [c.method for c in candidates("full") if not c.is_loss]
    assert engine_only == ["jtt", "hbr"] and set(engine_only) <= set(ENGINE_ONLY_METHODS)
    # What a method is comes from its class: LDAM, CDB (engine hooks) and LfF are engine-only too;
    # logit adjustment is a loss (with the class counts).
    assert set(ENGINE_ONLY_METHODS) == {"jtt", "hbr", "lff", "ldam", "cdb"}
    assert {c.method for c in FOREIGN} | {"logit_adjustment"} == set(LOSS_METHODS)


@pytest.mark.parametrize("candidate", FOREIGN, ids=[c.label for c in FOREIGN])
def test_every_spec_round_trips_and_builds_the_engines_loss(candidate):
    spec = candidate.loss_spec()
    assert json.loads(json.dumps(spec)) == spec  # JSON-able
    assert parse_loss_spec(spec) == spec and parse_loss_spec(json.dumps(spec)) == spec
    from_dict = loss_from_spec(spec, K, feature_dim=D).double()
    from_json = loss_from_spec(json.dumps(spec), num_classes=K, feature_dim=D).double()
    made = candidate.make_loss(K, feature_dim=D).double()
    engine = _engine_method(candidate)
    assert from_dict.spec == from_json.spec == made.spec == spec
    assert made.needs_features == candidate.needs_features == (candidate.method in ("mr2", "center_loss", "supcon"))
    # Two training steps: the state (class statistics, class weights, centres) evolves identically.
    for step in range(2):
        logits, features, target = _batch(step)
        expected = engine(logits, features, target)
        assert expected.dtype == torch.float64 and torch.isfinite(expected)
        for loss in (from_dict, from_json, made):
            value = loss(logits, features if loss.needs_features else None, target)
            assert value.dtype == torch.float64
            torch.testing.assert_close(value, expected, rtol=1e-12, atol=1e-12)
    # Trainable parameters only where the method has them (SupCon's head), reachable for an optimiser.
    assert len(list(made.parameters())) == len(list(engine.parameters()))


def test_erm_and_focal_against_float64_oracles():
    logits, _, target = _batch(3)

    def oracle(gamma: float) -> float:
        total = 0.0
        for row, y in zip(logits.tolist(), target.tolist(), strict=True):
            top = max(row)
            log_p = row[y] - top - math.log(sum(math.exp(v - top) for v in row))
            total += -((1 - math.exp(log_p)) ** gamma) * log_p
        return total / len(logits)

    erm = loss_from_spec('{"method": "erm", "options": {}}', K)
    focal = loss_from_spec('{"method": "focal", "options": {"gamma": 2.0}}', K)
    assert erm(logits, None, target).item() == pytest.approx(oracle(0.0), rel=1e-12)
    assert focal(logits, None, target).item() == pytest.approx(oracle(2.0), rel=1e-12)


def test_the_loss_sets_itself_up_on_the_first_call_and_moves_with_to():
    loss = loss_from_spec({"method": "center_loss", "options": {}}, K)
    logits, features, target = _batch(0)
    first = loss(logits.float(), features.float(), target)
    assert loss.method.centers.shape == (K, D) and torch.isfinite(first)
    assert set(loss.state_dict()) == {"method.centers"}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "not an object"),
        ({"options": {}}, "expected 'method', 'options' and optionally 'num_classes'"),
        ({"method": "erm", "options": {}, "seed": 1}, "expected 'method', 'options' and optionally 'num_classes'"),
        ({"method": "erm", "options": {}, "num_classes": K + 1}, NUM_CLASSES_DIFFER.format(spec=K + 1, given=K)),
        ({"method": "erm", "options": {}, "num_classes": 1}, "num_classes must be an integer from 2 to 100000"),
        ({"method": "logit_adjustment", "options": {}}, "logit_adjustment needs the training set's class counts"),
        ({"method": 3}, "'method' is not a string"),
        ({"method": "erm", "options": []}, "'options' is not an object"),
        ({"method": "mr2", "options": {"c_bar": float("nan")}}, "not a finite JSON number"),
        ('{"method": "mr2", "options": {"c_bar": NaN}}', "not a finite JSON number"),
        ({"method": "sgd"}, UNKNOWN_LOSS.format(name="sgd", choices=", ".join(LOSS_METHODS))),
        ({"method": "jtt"}, ENGINE_ONLY.format(name="jtt", choices=", ".join(LOSS_METHODS))),
        ({"method": "focal", "options": {"gama": 1}},
         UNKNOWN_OPTIONS.format(unknown=["gama"], name="focal", valid=["gamma"])),
        ({"method": "mr2", "options": {"margin_warmup_epochs": 2}}, "acts through mr2's engine"),
        ({"method": "focal", "options": {"gamma": -1}}, "gamma must be >= 0"),
        ({"method": "supcon"}, NEEDS_FEATURE_DIM.format(name="supcon")),
    ],
    ids=["json", "list", "no-method", "extra-key", "k-differs", "k-1", "counts", "method-type", "options-type", "nan", "json-nan", "unknown",
         "engine-only", "unknown-option", "engine-option", "bad-value", "supcon-dim"],
)
def test_bad_specs_are_one_clear_error(spec, message):
    with pytest.raises(TuneInputError) as caught:
        loss_from_spec(spec, K)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_feature_loss_called_without_features_and_a_candidate_without_k_are_clear_errors():
    logits, _, target = _batch(0)
    with pytest.raises(LossSpecError, match="reads the features"):
        loss_from_spec({"method": "mr2", "options": {}}, K)(logits, None, target)
    assert NEEDS_FEATURES.format(name="mr2").startswith("the 'mr2' loss")
    with pytest.raises(TuneInputError) as caught:
        candidates("quick")[1].make_loss()
    assert str(caught.value) == NO_NUM_CLASSES.format(label="mr2-paper-c1")


def test_the_spec_carries_k_so_loss_from_spec_needs_nothing_more():
    candidate = candidates("quick")[2]
    assert "num_classes" not in candidate.loss_spec()  # K unknown here
    spec = Candidate(candidate.label, candidate.method, candidate.options, num_classes=K).loss_spec()
    assert spec["num_classes"] == K
    loss = loss_from_spec(json.dumps(spec))
    assert loss.num_classes == K and loss.spec == spec
    with pytest.raises(TuneInputError, match="has no num_classes"):
        loss_from_spec({"method": "erm", "options": {}})


@pytest.mark.parametrize("feature_dim", [-5, 0, 10**7, 2.5])
def test_feature_dim_is_bounded_before_anything_is_allocated(feature_dim):
    with pytest.raises(TuneInputError, match="feature_dim must be an integer from 1 to 1000000"):
        loss_from_spec({"method": "supcon", "options": {}}, K, feature_dim=feature_dim)


@pytest.mark.parametrize(("counts", "problem"), [
    ([10], "shape (1,)"),
    ([10] * (K - 1) + [0], "counts below 1 for class(es) [4]"),
    ([10] * (K - 1) + [-3], "counts below 1 for class(es) [4]"),
    ([10.5] * K, "values that are not whole numbers"),
    ("abc", "not numbers"),
])
def test_malformed_class_counts_are_refused_not_broadcast_or_clamped(counts, problem):
    with pytest.raises(TuneInputError) as caught:
        loss_from_spec({"method": "group_dro", "options": {"adjustment": 1.0}}, K, class_counts=counts)
    assert str(caught.value) == BAD_CLASS_COUNTS.format(num_classes=K, problem=problem)
    loss = loss_from_spec({"method": "group_dro", "options": {"adjustment": 1.0}}, K, class_counts=[4] * K)
    assert loss.num_classes == K
