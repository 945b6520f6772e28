"""The agents this deployment ships, and how the offline model plays each of them.

- ``default``: the seed agent: weather alerts, IP address, location; haikus when no tool fits.
- ``reference``: the benchmark workload, model -> tool -> model -> tool -> model with an
  instant tool, so what is measured is the engine and not the tools.
- ``reference-long``: the same loop, as many tool calls as the question asks (``calls=N``), to
  measure how the cost of a step grows with the length of the conversation.

The two benchmark agents are registered only when ``ACKLOOP_BENCH_AGENTS`` is on (the local
stack and ``ackloop bench`` set it): a deployment serves ``default`` alone.

Add an agent by appending an :class:`~ackloop.agents.AgentDefinition` to
:func:`builtin_agents` (see the README, "Define an agent").
"""

from __future__ import annotations

import functools
import re

import httpx
from pydantic import BaseModel, Field

from ackloop.agents import SEED_INSTRUCTIONS, AgentDefinition
from ackloop.model.base import ModelRequest, ModelTurn
from ackloop.model.final_answer_script import with_final_answer
from ackloop.model.scripted import Script, ScriptedModel, reference_workload_script
from ackloop.model.seed_agent import seed_agent_turn
from ackloop.model.transcript import read_exchange
from ackloop.settings import Settings
from ackloop.tools.definition import tool
from ackloop.tools.seed import seed_toolset
from ackloop.tools.toolset import ToolSet

REFERENCE_TOOL = "bench_lookup"
REFERENCE_CALLS = 2
_CALLS_ASKED = re.compile(r"\bcalls=(\d{1,4})\b")


class BenchLookup(BaseModel):
    """Arguments of the benchmark tool."""

    key: str = Field(default="k", description="Any key; the answer does not depend on it.")


@tool(REFERENCE_TOOL)
async def bench_lookup(args: BenchLookup) -> dict[str, str]:
    """Return a fixed record at once (the benchmark's instant tool)."""
    return {"key": args.key, "value": "42"}


def builtin_agents(settings: Settings, http: httpx.AsyncClient) -> list[AgentDefinition]:
    default = AgentDefinition(
        name="default",
        system_instruction=SEED_INSTRUCTIONS,
        toolbox=seed_toolset(http, settings),
    )
    return [default, *bench_agents()] if settings.bench_agents else [default]


def bench_agents() -> list[AgentDefinition]:
    """The benchmark's workload agents (an instant tool; long budgets for ``reference-long``)."""
    return [
        AgentDefinition(
            name="reference",
            system_instruction="Call bench_lookup twice, then answer.",
            toolbox=ToolSet([bench_lookup]),
        ),
        AgentDefinition(
            name="reference-long",
            system_instruction="Call bench_lookup as many times as the question says, then answer.",
            toolbox=ToolSet([bench_lookup]),
            max_steps=1000,
            max_seconds=3600.0,
            max_tool_calls=1000,
        ),
    ]


@functools.lru_cache(maxsize=64)
def _reference(calls: int) -> Script:
    return reference_workload_script(REFERENCE_TOOL, {"key": "k"}, calls=calls)


def reference_calls(request: ModelRequest) -> int:
    """How many tool calls the question asks for (``calls=N``), else :data:`REFERENCE_CALLS`."""
    found = _CALLS_ASKED.search(read_exchange(request.contents).question)
    return int(found[1]) if found else REFERENCE_CALLS


def _plain_offline_script(request: ModelRequest) -> ModelTurn:
    """How the scripted model plays each built-in agent, chosen by the tools it is offered.

    The choice depends on the request alone, so the fake Gemini server (which sees only the
    REST body) and the in-process scripted model answer alike.
    """
    names = {d.get("name") for d in request.tools}
    if REFERENCE_TOOL in names:
        return _reference(reference_calls(request))(request)
    return seed_agent_turn(request)


offline_script = with_final_answer(_plain_offline_script)


def offline_model() -> ScriptedModel:
    return ScriptedModel(offline_script)
