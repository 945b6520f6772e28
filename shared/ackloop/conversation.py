"""Building Gemini contents from what the store holds.

Contents are Gemini ``Content`` dicts. Every ``function_call`` the model made is answered by a
``function_response`` with the same name (and id when the model gave one), in call order, in
the ``user`` turn that follows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ackloop.wire import FunctionCall

JsonDict = dict[str, Any]

NOT_EXECUTED = {"error": "not executed: the run that asked for this call ended before it ran"}


def user_text(text: str) -> JsonDict:
    return {"role": "user", "parts": [{"text": text}]}


def model_content(parts: Sequence[JsonDict]) -> JsonDict:
    return {"role": "model", "parts": list(parts)}


def function_response_part(call: FunctionCall, response: JsonDict) -> JsonDict:
    body: JsonDict = {"name": call.name, "response": response}
    if call.id:
        body["id"] = call.id
    return {"function_response": body}


def function_responses(calls_and_responses: Sequence[tuple[FunctionCall, JsonDict]]) -> JsonDict:
    return {
        "role": "user",
        "parts": [function_response_part(call, response) for call, response in calls_and_responses],
    }


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
        if content.get("role") != "model":
            continue
        calls = calls_in(content)
        if not calls:
            continue
        following = contents[i + 1] if i + 1 < len(contents) else None
        answered = following is not None and any(
            "function_response" in p for p in following.get("parts", [])
        )
        if not answered:
            fixed.append(function_responses([(c, NOT_EXECUTED) for c in calls]))
    return fixed
