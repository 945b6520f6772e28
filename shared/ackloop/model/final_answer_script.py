"""How the scripted model gives a structured final answer when it is offered ``final_answer``.

It plays the wrapped script until that script would answer in text; then it calls
``final_answer`` with the text in the schema's first string property. If the engine answers
with a validation error, it fills every required property it can with a value of the declared
type and calls again, as a model correcting itself would. Stateless: it decides from the
request's contents alone.
"""

from __future__ import annotations

from typing import Any

from ackloop.model.base import ModelRequest, ModelTurn
from ackloop.model.scripted import Script
from ackloop.model.transcript import read_exchange
from ackloop.model.turns import calls_turn

FINAL_ANSWER = "final_answer"
_DEFAULTS: dict[str, Any] = {"string": "", "number": 0.5, "integer": 1, "boolean": True,
                             "array": [], "object": {}}


def with_final_answer(inner: Script) -> Script:
    def script(request: ModelRequest) -> ModelTurn:
        declaration = next((d for d in request.tools if d.get("name") == FINAL_ANSWER), None)
        if declaration is None:
            return inner(request)
        schema = declaration.get("parameters_json_schema") or declaration.get("parameters") or {}
        exchange = read_exchange(request.contents)
        rejected = [r for r in exchange.results if r.name == FINAL_ANSWER and r.error]
        if rejected:
            previous = _last_final_args(request.contents)
            return calls_turn([(FINAL_ANSWER, _complete(schema, previous))], request=request)
        offered = [d for d in request.tools if d.get("name") != FINAL_ANSWER]
        turn = inner(request.model_copy(update={"tools": offered}))
        if turn.calls:
            return turn
        return calls_turn([(FINAL_ANSWER, _first_try(schema, turn.text or ""))], request=request)

    return script


def _string_fields(schema: dict[str, Any]) -> list[str]:
    props = schema.get("properties") or {}
    return [name for name, spec in props.items() if spec.get("type") == "string"]


def _first_try(schema: dict[str, Any], text: str) -> dict[str, Any]:
    fields = _string_fields(schema)
    return {fields[0]: text} if fields else {}


def _complete(schema: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    props = schema.get("properties") or {}
    filled = dict(args)
    for name in schema.get("required") or []:
        if name not in filled:
            filled[name] = _DEFAULTS.get(str((props.get(name) or {}).get("type")), "")
    return filled


def _last_final_args(contents: list[dict[str, Any]]) -> dict[str, Any]:
    for content in reversed(contents):
        for part in content.get("parts") or []:
            call = part.get("function_call")
            if call and call.get("name") == FINAL_ANSWER:
                return dict(call.get("args") or {})
    return {}
