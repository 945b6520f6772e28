"""Building the :class:`ToolOutcome` the model reads: JSON-able, masked and size-capped."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from ackloop.domain.document_sizes import depth, unstorable, value_size
from ackloop.telemetry.masking import mask_json, mask_secrets
from ackloop.tools.base import ToolOutcome
from ackloop.tools.files import take_files

MAX_ERROR_CHARS = 2_000


def success_outcome(
    value: Any, max_bytes: int, *, final: bool = False, known: Iterable[str] = ()
) -> ToolOutcome:
    """``{"result": value}``, with secrets masked and the JSON capped at ``max_bytes``.

    A :class:`~ackloop.tools.files.File` in ``value`` (or ``value`` itself) is taken out and
    carried on the outcome, a reference in its place (:func:`ackloop.tools.files.take_files`).

    Raises ``TypeError``/``ValueError`` when ``value`` cannot be turned into JSON.
    """
    value, files = take_files(value)
    result = mask_json(to_json_value(value), known)
    if not storable(result):
        # Firestore stores no array directly in an array and no value nested deeper than 20
        # levels (this one sits 8 levels down in a transcript): the model reads it as JSON text.
        result = json.dumps(result, ensure_ascii=False)
    return ToolOutcome(response={"result": cap_result(result, max_bytes)}, final=final,
                       files=tuple(files))


RESULT_DEPTH = 10
"""The deepest a tool's result may nest maps and arrays and be kept as it is: it is stored in
the transcript 8 levels down (turn, contents, parts, function response...), and Firestore
stores 20."""


def storable(result: Any) -> bool:
    """Whether Firestore can keep ``result`` as it is, where a tool's result is kept."""
    return depth(result) <= RESULT_DEPTH and unstorable({"result": result}) is None


def error_outcome(message: str, *, known: Iterable[str] = ()) -> ToolOutcome:
    """``{"error": message}`` with secrets masked; long messages are cut."""
    text = mask_secrets(message, known)
    if len(text) > MAX_ERROR_CHARS:
        text = text[:MAX_ERROR_CHARS] + "... [truncated]"
    return ToolOutcome(response={"error": text}, is_error=True)


def to_json_value(value: Any) -> Any:
    """A string stays a string; a Pydantic model is dumped in JSON mode; the rest must be
    JSON-able (dataclasses, datetimes and the like are converted as Pydantic would)."""
    if isinstance(value, str):
        return value
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return to_jsonable_python(value)


def cap_result(result: Any, max_bytes: int) -> Any:
    """``result`` unchanged when ``{"result": result}`` fits in ``max_bytes`` (of JSON, and as
    Firestore sizes it); otherwise
    the longest prefix of its text that fits once JSON-escaped, ending with a marker that tells
    the model how much was left out (text that escapes heavily keeps fewer characters, never
    none while one fits)."""
    size = _json_size(result)
    if size <= max_bytes:
        return result
    text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)
    total = len(text.encode())

    def capped(chars: int) -> str:
        cut = text[:chars]
        return f"{cut}\n...[truncated: {total - len(cut.encode())} of {total} bytes omitted]"

    # The longest prefix that fits: the JSON size grows with the prefix, so bisect on it.
    fits, too_long = 0, len(text)
    while too_long - fits > 1:
        middle = (fits + too_long) // 2
        if _json_size(capped(middle)) <= max_bytes:
            fits = middle
        else:
            too_long = middle
    return capped(fits)


def _json_size(result: Any) -> int:
    """``{"result": result}``'s size: its JSON bytes or its size in Firestore (where a number is
    8 bytes), whichever is more, so a capped result also fits where it is stored."""
    wrapped = {"result": result}
    return max(len(json.dumps(wrapped, ensure_ascii=False).encode()), value_size(wrapped))
