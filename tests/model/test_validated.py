"""The validated-contents memo: a warm process validates each distinct content once, whatever
built the dict, and a changed content is validated again (counted by its validations)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from google.genai import types
from pydantic import ValidationError

from ackloop.domain.frozen import freeze
from ackloop.model.turns import _words, contents_words
from ackloop.model.validated import Validated, ValueMemo


def _call(key: str) -> dict[str, Any]:
    return {"role": "model", "parts": [{"function_call": {"name": "lookup",
                                                          "args": {"key": key}}}]}


@pytest.mark.parametrize(("first", "then", "validations"), [
    # The same content again, as the next call of the run sends it: validated once.
    (_call("a"), _call("a"), 1),
    # Read back from JSON (the transcript), it is still the same content.
    (_call("a"), json.loads(json.dumps(_call("a"))), 1),
    # A changed argument, a changed role: validated again.
    (_call("a"), _call("b"), 2),
    (_call("a"), _call("a") | {"role": "user"}, 2),
    # A bool is not an int, nor an int a float (marshal keeps the type).
    ({"role": "user", "parts": [{"text": "x", "thought": True}]},
     {"role": "user", "parts": [{"text": "x", "thought": 1}]}, 2),
])
def test_a_content_is_validated_once_per_distinct_value(first: dict[str, Any],
                                                        then: dict[str, Any],
                                                        validations: int) -> None:
    memo = Validated()
    a, b = memo.validate(types.Content, first), memo.validate(types.Content, then)
    assert memo.validations == validations
    assert a == types.Content.model_validate(first)
    assert b == types.Content.model_validate(then)
    assert (a is b) == (validations == 1)


def test_what_marshal_refuses_is_validated_every_time_and_failures_are_not_kept() -> None:
    class Mapping(dict[str, Any]):
        pass

    memo = Validated()
    for _ in range(2):
        memo.validate(types.Content, Mapping(_call("a")))
    assert memo.validations == 2 and len(memo) == 0
    for _ in range(2):
        with pytest.raises(ValidationError):
            memo.validate(types.Content, {"role": "model", "parts": "not a list"})
    assert memo.validations == 4 and len(memo) == 0


def test_the_memo_keeps_its_newest_entries_and_each_model_apart() -> None:
    memo = Validated(max_entries=2)
    for key in ("a", "b", "c"):
        memo.validate(types.Content, _call(key))
    assert len(memo) == 2
    memo.validate(types.Content, _call("c"))
    assert memo.validations == 3  # the newest is kept
    memo.validate(types.Content, _call("a"))
    assert memo.validations == 4  # the oldest went first
    declaration = {"name": "lookup", "description": "d"}
    found = memo.validate(types.FunctionDeclaration, declaration)
    assert isinstance(found, types.FunctionDeclaration) and memo.validations == 5


@pytest.mark.parametrize("contents", [
    [],
    [_call("a")],
    [_call("a"), {"role": "user", "parts": [{"text": "two words\nand a line"}]}, _call("b")],
    [{"role": "user", "parts": [{"text": ""}]}, {"role": "model", "parts": []}],
])
def test_a_requests_words_are_counted_a_content_at_a_time_as_a_whole(
        contents: list[dict[str, Any]]) -> None:
    assert contents_words(contents) == _words(contents)
    assert contents_words(contents) == _words(contents)  # again, from the memo


def test_the_value_memo_makes_each_distinct_value_once() -> None:
    memo, made = ValueMemo(), []

    def make(value: Any) -> int:
        made.append(value)
        return len(value)

    assert [memo.get("len", v, make) for v in ([1, 2], [1, 2], [1, 2, 3])] == [2, 2, 3]
    assert made == [[1, 2], [1, 2, 3]]
    assert memo.get("other", [1, 2], lambda v: -1) == -1  # another tag, another entry


def test_a_frozen_content_is_validated_once_and_found_by_its_identity() -> None:
    """A content of the shared history is its own key: validated once, then found without
    being read; an equal content that is another object is validated on its own, and a
    failure is not kept."""
    memo = Validated()
    shared = freeze(_call("a"))
    first = memo.validate(types.Content, shared)
    assert memo.validate(types.Content, shared) is first and memo.validations == 1
    other = freeze(_call("a"))
    assert memo.validate(types.Content, other) == first and memo.validations == 2
    assert memo.validate(types.Content, _call("a")) == first and memo.validations == 3
    bad = freeze({"role": "model", "parts": "not a list"})
    for _ in range(2):
        with pytest.raises(ValidationError):
            memo.validate(types.Content, bad)
    assert memo.validations == 5 and len(memo) == 3


def test_the_identity_memo_keeps_its_newest_entries_and_what_it_keeps_alive() -> None:
    memo = Validated(max_entries=2)
    kept = [freeze(_call(key)) for key in ("a", "b", "c")]
    for value in kept:
        memo.validate(types.Content, value)
    assert len(memo) == 2
    memo.validate(types.Content, kept[2])
    assert memo.validations == 3  # the newest is kept
    memo.validate(types.Content, kept[0])
    assert memo.validations == 4  # the oldest went first
    # Each entry holds its value (so no new value can take a kept one's id meanwhile).
    assert [entry[0] for entry in memo._frozen.values()] == [kept[2], kept[0]]
    assert all(any(entry[0] is v for v in kept) for entry in memo._frozen.values())
