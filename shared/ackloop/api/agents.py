"""``GET /agents``: the agents a query may name, for a client that lets its user pick one (the
run inspector's chat pane).

Internal agents (sub-agents and hand-off targets only) are left out, as ``POST /runs`` refuses
them. Each is named with its model and the agents its tools reach; its instructions are not
shown (they are the deployment's, not its callers').
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from ackloop.agents.agent import DEFAULT_AGENT
from ackloop.api.runs import ERRORS, deps_of

router = APIRouter(tags=["agents"])


class AgentView(BaseModel):
    name: str = Field(description="What `POST /runs` names it by (`agent`).")
    model: str = Field(description="The Gemini model its runs call.")
    reaches: list[str] = Field(description="The agents its tools reach: sub-agents (each "
                               "call a child run) and hand-off targets.")
    structured_output: bool = Field(description="Whether its runs end with an `output` "
                                    "object of a declared shape.")


class AgentList(BaseModel):
    agents: list[AgentView] = Field(description="By name.")
    default: str | None = Field(description="The agent a run naming none starts (`agent` "
                                "left out or `\"default\"`); null when no agent may be "
                                "named.")


@router.get("/agents", response_model=AgentList, responses=ERRORS,
            summary="List the agents a run may start")
async def list_agents(request: Request) -> AgentList:
    """The deployment's agents that a query may name (internal ones left out), by name."""
    deps = await deps_of(request)
    registry = deps.agents
    startable = set(registry.startable_names())
    views = [AgentView(name=a.name, model=a.model or deps.settings.model,
                       reaches=sorted({name for _, name, _ in a.reaches()}),
                       structured_output=a.output is not None)
             for a in registry if a.name in startable]
    default = registry.get(DEFAULT_AGENT).name if DEFAULT_AGENT in registry else None
    return AgentList(agents=sorted(views, key=lambda v: v.name),
                     default=default if default in startable else None)
