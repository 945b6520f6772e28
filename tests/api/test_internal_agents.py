"""Internal agents (``Agent(..., internal=True)``): reached only as a sub-agent or a hand-off
target. Every query entry point refuses one (the HTTP API's POST /runs, the Agent Runtime's
query and stream_query, a query message on the topic, which ``ackloop ask`` publishes), while
a tree whose planner calls an internal sub-agent and hands off to an internal writer answers.

The engine is the in-memory one with the real dispatch; the agents are the built-in
``research-team`` (its researcher, critic and writer are internal) played by their script.
"""

from __future__ import annotations

import httpx

from ackloop.agents.agent import Agent, AgentRegistry
from ackloop.config.settings import Settings
from ackloop.domain.keys import run_id_for_request
from ackloop.domain.records import RunStatus
from ackloop.domain.wire import QueryMessage
from ackloop.engine.children import child_run_id
from ackloop.testing.agent_tester import AgentTester
from ackloop_dev.agents import catalog
from ackloop_dev.agents.research_team import CRITIC, NAME, RESEARCHER, WRITER, team_answer
from tests.engine.fakes import api_of

INTERNAL = (RESEARCHER, CRITIC, WRITER)
QUESTION = "is a night train to Lisbon worth it?"


def _tester() -> AgentTester:
    agents = catalog(Settings(), httpx.AsyncClient())
    assert [a.name for a in agents if a.internal] == list(INTERNAL)
    return AgentTester(agents)


def _refused(response: httpx.Response, agent: str) -> None:
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["code"] == "internal_agent", body
    assert f"agent {agent!r} is internal" in body["error"], body
    assert NAME in body["error"] and not any(f"'{a}'," in body["error"] for a in INTERNAL)


async def test_the_http_api_refuses_a_query_naming_an_internal_agent() -> None:
    tester = _tester()
    async with api_of(tester.loop) as api:
        for agent in INTERNAL:
            created = await api.post("/runs", json={"text": "hi", "agent": agent})
            _refused(created, agent)
        unknown = await api.post("/runs", json={"text": "hi", "agent": "nobody"})
    assert tester.loop.queued() == [] and await tester.deps.store.runs.recent_runs(limit=10) == []
    # The agents a refusal offers are those a query may name: no internal one.
    assert unknown.status_code == 422 and NAME in unknown.json()["error"]
    assert not any(agent in unknown.json()["error"] for agent in INTERNAL)


async def test_the_agent_runtime_refuses_a_query_naming_an_internal_agent() -> None:
    tester = _tester()
    async with api_of(tester.loop) as api:
        query = await api.post("/api/reasoning_engine", json={
            "class_method": "query", "input": {"message": "hi", "agent": WRITER}})
        stream = await api.post("/api/stream_reasoning_engine", json={
            "class_method": "stream_query", "input": {"message": "hi", "agent": CRITIC}})
    _refused(query, WRITER)
    _refused(stream, CRITIC)
    assert await tester.deps.store.runs.recent_runs(limit=10) == []


async def test_a_query_message_naming_an_internal_agent_is_poison() -> None:
    """What ``ackloop ask --agent researcher`` publishes: ingest acknowledges it (no
    redelivery) and records it as poison, with the reason; no run starts."""
    tester = _tester()
    await tester.loop.submit(QueryMessage(request_id="ask-researcher", text="hi",
                                          agent=RESEARCHER))
    await tester.loop.run_until_idle()
    [delivery] = tester.loop.deliveries("query")
    assert delivery.outcome.status == 200 and delivery.outcome.body["acknowledged"] is True
    assert delivery.outcome.body["reason"] == "internal_agent"
    [poison] = await tester.deps.store.letters.list_poison()
    assert poison["reason"] == "internal_agent"
    assert "agent 'researcher' is internal" in str(poison["error"])
    assert await tester.deps.store.runs.get_run(run_id_for_request("ask-researcher")) is None


async def test_a_tree_of_internal_sub_agents_and_hand_off_target_answers() -> None:
    """The planner's two calls start child runs of the internal researcher and critic, and its
    hand-off makes the internal writer answer; the conversation goes on with the writer when a
    later query names no agent."""
    tester = _tester()
    result = await tester.ask(QUESTION, agent=NAME)
    assert result.answer == team_answer(QUESTION)
    run = await tester.deps.store.runs.get_run(result.run_id)
    assert run is not None and run.handed_to == WRITER
    children = [await tester.deps.store.runs.get_run(child_run_id(run, key))
                for key in ("0000-tool-000", "0000-tool-001")]
    assert [(c.agent, c.status) for c in children if c is not None] == [
        (RESEARCHER, RunStatus.COMPLETED), (CRITIC, RunStatus.COMPLETED)]
    later = await tester.ask("and in winter?", conversation_id=run.conversation_id)
    assert later.agent == WRITER and later.answer is not None


def test_a_query_naming_no_agent_goes_to_the_first_agent_it_may_start() -> None:
    registry = AgentRegistry([Agent("helper", "Help.", internal=True), Agent("front", "Ask.")])
    assert registry.get("default").name == "front"
    assert registry.for_query("default").name == "front"
    assert registry.startable_names() == ["front"]
