"""Translate between Gemini REST JSON (camelCase) and ackloop's model types, for the fake server.

Parsing goes through google-genai's own models, so the fake server reads a request exactly as the
SDK wrote it. Thought signatures are sent back in standard base64, as the real API does. Token
counts are :func:`ackloop.model.turns.estimate_usage`'s word counts.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

from google.genai import types

from ackloop.jsondict import JsonDict
from ackloop.model.base import ModelRequest, ModelTurn
from ackloop.model.turns import estimate_usage

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


def prompt_tokens(request: ModelRequest) -> int:
    """The request's prompt token count, as ``usageMetadata.promptTokenCount`` reports it for
    the built-in policies: system instruction, contents and tools."""
    return estimate_usage(request, []).prompt_tokens


def too_many_tokens_message(tokens: int, limit: int) -> str:
    """Gemini's 400 message for a request above the model's input limit, word for word."""
    return (f"The input token count ({tokens}) exceeds the maximum number of tokens allowed "
            f"({limit}).")


def prefix_digests(body: JsonDict) -> list[bytes]:
    """Digests of a ``generateContent`` body's cumulative prefixes: the first covers the system
    instruction and tools, the next one adds the first content, and so on, one more content
    each. Two bodies share a digest when those leading pieces are the same JSON (canonical: keys
    sorted, no spaces), so a digest stands for a prefix an implicit cache could reuse."""
    digest = hashlib.sha256()
    digests: list[bytes] = []
    pieces: list[object] = [
        {"systemInstruction": body.get("systemInstruction"), "tools": body.get("tools")},
        *(body.get("contents") or []),
    ]
    for piece in pieces:
        data = json.dumps(piece, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                          default=str).encode()
        digest.update(len(data).to_bytes(8, "big") + data)
        digests.append(digest.copy().digest())
    return digests


def response_to_rest(turn: ModelTurn, model: str, *, cached_tokens: int = 0) -> JsonDict:
    """A ``GenerateContentResponse`` body carrying ``turn``.

    ``cachedContentTokenCount`` is there when ``cached_tokens`` is (capped at the prompt's count,
    which includes them, as Gemini's does); ``thoughtsTokenCount`` when the turn has thought
    parts, their words taken out of ``candidatesTokenCount`` (the total stays the same).
    """
    usage = turn.usage
    thought_parts = [part for part in turn.parts if part.get("thought")]
    thoughts = (min(estimate_usage(None, thought_parts).output_tokens, usage.output_tokens)
                if thought_parts else 0)
    metadata: JsonDict = {
        "promptTokenCount": usage.prompt_tokens,
        "candidatesTokenCount": usage.output_tokens - thoughts,
        "totalTokenCount": usage.total_tokens,
    }
    cached = min(cached_tokens, usage.prompt_tokens)
    if cached > 0:
        metadata["cachedContentTokenCount"] = cached
    if thoughts:
        metadata["thoughtsTokenCount"] = thoughts
    return {
        "candidates": [
            {
                "content": {"role": "model", "parts": [part_to_rest(p) for p in turn.parts]},
                "finishReason": turn.finish_reason or "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": metadata,
        "modelVersion": turn.model_version or model,
        "responseId": "fake-" + model,
    }


def stream_chunks(
    turn: ModelTurn, model: str, chunk_chars: int, *, cached_tokens: int = 0
) -> list[JsonDict]:
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
    whole = response_to_rest(turn, model, cached_tokens=cached_tokens)
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
