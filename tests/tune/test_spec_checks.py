"""Loss specifications (issue 43 items 5 and 6): a state larger than the memory left is refused with
one line before it is allocated (before: center loss K = 1e5, d = 1e6 and SupCon d = 1e6 ended in the
allocator's RuntimeError); an option of the wrong JSON type (focal ``"gamma": "2"`` or ``true``) and a
key written twice (the last one won) are refused."""

from __future__ import annotations

import pytest
import torch

from mr2.methods import spec as spec_module
from mr2.methods.spec import OPTION_TYPE, REPEATED_KEY, STATE_TOO_LARGE, state_bytes
from mr2.tune.errors import TuneInputError
from mr2.tune.loss_spec import loss_from_spec, parse_loss_spec


@pytest.mark.parametrize(("name", "options", "k", "d"), [
    ("center_loss", {}, 100_000, 1_000_000),
    ("supcon", {}, 10, 1_000_000),
    ("mr2", {"variant": "distance_1d"}, 100_000, 1_000_000),
])
def test_a_state_no_memory_holds_is_one_line_before_allocating(name, options, k, d):
    with pytest.raises(TuneInputError) as caught:
        loss_from_spec({"method": name, "options": options}, k, feature_dim=d)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"the {name!r} loss's state for K = {k} classes and feature width {d} (")
    assert "more than the" in message and "this process can still allocate on cpu" in message


def test_the_first_call_without_feature_dim_is_checked_too(monkeypatch):
    monkeypatch.setattr(spec_module, "_free_bytes", lambda device: 1000)
    loss = loss_from_spec({"method": "center_loss", "options": {}}, 10)
    logits, features, target = torch.zeros(2, 10), torch.zeros(2, 64), torch.tensor([0, 1])
    with pytest.raises(spec_module.LossSpecError, match=r"takes 2\.6 kB, more than the 1\.0 kB"):
        loss(logits, features, target)


def _state_size(loss: torch.nn.Module) -> int:
    return sum(t.numel() * t.element_size() for t in [*loss.parameters(), *loss.buffers()])


@pytest.mark.parametrize(("name", "options"), [
    ("center_loss", {}), ("mr2", {}), ("supcon", {}), ("supcon", {"head": "linear", "projection_dim": 7}),
    ("focal", {}), ("group_dro", {}),
])
def test_the_estimate_is_what_setup_allocates_per_feature_width(name, options):
    """The estimate's growth with d equals the bytes the real setup allocates (parameters and buffers)."""
    k = 5
    sizes = {d: _state_size(loss_from_spec({"method": name, "options": options}, k, feature_dim=d))
             for d in (16, 48)}
    estimated = {d: state_bytes(name, options, k, d)[0] for d in (16, 48)}
    assert sizes[48] - sizes[16] == estimated[48] - estimated[16]


def test_a_state_that_fits_is_built(monkeypatch):
    monkeypatch.setattr(spec_module, "_free_bytes", lambda device: 4 * 5 * 64)  # exactly the centres
    loss = loss_from_spec({"method": "center_loss", "options": {}}, 5, feature_dim=64)
    assert loss.method.centers.shape == (5, 64)
    monkeypatch.setattr(spec_module, "_free_bytes", lambda device: 4 * 5 * 64 - 1)
    with pytest.raises(TuneInputError, match=STATE_TOO_LARGE.split("{")[0]):
        loss_from_spec({"method": "center_loss", "options": {}}, 5, feature_dim=64)


@pytest.mark.parametrize(("text", "value", "kind"), [
    ('{"method": "focal", "options": {"gamma": "2"}}', "'2'", "str"),
    ('{"method": "focal", "options": {"gamma": true}}', "True", "bool"),
    ('{"method": "focal", "options": {"gamma": [2]}}', "[2]", "list"),
    ('{"method": "mr2", "options": {"c_bar": "1.0"}}', "'1.0'", "str"),
])
def test_a_number_option_takes_a_number(text, value, kind):
    option = "gamma" if "focal" in text else "c_bar"
    default = 1.0
    name = "focal" if "focal" in text else "mr2"
    with pytest.raises(TuneInputError) as caught:
        parse_loss_spec(text)
    assert str(caught.value) == OPTION_TYPE.format(option=option, name=name, expected="a number", value=value,
                                                   kind=kind, default=default)


def test_a_switch_option_takes_true_or_false_and_numbers_pass():
    with pytest.raises(TuneInputError, match="must be true or false"):
        parse_loss_spec({"method": "mr2", "options": {"center_features": 1}})
    assert parse_loss_spec('{"method": "focal", "options": {"gamma": 2}}')["options"] == {"gamma": 2}
    assert parse_loss_spec({"method": "mr2", "options": {"center_features": True, "warmup_samples_per_class": 3}})


@pytest.mark.parametrize("text", [
    '{"method": "focal", "options": {"gamma": 2, "gamma": 0}}',
    '{"method": "focal", "method": "erm", "options": {}}',
    '{"method": "erm", "options": {}, "num_classes": 3, "num_classes": 4}',
])
def test_a_key_written_twice_is_refused(text):
    with pytest.raises(TuneInputError) as caught:
        parse_loss_spec(text)
    key = "gamma" if "gamma" in text else "method" if text.count('"method"') == 2 else "num_classes"
    assert REPEATED_KEY.format(key=key) in str(caught.value) and "\n" not in str(caught.value)
