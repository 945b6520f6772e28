"""A catalog a test stack serves (``ACKLOOP_AGENTS=tests.evals.capture_catalog:catalog``), and
the same agent reworded (``reworded``): what a capture must record, and a replay notice."""

from __future__ import annotations

from typing import Any

from ackloop.agents.agent import Agent
from ackloop.model.function_model import FunctionModel, call, text
from ackloop.tools.definition import tool

INSTRUCTIONS = "Say where an order is."


@tool
async def where_is(order_id: str) -> str:
    """Where an order is.

    Args:
        order_id: The order's id.
    """
    return f"{order_id} is in Lyon"


def _script(conversation: Any) -> Any:
    if not conversation.results:
        return call("where_is", order_id="C-3")
    return text(f"Order {conversation.results[-1].result}.")


def _desk(instructions: str) -> list[Agent]:
    return [Agent("capture-desk", instructions, [where_is], script=FunctionModel(_script))]


catalog = _desk(INSTRUCTIONS)
reworded = _desk(INSTRUCTIONS + " Be brief.")
