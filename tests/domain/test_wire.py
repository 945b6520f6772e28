"""The wire models reject what Firestore could not store, at the edge, on every entry path."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from ackloop.domain.wire import QueryMessage, RunOptions


def test_lone_surrogates_and_blank_text_are_rejected() -> None:
    body = {"request_id": "r1", "text": "hi \ud800"}
    with pytest.raises(ValidationError, match="unicode"):
        QueryMessage.model_validate(body)  # as the HTTP API hands it over, after json.loads
    with pytest.raises(ValidationError, match="Invalid JSON"):
        QueryMessage.model_validate_json(json.dumps(body))  # as a Pub/Sub message arrives
    with pytest.raises(ValidationError, match="blank"):
        QueryMessage(request_id="r1", text="   ")


def test_ids_cannot_name_other_documents() -> None:
    for bad in ("a/b", "__reserved", "", "x" * 129, "../runs"):
        with pytest.raises(ValidationError):
            QueryMessage(request_id=bad, text="hi")


def test_output_schema_depth_and_token_budget_are_bounded() -> None:
    deep: dict = {"type": "object"}
    node = deep
    for _ in range(8):
        node["properties"] = {"x": {"type": "object"}}
        node = node["properties"]["x"]
    with pytest.raises(ValidationError, match="deeply nested"):
        RunOptions(output_schema=deep)
    with pytest.raises(ValidationError):
        RunOptions(max_tokens=10**12)
    assert RunOptions(output_schema={"type": "object"}).output_schema == {"type": "object"}
