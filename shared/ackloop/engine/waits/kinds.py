"""The kinds of wait, each only what is its own.

A call waits for a person's decision (``approval``), a named event (``event``), its child
run's end (``child``) or a time (``time``: a call that sleeps). Everything else about a wait
(its record on the step, its deadline, its resolution, cancel, the sweeper, dead letters,
redrive, what the call counts) is the one mechanism of :mod:`ackloop.engine.waits.core`, so
a case it handles for one kind it handles for every kind. A kind supplies:

- ``arrived``: whether what it waits for is already at its source, and the resolution if so
  (an event the run keeps; a child run that has ended; a person's decision never is);
- ``outcome``: what the model reads of a resolution (None: the tool runs, with the approved
  arguments or the event's payload);
- ``clock_runs``: whether the run's clock runs while it waits (a child's work is its parent's
  time), and so whether the wait keeps anything on the run's document at all;
- ``announced``: whether a notice goes out on the answers topic (a person or a sender acts on
  it; nobody outside acts on a child);
- ``timeout``: the tool's own wait length, if it sets one;
- ``abandon``: what ending the wait without its resolution does (a child is cancelled),
  ``spent``: what the call counts when it ends (a child's cost and usage, however it
  ended), and ``ending``: what it waits for that is still to end on its own, whose figures
  come later (a child's run id while it works);
- ``arm``: what it does once the wait is recorded, and again on each delivery that finds the
  call still waiting (a time's wake is armed: :mod:`ackloop.bus.wakes`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ackloop.bus.wakes import Wake, WakeNotArmed, rfc3339
from ackloop.domain.jsondict import JsonDict
from ackloop.domain.records import (
    CLOCK,
    DEADLINE,
    RunRecord,
    StepDecision,
    StepRecord,
    StepStatus,
    Waiting,
    WaitKindName,
)
from ackloop.engine import children
from ackloop.engine.deps import Deps
from ackloop.engine.outbox_sending import committed_message, encode
from ackloop.store import DecisionRefused
from ackloop.tools.base import ToolOutcome
from ackloop.tools.definition import Tool, find_tool

log = logging.getLogger(__name__)

CHILD = "child"
"""Who resolved a call with its child run's end."""

CancelRun = Callable[[Deps, str], Awaitable[object]]
"""Cancels a run (and what it waits for in turn): handed to a kind's ``abandon`` by the
mechanism, so that no kind imports the run's ending."""


@dataclass(frozen=True)
class WaitKind:
    """What one kind of wait supplies to the mechanism (see the module docstring)."""

    name: WaitKindName
    clock_runs: bool
    announced: bool
    timeout: Callable[[Tool], float | None]
    arrived: Callable[[Deps, RunRecord, str, Waiting], Awaitable[StepDecision | None]]
    outcome: Callable[[StepDecision, Waiting], ToolOutcome | None]
    abandon: Callable[[Deps, RunRecord, str, CancelRun], Awaitable[bool]]
    spent: Callable[[Deps, RunRecord, str, StepDecision | None], Awaitable[JsonDict | None]]
    ending: Callable[[Deps, RunRecord, str], Awaitable[str | None]]
    arm: Callable[[Deps, RunRecord, str, Waiting], Awaitable[None]]


def rejection(decision: StepDecision, waiting: Waiting | None = None) -> ToolOutcome:
    """What the model reads of a rejected call, whatever it waited for."""
    if decision.by == DEADLINE and waiting is not None and waiting.kind == "event":
        text = f"not run: no {waiting.event!r} event before the deadline"
    elif decision.by == DEADLINE and waiting is not None and waiting.kind == "time":
        text = "not run: its time did not come before the deadline"
    elif decision.by == DEADLINE and waiting is not None and waiting.kind == "child":
        text = "not run: its agent did not answer before the deadline"
    elif decision.by == DEADLINE:
        text = "not run: no decision before the deadline"
    else:
        text = f"not run: rejected by {decision.by}"
    if decision.comment:
        text += f" ({decision.comment})"
    return ToolOutcome(response={"error": text}, is_error=True)


def _tool_runs(decision: StepDecision, waiting: Waiting) -> ToolOutcome | None:
    """A person's or a sender's wait: the tool runs once approved or received."""
    return rejection(decision, waiting) if decision.decision == "reject" else None


def _child_read(decision: StepDecision, waiting: Waiting) -> ToolOutcome:
    """What the parent's model reads: its child's end, or why it has none."""
    if decision.decision == "received":
        return children.outcome(decision.payload or {})
    return rejection(decision, waiting)


async def _never(deps: Deps, run: RunRecord, key: str, waiting: Waiting) -> StepDecision | None:
    return None  # a person's decision is never anywhere before it is made


async def _event_arrived(deps: Deps, run: RunRecord, key: str, waiting: Waiting
                         ) -> StepDecision | None:
    """The event the run keeps under the awaited name (it may come before any call waits)."""
    kept = run.received.get(waiting.event or "")
    if kept is None:
        return None
    try:
        event = await deps.store.waits.event_payload(run.run_id, waiting.event or "", kept)
    except DecisionRefused:
        return None  # its payload is gone: the deadline rejects the call
    return StepDecision(decision="received", payload=event.payload, by=event.by,
                        at=deps.clock.now())


async def _child_arrived(deps: Deps, run: RunRecord, key: str, waiting: Waiting
                         ) -> StepDecision | None:
    """The child run's end, read from the child when it has ended."""
    child = await deps.store.runs.get_run(children.child_run_id(run, key))
    if child is None or not children.has_ended(child):
        return None
    return child_end(deps, child)


async def _nothing_ending(deps: Deps, run: RunRecord, key: str) -> str | None:
    return None


async def _child_ending(deps: Deps, run: RunRecord, key: str) -> str | None:
    """The child's run id while it has not ended (its end's figures are to come)."""
    child = await deps.store.runs.get_run(children.child_run_id(run, key))
    return child.run_id if child is not None and not children.has_ended(child) else None


def child_end(deps: Deps, child: RunRecord) -> StepDecision:
    """The resolution a child's end makes of its call: what the parent reads of it."""
    return StepDecision(decision="received", payload=children.end_payload(child), by=CHILD,
                        at=deps.clock.now())


async def _nothing(deps: Deps, run: RunRecord, key: str, cancel: CancelRun) -> bool:
    return False


async def _cancel_child(deps: Deps, run: RunRecord, key: str, cancel: CancelRun) -> bool:
    """Cancel the call's child if it is still active: True if its end is still to come (it
    was active, or it has ended with its own children's figures still to come)."""
    child = await deps.store.runs.get_run(children.child_run_id(run, key))
    if child is None or children.has_ended(child):
        return False
    if not child.status.terminal:
        await cancel(deps, child.run_id)
    return True


async def _counts_nothing(deps: Deps, run: RunRecord, key: str,
                          decision: StepDecision | None) -> JsonDict | None:
    return None


async def _child_spent(deps: Deps, run: RunRecord, key: str,
                       decision: StepDecision | None) -> JsonDict | None:
    """The child's end when the call has it (taken, or come after the call's deadline), else
    what the child spent: its end's figures once it has ended, else so far (a call whose
    child is gone from under it, or a decision recorded before calls waited for their
    cancelled children's ends)."""
    if decision is not None and decision.payload is not None:
        return decision.payload  # its end (taken, or come after the call's deadline)
    return await children.spent_so_far(deps, run, key)


async def _time_arrived(deps: Deps, run: RunRecord, key: str, waiting: Waiting
                        ) -> StepDecision | None:
    """The call's time, once it has come: the tool runs, told when it woke
    (``context.event``)."""
    now = deps.clock.now()
    if waiting.wake_at is None or now < waiting.wake_at:
        return None
    return StepDecision(decision="received", by=CLOCK, at=now,
                        payload={"slept_until": rfc3339(waiting.wake_at),
                                 "woke_at": rfc3339(now)})


async def _arms_nothing(deps: Deps, run: RunRecord, key: str, waiting: Waiting) -> None:
    return None


async def _arm_wake(deps: Deps, run: RunRecord, key: str, waiting: Waiting) -> None:
    """Arm the call's wake: its step's message, published at its time (or at the waker's
    horizon, whence it is armed again). A wake not armed is the sweeper's to find."""
    assert waiting.wake_at is not None
    message = await committed_message(deps, run.run_id, key)
    if message is None:
        return
    at = min(waiting.wake_at, deps.clock.now() + deps.waker.horizon_s)
    wake = Wake(name=f"{run.run_id}/{key}/{at:.3f}", at=at, topic=deps.topic(message.topic),
                data=encode(message.data),
                attributes={"run_id": run.run_id, "step": key, "wake": "time"})
    try:
        await deps.waker.arm(wake)
    except WakeNotArmed as exc:
        log.warning("run %s step %s: its wake was not armed (%s): the sweeper wakes it",
                    run.run_id, key, exc)


KINDS: dict[str, WaitKind] = {
    "approval": WaitKind("approval", clock_runs=False, announced=True,
                         timeout=lambda tool: tool.approval_timeout_seconds, arrived=_never,
                         outcome=_tool_runs, abandon=_nothing, spent=_counts_nothing,
                         ending=_nothing_ending, arm=_arms_nothing),
    "event": WaitKind("event", clock_runs=False, announced=True,
                      timeout=lambda tool: tool.event_timeout_seconds, arrived=_event_arrived,
                      outcome=_tool_runs, abandon=_nothing, spent=_counts_nothing,
                      ending=_nothing_ending, arm=_arms_nothing),
    "child": WaitKind("child", clock_runs=True, announced=False,
                      timeout=lambda tool: tool.event_timeout_seconds, arrived=_child_arrived,
                      outcome=_child_read, abandon=_cancel_child, spent=_child_spent,
                      ending=_child_ending, arm=_arms_nothing),
    "time": WaitKind("time", clock_runs=False, announced=False,
                     timeout=lambda tool: None, arrived=_time_arrived,
                     outcome=_tool_runs, abandon=_nothing, spent=_counts_nothing,
                     ending=_nothing_ending, arm=_arm_wake),
}


def kind_of(waiting: Waiting) -> WaitKind:
    return KINDS[waiting.kind]


def unrecorded(deps: Deps, step: StepRecord) -> WaitKind | None:
    """The kind of wait a tool step that has not recorded one may have begun: a sub-agent's
    call starts its child before it records its wait (a kill in between leaves a child and
    no wait). Read from the deployment's agents by the call's tool name, no document read."""
    if step.kind != "tool" or step.status is StepStatus.COMPLETED or step.waiting is not None:
        return None
    called = any(children.sub_agent_tool(agent.tools, step.name) is not None
                 for agent in deps.agents)
    return KINDS["child"] if called else None


@dataclass(frozen=True)
class Wait:
    """What a call waits for before it runs: its kind, its tool and, for an event or a
    child, the name it waits under; for a call that sleeps, how long."""

    tool: Tool
    kind: WaitKind
    event: str | None = None
    seconds: float | None = None

    def named(self, key: str) -> str | None:
        """The name the call at ``key`` waits under: a child's is its own step's."""
        return children.event_name(key) if self.kind.name == "child" else self.event


def wait_of(toolbox: object, call_name: str, args: JsonDict, now: float = 0.0
            ) -> Wait | None:
    """What this call waits for before it runs, if anything: a sub-agent's call waits for its
    child run, a call needing approval for a person, a call naming an event for it, a call
    that sleeps for its time (from ``now``; a time already past is no wait).

    Raises :class:`ValueError` when the tool's function naming its event, or telling how
    long it sleeps, fails: the call then fails for the model rather than wait for what
    nobody can name."""
    tool = find_tool(toolbox, call_name)
    if tool is None or tool.handoff is not None:
        return None
    if tool.sub_agent is not None:
        return Wait(tool, KINDS["child"])
    if tool.needs_approval(args):
        return Wait(tool, KINDS["approval"])
    if (seconds := tool.sleep_seconds(args, now)) is not None:
        return Wait(tool, KINDS["time"], seconds=seconds) if seconds > 0 else None
    event = tool.awaited_event(args)
    return Wait(tool, KINDS["event"], event) if event is not None else None
