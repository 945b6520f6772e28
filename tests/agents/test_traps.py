"""No silent traps: a sub-agent or hand-off target the catalog lacks is refused in one line
(never a run that "completes" with the model told "no agent"), a test of one agent registers
the agents its tools reach, and an in-process question can carry files."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import httpx
import pytest

from ackloop import Agent, AgentTester, run_agent
from ackloop.agents.agent import AgentRegistry, MissingAgent, with_reached
from ackloop.agents.catalog import CatalogError, load_agents
from ackloop.config.settings import Settings
from ackloop.domain.wire import FilePart, InlineData
from ackloop.model.base import ModelRequest, ModelTurn
from ackloop.model.function_model import Conversation, FunctionModel, call, text

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")

writer = Agent("writer", "You write the final text.",
               script=FunctionModel(lambda c: f"Written: {c.question}"))
critic = Agent("critic", "You criticise.", script=FunctionModel(lambda c: "Too long."))


def _planner_turn(conversation: Conversation) -> Any:
    if not conversation.called("ask_writer"):
        return call("ask_writer", question="a haiku on rain")
    return text(f"The writer said: {conversation.result('ask_writer')}")


def planner() -> Agent:
    return Agent("planner", "You plan.", [writer.as_tool(), critic.as_handoff()],
                 script=FunctionModel(_planner_turn))


@pytest.mark.parametrize(("agents", "says"), [
    (lambda: [planner()],
     "agent 'planner': its tool 'ask_writer' reaches agent 'writer', which the catalog does "
     "not hold: add 'writer' to the catalog (it has ['planner'])"),
    (lambda: [planner(), writer],
     "agent 'planner': its tool 'transfer_to_critic' reaches agent 'critic', which the catalog "
     "does not hold: add 'critic' to the catalog (it has ['planner', 'writer'])"),
])
def test_a_catalog_without_a_reached_agent_is_refused_in_one_line(agents: Any, says: str) -> None:
    with pytest.raises(MissingAgent) as refused:
        AgentRegistry(agents())
    assert str(refused.value) == says and "\n" not in says


def test_a_catalog_that_holds_every_reached_agent_is_taken() -> None:
    registry = AgentRegistry([planner(), writer, critic])
    assert [a.name for a in registry] == ["planner", "writer", "critic"]


async def test_a_deployments_catalog_is_refused_naming_its_source(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tests.agents.test_traps.ONLY_PLANNER", [planner()], raising=False)
    async with httpx.AsyncClient() as http:
        with pytest.raises(CatalogError) as refused:
            load_agents(Settings(agents="tests.agents.test_traps:ONLY_PLANNER"), http)
    message = str(refused.value)
    assert message.startswith("ACKLOOP_AGENTS=tests.agents.test_traps:ONLY_PLANNER: agent "
                              "'planner': its tool 'ask_writer' reaches agent 'writer'")
    assert "\n" not in message


def test_the_agents_a_test_needs_are_the_ones_its_agents_reach() -> None:
    leaf = Agent("leaf", "Leaf.")
    middle = Agent("middle", "Middle.", [leaf.as_tool()])
    top = Agent("top", "Top.", [middle.as_tool(), leaf.as_handoff()])
    assert [a.name for a in with_reached([top])] == ["top", "middle", "leaf"]
    other_leaf = Agent("leaf", "Another leaf, given first.")
    assert with_reached([other_leaf, top])[0] is other_leaf   # the one given wins


async def test_run_agent_runs_the_sub_agent_its_tool_names() -> None:
    result = await run_agent(planner(), "write something")
    assert result.answer == "The writer said: Written: a haiku on rain"
    assert [c.name for c in result.tool_calls] == ["ask_writer"]


async def test_generated_tool_names_are_ask_and_transfer_to() -> None:
    tools = {t.name for t in [Agent("sales-team", "x").as_tool(),
                              Agent("sales-team", "x").as_handoff()]}
    assert tools == {"ask_sales_team", "transfer_to_sales_team"}


def _reads_files(request: ModelRequest) -> ModelTurn:
    parts = [p for c in request.contents for p in c.get("parts", [])
             if isinstance(p, dict) and ("inline_data" in p or "file_data" in p)]
    kinds = sorted((p.get("inline_data") or p.get("file_data") or {}).get("mime_type", "?")
                   for p in parts)
    return text(f"files: {', '.join(kinds) or 'none'}").to_turn(request)


async def test_a_question_in_process_carries_files(tmp_path: Path) -> None:
    photo = tmp_path / "photo.png"
    photo.write_bytes(PNG)
    tester = AgentTester(Agent("looker", "You look at files."), model=_reads_files)
    inline = FilePart(inline_data=InlineData(mime_type="application/pdf",
                                             data=base64.b64encode(b"%PDF-1.4").decode()))
    result = await tester.ask("what is in these?", files=[photo, inline])
    assert result.answer == "files: application/pdf, image/png"
    plain = await tester.ask("and now?")
    assert plain.answer == "files: none"


async def test_a_file_the_deployment_would_refuse_is_refused_in_process(tmp_path: Path) -> None:
    tester = AgentTester(Agent("looker", "You look at files."), model=_reads_files)
    with pytest.raises(ValueError, match=r"cannot tell its type from the extension '\.exe'"):
        await tester.ask("run this", files=[tmp_path / "setup.exe"])
    (tmp_path / "big.png").write_bytes(PNG + b"\0" * (21 * 1024 * 1024))
    with pytest.raises(ValueError, match="the question started no run"):
        await tester.ask("look", files=[tmp_path / "big.png"])
