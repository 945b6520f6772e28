"""Read a request's contents the way a stateless scripted model must: from scratch, every call.

A scripted model keeps no memory between calls (each call may run in another process, and a
redelivered step must get the same answer), so everything it decides comes from here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ackloop.domain.jsondict import JsonDict


@dataclass(frozen=True)
class ToolResult:
    """One ``function_response`` part: the tool's name and the dict it answered."""

    name: str
    response: JsonDict

    @property
    def error(self) -> str | None:
        """The error text when the tool failed (``{"error": ...}``), else None."""
        value = self.response.get("error")
        return None if value is None else str(value)

    @property
    def result(self) -> object:
        """The tool's result (``{"result": ...}``), or the whole response when it has no key."""
        return self.response.get("result", self.response)


@dataclass(frozen=True)
class Exchange:
    """The current run's part of the contents: the question and what happened since."""

    question: str
    """Text of the latest user message that is not a tool result ("" when there is none)."""
    results: list[ToolResult] = field(default_factory=list)
    """Every function response after the question, oldest first."""
    model_contents: list[JsonDict] = field(default_factory=list)
    """Model-role contents after the question: the turns this run already took."""

    def last_result(self, name: str) -> ToolResult | None:
        """The most recent result of tool ``name`` in this exchange."""
        for result in reversed(self.results):
            if result.name == name:
                return result
        return None


def read_exchange(contents: Sequence[JsonDict]) -> Exchange:
    """Split off the current exchange: everything after the last user question."""
    start = 0
    question = ""
    for index, content in enumerate(contents):
        texts = _user_texts(content)
        if texts is not None:
            start, question = index + 1, texts
    results: list[ToolResult] = []
    model_contents: list[JsonDict] = []
    for content in contents[start:]:
        if content.get("role") == "model":
            model_contents.append(content)
            continue
        for part in content.get("parts") or []:
            response = part.get("function_response")
            if isinstance(response, dict):
                results.append(
                    ToolResult(
                        name=str(response.get("name", "")), response=response.get("response") or {}
                    )
                )
    return Exchange(question=question, results=results, model_contents=model_contents)


def count_model_contents(contents: Sequence[JsonDict]) -> int:
    """How many model turns the whole conversation holds (earlier runs included)."""
    return sum(1 for content in contents if content.get("role") == "model")


def _user_texts(content: JsonDict) -> str | None:
    """The text of a user message, or None when it is a tool result or not from the user."""
    if content.get("role", "user") != "user":
        return None
    parts = content.get("parts") or []
    if any("function_response" in part for part in parts):
        return None
    texts = [str(part["text"]) for part in parts if part.get("text")]
    return "\n".join(texts) if texts else None
