"""The OpenAPI document describes a run's usage and cost field by field (their empty parts are
left out of a response, which must not blank their schema)."""

from __future__ import annotations

from ackloop.api.app import create_app
from ackloop.config.settings import Settings


def test_the_openapi_document_describes_usage_and_cost() -> None:
    schemas = create_app(Settings(api_auth="none")).openapi()["components"]["schemas"]
    assert {"model_calls", "tool_calls", "prompt_tokens", "output_tokens", "total_tokens",
            "cached_tokens", "thinking_tokens", "children"} <= set(schemas["Usage"]["properties"])
    assert {"usd", "prompt_tokens", "cached_tokens", "children_usd", "firestore_reads",
            "price_table"} <= set(schemas["Cost"]["properties"])
