"""MCP tools against a real MCP server, over stdio and over streamable HTTP.

One server per transport for the module (its event loop is the module's, so the stdio server
the toolbox starts is shared by the tests as it would be by a function's requests).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psutil
import pytest
import pytest_asyncio
from tests.tools.mcp_fixtures import http_server, ledger_entries, stdio_server

from ackloop.domain.wire import FunctionCall
from ackloop.tools.base import ToolContext
from ackloop.tools.mcp import (
    MCPServer,
    MCPToolsInvalid,
    MCPUnavailable,
    mcp_tools,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mcp") / "ledger.jsonl"


@pytest.fixture(scope="module")
def http_url(ledger: Path) -> Iterator[str]:
    with http_server(ledger) as url:
        yield url


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=["stdio", "http"])
async def server(request: pytest.FixtureRequest, ledger: Path) -> AsyncIterator[MCPServer]:
    if request.param == "stdio":
        made = stdio_server(ledger)
    else:
        made = MCPServer.http(request.getfixturevalue("http_url"), name="orders")
    yield made
    await made.aclose()


def context(key: str | None = None) -> ToolContext:
    key = key or f"run-{uuid.uuid4().hex}/0000-tool-000"
    run_id, step_key = key.split("/")
    return ToolContext(run_id=run_id, step_key=step_key, idempotency_key=key)


def call(name: str, **args: object) -> FunctionCall:
    return FunctionCall(name=name, args=args, id=f"call-{name}")


async def test_declarations_come_from_the_listing_flattened_for_gemini(server):
    tools = mcp_tools(server)
    await tools.prepare()
    declared = {d["name"]: d for d in tools.declarations()}
    assert {"lookup_order", "place_order", "set_address", "slow", "report"} <= set(declared)
    assert declared["lookup_order"] == {
        "name": "lookup_order",
        "description": "Find an order's status by its number.",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}},
                       "required": ["order_id"]},
    }
    ship_to = declared["place_order"]["parameters"]["properties"]["ship_to"]
    assert ship_to["nullable"] is True and ship_to["type"] == "object"
    assert ship_to["properties"]["city"] == {"type": "string", "description": "The city."}
    assert "$ref" not in json.dumps(declared) and "$defs" not in json.dumps(declared)
    assert "parameters" not in declared["server_pid"]  # no arguments: none declared


async def test_include_offers_only_the_named_tools_and_refuses_unknown_names(server):
    tools = mcp_tools(server, include=["lookup_order"])
    await tools.prepare()
    assert [d["name"] for d in tools.declarations()] == ["lookup_order"]
    outcome = await tools.execute(call("place_order", item="pen", quantity=1), context())
    assert outcome.is_error and "unknown tool 'place_order'" in outcome.response["error"]

    with pytest.raises(MCPToolsInvalid, match="lists no tool named nope"):
        await mcp_tools(server, include=["lookup_order", "nope"]).prepare()


async def test_a_call_returns_the_servers_result(server):
    tools = mcp_tools(server)
    outcome = await tools.execute(call("lookup_order", order_id="A-1234"), context())
    assert not outcome.is_error
    assert outcome.response == {"result": {"order_id": "A-1234", "status": "shipped"}}

    text = await tools.execute(call("set_address", order_id="A-1234", city="Porto"), context())
    assert text.response == {"result": "A-1234 ships to Porto"}


async def test_an_is_error_result_is_an_error_the_model_reads(server):
    tools = mcp_tools(server)
    outcome = await tools.execute(call("lookup_order", order_id="B-1"), context())
    assert outcome.is_error
    assert "there is no order B-1; check the number" in outcome.response["error"]

    invalid = await tools.execute(call("place_order", item="pen"), context())
    assert invalid.is_error and "quantity" in invalid.response["error"]


async def test_the_idempotency_key_reaches_the_server(server, ledger):
    tools = mcp_tools(server)
    key = f"run-{uuid.uuid4().hex}/0003-tool-001"
    outcome = await tools.execute(call("place_order", item="pen", quantity=2), context(key))
    assert outcome.response == {"result": "order placed: 2 x pen"}
    recorded = [e for e in ledger_entries(ledger) if e["key"] == key]
    assert recorded == [{"tool": "place_order", "arguments": {"item": "pen", "quantity": 2},
                         "key": key, "pid": recorded[0]["pid"]}]


async def test_a_call_past_its_timeout_is_a_timeout_and_the_connection_lives_on(server):
    tools = mcp_tools(server, timeout_seconds=0.5)
    outcome = await tools.execute(call("slow", seconds=30), context())
    assert outcome.is_error
    assert outcome.response["error"].startswith("slow timed out after 0.5 s")
    after = await mcp_tools(server).execute(call("lookup_order", order_id="A-1234"), context())
    assert after.response["result"]["status"] == "shipped"


async def test_retry_safe_comes_from_the_annotations_unless_given(server):
    tools = mcp_tools(server)
    await tools.prepare()
    # readOnlyHint, idempotentHint: safe; neither (the MCP default): not safe.
    assert tools.is_retry_safe("lookup_order") is True
    assert tools.is_retry_safe("set_address") is True
    assert tools.is_retry_safe("place_order") is False
    assert tools.is_retry_safe("slow") is False

    overridden = mcp_tools(server, retry_safe={"place_order": True, "lookup_order": False})
    await overridden.prepare()
    assert overridden.is_retry_safe("place_order") is True
    assert overridden.is_retry_safe("lookup_order") is False
    assert overridden.is_retry_safe("slow") is False

    none_safe = mcp_tools(server, retry_safe=False)
    await none_safe.prepare()
    assert not any(none_safe.is_retry_safe(d["name"]) for d in none_safe.declarations())

    with pytest.raises(MCPToolsInvalid, match="not offered"):
        await mcp_tools(server, include=["slow"], retry_safe={"place_order": True}).prepare()


async def test_output_is_capped_and_secrets_are_masked(server):
    tools = mcp_tools(server, max_output_bytes=1024)
    outcome = await tools.execute(call("report", lines=5000), context())
    assert len(json.dumps(outcome.response).encode()) <= 1024
    assert "truncated" in outcome.response["result"]

    leaked = await tools.execute(call("connection_info"), context())
    assert "sk-live" not in json.dumps(leaked.response)
    assert "api_key=***" in leaked.response["result"]


async def test_an_image_and_an_embedded_blob_resource_become_files(server):
    """An ImageContent and an embedded resource with a blob are the tool's files (the step
    stores them), referenced in its result where they were; text blocks stay text."""
    from tests.support.mcp_server import order_png

    tools = mcp_tools(server)
    photo = await tools.execute(call("order_photo", order_id="A-1"), context())
    (named,) = photo.files
    assert named.file.data == order_png() and named.file.mime_type == "image/png"
    assert photo.response == {"result": ["the label of A-1:", {"$ref": named.name}]}
    assert named.name.startswith("file-") and named.name.endswith(".png")

    invoice = await tools.execute(call("order_invoice", order_id="A-1"), context())
    (pdf,) = invoice.files
    assert pdf.file.data == b"%PDF-1.4 invoice A-1" and pdf.file.mime_type == "application/pdf"
    assert invoice.response == {"result": {"$ref": "A-1.pdf"}} and pdf.name == "A-1.pdf"


async def test_the_listing_is_asked_once_and_kept(server, monkeypatch):
    tools = mcp_tools(server)
    await tools.prepare()
    monkeypatch.setattr(server, "list_tools", None)  # a second listing would fail
    await tools.prepare()
    assert tools.declarations()


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_server_that_cannot_be_reached_is_a_clear_retryable_error(transport):
    from ackloop.domain.errors import RetryableError
    from ackloop_dev.devstack.emulators import free_port

    if transport == "stdio":
        server = MCPServer.stdio("/nonexistent/mcp-server", name="ghost")
    else:
        server = MCPServer.http(f"http://127.0.0.1:{free_port()}/mcp", name="ghost")
    tools = mcp_tools(server)
    with pytest.raises(MCPUnavailable, match="MCP server 'ghost' could not be listed") as caught:
        await tools.prepare()
    assert isinstance(caught.value, RetryableError)
    assert tools.declarations() == []
    with pytest.raises(RuntimeError, match="await prepare"):
        tools.is_retry_safe("lookup_order")
    outcome = await tools.execute(call("lookup_order", order_id="A-1234"), context())
    assert outcome.is_error and "could not be listed" in outcome.response["error"]
    await server.aclose()


async def test_stdio_server_is_started_once_restarted_when_it_died_and_stopped_by_aclose(ledger):
    server = stdio_server(ledger)
    tools = mcp_tools(server)
    first = await tools.execute(call("server_pid"), context())
    again = await tools.execute(call("server_pid"), context())
    pid = first.response["result"]
    assert again.response["result"] == pid  # one process serves every call

    os.kill(pid, signal.SIGKILL)
    for _ in range(100):  # until this process has reaped it (and so read its output's end)
        await asyncio.sleep(0.1)
        if not psutil.pid_exists(pid):
            break
    restarted = await tools.execute(call("server_pid"), context())
    new_pid = restarted.response["result"]
    assert not restarted.is_error and new_pid != pid

    await server.aclose()
    assert not psutil.pid_exists(new_pid)


async def test_http_holds_no_connection_between_calls(http_url):
    server = MCPServer.http(http_url)
    tools = mcp_tools(server)
    await tools.execute(call("lookup_order", order_id="A-1234"), context())
    await tools.execute(call("lookup_order", order_id="A-1234"), context())
    port = int(http_url.split(":")[2].split("/")[0])
    open_to_server = [c for c in psutil.Process().net_connections(kind="tcp")
                      if c.raddr and c.raddr.port == port and c.status == "ESTABLISHED"]
    assert open_to_server == []


async def test_credential_headers_are_masked_and_other_headers_are_not():
    server = MCPServer.http("http://127.0.0.1:1/mcp", headers={
        "Authorization": "Bearer tok-123456", "X-Api-Key": "k-98765", "X-Tenant": "acme"})
    assert set(server.secrets()) == {"Bearer tok-123456", "k-98765"}
