"""Translate between Gemini REST JSON (camelCase) and ackloop's model types, for the fake server.

Parsing goes through google-genai's own models, so the fake server reads a request exactly as the
SDK wrote it. Thought signatures are sent back in standard base64, as the real API does.
"""

from __future__ import annotations

import base64
from typing import Any

from google.genai import types

from ackloop.jsondict import JsonDict
from ackloop.model.base import ModelRequest, ModelTurn

_STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    408: "DEADLINE_EXCEEDED",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def request_from_rest(model: str, body: JsonDict) -> ModelRequest:
    """The :class:`ModelRequest` a ``generateContent`` body describes. Raises ``ValueError``."""
    contents = [
        types.Content.model_validate(content).model_dump(mode="json", exclude_none=True)
        for content in body.get("contents") or []
    ]
    declarations: list[JsonDict] = []
    for tool in body.get("tools") or []:
        for declaration in types.Tool.model_validate(tool).function_declarations or []:
            declarations.append(declaration.model_dump(mode="json", exclude_none=True))
    system = body.get("systemInstruction") or {}
    system_text = "\n".join(
        str(part["text"]) for part in system.get("parts") or [] if part.get("text") is not None
    )
    generation = body.get("generationConfig") or {}
    schema = generation.get("responseJsonSchema") or generation.get("responseSchema")
    return ModelRequest(
        model=model,
        system_instruction=system_text,
        contents=contents,
        tools=declarations,
        response_schema=schema,
    )


def response_to_rest(turn: ModelTurn, model: str) -> JsonDict:
    """A ``GenerateContentResponse`` body carrying ``turn``."""
    return {
        "candidates": [
            {
                "content": {"role": "model", "parts": [part_to_rest(p) for p in turn.parts]},
                "finishReason": turn.finish_reason or "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": {
            "promptTokenCount": turn.usage.prompt_tokens,
            "candidatesTokenCount": turn.usage.output_tokens,
            "totalTokenCount": turn.usage.total_tokens,
        },
        "modelVersion": turn.model_version or model,
        "responseId": "fake-" + model,
    }


def stream_chunks(turn: ModelTurn, model: str, chunk_chars: int) -> list[JsonDict]:
    """``turn`` as the chunks of a ``streamGenerateContent`` answer, as Gemini splits one: text
    in pieces of ``chunk_chars`` characters (a thought signature on the last piece), each
    function call whole in its own chunk, and the finish reason and usage on the last chunk."""
    parts: list[JsonDict] = []
    for part in turn.parts:
        text = part.get("text")
        if not isinstance(text, str) or len(text) <= chunk_chars:
            parts.append(part)
            continue
        pieces = [text[i:i + chunk_chars] for i in range(0, len(text), chunk_chars)]
        plain = {k: v for k, v in part.items() if k not in ("text", "thought_signature")}
        parts.extend({**plain, "text": piece} for piece in pieces[:-1])
        parts.append({**part, "text": pieces[-1]})
    whole = response_to_rest(turn, model)
    chunks: list[JsonDict] = []
    for part in parts:
        chunks.append({
            "candidates": [{"content": {"role": "model", "parts": [part_to_rest(part)]},
                            "index": 0}],
            "modelVersion": whole["modelVersion"], "responseId": whole["responseId"],
        })
    if not chunks:
        chunks.append({"candidates": [{"index": 0}], "modelVersion": whole["modelVersion"]})
    chunks[-1]["candidates"][0]["finishReason"] = whole["candidates"][0]["finishReason"]
    chunks[-1]["usageMetadata"] = whole["usageMetadata"]
    return chunks


def part_to_rest(part: JsonDict) -> JsonDict:
    """A stored ``Part`` dict in REST form: camelCase keys, standard-base64 thought signature."""
    parsed = types.Part.model_validate(part)
    rest: dict[str, Any] = parsed.model_dump(mode="json", by_alias=True, exclude_none=True)
    if parsed.thought_signature is not None:
        rest["thoughtSignature"] = base64.b64encode(parsed.thought_signature).decode("ascii")
    return rest


def error_body(code: int, message: str, details: list[JsonDict] | None = None) -> JsonDict:
    """A Google API error body: ``{"error": {"code", "message", "status", "details"}}``."""
    error: JsonDict = {
        "code": code,
        "message": message,
        "status": _STATUS_NAMES.get(code, "UNKNOWN"),
    }
    if details:
        error["details"] = details
    return {"error": error}


def retry_info(seconds: float) -> JsonDict:
    """The ``google.rpc.RetryInfo`` detail Gemini attaches to a 429."""
    return {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": f"{seconds:g}s"}
