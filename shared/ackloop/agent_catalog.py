"""The agents this deployment ships when no catalog of the user's is configured.

- ``default``: the seed agent: weather alerts, IP address, location; haikus when no tool fits.
- ``reference``: the benchmark workload, model -> tool -> model -> tool -> model with an
  instant tool, so what is measured is the engine and not the tools.
- ``reference-long``: the same loop, as many tool calls as the question asks (``calls=N``), to
  measure how the cost of a step grows with the length of the conversation.

- ``approval-demo``: payments that wait for a person's approval (:mod:`ackloop.approval_demo`).
- ``research-team``: a planner that asks ``researcher`` and ``critic`` at once, each call a
  durable child run, then hands off to ``writer``, who answers from what they said
  (:mod:`ackloop.research_team`); the three are internal agents of the catalog (no query
  names them).

The two benchmark agents and the demos are registered only when ``ACKLOOP_BENCH_AGENTS`` is
on (the local stack and ``ackloop bench`` set it): a deployment serves ``default`` alone. Each
carries its offline script, like any user's agent (``Agent(script=...)``).

A user's agents come from their own package (``ACKLOOP_AGENTS``, :mod:`ackloop.catalog`).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import httpx
from pydantic import BaseModel, Field

from ackloop.agents import SEED_INSTRUCTIONS, Agent
from ackloop.model.base import ModelRequest, ModelTurn
from ackloop.model.seed_agent import seed_agent_turn
from ackloop.model.transcript import Exchange, read_exchange
from ackloop.settings import Settings
from ackloop.tools.definition import tool
from ackloop.tools.seed import seed_toolset

if TYPE_CHECKING:
    pass

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


def builtin_agents(settings: Settings, http: httpx.AsyncClient) -> list[Agent]:
    default = Agent("default", SEED_INSTRUCTIONS, seed_toolset(http, settings),
                    script=seed_agent_turn)
    if not settings.bench_agents:
        return [default]
    # Imported only here: a deployment (bench agents off) never loads the demos' tools.
    from ackloop.approval_demo import approval_demo_agent
    from ackloop.research_team import research_team_agents

    return [default, *bench_agents(), approval_demo_agent(), *research_team_agents()]


def bench_agents() -> list[Agent]:
    """The benchmark's workload agents (an instant tool; long budgets for ``reference-long``)."""
    return [
        Agent("reference", "Call bench_lookup twice, then answer.", [bench_lookup],
              script=reference_script),
        Agent(
            "reference-long",
            "Call bench_lookup as many times as the question says, then answer.",
            [bench_lookup],
            script=reference_script,
            max_steps=1000,
            max_seconds=3600.0,
            max_tool_calls=1000,
        ),
    ]


def reference_calls(request: ModelRequest) -> int:
    """How many tool calls the question asks for (``calls=N``), else :data:`REFERENCE_CALLS`."""
    return _calls_asked(read_exchange(request.contents))


def _calls_asked(exchange: Exchange) -> int:
    found = _CALLS_ASKED.search(exchange.question)
    return int(found[1]) if found else REFERENCE_CALLS


def reference_script(request: ModelRequest) -> ModelTurn:
    """The benchmark agents' offline script: the reference loop, as many calls as asked (the
    history read once for both)."""
    from ackloop.model.scripted import reference_turn

    exchange = read_exchange(request.contents)
    return reference_turn(request, exchange, REFERENCE_TOOL, {"key": "k"},
                          calls=_calls_asked(exchange))
