"""A custom tool and agent, run through the durable loop offline, in one process.

    python examples/order_agent.py

The same handlers as the deployed functions run here on the in-memory store and publisher; the
model is scripted (ask for the tool, then answer from its result) and the order service is an
httpx.MockTransport, so nothing leaves the process.
"""

from __future__ import annotations

import asyncio

import httpx
from pydantic import BaseModel, Field

from ackloop.agents import Agent, AgentRegistry
from ackloop.bus.memory import MemoryPublisher
from ackloop.clock import SystemClock
from ackloop.docdb.memory import MemoryDocumentDB
from ackloop.engine.deps import Deps
from ackloop.inprocess import InProcessLoop
from ackloop.keys import run_id_for_request
from ackloop.model.base import ModelRequest, ModelTurn
from ackloop.model.scripted import ScriptedModel
from ackloop.model.transcript import read_exchange
from ackloop.model.turns import calls_turn, text_turn
from ackloop.settings import Settings
from ackloop.store import AgentStore
from ackloop.tools.base import ToolContext
from ackloop.tools.definition import tool
from ackloop.tools.errors import ToolError
from ackloop.wire import QueryMessage


def fake_order_service(request: httpx.Request) -> httpx.Response:
    order_id = request.url.path.rsplit("/", 1)[-1]
    if order_id != "A-1234":
        return httpx.Response(404)
    return httpx.Response(200, json={"id": order_id, "status": "shipped"})


http = httpx.AsyncClient(base_url="https://orders.example.com", timeout=5.0,
                         transport=httpx.MockTransport(fake_order_service))


class LookupOrder(BaseModel):
    """Arguments of lookup_order."""

    order_id: str = Field(description="The order number, e.g. A-1234.", pattern=r"^A-\d{4}$")


@tool(timeout_seconds=5)
async def lookup_order(args: LookupOrder, context: ToolContext) -> dict[str, str]:
    """Find an order's status."""
    response = await http.get(f"/orders/{args.order_id}",
                              headers={"Idempotency-Key": context.idempotency_key})
    if response.status_code == 404:
        raise ToolError(f"there is no order {args.order_id}; check the number")
    return {"order_id": args.order_id, "status": response.json()["status"]}


def support_model(request: ModelRequest) -> ModelTurn:
    """A scripted stand-in for Gemini: call the tool once, then answer from its result."""
    exchange = read_exchange(request.contents)
    result = exchange.last_result("lookup_order")
    if result is None:
        return calls_turn([("lookup_order", {"order_id": "A-1234"})], request=request)
    return text_turn(f"Order A-1234 is {result.response['result']['status']}.", request=request)


async def main() -> None:
    support = Agent("support", "You answer questions about orders. Use lookup_order.",
                    [lookup_order], max_steps=8)
    publisher = MemoryPublisher()
    deps = Deps(
        settings=Settings(),
        store=AgentStore(MemoryDocumentDB()),
        publisher=publisher,
        model=ScriptedModel(support_model),
        agents=AgentRegistry([support]),
        clock=SystemClock(),
        owner="example",
    )
    loop = InProcessLoop(deps, publisher)
    await loop.submit(QueryMessage(request_id="example-1", text="Where is my order A-1234?",
                                   agent="support"))
    await loop.run_until_idle()
    run = await deps.store.get_run(run_id_for_request("example-1"))
    assert run is not None
    for step in await deps.store.list_steps(run.run_id):
        print(f"{step.key:<14} {step.name:<13} {step.result}")
    print(f"{run.status.value}: {run.answer}")
    await http.aclose()


if __name__ == "__main__":
    asyncio.run(main())
