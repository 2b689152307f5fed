"""The compiled steady step (issue 47): the statistics' update and the logit temperatures as one function.

Where numba is installed (``pip install "mr2[fast]"``, in the dev extras), a steady CPU training step of
``MR2Loss`` runs :mod:`mr2.statistics._fused_cpu`: one compiled call instead of some 30 small tensor
operations, with the pass over the batch in it or left to tensor operations (the ``path`` fixture runs
the tests on both). These tests hold it to the eager steady step (which tests/core/test_steady_probe_step.py
holds to the general path bit for bit) within rounding, to the float64 oracles, and check that it writes
nothing for a batch the eager step refuses, bumps the version counters that the deferred parts read, keeps
resumed and copied runs bit for bit with the uninterrupted ones, and can be switched off.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys

import pytest
import torch

from helpers.ops import change_statistics, steady_batch
from mr2 import MR2Loss
from mr2.checks import MR2InputError, StatisticsOverflowError
from mr2.functional.allocation import gamma_allocation
from mr2.statistics import _fused_cpu

pytest.importorskip("numba", reason="the compiled step needs numba (pip install 'mr2[fast]')")


@pytest.fixture(params=["one pass", "split"])
def path(request, monkeypatch):
    """Each test runs on both compiled paths: the pass over the batch in the compiled function, or as
    tensor operations (:func:`~mr2.statistics._fused_cpu.use_one_pass` decides by size and threads)."""
    monkeypatch.setattr(_fused_cpu, "use_one_pass", lambda batch, dim: request.param == "one pass")
    return request.param


@pytest.fixture
def kernel_calls(monkeypatch, path):
    """The return codes of every call of the compiled step from now on (on the fixture's path only)."""
    codes: list[int] = []
    name = "one_pass_step" if path == "one pass" else "split_step"
    original = getattr(_fused_cpu, name)

    def counted(*args):  # type: ignore[no-untyped-def]
        codes.append(original(*args))
        return codes[-1]

    def other(*args):  # type: ignore[no-untyped-def]
        raise AssertionError(f"the other compiled path ran, not {path!r}")

    monkeypatch.setattr(_fused_cpu, name, counted)
    monkeypatch.setattr(_fused_cpu, "split_step" if path == "one pass" else "one_pass_step", other)
    return codes


def _pair(k: int, dtype: torch.dtype, momentum: float, variant: str | None = None) -> tuple[MR2Loss, MR2Loss]:
    """Two equal losses: the first takes the compiled step, the second the eager one."""

    def make() -> MR2Loss:
        loss = (MR2Loss(k, momentum=momentum) if variant is None
                else MR2Loss.from_variant(variant, k, momentum=momentum))
        return loss.to(dtype)

    fused, eager = make(), make()
    eager.statistics.fused_step = False
    return fused, eager


def _tolerance(dtype: torch.dtype) -> dict[str, float]:
    return {"rtol": 1e-12, "atol": 1e-12} if dtype == torch.float64 else {"rtol": 2e-5, "atol": 1e-6}


def _step(loss: MR2Loss, logits, features, target, train: bool):
    z = logits.detach().clone().requires_grad_()
    x = features.detach().clone().requires_grad_(train)
    value = loss(z, x, target)
    value.backward()
    return value.detach(), z.grad, x.grad


def _assert_same_state(fused: MR2Loss, eager: MR2Loss, dtype: torch.dtype) -> None:
    for (name, a), (_, b) in zip(fused.state_dict().items(), eager.state_dict().items(), strict=True):
        if a.is_floating_point():
            torch.testing.assert_close(a, b, **_tolerance(dtype), msg=name)
        else:
            torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)


# The [K, d] lerp path (K <= B / 2), the many-class path (B / 2 < K <= B), K > B; momentum 0.3 takes the
# other branch of torch.lerp's formula (weight 1 - m >= 0.5).
@pytest.mark.parametrize("k, b", [(5, 40), (30, 40), (70, 32)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("momentum", [0.8, 0.3])
@pytest.mark.parametrize("train", [False, True], ids=["probe", "train"])
def test_the_compiled_step_gives_the_eager_steps_values(k, b, dtype, momentum, train, kernel_calls):
    fused, eager = _pair(k, dtype, momentum)
    for seed in range(10):
        batch = steady_batch(seed, k, b, 6, dtype, distinct=min(k, b // 2) if train else None)
        for got, want in zip(_step(fused, *batch, train), _step(eager, *batch, train), strict=True):
            if want is None:
                assert got is None
            else:
                torch.testing.assert_close(got, want, **_tolerance(dtype))
        for name, a, b_ in zip(fused.parts._fields, fused.parts, eager.parts, strict=True):
            torch.testing.assert_close(a, b_, **_tolerance(dtype), equal_nan=True, msg=name)
        _assert_same_state(fused, eager, dtype)
    assert fused.representation_skipped == eager.representation_skipped == (not train)
    # The compiled step ran for every steady step (all classes are seen within the first steps).
    assert len(kernel_calls) >= 5 and set(kernel_calls) == {_fused_cpu.OK}


def test_the_compiled_step_meets_the_float64_oracles(kernel_calls):
    # n_k, Q_k and a_k = Q_k / n_k against the explicitly weighted samples; gamma against the allocation
    # of the float64 a_k; the class means against the oracle's.
    from core import oracles

    k, b, momentum = 6, 30, 0.7
    loss = MR2Loss(k, momentum=momentum).double()
    batches = []
    for seed in range(8):
        logits, features, target = steady_batch(seed, k, b, 5, torch.float64)
        loss(logits.requires_grad_(), features, target)
        batches.append((features, target))
    assert len(kernel_calls) >= 5
    means, msq, spread = oracles.pooled_statistics(batches, k, momentum)
    want = torch.tensor([m + s for m, s in zip(msq, spread, strict=True)], dtype=torch.float64)
    torch.testing.assert_close(loss.allocation_statistic(), want, rtol=1e-12, atol=0)
    torch.testing.assert_close(loss.statistics.means(), torch.tensor(means, dtype=torch.float64),
                               rtol=1e-12, atol=1e-12)
    gamma = gamma_allocation(want, c_bar=loss.c_bar)
    torch.testing.assert_close(loss.parts.logit_margins, gamma.clamp_min(loss.min_logit_temperature),
                               rtol=1e-12, atol=0)


def _steady(k: int = 5, b: int = 40, dtype: torch.dtype = torch.float32) -> MR2Loss:
    loss = MR2Loss(k).to(dtype)
    for seed in range(3):
        loss(*steady_batch(seed, k, b, 6, dtype))
    assert loss.statistics.all_seen_known()
    return loss


def _state(loss: MR2Loss) -> dict[str, torch.Tensor]:
    return {name: value.clone() for name, value in loss.state_dict().items()}


def _assert_unchanged(loss: MR2Loss, before: dict[str, torch.Tensor]) -> None:
    for name, value in loss.state_dict().items():
        torch.testing.assert_close(value, before[name], rtol=0, atol=0, msg=name)


@pytest.mark.parametrize("bad", ["class -1", "class K", "nan feature", "inf logit", "overflow"])
def test_a_batch_the_eager_step_refuses_is_refused_with_its_error_and_nothing_written(bad, path, kernel_calls):
    k, b = 5, 40
    loss = _steady(k, b)
    before = _state(loss)
    want_margin = loss.distance_margin()
    versions = [loss.statistics.feature_sum._version, loss.statistics.samples_seen._version]
    logits, features, target = steady_batch(3, k, b)
    error: type[Exception] = MR2InputError
    match = None
    if bad == "class -1":
        target[7] = -1
        match = r"class ids outside \[0, 5\): smallest -1"
    elif bad == "class K":
        target[7] = k
        match = r"class ids outside \[0, 5\): smallest 0, largest 5"
    elif bad == "nan feature":
        features[2, 1] = float("nan")
        match = r"features contain 1 non-finite"
    elif bad == "inf logit":
        logits[0, 0] = float("inf")
        match = "logits contain 1 non-finite"
    else:
        features[:4] = 1e20  # finite; the squared norms overflow float32
        error = StatisticsOverflowError
    calls = len(kernel_calls)
    with pytest.raises(error, match=match):
        loss(logits, features, target)
    # A class id outside [0, K): the one-pass function's own check, or the counts (a bincount) before
    # the split function runs; a NaN/Inf input or an overflow: the compiled guard.
    if bad.startswith("class"):
        assert kernel_calls[calls:] == ([_fused_cpu.BAD_CLASS] if path == "one pass" else [])
    else:
        assert kernel_calls[calls:] == [_fused_cpu.NOT_FINITE]
    _assert_unchanged(loss, before)
    assert [loss.statistics.feature_sum._version, loss.statistics.samples_seen._version] == versions
    # The last step's parts are kept, and so is their hook: a later change of the statistics first
    # settles them (the refused attempt did not use the hook up).
    loss.statistics.update(*steady_batch(4, k, b)[1:])
    torch.testing.assert_close(loss.parts.margin, want_margin, rtol=0, atol=0)


def test_finite_logits_whose_float32_sum_overflows_are_a_valid_batch(kernel_calls):
    # The eager step's float32 sum of the logits overflows and its exact check then finds every value
    # finite; the compiled guard sums them in float64: both go on, with the same values.
    k, b = 5, 40
    fused, eager = _steady(k, b), _steady(k, b)
    eager.statistics.fused_step = False
    logits, features, target = steady_batch(3, k, b)
    logits[:, 0] = 1e37  # finite; 40 of them overflow a float32 sum
    assert not torch.isfinite(logits.sum())
    calls = len(kernel_calls)
    got, want = fused(logits, features, target), eager(logits, features, target)
    assert kernel_calls[calls:] == [_fused_cpu.OK]
    assert torch.isfinite(want)
    torch.testing.assert_close(got, want, **_tolerance(torch.float32))
    _assert_same_state(fused, eager, torch.float32)


def test_a_guard_that_overflows_the_statistics_dtype_is_refused_as_the_eager_step_refuses_it(kernel_calls):
    # n.Q of one class near float32's largest value: 4 n.Q overflows float32 (the eager step's check,
    # in the statistics' dtype, raises) although the product itself and a float64 sum do not.
    k, b = 5, 40
    loss = _steady(k, b)
    loss.statistics.sq_norm_sum[0] = 1e38
    loss.statistics.count[0] = 1.0
    assert loss.statistics.all_seen_known()
    before = _state(loss)
    calls = len(kernel_calls)
    with pytest.raises(StatisticsOverflowError):
        loss(*steady_batch(3, k, b))
    assert kernel_calls[calls:] == [_fused_cpu.NOT_FINITE]
    _assert_unchanged(loss, before)


def test_the_compiled_step_bumps_the_version_counters_of_what_it_writes(kernel_calls):
    loss = _steady()
    stats = loss.statistics
    names = ("feature_sum", "count", "sq_norm_sum", "samples_seen")
    before = [getattr(stats, name)._version for name in names]
    calls = len(kernel_calls)
    loss(*steady_batch(4, 5, 40))
    assert kernel_calls[calls:] == [_fused_cpu.OK]
    after = [getattr(stats, name)._version for name in names]
    assert all(a > b for a, b in zip(after, before, strict=True)), (before, after)
    assert stats.all_seen_known()  # recorded at the new version


@pytest.mark.parametrize("change", ["update", "load", "accumulate", "in place", "deepcopy"])
def test_deferred_parts_after_a_compiled_step_are_those_of_their_step(change, kernel_calls):
    k, b = 5, 40
    loss = _steady(k, b)
    value = loss(*steady_batch(5, k, b))
    assert kernel_calls[-1] == _fused_cpu.OK
    want_margin, want_gamma = loss.distance_margin(), loss.logit_temperatures()
    if change == "in place":  # not through the statistics' methods: no hook, the version counter tells
        loss.statistics.feature_sum.mul_(2.0)
        assert torch.isnan(loss.parts.margin)
        return
    loss = change_statistics(loss, change, lambda seed: steady_batch(seed, k, b))
    assert not torch.equal(loss.distance_margin(), want_margin)  # the statistics did change
    parts = loss.parts
    torch.testing.assert_close(parts.margin, want_margin, rtol=0, atol=0)
    # The step's own gamma (the compiled arithmetic) against the same formula in tensor operations.
    torch.testing.assert_close(parts.logit_margins, want_gamma, **_tolerance(torch.float32))
    torch.testing.assert_close(parts.total, value.detach(), rtol=0, atol=0)


@pytest.mark.parametrize("how", ["state dict", "fresh statistics"])
def test_a_resumed_run_continues_the_uninterrupted_one_bit_for_bit(how, kernel_calls):
    # A run resumed from a state dict takes the steady path at its first step, as the uninterrupted run
    # does (the load checks that every class was seen): the compiled step and the general path differ in
    # the last bits, so a first step on the general path would make the two runs part.
    k, b = 5, 40
    batches = [steady_batch(seed, k, b) for seed in range(10)]
    uninterrupted, first = MR2Loss(k), MR2Loss(k)
    for i, (logits, features, target) in enumerate(batches):
        uninterrupted(logits, features, target)
        if i < 5:
            first(logits, features, target)
    resumed = MR2Loss(k)
    if how == "state dict":
        resumed.load_state_dict(first.state_dict())
    else:
        resumed.statistics.load_state_dict(first.statistics.state_dict())
    calls = len(kernel_calls)
    for logits, features, target in batches[5:]:
        resumed(logits, features, target)
    assert kernel_calls[calls:] == [_fused_cpu.OK] * 5  # every resumed step compiled
    for (name, x), (_, y) in zip(resumed.state_dict().items(), uninterrupted.state_dict().items(), strict=True):
        torch.testing.assert_close(x, y, rtol=0, atol=0, msg=name)


@pytest.mark.parametrize("how", ["deepcopy", "torch.save"])
def test_a_copied_loss_continues_as_the_original_bit_for_bit(how, tmp_path, kernel_calls):
    k, b = 5, 40
    loss = _steady(k, b)
    if how == "deepcopy":
        other = copy.deepcopy(loss)
    else:
        torch.save(loss, tmp_path / "loss.pt")
        other = torch.load(tmp_path / "loss.pt", weights_only=False)
    assert other.statistics.all_seen_known()  # read again as the copy was made
    calls = len(kernel_calls)
    for seed in range(3, 6):
        batch = steady_batch(seed, k, b)
        torch.testing.assert_close(other(*batch), loss(*batch), rtol=0, atol=0)
    assert kernel_calls[calls:] == [_fused_cpu.OK] * 6
    for (name, x), (_, y) in zip(other.state_dict().items(), loss.state_dict().items(), strict=True):
        torch.testing.assert_close(x, y, rtol=0, atol=0, msg=name)


def test_non_contiguous_features_give_the_contiguous_values(kernel_calls):
    k, b, d = 5, 40, 6
    a, b_loss = MR2Loss(k), MR2Loss(k)
    for seed in range(6):
        logits, features, target = steady_batch(seed, k, b, d)
        wide = torch.zeros(b, 2 * d)
        wide[:, ::2] = features  # a strided view with the same values
        torch.testing.assert_close(a(logits, features, target), b_loss(logits, wide[:, ::2], target),
                                   rtol=0, atol=0)
    assert len(kernel_calls) >= 6 and set(kernel_calls) == {_fused_cpu.OK}
    for (name, x), (_, y) in zip(a.state_dict().items(), b_loss.state_dict().items(), strict=True):
        torch.testing.assert_close(x, y, rtol=0, atol=0, msg=name)


def test_the_switches_turn_it_off(kernel_calls):
    loss = _steady()
    calls = len(kernel_calls)
    assert calls >= 1
    loss.statistics.fused_step = False
    loss(*steady_batch(4, 5, 40))
    assert len(kernel_calls) == calls
    # MR2_FUSED_CPU=0: never compiled nor imported.
    code = ("import sys, torch; from mr2 import MR2Loss; from mr2.statistics import _fused_cpu; "
            "loss = MR2Loss(3); [loss(torch.randn(9, 3), torch.rand(9, 4), torch.arange(9) % 3) "
            "for _ in range(3)]; print(_fused_cpu.available(), 'numba' in sys.modules)")
    env = {**os.environ, "MR2_FUSED_CPU": "0"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


@pytest.mark.parametrize("k, b, d", [(4, 64, 8), (40, 64, 8), (300, 256, 16)])
def test_the_two_compiled_paths_agree(k, b, d, monkeypatch):
    # The same steps through the one-pass function and the split one (tensor passes): equal within
    # float32 rounding, the many-class state of the split path bit for bit the eager step's.
    losses = {}
    for path in ("one pass", "split", "eager"):
        monkeypatch.setattr(_fused_cpu, "use_one_pass", lambda batch, dim, p=path: p == "one pass")
        loss = MR2Loss(k)
        loss.statistics.fused_step = path != "eager"
        for seed in range(8):
            loss(*steady_batch(seed, k, b, d))
        losses[path] = loss
    for path in ("split", "eager"):
        _assert_same_state(losses["one pass"], losses[path], torch.float32)
    if 2 * k > b:  # scaled rows, then the eager index_add_
        torch.testing.assert_close(losses["split"].statistics.feature_sum,
                                   losses["eager"].statistics.feature_sum, rtol=0, atol=0)


def test_a_serial_pass_only_for_small_batches_with_many_threads(monkeypatch):
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(4)
        assert _fused_cpu.use_one_pass(512, 256)  # 2^17 elements
        assert not _fused_cpu.use_one_pass(512, 257)
        torch.set_num_threads(2)
        assert _fused_cpu.use_one_pass(4096, 2048)
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("k", [4, 10, 100])
def test_a_compiled_probe_step_stays_within_its_operation_budget(k, path, kernel_calls):
    # 34 tensor operations on the eager steady step (tests/core/test_steady_probe_step.py); with the
    # compiled call 18 (the pass over the batch in it) or 24 (the pass as tensor operations).
    from helpers.ops import CountOps

    loss = MR2Loss(k)
    for seed in range(4):
        loss(*steady_batch(seed, k, 64))
    logits, features, target = steady_batch(5, k, 64)
    calls = len(kernel_calls)
    with CountOps() as ops:
        loss(logits.requires_grad_(), features, target)
    assert kernel_calls[calls:] == [_fused_cpu.OK]
    assert ops.count <= (18 if path == "one pass" else 24), f"K = {k}: {ops.count} operations"


def test_the_return_codes_agree():
    from mr2.statistics import _fused_cpu_numba

    assert (_fused_cpu_numba.OK, _fused_cpu_numba.BAD_CLASS, _fused_cpu_numba.NOT_FINITE) == (
        _fused_cpu.OK, _fused_cpu.BAD_CLASS, _fused_cpu.NOT_FINITE)
    assert len({_fused_cpu.OK, _fused_cpu.BAD_CLASS, _fused_cpu.NOT_FINITE}) == 3


def test_statistics_pickled_before_the_switch_existed_load_with_it_on():
    from mr2.statistics.class_features import ClassFeatureStatistics

    old = ClassFeatureStatistics(3, feature_dim=2)
    state = dict(old.__dict__)
    del state["fused_step"]  # as pickled by a version without the attribute
    loaded = ClassFeatureStatistics.__new__(ClassFeatureStatistics)
    loaded.__setstate__(state)
    assert loaded.fused_step is True
