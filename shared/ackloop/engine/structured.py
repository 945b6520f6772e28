"""Structured final answers: a run can require its answer to match a schema.

The schema comes from the run (``options.output_schema``, a JSON Schema) or from the agent
(``Agent.output``, a Pydantic model). The model is offered a ``final_answer``
function whose parameters are that schema; a valid call ends the run with its arguments as the
run's ``output``. A plain-text answer that parses as JSON and validates is accepted too. Anything
else goes back to the model with what is wrong, as its next turn, within the run's budget.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from ackloop.domain import patterns
from ackloop.domain.jsondict import JsonDict
from ackloop.domain.wire import FunctionCall
from ackloop.model.base import ModelTurn
from ackloop.transcript import conversation

if TYPE_CHECKING:
    import jsonschema

FINAL_ANSWER_TOOL = "final_answer"
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.S)



class InvalidOutput(ValueError):
    """The answer does not match the schema; the message is written for the model."""


@dataclass(frozen=True)
class OutputContract:
    schema: JsonDict
    validate: Callable[[Any], Any]
    """Returns the normalised output or raises :class:`InvalidOutput`."""

    def declaration(self) -> JsonDict:
        return {
            "name": FINAL_ANSWER_TOOL,
            "description": (
                "Give your final answer. Call it alone, once, when you are done, with "
                "arguments that match its schema."
            ),
            "parameters_json_schema": self.schema,
        }


def contract_for(
    run_schema: JsonDict | None, model: type[BaseModel] | None
) -> OutputContract | None:
    """The run's schema wins over the agent's model; None when the answer is free text."""
    if run_schema is not None:
        return from_json_schema(run_schema)
    if model is not None:
        return from_model(model)
    return None


def _linear_pattern(
    validator: Any, pattern: str, instance: Any, schema: JsonDict
) -> Iterator[jsonschema.ValidationError]:
    """JSON Schema's ``pattern``, matched with RE2 (see :mod:`ackloop.domain.patterns`)."""
    import jsonschema

    if validator.is_type(instance, "string") and not patterns.search(pattern, instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


@functools.cache
def _validator_class() -> Any:
    """Draft 2020-12 with every caller-supplied regular expression run by RE2
    (patternProperties, which jsonschema also matches with ``re`` inside additionalProperties,
    is refused up front). Built on the first run that asks for structured output:
    jsonschema is not part of a step service's start-up."""
    import jsonschema

    return jsonschema.validators.extend(jsonschema.Draft202012Validator,
                                        {"pattern": _linear_pattern})


def from_json_schema(schema: JsonDict) -> OutputContract:
    validator = _validator_class()(schema)

    def validate(value: Any) -> Any:
        errors = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
        if errors:
            raise InvalidOutput("; ".join(
                f"{'/'.join(str(p) for p in e.absolute_path) or 'answer'}: {e.message}"
                for e in errors[:5]
            ))
        return value

    return OutputContract(schema, validate)


def from_model(model: type[BaseModel]) -> OutputContract:
    adapter = TypeAdapter(model)

    def validate(value: Any) -> Any:
        try:
            return adapter.dump_python(adapter.validate_python(value), mode="json")
        except ValidationError as exc:
            raise InvalidOutput("; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'answer'}: {e['msg']}"
                for e in exc.errors()[:5]
            )) from exc

    return OutputContract(model.model_json_schema(), validate)


@dataclass(frozen=True)
class Verdict:
    output: Any = None
    feedback: JsonDict | None = None
    """The contents to send the model when the answer was not acceptable."""

    @property
    def accepted(self) -> bool:
        return self.feedback is None


def judge(contract: OutputContract, turn: ModelTurn) -> Verdict | None:
    """Judge a turn against the contract; None when the turn is an ordinary tool request."""
    final = [c for c in turn.calls if c.name == FINAL_ANSWER_TOOL]
    if final:
        try:
            if len(turn.calls) > 1:
                raise InvalidOutput("call final_answer alone, after your other tools returned")
            return Verdict(output=contract.validate(final[0].args))
        except InvalidOutput as exc:
            return Verdict(feedback=_answer_calls(turn.calls, str(exc)))
    if turn.calls:
        return None
    try:
        return Verdict(output=contract.validate(_parse(turn.text or "")))
    except InvalidOutput as exc:
        return Verdict(feedback=conversation.user_text(
            f"Your answer must be given by calling {FINAL_ANSWER_TOOL} with arguments that "
            f"match its schema. Problem: {exc}"
        ))


def _parse(text: str) -> Any:
    stripped = text.strip()
    if match := _FENCE.match(stripped):
        stripped = match.group(1)
    try:
        return json.loads(stripped)
    except json.JSONDecodeError as exc:
        raise InvalidOutput(f"the answer is not JSON ({exc.msg})") from exc


def _answer_calls(calls: list[FunctionCall], problem: str) -> JsonDict:
    pairs = [
        (call, {"error": problem if call.name == FINAL_ANSWER_TOOL else
                "not run: call final_answer alone, after your other tools returned"})
        for call in calls
    ]
    return conversation.function_responses(pairs)
