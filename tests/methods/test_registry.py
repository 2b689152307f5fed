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


def test_mr2s_options_are_its_losss_options_plus_its_own():
    import inspect

    from mr2.losses import MR2Loss, ReleasedMR2Loss

    loss_options = {
        name: p.default
        for cls in (MR2Loss, ReleasedMR2Loss)
        for name, p in inspect.signature(cls.__init__).parameters.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    }
    del loss_options["feature_dim"], loss_options["process_group"]  # wired by the engine at setup
    assert method_options("mr2") == {"variant": "distance_1d", "margin_warmup_epochs": 0, **loss_options}
    assert {"estimator", "rep_reduction", "distance_margin_norm", "min_logit_temperature"} <= set(loss_options)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"c_bar": -1}, "c_bar must be a positive number; got -1."),
        ({"rep_reduction": "sum"}, "rep_reduction must be 'mean' (paper) or 'released'; got 'sum'."),
        ({"distance_temperature": "tend"}, "distance_temperature must be a positive number (1 = the paper) or"),
        ({"estimator": "median"}, "estimator must be 'pooled' (default) or 'batch' (released code); got 'median'."),
    ],
)
def test_a_bad_mr2_option_is_the_losss_one_line_error_naming_it(options, message):
    from mr2.checks import MR2InputError

    with pytest.raises(MR2InputError) as caught:
        build_method("mr2", num_classes=3, **options)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_mr2_setup_wires_the_loss_through_its_public_setup():
    import torch

    from mr2.methods.base import MethodContext

    method = build_method("mr2", num_classes=3)
    context = MethodContext(
        num_classes=3, num_train_samples=6, class_counts=torch.tensor([2, 2, 2]), feature_dim=5,
        device=torch.device("cpu"), epochs=1, process_group="group",
    )
    method.setup(context)
    loss = method.loss
    assert loss.statistics.feature_dim == 5 and loss.statistics.means().shape == (3, 5)
    assert loss.process_group == "group" and loss.statistics.process_group == "group"
