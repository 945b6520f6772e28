"""An agent whose tools come from a real MCP server (stdio), run through the real engine in
one process: the scripted model calls the server's tool and answers from its result, and the
engine's delivery rules hold for it (a redelivered tool step does not call it again; a crash
mid-call of a tool that is not safe to repeat does not repeat it)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from tests.engine.fakes import CrashingFaults, SimulatedCrash, make_loop
from tests.tools.mcp_fixtures import ledger_entries, stdio_server

from ackloop.config.settings import Settings
from ackloop.domain.keys import run_id_for_request
from ackloop.domain.records import RunStatus
from ackloop.domain.wire import QueryMessage
from ackloop.model.base import ModelRequest, ModelTurn
from ackloop.model.scripted import ScriptedModel
from ackloop.model.transcript import read_exchange
from ackloop.model.turns import calls_turn, text_turn
from ackloop.tools.mcp import MCPServer, MCPToolbox, mcp_tools

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mcp-engine") / "ledger.jsonl"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server(ledger: Path) -> AsyncIterator[MCPServer]:
    made = stdio_server(ledger)
    yield made
    await made.aclose()


@pytest.fixture
def tools(server: MCPServer) -> MCPToolbox:
    # A fresh toolbox per test: each lists the tools itself, as a new process would.
    return mcp_tools(server)


def shopper(request: ModelRequest) -> ModelTurn:
    """Order a pen through the MCP tool, then answer with what the server said."""
    assert "place_order" in [t["name"] for t in request.tools]
    result = read_exchange(request.contents).last_result("place_order")
    if result is None:
        return calls_turn([("place_order", {"item": "pen", "quantity": 2})], request=request)
    said = result.response.get("result", result.response.get("error"))
    return text_turn(f"The shop says: {said}", request=request)


def placed(ledger: Path, run_id: str) -> list[str]:
    return [e["key"] for e in ledger_entries(ledger) if e["key"].startswith(f"{run_id}/")]


async def test_an_agent_calls_the_mcp_tool_and_answers_from_its_result(tools, ledger):
    loop = make_loop(ScriptedModel(shopper), tools)
    await loop.submit(QueryMessage(request_id="mcp-e2e", text="Order two pens."))
    await loop.run_until_idle()

    run_id = run_id_for_request("mcp-e2e")
    run = await loop.deps.store.get_run(run_id)
    assert run is not None and run.status is RunStatus.COMPLETED
    assert run.answer == "The shop says: order placed: 2 x pen"
    assert placed(ledger, run_id) == [f"{run_id}/0000-tool-000"]


async def test_a_redelivered_tool_step_does_not_call_the_server_again(tools, ledger):
    loop = make_loop(ScriptedModel(shopper), tools)
    await loop.submit(QueryMessage(request_id="mcp-dup", text="Order two pens."))
    await loop.run_until_idle(duplicate_every=True)  # every message delivered twice

    run_id = run_id_for_request("mcp-dup")
    run = await loop.deps.store.get_run(run_id)
    assert run is not None and run.status is RunStatus.COMPLETED
    assert len(loop.deliveries("tool")) >= 2  # the one tool step, delivered again and again
    assert placed(ledger, run_id) == [f"{run_id}/0000-tool-000"]


async def test_a_crash_after_the_call_does_not_repeat_a_tool_that_is_not_safe_to(tools, ledger):
    loop = make_loop(ScriptedModel(shopper), tools, settings=Settings(lease_seconds=10.0),
                     faults=CrashingFaults({"tool:after_call"}))
    await loop.submit(QueryMessage(request_id="mcp-crash", text="Order two pens."))
    await loop.run_until_idle(crash=SimulatedCrash)

    run_id = run_id_for_request("mcp-crash")
    run = await loop.deps.store.get_run(run_id)
    assert run is not None and run.status is RunStatus.COMPLETED
    # place_order has no readOnly/idempotent hint: the taken-over step tells the model instead.
    assert placed(ledger, run_id) == [f"{run_id}/0000-tool-000"]
    assert run.answer is not None and "may or may not have taken effect" in run.answer


async def test_a_server_that_cannot_be_reached_fails_the_run_with_its_cause():
    ghost = mcp_tools(MCPServer.stdio("/nonexistent/mcp-server", name="ghost"))
    model = ScriptedModel(shopper)
    loop = make_loop(model, ghost, settings=Settings(lease_seconds=10.0, max_step_attempts=3))
    await loop.submit(QueryMessage(request_id="mcp-ghost", text="Order two pens."))
    await loop.run_until_idle()

    run = await loop.deps.store.get_run(run_id_for_request("mcp-ghost"))
    assert run is not None and run.status is RunStatus.FAILED
    assert run.error is not None and "MCP server 'ghost' could not be listed" in run.error
    # Redelivered (503) while it could not be listed, never answered without its tools.
    assert [d.outcome.status for d in loop.deliveries("model")][:3] == [503, 503, 503]
    assert not model.requests
