"""Smoke test of benchmarks/bench_mr2_loss.py: quick mode at a tiny size. No timing assertions."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

from helpers import load_script

BENCH_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_mr2_loss.py"
TINY = (16, 5, 8)  # B, K, d


@pytest.fixture(scope="module")
def bench():
    name = "bench_mr2_loss_under_test"
    try:
        yield load_script(BENCH_PATH, name)
    finally:
        sys.modules.pop(name, None)


def test_quick_run_returns_finite_timings_and_equal_losses(bench):
    (result,) = bench.run([bench.Size(*TINY)], quick=True)
    assert set(result.median_ms) == set(bench.IMPLEMENTATIONS)
    assert all(math.isfinite(ms) and ms > 0 for ms in result.median_ms.values())
    assert all(n == 1 for n in result.repeats.values())
    assert result.released_rel_diff <= 1e-4
    assert math.isfinite(result.ratio("mr2 released")) and math.isfinite(result.ratio("mr2 paper"))


def test_loop_baseline_and_released_variant_compute_the_same_loss_and_gradients(bench):
    size = bench.Size(*TINY)
    losses = bench.build_losses(size.classes)
    loop, released = losses["loop"], losses["mr2 released"]
    cover = torch.arange(size.batch) % size.classes  # every class seen before comparing (s_bar over K)
    prime = (torch.randn(size.batch, size.classes), torch.randn(size.batch, size.dim).relu(), cover)
    loop(*prime)
    released(*prime)
    for logits, features, target in bench.make_batches(size, 3, seed=5):
        want = loop(logits, features, target)
        want_grads = torch.autograd.grad(want, (logits, features))
        got = released(logits, features, target)
        got_grads = torch.autograd.grad(got, (logits, features))
        assert got.item() == pytest.approx(want.item(), rel=1e-4)
        for g, w in zip(got_grads, want_grads):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(released.logit_temperatures(), loop.temperatures(), rtol=1e-4, atol=1e-6)


def test_main_quick_prints_the_table(bench, capsys):
    assert bench.main(["--quick", "--sizes", "16x5x8"]) == 0
    out = capsys.readouterr().out
    assert "| B=16 K=5 d=8 |" in out
    assert "torch " in out and "threads" in out


def test_profile_lists_the_steps_ops_per_step(bench):
    size = bench.Size.parse("32x40x16")
    rows = bench.profile_ops(size, steps=3, top=50)
    names = [name for name, _, _ in rows]
    # The step's own custom ops are there, each called once per step; sorted by self time.
    calls = {name: count for name, count, _ in rows}
    # (the logit term is the built-in cross-entropy; 40 classes in 32 samples: few pairs, the pair list)
    assert calls.get("_PairListLogSumExp") == 1.0
    times = [ms for _, _, ms in rows]
    assert times == sorted(times, reverse=True) and len(names) == len(set(names))
    text = bench.format_profile(size, rows[:3])
    assert text.count("\n") == 2 + 3 and "| op | calls / step | self ms / step |" in text


def test_breakdown_reads_the_losss_profiler_labels_and_they_nest_in_the_step(bench):
    parts = bench.breakdown(bench.Size.parse("32x5x8"), repeats=3)
    assert list(parts) == [
        "mr2.statistics_update", "mr2.temperatures", "mr2.logit_loss", "mr2.representation_margin",
        "backward", "step",
    ]
    assert all(0 < low <= median for median, low in parts.values())
    # The labelled ranges are disjoint parts of each step, so their minima add up to at most the
    # fastest step (sum of minima <= the parts of that step <= that step).
    assert sum(parts[name][1] for name in list(parts)[:-1]) <= parts["step"][1] * (1 + 1e-9)
    text = bench.format_breakdown(bench.Size.parse("32x5x8"), parts)
    assert "| mr2.statistics_update | mr2.temperatures |" in text


@pytest.mark.parametrize("target", [[0, 1, 0, 2, 1, 0], [0, 0, 0, 0, 1, 1]])  # gathered pairs, Gram loop
def test_floor_with_pairs_adds_the_same_class_pair_distances_and_their_gradient(bench, target):
    """``floor + pairs`` = the floor plus the same-class squared distances (float64 oracle), with
    their gradient reaching the features; with few pairs (4 unordered in 6 samples) from the gathered
    differences, with many (7) from the classes' Gram matrices."""
    target = torch.tensor(target)
    features = torch.randn(6, 3, dtype=torch.float64, requires_grad=True)
    logits = torch.randn(6, 3, dtype=torch.float64)
    got = bench.FloorPairsLoss(3)(logits, features, target)
    x = features.detach()
    pairs = sum(float(((x[i] - x[j]) ** 2).sum()) for i in range(6) for j in range(6) if target[i] == target[j])
    want = float(torch.nn.functional.cross_entropy(logits, target)) + 1e-12 * pairs
    assert got.item() == pytest.approx(want, rel=1e-12)
    (grad,) = torch.autograd.grad(got, features)
    # d/dx_i of 1e-12 sum over ordered pairs ||x_i - x_j||^2 = 1e-12 sum_j 4 (x_i - x_j), same class j.
    same = (target.unsqueeze(1) == target.unsqueeze(0)).to(x.dtype)
    want_grad = 1e-12 * 4.0 * (same.sum(1, keepdim=True) * x - same @ x)
    torch.testing.assert_close(grad, want_grad, rtol=1e-10, atol=1e-24)
    assert bool(grad.abs().sum() > 0)


def test_linear_probe_benchmark_quick_prints_the_ratios(capsys):
    name = "bench_linear_probe_under_test"
    try:
        probe = load_script(BENCH_PATH.parent / "bench_linear_probe.py", name)
        times = probe.run_case(5, batch=16, dim=8, warmup=1, repeats=2)
        assert set(times) == set(probe.VARIANTS) and all(len(v) == 2 and min(v) > 0 for v in times.values())
        assert probe.main(["--quick", "--classes", "5", "--batch", "16", "--dim", "8"]) == 0
        # The floor's loss is the cross-entropy of the logits over fixed per-class temperatures.
        logits, target = torch.randn(6, 5, dtype=torch.float64), torch.tensor([0, 1, 2, 3, 4, 4])
        got = probe._floor_loss(5)(logits, torch.randn(6, 3, dtype=torch.float64), target)
        temperatures = [0.5 + 0.25 * int(k) for k in target]
        want = sum(
            -torch.log_softmax(logits[i] / temperatures[i], 0)[target[i]] for i in range(6)
        ) / 6
        assert got.item() == pytest.approx(want.item(), rel=1e-6)
        # "mr2" is the default (the compiled step where numba is installed), "mr2 eager" without it.
        assert probe._loss_for("mr2", 5)[0].statistics.fused_step is True
        assert probe._loss_for("mr2 eager", 5)[0].statistics.fused_step is False
    finally:
        sys.modules.pop(name, None)
    out = capsys.readouterr().out
    assert "| 16 | 5 | 8 |" in out and "mr2 / ce (median)" in out and "mr2 / floor (median / min)" in out
    assert "mr2 eager / ce (median / min)" in out and "compiled steady step (numba): " in out


def test_the_timed_steps_are_the_steady_state_every_class_seen(bench):
    """The timed losses are primed with batches that hold every class (as after a training epoch):
    K = 40 over 4 random batches of 16 leaves classes unseen, so without the priming the default's
    step would time the warm-up state (logit temperatures all 1, the seen masks; issue 47)."""
    size = bench.Size.parse("16x40x8")
    batches = bench.make_batches(size, bench.BATCH_POOL, seed=0)
    assert torch.unique(torch.cat([t for _, _, t in batches])).numel() < size.classes
    losses = bench.build_losses(size.classes)
    for loss_fn in losses.values():
        bench.prime(loss_fn, size, seed=0)
    default = losses["mr2 default"]
    assert bool(default.statistics.samples_seen.min() >= 1)
    bench.training_step(default, batches[0])
    assert default.statistics.all_seen_known()
    assert not torch.allclose(default.logit_temperatures(), torch.ones(size.classes))
    # Every priming batch is the size of a timed batch, and their classes cover 0..K-1.
    primers = bench.priming_batches(size, seed=0)
    assert all(t.shape == (size.batch,) for _, _, t in primers)
    assert torch.equal(torch.unique(torch.cat([t for _, _, t in primers])), torch.arange(size.classes))
