"""The desk's agents. ``ACKLOOP_AGENTS=support_desk.agents:catalog`` serves them.

``support`` comes first, so it answers the queries that name no agent.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from ackloop import Agent, FunctionModel
from support_desk.orders import lookup_order, open_ticket
from support_desk.script import support_turn, triage_answer


class Triage(BaseModel):
    """Where a message should go."""

    queue: Literal["order", "refund"]


support = Agent(
    "support",
    "You are the support desk of an online shop. Look orders up with lookup_order before "
    "answering about them. When an order is delayed or the customer reports a problem, open a "
    "ticket with open_ticket and give the customer its number.",
    tools=[lookup_order, open_ticket],
    max_steps=6,
    max_tool_calls=4,
    script=FunctionModel(support_turn),
)

triage = Agent(
    "triage",
    "Read the customer's message and pick the queue it belongs to.",
    output=Triage,
    script=FunctionModel(triage_answer),
)

catalog = [support, triage]
