"""Building Gemini contents from what the store holds.

Contents are Gemini ``Content`` dicts. Every ``function_call`` the model made is answered by a
``function_response`` with the same name (and id when the model gave one), in call order, in
the ``user`` turn that follows.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from pydantic import ValidationError

from ackloop import files as files_module
from ackloop.domain.jsondict import JsonDict
from ackloop.domain.wire import FunctionCall
from ackloop.tools.files import model_readable

NOT_EXECUTED = {"error": "not executed: the run that asked for this call ended before it ran"}

TURN_RESULTS_BYTES = 512 * 1024
"""Most a turn's tool results may take together. They are appended to the transcript as one
content, and a Firestore document holds at most 1 MiB: many large results are cut to fit."""


def user_text(text: str) -> JsonDict:
    return {"role": "user", "parts": [{"text": text}]}


def user_content(text: str, files: Sequence[JsonDict] = ()) -> JsonDict:
    """A user's question: its files first (``file_data`` parts naming them, never their bytes:
    :mod:`ackloop.files`), then its text, the order Gemini's guide advises."""
    return {"role": "user", "parts": [*(dict(part) for part in files), {"text": text}]}


def model_content(parts: Sequence[JsonDict]) -> JsonDict:
    return {"role": "model", "parts": list(parts)}


def function_response_part(call: FunctionCall, response: JsonDict) -> JsonDict:
    """The ``function_response`` part answering ``call``. The files a tool returned (the
    tool step's ``response["files"]``: :func:`ackloop.engine.tool_step.store_files`) become
    its ``parts``, one ``file_data`` part per file the model reads, named by ``display_name``
    as the response's ``{"$ref": name}`` names it; the model step turns them into what Gemini
    is sent (:func:`ackloop.files.for_request`). The list itself is not sent."""
    files = response.get("files")
    stored = _stored_files(files)
    if stored is not None:
        response = {key: value for key, value in response.items() if key != "files"}
    body: JsonDict = {"name": call.name, "response": response}
    if call.id:
        body["id"] = call.id
    parts = [files_module.stored_part(s) for s in stored or () if model_readable(s.mime_type)]
    if parts:
        body["parts"] = parts
    return {"function_response": body}


def _stored_files(files: object) -> list[files_module.StoredFile] | None:
    """A response's ``files`` as stored files; None when it is not such a list (a tool that
    built its own response may use the key for something else: it is then left alone)."""
    if not isinstance(files, list) or not files:
        return None
    try:
        return [files_module.StoredFile.model_validate(entry) for entry in files]
    except ValidationError:
        return None


def function_responses(calls_and_responses: Sequence[tuple[FunctionCall, JsonDict]]) -> JsonDict:
    pairs = _fitted(calls_and_responses, TURN_RESULTS_BYTES)
    return {
        "role": "user",
        "parts": [function_response_part(call, response) for call, response in pairs],
    }


def _fitted(
    pairs: Sequence[tuple[FunctionCall, JsonDict]], budget: int
) -> list[tuple[FunctionCall, JsonDict]]:
    """The responses, the largest cut down (with a note for the model) until all fit."""
    sizes = [len(json.dumps(r, ensure_ascii=False)) for _, r in pairs]
    if sum(sizes) <= budget or not pairs:
        return list(pairs)
    # The largest share that fits: every response at or under it is kept whole.
    share = budget // len(pairs)
    small = [s for s in sizes if s <= share]
    while small and (room := (budget - sum(small)) // max(1, len(sizes) - len(small))) > share:
        share = room
        small = [s for s in sizes if s <= share]
    fitted = []
    for (call, response), size in zip(pairs, sizes, strict=True):
        if size > share:
            text = _cut(json.dumps(response, ensure_ascii=False), max(0, share - 200))
            cut: JsonDict = {"truncated": text, "note": f"this result was {size} bytes; the "
                             f"turn's results are limited to {budget} bytes, so it was cut"}
            if _stored_files(response.get("files")) is not None:
                cut["files"] = response["files"]  # the stored files still reach the model
            response = cut
        fitted.append((call, response))
    return fitted


def _cut(text: str, limit: int) -> str:
    """The longest prefix of ``text`` whose JSON encoding fits ``limit`` bytes (escapes count)."""
    cut = text[:limit]
    while cut and (encoded := len(json.dumps(cut, ensure_ascii=False).encode())) > limit:
        cut = cut[: max(0, len(cut) * limit // encoded - 1)]
    return cut


def calls_in(content: JsonDict) -> list[FunctionCall]:
    calls = []
    for part in content.get("parts", []):
        fc = part.get("function_call")
        if fc:
            calls.append(FunctionCall(name=fc["name"], args=fc.get("args") or {}, id=fc.get("id")))
    return calls


def answer_dangling_calls(contents: Sequence[JsonDict]) -> list[JsonDict]:
    """Return ``contents`` with any unanswered function calls answered as "not executed".

    A run can end (budget, failure, cancellation) right after the model asked for tools. The
    next turn of the conversation must still send Gemini a well-formed history.
    """
    fixed: list[JsonDict] = []
    for i, content in enumerate(contents):
        fixed.append(content)
        # Only a call left unanswered is parsed: this runs over the whole view on every turn.
        if content.get("role") != "model" or not any(
            p.get("function_call") for p in content.get("parts", [])
        ):
            continue
        following = contents[i + 1] if i + 1 < len(contents) else None
        answered = following is not None and any(
            "function_response" in p for p in following.get("parts", [])
        )
        if not answered:
            fixed.append(function_responses([(c, NOT_EXECUTED) for c in calls_in(content)]))
    return fixed
