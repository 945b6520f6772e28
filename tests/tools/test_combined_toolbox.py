"""An agent with its own ``@tool`` functions AND a real MCP server's tools (stdio), through the real
engine in one process: the model calls one of each in the same turn and answers from both; a
name offered twice is the step's permanent failure, not a silent pick."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from tests.engine.fakes import make_loop
from tests.tools.mcp_fixtures import ledger_entries, stdio_server

from ackloop.config.settings import Settings
from ackloop.domain.keys import run_id_for_request
from ackloop.domain.records import RunStatus
from ackloop.domain.wire import QueryMessage
from ackloop.model.base import ModelRequest, ModelTurn
from ackloop.model.scripted import ScriptedModel
from ackloop.model.transcript import read_exchange
from ackloop.model.turns import calls_turn, text_turn
from ackloop.tools.combined import CombinedToolbox
from ackloop.tools.definition import tool
from ackloop.tools.mcp import MCPServer, mcp_tools
from ackloop.tools.toolset import ToolSet

pytestmark = pytest.mark.asyncio(loop_scope="module")


@tool
def price_of(item: str) -> dict[str, float]:
    """The unit price of an item, in euros."""
    return {"price": 1.5 if item == "pen" else 9.0}


@tool("place_order")
def local_place_order(item: str) -> str:
    """A local tool with the same name as one of the server's."""
    return f"local {item}"


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("combined") / "ledger.jsonl"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server(ledger: Path) -> AsyncIterator[MCPServer]:
    made = stdio_server(ledger)
    yield made
    await made.aclose()


def buyer(request: ModelRequest) -> ModelTurn:
    exchange = read_exchange(request.contents)
    price, order = exchange.last_result("price_of"), exchange.last_result("place_order")
    if price is None or order is None:
        return calls_turn([("price_of", {"item": "pen"}),
                           ("place_order", {"item": "pen", "quantity": 2})], request=request)
    return text_turn(f"{order.response['result']} at {price.response['result']['price']} EUR",
                     request=request)


async def test_local_and_mcp_tools_answer_in_one_turn(server, ledger):
    tools = CombinedToolbox([ToolSet([price_of]), mcp_tools(server)])
    model = ScriptedModel(buyer)
    loop = make_loop(model, tools)
    await loop.submit(QueryMessage(request_id="combined-1", text="Two pens, and their price?"))
    await loop.run_until_idle()

    run_id = run_id_for_request("combined-1")
    run = await loop.deps.store.get_run(run_id)
    assert run is not None and run.status is RunStatus.COMPLETED, run
    assert run.answer == "order placed: 2 x pen at 1.5 EUR"
    offered = [t["name"] for t in model.requests[0].tools]
    assert offered[0] == "price_of" and "place_order" in offered and "lookup_order" in offered
    assert [e["key"] for e in ledger_entries(ledger) if e["key"].startswith(run_id)] == [
        f"{run_id}/0000-tool-001"]
    # The local tool is safe to repeat; the server's place_order (no hint) is not.
    assert tools.is_retry_safe("price_of") and not tools.is_retry_safe("place_order")


async def test_a_name_offered_by_two_toolboxes_fails_the_run_and_calls_no_model(server):
    tools = CombinedToolbox([ToolSet([local_place_order]), mcp_tools(server)])
    model = ScriptedModel(buyer)
    loop = make_loop(model, tools, settings=Settings(lease_seconds=10.0))
    await loop.submit(QueryMessage(request_id="combined-dup", text="Two pens."))
    await loop.run_until_idle()

    run = await loop.deps.store.get_run(run_id_for_request("combined-dup"))
    assert run is not None and run.status is RunStatus.FAILED
    assert run.error is not None and "two of the agent's toolboxes offer a tool named " \
        "'place_order'" in run.error
    assert not model.requests


async def test_an_agent_takes_its_own_tools_and_an_mcp_toolbox_in_one_list(server, ledger):
    from ackloop import Agent, run_agent

    agent = Agent("shop", "Sell pens.", [price_of, mcp_tools(server)], script=buyer)
    assert isinstance(agent.tools, CombinedToolbox)
    result = await run_agent(agent, "Two pens, and their price?")
    assert result.answer == "order placed: 2 x pen at 1.5 EUR"
    with pytest.raises(ValueError, match="offer a tool named 'price_of'"):
        Agent("twice", "x", [price_of, ToolSet([price_of])])
