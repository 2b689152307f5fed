"""``mr2.tune.tune`` and ``mr2.tune.describe_tune``: one parameter list (written once, shown by
``help()`` and ``inspect.signature`` for both, and by docs/tune.md), the dry run refusing what the
tune refuses, and the request validator agreeing with the Python way in on every default."""

from __future__ import annotations

import inspect
import pydoc
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from helpers.tune_trials import K, simulated
from mr2.tune import Candidate, TrialPredictions, TuneInputError, describe_tune, tune
from mr2.tune.api import NO_SUBMIT, NOT_CALLABLE, _prepared_tune
from mr2.tune.design import DEFAULT_DESIGN
from mr2.tune.request import make_request

DOCS = Path(__file__).resolve().parents[2] / "docs" / "tune.md"

#: tune's parameters in order, with their defaults (``REQUIRED``: none), as docs/tune.md states them.
REQUIRED = inspect.Parameter.empty
PARAMETERS = {
    "train_fn": REQUIRED, "num_classes": REQUIRED, "candidates": "full", "seeds": None, "confirm_seeds": None,
    "criterion": "hard_tier", "output_dir": REQUIRED, "name": "tune", "class_names": None, "executor": None,
    "workers": None, "design": DEFAULT_DESIGN, "stream": None, "version": None, "retrain": False,
}


def _parameters(function) -> dict[str, object]:
    return {name: p.default for name, p in inspect.signature(function).parameters.items()}


def test_tune_and_its_dry_run_take_one_parameter_list_that_help_shows() -> None:
    assert _parameters(tune) == _parameters(describe_tune) == _parameters(_prepared_tune) == PARAMETERS
    assert list(_parameters(tune)) == list(PARAMETERS)
    assert inspect.signature(tune).parameters["train_fn"].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in list(inspect.signature(tune).parameters.values())[1:])
    assert inspect.signature(tune).return_annotation == "TuneResult"
    assert inspect.signature(describe_tune).return_annotation == "str"
    for function in (tune, describe_tune):
        shown = pydoc.render_doc(function, renderer=pydoc.plaintext)
        assert all(f"{name}: " in shown for name in PARAMETERS), shown[:400]


def test_docs_state_tunes_signature() -> None:
    text = " ".join(DOCS.read_text().split())
    match = re.search(r"`tune\(train_fn, \*, ([^`]*)\)` returns a `TuneResult`", text)
    assert match is not None
    stated = {}
    for item in match[1].split(", "):
        name, _, default = item.partition("=")
        stated[name] = REQUIRED if not default else DEFAULT_DESIGN if default == "DEFAULT_DESIGN" else eval(default)
    assert {"train_fn": REQUIRED, **stated} == PARAMETERS and list(stated) == list(PARAMETERS)[1:]


def test_the_request_validator_has_the_python_way_ins_defaults() -> None:
    """make_request validates every way in's request; where it takes one of tune's parameters, its
    default is tune's (output_dir and name have none there: each way in has its own)."""
    validator = _parameters(make_request)
    shared = set(validator) & set(PARAMETERS) - {"num_classes", "output_dir", "name"}
    assert shared == {"candidates", "seeds", "confirm_seeds", "criterion", "class_names", "design"}
    assert {name: validator[name] for name in shared} == {name: PARAMETERS[name] for name in shared}


def _never(candidate: Candidate, seed: int) -> TrialPredictions:
    raise AssertionError(f"the dry run trained {candidate.label} on seed {seed}")


class _NoSubmit:
    pass


@pytest.mark.parametrize(("arguments", "message"), [
    ({"executor": _NoSubmit()}, NO_SUBMIT.format(kind="_NoSubmit")),
    ({"class_names": ["a", "a"]}, f"class_names must be {K} distinct non-empty strings; got {2} names"),
    ({"train_fn": 3}, NOT_CALLABLE.format(kind="int")),
])
def test_the_dry_run_refuses_what_the_tune_refuses(tmp_path: Path, arguments, message) -> None:
    """describe_tune took tune's arguments less class_names, executor, workers and stream: a call that
    tune refused could pass its dry run (a TypeError on the old code for executor and class_names)."""
    call = {"train_fn": _never, "num_classes": K, "output_dir": tmp_path, "name": "t", **arguments}
    for function in (tune, describe_tune):
        with pytest.raises(TuneInputError) as caught:
            function(**call)
        assert str(caught.value) == message
    assert list(tmp_path.iterdir()) == []


def test_the_dry_run_of_a_call_trains_nothing_and_writes_nothing(tmp_path: Path) -> None:
    with ThreadPoolExecutor(max_workers=2) as executor:
        text = describe_tune(_never, num_classes=K, candidates="quick", seeds=2, confirm_seeds=2,
                             output_dir=tmp_path, name="t", class_names=[f"c{k}" for k in range(K)],
                             executor=executor, workers=2, version="v1")
    plan = make_request(num_classes=K, candidates="quick", seeds=2, confirm_seeds=2, output_dir=tmp_path,
                        name="t").plan()
    first = len(plan.next_round())
    assert f"first round ({first} trials):" in text and text.count(" to run") == first
    assert list(tmp_path.iterdir()) == []


def test_the_dry_run_checks_the_stored_trials_as_the_tune_does(tmp_path: Path) -> None:
    import io

    from mr2.tune import TrialError

    call = {"num_classes": K, "candidates": "erm,mr2-paper-c1", "seeds": 2, "confirm_seeds": 2,
            "output_dir": tmp_path, "name": "t"}
    tune(simulated, **call, version="v1", stream=io.StringIO())
    assert " finished" in describe_tune(simulated, **call, version="v1")
    for function in (tune, describe_tune):
        with pytest.raises(TrialError, match="another train_fn"):
            function(_never, **call, version="v2")
    assert describe_tune(_never, **call, version="v2", retrain=True).count(" finished") == 0
