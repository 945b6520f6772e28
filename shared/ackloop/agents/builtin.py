"""The agents this runtime ships when no catalog of the user's is configured: ``default``, the
seed agent (weather alerts, IP address, location; haikus when no tool fits), with its offline
script, like any user's agent (``Agent(script=...)``).

A user's agents come from their own package (``ACKLOOP_AGENTS``, :mod:`ackloop.agents.catalog`). The
benchmark's agents and the demos (``reference``, ``approval-demo``, ``research-team``...) are
not in the runtime: they are the development catalog, :mod:`ackloop_dev.agents`, which the
local stack and the benchmark name as a user names theirs.
"""

from __future__ import annotations

import httpx

from ackloop.agents.agent import SEED_INSTRUCTIONS, Agent
from ackloop.config.settings import Settings
from ackloop.model.seed_agent import seed_agent_turn
from ackloop.tools.seed import seed_toolset


def builtin_agents(settings: Settings, http: httpx.AsyncClient) -> list[Agent]:
    return [Agent("default", SEED_INSTRUCTIONS, seed_toolset(http, settings),
                  script=seed_agent_turn)]
