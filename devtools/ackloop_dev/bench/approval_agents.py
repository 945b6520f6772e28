"""The agent that :mod:`ackloop_dev.bench.approval_cost` runs (``ACKLOOP_AGENTS`` of its stack).

``approval-cost`` is the ``approval-demo`` agent (its script, its ``send_payment`` tool) with
one change: a payment needs approval only above :data:`APPROVAL_ABOVE` euros, a policy of the
call's arguments. So "pay 500 to Ada" and "pay 50 to Ada" are the same run of the same agent,
step for step, and differ only by the wait and the decision: what one approval costs.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ackloop.agents.agent import Agent
from ackloop_dev.agents.approval_demo import INSTRUCTIONS, demo_script, send_payment

AGENT = "approval-cost"
APPROVAL_ABOVE = 100


def over_limit(args: dict[str, Any]) -> bool:
    """A payment above the limit waits for a person."""
    return int(args.get("amount", 0)) > APPROVAL_ABOVE


def agents() -> list[Agent]:
    payment = dataclasses.replace(send_payment, requires_approval=over_limit)
    return [Agent(AGENT, INSTRUCTIONS, [payment], script=demo_script)]
