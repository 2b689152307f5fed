"""The method registry: names, options, errors."""

from __future__ import annotations

import pytest

from mr2.methods.base import TrainingMethod
from mr2.methods.registry import (
    UNKNOWN_METHOD,
    MethodConfigError,
    available_methods,
    build_method,
    method_options,
    register_method,
)

BASELINES = ["cdb", "erm", "focal", "group_dro", "jtt", "ldam", "lff", "logit_adjustment"]


def test_every_baseline_is_registered_and_builds_with_its_defaults():
    assert set(BASELINES) <= set(available_methods())
    for name in BASELINES:
        method = build_method(name, num_classes=3)
        assert isinstance(method, TrainingMethod) and method.name == name


def test_unknown_method_lists_the_valid_ones():
    with pytest.raises(MethodConfigError) as caught:
        build_method("lfff", num_classes=3)
    assert str(caught.value) == UNKNOWN_METHOD.format(name="lfff", choices=available_methods())


def test_unknown_option_lists_the_valid_ones():
    with pytest.raises(MethodConfigError, match=r"\['eta_typo'\].*'group_dro'.*\['adjustment', 'eta'\]"):
        build_method("group_dro", num_classes=3, eta_typo=0.1)


def test_options_and_defaults_are_introspectable():
    assert method_options("lff") == {"q": 0.7, "ema_decay": 0.7, "gce_form": "reference"}
    assert method_options("ldam")["drw_start_fraction"] == 0.8


def test_register_rejects_non_methods_and_name_clashes():
    with pytest.raises(TypeError):
        register_method("not_a_method")(int)  # type: ignore[type-var]

    class Other(TrainingMethod):
        pass

    with pytest.raises(MethodConfigError, match="already registered"):
        register_method("erm")(Other)
