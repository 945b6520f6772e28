"""Declarations: flat JSON schema Gemini (and google-genai's model) accepts."""

from __future__ import annotations

import enum
from datetime import datetime
from ipaddress import IPv4Address
from typing import Any, Literal

import pytest
from google.genai import types
from pydantic import BaseModel, Field

from ackloop.tools.definition import tool
from ackloop.tools.schema import SchemaError, parameters_schema
from ackloop.tools.toolset import ToolSet


class Severity(enum.Enum):
    MINOR = "Minor"
    SEVERE = "Severe"


class Address(BaseModel):
    """Where the lead is."""

    city: str = Field(description="City.")
    state: str = Field(description="Two upper-case letters.", pattern=r"^[A-Z]{2}$")


class Lead(BaseModel):
    """A sales lead."""

    name: str = Field(description="Full name.", min_length=1)
    email: str | None = Field(default=None, description="Only if it appears in the text.")
    address: Address
    billing: Address | None = Field(default=None, description="Billing address, if different.")
    others: list[Address] = Field(default_factory=list)
    kind: Literal["person", "company"] = "person"
    severity: Severity = Severity.MINOR
    score: float = Field(default=0.5, gt=0, le=1)
    ip: IPv4Address | None = None
    seen_at: datetime | None = None
    retries: int = Field(default=1, gt=0, lt=10)


def walk_keys(node: Any) -> set[str]:
    if isinstance(node, dict):
        keys = set(node)
        for value in node.values():
            keys |= walk_keys(value)
        return keys
    if isinstance(node, list):
        return set().union(*(walk_keys(item) for item in node)) if node else set()
    return set()


@tool
async def save_lead(lead: Lead) -> str:
    """Save the contact found in the message."""
    return lead.name


def test_nested_models_are_inlined_without_refs() -> None:
    schema = parameters_schema(Lead)
    assert schema is not None
    assert not walk_keys(schema) & {"$ref", "$defs", "allOf", "title", "default", "const"}
    assert schema["required"] == ["name", "address"]
    address = schema["properties"]["address"]
    assert address["type"] == "object"
    assert address["description"] == "Where the lead is."
    assert address["properties"]["state"] == {
        "type": "string",
        "pattern": "^[A-Z]{2}$",
        "description": "Two upper-case letters.",
    }


def test_optional_fields_become_nullable_and_keep_their_description() -> None:
    props = parameters_schema(Lead)["properties"]  # type: ignore[index]
    assert props["email"] == {
        "type": "string",
        "nullable": True,
        "description": "Only if it appears in the text.",
    }
    assert props["billing"]["nullable"] is True
    assert props["billing"]["description"] == "Billing address, if different."
    assert props["billing"]["properties"]["city"]["type"] == "string"


def test_lists_enums_and_formats_are_expressed_for_gemini() -> None:
    props = parameters_schema(Lead)["properties"]  # type: ignore[index]
    assert props["others"]["items"]["properties"]["city"] == {
        "type": "string",
        "description": "City.",
    }
    assert props["kind"] == {"type": "string", "enum": ["person", "company"]}
    assert props["severity"]["enum"] == ["Minor", "Severe"]
    # Gemini rejects string formats other than enum/date-time: the format moves to the text.
    assert props["ip"] == {"type": "string", "nullable": True, "description": "format: ipv4"}
    assert props["seen_at"]["format"] == "date-time"
    assert props["retries"] == {"type": "integer", "minimum": 1, "maximum": 9}
    assert props["score"] == {
        "type": "number",
        "maximum": 1,
        "description": "must be greater than 0",
    }


def test_declarations_validate_as_google_genai_function_declarations() -> None:
    declarations = ToolSet([save_lead]).declarations()
    assert [d["name"] for d in declarations] == ["save_lead"]
    parsed = types.FunctionDeclaration.model_validate(declarations[0])
    assert parsed.parameters is not None and parsed.parameters.properties is not None
    assert parsed.parameters.properties["address"].properties is not None
    assert parsed.description == "Save the contact found in the message."


def test_a_tool_without_arguments_declares_no_parameters() -> None:
    @tool
    async def get_ip_address() -> str:
        """Get the public IP address."""
        return ""

    declaration = get_ip_address.declaration()
    assert declaration == {"name": "get_ip_address", "description": "Get the public IP address."}
    types.FunctionDeclaration.model_validate(declaration)


def test_a_recursive_model_is_refused() -> None:
    class Node(BaseModel):
        children: list[Node] = []

    with pytest.raises(SchemaError, match="nests too deeply"):
        parameters_schema(Node)
