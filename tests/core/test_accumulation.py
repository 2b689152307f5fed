"""Gradient accumulation and mixed precision: what the class statistics do with k micro-batches per
optimiser step (default vs deferred) and under autocast bf16/fp16 on CPU."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from core.oracles import pooled_statistics
from helpers import torchrun
from mr2 import MR2Loss
from mr2.checks import MR2InputError
from mr2.statistics.class_features import DEFER_NEEDS_POOLED_L2, ClassFeatureStatistics

NUM_CLASSES, DIM, MOMENTUM = 5, 6, 0.7


def optimiser_steps(steps: int = 4, batch: int = 12, seed: int = 1) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Large batches; class 4 is absent from the first one (first observation inside a later batch)."""
    generator = torch.Generator().manual_seed(seed)
    batches = []
    for step in range(steps):
        target = torch.randint(0, NUM_CLASSES - (1 if step == 0 else 0), (batch,), generator=generator)
        features = torch.randn(batch, DIM, generator=generator) * 2 + target[:, None].float()
        batches.append((features, target))
    return batches


def micro(batch: tuple[torch.Tensor, torch.Tensor], k: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return list(zip(batch[0].chunk(k), batch[1].chunk(k), strict=True))


def assert_matches_oracle(stats: ClassFeatureStatistics, batches, momentum: float = MOMENTUM) -> None:
    means, msq, spread = pooled_statistics(batches, NUM_CLASSES, momentum)
    torch.testing.assert_close(stats.means().double(), torch.tensor(means, dtype=torch.float64),
                               rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(stats.mean_sq_norm().double(), torch.tensor(msq, dtype=torch.float64),
                               rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(stats.spread().double(), torch.tensor(spread, dtype=torch.float64),
                               rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("k", [2, 3, 4])
def test_accumulate_and_apply_equals_the_large_batch_oracle(k):
    batches = optimiser_steps()
    stats = ClassFeatureStatistics(NUM_CLASSES, DIM, momentum=MOMENTUM)
    for batch in batches:
        with stats.accumulate():
            for x, y in micro(batch, k):
                stats.update(x, y)
    assert_matches_oracle(stats, batches)
    assert stats.samples_seen.sum().item() == sum(len(y) for _, y in batches)


def test_statistics_stay_at_the_last_applied_step_while_accumulating():
    batches = optimiser_steps()
    stats = ClassFeatureStatistics(NUM_CLASSES, DIM, momentum=MOMENTUM)
    stats.update(*batches[0])
    before = {name: value.clone() for name, value in stats.state_dict().items()}
    stats.deferred = True
    for x, y in micro(batches[1], 3):
        stats.update(x, y)
        for name, value in stats.state_dict().items():
            assert torch.equal(value, before[name]), name
    assert stats.pending_samples == len(batches[1][1])
    stats.apply_accumulated()
    assert stats.pending_samples == 0
    assert_matches_oracle(stats, batches[:2])
    stats.apply_accumulated()  # nothing pending: no change
    assert_matches_oracle(stats, batches[:2])


def test_default_updates_once_per_micro_batch_and_differs_from_the_large_batch():
    # Without deferral each micro-batch is one moving-average step: the statistics of a run WITHOUT
    # accumulation at batch B / k (the oracle over the micro-batches), not those of batch B.
    batches, k = optimiser_steps(), 3
    stats = ClassFeatureStatistics(NUM_CLASSES, DIM, momentum=MOMENTUM)
    micro_batches = [part for batch in batches for part in micro(batch, k)]
    for x, y in micro_batches:
        stats.update(x, y)
    assert_matches_oracle(stats, micro_batches)
    large_means, _, _ = pooled_statistics(batches, NUM_CLASSES, MOMENTUM)
    gap = (stats.means().double() - torch.tensor(large_means, dtype=torch.float64)).abs().max()
    assert gap > 1e-2


def test_mr2_loss_accumulates_through_its_statistics():
    batches, k = optimiser_steps(), 2
    large = MR2Loss(NUM_CLASSES, momentum=MOMENTUM, feature_dim=DIM)
    accumulated = MR2Loss(NUM_CLASSES, momentum=MOMENTUM, feature_dim=DIM)
    for features, target in batches:
        logits = torch.randn(len(target), NUM_CLASSES)
        large(logits, features, target)
        with accumulated.statistics.accumulate():
            for (x, y), z in zip(micro((features, target), k), logits.chunk(k), strict=True):
                temperatures = accumulated.logit_temperatures()
                accumulated(z, x, y)
                # The loss of every micro-batch uses the statistics of the last optimiser step.
                assert torch.equal(accumulated.parts.logit_margins, temperatures)
    for name, value in large.state_dict().items():
        torch.testing.assert_close(accumulated.state_dict()[name], value, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(accumulated.logit_temperatures(), large.logit_temperatures())


def test_buffers_are_updated_in_place():
    # DDP's buffer broadcast keeps references to the module's buffers (pytorch issue 63916): an
    # update that rebinds a buffer would leave DDP syncing a stale tensor.
    loss = MR2Loss(NUM_CLASSES, momentum=MOMENTUM, feature_dim=DIM, lambda_rep=0.5)
    buffers = dict(loss.named_buffers())
    pointers = {name: value.data_ptr() for name, value in buffers.items()}
    batches = optimiser_steps()
    loss(torch.randn(12, NUM_CLASSES), *batches[0])
    with loss.statistics.accumulate():
        for x, y in micro(batches[1], 3):
            loss(torch.randn(len(y), NUM_CLASSES), x, y)
    loss.statistics.moments()
    for name, value in loss.named_buffers():
        assert value is buffers[name] and value.data_ptr() == pointers[name], name
    assert loss.statistics.samples_seen.sum() == 24


def test_an_exception_inside_accumulate_drops_the_pending_sums():
    stats = ClassFeatureStatistics(NUM_CLASSES, DIM)
    with pytest.raises(RuntimeError, match="stop"), stats.accumulate():
        stats.update(*optimiser_steps()[0])
        raise RuntimeError("stop")
    assert stats.pending_samples == 0 and not stats.deferred
    assert stats.samples_seen.sum() == 0


def test_non_finite_micro_batch_is_refused_and_not_added():
    stats = ClassFeatureStatistics(NUM_CLASSES, DIM)
    x, y = optimiser_steps()[0]
    with stats.accumulate():
        stats.update(x[:6], y[:6])
        bad = x[6:].clone()
        bad[0, 0] = 1e30  # finite, but its square overflows float32
        with pytest.raises(MR2InputError):
            stats.update(bad, y[6:])
    assert stats.samples_seen.sum().item() == 6


def test_without_value_checks_a_non_finite_micro_batch_is_dropped_without_a_host_sync():
    stats = ClassFeatureStatistics(NUM_CLASSES, DIM, momentum=MOMENTUM, check_values=False)
    reference = ClassFeatureStatistics(NUM_CLASSES, DIM, momentum=MOMENTUM)
    x, y = optimiser_steps()[0]
    bad = x[6:].clone()
    bad[0, 0] = 1e30
    with stats.accumulate():
        stats.update(x[:6], y[:6])
        stats.update(bad, y[6:])
    reference.update(x[:6], y[:6])
    for name, value in reference.state_dict().items():
        torch.testing.assert_close(stats.state_dict()[name], value, msg=name)


@pytest.mark.parametrize("options", [{"estimator": "batch"}, {"norm_p": 5.0}])
def test_deferral_needs_the_pooled_l2_statistics(options):
    stats = ClassFeatureStatistics(NUM_CLASSES, DIM, **options)
    expected = DEFER_NEEDS_POOLED_L2.format(estimator=stats.estimator, norm_p=stats.norm_p)
    with pytest.raises(MR2InputError) as error, stats.accumulate():
        pass
    assert str(error.value) == expected
    stats.deferred = True
    with pytest.raises(MR2InputError):
        stats.update(*optimiser_steps()[0])
    assert stats.samples_seen.sum() == 0


def test_eval_mode_adds_nothing():
    stats = ClassFeatureStatistics(NUM_CLASSES, DIM).eval()
    with stats.accumulate():
        stats.update(*optimiser_steps()[0])
    assert stats.pending_samples == 0 and stats.samples_seen.sum() == 0


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("deferred", [False, True])
def test_statistics_stay_float32_under_cpu_autocast(dtype, deferred):
    # Features produced under autocast are low precision; the statistics take them as float32 values
    # and do their arithmetic in float32: the same buffers as an update with the features upcast.
    layer = torch.nn.Linear(DIM, DIM)
    batches = optimiser_steps()
    under_autocast = MR2Loss(NUM_CLASSES, momentum=MOMENTUM, feature_dim=DIM)
    reference = ClassFeatureStatistics(NUM_CLASSES, DIM, momentum=MOMENTUM)
    for x, y in batches:
        with torch.autocast("cpu", dtype=dtype):
            features = layer(x)
            logits = features[:, :NUM_CLASSES]
            assert features.dtype == dtype
            if deferred:
                with under_autocast.statistics.accumulate():
                    for part in range(2):
                        under_autocast(logits.chunk(2)[part], features.chunk(2)[part], y.chunk(2)[part])
            else:
                under_autocast(logits, features, y)
        reference.update(features.float(), y)
    for name, value in under_autocast.statistics.state_dict().items():
        expected = reference.state_dict()[name]
        assert value.dtype == expected.dtype, name
        if name != "samples_seen":
            assert value.dtype == torch.float32, name
        torch.testing.assert_close(value, expected, rtol=1e-6, atol=1e-5, msg=name)
    assert under_autocast.logit_temperatures().dtype == torch.float32


@pytest.mark.distributed
@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="gloo unavailable")
def test_two_ranks_accumulating_equal_one_process_with_the_global_batches(tmp_path):
    worker = Path(__file__).with_name("ddp_accumulation_worker.py")
    torchrun(worker, str(tmp_path))
    sys.path.insert(0, str(worker.parent))
    import ddp_accumulation_worker as setup

    global_batches = [
        (torch.cat([x for rank in step for x, _ in rank]), torch.cat([y for rank in step for _, y in rank]))
        for step in setup.global_steps()
    ]
    single = ClassFeatureStatistics(setup.NUM_CLASSES, setup.DIM, momentum=setup.MOMENTUM)
    for x, y in global_batches:
        single.update(x, y)
    ranks = [torch.load(tmp_path / f"rank{rank}.pt", weights_only=True) for rank in range(2)]
    for name, value in single.state_dict().items():
        assert torch.equal(ranks[1]["state"][name], ranks[0]["state"][name]), name
        torch.testing.assert_close(ranks[0]["state"][name], value, rtol=1e-5, atol=1e-5, msg=name)
    assert [r["idle_all_reduces"] for r in ranks] == [0, 0]
