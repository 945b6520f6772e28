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

from ackloop.domain.jsondict import JsonDict
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


def function_response_media(contents: list[JsonDict]) -> list[JsonDict]:
    """Check the media parts of every function response in ``contents`` (as
    :func:`request_from_rest` returns them) as Gemini would, and describe each one.

    A part holds exactly one of ``inline_data`` (a MIME type Gemini reads in a function
    response, and bytes) or ``file_data`` (a ``gs://`` or ``https://`` URI: a URI of ackloop's
    own store, say ``mem://``, never reaches Gemini); display names are unique in a response,
    and each ``{"$ref": name}`` in the response names one of them. Raises ``ValueError`` saying
    what is wrong. A description: the function, the display name, the MIME type and, for
    inline data, the byte count, the SHA-256 and, for an image, its format and size read from
    its header (``"PNG 20x20"``)."""
    from ackloop.tools.files import MODEL_READABLE

    seen: list[JsonDict] = []
    for content in contents:
        for part in content.get("parts") or []:
            response = part.get("function_response")
            if not isinstance(response, dict) or not response.get("parts"):
                continue
            name = response.get("name")
            names: set[str] = set()
            for n, media in enumerate(response["parts"]):
                where = f"function_response {name!r} part {n}"
                inline, file = media.get("inline_data"), media.get("file_data")
                if (inline is None) == (file is None):
                    raise ValueError(f"{where}: needs exactly one of inline_data, file_data")
                held = inline or file
                mime = held.get("mime_type")
                if mime not in MODEL_READABLE:
                    raise ValueError(f"{where}: mime type {mime!r} is not supported in a "
                                     f"function response ({', '.join(sorted(MODEL_READABLE))})")
                display = held.get("display_name")
                if display is not None:
                    if display in names:
                        raise ValueError(f"{where}: display name {display!r} is used twice")
                    names.add(display)
                described: JsonDict = {"function": name, "display_name": display,
                                       "mime_type": mime}
                if inline is not None:
                    # google-genai's JSON dump writes bytes in URL-safe base64
                    data = base64.urlsafe_b64decode(str(inline.get("data") or "")
                                                    .replace("+", "-").replace("/", "_"))
                    if not data:
                        raise ValueError(f"{where}: inline_data has no data")
                    described.update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
                    if (image := image_header(data)) is not None:
                        described["image"] = image
                else:
                    uri = str(file.get("file_uri") or "")
                    if not uri.startswith(("gs://", "https://")):
                        raise ValueError(f"{where}: file_uri {uri!r} is not one Gemini can "
                                         "read (gs:// or https://)")
                    described["file_uri"] = uri
                seen.append(described)
            for ref in _refs(response.get("response")):
                if ref not in names:
                    raise ValueError(f"function_response {name!r}: $ref {ref!r} names no part")
    return seen


def _refs(value: object) -> list[str]:
    if isinstance(value, dict):
        own = [str(value["$ref"])] if set(value) == {"$ref"} else []
        return own + [ref for v in value.values() for ref in _refs(v)]
    if isinstance(value, list):
        return [ref for v in value for ref in _refs(v)]
    return []


def image_header(data: bytes) -> str | None:
    """An image's format and size from its header (``"PNG 20x20"``), or None when ``data``
    is no PNG, GIF or JPEG the header tells."""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24 and data[12:16] == b"IHDR":
        width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
        return f"PNG {width}x{height}"
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        width, height = int.from_bytes(data[6:8], "little"), int.from_bytes(data[8:10], "little")
        return f"GIF {width}x{height}"
    if data[:2] == b"\xff\xd8":
        at = 2
        while at + 9 <= len(data) and data[at] == 0xFF:
            marker, length = data[at + 1], int.from_bytes(data[at + 2:at + 4], "big")
            if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
                height = int.from_bytes(data[at + 5:at + 7], "big")
                width = int.from_bytes(data[at + 7:at + 9], "big")
                return f"JPEG {width}x{height}"
            at += 2 + length
    return None
