"""Turning the model's raw arguments into the tool's Pydantic model, or a message it can act on.

Gemini sends arguments flat (``{"state": "CA"}``) when the declaration is flat, but a declaration
generated from a function whose single parameter is a model (the seed's ``request``) makes it send
them nested (``{"request": {"state": "CA"}}``). Both shapes are accepted.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from ackloop.tools.definition import Tool

_MAX_INPUT_REPR = 60
_PREFIXES = ("Value error, ", "Assertion failed, ")


class InvalidArguments(ValueError):
    """The arguments do not fit the tool; the message says which field and why."""


def parse_arguments(tool: Tool, raw: dict[str, Any]) -> BaseModel:
    """Validate ``raw`` (flat or nested under one key) against ``tool.args_model``."""
    model = tool.args_model
    inner = _nested_arguments(raw, model)
    if inner is not None and next(iter(raw)) == tool.arg_name:
        # Nested under the handler's own parameter name: unambiguous, report its errors.
        return _validate(tool, inner)
    try:
        return model.model_validate(raw)
    except ValidationError as flat_error:
        if inner is None:
            raise InvalidArguments(describe_errors(tool, flat_error)) from None
    # One unknown key holding a dict: the model nested the arguments under another name.
    return _validate(tool, inner)


def _validate(tool: Tool, data: dict[str, Any]) -> BaseModel:
    try:
        return tool.args_model.model_validate(data)
    except ValidationError as error:
        raise InvalidArguments(describe_errors(tool, error)) from None


def _nested_arguments(raw: dict[str, Any], model: type[BaseModel]) -> dict[str, Any] | None:
    if len(raw) != 1:
        return None
    key, value = next(iter(raw.items()))
    if key in model.model_fields or not isinstance(value, dict):
        return None
    return value


def describe_errors(tool: Tool, error: ValidationError) -> str:
    """One line per problem (``field: what is wrong (got ...)``), then what the tool accepts."""
    problems = []
    for item in error.errors(include_url=False):
        where = ".".join(str(part) for part in item["loc"]) or "arguments"
        message = item["msg"]
        for prefix in _PREFIXES:
            message = message.removeprefix(prefix)
        if item["type"] == "missing":
            message = "is required"
        elif item["type"] == "extra_forbidden":
            message = "is not an argument of this tool"
        else:
            message = f"{message} (got {_short_repr(item.get('input'))})"
        problems.append(f"{where}: {message}")
    fields = ", ".join(tool.args_model.model_fields) or "none"
    return (
        f"invalid arguments for {tool.name}: {'; '.join(problems)}. "
        f"Accepted arguments: {fields}. Fix the arguments and call {tool.name} again."
    )


def _short_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _MAX_INPUT_REPR else text[: _MAX_INPUT_REPR - 3] + "..."
