"""A user's catalog, importable as ``tests.agents.catalog_fixture:catalog``."""

from __future__ import annotations

from pydantic import BaseModel, Field

from ackloop.agents.agent import Agent
from ackloop.model.function_model import Conversation, FunctionModel, Reply, call, text
from ackloop.tools.definition import tool


class OrderId(BaseModel):
    order_id: str = Field(description="The order number.")


@tool
async def lookup_order(args: OrderId) -> dict[str, str]:
    """Find an order's status."""
    return {"order_id": args.order_id, "status": "shipped"}


def support_turn(conversation: Conversation) -> Reply:
    status = conversation.result("lookup_order")
    if status is None:
        return call("lookup_order", order_id="A-1234")
    return text(f"Order {status['order_id']} is {status['status']}.")


support = Agent("support", "You answer questions about orders.", [lookup_order],
                script=FunctionModel(support_turn))
greeter = Agent("greeter", "You greet people.", script=FunctionModel(lambda c: "Hello there."))
catalog = [support, greeter]
