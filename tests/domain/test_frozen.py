"""Frozen JSON values: what a process shares of the history it decoded, which no reader can
change, and which every copy gives back plain."""

from __future__ import annotations

import copy
import json
import pickle
from collections.abc import Callable
from typing import Any

import pytest

from ackloop.domain.frozen import FrozenDict, FrozenList, freeze, thawed


def _value() -> dict[str, Any]:
    return {"role": "model", "parts": [{"function_call": {"name": "f", "args": {"a": [1, 2]}}},
                                       {"text": "x"}], "n": (1, 2)}


CHANGES: list[tuple[str, Callable[[Any], Any]]] = [
    ("set an item", lambda v: v.__setitem__("role", "user")),
    ("delete an item", lambda v: v.__delitem__("role")),
    ("update", lambda v: v.update(role="user")),
    ("merge in place", lambda v: v.__ior__({"role": "user"})),
    ("setdefault", lambda v: v.setdefault("other", 1)),
    ("pop", lambda v: v.pop("role")),
    ("popitem", lambda v: v.popitem()),
    ("clear", lambda v: v.clear()),
    ("append to a list", lambda v: v["parts"].append({})),
    ("extend a list", lambda v: v["parts"].extend([{}])),
    ("insert in a list", lambda v: v["parts"].insert(0, {})),
    ("add to a list in place", lambda v: v["parts"].__iadd__([{}])),
    ("repeat a list in place", lambda v: v["parts"].__imul__(2)),
    ("set a list item", lambda v: v["parts"].__setitem__(0, {})),
    ("set a slice", lambda v: v["parts"].__setitem__(slice(0, 1), [])),
    ("delete a list item", lambda v: v["parts"].__delitem__(0)),
    ("pop from a list", lambda v: v["parts"].pop()),
    ("remove from a list", lambda v: v["parts"].remove({"text": "x"})),
    ("sort a list", lambda v: v["parts"].sort(key=str)),
    ("reverse a list", lambda v: v["parts"].reverse()),
    ("clear a list", lambda v: v["parts"].clear()),
    ("change a nested map", lambda v: v["parts"][0]["function_call"]["args"].clear()),
    ("change a nested list", lambda v: v["parts"][0]["function_call"]["args"]["a"].append(3)),
]


@pytest.mark.parametrize(("what", "change"), CHANGES, ids=[c[0] for c in CHANGES])
def test_no_change_reaches_a_frozen_value(what: str, change: Callable[[Any], Any]) -> None:
    frozen = freeze(_value())
    with pytest.raises(TypeError, match="read-only"):
        change(frozen)
    assert frozen == thawed(freeze(_value()))


@pytest.mark.parametrize("copied", [
    copy.copy, copy.deepcopy, thawed, lambda v: pickle.loads(pickle.dumps(v)),
    lambda v: json.loads(json.dumps(v)),
], ids=["copy", "deepcopy", "thawed", "pickle", "json"])
def test_a_copy_is_plain_and_its_holders_own(copied: Callable[[Any], Any]) -> None:
    frozen = freeze(_value())
    own = copied(frozen)
    assert type(own) is dict and own == frozen
    own["role"] = "user"  # the top level is always the holder's own
    assert frozen["role"] == "model"
    if copied is not copy.copy:  # a shallow copy shares its items, frozen
        own["parts"].append({"text": "y"})
        own["parts"][0]["function_call"]["args"]["a"].append(3)
        assert type(own["parts"]) is list and frozen == thawed(freeze(_value()))


@pytest.mark.parametrize(("value", "expected"), [
    ({"a": [1, {"b": (2, 3)}]}, {"a": [1, {"b": [2, 3]}]}),
    ([], []),
    ("text", "text"),
    (None, None),
    (b"\x00", b"\x00"),
])
def test_freeze_keeps_the_value_and_thawed_gives_it_back(value: Any, expected: Any) -> None:
    frozen = freeze(value)
    assert frozen == expected and thawed(frozen) == expected
    assert freeze(frozen) == frozen
    if isinstance(expected, (dict, list)):
        assert type(frozen) in (FrozenDict, FrozenList)
        assert type(thawed(frozen)) is type(expected)
