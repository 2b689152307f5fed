"""Issue 47 item 4: MR2Loss (the default, T = d, and the paper's form, T = 1) compiles with
``torch.compile(fullgraph=True)`` and the CPU inductor backend, and the compiled loss gives the eager
loss's values, gradients and statistics (the compiled graph takes the dense pair path: no host read)."""

from __future__ import annotations

import pytest
import torch

from helpers.compiled import eager_and_compiled, needs_cpp_compiler
from mr2 import MR2Loss


@pytest.mark.slow
@needs_cpp_compiler
@pytest.mark.parametrize("variant", ["distance_1d", "paper"])
def test_mr2_loss_compiles_with_fullgraph_on_the_cpu_inductor(variant):
    eager, compiled_module, compiled = eager_and_compiled(MR2Loss.from_variant(variant, 4, feature_dim=6))
    g = torch.Generator().manual_seed(0)
    for _ in range(3):
        target = torch.randint(0, 4, (16,), generator=g)
        logits = torch.randn(16, 4, generator=g)
        features = torch.randn(16, 6, generator=g) * (1 + target.unsqueeze(1))
        x1, x2 = features.clone().requires_grad_(), features.clone().requires_grad_()
        z1, z2 = logits.clone().requires_grad_(), logits.clone().requires_grad_()
        want = eager(z1, x1, target)
        got = compiled(z2, x2, target)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        want.backward()
        got.backward()
        torch.testing.assert_close(x2.grad, x1.grad, rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(z2.grad, z1.grad, rtol=1e-4, atol=1e-6)
    assert eager.parts.representation > 0
    for (name, a), (_, b) in zip(eager.named_buffers(), compiled_module.named_buffers(), strict=True):
        torch.testing.assert_close(a, b, msg=name)


@pytest.mark.slow
@needs_cpp_compiler
def test_many_classes_statistics_compile_with_fullgraph_and_match_eager():
    # K > B / 2: the statistics' row update; the eager CPU step may read on the host (a class seen for
    # the first time or not), the compiled one must not (fullgraph), with the same values.
    eager, compiled_module, compiled = eager_and_compiled(MR2Loss(12, feature_dim=6))
    g = torch.Generator().manual_seed(0)
    for step in range(3):
        target = torch.randint(0, 12, (16,), generator=g)
        if step == 0:
            target[:12] = torch.arange(12)
        logits, features = torch.randn(16, 12, generator=g), torch.randn(16, 6, generator=g)
        want = eager(logits.clone().requires_grad_(), features.clone().requires_grad_(), target)
        got = compiled(logits.clone().requires_grad_(), features.clone().requires_grad_(), target)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    for (name, a), (_, b) in zip(eager.named_buffers(), compiled_module.named_buffers(), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6, msg=name)
