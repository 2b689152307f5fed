"""A missing optional dependency names the extra that installs it."""

from __future__ import annotations

import importlib
import sys

import pytest

from mr2.extras import EXTRA_MISSING, needs_extra


@pytest.mark.parametrize(
    ("module", "package", "extra"),
    [
        ("mr2.integrations.lightning", "lightning", "lightning"),
        ("mr2.integrations.transformers", "transformers", "transformers"),
        ("mr2.metrics.classwise_disparity", "torchmetrics", "metrics"),
    ],
)
def test_a_module_without_its_extra_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, module: str, package: str, extra: str
) -> None:
    monkeypatch.setitem(sys.modules, package, None)  # the import system's "not installed"
    monkeypatch.delitem(sys.modules, module, raising=False)
    with pytest.raises(ModuleNotFoundError) as info:
        importlib.import_module(module)
    feature = "mr2.metrics" if extra == "metrics" else module
    assert str(info.value) == EXTRA_MISSING.format(feature=feature, package=package, extra=extra)
    assert str(info.value) == f"{feature} needs {package}: pip install 'mr2[{extra}]'"
    assert isinstance(info.value.__cause__, ModuleNotFoundError)


def test_other_errors_pass_through() -> None:
    with pytest.raises(ImportError, match="not a missing module") as info, needs_extra("x", "y", "z"):
        raise ImportError("not a missing module")
    assert type(info.value) is ImportError
