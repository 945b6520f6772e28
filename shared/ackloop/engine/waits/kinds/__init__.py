"""The kinds of wait, each a module that owns all of it (:mod:`ackloop.engine.waits.kind`),
and the one list of them. Their order is precedence: a sub-agent's call waits for its child
whatever else its tool says, an approval comes before a sleep, a sleep before an event. A new
kind is a module here and a line in :data:`ORDER`."""

from __future__ import annotations

from ackloop.domain.jsondict import JsonDict
from ackloop.domain.records import StepDecision, StepRecord, StepStatus, Waiting
from ackloop.engine import children
from ackloop.engine.deps import Deps
from ackloop.engine.waits.kind import Wait, WaitKind, rejection
from ackloop.engine.waits.kinds import approval, child, event, sleep
from ackloop.tools.base import ToolOutcome
from ackloop.tools.definition import find_tool

ORDER: tuple[WaitKind, ...] = (child.KIND, approval.KIND, sleep.KIND, event.KIND)
KINDS: dict[str, WaitKind] = {kind.name: kind for kind in ORDER}

child_end = child.child_end


def kind_of(waiting: Waiting) -> WaitKind:
    """The kind of a recorded wait. Raises :class:`LookupError` for a kind this deployment does
    not know (a record written by a newer one)."""
    try:
        return KINDS[waiting.kind]
    except KeyError:
        raise LookupError(f"a wait of kind {waiting.kind!r}, which this deployment does not "
                          f"know (it knows {', '.join(KINDS)})") from None


def rejection_of(decision: StepDecision, waiting: Waiting | None) -> ToolOutcome:
    """What the model reads of a rejected call: past the deadline, in its kind's words."""
    return rejection(decision, kind_of(waiting).missed(waiting) if waiting is not None else None)


def unrecorded(deps: Deps, step: StepRecord) -> WaitKind | None:
    """The kind of wait a tool step that has not recorded one may have begun: a sub-agent's
    call starts its child before it records its wait (a kill in between leaves a child and
    no wait). Read from the deployment's agents by the call's tool name, no document read."""
    if step.kind != "tool" or step.status is StepStatus.COMPLETED or step.waiting is not None:
        return None
    called = any(children.sub_agent_tool(agent.tools, step.name) is not None
                 for agent in deps.agents)
    return child.KIND if called else None


def wait_of(toolbox: object, call_name: str, args: JsonDict, now: float = 0.0
            ) -> Wait | None:
    """What this call waits for before it runs, if anything: the first kind, in
    :data:`ORDER`, that makes a wait of it (a wait of no length, as a time already past, is
    no wait).

    Raises :class:`ValueError` when the tool's function naming its event, or telling how
    long it sleeps, fails: the call then fails for the model rather than wait for what
    nobody can name."""
    tool = find_tool(toolbox, call_name)
    if tool is None or tool.handoff is not None:
        return None
    for kind in ORDER:
        if (wait := kind.of(tool, args, now)) is not None:
            return None if wait.seconds is not None and wait.seconds <= 0 else wait
    return None


__all__ = ["KINDS", "ORDER", "Wait", "WaitKind", "child_end", "kind_of",
           "rejection_of", "unrecorded", "wait_of"]
