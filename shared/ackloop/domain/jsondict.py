"""The one name for a JSON object as Python holds it: a document's fields, a message's data."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import PlainValidator

JsonDict = dict[str, Any]


def _as_given(value: Any) -> JsonDict:
    if isinstance(value, dict):
        return value
    raise ValueError(f"a JSON object is expected, not {type(value).__name__}")


SharedJsonDict = Annotated[JsonDict, PlainValidator(_as_given, json_schema_input_type=JsonDict)]
"""A :data:`JsonDict` field of a Pydantic model that keeps the object it is given, where a
``JsonDict`` field holds a copy: a content of the history, shared frozen by the process that
decoded it (:mod:`ackloop.domain.frozen`), stays that object on its way to the model, so what
is worked out from it once (:mod:`ackloop.model.validated`) is found again by its identity."""
