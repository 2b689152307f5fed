"""Center loss, SupCon and HBR: float64 oracles, reductions, invariances, options, the seam, resume."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
import torch.nn.functional as F

from helpers import base_config, classification_batch, write_spread_npz
from methods import representation_oracles as oracle
from methods.baseline_helpers import FEATURE_DIM, NUM_CLASSES, make_context
from mr2.config import config_from_dict
from mr2.engine import TrainingSession
from mr2.functional.representation_baselines import (
    center_distances,
    center_update,
    hardness_resampling_counts,
    hbr_class_sample_counts,
    supervised_contrastive_loss,
)
from mr2.methods import center_loss as center_module
from mr2.methods import hbr as hbr_module
from mr2.methods import supcon as supcon_module
from mr2.methods.registry import MethodConfigError, build_method
from mr2.methods.stages import BAD_STAGE1_VALUE, NO_INDEX, STAGE2_TOO_EARLY

OPTIONS = {"center_loss": {"lambda_center": 0.5}, "supcon": {}, "hbr": {"stage1_epochs": 2}}
EPOCHS = 4
#: Standard normal features and logits' draws, random class ids (tests/helpers.py).
GAUSSIAN = {"balanced": False, "spread_by_class": False}


# ----------------------------------------------------------------------------------- center loss


@pytest.mark.parametrize("rule", ["paper", "reference"])
def test_center_loss_and_update_match_the_loop_oracle(rule):
    logits, features, target = classification_batch(10, NUM_CLASSES, FEATURE_DIM, **GAUSSIAN)
    target[-1] = 0
    target[target == 3] = 2  # class 3 absent: its centre must stay
    method = build_method("center_loss", NUM_CLASSES, lambda_center=0.7, alpha=0.3, update=rule)
    method.setup(make_context(10, torch.ones(NUM_CLASSES)))
    method.centers = method.centers.double()
    before = method.centers.clone()
    loss = method(logits, features, target)
    expected = oracle.center_loss_oracle(logits, features, before, target, 0.7)
    assert loss.dtype == torch.float64 and loss.item() == pytest.approx(expected, rel=1e-12)
    torch.testing.assert_close(method.centers, oracle.center_update_oracle(before, features, target, 0.3, rule))
    assert torch.equal(method.centers[3], before[3])
    method.eval()  # evaluation never moves the centres
    method(logits, features, target)
    torch.testing.assert_close(method.centers, oracle.center_update_oracle(before, features, target, 0.3, rule))


def test_center_loss_gradient_reaches_features_only_and_lambda_zero_is_cross_entropy():
    logits, features, target = classification_batch(10, NUM_CLASSES, FEATURE_DIM, **GAUSSIAN)
    features.requires_grad_()
    method = build_method("center_loss", NUM_CLASSES, lambda_center=2.0)
    method.setup(make_context(10, torch.ones(NUM_CLASSES)))
    centers = method.centers.double()
    method.centers = centers.clone()
    method(logits, features, target).backward()
    expected = 2.0 / 2 * 2 * (features.detach() - centers[target]) / len(target)
    torch.testing.assert_close(features.grad, expected)
    assert list(method.parameters()) == []
    zero = build_method("center_loss", NUM_CLASSES, lambda_center=0.0)
    zero.setup(make_context(10, torch.ones(NUM_CLASSES)))
    torch.testing.assert_close(zero(logits, features, target), F.cross_entropy(logits, target))


def test_center_update_two_half_batches_equal_sums_and_permuting_classes_permutes_centres():
    _, features, target = classification_batch(12, NUM_CLASSES, FEATURE_DIM, **GAUSSIAN)
    centers = torch.randn(NUM_CLASSES, FEATURE_DIM, dtype=torch.float64)
    counts = torch.bincount(target, minlength=NUM_CLASSES).double()
    sums = torch.zeros(NUM_CLASSES, FEATURE_DIM, dtype=torch.float64).index_add_(0, target, features)
    new = center_update(centers, counts, sums, 0.5)
    perm = torch.tensor([2, 0, 3, 1])  # class k -> perm[k]
    permuted = center_update(centers[perm.argsort()], counts[perm.argsort()], sums[perm.argsort()], 0.5)
    torch.testing.assert_close(permuted, new[perm.argsort()])
    torch.testing.assert_close(center_distances(features, centers, target),
                               ((features - centers[target]) ** 2).sum(1))


# ---------------------------------------------------------------------------------------- SupCon


@pytest.mark.parametrize("temperature", [0.1, 0.5])
def test_supcon_matches_the_reference_formula_loop(temperature):
    _, features, target = classification_batch(9, NUM_CLASSES, 6, seed=3, **GAUSSIAN)
    target[4] = 3
    target[target == 3] = 3
    v = F.normalize(features, dim=1)
    got = supervised_contrastive_loss(v, target, temperature=temperature, base_temperature=0.07)
    expected = oracle.supcon_oracle(v, target, temperature, 0.07)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, torch.tensor(expected, dtype=torch.float64), rtol=1e-12, atol=1e-12)


def test_supcon_anchors_against_a_larger_contrast_set_equal_the_full_batch_rows():
    _, features, target = classification_batch(10, NUM_CLASSES, 6, seed=4, **GAUSSIAN)
    v = F.normalize(features, dim=1)
    full = supervised_contrastive_loss(v, target)
    part = supervised_contrastive_loss(v[4:7], target[4:7], v, target, anchor_offset=4)
    torch.testing.assert_close(part, full[4:7])
    perm = torch.randperm(10)
    torch.testing.assert_close(supervised_contrastive_loss(v[perm], target[perm]), full[perm])
    relabel = torch.tensor([3, 1, 0, 2])[target]  # renaming classes changes nothing
    torch.testing.assert_close(supervised_contrastive_loss(v, relabel), full)


def test_supcon_method_is_ce_plus_weighted_supcon_on_the_normalised_projection():
    logits, features, target = classification_batch(10, NUM_CLASSES, FEATURE_DIM, **GAUSSIAN)
    method = build_method("supcon", NUM_CLASSES, weight=0.5, head="linear", projection_dim=3)
    method.setup(make_context(10, torch.ones(NUM_CLASSES)))
    method.double()
    loss = method(logits, features, target)
    v = F.normalize(method.head(features), dim=1).detach()
    expected = F.cross_entropy(logits, target).detach() + 0.5 * torch.tensor(
        oracle.supcon_oracle(v, target, 0.1, 0.07), dtype=torch.float64
    ).mean()
    torch.testing.assert_close(loss.detach(), expected)
    assert {n for n, _ in method.named_parameters()} == {"head.weight", "head.bias"}
    mlp = build_method("supcon", NUM_CLASSES)
    mlp.setup(make_context(10, torch.ones(NUM_CLASSES)))
    again = build_method("supcon", NUM_CLASSES)
    again.setup(make_context(10, torch.ones(NUM_CLASSES)))
    for a, b in zip(mlp.state_dict().values(), again.state_dict().values(), strict=True):
        assert torch.equal(a, b)  # the same head on every rank and every resume


# ------------------------------------------------------------------------------------------- HBR


@pytest.mark.parametrize("alpha", [1.0, 2.0, 3.5])
@pytest.mark.parametrize("shift", [0.0, -2.0])
def test_hbr_class_counts_match_the_reference_allocation(alpha, shift):
    hardness = torch.tensor([1.5, 0.2, 3.0, 0.9, 2.2], dtype=torch.float64) + shift
    got = hbr_class_sample_counts(hardness, 1000, alpha)
    assert got.tolist() == oracle.hbr_counts_oracle(hardness, 1000, alpha)
    assert int(got.argmax()) == 1  # the smallest AUM: the hardest class gets the most samples


def test_hbr_reference_shift_gives_a_negative_mean_aum_class_nearly_everything():
    """The reference's offset (-min + 1e-4) makes the hardest class's inverse hardness 1e4: measured
    on the Fashion-MNIST protocol after one epoch (Shirt at mean AUM -0.07, docs/methods/hbr.md)."""
    counts = hbr_class_sample_counts(torch.tensor([1.32, 6.83, 0.91, 2.47, 0.79, 4.27, -0.07, 3.08, 4.58, 4.04]),
                                     54000)
    assert counts[6] > 53900 and counts.tolist() == oracle.hbr_counts_oracle(
        torch.tensor([1.32, 6.83, 0.91, 2.47, 0.79, 4.27, -0.07, 3.08, 4.58, 4.04]), 54000, 1.0)
    loss_based = hbr_class_sample_counts(torch.tensor([0.3, 0.1, 0.6]), 1000, high_is_hard=True)
    assert loss_based.tolist() == [300, 100, 600]  # high loss = hard: proportional, no shift


def test_hbr_with_a_class_absent_from_the_training_set():
    labels = torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])  # class 3 of K = 4 has no sample
    method = build_method("hbr", NUM_CLASSES, stage1_epochs=1)
    method.setup(make_context(8, torch.bincount(labels, minlength=NUM_CLASSES), epochs=2))
    method.train()
    method.on_epoch_start(0)
    method.on_batch(torch.zeros(8, 1), labels, torch.arange(8))
    method(torch.randn(8, NUM_CLASSES) + 3 * F.one_hot(labels, NUM_CLASSES), None, labels)
    method.on_epoch_end(0)
    counts = method.class_statistics()["resampled_count"]
    assert counts[3] == 0 and int(counts.sum()) >= 6 and bool((counts[:3] >= 1).all())
    assert torch.equal(hardness_resampling_counts(torch.zeros(2), torch.tensor([0, 0]), torch.tensor([1, 5]),
                                                  torch.Generator()), torch.tensor([1, 0]))


def test_hbr_warns_when_one_class_takes_most_of_the_resampled_set():
    labels = torch.arange(40) % NUM_CLASSES
    method = build_method("hbr", NUM_CLASSES, stage1_epochs=1)
    method.setup(make_context(40, torch.bincount(labels, minlength=NUM_CLASSES), epochs=2))
    method.train()
    method.on_epoch_start(0)
    method.on_batch(torch.zeros(40, 1), labels, torch.arange(40))
    logits = 4.0 * F.one_hot(labels, NUM_CLASSES).float()
    logits[labels == 2] = -4.0 * F.one_hot(labels[labels == 2], NUM_CLASSES).float()  # class 2: AUM < 0
    method(logits, None, labels)
    with pytest.warns(RuntimeWarning, match=r"hbr: class 2 takes 9\d\.\d% of the resampled training set"):
        method.on_epoch_end(0)
    assert int(method.class_statistics()["resampled_count"].argmax()) == 2
    # Balanced hardness: no warning.
    method = build_method("hbr", NUM_CLASSES, stage1_epochs=1)
    method.setup(make_context(40, torch.bincount(labels, minlength=NUM_CLASSES), epochs=2))
    method.train()
    method.on_epoch_start(0)
    method.on_batch(torch.zeros(40, 1), labels, torch.arange(40))
    method(4.0 * F.one_hot(labels, NUM_CLASSES).float(), None, labels)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        method.on_epoch_end(0)


def test_hbr_resampling_keeps_the_hardest_and_draws_the_rest_within_the_class():
    g = torch.Generator().manual_seed(5)
    target = torch.randint(0, 3, (40,), generator=g)
    hardness = torch.randn(40, generator=g, dtype=torch.float64)
    hardness[3] = hardness[7]  # a tie: resolved by index
    wanted = torch.tensor([5, 20, 9])
    counts = hardness_resampling_counts(hardness, target, wanted, torch.Generator().manual_seed(0))
    keep, extra = oracle.hbr_resample_oracle(hardness, target, wanted)
    have = torch.bincount(target, minlength=3)
    per_class = torch.zeros(3, dtype=torch.long).index_add_(0, target, counts)
    assert per_class.tolist() == [max(w, h) if w > h else w for w, h in zip(wanted.tolist(), have.tolist())]
    assert (counts >= torch.tensor(keep)).all() and ((counts > 0) <= (torch.tensor(keep) > 0)).all()
    for k in range(3):
        members = target == k
        assert int((counts - torch.tensor(keep))[members].sum()) == extra[k]
    none = hardness_resampling_counts(hardness, target, wanted, torch.Generator(), undersample=False,
                                      oversample=False)
    assert torch.equal(none, torch.ones(40, dtype=torch.long))


@pytest.mark.parametrize("estimator", ["aum", "loss"])
def test_hbr_measures_hardness_in_stage_one_and_resamples_after_it(tmp_path, estimator):
    # Through the real engine (Trainer, epoch loop): the logits of every training batch and the
    # indices the engine hands to on_batch are recorded, and the oracle recomputes each sample's score.
    npz = write_spread_npz(tmp_path / "tiny.npz", dim=4, train_per_class=12, test_per_class=5)
    config = config_from_dict(base_config(
        npz, tmp_path, optim={"epochs": EPOCHS}, data={"batch_size": 12},
        model={"name": "mlp", "options": {"hidden_dims": [8, 5]}},
        method={"name": "hbr", "options": {"stage1_epochs": 2, "estimator": estimator}},
    ))
    session = TrainingSession(config, quiet=True)
    method, n = session.method, len(session.data.train)
    seen, indices = [], []
    def record(module, args, output):
        if module.training:  # the training batches, not the validation passes
            seen.append(output[0].detach())

    session.model.register_forward_hook(record)
    on_batch = method.on_batch
    def spy(inputs, target, index):
        indices.append(index.clone())
        on_batch(inputs, target, index)

    method.on_batch = spy
    assert session.fit(stop_after_epoch=2) is None
    assert session.trainer.reset_epoch == 2 and bool(method.frozen)
    target_all = session.data.train.targets
    expected = torch.zeros(n, dtype=torch.float64)
    for logits, batch in zip(seen, indices, strict=True):  # the oracle: one sample at a time
        for row, i in enumerate(batch.tolist()):
            z, y = logits[row].double().tolist(), int(target_all[i])
            if estimator == "aum":
                expected[i] += z[y] - max(v for k, v in enumerate(z) if k != y)
            else:  # cross-entropy, one sample at a time
                top = max(z)
                expected[i] += top + math.log(sum(math.exp(v - top) for v in z)) - z[y]
    assert len(seen) == 2 * math.ceil(n / 12)
    torch.testing.assert_close(method.aum_sum, expected)
    assert torch.equal(method.aum_count, torch.full((n,), 2))
    assert torch.equal(method.labels, target_all)
    per_class = torch.bincount(target_all, minlength=NUM_CLASSES).double()
    class_hardness = torch.zeros(NUM_CLASSES, dtype=torch.float64).index_add_(0, target_all, expected / 2) / per_class
    torch.testing.assert_close(method.class_hardness, class_hardness)
    wanted = hbr_class_sample_counts(class_hardness, n, high_is_hard=estimator == "loss")
    assert method.class_statistics()["resampled_count"].tolist() == wanted.tolist()
    epoch_indices = method.epoch_indices(2, torch.Generator().manual_seed(0))
    assert torch.equal(torch.bincount(epoch_indices, minlength=n), method.multiplicity)


# ---------------------------------------------------------------------------------------- options


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        ("center_loss", {"lambda_center": -1}, center_module.BAD_LAMBDA.format(value=-1)),
        ("center_loss", {"alpha": 0}, center_module.BAD_ALPHA.format(value=0)),
        ("center_loss", {"update": "sgd"}, center_module.BAD_UPDATE.format(value="sgd")),
        ("supcon", {"temperature": 0}, supcon_module.BAD_POSITIVE.format(name="temperature", value=0)),
        ("supcon", {"head": "deep"}, supcon_module.BAD_HEAD.format(value="deep")),
        ("supcon", {"pairs": "all"}, supcon_module.BAD_PAIRS.format(value="all")),
        ("supcon", {"projection_dim": 0}, supcon_module.BAD_DIM.format(value=0)),
        ("supcon", {"weight": -0.1}, supcon_module.BAD_WEIGHT.format(value=-0.1)),
        ("hbr", {"alpha": 0.5}, hbr_module.BAD_ALPHA.format(value=0.5)),
        ("hbr", {"oversampling": "SMOTE"}, hbr_module.BAD_OVERSAMPLING.format(value="SMOTE")),
        ("hbr", {"undersampling": "hard"}, hbr_module.BAD_UNDERSAMPLING.format(value="hard")),
        ("hbr", {"stage1_epochs": 0}, BAD_STAGE1_VALUE.format(method="hbr", value=0)),
        ("hbr", {"estimator": "forgetting"}, hbr_module.BAD_ESTIMATOR.format(value="forgetting")),
    ],
)
def test_bad_options_name_the_option_and_the_valid_values(name, options, message):
    with pytest.raises(MethodConfigError) as error:
        build_method(name, NUM_CLASSES, **options)
    assert str(error.value) == message


def test_unknown_option_lists_the_valid_ones():
    with pytest.raises(MethodConfigError, match=r"unknown option\(s\) \['temp'\] for method 'supcon'"):
        build_method("supcon", NUM_CLASSES, temp=0.1)


def test_hbr_stage_one_must_leave_a_second_stage():
    method = build_method("hbr", NUM_CLASSES, stage1_epochs=4)
    with pytest.raises(MethodConfigError, match="smaller than the number of epochs"):
        method.setup(make_context(10, torch.ones(NUM_CLASSES), epochs=4))


@pytest.mark.parametrize(
    ("name", "stage", "what"),
    [("jtt", "the recording epoch", "the error set"), ("hbr", "the first stage", "the hardness")],
)
def test_two_stage_methods_refuse_a_batch_without_indices_and_stage_two_before_stage_one(name, stage, what):
    labels = torch.arange(8) % NUM_CLASSES
    method = build_method(name, NUM_CLASSES, stage1_epochs=1)
    method.setup(make_context(8, torch.bincount(labels, minlength=NUM_CLASSES), epochs=2))
    method.train()
    method.on_epoch_start(0)
    label = name.upper()
    with pytest.raises(ValueError) as raised:
        method(torch.randn(8, NUM_CLASSES), None, labels)  # no on_batch before it
    assert str(raised.value) == NO_INDEX.format(method=label, stage=stage)
    assert not method.wants_model_reset()
    message = STAGE2_TOO_EARLY.format(method=label, epoch=1, what=what, last=0)
    with pytest.raises(ValueError) as early:
        method.epoch_indices(1, torch.Generator())
    assert str(early.value) == message
    assert method.epoch_indices(0, torch.Generator()) is None  # stage 1: the engine's own order
