"""An image from the MCP reference server (``@modelcontextprotocol/server-everything``, its
``get-tiny-image`` tool) reaches the model as a part of the function response: through the
real engine, the real google-genai client and the fake Gemini server, which answers what the
image's own bytes say.

The server is an npm package: ``mcp-server-everything`` on the PATH (``.ci/run`` installs the
pinned version), else ``npx`` fetches it. When neither can start it the test is SKIPPED, and
the run's summary says so; under ``CI=true`` it FAILS instead.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import shutil
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from ackloop.agents.agent import Agent, AgentRegistry
from ackloop.bus.memory import MemoryPublisher
from ackloop.config.settings import Settings
from ackloop.docdb.memory import MemoryDocumentDB
from ackloop.domain.clock import ManualClock
from ackloop.domain.keys import run_id_for_request
from ackloop.domain.wire import QueryMessage
from ackloop.engine.deps import Deps
from ackloop.files import MemoryFileStore
from ackloop.store import AgentStore
from ackloop.testing.inprocess import InProcessLoop
from ackloop.tools.mcp import MCPServer, MCPToolbox, mcp_tools

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

PACKAGE = "@modelcontextprotocol/server-everything"
VERSION = "2026.8.31"
"""The version ``.ci/run`` installs."""
TOOL = "get-tiny-image"


def _command() -> tuple[str, list[str]] | None:
    if found := shutil.which("mcp-server-everything"):
        return found, ["stdio"]
    if npx := shutil.which("npx"):
        return npx, ["--yes", f"{PACKAGE}@{VERSION}", "stdio"]
    return None


def _unavailable(reason: str) -> None:
    message = f"MCP reference server SKIPPED: {reason}"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"the MCP reference server cannot run in CI: {reason}", pytrace=False)
    pytest.skip(message)  # tests/tools/conftest.py repeats it in the session's summary


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def everything() -> AsyncIterator[MCPToolbox]:
    command = _command()
    if command is None:
        _unavailable(f"neither mcp-server-everything nor npx is on PATH (npm install -g "
                     f"{PACKAGE}@{VERSION})")
    assert command is not None
    server = MCPServer.stdio(command[0], command[1], name="everything")
    tools = mcp_tools(server, include=[TOOL])
    try:
        await asyncio.wait_for(tools.prepare(), 180)
    except Exception as exc:  # an install that failed, no registry, a server that died
        await server.aclose()
        _unavailable(f"{' '.join([command[0], *command[1]])} did not list its tools: "
                     f"{type(exc).__name__}: {exc}")
    yield tools
    await server.aclose()


async def test_the_reference_servers_tiny_image_reaches_the_model_as_a_part(
        everything: MCPToolbox) -> None:
    from ackloop.model.gemini import GeminiModel
    from ackloop_dev.fakes.gemini_server import FakeGeminiServer, media_report_script

    files = MemoryFileStore()
    with FakeGeminiServer(media_report_script(TOOL)) as server:
        publisher = MemoryPublisher()
        deps = Deps(settings=Settings(lease_seconds=10.0), store=AgentStore(MemoryDocumentDB()),
                    publisher=publisher, model=GeminiModel(api_key="k", base_url=server.url,
                                                           timeout_seconds=5.0),
                    agents=AgentRegistry([Agent("default", "Be brief.", everything)]),
                    clock=ManualClock(), owner="test-owner", files=files)
        loop = InProcessLoop(deps, publisher)
        await loop.submit(QueryMessage(request_id="tiny", text="show me the tiny image"))
        await loop.run_until_idle()
    run_id = run_id_for_request("tiny")
    (step,) = [s for s in await deps.store.steps.list_steps(run_id) if s.kind == "tool"]
    assert step.result is not None
    (stored,) = step.result["response"]["files"]
    image = await files.get(stored["uri"])
    assert image.startswith(b"\x89PNG") and stored["size"] == len(image)
    result = step.result["response"]["result"]
    assert result[0] == "Here's the image you requested:"
    assert result[1] == {"$ref": stored["name"]}
    run = await deps.store.runs.get_run(run_id)
    assert run is not None
    assert run.answer == (f"saw {stored['name']}: image/png, PNG 20x20, {len(image)} bytes, "
                          f"sha256 {hashlib.sha256(image).hexdigest()}"), run.error
    assert base64.b64encode(image).decode() not in str(step.result)
