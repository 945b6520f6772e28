"""A tool's description and its parameters' descriptions, read from the function's docstring.

The model chooses a tool by its description and fills each argument by its description, so a
plain function's docstring is split the way its author wrote it: the text before the first
section is the tool's description, and the Google-style ``Args:`` section (or reST
``:param name:`` fields) describes each parameter.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# A Google-style section header ("Args:", "Returns:", ...) on a line of its own.
_SECTION_RE = re.compile(
    r"^(?P<indent>[ \t]*)(?P<name>Args|Arguments|Parameters|Keyword Args|Keyword Arguments"
    r"|Returns|Return|Raises|Yields|Examples?|Notes?|Attributes):[ \t]*$",
    re.M,
)
_PARAMETER_SECTIONS = {"Args", "Arguments", "Parameters", "Keyword Args", "Keyword Arguments"}
# One Google-style entry: "name: text" or "name (type, optional): text".
_ENTRY_RE = re.compile(r"^\*{0,2}(?P<name>\w+)\s*(?:\([^)]*\))?\s*:\s*(?P<text>.*)$")
# A reST field list line: ":param city: ...", ":param str city: ...", ":returns: ...".
_FIELD_RE = re.compile(
    r"^[ \t]*:(?:param|parameter|arg|argument|key|keyword|type|returns?|rtype|raises?|yields?)\b",
    re.M,
)
_REST_PARAM_RE = re.compile(
    r"^:(?:param|parameter|arg|argument|key|keyword)\s+(?:[^:]*\s)?(?P<name>\w+)\s*:\s*(?P<text>.*)$"
)


@dataclass(frozen=True)
class Docstring:
    """What a docstring says: the summary (the tool's description) and each parameter's text."""

    summary: str
    parameters: dict[str, str] = field(default_factory=dict)


def read_docstring(fn: Callable[..., Any]) -> Docstring:
    """Split ``fn``'s docstring into its summary and its parameters' descriptions."""
    return parse_docstring(inspect.getdoc(fn) or "")


def parse_docstring(doc: str) -> Docstring:
    """Split a cleaned docstring (no common indentation) into summary and parameters."""
    cuts = [match.start() for match in (_SECTION_RE.search(doc), _FIELD_RE.search(doc)) if match]
    summary = doc[: min(cuts)] if cuts else doc
    parameters = {**_rest_parameters(doc), **_google_parameters(doc)}
    return Docstring(summary=summary.strip(), parameters=parameters)


def _google_parameters(doc: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for header in _SECTION_RE.finditer(doc):
        if header.group("name") not in _PARAMETER_SECTIONS:
            continue
        header_indent = len(header.group("indent"))
        entry_indent: int | None = None
        current: str | None = None
        for line in doc[header.end() :].splitlines()[1:]:
            if not line.strip():
                continue
            indent = len(line) - len(line.lstrip())
            if indent <= header_indent:
                break  # the next section, or the text after this one
            if entry_indent is None:
                entry_indent = indent
            entry = _ENTRY_RE.match(line.strip()) if indent == entry_indent else None
            if entry is not None:
                current = entry.group("name")
                found[current] = entry.group("text").strip()
            elif current is not None:
                found[current] = f"{found[current]} {line.strip()}".strip()
    return found


def _rest_parameters(doc: str) -> dict[str, str]:
    found: dict[str, str] = {}
    current: str | None = None
    for line in doc.splitlines():
        stripped = line.strip()
        if stripped.startswith(":"):
            match = _REST_PARAM_RE.match(stripped)
            current = match.group("name") if match else None
            if match is not None and current is not None:
                found[current] = match.group("text").strip()
        elif current is not None and stripped and line[:1].isspace():
            found[current] = f"{found[current]} {stripped}".strip()
        else:
            current = None
    return found
