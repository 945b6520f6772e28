"""The agents this deployment ships, and how the offline model plays each of them.

- ``default``: the seed agent: weather alerts, IP address, location; haikus when no tool fits.
- ``reference``: the benchmark workload, model -> tool -> model -> tool -> model with an
  instant tool, so what is measured is the engine and not the tools.

Add an agent by appending an :class:`~ackloop.agents.AgentDefinition` to
:func:`builtin_agents` (see the README, "Define an agent").
"""

from __future__ import annotations

import httpx
from pydantic import BaseModel, Field

from ackloop.agents import SEED_INSTRUCTIONS, AgentDefinition
from ackloop.model.base import ModelRequest, ModelTurn
from ackloop.model.scripted import ScriptedModel, reference_workload_script
from ackloop.model.seed_agent import seed_agent_turn
from ackloop.settings import Settings
from ackloop.tools.definition import tool
from ackloop.tools.seed import seed_toolset
from ackloop.tools.toolset import ToolSet

REFERENCE_TOOL = "bench_lookup"


class BenchLookup(BaseModel):
    """Arguments of the benchmark tool."""

    key: str = Field(default="k", description="Any key; the answer does not depend on it.")


@tool(REFERENCE_TOOL)
async def bench_lookup(args: BenchLookup) -> dict[str, str]:
    """Return a fixed record at once (the benchmark's instant tool)."""
    return {"key": args.key, "value": "42"}


def builtin_agents(settings: Settings, http: httpx.AsyncClient) -> list[AgentDefinition]:
    return [
        AgentDefinition(
            name="default",
            system_instruction=SEED_INSTRUCTIONS,
            toolbox=seed_toolset(http, settings),
        ),
        AgentDefinition(
            name="reference",
            system_instruction="Call bench_lookup twice, then answer.",
            toolbox=ToolSet([bench_lookup]),
        ),
    ]


_reference = reference_workload_script(REFERENCE_TOOL, {"key": "k"})


def offline_script(request: ModelRequest) -> ModelTurn:
    """How the scripted model plays each built-in agent, chosen by the tools it is offered.

    The choice depends on the request alone, so the fake Gemini server (which sees only the
    REST body) and the in-process scripted model answer alike.
    """
    names = {d.get("name") for d in request.tools}
    if REFERENCE_TOOL in names:
        return _reference(request)
    return seed_agent_turn(request)


def offline_model() -> ScriptedModel:
    return ScriptedModel(offline_script)
