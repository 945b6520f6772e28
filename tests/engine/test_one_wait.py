"""A case one kind of wait handles, every kind handles: a call waiting for a person's decision,
a named event, its child run or a time (a call that sleeps) goes through each rule of the one
mechanism (:mod:`ackloop.engine.waits`) alike: its deadline, a cancel, the sweeper finishing a lost
delivery of its resolution, a dead letter of that delivery redriven, and what it counts.

On the in-memory engine with the real dispatch, a manual clock and no sleeps.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from ackloop.agents.agent import Agent
from ackloop.bus.memory import Published
from ackloop.config.settings import Settings
from ackloop.domain.keys import run_id_for_request
from ackloop.domain.records import (
    ReceivedEvent,
    RunRecord,
    RunStatus,
    StepDecision,
    StepRecord,
    StepStatus,
    Waiting,
)
from ackloop.domain.wire import EventMessage, QueryMessage
from ackloop.engine.ending import cancel_run
from ackloop.engine.outbox_sending import committed_message, encode
from ackloop.engine.redrive import redrive
from ackloop.engine.sweep import sweep
from ackloop.engine.waits import core as waits
from ackloop.engine.waits.kinds import KINDS
from ackloop.model.base import ModelRequest, ModelTurn
from ackloop.model.turns import calls_turn, text_turn
from ackloop.testing.inprocess import InProcessLoop
from ackloop.tools import ToolContext, ToolSet, tool
from tests.engine.test_children import _responses, booker_turn, child_of, team_loop
from tests.engine.test_guarantees import take
from tests.engine.test_holes import dead_letter

KEY = "0000-tool-000"
WAIT_SECONDS = 3600.0
SETTINGS = Settings(approval_timeout_seconds=WAIT_SECONDS,
                    default_max_seconds=4 * WAIT_SECONDS)  # a child's wait is run time
CALLS: dict[str, tuple[str, dict[str, Any]]] = {
    "approval": ("transfer", {"amount": 5}),
    "event": ("await_shipment", {"order": "A7"}),
    "child": ("ask_booker", {"question": "book Lisbon"}),
    "time": ("follow_up", {"hours": 1}),
}
RAN = {"approval": "sent 5", "event": "shipped T-1", "child": "booked Lisbon",
       "time": "followed up"}
"""What the root's answer says when the call went on with its resolution."""


def world(kind: str) -> InProcessLoop:
    """A root agent whose one call waits, of ``kind``; a child (``booker``) itself waits for
    a person, much longer than its caller, so it is still running while its caller waits."""

    @tool(requires_approval=True)
    def transfer(amount: int) -> str:
        """Send money."""
        return f"sent {amount}"

    @tool(waits_for=lambda args: "shipped")
    def await_shipment(order: str, context: ToolContext) -> str:
        """Wait until the order ships."""
        return f"shipped {(context.event or {}).get('tracking')}"

    @tool(requires_approval=True, approval_timeout_seconds=100 * WAIT_SECONDS)
    def book(place: str) -> str:
        """Book a place."""
        return f"booked {place}"

    @tool(sleeps=lambda args: args["hours"] * WAIT_SECONDS)
    def follow_up(hours: int) -> str:
        """Follow up after some hours."""
        return "followed up"

    booker = Agent("booker", "Book things.", ToolSet([book]))
    root = Agent("root", "Work.", [ToolSet([transfer, await_shipment, follow_up]),
                                   booker.as_tool()])
    name, args = CALLS[kind]

    def play(request: ModelRequest) -> ModelTurn:
        if request.agent == "booker":
            return booker_turn(request)
        answers = _responses(request)
        if name not in answers:
            return calls_turn([(name, args)], request=request)
        said = answers[name].get("result", answers[name].get("error"))
        return text_turn(f"root: {said}", request=request)

    return team_loop([root, booker], play, SETTINGS)  # type: ignore[arg-type]


async def waiting(kind: str) -> tuple[InProcessLoop, RunRecord]:
    """The root's call waits, of ``kind`` (its child, if any, still running)."""
    loop = world(kind)
    await loop.submit(QueryMessage(request_id="q", text="go", agent="root"))
    await loop.run_until_idle()
    root = await run_of(loop, run_id_for_request("q"))
    step = await step_of(loop, root)
    assert step.status is StepStatus.WAITING and step.waiting is not None
    assert step.waiting.kind == kind and step.decision is None
    assert step.wait_cost is not None  # the waiting commit is counted, whatever the kind
    return loop, root


async def run_of(loop: InProcessLoop, run_id: str) -> RunRecord:
    run = await loop.deps.store.runs.get_run(run_id)
    assert run is not None
    return run


async def step_of(loop: InProcessLoop, root: RunRecord) -> StepRecord:
    (step,) = await loop.deps.store.steps.get_steps(root.run_id, [KEY])
    assert step is not None
    return step


def advance(loop: InProcessLoop, seconds: float) -> None:
    loop.deps.clock.advance(seconds)  # type: ignore[attr-defined]


async def ended(loop: InProcessLoop, root: RunRecord) -> tuple[RunRecord, StepRecord]:
    await loop.run_until_idle()
    return await run_of(loop, root.run_id), await step_of(loop, root)


async def counted_child(loop: InProcessLoop, kind: str, root: RunRecord) -> None:
    """A child's spending counts in its caller however the call ended; no other kind spends."""
    if kind == "child":
        child = await child_of(loop, root, KEY)
        assert child.status.terminal, child
        assert root.usage.children is not None and root.usage.children.model_calls >= 1, root
        assert root.cost is not None and root.cost.children_usd, root.cost
    else:
        assert root.usage.children is None, root.usage


@pytest.mark.parametrize("kind", sorted(KINDS))
async def test_every_kind_of_wait_is_rejected_at_its_deadline_and_counts_what_it_spent(
        kind: str) -> None:
    loop, root = await waiting(kind)
    advance(loop, WAIT_SECONDS + 1)

    await sweep(loop.deps)
    root, step = await ended(loop, root)

    assert root.status is RunStatus.COMPLETED, root
    if kind == "time":  # its deadline is its time: the sweeper finds it come, the call runs
        assert step.decision is not None and step.decision.by == "clock", step.decision
        assert root.answer == f"root: {RAN[kind]}", root.answer
    else:
        assert step.decision is not None and step.decision.by == "deadline", step.decision
        assert (root.answer or "").startswith("root: not run"), root.answer
    await counted_child(loop, kind, root)
    if kind == "child":
        assert (await child_of(loop, root, KEY)).status is RunStatus.CANCELLED


@pytest.mark.parametrize("kind", sorted(KINDS))
async def test_every_kind_of_wait_is_rejected_by_a_cancel_which_goes_down_to_a_child(
        kind: str) -> None:
    loop, root = await waiting(kind)

    await cancel_run(loop.deps, root.run_id)
    root, step = await ended(loop, root)

    assert step.decision is not None, step
    if kind == "child":  # the call waited for its cancelled child's end, its final figures
        assert step.decision.by == "child" and step.decision.payload is not None
        assert step.decision.payload["status"] == RunStatus.CANCELLED.value, step.decision
    else:
        assert step.decision.by == waits.CANCEL, step.decision
    assert root.status is RunStatus.CANCELLED, root
    await counted_child(loop, kind, root)
    if kind == "child":
        assert (await child_of(loop, root, KEY)).status is RunStatus.CANCELLED


async def _decided_unsent(loop: InProcessLoop, root: RunRecord) -> None:
    await loop.deps.store.waits.decide_step(root.run_id, KEY, StepDecision(
        decision="approve", by="ann", at=loop.deps.clock.now()))


async def _kept_unresolved(loop: InProcessLoop, root: RunRecord) -> None:
    await loop.deps.store.waits.receive_event(root.run_id, "shipped", ReceivedEvent(
        payload={"tracking": "T-1"}, by="carrier", at=loop.deps.clock.now()))


async def _ended_unsent(loop: InProcessLoop, root: RunRecord) -> None:
    await child_answers(loop, root)  # its end's message is lost


async def child_answers(loop: InProcessLoop, root: RunRecord) -> list[Published]:
    """The root's child is approved and runs to its end; its end's messages, held back."""
    child = await child_of(loop, root, KEY)
    (book,) = [s for s in await loop.deps.store.steps.list_steps(child.run_id)
               if s.status is StepStatus.WAITING]
    await waits.resolve(loop.deps, child.run_id, book.key, StepDecision(
        decision="approve", by="ann", at=loop.deps.clock.now()))
    ends: list[Published] = []
    pending = take(loop)
    while pending:  # the child's steps, all but its end's message
        ends += [m for m in pending if b"child_ended" in m.data]
        for message in pending:
            if b"child_ended" not in message.data and message.topic != SETTINGS.answers_topic:
                await loop.deliver(kind_of_topic(message), message)
        pending = take(loop)
    assert (await child_of(loop, root, KEY)).status is RunStatus.COMPLETED
    return ends


def kind_of_topic(message: Published) -> Any:
    return {SETTINGS.queries_topic: "query", SETTINGS.model_steps_topic: "model",
            SETTINGS.tool_steps_topic: "tool"}[message.topic]


async def _woke_unsent(loop: InProcessLoop, root: RunRecord) -> None:
    advance(loop, WAIT_SECONDS)  # its time comes; its wake is lost (no waker here)


LOST: dict[str, Callable[[InProcessLoop, RunRecord], Awaitable[None]]] = {
    "approval": _decided_unsent, "event": _kept_unresolved, "child": _ended_unsent,
    "time": _woke_unsent}
"""Per kind, its resolution arriving with its delivery to the call lost: a person's decision
recorded whose re-send was lost; an event kept on the run whose resolution of the call was
lost; a child that ended whose end's message was lost; a time come whose wake was lost."""


@pytest.mark.parametrize("kind", sorted(KINDS))
async def test_the_sweeper_finishes_a_lost_delivery_of_every_kind_of_resolution(
        kind: str) -> None:
    loop, root = await waiting(kind)
    await LOST[kind](loop, root)
    take(loop)
    advance(loop, SETTINGS.sweep_stale_seconds + 1)

    swept = await sweep(loop.deps)
    root, _ = await ended(loop, root)

    assert root.status is RunStatus.COMPLETED, (root, swept)
    assert root.answer == f"root: {RAN[kind]}", root.answer
    await counted_child(loop, kind, root) if kind == "child" else None


async def _resolution_message(loop: InProcessLoop, root: RunRecord, kind: str) -> Published:
    """The message that carries the call's resolution, published and not yet delivered."""
    if kind == "approval":
        await waits.resolve(loop.deps, root.run_id, KEY, StepDecision(
            decision="approve", by="ann", at=loop.deps.clock.now()))
        (message,) = [m for m in take(loop) if m.topic == SETTINGS.tool_steps_topic]
        return message
    if kind == "event":
        event = EventMessage(type="event", run_id=root.run_id, name="shipped",
                             payload={"tracking": "T-1"})
        return Published(SETTINGS.queries_topic, event.model_dump_json().encode(), {}, "ev-1")
    if kind == "time":  # its wake: the step's own message, published at its time
        advance(loop, WAIT_SECONDS)
        entry = await committed_message(loop.deps, root.run_id, KEY)
        assert entry is not None
        return Published(SETTINGS.tool_steps_topic, encode(entry.data),
                         {"run_id": root.run_id, "step": KEY}, "wake-1")
    (end,) = await child_answers(loop, root)
    return end


@pytest.mark.parametrize("kind", sorted(KINDS))
async def test_a_dead_lettered_resolution_of_every_kind_is_redriven_and_resumes_its_call(
        kind: str) -> None:
    loop, root = await waiting(kind)
    message = await _resolution_message(loop, root, kind)

    outcome = await dead_letter(loop, message, f"dl-{kind}")
    assert outcome.acknowledged, outcome
    assert (await run_of(loop, root.run_id)).status is RunStatus.RUNNING  # nothing failed
    done = await redrive(loop.deps.store, loop.publisher, loop.deps.settings, loop.deps.clock)
    root, _ = await ended(loop, root)

    assert [d.outcome for d in done] == ["redriven"], done
    assert root.status is RunStatus.COMPLETED, root
    assert root.answer == f"root: {RAN[kind]}", root.answer


@pytest.mark.parametrize(("stored", "kind", "clock_runs"), [
    ({"kind": "event", "event": "child.0000-tool-003"}, "child", True),
    ({"kind": "event", "event": "shipped:A7"}, "event", False),
    ({"kind": "approval"}, "approval", False),
    ({"kind": "child", "event": "child.0000-tool-000", "clock_runs": True}, "child", True),
])
def test_a_wait_stored_before_children_had_a_kind_of_their_own_loads_as_a_child_wait(
        stored: dict[str, Any], kind: str, clock_runs: bool) -> None:
    waiting = Waiting.model_validate({"tool": "t", "since": 0.0, "deadline": 1.0, **stored})
    assert (waiting.kind, waiting.clock_runs) == (kind, clock_runs)
