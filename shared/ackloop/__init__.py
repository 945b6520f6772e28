"""ackloop: durable AI agents on Pub/Sub and Firestore.

Every step of the agent loop (one model call, one tool call) is a stateless function triggered
by one Pub/Sub message. Firestore holds the conversation and the step records; Pub/Sub's
at-least-once redelivery plus the step records' dedupe make the loop durable.
Start reading at ``docs/architecture.md``.

``from ackloop import ...`` is the public surface: what a user needs to define agents and tools
and to test them. Everything else is internal. The names load lazily (PEP 562), so a function's
cold start, which imports ``ackloop.config.settings``, does not import every public module.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# Public name -> "module:attribute". A new name goes here and in the TYPE_CHECKING block below
# (imported ``as`` itself, so that strict type checkers see it re-exported).
_PUBLIC: dict[str, str] = {
    # Tools
    "FinalResult": "ackloop.tools.errors:FinalResult",
    "File": "ackloop.tools.files:File",
    "NoArguments": "ackloop.tools.parameters:NoArguments",
    "Tool": "ackloop.tools.definition:Tool",
    "ToolContext": "ackloop.tools.base:ToolContext",
    "ToolError": "ackloop.tools.errors:ToolError",
    "ToolOutcome": "ackloop.tools.base:ToolOutcome",
    "ToolSet": "ackloop.tools.toolset:ToolSet",
    "Toolbox": "ackloop.tools.base:Toolbox",
    "text_tool": "ackloop.tools.definition:text_tool",
    "tool": "ackloop.tools.definition:tool",
    "typed_tool": "ackloop.tools.definition:typed_tool",
    # Tools from an MCP server (the SDK loads when a server is first used)
    "MCPServer": "ackloop.tools.mcp:MCPServer",
    "mcp_tools": "ackloop.tools.mcp:mcp_tools",
    "sleep_tool": "ackloop.tools.sleep:sleep_tool",
    # Agents and where they come from
    "Agent": "ackloop.agents.agent:Agent",
    "Context": "ackloop.domain.context_window:Context",
    "CatalogError": "ackloop.agents.catalog:CatalogError",
    "Schedule": "ackloop.domain.schedules:Schedule",
    # Scripted models, for the offline stack and tests
    "Conversation": "ackloop.model.function_model:Conversation",
    "FunctionModel": "ackloop.model.function_model:FunctionModel",
    "Reply": "ackloop.model.function_model:Reply",
    "ScriptedTurns": "ackloop.model.function_model:ScriptedTurns",
    "TestModel": "ackloop.model.tool_sweep:TestModel",
    "call": "ackloop.model.function_model:call",
    "calls": "ackloop.model.function_model:calls",
    "text": "ackloop.model.function_model:text",
    # Running agents in-process in tests
    "AgentResult": "ackloop.testing.agent_tester:AgentResult",
    "AgentTester": "ackloop.testing.agent_tester:AgentTester",
    "run_agent": "ackloop.testing.agent_tester:run_agent",
}

__all__ = ["__version__", *_PUBLIC]

if TYPE_CHECKING:
    from ackloop.agents.agent import Agent as Agent
    from ackloop.agents.catalog import CatalogError as CatalogError
    from ackloop.domain.context_window import Context as Context
    from ackloop.domain.schedules import Schedule as Schedule
    from ackloop.model.function_model import Conversation as Conversation
    from ackloop.model.function_model import FunctionModel as FunctionModel
    from ackloop.model.function_model import Reply as Reply
    from ackloop.model.function_model import ScriptedTurns as ScriptedTurns
    from ackloop.model.function_model import call as call
    from ackloop.model.function_model import calls as calls
    from ackloop.model.function_model import text as text
    from ackloop.model.tool_sweep import TestModel as TestModel
    from ackloop.testing.agent_tester import AgentResult as AgentResult
    from ackloop.testing.agent_tester import AgentTester as AgentTester
    from ackloop.testing.agent_tester import run_agent as run_agent
    from ackloop.tools.base import Toolbox as Toolbox
    from ackloop.tools.base import ToolContext as ToolContext
    from ackloop.tools.base import ToolOutcome as ToolOutcome
    from ackloop.tools.definition import Tool as Tool
    from ackloop.tools.definition import text_tool as text_tool
    from ackloop.tools.definition import tool as tool
    from ackloop.tools.definition import typed_tool as typed_tool
    from ackloop.tools.errors import FinalResult as FinalResult
    from ackloop.tools.errors import ToolError as ToolError
    from ackloop.tools.files import File as File
    from ackloop.tools.mcp import MCPServer as MCPServer
    from ackloop.tools.mcp import mcp_tools as mcp_tools
    from ackloop.tools.parameters import NoArguments as NoArguments
    from ackloop.tools.sleep import sleep_tool as sleep_tool
    from ackloop.tools.toolset import ToolSet as ToolSet


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use and cache the name in this module."""
    target = _PUBLIC.get(name)
    if target is None:
        raise AttributeError(f"module 'ackloop' has no attribute {name!r}")
    module_name, attribute = target.split(":")
    value = getattr(importlib.import_module(module_name), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
