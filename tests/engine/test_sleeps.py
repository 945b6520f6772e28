"""A call that sleeps is a wait whose kind is a time: it holds no process, no lease and gets
no delivery until its wake (armed once, at its time, with the step's own message), then runs,
once, however often its wake is delivered; without a waker the sweeper wakes it; a run
cancelled while it sleeps ends without running it; a sleep longer than the waker holds is armed
again when its early wake finds its time not come.

Driven through the real dispatch on the in-memory store, with a manual clock."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from ackloop.agents.agent import Agent
from ackloop.bus.wakes import MemoryWaker
from ackloop.config.settings import Settings
from ackloop.domain.keys import StepKey, run_id_for_request
from ackloop.domain.records import (
    RunLimits,
    RunRecord,
    RunStatus,
    StepDecision,
    StepRecord,
    StepStatus,
    Waiting,
)
from ackloop.domain.wire import QueryMessage, RunOptions
from ackloop.engine import children
from ackloop.engine.sweep import sweep
from ackloop.engine.waits import core as waits
from ackloop.model.function_model import (
    Conversation,
    FunctionModel,
    Reply,
    ScriptedTurns,
    call,
    text,
)
from ackloop.model.scripted import ScriptedModel
from ackloop.model.turns import calls_turn, text_turn
from ackloop.testing.agent_tester import AgentTester
from ackloop.testing.inprocess import InProcessLoop
from ackloop.tools import ToolContext, ToolSet, tool
from ackloop.tools.definition import Tool
from ackloop.tools.sleep import sleep_tool
from tests.engine.fakes import make_loop

SETTINGS = Settings()
STEP = str(StepKey.tool(0, 0))
DAY = 24 * 3600.0


def follow_up_tools(ran: list[dict[str, Any]]) -> ToolSet:
    @tool(sleeps=lambda args: args["days"] * DAY, retry_safe=False)
    def follow_up(days: int, context: ToolContext) -> str:
        """Follow up with the customer after some days."""
        ran.append({"days": days, "event": context.event})
        return "followed up"

    return ToolSet([follow_up])


async def sleeping_run(request_id: str, ran: list[dict[str, Any]], *, waker: Any = None,
                       days: int = 3, tools: Any = None) -> tuple[InProcessLoop, str]:
    model = ScriptedModel.from_turns([calls_turn([("follow_up", {"days": days})]),
                                      text_turn("done")])
    loop = make_loop(model, tools or follow_up_tools(ran), settings=SETTINGS,
                     waker=waker if waker is not None else MemoryWaker())
    await loop.submit(QueryMessage(request_id=request_id, text="follow up in 3 days"))
    await loop.run_until_idle()
    return loop, run_id_for_request(request_id)


async def test_a_call_sleeps_with_nothing_delivered_then_runs_once_at_its_time() -> None:
    ran: list[dict[str, Any]] = []
    waker = MemoryWaker()
    loop, run_id = await sleeping_run("sleep", ran, waker=waker)
    started = loop.deps.clock.now()
    (step,) = await loop.deps.store.steps.get_steps(run_id, [STEP])
    assert step is not None and step.status is StepStatus.WAITING and step.waiting is not None
    assert step.waiting.kind == "time" and step.lease_expires_at == 0.0
    assert step.waiting.wake_at == pytest.approx(started + 3 * DAY)
    assert step.waiting.deadline == step.waiting.wake_at
    assert not loop.queued() and not loop.notices and ran == []  # nothing delivered, no notice
    (wake,) = waker.armed.values()
    assert wake.at == step.waiting.wake_at and wake.attributes["step"] == STEP
    deliveries = len(loop.log)

    loop.deps.clock.advance(2 * DAY)  # type: ignore[attr-defined]
    await loop.run_until_idle()
    assert len(loop.log) == deliveries and ran == []  # still asleep: nothing at all happens

    assert await loop.wake_next()  # the clock reaches the wake; its message is published
    await loop.run_until_idle()
    assert len(ran) == 1 and ran[0]["days"] == 3
    assert set(ran[0]["event"]) == {"slept_until", "woke_at"}
    (step,) = await loop.deps.store.steps.get_steps(run_id, [STEP])
    assert step is not None and step.status is StepStatus.COMPLETED
    assert step.decision is not None and (step.decision.decision, step.decision.by) == (
        "received", "clock")
    run = await loop.deps.store.runs.get_run(run_id)
    assert run is not None and run.status is RunStatus.COMPLETED
    assert loop.answers[-1].answer == "done"


async def test_a_wake_delivered_again_runs_nothing_twice() -> None:
    ran: list[dict[str, Any]] = []
    waker = MemoryWaker()
    loop, run_id = await sleeping_run("twice", ran, waker=waker)
    (wake,) = waker.armed.values()
    loop.deps.clock.advance(3 * DAY)  # type: ignore[attr-defined]
    for _ in range(3):  # the wake's message published three times (a retried task)
        await loop.publisher.publish(wake.topic, wake.data, wake.attributes)
    await loop.run_until_idle(duplicate_every=True)
    assert len(ran) == 1
    run = await loop.deps.store.runs.get_run(run_id)
    assert run is not None and run.status is RunStatus.COMPLETED
    # The answer goes out at least once (consumers dedupe on the run); the model answered once.
    assert {a.run_id for a in loop.answers} == {run_id}
    steps = await loop.deps.store.steps.list_steps(run_id)
    assert [s.key for s in steps if s.kind == "model"] == ["0000-model", "0001-model"]
    assert all(s.attempts == 1 for s in steps)


async def test_a_wake_delivered_before_its_time_runs_nothing_and_keeps_the_wake() -> None:
    # A wake published early (a waker whose clock runs ahead, the step's message redelivered)
    # finds the time not come: the call is not run nor decided, its wake stays armed for its
    # time, and at that time it runs once.
    ran: list[dict[str, Any]] = []
    waker = MemoryWaker()
    loop, run_id = await sleeping_run("early", ran, waker=waker)
    (wake,) = waker.armed.values()
    loop.deps.clock.advance(3 * DAY - 1)  # type: ignore[attr-defined]
    for _ in range(2):
        await loop.publisher.publish(wake.topic, wake.data, wake.attributes)
    await loop.run_until_idle(duplicate_every=True)
    assert ran == []
    (step,) = await loop.deps.store.steps.get_steps(run_id, [STEP])
    assert step is not None and step.status is StepStatus.WAITING and step.decision is None
    assert [w.at for w in waker.armed.values()] == [wake.at]  # armed again: absorbed

    assert await loop.wake_next()
    await loop.run_until_idle()
    assert len(ran) == 1
    (step,) = await loop.deps.store.steps.get_steps(run_id, [STEP])
    assert step is not None and step.decision is not None and step.decision.by == "clock"
    assert step.decision.at >= wake.at


async def test_without_a_waker_the_sweeper_wakes_it_at_its_time() -> None:
    ran: list[dict[str, Any]] = []
    loop, run_id = await sleeping_run("swept", ran, waker=None, days=1)
    loop.deps.waker = __import__("ackloop.bus.wakes", fromlist=["NoWaker"]).NoWaker()
    loop.deps.clock.advance(DAY - 120)  # type: ignore[attr-defined]
    assert [s.run_id for s in await sweep(loop.deps)] == []  # not yet: nothing is touched
    loop.deps.clock.advance(120)  # type: ignore[attr-defined]
    swept = await sweep(loop.deps)
    assert [s.run_id for s in swept] == [run_id]
    await loop.run_until_idle()
    assert len(ran) == 1
    run = await loop.deps.store.runs.get_run(run_id)
    assert run is not None and run.status is RunStatus.COMPLETED


async def test_a_sleep_longer_than_the_waker_holds_is_armed_again() -> None:
    ran: list[dict[str, Any]] = []
    waker = MemoryWaker(horizon_s=DAY)
    loop, run_id = await sleeping_run("rearm", ran, waker=waker, days=3)
    wakes = 0
    while ran == [] and wakes < 10:
        assert await loop.wake_next()
        await loop.run_until_idle()
        wakes += 1
    assert wakes == 3 and len(ran) == 1  # woken at 1 and 2 days (armed again), runs at 3
    run = await loop.deps.store.runs.get_run(run_id)
    assert run is not None and run.status is RunStatus.COMPLETED


async def test_a_run_cancelled_while_it_sleeps_ends_without_running_the_call() -> None:
    ran: list[dict[str, Any]] = []
    waker = MemoryWaker()
    loop, run_id = await sleeping_run("cancel", ran, waker=waker)
    await waits.cancel_tree(loop.deps, run_id)  # what POST /runs/{id}/cancel does
    await loop.run_until_idle(wake=True)
    assert ran == []
    run = await loop.deps.store.runs.get_run(run_id)
    assert run is not None and run.status is RunStatus.CANCELLED
    (step,) = await loop.deps.store.steps.get_steps(run_id, [STEP])
    assert step is not None and step.decision is not None and step.decision.by == "cancel"


async def test_the_built_in_sleep_tool_waits_until_a_time_and_says_when_it_woke() -> None:
    ran: list[dict[str, Any]] = []
    soon = dt.datetime.now(dt.UTC) + dt.timedelta(hours=2)
    model = ScriptedModel.from_turns([calls_turn([("sleep", {"until": soon.isoformat()})]),
                                      text_turn("woke")])
    loop = make_loop(model, ToolSet([sleep_tool()]), settings=SETTINGS, waker=MemoryWaker(),
                     clock=__import__("ackloop.domain.clock", fromlist=["x"]).ShiftedClock())
    await loop.submit(QueryMessage(request_id="builtin", text="wait two hours"))
    await loop.run_until_idle(wake=True)
    (step,) = await loop.deps.store.steps.get_steps(run_id_for_request("builtin"), [STEP])
    assert step is not None and step.result is not None and step.waiting is not None
    assert step.waiting.wake_at == pytest.approx(soon.timestamp(), abs=0.01)
    assert "result" in step.result["response"], step.result
    response = step.result["response"]["result"]
    assert dt.datetime.fromisoformat(response["woke_at"]) >= soon - dt.timedelta(seconds=1)
    assert ran == []


@pytest.mark.parametrize(("args", "error"), [
    ({}, "give seconds or until"),
    ({"seconds": 5, "until": "2030-01-01T00:00:00+00:00"}, "give seconds or until"),
    ({"until": "2030-01-01T00:00:00"}, "no UTC offset"),
    ({"seconds": 30 * DAY}, "sleep between 0 and"),
    ({"until": "2999-01-01T00:00:00+00:00"}, "s ahead"),
])
def test_the_sleep_tool_refuses_what_it_cannot_wait_for(args: dict[str, Any],
                                                        error: str) -> None:
    tool_: Tool = sleep_tool()
    with pytest.raises(ValueError, match=error):
        tool_.sleep_seconds(args, 0.0)


@pytest.mark.parametrize(("sleeps", "args", "expected"), [
    (10.0, {}, 10.0),
    (lambda a: a["s"], {"s": 4}, 4.0),
    (lambda a: None, {}, None),
    (lambda a: dt.datetime.fromtimestamp(1_000_100, dt.UTC), {}, 100.0),
    (lambda a: dt.datetime.fromtimestamp(999_000, dt.UTC), {}, 0.0),  # past: runs at once
])
def test_how_long_a_call_sleeps(sleeps: Any, args: dict[str, Any],
                                expected: float | None) -> None:
    @tool(sleeps=sleeps)
    def wait_a_bit() -> str:
        """Waits."""
        return "ok"

    assert wait_a_bit.sleep_seconds(args, 1_000_000.0) == expected


async def test_a_sleep_past_the_deployments_retention_is_refused_for_the_model() -> None:
    ran: list[dict[str, Any]] = []
    model = ScriptedModel.from_turns([calls_turn([("follow_up", {"days": 40})]),
                                      text_turn("done")])
    loop = make_loop(model, follow_up_tools(ran), settings=Settings(retention_days=30),
                     waker=MemoryWaker())
    await loop.submit(QueryMessage(request_id="long", text="follow up in 40 days"))
    await loop.run_until_idle()
    (step,) = await loop.deps.store.steps.get_steps(run_id_for_request("long"), [STEP])
    assert step is not None and step.result is not None and ran == []
    assert "longer than this deployment keeps a run" in step.result["response"]["error"]



def _asks(me: str, callee: str) -> FunctionModel:
    """``me`` asks ``callee`` once, then answers with what it said (or how it failed)."""
    tool_name = f"ask_{callee}"

    def play(conv: Conversation) -> Reply | str:
        if not conv.called(tool_name):
            return call(tool_name, {"question": "?"})
        found = next(r for r in conv.results if r.name == tool_name)
        return f"{me}: {found.result if found.error is None else found.error}"

    return FunctionModel(play)


def napping_team(levels: int) -> list[Agent]:
    """The top agent first: planner -> (researcher ->) napper; the napper sleeps an hour,
    then answers; each caller answers with what its callee said."""

    @tool(sleeps=lambda args: args["hours"] * 3600.0)
    def nap(hours: int) -> str:
        """Sleep some hours."""
        return "rested"

    agents = [Agent("napper", "Nap.", [nap], script=ScriptedTurns(
        [call("nap", {"hours": 1}), text("napper: rested")]))]
    for name in ("researcher", "planner")[2 - levels:]:
        callee = agents[0]
        agents.insert(0, Agent(name, "Ask.", [callee.as_tool()],
                               script=_asks(name, callee.name)))
    return agents


@pytest.mark.parametrize("levels", [1, 2])
async def test_a_sleep_deep_in_a_tree_spends_none_of_its_callers_time(levels: int) -> None:
    # A sleep is free wherever it happens: the callers' clocks run only while their children
    # work, so an hour's nap below a caller of max_seconds=100 leaves it its answer.
    team = napping_team(levels)
    result = await AgentTester(team).ask("go", agent=team[0].name,
                                         options=RunOptions(max_seconds=100))
    said = "napper: rested" if levels == 1 else "researcher: napper: rested"
    assert (result.status, result.stop_reason, result.answer) == (
        "completed", "answered", f"{team[0].name}: {said}"), result


def _child_call(index: int, since: float, at: float, ran: float | None) -> StepRecord:
    payload = {} if ran is None else {"ran_seconds": ran}
    return StepRecord(key=str(StepKey.tool(0, index)), kind="tool", name="ask", turn=0,
                      index=index, status=StepStatus.COMPLETED, completed_at=at,
                      waiting=Waiting(kind="child", tool="ask", since=since, deadline=1e9),
                      decision=StepDecision(decision="received", by="child", at=at,
                                            payload=payload))


def _plain_call(index: int, completed_at: float) -> StepRecord:
    return StepRecord(key=str(StepKey.tool(0, index)), kind="tool", name="look", turn=0,
                      index=index, status=StepStatus.COMPLETED, completed_at=completed_at)


_RUN = RunRecord(run_id="r", request_id="r", request_hash="h", conversation_id="r", agent="a",
                 text="t", model="m", created_at=0.0,
                 limits=RunLimits(max_steps=5, max_seconds=100, max_tool_calls=5))


@pytest.mark.parametrize(("turn", "wait_ended_at", "idle"), [
    ([], 0.0, (0.0, 0.0)),  # no child: nothing to credit
    ([_plain_call(0, 50.0)], 0.0, (0.0, 0.0)),
    ([_child_call(0, 10.0, 3710.0, 20.0)], 0.0, (3680.0, 3710.0)),  # it slept the rest
    ([_child_call(0, 10.0, 90.0, 80.0)], 0.0, (0.0, 90.0)),  # it worked all along
    ([_child_call(0, 10.0, 3710.0, None)], 0.0, (0.0, 3710.0)),  # figures from before: in full
    # Side by side: the longest-running child's time is the run's, the rest is free.
    ([_child_call(0, 10.0, 3710.0, 20.0), _child_call(1, 10.0, 60.0, 50.0)], 0.0,
     (3650.0, 3710.0)),
    # Another call of the turn keeps the run busy up to its completion.
    ([_child_call(0, 10.0, 3710.0, 20.0), _plain_call(1, 1000.0)], 0.0, (2710.0, 3710.0)),
    # A wait of the turn already counted up to 2000 is not counted again.
    ([_child_call(0, 10.0, 3710.0, 20.0)], 2000.0, (1710.0, 3710.0)),
])
def test_the_time_a_turn_waited_for_children_that_its_clock_does_not_count(
        turn: list[StepRecord], wait_ended_at: float, idle: tuple[float, float]) -> None:
    run = _RUN.model_copy(update={"wait_ended_at": wait_ended_at})
    assert children.idle_seconds(run, turn) == pytest.approx(idle)
