"""Agents that call agents: a call of an agent's tool (``Agent.as_tool``) is a child run.

A call of a sub-agent's tool starts a **child run** of that agent, with the call's ``question``
as its text, then waits for it through the one wait mechanism (:mod:`ackloop.engine.waits`, a
wait of kind ``child``): the tool step records itself ``waiting`` (its step alone, never its
run's document), gives its lease back and is acknowledged, so nothing runs or is held while
the child works, for seconds or days. The child is a run like any other (its own ledger,
transcript, budgets, cost, answer), in the parent's trace. This module is the child run's
half: starting it, its budgets, what its end says to its caller and what it spent.

- **One child per call.** The child's request id is derived from the parent's run and step
  key (``<parent run>.<step key>``), so its run id is too: a redelivered or taken-over parent
  step finds the child it started (the create is conditional on the run not existing) and
  re-sends its first step only if that step was never claimed; a crash between starting the
  child and recording the wait starts no second child and loses none, and a call that finds
  its child ended takes its end at once.
- **The child's end resolves its call.** Every end of a run that has a parent (its last
  step's commit, or an end outside a step: a dead letter, the sweeper, a cancel) carries a
  :class:`~ackloop.domain.wire.ChildEndedMessage` in its outbox, on the queries topic. Its handler
  (:func:`ackloop.engine.waits.arrivals.deliver_end`) reads the child (the message names it
  and carries nothing else, so it cannot be forged into a result) and resolves the waiting
  call with the child's outcome (:func:`end_payload`), writing the call's step alone.
- **What the parent's model reads.** An answer (or a structured output) is the call's result;
  any other end (failed, cancelled, stopped by a budget) is an error naming the cause.
- **Limits across the tree.** A child's budgets are at most its share of what its parent has
  left (steps, tool calls, tokens, seconds; :func:`left`) when the call starts, and what it
  used counts in its parent's usage once the call has its result (``Usage.children``,
  apart): the parent's steps, tool calls and tokens are spent by its children too. A call
  that would go deeper than ``max_agent_depth`` (3) or call an agent already in its chain of
  callers is refused with an error the model reads, before anything is written.
- **Cancel both ways.** Cancelling a parent cancels the children of its waiting calls, which
  wait for their ends (the final figures); a child cancelled on its own ends its call with an
  error. A call at its deadline cancels its child and takes its end as a rejection at the
  deadline. A run ended outside a step while a child works counts that child's end when it
  comes (:func:`has_ended`).

Names starting with ``child.`` are the engine's: a caller cannot send such an event.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ackloop.domain.cost import Cost
from ackloop.domain.jsondict import JsonDict
from ackloop.domain.keys import run_id_for_request
from ackloop.domain.records import (
    CHILD_EVENT_PREFIX,
    RunLimits,
    RunRecord,
    RunStatus,
    StepRecord,
    StepStatus,
    StopReason,
)
from ackloop.domain.wire import FunctionCall, Usage
from ackloop.engine.deps import Deps
from ackloop.engine.outbox_entries import first_step
from ackloop.engine.outbox_sending import resend, send
from ackloop.engine.spend import rolled_up, spent, steps_usage
from ackloop.store import AgentStore
from ackloop.telemetry import tracing
from ackloop.tools.base import ToolOutcome
from ackloop.tools.definition import SubAgent, Tool, find_tool

log = logging.getLogger(__name__)

EVENT_PREFIX = CHILD_EVENT_PREFIX
"""A child's wait is named so (``child.<step key>``): the engine's own names, refused from
callers as events."""
MAX_RESULT_CHARS = 8_000
"""The most of a child's answer (or error) its parent's event keeps."""
CHILD = "child"
"""Who sent a child's end event."""


def event_name(step_key: str) -> str:
    """The event the call at ``step_key`` waits for: its child's end."""
    return f"{EVENT_PREFIX}{step_key}"


def is_reserved(name: str) -> bool:
    """Whether the event ``name`` is a child run's end, which no caller may send."""
    return name.startswith(EVENT_PREFIX)


def child_request_id(parent_run_id: str, step_key: str) -> str:
    return f"{parent_run_id}.{step_key}"


def child_run_id(parent: RunRecord, step_key: str) -> str:
    return run_id_for_request(child_request_id(parent.run_id, step_key), parent.owner)


def sub_agent_tool(toolbox: object, name: str) -> Tool | None:
    """The tool called ``name`` when it is a sub-agent's (``Agent.as_tool``)."""
    found = find_tool(toolbox, name)
    return found if found is not None and found.sub_agent is not None else None


def _error(text: str) -> ToolOutcome:
    return ToolOutcome(response={"error": text}, is_error=True)


@dataclass(frozen=True)
class Left:
    """What a run has left of its budgets when a call of one of its turns starts."""

    steps: int
    tool_calls: int
    tokens: int | None
    seconds: float


def left(deps: Deps, run: RunRecord, usage: Usage, calls: int = 1) -> Left:
    """What one of a turn's ``calls`` may give its child of ``run``'s budgets: what the run
    has left (``usage``: as the call's message carries it, the turn's own calls and earlier
    children included; the time it ran, not counting its waits), less one model step kept for
    the parent's turn that reads the results, shared evenly among the turn's calls. Their
    children run at once, and what they use counts against the parent's budgets when their
    results come in (:meth:`~ackloop.domain.wire.Usage.with_child`): shared, they cannot together
    spend more than the parent has, nor leave it no turn to read what they said. Seconds
    are not shared: the children run side by side."""
    limits = run.limits
    calls = max(1, calls)
    elapsed = deps.clock.now() - (run.started_at or run.created_at) - run.waited_seconds
    return Left(
        steps=(limits.max_steps - usage.model_calls - 1) // calls,
        tool_calls=(limits.max_tool_calls - usage.tool_calls) // calls,
        tokens=(None if limits.max_tokens is None
                else (limits.max_tokens - usage.prompt_tokens - usage.output_tokens) // calls),
        seconds=limits.max_seconds - elapsed,
    )


def chain_of(parent: RunRecord, caller: str | None) -> list[str]:
    """The agents working on the request when ``caller``'s turn of ``parent`` calls another:
    the run's callers, then the agent whose turn makes the call (after a hand-off, not the
    run's first agent)."""
    return [*parent.lineage, caller or parent.agent]


def refusal(deps: Deps, parent: RunRecord, sub: SubAgent, budget: Left,
            caller: str | None = None) -> str | None:
    """Why the call may not start its child (the model reads it), or None. ``caller``: the
    agent whose turn made the call (the run's own when None)."""
    depth = parent.depth + 1
    if depth > deps.settings.max_agent_depth:
        return (f"not run: calling agent {sub.agent!r} would nest sub-agents {depth} deep; "
                f"this deployment allows {deps.settings.max_agent_depth}")
    chain = chain_of(parent, caller)
    if sub.agent in chain:
        return (f"not run: agent {sub.agent!r} is already working on this request "
                f"({' -> '.join([*chain, sub.agent])}); an agent may not call itself")
    if sub.agent not in deps.agents:
        return f"not run: this deployment has no agent {sub.agent!r}"
    spent_out = [name for name, value in (("steps", budget.steps), ("seconds", budget.seconds),
                                          ("tokens", budget.tokens)) if value is not None
                 and value <= 0]
    if spent_out:
        return (f"not run: this run has no {spent_out[0]} left for a sub-agent (its "
                f"{spent_out[0]} budget is spent, less what it keeps to read the answers and "
                "what the turn's other calls get)")
    return None


def child_limits(deps: Deps, sub: SubAgent, budget: Left) -> RunLimits:
    """The child's budgets: its tool's, else its agent's, else the deployment's; never more
    than what the parent has left."""
    agent = deps.agents.get(sub.agent)
    settings = deps.settings

    def first(*values: Any) -> Any:
        return next(v for v in values if v is not None)

    steps = first(sub.max_steps, agent.max_steps, settings.default_max_steps)
    seconds = first(sub.max_seconds, agent.max_seconds, settings.default_max_seconds)
    calls = first(sub.max_tool_calls, agent.max_tool_calls, settings.default_max_tool_calls)
    tokens = next((v for v in (sub.max_tokens, agent.max_tokens, settings.default_max_tokens)
                   if v is not None), None)
    if budget.tokens is not None:
        tokens = budget.tokens if tokens is None else min(tokens, budget.tokens)
    return RunLimits(max_steps=max(1, min(steps, budget.steps)),
                     max_seconds=max(1.0, min(seconds, budget.seconds)),
                     max_tool_calls=max(0, min(calls, budget.tool_calls)),
                     max_tokens=tokens)


async def start_child(deps: Deps, parent: RunRecord, step_key: str, tool: Tool,
                      call: FunctionCall, usage: Usage, calls: int = 1,
                      caller: str | None = None) -> ToolOutcome | RunRecord:
    """Start the child run of the call at ``step_key`` (or find it: one per call), and send
    its first step if it was never claimed. A :class:`ToolOutcome` when the call may not
    start one (the model reads why); else the child run as stored, which a call redelivered
    after its child ended finds ended (the call then takes its end at once). ``caller``: the
    agent whose turn made the call."""
    sub = tool.sub_agent
    assert sub is not None
    question = call.args.get("question")
    if not isinstance(question, str) or not question.strip():
        return _error(f"{tool.name} needs a 'question': the text to ask agent {sub.agent!r}")
    budget = left(deps, parent, usage, calls)
    if (why := refusal(deps, parent, sub, budget, caller)) is not None:
        return _error(why)
    agent = deps.agents.get(sub.agent)  # known: refusal() checked it
    run_id = child_run_id(parent, step_key)
    now = deps.clock.now()
    request_id = child_request_id(parent.run_id, step_key)
    asked = json.dumps([parent.run_id, step_key, agent.name, question])
    child = RunRecord(
        run_id=run_id, request_id=request_id,
        request_hash=hashlib.sha256(asked.encode()).hexdigest()[:32],
        conversation_id=run_id, agent=agent.name, text=question[:32_000],
        model=agent.model or deps.settings.model, created_at=now,
        limits=child_limits(deps, sub, budget).model_copy(
            update={"tenant": parent.limits.tenant, "priority": parent.limits.priority}),
        owner=parent.owner,
        trace_id=parent.trace_id or tracing.run_trace_id(parent.run_id),
        parent_run_id=parent.run_id, parent_step=step_key, depth=parent.depth + 1,
        lineage=chain_of(parent, caller),
    )

    def costed(run: RunRecord, writes: int) -> Cost:
        return spent(deps, model=None, usage=None, commit_writes=writes,
                     outbox=[first_step(run.run_id, other_run=True, trace_id=run.trace_id)])

    run, created = await deps.store.runs.create_run(child, costed)
    entry = first_step(run.run_id, other_run=True, trace_id=run.trace_id)
    if created:
        tracing.record_run_root(run.run_id, run.trace_id or tracing.run_trace_id(run.run_id))
        log.info("run %s step %s started child run %s of agent %s", parent.run_id, step_key,
                 run.run_id, run.agent)
        await send(deps, parent.run_id, [entry])
    elif run.status is RunStatus.RUNNING:
        await resend(deps, parent.run_id, [entry])
    return run


def has_ended(run: RunRecord) -> bool:
    """Whether ``run``'s end is final: it has ended and no child of its calls that still
    worked when it ended has yet to add its figures (``RunRecord.children_ending``). Its
    caller takes only a final end, so what its root counts misses nothing below it."""
    return run.status.terminal and not run.children_ending


def end_payload(child: RunRecord) -> JsonDict:
    """What the parent's event carries of its child's end: read from the child's record."""
    return {
        "run_id": child.run_id, "agent": child.agent, "status": child.status.value,
        "stop_reason": child.stop_reason.value if child.stop_reason else None,
        "answer": (child.answer or "")[:MAX_RESULT_CHARS] if child.answer is not None else None,
        "output": child.output if len(repr(child.output)) <= MAX_RESULT_CHARS else None,
        "error": (child.error or "")[:MAX_RESULT_CHARS] if child.error is not None else None,
        "usage": child.usage.model_dump(mode="json"),
        "cost": child.cost.model_dump(mode="json") if child.cost is not None else None,
        "ran_seconds": ran_seconds(child),
    }


def ran_seconds(child: RunRecord) -> float | None:
    """How long an ended run's clock ran (what its ``max_seconds`` counted: not its waits
    for people or events, nor its sleeps, nor its own children's): what its caller's clock
    counts of the time the call waited for it (:func:`idle_seconds`). None while it runs."""
    if child.finished_at is None:
        return None
    started = child.started_at or child.created_at
    return max(0.0, child.finished_at - started - child.waited_seconds)


def idle_seconds(run: RunRecord, turn: Sequence[StepRecord]) -> tuple[float, float]:
    """The time ``run``'s clock does not count of a turn that waited for children (``turn``:
    the turn's steps), and when the last of those waits ended; (0, 0) for a turn that waited
    for none. A sleep, or a wait for a person, is free wherever it happens in a tree: while
    the run waits for its children, its clock runs only as long as the longest-running
    child's does (:func:`ran_seconds`; they run side by side), and the rest of the wait is
    the run's as its own waits are. Pure.

    The turn's other calls keep the run busy up to their completion, and its waits already
    counted (``run.wait_ended_at``) are not counted again."""
    waits = [(s.waiting.since, s.decision.at, (s.decision.payload or {}).get("ran_seconds"))
             for s in turn if s.kind == "tool" and s.waiting is not None
             and s.waiting.kind == "child" and s.decision is not None]
    if not waits:
        return 0.0, 0.0
    began, ended = min(w[0] for w in waits), max(w[1] for w in waits)
    # A child's end recorded before its figures said how long it ran counts in full.
    longest = max(w[2] if isinstance(w[2], int | float) else w[1] - w[0] for w in waits)
    others = [s.completed_at or 0.0 for s in turn if s.kind == "tool"
              and (s.waiting is None or s.waiting.kind != "child")]
    busy_until = max([began + longest, run.wait_ended_at, *others])
    return max(0.0, ended - busy_until), ended


def outcome(payload: JsonDict) -> ToolOutcome:
    """What the parent's model reads of its child's end."""
    agent, status = payload.get("agent"), payload.get("status")
    stop = payload.get("stop_reason")
    if status == RunStatus.COMPLETED.value and stop in (StopReason.ANSWERED.value,
                                                        StopReason.FINAL_TOOL.value):
        result = payload.get("output") if payload.get("output") is not None else (
            payload.get("answer"))
        return ToolOutcome(response={"result": result})
    if status == RunStatus.COMPLETED.value:
        partial = payload.get("answer")
        text = f"agent {agent!r} stopped by its {stop} budget before it answered"
        return _error(text + (f"; its last words: {partial}" if partial else ""))
    if status == RunStatus.CANCELLED.value:
        return _error(f"agent {agent!r} was cancelled before it answered")
    return _error(f"agent {agent!r} failed: {payload.get('error') or 'no cause given'}")


def child_cost(payload: JsonDict | None) -> Cost | None:
    raw = (payload or {}).get("cost")
    return Cost.model_validate(raw) if isinstance(raw, dict) else None


def child_usage(payload: JsonDict | None) -> Usage | None:
    """What the child run used (its whole tree), as its end's payload says: the parent's usage
    counts it, apart (:meth:`Usage.with_child`)."""
    raw = (payload or {}).get("usage")
    return Usage.model_validate(raw) if isinstance(raw, dict) else None


async def spent_so_far(deps: Deps, parent: RunRecord, step_key: str) -> JsonDict | None:
    """What the child of the call at ``step_key`` has spent (its usage and cost), for a call
    that ends without the child's result (rejected at its deadline, or its run cancelled):
    its end's figures if it has ended, else what its steps have recorded so far (a step in
    flight when it was cancelled is not in them). None without a child."""
    child = await deps.store.runs.get_run(child_run_id(parent, step_key))
    if child is None:
        return None
    if child.status.terminal:
        return end_payload(child)
    steps = await deps.store.steps.list_steps(child.run_id)
    return {"usage": steps_usage(steps).model_dump(mode="json"),
            "cost": rolled_up(child, steps).model_dump(mode="json")}


async def ended_children(store: AgentStore, run: RunRecord, steps: list[StepRecord]
                         ) -> list[str]:
    """The children of ``run``'s calls still waiting, unresolved, whose run has ended: their
    end's message was lost, dead-lettered, or refused while the parent was ended (before a
    redrive reopened it), which a redrive sends again (the sweeper's pass over the waits
    resolves them too). One read per such call."""
    ended = []
    for step in steps:
        if (step.status is StepStatus.WAITING and step.decision is None
                and step.waiting is not None and step.waiting.kind == "child"):
            child = await store.runs.get_run(child_run_id(run, step.key))
            if child is not None and child.status.terminal:
                ended.append(child.run_id)
    return ended


async def caller_moved_on(store: AgentStore, run: RunRecord) -> str | None:
    """Why running child ``run`` again would be for nobody (its caller has ended, or its call
    has already taken an end of it, or is gone), or None: the call still waits for it."""
    if run.parent_run_id is None or run.parent_step is None:
        return None
    parent = await store.runs.get_run(run.parent_run_id)
    if parent is None or parent.status.terminal:
        return f"its caller {run.parent_run_id} has ended"
    (step,) = await store.steps.get_steps(parent.run_id, [run.parent_step])
    if step is None or step.status is StepStatus.COMPLETED or step.decision is not None:
        return f"its caller's call {run.parent_step} has already taken its end"
    return None
