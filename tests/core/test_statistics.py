"""ClassFeatureStatistics against a weighted-sample float64 oracle, and its invariances."""

from __future__ import annotations

import pytest
import torch

from core import oracles
from mr2 import ClassFeatureStatistics
from mr2.checks import MR2InputError


def _batches(n_batches=5, b=16, k=4, d=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n_batches):
        y = torch.randint(0, k, (b,), generator=g)
        x = torch.randn(b, d, generator=g, dtype=torch.float64) * (1 + y.unsqueeze(1)) + y.unsqueeze(1)
        out.append((x.float(), y))
    return out


@pytest.mark.parametrize("norm_p", [2.0, 5.0])
def test_pooled_statistics_match_weighted_sample_oracle(norm_p):
    batches = _batches()
    batches[2] = (batches[2][0][batches[2][1] != 3], batches[2][1][batches[2][1] != 3])  # class 3 absent
    stats = ClassFeatureStatistics(4, momentum=0.7, norm_p=norm_p)
    for x, y in batches:
        stats.update(x, y)
    means, msq, spread = oracles.pooled_statistics(batches, 4, 0.7, norm_p=norm_p)
    torch.testing.assert_close(stats.means().double(), torch.tensor(means).double(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(stats.mean_sq_norm().double(), torch.tensor(msq).double(), rtol=1e-5, atol=1e-5)
    if norm_p == 2.0:  # p != 2 takes deviations from the running mean: an approximation
        torch.testing.assert_close(stats.spread().double(), torch.tensor(spread).double(), rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(stats.second_moment(), stats.mean_sq_norm() + stats.spread())


def test_pooled_estimate_is_not_biased_by_batch_class_counts():
    # The same samples of one class arriving 1 per batch or all in one batch: with momentum 0.5 and a
    # stationary distribution the pooled spread estimates the population spread; the per-batch
    # (released) estimator reports 0 spread for single-sample batches.
    torch.manual_seed(1)
    x = torch.randn(400, 2) * 2.0  # s = E||x - mu||^2 = 8
    y = torch.zeros(400, dtype=torch.long)
    pooled = ClassFeatureStatistics(2, momentum=0.99)
    batch = ClassFeatureStatistics(2, momentum=0.99, estimator="batch", norm_p=2.0)
    for i in range(0, 400, 2):  # two samples of the class per batch
        pooled.update(x[i : i + 2], y[i : i + 2])
        batch.update(x[i : i + 2], y[i : i + 2])
    assert pooled.spread()[0].item() == pytest.approx(8.0, rel=0.25)
    assert batch.spread()[0].item() < 0.75 * pooled.spread()[0].item()  # (n-1)/n = 1/2 bias


def test_first_observation_initialises_and_absent_classes_keep_their_values():
    stats = ClassFeatureStatistics(3, feature_dim=2, momentum=0.9)
    stats.update(torch.tensor([[1.0, 2.0], [3.0, 4.0]]), torch.tensor([0, 1]))
    torch.testing.assert_close(stats.means()[:2], torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
    before = {name: buf.clone() for name, buf in stats.named_buffers()}
    stats.update(torch.tensor([[5.0, 5.0]]), torch.tensor([0]))
    for name, buf in stats.named_buffers():
        if buf.dim() >= 1 and buf.shape[0] == 3:
            torch.testing.assert_close(buf[1:], before[name][1:], msg=name)
    assert stats.samples_seen.tolist() == [2, 1, 0]
    torch.testing.assert_close(stats.means()[0], torch.tensor([1.4, 2.3]))


def test_permuting_class_ids_permutes_statistics():
    batches = _batches(k=4)
    perm = torch.tensor([2, 0, 3, 1])
    a, b = ClassFeatureStatistics(4, momentum=0.8), ClassFeatureStatistics(4, momentum=0.8)
    for x, y in batches:
        a.update(x, y)
        b.update(x, perm[y])
    torch.testing.assert_close(b.second_moment()[perm], a.second_moment())
    torch.testing.assert_close(b.means()[perm], a.means())


def test_eval_mode_never_updates():
    stats = ClassFeatureStatistics(3, feature_dim=2).eval()
    stats.update(torch.ones(4, 2), torch.tensor([0, 1, 2, 0]))
    assert stats.samples_seen.sum().item() == 0 and stats.feature_sum.abs().sum().item() == 0


def test_centred_statistics_subtract_average_class_mean():
    stats = ClassFeatureStatistics(2, feature_dim=2, center=True)
    stats.update(torch.tensor([[10.0, 0.0], [12.0, 2.0]]), torch.tensor([0, 1]))
    torch.testing.assert_close(stats.mean_sq_norm(), torch.tensor([2.0, 2.0]))


def test_state_dict_round_trip_with_lazy_feature_dim():
    stats = ClassFeatureStatistics(3, momentum=0.5)
    for x, y in _batches(k=3):
        stats.update(x, y)
    fresh = ClassFeatureStatistics(3, momentum=0.5)
    fresh.load_state_dict(stats.state_dict())
    assert fresh.feature_dim == 3
    x, y = _batches(k=3, seed=7)[0]
    stats.update(x, y)
    fresh.update(x, y)
    for (name, a), (_, b) in zip(stats.named_buffers(), fresh.named_buffers()):
        torch.testing.assert_close(a, b, msg=name)


def test_bf16_autocast_updates_in_float32():
    stats = ClassFeatureStatistics(2, feature_dim=4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        features = torch.nn.Linear(3, 4)(torch.randn(6, 3))
        assert features.dtype == torch.bfloat16
        stats.update(features, torch.tensor([0, 1, 0, 1, 0, 1]))
    assert stats.feature_sum.dtype == torch.float32 and torch.isfinite(stats.second_moment()).all()


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda s: s.update(torch.ones(2, 2), torch.tensor([0, 5])), "outside [0, 3)"),
        (lambda s: s.update(torch.tensor([[1.0, float("inf")]]), torch.tensor([0])), "features contain 1 non-finite"),
        (lambda s: s.update(torch.ones(2, 3), torch.tensor([0, 1])), "features have 3 dimensions"),
        (lambda s: s.update(torch.ones(3, 2), torch.tensor([0, 1])), "features has 3 rows but target has 2"),
        (lambda s: s.update(torch.ones(2), torch.tensor([0, 1])), "features must have shape [batch, feature_dim]"),
    ],
)
def test_bad_input_messages(call, message):
    stats = ClassFeatureStatistics(3, feature_dim=2)
    with pytest.raises(MR2InputError, match=__import__("re").escape(message)):
        call(stats)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_classes": 1}, "num_classes must be an integer >= 2"),
        ({"num_classes": 3, "momentum": 1.0}, "momentum"),
        ({"num_classes": 3, "norm_p": 0.5}, "norm_p"),
        ({"num_classes": 3, "estimator": "batch", "center": True}, "center=True needs"),
    ],
)
def test_bad_construction_messages(kwargs, message):
    with pytest.raises(MR2InputError, match=__import__("re").escape(message)):
        ClassFeatureStatistics(**kwargs)


def _buffers(module):
    return {name: buf.clone() for name, buf in module.named_buffers()}


def _assert_unchanged(module, before):
    for name, buf in module.named_buffers():
        assert torch.equal(buf, before[name]), name


@pytest.mark.parametrize("estimator", ["pooled", "batch"])
def test_update_that_would_overflow_is_refused_and_old_values_kept(estimator):
    from mr2.checks import STATISTICS_OVERFLOW, StatisticsOverflowError

    stats = ClassFeatureStatistics(3, momentum=0.5, estimator=estimator, norm_p=2.0)
    x, y = _batches(k=3)[0]
    stats.update(x, y)
    before = _buffers(stats)
    huge = torch.full((4, 3), 1e20)  # finite; the squared norms (3e40) overflow float32
    with pytest.raises(StatisticsOverflowError, match=__import__("re").escape(STATISTICS_OVERFLOW)):
        stats.update(huge, torch.tensor([0, 1, 2, 0]))
    _assert_unchanged(stats, before)
    assert torch.isfinite(stats.second_moment()).all()


def test_unchecked_update_that_would_overflow_is_skipped_without_error():
    # check_values=False (the accelerator default): no host sync, the update is not applied.
    stats = ClassFeatureStatistics(3, momentum=0.5, check_values=False)
    x, y = _batches(k=3)[0]
    stats.update(x, y)
    before = _buffers(stats)
    stats.update(torch.full((4, 3), 1e20), torch.tensor([0, 1, 2, 0]))
    _assert_unchanged(stats, before)
    stats.update(x, y)  # a normal batch afterwards is applied
    assert torch.equal(stats.samples_seen, 2 * before["samples_seen"])


def test_mr2_loss_refuses_an_overflowing_update_in_its_input_check():
    from mr2 import MR2Loss
    from mr2.checks import StatisticsOverflowError

    loss_fn = MR2Loss(3)
    x, y = _batches(k=3)[0]
    loss_fn(torch.randn(16, 3), x, y)
    before = _buffers(loss_fn)
    with pytest.raises(StatisticsOverflowError):
        loss_fn(torch.randn(4, 3), torch.full((4, 3), 1e20), torch.tensor([0, 1, 2, 0]))
    _assert_unchanged(loss_fn, before)
    # NaN inputs are still reported as such (counted), before any overflow message.
    bad = x.clone()
    bad[0, 0] = float("nan")
    with pytest.raises(MR2InputError, match="features contain 1 non-finite"):
        loss_fn(torch.randn(16, 3), bad, y)


def test_statistics_overflow_is_a_user_error_of_the_cli():
    from mr2.checks import StatisticsOverflowError
    from mr2.cli.errors import user_errors

    assert issubclass(StatisticsOverflowError, user_errors())


def test_row_wise_update_matches_the_dense_moving_average_oracle_with_absent_classes():
    # Many classes, few present per batch: absent classes keep their values bit for bit.
    g = torch.Generator().manual_seed(5)
    stats = ClassFeatureStatistics(50, feature_dim=7, momentum=0.8)
    batches = []
    for _ in range(6):
        y = torch.randint(0, 50, (20,), generator=g)
        batches.append((torch.randn(20, 7, generator=g) + y.unsqueeze(1) * 0.1, y))
    for i, (x, y) in enumerate(batches):
        before = stats.feature_sum.clone()
        stats.update(x, y)
        absent = torch.ones(50, dtype=torch.bool)
        absent[y] = False
        assert torch.equal(stats.feature_sum[absent], before[absent]), i
    means, msq, spread = oracles.pooled_statistics(batches, 50, 0.8)
    torch.testing.assert_close(stats.means().double(), torch.tensor(means).double(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(stats.mean_sq_norm().double(), torch.tensor(msq).double(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(stats.spread().double(), torch.tensor(spread).double(), rtol=1e-4, atol=1e-4)
