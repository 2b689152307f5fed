"""The one spelling of class names in logged scalar names (mr2.report.log_keys)."""

from __future__ import annotations

import re

import pytest

from mr2.report.log_keys import LogKeyCollisionWarning, log_key, log_keys


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("T-shirt/top", "T-shirt_top"),
        ("sea lion", "sea_lion"),
        ("a/b/c", "a_b_c"),
        ("x.y-z_0", "x.y-z_0"),
        ("crème brûlée", "cr_me_br_l_e"),
        ("tab\there\nnewline", "tab_here_newline"),
        ("<b>&", "_b__"),
        ("", ""),
    ],
)
def test_every_character_outside_the_set_becomes_an_underscore(name: str, key: str) -> None:
    assert log_key(name) == key


def test_keys_are_distinct_in_class_id_order() -> None:
    names = ["a/b", "a_b", "a b", "", "3", "a_b_1", "a b"]
    with pytest.warns(LogKeyCollisionWarning) as caught:
        keys = log_keys(names)
    # Issue 38: renamed without a word before; now the renamed classes are named.
    assert str(caught[0].message).startswith("5 class name(s) spell the same logged key")
    assert "'a_b' -> 'a_b_1'" in str(caught[0].message)
    assert keys == ["a_b", "a_b_1", "a_b_2", "3", "3_4", "a_b_1_5", "a_b_6"]
    assert len(set(keys)) == len(keys)
    assert all(re.fullmatch(r"[A-Za-z0-9_.\-]+", key) for key in keys)
    with pytest.warns(LogKeyCollisionWarning):
        assert log_keys(names) == keys  # deterministic


def test_distinct_keys_warn_nothing() -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert log_keys(["T-shirt/top", "Trouser", "Pullover"]) == ["T-shirt_top", "Trouser", "Pullover"]
