"""The three ways to make a tool, and the checks they make up front."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, Field

from ackloop.domain.wire import FunctionCall
from ackloop.tools.base import ToolContext
from ackloop.tools.definition import Tool, text_tool, tool, typed_tool
from ackloop.tools.toolset import ToolSet


class CepArgs(BaseModel):
    """Arguments for the postal-code lookup."""

    cep: str = Field(description="8 digits.", pattern=r"^\d{8}$")


class CepService:
    """A tool as a bound method over state the service owns."""

    def __init__(self, cities: dict[str, str]) -> None:
        self.cities = cities

    async def lookup(self, args: CepArgs, context: ToolContext) -> str:
        return f"{args.cep}: {self.cities[args.cep]} (attempt {context.attempt})"


def test_tool_takes_name_and_description_from_the_function() -> None:
    @tool
    async def get_weather_alerts(request: CepArgs) -> str:
        """Get weather alerts for a US state.

        Args:
            request: The request object.
        """
        return ""

    assert get_weather_alerts.name == "get_weather_alerts"
    assert get_weather_alerts.description == "Get weather alerts for a US state."
    assert get_weather_alerts.arg_name == "request"
    assert get_weather_alerts.args_model is CepArgs
    assert get_weather_alerts.retry_safe is True


def test_tool_accepts_name_and_description_explicitly() -> None:
    @tool("lookup_cep", "Look up a Brazilian postal code.", retry_safe=False)
    async def anything(args: CepArgs, context: ToolContext) -> str:
        return ""

    assert (anything.name, anything.description) == (
        "lookup_cep",
        "Look up a Brazilian postal code.",
    )
    assert anything.retry_safe is False


async def test_typed_tool_binds_a_method_with_an_explicit_model(context: ToolContext) -> None:
    service = CepService({"64600000": "Picos/PI"})
    lookup = typed_tool("lookup_cep", "Look up a CEP.", CepArgs, service.lookup)
    outcome = await ToolSet([lookup]).execute(
        FunctionCall(name="lookup_cep", args={"args": {"cep": "64600000"}}), context
    )
    assert outcome.response == {"result": "64600000: Picos/PI (attempt 1)"}


async def test_text_tool_passes_one_string(context: ToolContext) -> None:
    async def count_words(text: str) -> str:
        return f"{len(text.split())} words"

    counter = text_tool("count_words", "Count the words in a text.", count_words)
    outcome = await ToolSet([counter]).execute(
        FunctionCall(name="count_words", args={"text": "one two three"}), context
    )
    assert outcome.response == {"result": "3 words"}
    assert counter.declaration() == {
        "name": "count_words",
        "description": "Count the words in a text.",
        "parameters": {
            "type": "object",
            "properties": {"text": {"type": "string", "description": "The input text."}},
            "required": ["text"],
        },
    }


async def test_text_tool_handler_may_take_the_context(context: ToolContext) -> None:
    async def shout(text: str, context: ToolContext) -> str:
        return f"{text.upper()} ({context.run_id})"

    outcome = await ToolSet([text_tool("shout", "Shout.", shout)]).execute(
        FunctionCall(name="shout", args={"text": "hi"}), context
    )
    assert outcome.response == {"result": "HI (run-1)"}


async def test_typed_and_text_tools_take_sync_handlers(context: ToolContext) -> None:
    def lookup(args: CepArgs, context: ToolContext) -> str:
        return f"{args.cep} (attempt {context.attempt})"

    def count_words(text: str) -> str:
        return f"{len(text.split())} words"

    tools = ToolSet(
        [
            typed_tool("lookup_cep", "Look up a CEP.", CepArgs, lookup),
            text_tool("count_words", "Count the words in a text.", count_words),
        ]
    )
    looked_up = await tools.execute(
        FunctionCall(name="lookup_cep", args={"cep": "64600000"}), context
    )
    counted = await tools.execute(FunctionCall(name="count_words", args={"text": "a b"}), context)
    assert looked_up.response == {"result": "64600000 (attempt 1)"}
    assert counted.response == {"result": "2 words"}


def test_a_handler_that_is_not_callable_is_rejected() -> None:
    with pytest.raises(TypeError, match="is not callable"):
        typed_tool("x", "d", CepArgs, "not a function")  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["", "1abc", "has space", "x" * 65, "slash/name"])
def test_invalid_names_are_rejected(name: str) -> None:
    async def handler(args: CepArgs) -> str:
        return ""

    with pytest.raises(ValueError, match="tool name"):
        typed_tool(name, "d", CepArgs, handler)


def test_a_description_is_required() -> None:
    async def handler(args: CepArgs) -> str:
        return ""

    with pytest.raises(ValueError, match="needs a description"):
        typed_tool("nameless", "  ", CepArgs, handler)


def test_duplicate_names_are_rejected() -> None:
    async def handler(args: CepArgs) -> str:
        return ""

    one: Tool = typed_tool("same", "d", CepArgs, handler)
    with pytest.raises(ValueError, match="two tools are named 'same'"):
        ToolSet([one, one])
