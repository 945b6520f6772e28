"""Agent construction: tools as a list or a Toolbox, and a clear error for what cannot work."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from ackloop.agents.agent import Agent, AgentRegistry, UnknownAgent
from ackloop.tools.definition import tool
from ackloop.tools.toolset import ToolSet
from tests.engine.fakes import CountingToolbox


@tool
async def ping() -> str:
    """Answer pong."""
    return "pong"


@tool("ping")
async def another_ping() -> str:
    """Answer pong too."""
    return "pong"


def test_a_list_of_tools_becomes_a_toolset_and_a_toolbox_is_kept() -> None:
    listed = Agent("support", "Help.", [ping])
    assert isinstance(listed.tools, ToolSet) and listed.tools.names == ["ping"]
    box = CountingToolbox({"lookup": 1})
    assert Agent("support", "Help.", box).tools is box
    assert Agent("bare", "Chat.").tools.declarations() == []


def test_duplicate_tool_names_are_refused_with_the_agent_and_the_name() -> None:
    with pytest.raises(ValueError, match="agent 'support': two tools are named 'ping'"):
        Agent("support", "Help.", [ping, another_ping])


@pytest.mark.parametrize("name", ["", "has space", "-dash-first", "x" * 129, "é"])
def test_a_name_a_query_cannot_carry_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="agent name"):
        Agent(name, "Help.")


def test_wrong_kinds_of_arguments_are_refused_at_construction() -> None:
    with pytest.raises(TypeError, match="list of tools"):
        Agent("a", "Help.", tools=ping)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="output must be a Pydantic model"):
        Agent("a", "Help.", output=dict)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="script"):
        Agent("a", "Help.", script="call ping")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_steps must be positive"):
        Agent("a", "Help.", max_steps=0)


def test_default_is_the_first_agent_when_none_is_named_default() -> None:
    registry = AgentRegistry([Agent("support", "Help."), Agent("billing", "Bill.")])
    assert registry.get("default").name == "support"
    assert "default" in registry and "billing" in registry and "sales" not in registry
    with pytest.raises(UnknownAgent, match="no agent named 'sales'"):
        registry.get("sales")


def test_an_agent_named_default_is_the_default() -> None:
    class Answer(BaseModel):
        text: str

    registry = AgentRegistry([Agent("support", "Help."), Agent("default", "Chat.", output=Answer)])
    assert registry.get("default").output is Answer
