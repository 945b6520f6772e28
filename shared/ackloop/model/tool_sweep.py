"""The script for an agent that has none: call every tool once, then summarise what came back.

Offline, an agent without a script still exercises its tools through the real engine (their
arguments generated from their schemas), and its answer shows what they returned, so a custom
agent is never answered with something unrelated to it.
"""

from __future__ import annotations

import json
from typing import Any

from ackloop.domain.jsondict import JsonDict
from ackloop.model.base import ModelRequest, ModelTurn
from ackloop.model.function_model import Conversation, Reply

_MAX_DEPTH = 8


class TestModel:
    """Calls each offered tool once, in one parallel turn, then answers with a summary.

    ``answer`` replaces the summary with a fixed text. The arguments are generated from each
    tool's declared parameters: the default when there is one, else the first enum value, else
    the smallest value of the type (a string of ``minLength`` ``"a"``, the ``minimum`` number).
    """

    __test__ = False  # not a pytest test class, whatever module imports it

    def __init__(self, answer: str | None = None) -> None:
        self.answer = answer

    def __call__(self, request: ModelRequest) -> ModelTurn:
        conversation = Conversation.of(request)
        if conversation.turn == 0 and conversation.declarations:
            return Reply(calls=tuple(
                (str(d.get("name")), arguments_for(d)) for d in conversation.declarations
            )).to_turn(request)
        return Reply(text=self.answer or summary(conversation)).to_turn(request)


def summary(conversation: Conversation) -> str:
    """One line per tool result of this run, or the question when there was none."""
    if not conversation.results:
        return f"Scripted answer (no tools were called) to: {conversation.question}"
    lines = []
    for result in conversation.results:
        if result.error is not None:
            lines.append(f"{result.name} failed: {result.error}")
        else:
            lines.append(f"{result.name}: {json.dumps(result.result, ensure_ascii=False)}")
    return "\n".join(lines)


def arguments_for(declaration: JsonDict) -> JsonDict:
    """Arguments a tool's declared parameters accept (only the required ones)."""
    schema = declaration.get("parameters_json_schema") or declaration.get("parameters") or {}
    value = _value(schema, 0)
    return value if isinstance(value, dict) else {}


def _value(schema: JsonDict, depth: int) -> Any:
    if "default" in schema:
        return schema["default"]
    if schema.get("enum"):
        return schema["enum"][0]
    options = schema.get("anyOf") or schema.get("any_of")
    if options:
        chosen = next((o for o in options if str(o.get("type", "")).lower() != "null"), options[0])
        return _value(chosen, depth)
    kind = str(schema.get("type", "object")).lower()
    if kind == "string":
        if schema.get("format") == "date-time":
            return "2024-01-01T00:00:00Z"
        return "a" * max(1, int(_int(schema, "minLength", "min_length") or 1))
    if kind in ("integer", "number"):
        low = _int(schema, "minimum")
        value = low if low is not None else 0
        return int(value) if kind == "integer" else float(value)
    if kind == "boolean":
        return False
    if kind == "array":
        count = int(_int(schema, "minItems", "min_items") or 0)
        item = schema.get("items") or {"type": "string"}
        return [_value(item, depth + 1) for _ in range(count)] if depth < _MAX_DEPTH else []
    if depth >= _MAX_DEPTH:
        return {}
    properties: JsonDict = schema.get("properties") or {}
    return {name: _value(properties.get(name) or {}, depth + 1)
            for name in schema.get("required") or []}


def _int(schema: JsonDict, *keys: str) -> float | None:
    for key in keys:
        if schema.get(key) is not None:
            return float(schema[key])
    return None
