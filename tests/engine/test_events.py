"""A call that waits for a named event holds no process, no lease and no redelivery; the event
(sent to the run, or published to the queries topic) resumes it with its payload, whichever
arrives first, and a lost half of the delivery is finished by the sweeper.

Driven through the real dispatch on the in-memory store, with a manual clock.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from ackloop.config.settings import Settings
from ackloop.docdb.base import Write
from ackloop.domain.keys import StepKey, run_id_for_request
from ackloop.domain.records import ReceivedEvent, RunStatus, StepDecision, StepStatus
from ackloop.domain.wire import EventMessage, QueryMessage
from ackloop.engine.ingest import start_run
from ackloop.engine.sweep import sweep
from ackloop.engine.waits import arrivals
from ackloop.engine.waits import core as waits
from ackloop.model.scripted import ScriptedModel
from ackloop.model.turns import calls_turn, text_turn
from ackloop.store import DecisionRefused
from ackloop.tools import ToolContext, ToolSet, tool
from tests.engine.fakes import api_of, make_loop

SETTINGS = Settings()
STEP = str(StepKey.tool(0, 0))


def shipping_tools(seen: list[dict[str, Any]], *, timeout: float | None = None) -> ToolSet:
    @tool(waits_for=lambda args: f"shipped:{args['order']}", event_timeout_seconds=timeout)
    def await_shipment(order: str, context: ToolContext) -> dict[str, Any]:
        """Wait until the order ships."""
        seen.append({"order": order, "event": context.event})
        return {"order": order, "tracking": (context.event or {}).get("tracking")}

    @tool
    def stock(order: str) -> int:
        """Items in stock for the order."""
        return 3

    return ToolSet([await_shipment, stock])


def model(*calls: tuple[str, dict[str, Any]]) -> ScriptedModel:
    return ScriptedModel.from_turns([calls_turn(list(calls)), text_turn("done")])


async def shipping_run(request_id: str, seen: list[dict[str, Any]], *,
                       timeout: float | None = None, model_client: Any = None
                       ):  # type: ignore[no-untyped-def]
    loop = make_loop(model_client or model(("await_shipment", {"order": "A7"})),
                     shipping_tools(seen, timeout=timeout), settings=SETTINGS)
    await loop.submit(QueryMessage(request_id=request_id, text="ship A7"))
    await loop.run_until_idle()
    return loop, run_id_for_request(request_id)


def shipped(loop, tracking: str = "T-1", by: str = "carrier") -> ReceivedEvent:  # type: ignore[no-untyped-def]
    return ReceivedEvent(payload={"tracking": tracking}, by=by, at=loop.deps.clock.now())


async def test_a_call_waits_for_its_event_then_runs_with_the_payload() -> None:
    seen: list[dict[str, Any]] = []
    loop, run_id = await shipping_run("wait", seen)
    (step,) = await loop.deps.store.steps.get_steps(run_id, [STEP])
    assert step is not None and step.status is StepStatus.WAITING and step.waiting is not None
    assert (step.waiting.kind, step.waiting.event) == ("event", "shipped:A7")
    assert step.lease_expires_at == 0.0 and seen == [] and not loop.queued()
    (notice,) = loop.notices
    assert (notice.waiting_for, notice.event_name, notice.step) == ("event", "shipped:A7", STEP)

    delivered = await arrivals.deliver(loop.deps, run_id, "shipped:A7", shipped(loop))
    assert delivered.recorded and delivered.resumed == [STEP]
    await loop.run_until_idle()
    assert seen == [{"order": "A7", "event": {"tracking": "T-1"}}]
    (step,) = await loop.deps.store.steps.get_steps(run_id, [STEP])
    assert step is not None and step.status is StepStatus.COMPLETED
    assert step.decision is not None and step.decision.decision == "received"
    assert step.decision.by == "carrier"
    assert step.result is not None
    assert step.result["response"] == {"result": {"order": "A7", "tracking": "T-1"}}
    assert loop.answers[0].status == "completed"


async def test_an_event_that_arrives_first_is_kept_and_the_call_runs_at_once() -> None:
    seen: list[dict[str, Any]] = []
    loop = make_loop(model(("await_shipment", {"order": "A7"})), shipping_tools(seen),
                     settings=SETTINGS)
    run_id = run_id_for_request("early")
    await loop.submit(QueryMessage(request_id="early", text="ship A7"))
    # The event is published to the queries topic right behind the query: the run exists by
    # the time it is delivered, and no call waits for it yet.
    event = EventMessage(type="event", run_id=run_id, name="shipped:A7",
                         payload={"tracking": "T-0"})
    await loop.publisher.publish(loop.deps.settings.queries_topic,
                                 event.model_dump_json().encode())
    await loop.run_until_idle()
    assert seen == [{"order": "A7", "event": {"tracking": "T-0"}}] and not loop.notices
    (step,) = await loop.deps.store.steps.get_steps(run_id, [STEP])
    assert step is not None and step.status is StepStatus.COMPLETED
    # Recorded as every wait is (what it waited for, what resolved it), though it never waited.
    assert step.waiting is not None and step.waiting.event == "shipped:A7"
    assert step.decision is not None and step.decision.decision == "received"
    assert step.decision.payload == {"tracking": "T-0"} and step.decision.by == arrivals.PUBSUB
    run = await loop.deps.store.runs.get_run(run_id)
    assert run is not None and run.received["shipped:A7"].by == arrivals.PUBSUB
    assert run.status is RunStatus.COMPLETED


async def test_an_event_that_lands_between_the_read_and_the_waiting_commit_is_not_missed(
) -> None:
    seen: list[dict[str, Any]] = []
    loop = make_loop(model(("await_shipment", {"order": "A7"})), shipping_tools(seen),
                     settings=SETTINGS)
    store = loop.deps.store
    wait_step = store.waits.wait_step
    raced: list[bool] = []

    async def racing_wait_step(*args: Any, **kwargs: Any) -> None:
        # The event is kept after the step read the run and before its waiting commit.
        if not raced:
            raced.append(True)
            await store.waits.receive_event(run_id_for_request("race"), "shipped:A7",
                                            shipped(loop, "T-9"))
        await wait_step(*args, **kwargs)

    store.waits.wait_step = racing_wait_step  # type: ignore[method-assign]
    await loop.submit(QueryMessage(request_id="race", text="ship A7"))
    await loop.run_until_idle()
    assert raced and seen == [{"order": "A7", "event": {"tracking": "T-9"}}]
    assert loop.answers[0].status == "completed" and not loop.notices


async def test_a_run_that_changes_at_every_waiting_commit_still_finds_its_event_at_once(
) -> None:
    """The run changes between the step's read and each of its waiting commits, more times
    than a turn of a few parallel calls makes it (their waits, their events, their decisions),
    and the event is kept with the last change: the step runs with it in that one delivery,
    without an error and a redelivery."""
    seen: list[dict[str, Any]] = []
    loop = make_loop(model(("await_shipment", {"order": "A7"})), shipping_tools(seen),
                     settings=SETTINGS)
    store = loop.deps.store
    wait_step = store.waits.wait_step
    changes = 8  # twice the attempts a waiting step used to make

    async def busy_wait_step(*args: Any, **kwargs: Any) -> None:
        run_id = run_id_for_request("busy")
        if len(raced) < changes - 1:  # another writer's commit on the run
            raced.append(True)
            await store.db.commit([Write("update", store.run_path(run_id),
                                         {"progress_at": float(len(raced))})])
        elif len(raced) == changes - 1:
            raced.append(True)
            await store.waits.receive_event(run_id, "shipped:A7", shipped(loop, "T-9"))
        await wait_step(*args, **kwargs)

    raced: list[bool] = []
    store.waits.wait_step = busy_wait_step  # type: ignore[method-assign]
    await loop.submit(QueryMessage(request_id="busy", text="ship A7"))
    await loop.run_until_idle()
    assert len(raced) == changes
    assert seen == [{"order": "A7", "event": {"tracking": "T-9"}}]
    assert loop.answers[0].status == "completed" and not loop.notices
    tool = loop.deliveries("tool")
    assert len(tool) == 1 and tool[0].outcome.acknowledged, tool


async def test_the_same_event_again_is_a_repeat_and_another_one_is_refused() -> None:
    seen: list[dict[str, Any]] = []
    loop, run_id = await shipping_run("repeat", seen)
    first = await arrivals.deliver(loop.deps, run_id, "shipped:A7", shipped(loop))
    again = await arrivals.deliver(loop.deps, run_id, "shipped:A7", shipped(loop, by="other"))
    assert first.recorded and not again.recorded and again.event.by == "carrier"
    assert again.resumed == [STEP]  # re-sent: the claim absorbs the duplicate
    with pytest.raises(DecisionRefused) as refused:
        await arrivals.deliver(loop.deps, run_id, "shipped:A7", shipped(loop, "T-2"))
    assert refused.value.reason == "already_received"
    await loop.run_until_idle()
    assert len(seen) == 1 and loop.answers[0].status == "completed"
    # The kept event once more, after the run ended (a sender unsure it got through): still a
    # repeat, not a refusal, and nothing runs again.
    repeat = await arrivals.deliver(loop.deps, run_id, "shipped:A7", shipped(loop))
    assert not repeat.recorded and repeat.event.payload == {"tracking": "T-1"}
    await loop.run_until_idle()
    assert len(seen) == 1
    with pytest.raises(DecisionRefused) as ended:
        await arrivals.deliver(loop.deps, run_id, "late", shipped(loop))
    assert ended.value.reason == "run_ended"
    with pytest.raises(DecisionRefused) as missing:
        await arrivals.deliver(loop.deps, "no-such-run", "x", shipped(loop))
    assert missing.value.reason == "not_found"


async def test_an_approval_cannot_decide_a_call_that_waits_for_an_event() -> None:
    loop, run_id = await shipping_run("not-an-approval", [])
    with pytest.raises(DecisionRefused) as refused:
        await waits.resolve(loop.deps, run_id, STEP, StepDecision(
            decision="approve", by="alice", at=1.0), "approval")
    assert refused.value.reason == "not_waiting" and "shipped:A7" in str(refused.value)


async def test_no_event_before_the_deadline_is_an_error_the_model_reads() -> None:
    seen: list[dict[str, Any]] = []
    loop, run_id = await shipping_run("deadline", seen, timeout=3600)
    loop.deps.clock.advance(3000)  # type: ignore[attr-defined]
    assert await sweep(loop.deps) == []  # not idle: it waits
    loop.deps.clock.advance(601)  # type: ignore[attr-defined]
    (swept,) = await sweep(loop.deps)
    assert swept.action == "resumed"
    await loop.run_until_idle()
    (step,) = await loop.deps.store.steps.get_steps(run_id, [STEP])
    assert seen == [] and step is not None and step.result is not None
    assert step.result["response"] == {
        "error": "not run: no 'shipped:A7' event before the deadline"}
    run = await loop.deps.store.runs.get_run(run_id)
    assert run is not None and run.status is RunStatus.COMPLETED  # the hour is not counted


async def test_an_event_kept_by_a_delivery_that_died_before_resuming_is_finished_by_the_sweeper(
) -> None:
    seen: list[dict[str, Any]] = []
    loop, run_id = await shipping_run("lost-half", seen)
    await loop.deps.store.waits.receive_event(run_id, "shipped:A7", shipped(loop))  # then "crashed"
    loop.deps.clock.advance(SETTINGS.sweep_stale_seconds - 1)  # type: ignore[attr-defined]
    assert await sweep(loop.deps) == []
    loop.deps.clock.advance(2)  # type: ignore[attr-defined]
    (swept,) = await sweep(loop.deps)
    assert swept.action == "resumed" and STEP in swept.detail
    await loop.run_until_idle()
    assert seen == [{"order": "A7", "event": {"tracking": "T-1"}}]
    assert loop.answers[0].status == "completed"


async def test_parallel_calls_each_wait_for_their_own_event_and_the_join_holds() -> None:
    seen: list[dict[str, Any]] = []
    loop, run_id = await shipping_run("parallel", seen, model_client=model(
        ("await_shipment", {"order": "A7"}), ("await_shipment", {"order": "B2"}),
        ("stock", {"order": "A7"})))
    steps = await loop.deps.store.steps.list_steps(run_id)
    assert [s.status for s in steps if s.kind == "tool"] == [
        StepStatus.WAITING, StepStatus.WAITING, StepStatus.COMPLETED]
    await arrivals.deliver(loop.deps, run_id, "shipped:B2", shipped(loop, "T-B"))
    await loop.run_until_idle()
    assert seen == [{"order": "B2", "event": {"tracking": "T-B"}}] and not loop.answers
    await arrivals.deliver(loop.deps, run_id, "shipped:A7", shipped(loop, "T-A"))
    await loop.run_until_idle()
    assert len(seen) == 2 and loop.answers[0].status == "completed"


async def test_a_call_whose_event_cannot_be_named_fails_for_the_model() -> None:
    @tool(waits_for=lambda args: f"bad name/{args['order']}")
    def await_bad(order: str) -> str:
        """Wait for an event with an invalid name."""
        return order

    loop = make_loop(model(("await_bad", {"order": "A7"})), ToolSet([await_bad]),
                     settings=SETTINGS)
    await loop.submit(QueryMessage(request_id="badname", text="x"))
    await loop.run_until_idle()
    (step,) = await loop.deps.store.steps.get_steps(run_id_for_request("badname"), [STEP])
    assert step is not None and step.result is not None
    assert "not run: the event this call waits for is named 'bad name/A7'" in json.dumps(
        step.result["response"])
    assert loop.answers[0].status == "completed"


async def test_an_event_message_for_no_run_is_acknowledged_and_recorded() -> None:
    loop = make_loop(model(("stock", {"order": "A7"})), shipping_tools([]), settings=SETTINGS)
    event = EventMessage(type="event", run_id="nobody", name="shipped:A7")
    await loop.publisher.publish(loop.deps.settings.queries_topic,
                                 event.model_dump_json().encode())
    await loop.run_until_idle()
    (entry,) = loop.deliveries("query")
    assert entry.outcome.acknowledged and entry.outcome.body["reason"] == "not_found"
    poison = await loop.deps.store.letters.list_poison()
    assert [p["reason"] for p in poison] == ["not_found"]


async def test_a_published_event_reaches_only_runs_of_the_topics_own_caller() -> None:
    """S7: an event published to the queries topic resumed the waiting call of a run an API
    caller owns, with the publisher's payload. The topic's publishers act as ``anonymous`` (as
    their queries do): another owner's run is missing for them, the event is poison, the call
    keeps waiting, and the owner's own event resumes it."""
    seen: list[dict[str, Any]] = []
    loop = make_loop(model(("await_shipment", {"order": "A7"})), shipping_tools(seen),
                     settings=SETTINGS)
    run, _ = await start_run(loop.deps, QueryMessage(request_id="ada", text="ship A7"),
                             owner="google:ada")
    await loop.run_until_idle()
    (step,) = await loop.deps.store.steps.get_steps(run.run_id, [STEP])
    assert step is not None and step.status is StepStatus.WAITING

    forged = EventMessage(type="event", run_id=run.run_id, name="shipped:A7",
                          payload={"tracking": "FORGED"})
    await loop.publisher.publish(loop.deps.settings.queries_topic,
                                 forged.model_dump_json().encode())
    await loop.run_until_idle()
    refused = loop.deliveries("query")[-1].outcome
    assert refused.acknowledged and refused.body["reason"] == "not_found"
    (step,) = await loop.deps.store.steps.get_steps(run.run_id, [STEP])
    assert step is not None and step.status is StepStatus.WAITING and seen == []
    kept = await loop.deps.store.runs.get_run(run.run_id)
    assert kept is not None and kept.received == {}

    delivered = await arrivals.deliver(loop.deps, run.run_id, "shipped:A7",
                                     shipped(loop, by="google:ada"), owner="google:ada")
    assert delivered.resumed == [STEP]
    await loop.run_until_idle()
    assert seen == [{"order": "A7", "event": {"tracking": "T-1"}}]


def test_a_tool_cannot_wait_for_both_an_approval_and_an_event() -> None:
    with pytest.raises(ValueError, match="choose one"):
        @tool(requires_approval=True, waits_for="x")
        def both() -> None:
            """Both."""
    with pytest.raises(ValueError, match="event name 'a b'"):
        @tool(waits_for="a b")
        def spaced() -> None:
            """Spaced."""


async def test_an_event_after_the_deadline_is_answered_409_and_runs_nothing() -> None:
    """The call waited 600 s for its event; the event comes at 601 s: the call is rejected as at
    its deadline (the model reads that no event came before it), the tool does not run, and the
    API says so with 409 ``deadline_passed`` instead of answering that the event resumed it."""
    seen: list[dict[str, Any]] = []
    loop, run_id = await shipping_run("late-event", seen, timeout=600)
    loop.deps.clock.advance(601)  # type: ignore[attr-defined]
    async with api_of(loop) as api:
        late = await api.post(f"/runs/{run_id}/events/shipped:A7",
                              json={"payload": {"tracking": "T-9"}})
    assert late.status_code == 409, late.text
    assert late.json()["code"] == "deadline_passed" and STEP in late.text
    await loop.run_until_idle()
    assert seen == []
    (step,) = await loop.deps.store.steps.get_steps(run_id, [STEP])
    assert step is not None and step.decision is not None
    assert (step.decision.decision, step.decision.by) == ("reject", "deadline")
    assert step.result is not None and "before the deadline" in str(step.result)
    run = await loop.deps.store.runs.get_run(run_id)
    assert run is not None and run.status is RunStatus.COMPLETED
