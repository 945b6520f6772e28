"""``GET /agents``: the agents a query may name (the run inspector's chat pane picks from them),
behind the API's auth like every route."""

from __future__ import annotations

from pathlib import Path

import httpx
from pydantic import BaseModel

from ackloop.agents.agent import Agent
from ackloop.config.settings import Settings
from ackloop.testing.agent_tester import AgentTester
from ackloop_dev.agents import catalog
from tests.api.test_auth import TOKEN
from tests.engine.fakes import api_of


class Verdict(BaseModel):
    ok: bool


async def test_the_agents_a_query_may_name_with_their_model_and_reach() -> None:
    """The development catalog: its internal agents (the research team's researcher, critic and
    writer) are left out, the default is the agent a run naming none starts."""
    tester = AgentTester([*catalog(Settings(), httpx.AsyncClient()),
                          Agent("judge", "Judge.", model="gemini-2.5-pro", output=Verdict)])
    async with api_of(tester.loop) as api:
        answer = await api.get("/agents")
        described = (await api.get("/openapi.json")).json()["paths"]
    assert answer.status_code == 200, answer.text
    body = answer.json()
    names = [a["name"] for a in body["agents"]]
    assert names == ["approval-demo", "default", "follow-up", "judge", "reference",
                     "reference-long", "reference-padded", "research-team"]
    assert body["default"] == "default"
    by_name = {a["name"]: a for a in body["agents"]}
    assert by_name["research-team"]["reaches"] == ["critic", "researcher", "writer"]
    assert by_name["default"]["reaches"] == [] and not by_name["default"]["structured_output"]
    assert by_name["judge"]["model"] == "gemini-2.5-pro" and by_name["judge"]["structured_output"]
    assert by_name["default"]["model"] == Settings().model
    assert set(by_name["judge"]) == {"name", "model", "reaches", "structured_output"}
    assert "/agents" in described


async def test_without_an_agent_named_default_the_first_startable_one_is() -> None:
    writer = Agent("writer", "Write.", internal=True)
    planner = Agent("planner", "Plan.", [writer.as_handoff()])
    tester = AgentTester([writer, planner])
    async with api_of(tester.loop) as api:
        body = (await api.get("/agents")).json()
    assert [a["name"] for a in body["agents"]] == ["planner"]
    assert body["default"] == "planner"
    assert body["agents"][0]["reaches"] == ["writer"]


async def test_the_list_needs_the_token_like_every_route(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    tester = AgentTester(Agent("solo", "Answer."))
    settings = Settings(api_auth="bearer", api_bearer_token_file=str(token_file))
    async with api_of(tester.loop, settings) as api:
        refused = await api.get("/agents")
        listed = await api.get("/agents", headers={"Authorization": f"Bearer {TOKEN}"})
    assert refused.status_code == 401 and refused.json()["code"] == "unauthenticated"
    assert listed.status_code == 200 and listed.json()["default"] == "solo"
