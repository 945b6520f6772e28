"""The development catalog: the agents the local stack and the benchmark serve, never deployed.

- ``default``: the runtime's built-in agent (:func:`ackloop.agents.builtin.builtin_agents`).
- ``reference``, ``reference-long``: the benchmark workload (:mod:`ackloop_dev.agents.reference`).
- ``approval-demo``: payments that wait for a person's approval
  (:mod:`ackloop_dev.agents.approval_demo`).
- ``follow-up``: calls that sleep before they run, and the built-in ``sleep`` tool
  (:mod:`ackloop_dev.agents.follow_up`).
- ``research-team``: a planner that asks ``researcher`` and ``critic`` at once, each call a
  durable child run, then hands off to ``writer`` (:mod:`ackloop_dev.agents.research_team`);
  the three are internal agents of the catalog (no query names them).

They live here, outside the runtime package, so a deployment's image has no demo: the local
stack (``ackloop dev up``) and the benchmark name this catalog as any user names theirs
(``ACKLOOP_AGENTS``, :data:`CATALOG`); a user's own ``ACKLOOP_AGENTS`` still wins.
"""

from __future__ import annotations

import httpx

from ackloop.agents.agent import Agent
from ackloop.agents.builtin import builtin_agents
from ackloop.config.settings import Settings

CATALOG = "ackloop_dev.agents:catalog"
"""What the local stack sets ``ACKLOOP_AGENTS`` to."""


def catalog(settings: Settings, http: httpx.AsyncClient) -> list[Agent]:
    """The runtime's built-in agent, then the benchmark's and the demos' (imported here only,
    so a catalog of the user's never loads their tools)."""
    from ackloop_dev.agents.approval_demo import approval_demo_agent
    from ackloop_dev.agents.follow_up import follow_up_agent
    from ackloop_dev.agents.reference import bench_agents
    from ackloop_dev.agents.research_team import research_team_agents

    return [*builtin_agents(settings, http), *bench_agents(), approval_demo_agent(),
            follow_up_agent(), *research_team_agents()]


def with_catalog(settings: Settings) -> Settings:
    """``settings`` naming this catalog when they name none: what a fake model server plays,
    which does not know whether the stack it serves has a catalog of the user's."""
    return settings if settings.agents else settings.model_copy(update={"agents": CATALOG})
