"""Regular expressions that callers supply, matched in linear time.

An ``output_schema`` may hold JSON Schema ``pattern`` keywords, and an answer is checked against
them inside a model step. Python's ``re`` backtracks: ``^(?:.|.){28}X`` takes seconds per check
and doubles with every repetition, blocking the step's event loop (and its heartbeat). Caller
patterns are therefore compiled and matched with RE2, whose time is linear in the input, and a
pattern RE2 cannot run (backreferences, lookaround) is refused when the run is requested.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import re2

MAX_PATTERN_CHARS = 1_000

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a refused pattern is reported to the caller, not logged by RE2
_OPTIONS.max_mem = 8 << 20  # bounds the compiled program (and so the pattern's cost)


@functools.lru_cache(maxsize=256)
def compiled(pattern: str) -> Any:
    """The RE2 program of ``pattern``; raises ``ValueError`` with the reason if RE2 refuses it."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ValueError(f"pattern longer than {MAX_PATTERN_CHARS} characters")
    try:
        return re2.compile(pattern, options=_OPTIONS)
    except re2.error as exc:
        raise ValueError(f"pattern {pattern!r} is not supported: patterns are matched with RE2 "
                         f"(no backreferences or lookaround): {exc}") from exc


def search(pattern: str, text: str) -> bool:
    """Whether ``pattern`` matches somewhere in ``text`` (JSON Schema's ``pattern`` semantics)."""
    return compiled(pattern).search(text) is not None


def schema_patterns(schema: Any) -> Iterator[str]:
    """Every ``pattern`` keyword in a JSON Schema (any nesting)."""
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "pattern" and isinstance(value, str):
                yield value
            else:
                yield from schema_patterns(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from schema_patterns(item)


def has_pattern_properties(schema: Any) -> bool:
    if isinstance(schema, dict):
        return any((key == "patternProperties" and isinstance(value, dict))
                   or has_pattern_properties(value) for key, value in schema.items())
    if isinstance(schema, list):
        return any(has_pattern_properties(item) for item in schema)
    return False
