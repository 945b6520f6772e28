"""How Firestore measures what it stores: the size it limits (1 MiB a document) and the nesting
it allows (maps and arrays 20 levels deep below a document's fields, and no array directly in
an array).

Firestore does not size a value as its JSON text. A number is 8 bytes whatever its digits, a
string its UTF-8 bytes plus one, a map the sizes of its keys (each a string) and values, an
array the sizes of its elements: ``{"z": [0] * 8000}`` is 16 KB of JSON and 64 KB in Firestore.
A limit checked in JSON bytes therefore lets through values that Firestore refuses, and what
the engine keeps of a caller's or a tool's value is measured here instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date, datetime
from typing import Any

MAX_DEPTH = 20
"""The deepest a field's value may nest maps and arrays (:func:`depth`), as the emulator and
Firestore refuse ("invalid nested entity") one level more."""


def value_size(value: Any) -> int:
    """The storage size Firestore gives ``value``."""
    if value is None or isinstance(value, bool):
        return 1
    if isinstance(value, (int, float, datetime, date)):
        return 8
    if isinstance(value, str):
        return len(value.encode("utf-8", "surrogatepass")) + 1
    if isinstance(value, (bytes, bytearray)):
        return len(value)
    if isinstance(value, Mapping):
        return sum(value_size(str(key)) + value_size(item) for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return sum(value_size(item) for item in value)
    return value_size(str(value))


def name_size(path: str) -> int:
    """A document name's size: each collection and document id as a string, plus 16."""
    return sum(value_size(part) for part in path.split("/")) + 16


def document_size(path: str, data: Mapping[str, Any]) -> int:
    """A document's size: its name, its fields (names and values) and 32 bytes."""
    return name_size(path) + value_size(data) + 32


def depth(value: Any) -> int:
    """How deep maps and arrays nest in ``value``: 0 for a scalar, 1 for a flat map or array."""
    if isinstance(value, Mapping):
        return 1 + max((depth(item) for item in value.values()), default=0)
    if isinstance(value, (list, tuple)):
        return 1 + max((depth(item) for item in value), default=0)
    return 0


def unstorable(data: Mapping[str, Any]) -> str | None:
    """Why Firestore would refuse a document with these fields (nesting deeper than
    :data:`MAX_DEPTH`, an array directly in an array), or None."""
    levels = max((depth(value) for value in data.values()), default=0)
    if levels > MAX_DEPTH:
        return f"maps and arrays nest {levels} levels deep (at most {MAX_DEPTH})"
    if _array_in_array(data, inside_array=False):
        return "an array holds an array (Firestore stores no array directly in an array)"
    return None


def _array_in_array(value: Any, *, inside_array: bool) -> bool:
    if isinstance(value, Mapping):
        return any(_array_in_array(item, inside_array=False) for item in value.values())
    if isinstance(value, (list, tuple)):
        return inside_array or any(_array_in_array(item, inside_array=True) for item in value)
    return False
