"""The development catalog's ``research-team`` agent (ackloop_dev.agents.research_team) and its
offline script: a planner that asks ``researcher`` and ``critic`` at once (two durable child
runs) and hands off to ``writer``, who answers in the same run. In process, where each model
request names its agent, and over the fake Gemini server's REST body, where the script tells the
agents apart by their instructions."""

from __future__ import annotations

import httpx
import pytest

from ackloop.agents.agent import Agent, InternalAgent
from ackloop.agents.builtin import builtin_agents
from ackloop.agents.scripts import deployment_script
from ackloop.config.settings import Settings
from ackloop.model.base import ModelRequest
from ackloop.model.gemini import GeminiModel
from ackloop.model.scripted import ScriptedModel
from ackloop.testing.agent_tester import AgentResult, AgentTester, run_agent
from ackloop_dev.agents import catalog, with_catalog
from ackloop_dev.agents.research_team import (
    HANDOFF_NOTE,
    WRITER_INSTRUCTIONS,
    agent_of,
    critic_answer,
    critic_question,
    researcher_answer,
    researcher_question,
    team_answer,
    team_script,
    writer_answer,
    writer_follow_up,
    writer_without_findings,
)
from ackloop_dev.fakes.gemini_server import FakeGeminiServer

QUESTION = "is a night train to Lisbon worth it?"
FINDINGS = ("Findings on 'is a night train to Lisbon worth it?': two sources agree on the main "
            "points.")
CAVEATS = ("Caveats on 'is a night train to Lisbon worth it?': the sources are few and not "
           "independent.")
ANSWER = f"What we found: {FINDINGS}\nWhat to keep in mind: {CAVEATS}"
KEYS = ["0000-model", "0000-tool-000", "0000-tool-001", "0001-model", "0001-tool-000",
        "0002-model"]


def _agents() -> list[Agent]:
    return catalog(Settings(), httpx.AsyncClient())


def test_the_team_is_served_with_the_demos_and_never_by_a_deployment() -> None:
    assert [a.name for a in _agents()][-4:] == ["research-team", "researcher", "critic", "writer"]
    assert [a.name for a in builtin_agents(Settings(), httpx.AsyncClient())] == ["default"]


def test_the_team_answers_with_what_the_writer_wrote_from_each_sub_agent() -> None:
    assert researcher_answer(researcher_question(QUESTION)) == FINDINGS
    assert critic_answer(critic_question(QUESTION)) == CAVEATS
    assert team_answer(QUESTION) == writer_answer(FINDINGS, CAVEATS) == ANSWER


def test_a_writers_request_without_its_name_is_told_by_its_instructions() -> None:
    """As the fake Gemini server sees it: no agent named, no tools offered."""
    request = ModelRequest(model="m", system_instruction=WRITER_INSTRUCTIONS, contents=[
        {"role": "user", "parts": [{"text": QUESTION}]}])
    assert agent_of(request) == "writer"
    assert deployment_script(with_catalog(Settings())).agent_of(request) == "writer"
    turn = team_script(request)
    assert turn.text == writer_without_findings(QUESTION) and team_script(request) == turn


async def _ask_the_team(tester: AgentTester) -> AgentResult:
    result = await tester.ask(QUESTION, agent="research-team")
    assert (result.status, result.stop_reason) == ("completed", "answered"), result.error
    assert result.answer == team_answer(QUESTION) == ANSWER
    assert result.agent == "research-team"
    assert [(c.name, c.args) for c in result.tool_calls] == [
        ("ask_researcher", {"question": f"What are the facts about: {QUESTION}"}),
        ("ask_critic", {"question": f"What could be wrong with: {QUESTION}"}),
        ("transfer_to_writer", {"note": HANDOFF_NOTE})]

    # The ledger: the hand-off's call says who takes over, the next model step is the writer's
    # (the planner's own steps carry no agent), and the run ended in the writer's turn.
    steps = {s.key: s for s in result.steps}
    assert list(steps) == KEYS
    assert steps["0001-tool-000"].result is not None
    assert steps["0001-tool-000"].result["response"]["handoff"] == "writer"
    assert [(s.result or {}).get("agent") for k, s in steps.items() if s.kind == "model"] == [
        None, None, "writer"]
    store = tester.deps.store
    run = await store.runs.get_run(result.run_id)
    assert run is not None and (run.agent, run.handed_to) == ("research-team", "writer")
    conversation = await store.runs.get_conversation(result.conversation_id)
    assert conversation is not None and conversation.agent == "writer"

    # The transcript: the hand-off's call and result, then the writer's answer, last.
    contents = (await store.transcript.load_transcript(result.conversation_id)).contents
    calls = [p["function_call"]["name"] for c in contents for p in c.get("parts", [])
             if "function_call" in p]
    assert calls == ["ask_researcher", "ask_critic", "transfer_to_writer"]
    assert contents[-1]["role"] == "model"
    assert [p.get("text") for p in contents[-1]["parts"]] == [ANSWER]

    runs = await store.runs.recent_runs(limit=10)
    kids = sorted((r for r in runs if r.parent_run_id == result.run_id), key=lambda r: r.agent)
    assert [(k.agent, k.status.value, k.depth, k.answer) for k in kids] == [
        ("critic", "completed", 1, CAVEATS), ("researcher", "completed", 1, FINDINGS)]
    assert len(runs) == 3  # the planner's run (the writer's turn in it) and its two children
    return result


async def test_in_process_each_agent_is_played_by_the_name_its_request_carries() -> None:
    await _ask_the_team(AgentTester(_agents()))


async def test_over_rest_each_agent_is_played_from_its_instructions() -> None:
    """The fake Gemini server, as the local stack runs it (the catalog policy), with the real
    google-genai client in the loop: no request names its agent."""
    played = ScriptedModel(deployment_script(with_catalog(Settings()))).decide
    with FakeGeminiServer(played) as server:
        await _ask_the_team(AgentTester(_agents(), model=GeminiModel(api_key="k",
                                                                     base_url=server.url)))


async def test_the_conversation_continues_with_the_writer_after_the_hand_off() -> None:
    """A later question of the conversation that names no agent is the writer's: it answers
    from the findings earlier in the conversation, with no call and no child run."""
    tester = AgentTester(_agents())
    first = await _ask_the_team(tester)
    follow_up = "and in winter?"

    later = await tester.ask(follow_up, conversation_id=first.conversation_id)

    assert (later.status, later.agent, later.tool_calls) == ("completed", "writer", [])
    assert later.answer == writer_follow_up(follow_up, FINDINGS, CAVEATS)
    assert later.answer == f"On 'and in winter?', from the findings so far:\n{ANSWER}"
    assert len(await tester.deps.store.runs.recent_runs(limit=10)) == 4  # no new child run


async def test_no_query_may_name_a_member_of_the_team() -> None:
    """The researcher, the critic and the writer are internal: a query naming one is refused
    (the team's planner is what a user asks); on its own (run_agent) each still answers."""
    tester = AgentTester(_agents())
    for name in ("researcher", "critic", "writer"):
        with pytest.raises(InternalAgent, match=f"agent {name!r} is internal"):
            await tester.ask("the 1850 census", agent=name)
    assert await tester.deps.store.runs.recent_runs(limit=10) == []
    by_name = {a.name: a for a in _agents()}
    critic = await run_agent(by_name["critic"], "the 1850 census")
    assert critic.answer == critic_answer("the 1850 census") and critic.tool_calls == []
    writer = await run_agent(by_name["writer"], "the 1850 census")
    assert writer.answer == writer_without_findings("the 1850 census")
    assert writer.answer == ("Nothing to write from on 'the 1850 census' yet: ask research-team "
                             "to research it first.")
