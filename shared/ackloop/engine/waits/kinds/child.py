"""A sub-agent's call waits for its child run's end (:mod:`ackloop.engine.children`). The
run's clock runs meanwhile (a child's work is its parent's time); ending the wait otherwise
cancels the child, and the call counts what the child spent, however it ended. It shows as
the event ``child.<step>`` it was before it had a kind of its own."""

from __future__ import annotations

from ackloop.domain.jsondict import JsonDict
from ackloop.domain.records import RunRecord, StepDecision, Waiting
from ackloop.engine import children
from ackloop.engine.deps import Deps
from ackloop.engine.waits.kind import CancelRun, Wait, WaitKind
from ackloop.tools.base import ToolOutcome
from ackloop.tools.definition import Tool


def _of(tool: Tool, args: JsonDict, now: float) -> Wait | None:
    return Wait(tool, KIND) if tool.sub_agent is not None else None


def child_end(deps: Deps, child: RunRecord) -> StepDecision:
    """The resolution a child's end makes of its call: what the parent reads of it."""
    return StepDecision(decision="received", payload=children.end_payload(child),
                        by=children.CHILD,
                        at=deps.clock.now())


async def _arrived(deps: Deps, run: RunRecord, key: str, waiting: Waiting
                   ) -> StepDecision | None:
    """The child run's end, read from the child when it has ended."""
    child = await deps.store.runs.get_run(children.child_run_id(run, key))
    if child is None or not children.has_ended(child):
        return None
    return child_end(deps, child)


def _read(decision: StepDecision, waiting: Waiting) -> ToolOutcome | None:
    """What the parent's model reads of its child's end (a rejection reads as every kind's)."""
    return children.outcome(decision.payload or {}) if decision.decision == "received" else None


async def _cancel(deps: Deps, run: RunRecord, key: str, cancel: CancelRun) -> bool:
    """Cancel the call's child if it is still active: True if its end is still to come (it
    was active, or it has ended with its own children's figures still to come)."""
    child = await deps.store.runs.get_run(children.child_run_id(run, key))
    if child is None or children.has_ended(child):
        return False
    if not child.status.terminal:
        await cancel(deps, child.run_id)
    return True


async def _spent(deps: Deps, run: RunRecord, key: str, decision: StepDecision | None
                 ) -> JsonDict | None:
    """The child's end when the call has it (taken, or come after the call's deadline), else
    what the child spent: its end's figures once it has ended, else so far (a call whose
    child is gone from under it, or a decision recorded before calls waited for their
    cancelled children's ends)."""
    if decision is not None and decision.payload is not None:
        return decision.payload
    return await children.spent_so_far(deps, run, key)


async def _ending(deps: Deps, run: RunRecord, key: str) -> str | None:
    """The child's run id while it has not ended (its end's figures are to come)."""
    child = await deps.store.runs.get_run(children.child_run_id(run, key))
    return child.run_id if child is not None and not children.has_ended(child) else None


KIND = WaitKind(
    "child", clock_runs=True, announced=False, shown_as="event", of=_of,
    label=lambda waiting: ("waiting for", "its child runs"),
    awaits=lambda run_id, waiting: "its child run's end",
    missed=lambda waiting: "its agent did not answer before the deadline",
    timeout=lambda tool: tool.event_timeout_seconds, arrived=_arrived, outcome=_read,
    abandon=_cancel, spent=_spent, ending=_ending, name_for=children.event_name)
