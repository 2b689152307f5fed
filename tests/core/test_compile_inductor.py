"""Issue 47 item 4: MR2Loss (the default, T = d, and the paper's form, T = 1) compiles with
``torch.compile(fullgraph=True)`` and the CPU inductor backend, and the compiled loss gives the eager
loss's values, gradients and statistics (the compiled graph takes the dense pair path: no host read)."""

from __future__ import annotations

import copy
import shutil

import pytest
import torch

from mr2 import MR2Loss

_NO_COMPILER = not any(shutil.which(name) for name in ("c++", "g++", "clang++"))


@pytest.mark.slow
@pytest.mark.skipif(_NO_COMPILER, reason="torch.compile's CPU inductor backend needs a C++ compiler (none on PATH)")
@pytest.mark.parametrize("variant", ["distance_1d", "paper"])
def test_mr2_loss_compiles_with_fullgraph_on_the_cpu_inductor(variant):
    torch._dynamo.reset()
    eager = MR2Loss.from_variant(variant, 4, feature_dim=6)
    compiled_module = copy.deepcopy(eager)
    compiled = torch.compile(compiled_module, fullgraph=True)  # default backend: inductor
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
