"""MR2Loss under torch.compile (no graph break) and without host syncs in a CUDA training step."""

from __future__ import annotations

import pytest
import torch

from helpers import classification_batch
from helpers.compiled import eager_and_compiled
from mr2 import MR2Loss


@pytest.mark.parametrize("variant", ["paper", "additive_margin"])
def test_mr2_loss_compiles_without_graph_breaks(variant):
    loss_fn = MR2Loss.from_variant(variant, 4, feature_dim=6)
    explanation = torch._dynamo.explain(loss_fn)(*classification_batch(16, 4, 6, dtype=torch.float32))
    reasons = [str(reason.reason) for reason in explanation.break_reasons]
    assert explanation.graph_break_count == 0, reasons
    assert explanation.graph_count == 1


def test_compiled_loss_equals_eager_loss_and_gradients():
    eager, compiled_module, compiled = eager_and_compiled(MR2Loss(4, feature_dim=6), backend="aot_eager")
    for step in range(3):
        logits, features, target = classification_batch(16, 4, 6, dtype=torch.float32)
        features = (features + step).requires_grad_()
        f2 = features.detach().clone().requires_grad_()
        want = eager(logits, features, target)
        got = compiled(logits, f2, target)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        want.backward()
        got.backward()
        torch.testing.assert_close(f2.grad, features.grad, rtol=1e-5, atol=1e-6)
    for (name, a), (_, b) in zip(eager.named_buffers(), compiled_module.named_buffers(), strict=True):
        torch.testing.assert_close(a, b, msg=name)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (no GPU on this machine)")
@pytest.mark.parametrize("variant", ["paper", "additive_margin"])
def test_training_step_has_no_host_sync_on_cuda(variant):
    device = torch.device("cuda")
    model = torch.nn.Linear(6, 4).to(device)
    loss_fn = MR2Loss.from_variant(variant, 4, feature_dim=6).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    _, features, target = classification_batch(16, 4, 6, dtype=torch.float32)
    # Features that need a gradient (as a trained backbone's do): the representation term is computed.
    features, target = features.to(device).requires_grad_(), target.to(device)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            logits = model(features)
            loss = loss_fn(logits, features, target)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.isfinite(loss).item()
