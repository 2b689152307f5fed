"""SAM / ASAM: the perturbation against a float64 loop, the engine's step against the reference's
loop, batch-norm statistics and method state updated once, GradScaler, config and errors."""

from __future__ import annotations

import copy

import pytest
import torch

from methods.representation_oracles import sam_perturbation_oracle
from mr2.config import ConfigError, config_from_dict
from mr2.engine.loop import StepSetup, train_one_epoch
from mr2.methods.base import MethodContext
from mr2.methods.registry import build_method
from mr2.optim.sam import BAD_RHO, SAM, SAM_STATE_MISMATCH, frozen_batchnorm_statistics, sam_perturbation
from optim.sam_helpers import HIDDEN, K, batches, make_net, reference_sam_steps


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("adaptive", [False, True])
def test_perturbation_matches_the_float64_loop(adaptive):
    g = torch.Generator().manual_seed(0)
    params = [torch.randn(3, 4, generator=g, dtype=torch.float64), torch.randn(5, generator=g, dtype=torch.float64)]
    grads = [torch.randn_like(p) for p in params]
    got = sam_perturbation(params, grads, 0.3, adaptive)
    for a, b in zip(got, sam_perturbation_oracle(params, grads, 0.3, adaptive), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-13, atol=1e-15)
    norm = torch.cat([((p.abs() if adaptive else 1) * e / (p * p if adaptive else 1)).reshape(-1)
                      for p, e in zip(params, got, strict=True)]).norm()
    assert norm.item() == pytest.approx(0.3, rel=1e-10)  # ||T^-1 e|| = rho
    scaled = sam_perturbation(params, [1024.0 * gr for gr in grads], 0.3, adaptive)  # a scaler's factor
    for a, b in zip(scaled, got, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("adaptive", [False, True])
def test_engine_step_equals_the_reference_loop_in_float64(adaptive):
    model, data = make_net(torch.float64), batches(dtype=torch.float64)
    expected = reference_sam_steps(model, data, 0.1, adaptive, lr=0.2, momentum=0.9, weight_decay=1e-3)
    method = build_method("erm", K)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9, weight_decay=1e-3)
    sam = SAM(optimizer, 0.1, adaptive)
    result = train_one_epoch(model, method, data, optimizer, None, StepSetup(torch.device("cpu"), sam=sam))
    for (name, a), b in zip(model.state_dict().items(), expected.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14, msg=name)
    assert sam.steps == len(data)
    bn = model.backbone[1]
    assert int(bn.num_batches_tracked) == len(data)  # counted once per step
    assert result.samples == 24


def test_batchnorm_running_statistics_come_from_the_first_pass_only():
    model = make_net()
    x = torch.randn(8, 5)
    model.train()
    model(x)
    after_first = {k: v.clone() for k, v in model.state_dict().items() if "running" in k or "tracked" in k}
    with frozen_batchnorm_statistics(model):
        model(x * 3 + 1)  # a different batch: would move the statistics
    for key, value in after_first.items():
        assert torch.equal(model.state_dict()[key], value), key
    assert model.backbone[1].momentum == 0.1
    with torch.no_grad():  # without the freeze the second pass would have moved them
        model(x * 3 + 1)
    assert not torch.equal(model.state_dict()["backbone.1.running_mean"], after_first["backbone.1.running_mean"])


def test_method_state_is_updated_once_per_step_by_the_first_pass():
    """Center loss with SAM: after a step the centres are the first pass's update (features at w)."""
    model, data = make_net(), batches(steps=1)
    method = build_method("center_loss", K, lambda_center=0.5, alpha=0.5)
    method.setup(MethodContext(K, 8, torch.ones(K), HIDDEN, torch.device("cpu"), 1))
    start = method.centers.clone()
    probe_model, probe_method = copy.deepcopy(model), copy.deepcopy(method)
    x, y, _ = data[0]
    probe_model.train()
    probe_method.train()
    probe_method(*probe_model(x), y)  # one update from the features at w
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    train_one_epoch(model, method, data, optimizer, None, StepSetup(torch.device("cpu"), sam=SAM(optimizer, 0.5)))
    torch.testing.assert_close(method.centers, probe_method.centers)
    assert not torch.equal(method.centers, start)


def test_grad_scaler_gives_the_unscaled_step():
    scaler_kind = torch.amp.GradScaler("cpu", init_scale=2.0**8)
    model_a, model_b, data = make_net(), make_net(), batches()
    for model, scaler in ((model_a, None), (model_b, scaler_kind)):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
        sam = SAM(optimizer, 0.05)
        train_one_epoch(model, build_method("erm", K), data, optimizer, None,
                        StepSetup(torch.device("cpu"), scaler=scaler, sam=sam))
    for (name, a), b in zip(model_a.state_dict().items(), model_b.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)


def test_non_finite_first_gradients_leave_the_weights_and_skip_the_step():
    model, data = make_net(), batches(steps=1)
    with torch.no_grad():
        model.classifier.weight.mul_(50)  # a large loss: times the scale it overflows to inf
    before = copy.deepcopy(model.state_dict())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
    scaler = torch.amp.GradScaler("cpu", init_scale=3e38)
    train_one_epoch(model, build_method("erm", K), data, optimizer, None,
                    StepSetup(torch.device("cpu"), scaler=scaler, sam=SAM(optimizer, 0.05)))
    for key in ("backbone.0.weight", "classifier.weight"):
        assert torch.equal(model.state_dict()[key], before[key]), key
    assert scaler.get_scale() < 3e38


def test_state_dict_round_trip_and_mismatch():
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(2))], lr=0.1)
    sam = SAM(optimizer, 0.05, adaptive=True)
    sam.steps = 7
    other = SAM(optimizer, 0.05, adaptive=True)
    other.load_state_dict(sam.state_dict())
    assert other.steps == 7
    with pytest.raises(ValueError) as error:
        SAM(optimizer, 0.1).load_state_dict(sam.state_dict())
    assert str(error.value) == SAM_STATE_MISMATCH.format(
        saved={"rho": 0.05, "adaptive": True}, current={"rho": 0.1, "adaptive": False}
    )
    with pytest.raises(ValueError, match=BAD_RHO.format(value=-1.0).replace("(", r"\(").replace(")", r"\)")):
        SAM(optimizer, -1.0)


def test_config_section():
    config = config_from_dict({"optim": {"sam": {"rho": 0.5, "adaptive": True}}})
    assert config.optim.sam is not None and (config.optim.sam.rho, config.optim.sam.adaptive) == (0.5, True)
    assert config_from_dict({}).optim.sam is None
    with pytest.raises(ConfigError, match=r"config key 'optim.sam.rho': must be >= 0"):
        config_from_dict({"optim": {"sam": {"rho": -0.1}}})
    with pytest.raises(ConfigError, match=r"unknown config key 'optim.sam.radius'; valid keys here: rho, adaptive"):
        config_from_dict({"optim": {"sam": {"radius": 0.1}}})


def test_second_pass_sees_the_method_state_of_before_the_step():
    """Center loss + SAM equals the hand-written step whose second pass uses the centres c_0 the
    first pass started from (the same objective), and which keeps the first pass's update c_1."""
    model, data = make_net(torch.float64), batches(steps=1, dtype=torch.float64)
    method = build_method("center_loss", K, lambda_center=2.0, alpha=0.5)
    method.setup(MethodContext(K, 8, torch.ones(K), HIDDEN, torch.device("cpu"), 1))
    method.double()
    hand_model, hand_method = copy.deepcopy(model), copy.deepcopy(method)
    x, y, _ = data[0]
    params = list(hand_model.parameters())
    c0 = hand_method.centers.clone()
    hand_model.train()
    hand_method.train()
    hand_method(*hand_model(x), y).backward()
    c1 = hand_method.centers.clone()
    with torch.no_grad():
        old = [p.detach().clone() for p in params]
        for p, e in zip(params, sam_perturbation_oracle([p.detach() for p in params],
                                                        [p.grad for p in params], 0.2, False), strict=True):
            p.add_(e)
    for p in params:
        p.grad = None
    hand_method.centers.copy_(c0)
    with frozen_batchnorm_statistics(hand_model):
        hand_method(*hand_model(x), y).backward()
    with torch.no_grad():
        for p, o in zip(params, old, strict=True):
            p.copy_(o - 0.1 * p.grad)  # restore w, then plain SGD with the second pass's gradient
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    train_one_epoch(model, method, data, optimizer, None, StepSetup(torch.device("cpu"), sam=SAM(optimizer, 0.2)))
    torch.testing.assert_close(method.centers, c1)
    for (name, a), b in zip(model.state_dict().items(), hand_model.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14, msg=name)
