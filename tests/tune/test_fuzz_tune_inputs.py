"""Fuzz of what a user hands ``mr2 tune``: command templates (placeholders with format specs,
conversions, quotes, stray braces, huge widths) and loss specifications (deep nesting, huge integers,
NaN, long strings, wrong types). Each input is accepted or refused with one line from mr2's error
family, in bounded time and memory: never another exception (issue 38)."""

from __future__ import annotations

import json
import random

import pytest

from mr2.errors import MR2Error
from mr2.tune.command import check_command
from mr2.tune.loss_spec import loss_from_spec, parse_loss_spec

PIECES = ["python t.py", "{loss}", "{seed}", "{out}", "'{loss}'", '"{out}"', "{seed:>2000000000}", "{loss!r}",
          "{out!s:>9}", "{", "}", "{{", "}}", "{epochs}", "{0}", "{}", "--x", "'", '"', ";", "$(touch X)",
          "{seed:030000000}", "{out.__class__}", "{loss[0]}", " "]


def _templates(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(PIECES) + rng.choice(["", " "]) for _ in range(rng.randint(1, 8)))
            for _ in range(count)]


@pytest.mark.parametrize("template", _templates(300, 0))
def test_every_command_template_is_accepted_or_one_line(template):
    try:
        accepted = check_command(template)
    except MR2Error as error:
        assert "\n" not in str(error) and len(str(error)) < 2000
        return
    # Accepted: every placeholder is plain, unquoted, and the template substitutes in bounded size.
    command = accepted.format(loss="'{}'", seed=0, out="/o")
    assert len(command) <= len(template) + 100


def _deep(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


SPECS: list[object] = [
    "[" * 100_000 + "]" * 100_000,
    '{"method": "erm", "options": {"a": ' + "[" * 50_000 + "]" * 50_000 + "}}",
    {"method": "erm", "options": {"a": _deep(5000)}},
    '{"method": "mr2", "options": {"c_bar": ' + "9" * 5000 + "}}",
    {"method": "mr2", "options": {"c_bar": 10**5000}},
    '{"method": "mr2", "options": {"c_bar": NaN}}',
    '{"method": "mr2", "options": {"c_bar": Infinity}}',
    "x" * 1_000_000,
    {"method": "x" * 100_000},
    {"method": "erm", "options": {}, "num_classes": 10**100},
    {"method": "erm", "options": {}, "num_classes": "10"},
    {"method": ["erm"]},
    {"method": "mr2", "options": {"variant": {"a": 1}}},
    b'{"method": "erm"}',
    None,
    42,
]


@pytest.mark.parametrize("spec", SPECS, ids=[f"spec{i}" for i in range(len(SPECS))])
def test_every_loss_specification_is_accepted_or_one_line(spec):
    try:
        parsed = parse_loss_spec(spec)  # type: ignore[arg-type]
        loss_from_spec(parsed, 10)
    except MR2Error as error:
        message = str(error)
        assert "\n" not in message and len(message) < 2000
    else:
        assert json.loads(json.dumps(parsed)) == parsed
