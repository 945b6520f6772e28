"""Scripted models for any agent, run through the real engine in-process."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel, Field

from ackloop.agents.agent import Agent
from ackloop.agents.builtin import builtin_agents
from ackloop.agents.scripts import CatalogScript, deployment_script
from ackloop.config.settings import Settings
from ackloop.model.base import ModelRequest
from ackloop.model.function_model import (
    Conversation,
    FunctionModel,
    ScriptedTurns,
    call,
    calls,
    text,
)
from ackloop.model.gemini import GeminiModel
from ackloop.model.scripted import ScriptedModel
from ackloop.model.seed_agent import seed_agent_turn
from ackloop.model.tool_sweep import TestModel, arguments_for
from ackloop.testing.agent_tester import AgentTester, run_agent
from ackloop.tools.definition import tool
from ackloop_dev.fakes.gemini_server import FakeGeminiServer
from tests.agents.catalog_fixture import catalog, support

ROOT = Path(__file__).resolve().parents[2]


class Search(BaseModel):
    query: str = Field(min_length=3)
    limit: int = Field(ge=2, le=5)
    kind: str = Field(default="all", json_schema_extra={"enum": ["all", "open"]})
    exact: bool


@tool
async def search(args: Search) -> dict[str, object]:
    """Search the tickets."""
    return {"query": args.query, "limit": args.limit, "exact": args.exact}


@tool
async def ping() -> str:
    """Answer pong."""
    return "pong"


async def test_a_function_of_the_conversation_plays_the_agent() -> None:
    result = await run_agent(support, "Where is my order?")
    assert (result.status, result.stop_reason) == ("completed", "answered")
    assert result.answer == "Order A-1234 is shipped."
    assert [(c.name, c.args, c.result) for c in result.tool_calls] == [
        ("lookup_order", {"order_id": "A-1234"}, {"order_id": "A-1234", "status": "shipped"})]
    assert [s.key for s in result.steps] == ["0000-model", "0000-tool-000", "0001-model"]


async def test_the_conversation_view_shows_question_tools_results_and_turn() -> None:
    seen: list[Conversation] = []

    def script(conversation: Conversation) -> object:
        seen.append(conversation)
        return call("ping") if conversation.turn == 0 else "done"

    agent = Agent("watcher", "Watch.", [ping, search], script=FunctionModel(script))  # type: ignore[arg-type]
    await run_agent(agent, "Is it up?")
    first, second = seen
    assert (first.question, first.tools, first.turn, first.results) == (
        "Is it up?", ("ping", "search"), 0, ())
    assert first.agent == "watcher" and first.instructions == "Watch."
    assert second.turn == 1 and second.result("ping") == "pong" and second.called("ping")
    assert second.result("search") is None and not second.called("search")


async def test_several_calls_in_one_turn_run_in_parallel_steps() -> None:
    agent = Agent("pair", "Two at once.", [ping, search], script=ScriptedTurns([
        calls(call("ping"), call("search", {"query": "abc", "limit": 2, "exact": True})),
        text("both answered"),
    ]))
    result = await run_agent(agent, "go")
    assert result.answer == "both answered"
    assert [s.key for s in result.steps] == [
        "0000-model", "0000-tool-000", "0000-tool-001", "0001-model"]
    assert [c.result for c in result.tool_calls] == [
        "pong", {"query": "abc", "limit": 2, "exact": True}]


async def test_turns_are_played_in_order_and_running_out_fails_the_run() -> None:
    agent = Agent("short", "Be short.", [ping], script=ScriptedTurns([call("ping"), call("ping")]))
    result = await run_agent(agent, "go")
    assert (result.status, result.stop_reason) == ("failed", "failed")
    assert result.error is not None and result.error.startswith(
        "model_script_exhausted: the script has 2 turns; the run asked for turn 3")
    assert len(result.tool_calls) == 2


async def test_a_run_its_step_budget_stopped_is_not_reported_completed() -> None:
    agent = Agent("busy", "Keep busy.", [ping], max_steps=2,
                  script=ScriptedTurns([call("ping"), call("ping"), call("ping")]))
    result = await run_agent(agent, "go")
    # As the CLI says it: "stopped by its max_steps budget: no answer".
    assert (result.status, result.stop_reason, result.budget_stop, result.answer) == (
        "stopped", "max_steps", "max_steps", None)
    answered = await run_agent(Agent("quick", "Hi.", script=ScriptedTurns([text("hi")])), "go")
    assert (answered.status, answered.budget_stop) == ("completed", None)


async def test_a_script_answering_something_else_fails_the_run_with_why() -> None:
    def confused(conversation: Conversation) -> object:
        return 42

    agent = Agent("confused", "Hm.", script=FunctionModel(confused))  # type: ignore[arg-type]
    result = await run_agent(agent, "go")
    assert result.status == "failed" and result.error is not None
    assert result.error.startswith("model_script_invalid: confused gave int")


def test_turn_builders_refuse_what_is_not_a_turn() -> None:
    with pytest.raises(ValueError, match="calls"):
        calls(text("no"))
    with pytest.raises(TypeError):
        text(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ScriptedTurns takes"):
        ScriptedTurns([3])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="at least one turn"):
        ScriptedTurns([])


async def test_without_a_script_each_tool_is_called_once_with_valid_arguments() -> None:
    agent = Agent("tickets", "Find tickets.", [ping, search])
    result = await run_agent(agent, "any open tickets?")
    assert [(c.name, c.error) for c in result.tool_calls] == [("ping", None), ("search", None)]
    assert result.tool_calls[1].args == {"query": "aaa", "limit": 2, "exact": False}
    assert result.answer == ('ping: "pong"\n'
                             'search: {"query": "aaa", "limit": 2, "exact": false}')
    assert [s.key for s in result.steps] == [
        "0000-model", "0000-tool-000", "0000-tool-001", "0001-model"]


async def test_an_agent_without_tools_or_script_is_not_answered_with_a_haiku() -> None:
    result = await run_agent(Agent("chat", "Chat."), "tell me a joke")
    assert result.answer == "Scripted answer (no tools were called) to: tell me a joke"
    fixed = await run_agent(Agent("chat", "Chat.", script=TestModel("fine")), "hi")
    assert fixed.answer == "fine"


def test_arguments_follow_the_schema_after_the_rest_round_trip_too() -> None:
    upper = {"name": "s", "parameters": {
        "type": "OBJECT", "required": ["n", "tags", "when"],
        "properties": {"n": {"type": "INTEGER", "minimum": "4"},
                       "tags": {"type": "ARRAY", "min_items": "1", "items": {"type": "STRING"}},
                       "when": {"type": "STRING", "format": "date-time"},
                       "optional": {"type": "STRING"}}}}
    assert arguments_for(upper) == {"n": 4, "tags": ["a"], "when": "2024-01-01T00:00:00Z"}


class Ticket(BaseModel):
    summary: str
    priority: int


async def test_a_structured_output_agent_is_played_with_its_script() -> None:
    agent = Agent("triage", "Triage.", output=Ticket,
                  script=FunctionModel(lambda c: "Printer on fire"))
    result = await run_agent(agent, "my printer is on fire")
    assert result.status == "completed"
    assert result.output == {"summary": "Printer on fire", "priority": 1}


async def test_each_agent_is_played_by_its_own_script_in_one_deployment() -> None:
    tester = AgentTester(catalog)
    helped = await tester.ask("where is A-1234?", agent="support")
    greeted = await tester.ask("hi", agent="greeter")
    default = await tester.ask("hi again")
    assert helped.answer == "Order A-1234 is shipped."
    assert greeted.answer == "Hello there."
    assert (default.agent, default.answer) == ("support", "Order A-1234 is shipped.")


async def test_a_conversation_continues_in_one_tester() -> None:
    tester = AgentTester(Agent("echo", "Echo.", script=FunctionModel(
        lambda c: f"{c.question} (turn {c.turn})")))
    first = await tester.ask("one")
    second = await tester.ask("two", conversation_id=first.conversation_id)
    assert second.answer == "two (turn 0)" and second.conversation_id == first.conversation_id
    model = tester.model
    assert isinstance(model, ScriptedModel)
    assert [c["role"] for c in model.requests[-1].contents] == ["user", "model", "user"]


async def test_a_script_passed_to_the_tester_plays_every_agent() -> None:
    result = await run_agent(support, "where?", model=ScriptedTurns(["overridden"]))
    assert result.answer == "overridden" and result.tool_calls == []


async def test_asking_an_unknown_agent_says_which_there_are() -> None:
    with pytest.raises(Exception, match=r"no agent named 'sales'; this deployment has"):
        await AgentTester(catalog).ask("hi", agent="sales")


def test_the_built_in_agent_keeps_its_offline_script(tmp_path: Path) -> None:
    import httpx

    script = CatalogScript(builtin_agents(Settings(), httpx.AsyncClient()))
    request = ModelRequest(model="m", system_instruction="", agent="default",
                           contents=[{"role": "user", "parts": [{"text": "tell me a joke"}]}])
    assert script(request) == seed_agent_turn(request)


async def test_the_fake_gemini_server_plays_a_user_agent_from_the_rest_body() -> None:
    """Over REST the request names no agent: the server matches instructions and tools."""
    played = ScriptedModel(deployment_script(
        Settings(agents="tests.agents.catalog_fixture:catalog"))).decide
    with FakeGeminiServer(played) as server:
        tester = AgentTester(catalog, model=GeminiModel(api_key="k", base_url=server.url))
        helped = await tester.ask("where is A-1234?", agent="support")
        greeted = await tester.ask("hi", agent="greeter")
    assert helped.answer == "Order A-1234 is shipped."
    assert [c.name for c in helped.tool_calls] == ["lookup_order"]
    assert greeted.answer == "Hello there."


@pytest.mark.slow
async def test_the_fake_server_process_loads_the_catalog_the_environment_names() -> None:
    env = os.environ | {"ACKLOOP_AGENTS": "tests.agents.catalog_fixture:catalog",
                        "PYTHONPATH": os.pathsep.join([str(ROOT / "shared"), str(ROOT / "devtools"),
                                                      str(ROOT)])}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "ackloop_dev.fakes.gemini_server", "--port", "0",
        "--policy", "catalog",
        stdout=asyncio.subprocess.PIPE, env=env, cwd=ROOT)
    try:
        assert process.stdout is not None
        banner = (await asyncio.wait_for(process.stdout.readline(), timeout=60)).decode()
        url = banner.strip().rsplit(" ", 1)[-1]
        tester = AgentTester(catalog, model=GeminiModel(api_key="k", base_url=url))
        helped = await tester.ask("where is A-1234?", agent="support")
    finally:
        process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(process.wait(), timeout=10)
    assert helped.answer == "Order A-1234 is shipped."
