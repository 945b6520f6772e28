"""The built-in ``research-team`` agent (ackloop.research_team) and its offline script: in
process, where each model request names its agent, and over the fake Gemini server's REST
body, where the script tells the agents apart by their instructions."""

from __future__ import annotations

import httpx

from ackloop.agent_catalog import builtin_agents
from ackloop.model.agent_scripts import deployment_script
from ackloop.model.gemini import GeminiModel
from ackloop.model.scripted import ScriptedModel
from ackloop.research_team import (
    critic_answer,
    critic_question,
    planner_answer,
    researcher_answer,
    researcher_question,
)
from ackloop.settings import Settings
from ackloop.testing import AgentTester
from ackloop_dev.fakes.gemini_server import FakeGeminiServer

QUESTION = "is a night train to Lisbon worth it?"
ANSWER = ("Researcher: Findings on 'is a night train to Lisbon worth it?': two sources agree "
          "on the main points.\n"
          "Critic: Caveats on 'is a night train to Lisbon worth it?': the sources are few and "
          "not independent.")


def _catalog(bench_agents: bool = True) -> list[str]:
    return [a.name for a in builtin_agents(Settings(bench_agents=bench_agents),
                                           httpx.AsyncClient())]


def test_the_team_is_served_with_the_demos_and_never_by_a_deployment() -> None:
    assert _catalog()[-3:] == ["research-team", "researcher", "critic"]
    assert _catalog(bench_agents=False) == ["default"]


def test_the_planner_answers_with_what_each_sub_agent_said() -> None:
    said = planner_answer(researcher_answer(researcher_question(QUESTION)),
                          critic_answer(critic_question(QUESTION)))
    assert said == ANSWER


async def _ask_the_team(tester: AgentTester) -> None:
    result = await tester.ask(QUESTION, agent="research-team")
    assert (result.status, result.stop_reason) == ("completed", "answered"), result.error
    assert result.answer == ANSWER
    assert [(c.name, c.args) for c in result.tool_calls] == [
        ("ask_researcher", {"question": f"What are the facts about: {QUESTION}"}),
        ("ask_critic", {"question": f"What could be wrong with: {QUESTION}"})]
    runs = await tester.deps.store.recent_runs(limit=10)
    kids = sorted((r for r in runs if r.parent_run_id == result.run_id), key=lambda r: r.agent)
    assert [(k.agent, k.status.value, k.depth) for k in kids] == [
        ("critic", "completed", 1), ("researcher", "completed", 1)]


async def test_in_process_each_agent_is_played_by_the_name_its_request_carries() -> None:
    agents = builtin_agents(Settings(bench_agents=True), httpx.AsyncClient())
    await _ask_the_team(AgentTester(agents))


async def test_over_rest_each_agent_is_played_from_its_instructions() -> None:
    """The fake Gemini server, as the local stack runs it (the catalog policy), with the real
    google-genai client in the loop: no request names its agent."""
    agents = builtin_agents(Settings(bench_agents=True), httpx.AsyncClient())
    played = ScriptedModel(deployment_script(Settings())).decide
    with FakeGeminiServer(played) as server:
        await _ask_the_team(AgentTester(agents, model=GeminiModel(api_key="k",
                                                                  base_url=server.url)))


async def test_a_sub_agent_asked_directly_answers_its_question() -> None:
    agents = builtin_agents(Settings(bench_agents=True), httpx.AsyncClient())
    result = await AgentTester(agents).ask("the 1850 census", agent="critic")
    assert result.answer == critic_answer("the 1850 census") and result.tool_calls == []
