"""Build realistic :class:`ModelTurn` values without a model: for scripted models and tests.

Parts are produced through google-genai's own ``Part`` model and dumped the way the Gemini adapter
dumps a real response, so a scripted turn is byte-for-byte the shape the engine will store.
google-genai (0.3 s of CPU to import) is imported on the first turn built, not with this module:
the agent catalog imports it in every process, and only a model step builds turns.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ackloop.domain.jsondict import JsonDict
from ackloop.domain.wire import FunctionCall, Usage
from ackloop.model.base import ModelRequest, ModelTurn

CallSpec = FunctionCall | tuple[str, Mapping[str, Any]]
"""A call to put in a turn: a :class:`FunctionCall`, or ``(name, args)``."""


def text_turn(
    text: str, *, request: ModelRequest | None = None, model_version: str = "scripted"
) -> ModelTurn:
    """A final answer: one text part, ``finish_reason="STOP"``.

    Pass ``request`` to get prompt-token usage estimated from what the model was shown.
    """
    from google.genai import types

    part = types.Part(text=text).model_dump(mode="json", exclude_none=True)
    return ModelTurn(
        parts=[part],
        text=text,
        usage=estimate_usage(request, [part]),
        finish_reason="STOP",
        model_version=model_version,
    )


def calls_turn(
    calls: Sequence[CallSpec],
    *,
    thought_signature: bytes | None = None,
    request: ModelRequest | None = None,
    model_version: str = "scripted",
) -> ModelTurn:
    """A turn asking for one or more (parallel) function calls.

    ``thought_signature`` goes on the first call part only, which is where Gemini 3 puts it.
    """
    if not calls:
        raise ValueError("a calls turn needs at least one call")
    from google.genai import types

    normalized = [_as_call(call) for call in calls]
    parts: list[JsonDict] = []
    for index, call in enumerate(normalized):
        part = types.Part(
            function_call=types.FunctionCall(name=call.name, args=dict(call.args), id=call.id),
            thought_signature=thought_signature if index == 0 else None,
        )
        parts.append(part.model_dump(mode="json", exclude_none=True))
    return ModelTurn(
        parts=parts,
        calls=normalized,
        usage=estimate_usage(request, parts),
        finish_reason="STOP",
        model_version=model_version,
    )


def estimate_usage(request: ModelRequest | None, output_parts: Iterable[JsonDict]) -> Usage:
    """Token usage approximated by word counts: stable, cheap and of a plausible size."""
    prompt = 0
    if request is not None:
        prompt = (
            _words(request.system_instruction) + _words(request.contents) + _words(request.tools)
        )
    output = _words(list(output_parts))
    return Usage(
        model_calls=1, prompt_tokens=prompt, output_tokens=output, total_tokens=prompt + output
    )


def _as_call(call: CallSpec) -> FunctionCall:
    if isinstance(call, FunctionCall):
        return call
    name, args = call
    return FunctionCall(name=name, args=dict(args))


def _words(value: object) -> int:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return len(text.split())
