"""The agents :mod:`ackloop_dev.bench.fan_in` runs (``ACKLOOP_AGENTS`` of its stack).

``fan-in``: two instant, retry-safe tools and no offline script, so the scripted model (and the
fake Gemini server's ``catalog`` policy) answers each new question with both calls in one turn,
then with text: every run is one fan-out of two tool steps and one join. ``research-team``: a
planner that asks two sub-agents at once (two child runs, a join of their ends), then hands the
conversation to a writer.
"""

from __future__ import annotations

from pydantic import BaseModel

from ackloop.agents.agent import Agent
from ackloop.tools.definition import tool
from ackloop_dev.agents.research_team import research_team_agents

AGENT = "fan-in"


class Key(BaseModel):
    key: str = "k"


@tool("lookup_price")
async def lookup_price(args: Key) -> dict[str, str]:
    """Return the price of an item (instant)."""
    return {"key": args.key, "price": "42"}


@tool("lookup_stock")
async def lookup_stock(args: Key) -> dict[str, str]:
    """Return the stock of an item (instant)."""
    return {"key": args.key, "stock": "7"}


def agents() -> list[Agent]:
    """The catalog: the two-call agent and the research team."""
    return [Agent(AGENT, "Look up the price and the stock of the item at once, then answer.",
                  [lookup_price, lookup_stock]), *research_team_agents()]
