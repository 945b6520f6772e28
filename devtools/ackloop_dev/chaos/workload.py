"""The questions a chaos run asks, and how a request or a run is traced back to its question.

Every run asks one of a few seed-agent questions with a reference appended, ``(ref c7-0042)``.
The reference changes nothing in the answer (the scripted agent reads only the state, "ip" or
"where am I") but lets the model server's ledger and the checks name the run of every request.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_REF = re.compile(r"\(ref ([a-z0-9-]+)\)")


@dataclass(frozen=True)
class Template:
    """One question and which tool APIs it reaches."""

    name: str
    text: str
    tools: tuple[str, ...]


TEMPLATES = (
    Template("alerts_ny", "What are the weather alerts for New York?", ("nws",)),
    Template("alerts_ca", "Any weather alerts in California right now?", ("nws",)),
    Template("alerts_tx", "Show me the weather alerts for Texas.", ("nws",)),
    Template("ip", "What is my ip address?", ("ip",)),
    Template("where", "Where am I?", ("ip", "ipapi")),
    Template("alerts_here", "Are there any weather alerts where I am?", ("ip", "ipapi", "nws")),
)
BY_NAME = {t.name: t for t in TEMPLATES}


def question(template: Template, ref: str) -> str:
    """The text a run asks."""
    return f"{template.text} (ref {ref})"


def reference_of(text: str) -> str | None:
    """The ``ref`` of a question, or None."""
    match = _REF.search(text)
    return match.group(1) if match else None


def pick(index: int) -> Template:
    """The template of run ``index``: a fixed rotation, so the mix is the same every time."""
    return TEMPLATES[index % len(TEMPLATES)]


def question_text(content: dict[str, Any]) -> str | None:
    """The text of a user question (not a tool result) in a Gemini content, or None: where a
    run's part of a conversation starts."""
    parts = content.get("parts") or []
    if content.get("role", "user") != "user" or any("function_response" in p for p in parts):
        return None
    texts = [str(p["text"]) for p in parts if p.get("text")]
    return " ".join(texts) if texts else None
