"""What the torch.compile tests share: the inductor marker and an eager module beside its compiled copy."""

from __future__ import annotations

import copy
import shutil
from typing import Any

import pytest
import torch

#: torch.compile's CPU inductor backend compiles C++: skip its tests where no compiler is on PATH.
needs_cpp_compiler = pytest.mark.skipif(
    not any(shutil.which(name) for name in ("c++", "g++", "clang++")),
    reason="torch.compile's CPU inductor backend needs a C++ compiler (none on PATH)",
)


def eager_and_compiled(module: torch.nn.Module, **compile_options: Any
                       ) -> tuple[torch.nn.Module, torch.nn.Module, Any]:
    """``(module, copy, compiled)``: a deep copy of ``module`` (its own buffers, the same starting
    state) and ``torch.compile(copy, fullgraph=True, **compile_options)`` (fresh dynamo caches;
    default backend: inductor). Read the compiled side's buffers on ``copy``."""
    torch._dynamo.reset()
    twin = copy.deepcopy(module)
    return module, twin, torch.compile(twin, fullgraph=True, **compile_options)
