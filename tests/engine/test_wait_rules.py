"""One wait, one set of rules: a call that waits for a person, a named event or a child run is
resolved, ended, dead-lettered, redriven, swept and counted alike, whatever it waits for. On the
in-memory engine with the real dispatch, a manual clock and no sleeps.
"""

from __future__ import annotations

from typing import Any

from ackloop.agents.agent import Agent
from ackloop.bus.memory import Published
from ackloop.domain.keys import run_id_for_request
from ackloop.domain.records import RunRecord, RunStatus, StopReason
from ackloop.domain.wire import QueryMessage, RunOptions
from ackloop.engine.ending import cancel_run
from ackloop.engine.redrive import redrive
from ackloop.engine.sweep import sweep
from ackloop.model.base import ModelRequest, ModelTurn
from ackloop.model.turns import calls_turn, text_turn
from ackloop.testing.inprocess import InProcessLoop
from ackloop.tools import ToolSet, tool
from tests.engine.test_children import (
    Team,
    _responses,
    booking_loop,
    child_of,
    drain,
    planner_team,
    steps_of,
    team_loop,
)
from tests.engine.test_guarantees import deliver_all, take
from tests.engine.test_handoffs import Desk, desk_agents
from tests.engine.test_holes import dead_letter


async def run_of(loop: InProcessLoop, run_id: str) -> RunRecord:
    run = await loop.deps.store.runs.get_run(run_id)
    assert run is not None
    return run


async def redrive_all(loop: InProcessLoop, **selected: Any) -> list[str]:
    done = await redrive(loop.deps.store, loop.publisher, loop.deps.settings, loop.deps.clock,
                         **selected)
    return [r.outcome for r in done]


def is_end(message: Published) -> bool:
    return b"child_ended" in message.data


async def until_the_childs_end(loop: InProcessLoop) -> list[Published]:
    """Run planner -> researcher until the child has ended; its end's message, held back."""
    await loop.submit(QueryMessage(request_id="q", text="plan", agent="planner"))
    pending, ends = take(loop), []
    while pending:
        ends += [m for m in pending if is_end(m)]
        pending = await deliver_all(loop, [m for m in steps_of(loop, pending) if not is_end(m)])
    return ends


async def test_a_dead_lettered_child_end_is_redriven_and_its_parent_answers() -> None:
    loop = team_loop(planner_team(), Team({"planner": ["ask_researcher"]}))
    (end,) = await until_the_childs_end(loop)
    outcome = await dead_letter(loop, end, "dl-end")
    assert outcome.acknowledged, outcome

    assert await redrive_all(loop) == ["redriven"]
    await loop.run_until_idle()

    parent = await run_of(loop, run_id_for_request("q"))
    assert parent.status is RunStatus.COMPLETED, parent
    assert parent.answer == "planner answers (ask_researcher=researcher answers)"


async def test_the_sweeper_delivers_the_end_of_a_child_whose_end_message_was_lost() -> None:
    loop = team_loop(planner_team(), Team({"planner": ["ask_researcher"]}))
    await until_the_childs_end(loop)  # its end's message is lost
    loop.deps.clock.advance(loop.deps.settings.sweep_stale_seconds + 1)  # type: ignore[attr-defined]

    swept = await sweep(loop.deps)
    await loop.run_until_idle()

    parent = await run_of(loop, run_id_for_request("q"))
    assert parent.status is RunStatus.COMPLETED, (parent, swept)
    assert parent.answer == "planner answers (ask_researcher=researcher answers)"


async def test_a_child_is_not_run_again_by_a_redrive_once_its_parent_took_its_failure() -> None:
    team = Team({"planner": ["ask_researcher"]})
    loop = team_loop(planner_team(), team)
    await loop.submit(QueryMessage(request_id="q", text="plan", agent="planner"))
    pending = take(loop)
    for _ in range(3):  # the query; the planner's turn; its call (which starts the child)
        pending = await deliver_all(loop, steps_of(loop, pending))
    (child_step,) = steps_of(loop, pending)
    assert (await dead_letter(loop, child_step, "dl-child")).acknowledged
    await drain(loop, take(loop))
    parent = await run_of(loop, run_id_for_request("q"))
    assert parent.status is RunStatus.COMPLETED
    calls = list(team.calls)

    outcomes = await redrive_all(loop)
    await loop.run_until_idle()

    assert team.calls == calls, "the child ran again"  # no model call paid for nothing
    assert outcomes == ["parent_resolved"], outcomes
    child = await child_of(loop, parent, "0000-tool-000")
    assert child.status is RunStatus.FAILED


def parent_with_a_sibling_call() -> tuple[InProcessLoop, Team]:
    """planner -> (researcher, an ordinary tool ``lookup``) in one turn."""

    @tool
    def lookup(question: str) -> str:
        """Look something up."""
        return "looked up"

    researcher = Agent("researcher", "Find facts.")
    planner = Agent("planner", "Plan.", [researcher.as_tool(), ToolSet([lookup])])
    team = Team({"planner": ["ask_researcher", "lookup"]})
    return team_loop([planner, researcher], team), team


async def test_a_parent_ended_by_a_sibling_dead_letter_cancels_its_child_and_a_redrive_finishes(
) -> None:
    loop, team = parent_with_a_sibling_call()
    await loop.submit(QueryMessage(request_id="q", text="plan", agent="planner"))
    pending = take(loop)
    for _ in range(2):  # the query; the planner's turn
        pending = await deliver_all(loop, steps_of(loop, pending))
    call, sibling = pending
    started = await deliver_all(loop, [call])  # the child starts; the call waits
    assert (await dead_letter(loop, sibling, "dl-sibling")).acknowledged
    parent = await run_of(loop, run_id_for_request("q"))
    assert parent.status is RunStatus.FAILED
    await drain(loop, [*started, *take(loop)])

    child = await child_of(loop, parent, "0000-tool-000")
    assert child.status is RunStatus.CANCELLED, child
    assert [a for a, _ in team.calls].count("researcher") == 0  # the orphan spent nothing

    assert await redrive_all(loop) == ["redriven"]
    await loop.run_until_idle()
    parent = await run_of(loop, parent.run_id)
    assert parent.status is RunStatus.COMPLETED, parent
    assert parent.answer == ("planner answers (ask_researcher=agent 'researcher' was "
                             "cancelled before it answered; lookup=looked up)")


async def test_a_cancelled_root_counts_what_its_waiting_child_spent() -> None:
    loop = booking_loop([])
    await loop.submit(QueryMessage(request_id="q", text="plan", agent="planner"))
    await loop.run_until_idle()
    root = await run_of(loop, run_id_for_request("q"))
    child = await child_of(loop, root, "0000-tool-000")
    assert child.status is RunStatus.RUNNING  # waiting for the approval

    await cancel_run(loop.deps, root.run_id)
    await loop.run_until_idle()

    root = await run_of(loop, root.run_id)
    child = await child_of(loop, root, "0000-tool-000")
    assert root.status is RunStatus.CANCELLED and child.status is RunStatus.CANCELLED
    assert root.cost is not None and root.cost.children_usd, root.cost
    assert root.usage.children is not None and root.usage.children.model_calls >= 1


async def test_a_hand_off_survives_a_run_ended_by_a_dead_letter() -> None:
    desk = Desk()
    loop = team_loop(desk_agents(), desk)  # type: ignore[arg-type]
    await loop.submit(QueryMessage(request_id="first", text="the sea", agent="triage",
                                   conversation_id="c"))
    pending = take(loop)
    for _ in range(3):  # the query; triage's turn; its hand-off
        pending = await deliver_all(loop, steps_of(loop, pending))
    (writers_turn,) = steps_of(loop, pending)
    assert (await dead_letter(loop, writers_turn, "dl-writer")).acknowledged
    first = await run_of(loop, run_id_for_request("first"))
    assert first.status is RunStatus.FAILED and first.handed_to == "writer", first

    await loop.submit(QueryMessage(request_id="second", text="the moon", conversation_id="c"))
    await loop.run_until_idle()

    second = await run_of(loop, run_id_for_request("second"))
    assert second.answer == "writer: a poem about the moon", desk.seen


def sequential_children(loop_box: list[InProcessLoop]) -> Any:
    """planner asks researcher, then critic; each child works 80 s (the clock moves)."""

    def play(request: ModelRequest) -> ModelTurn:
        answers = _responses(request)
        if request.agent in ("researcher", "critic"):
            loop_box[0].deps.clock.advance(80)  # type: ignore[attr-defined]
            return text_turn(f"{request.agent} answers", request=request)
        for name in ("ask_researcher", "ask_critic"):
            if name not in answers:
                return calls_turn([(name, {"question": "?"})], request=request)
        return text_turn("planner answers", request=request)

    return play


async def test_a_parents_clock_runs_while_its_children_work() -> None:
    box: list[InProcessLoop] = []
    loop = team_loop(planner_team(), sequential_children(box))  # type: ignore[arg-type]
    box.append(loop)
    await loop.submit(QueryMessage(request_id="q", text="plan", agent="planner",
                                   options=RunOptions(max_seconds=100)))
    await loop.run_until_idle()

    root = await run_of(loop, run_id_for_request("q"))
    assert root.stop_reason is StopReason.MAX_SECONDS, root


def cycle_after_a_hand_off(seen: list[str]) -> tuple[list[Agent], Any]:
    """triage hands off to planner; planner asks researcher; researcher asks planner."""
    planner_stub = Agent("planner", "Plan.")
    researcher = Agent("researcher", "Find.", [planner_stub.as_tool()])
    planner = Agent("planner", "Plan.", [researcher.as_tool()])
    triage = Agent("triage", "Route.", [planner_stub.as_handoff()])

    def play(request: ModelRequest) -> ModelTurn:
        answers = _responses(request)
        agent = request.agent or ""
        seen.append(agent)
        wants = {"triage": "transfer_to_planner", "planner": "ask_researcher",
                 "researcher": "ask_planner"}[agent]
        if wants not in answers:
            args = {"note": ""} if agent == "triage" else {"question": "?"}
            return calls_turn([(wants, args)], request=request)
        said = answers[wants].get("result", answers[wants].get("error"))
        return text_turn(f"{agent}: {said}", request=request)

    return [triage, planner, researcher], play


async def test_a_cycle_is_refused_by_the_agent_whose_turn_made_the_call() -> None:
    seen: list[str] = []
    agents, play = cycle_after_a_hand_off(seen)
    loop = team_loop(agents, play)
    await loop.submit(QueryMessage(request_id="q", text="plan", agent="triage"))
    await loop.run_until_idle()

    root = await run_of(loop, run_id_for_request("q"))
    assert root.status is RunStatus.COMPLETED, root
    assert seen.count("planner") == 2, seen  # the hand-off's turn and its last: no child
    assert "an agent may not call itself" in (root.answer or ""), root.answer
    assert "triage -> planner -> researcher -> planner" not in (root.answer or "")
