"""JTT: error-set recording, upsampling counts, the empty-set error, reset request, state."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from methods import baseline_oracles as oracle
from methods.baseline_helpers import make_context
from mr2.checks import MR2InputError
from mr2.methods.jtt import EMPTY_ERROR_SET, JTT, EmptyErrorSetError

K, N, EPOCHS = 3, 12, 5


def make(predictor=None, epochs: int = EPOCHS, **options) -> JTT:
    method = JTT(K, **options)
    method.setup(make_context(N, torch.full((K,), N // K), epochs=epochs, predict_train_set=predictor))
    return method


def labels() -> torch.Tensor:
    return torch.arange(K).repeat(N // K)


def run_epoch(method: JTT, epoch: int, predictions: torch.Tensor) -> list[torch.Tensor]:
    """One epoch in batches of 4; the model 'predicts' ``predictions`` (one-hot logits)."""
    method.train()
    method.on_epoch_start(epoch)
    losses = []
    for index in torch.randperm(N, generator=torch.Generator().manual_seed(epoch)).split(4):
        logits = 5 * F.one_hot(predictions[index], K).double()
        method.on_batch(torch.zeros(len(index), 1), labels()[index], index)
        losses.append(method(logits, None, labels()[index]))
    method.on_epoch_end(epoch)
    return losses


def wrong_at(indices: list[int]) -> torch.Tensor:
    predictions = labels().clone()
    predictions[indices] = (predictions[indices] + 1) % K
    return predictions


def test_records_train_mode_errors_of_the_last_stage1_epoch_only():
    method = make(stage1_epochs=2, lambda_up=3)
    run_epoch(method, 0, wrong_at([0, 1, 2, 3, 4]))  # epoch 0 errors are not the error set
    assert not method.wants_model_reset()
    run_epoch(method, 1, wrong_at([5, 9]))
    assert method.wants_model_reset()  # from the end of stage 1 on (the engine resets once)
    assert method.error_indices().tolist() == [5, 9]
    assert method.log_values()["error_set_size"].item() == 2


def test_stage2_upsamples_each_error_one_plus_lambda_up_times():
    method = make(stage1_epochs=2, lambda_up=3)
    assert method.epoch_indices(0, torch.Generator()) is None
    run_epoch(method, 0, labels())
    assert method.epoch_indices(1, torch.Generator()) is None
    run_epoch(method, 1, wrong_at([5, 9]))
    indices = method.epoch_indices(2, torch.Generator().manual_seed(0))
    counts = torch.bincount(indices, minlength=N)
    want = torch.ones(N, dtype=torch.long)
    want[[5, 9]] = 4
    assert torch.equal(counts, want)
    again = method.epoch_indices(2, torch.Generator().manual_seed(0))
    assert torch.equal(indices, again)  # a function of the generator: identical on every rank
    assert not torch.equal(indices, method.epoch_indices(3, torch.Generator().manual_seed(1)))


def test_empty_error_set_is_an_error_not_a_silent_second_erm():
    method = make(stage1_epochs=1)
    with pytest.raises(EmptyErrorSetError) as caught:
        run_epoch(method, 0, labels())
    assert str(caught.value) == EMPTY_ERROR_SET.format(epochs=1, source="train-mode", seen=N)


def test_lambda_up_zero_is_cross_entropy_on_the_plain_data_set():
    method = make(stage1_epochs=1, lambda_up=0)
    run_epoch(method, 0, wrong_at([3]))
    indices = method.epoch_indices(1, torch.Generator().manual_seed(0))
    assert torch.equal(indices.sort().values, torch.arange(N))
    logits, target = torch.randn(6, K, dtype=torch.float64), torch.randint(0, K, (6,))
    method.on_epoch_start(1)
    method.on_batch(torch.zeros(6, 1), target, torch.arange(6))
    loss = method(logits, None, target)
    torch.testing.assert_close(loss, F.cross_entropy(logits, target))
    want = sum(oracle.cross_entropy(logits, target)) / len(target)
    torch.testing.assert_close(loss, torch.tensor(want, dtype=torch.float64))


def test_eval_pass_uses_the_engines_prediction_of_the_training_set():
    calls = []

    def predict():
        calls.append(1)
        return wrong_at([2, 7, 8]), labels()

    method = make(predict, stage1_epochs=2, error_source="eval_pass")
    run_epoch(method, 0, wrong_at([0]))
    assert not calls
    run_epoch(method, 1, wrong_at([0]))  # train-mode predictions are ignored
    assert calls == [1]
    assert method.error_indices().tolist() == [2, 7, 8]


def test_configuration_errors():
    with pytest.raises(MR2InputError, match="stage1_epochs"):
        make(stage1_epochs=5, epochs=5)
    with pytest.raises(MR2InputError, match="predict_train_set"):
        make(error_source="eval_pass")
    with pytest.raises(MR2InputError, match="lambda_up"):
        JTT(K, lambda_up=1.5)  # type: ignore[arg-type]
    assert make(epochs=10).stage1_epochs == 2  # default: a fifth of the epochs


def test_state_dict_round_trip_gives_the_same_stage2():
    method = make(stage1_epochs=2, lambda_up=2)
    run_epoch(method, 0, labels())
    run_epoch(method, 1, wrong_at([1, 4, 6]))
    clone = make(stage1_epochs=2, lambda_up=2)
    clone.load_state_dict(method.state_dict())
    for epoch in (2, 3):
        a = method.epoch_indices(epoch, torch.Generator().manual_seed(epoch))
        b = clone.epoch_indices(epoch, torch.Generator().manual_seed(epoch))
        assert torch.equal(a, b)
    losses = run_epoch(method, 2, labels())
    clone_losses = run_epoch(clone, 2, labels())
    assert all(torch.equal(a, b) for a, b in zip(losses, clone_losses))
