"""Caller-supplied regular expressions (output_schema ``pattern``) run in linear time or are
refused when the run is requested, with a message that says why."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ackloop.domain.wire import RunOptions
from ackloop.engine.structured import InvalidOutput, from_json_schema


def schema_with(pattern: str) -> dict[str, object]:
    return {"type": "object", "properties": {"code": {"type": "string", "pattern": pattern}},
            "required": ["code"]}


@pytest.mark.timeout(60)
def test_a_catastrophic_backtracking_pattern_is_checked_in_linear_time() -> None:
    # With Python's re this check takes about 2**60 steps (it never returns); RE2 answers at once.
    contract = from_json_schema(schema_with("^(?:.|.){60}X"))
    with pytest.raises(InvalidOutput, match="does not match"):
        contract.validate({"code": "a" * 70})
    assert contract.validate({"code": "a" * 60 + "X"}) == {"code": "a" * 60 + "X"}


def test_an_ordinary_pattern_still_accepts_and_refuses() -> None:
    contract = from_json_schema(schema_with(r"^[A-Z]{2}-\d{3}$"))
    assert contract.validate({"code": "OK-123"}) == {"code": "OK-123"}
    with pytest.raises(InvalidOutput, match="does not match"):
        contract.validate({"code": "ok-12"})


@pytest.mark.parametrize(("pattern", "why"), [
    (r"(a)\1", "not supported"),          # a backreference
    (r"^(?=a)a$", "not supported"),       # lookahead
    ("a" * 1001, "longer than"),
])
def test_a_pattern_re2_cannot_run_is_refused_when_the_run_is_requested(
    pattern: str, why: str
) -> None:
    with pytest.raises(ValidationError, match=why):
        RunOptions(output_schema=schema_with(pattern))


def test_pattern_properties_are_refused_with_the_alternative() -> None:
    schema = {"type": "object", "patternProperties": {"^x": {"type": "string"}}}
    with pytest.raises(ValidationError, match="patternProperties is not supported"):
        RunOptions(output_schema=schema)


def test_a_property_named_pattern_is_an_ordinary_property() -> None:
    schema = {"type": "object", "properties": {"pattern": {"type": "string"}}}
    assert RunOptions(output_schema=schema).output_schema == schema
