"""The tool step: one tool call per delivery of a tool step message, at most once.

Tool steps of one turn run in parallel and each writes only its own step document, so they
never contend on a shared document. The one whose commit came last sees every sibling
completed and triggers the next model step (the "join"); the others leave it to it
(:func:`join`), so a turn's fan-in sends its next model step once. When the turn made a single
call there is nothing to join: the step's
commit carries the next model step's message in its outbox, and it is sent right after (a
redelivery of the completed step goes through the join, which re-sends it if still needed).

The call that runs is the one the turn's model step committed at this index; a message that is
not exactly that outbox entry is refused before anything is written (:mod:`ackloop.engine.ledger`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace

from ackloop.domain.errors import PermanentError, UnknownRun
from ackloop.domain.jsondict import JsonDict
from ackloop.domain.keys import StepKey, tool_turn_range
from ackloop.domain.records import RunStatus, StepDecision, StepStatus, Waiting
from ackloop.domain.wire import FunctionCall, ToolStepMessage, Usage
from ackloop.engine import children, claims, concurrency, outbox_sending
from ackloop.engine.deps import Deps
from ackloop.engine.lease import (
    ClaimRef,
    RequestScope,
    claim_in_run,
    heartbeat,
    prepare_tools,
    released_on_failure,
)
from ackloop.engine.ledger import committed_tool_message
from ackloop.engine.outbox_entries import after_tools
from ackloop.engine.step_commit import Basis, Decision, commit
from ackloop.engine.waits import core as waits
from ackloop.engine.waits.kinds import Wait, child_end, kind_of, rejection_of, wait_of
from ackloop.engine.waits.kinds.child import KIND as child_kind
from ackloop.store import RunRead
from ackloop.telemetry import tracing
from ackloop.tools.base import Toolbox, ToolContext, ToolOutcome, prepare_toolbox
from ackloop.tools.definition import find_tool
from ackloop.tools.outcome import error_outcome

log = logging.getLogger(__name__)


async def handle_tool_step(deps: Deps, message: ToolStepMessage, scope: RequestScope) -> None:
    key = StepKey.tool(message.turn, message.index)
    # The run and the model step that asked for this call, before anything is written: only
    # the call that model step committed runs, never the message's own.
    # Its own document too: a step that does not exist yet may run unclaimed.
    run_read, (model_step, own) = await deps.store.steps.run_and_steps(
        message.run_id, [str(StepKey.model(message.turn)), str(key)])
    if run_read is None:
        raise UnknownRun(message.run_id)
    message = committed_tool_message(model_step, message)
    model_result = model_step.result if model_step is not None else None
    claimed = await claim_in_run(
        deps, message.run_id, run_read, key, message.call.name,
        message_id=scope.message_id,
        wait_until=scope.wait_until(deps, deps.settings.tool_timeout_seconds),
        unclaimed=own is None and await _runs_unclaimed(deps, run_read, message),
        attempt=scope.delivery_attempt,
    )
    if claimed is None:
        return  # the run has ended: nothing to run
    run_read, claim = claimed
    if claim.state == "waiting":
        # A re-send of a step that waits: nothing runs now; what it waits for may have come.
        if claim.step.waiting is not None:
            await waits.delivered_again(deps, run_read.record, claim.step)
        return
    if claim.state != "completed":
        ref = ClaimRef(claim)
        try:
            if not await _run_and_commit(deps, message, ref, run_read, model_result, scope):
                return
        finally:
            await concurrency.give_back_held(deps, ref)  # after its commit: the slots it held
        if message.call_count == 1:
            return  # the follow-up went out with the commit
    elif not outbox_sending.sends_again(claim.step, scope.message_id, scope.redriven):
        return  # another message completed the step: its delivery sent, or will send, on
    await join(deps, message, model_result)


async def _run_and_commit(deps: Deps, message: ToolStepMessage, ref: ClaimRef,
                          run_read: RunRead, model_result: JsonDict | None,
                          scope: RequestScope) -> bool:
    """Run the claimed call and commit its outcome; False when nothing was recorded (the run
    has ended, or the call waits: for a decision, an event, a child run or a concurrency
    slot)."""
    child: JsonDict | None = None
    since = scope.waited_since if scope.waited_since is not None else deps.clock.now()
    try:
        async with released_on_failure(deps.store, deps.clock, ref):
            outcome, seconds, child = await _run_claimed(deps, message, ref, run_read, since)
    except PermanentError as exc:
        # The run must not stall: the failure becomes this call's result for the model.
        log.warning("run %s tool step %s failed: %s", message.run_id, ref.claim.key, exc)
        outcome = ToolOutcome(response={"error": f"{exc.reason}: {exc}"}, is_error=True)
        seconds = None
    except concurrency.SlotWait as wait:  # acknowledged: its wake delivers it again
        await concurrency.give_back_held(deps, ref)
        await deps.store.steps.give_back(ref.claim)
        await concurrency.wait_for_slot(deps, "tool_steps", message.model_dump(mode="json"),
                                        message.run_id, ref.claim.key, wait, since)
        return False
    if outcome is None:
        return False  # the run has ended, or the call waits: nothing more is recorded
    decided = replace(_decision(message, outcome, seconds, model_result, child),
                      waited=ref.waited)
    await commit(deps, ref, decided, Basis(run_read), kind="tool")
    return True


async def _run_claimed(
    deps: Deps, message: ToolStepMessage, ref: ClaimRef, run_read: RunRead, since: float
) -> tuple[ToolOutcome | None, float | None, JsonDict | None]:
    """Run the call, or say why not: its outcome, how long the call took and, for a
    sub-agent's call, its child run's end (what it cost and used). No outcome: the run has
    ended, or the call now waits for a decision, an event or a child run (recorded by
    :mod:`ackloop.engine.waits`): record nothing more."""
    claim = ref.claim
    run = run_read.record
    if run.status is not RunStatus.RUNNING:
        if claim.state != "unclaimed":
            await deps.store.steps.release_step(claim, error=f"not run: the run is {run.status}")
        return None, None, None
    if run.cancel_requested:
        return await _cancelled(deps, message, ref, run_read)
    agent = deps.agents.get(_agent_name(deps, message, run_read))
    tracing.note(agent=agent.name)
    context = ToolContext(
        run_id=run.run_id,
        step_key=claim.key,
        idempotency_key=f"{run.run_id}/{claim.key}",
        attempt=claim.step.attempts,
        timeout_seconds=deps.settings.tool_timeout_seconds,
    )
    if claim.step.attempts > deps.settings.max_step_attempts:
        return _error(f"the tool did not complete after {claim.step.attempts - 1} attempts "
                      f"(last error: {claim.step.last_error})"), None, None
    await prepare_tools(deps, ref, agent.tools)  # what is_retry_safe reads, for MCP tools
    decision = claim.step.decision
    call = message.call
    engine_run = find_tool(agent.tools, call.name)
    if engine_run is not None and (target := engine_run.handoff) is not None:
        # A hand-off runs nothing: its result says who takes over (the next model step
        # reads it from this step's record and becomes that agent's turn).
        return ToolOutcome(response={"result": f"agent {target!r} takes over the conversation",
                                     "handoff": target}), None, None
    if engine_run is not None and engine_run.sub_agent is not None:
        outcome, child = await _run_sub_agent(deps, ref, run_read, Wait(engine_run,
                                                                        child_kind), message)
        return outcome, None, child
    if decision is None:
        refused, decision, waits_now = await _wait_first(deps, ref, run_read, agent.tools, call)
        if refused is not None or waits_now:
            return refused, None, None
    if decision is not None:
        read, call, context = _resolved(decision, claim.step.waiting, call, context)
        if read is not None:
            return read, None, None
    if claim.state == "taken_over" and (
            refused := _not_again(agent.tools, message.call.name, call.name)) is not None:
        return refused, None, None
    await concurrency.take_for(
        deps, ref, run, concurrency.limits_of(deps, run, "tool", agent.name,
                                         find_tool(agent.tools, call.name)),
        "tool_steps", message.model_dump(mode="json"), since)
    started = time.monotonic()
    async with (heartbeat(deps.store, deps.clock, ref, deps.settings.lease_seconds) as beat,
                concurrency.kept(deps, ref.slots, f"{run.run_id}/{claim.key}")):
        with tracing.span(f"tool {message.call.name}", {"ackloop.tool": message.call.name}):
            outcome = await agent.tools.execute(call, context)
            outcome = await store_files(deps, outcome)
    beat.check()
    return outcome, time.monotonic() - started, None


async def _wait_first(deps: Deps, ref: ClaimRef, run_read: RunRead, tools: Toolbox,
                      call: FunctionCall
                      ) -> tuple[ToolOutcome | None, StepDecision | None, bool]:
    """What the call waits for before it runs, if anything (:mod:`ackloop.engine.waits`):
    what the model reads instead of running it (a wait refused), the resolution that had
    already arrived, and whether the call now waits (nothing more is recorded)."""
    try:
        wait = wait_of(tools, call.name, call.args, deps.clock.now())
    except ValueError as exc:
        return _error(f"not run: {exc}"), None, False
    if wait is None:
        return None, None, False
    if too_long := waits.sleeps_too_long(deps, wait):
        return _error(f"not run: {too_long}"), None, False
    try:
        decision = await waits.begin(deps, ref, run_read, wait, call)
    except waits.WaitCancelled:
        return _error("not run: the run was cancelled"), None, False
    return None, decision, decision is None


async def _cancelled(deps: Deps, message: ToolStepMessage, ref: ClaimRef, run_read: RunRead
                     ) -> tuple[ToolOutcome | None, float | None, JsonDict | None]:
    """A call of a run cancelled after the fan-out is not made; the join still completes the
    turn so that the next model step ends the run as cancelled. What the call waits for is
    abandoned (a child is cancelled, and the call waits for its end: its final figures) and
    what it spent counts."""
    wait = _sub_agent_wait(deps, message, run_read)
    if wait is None:
        return (_error("not run: the run was cancelled"), None,
                await waits.counted(deps, run_read.record, ref.claim.step))
    waits_on, child = await waits.wind_down(deps, ref, run_read, wait, message.call)
    if waits_on:
        return None, None, None  # for its cancelled child's end, with its final figures
    return _error("not run: the run was cancelled"), None, child


async def store_files(deps: Deps, outcome: ToolOutcome) -> ToolOutcome:
    """The outcome with the files its tool returned put in the file store (``deps.files``),
    never in Firestore: its response records only what names each one, under ``files``
    (URI, MIME type, size, SHA-256 and the name its reference in the result uses), from which
    the transcript's function response gets a ``file_data`` part per file. A store that fails
    raises: the step is released and delivered again, as for any failure before its commit."""
    if not outcome.files:
        return outcome
    settings = deps.settings
    sizes = [len(named.file.data) for named in outcome.files]
    if (len(sizes) > settings.files_max_count or max(sizes) > settings.files_max_file_bytes
            or sum(sizes) > settings.files_max_query_bytes):
        # Kept neither in the store nor in a document: the model hears why, and what is allowed.
        return error_outcome(
            f"the tool returned {len(sizes)} file(s) of {sum(sizes)} bytes (the largest "
            f"{max(sizes)}); a call may return at most {settings.files_max_count} file(s), "
            f"each at most {settings.files_max_file_bytes} bytes and "
            f"{settings.files_max_query_bytes} bytes together")
    stored = [await deps.files.put(named.file.data, named.file.mime_type, name=named.name)
              for named in outcome.files]
    log.info("stored %d file(s) a tool returned: %s", len(stored),
             ", ".join(f"{s.name} ({s.mime_type}, {s.size} bytes)" for s in stored))
    response = {**outcome.response,
                "files": [s.model_dump(mode="json", exclude_none=True) for s in stored]}
    return outcome.model_copy(update={"response": response, "files": ()})


def _resolved(decision: StepDecision, waiting: Waiting | None, call: FunctionCall,
              context: ToolContext) -> tuple[ToolOutcome | None, FunctionCall, ToolContext]:
    """What a resolved wait makes of the call: what the model reads instead of running it (a
    rejection), or the call to run (with a person's edited arguments) and its context (with
    the event's payload)."""
    read = kind_of(waiting).outcome(decision, waiting) if waiting is not None else None
    if read is None and decision.decision == "reject":
        read = rejection_of(decision, waiting)
    if decision.decision == "received":
        context = context.model_copy(update={"event": decision.payload or {}})
    elif decision.args is not None:
        call = call.model_copy(update={"args": decision.args})
    return read, call, context


def _sub_agent_wait(deps: Deps, message: ToolStepMessage, run_read: RunRead) -> Wait | None:
    """The wait of a sub-agent's call (for its child), if the call is one."""
    agent = _agent_name(deps, message, run_read)
    if agent not in deps.agents:
        return None
    tool = children.sub_agent_tool(deps.agents.get(agent).tools, message.call.name)
    return Wait(tool, child_kind) if tool is not None else None


async def _run_sub_agent(deps: Deps, ref: ClaimRef, run_read: RunRead, wait: Wait,
                         message: ToolStepMessage) -> tuple[ToolOutcome | None, JsonDict | None]:
    """A sub-agent's call (:mod:`ackloop.engine.children`): start its child run and wait for
    its end (:mod:`ackloop.engine.waits`); resumed by that end (or finding it ended already),
    what the parent's model reads of it, and that end (its payload: what the child cost and
    used)."""
    claim = ref.claim
    run = run_read.record
    decision = claim.step.decision
    if decision is None:
        used = message.usage.plus(Usage(tool_calls=message.call_count))  # this turn's too
        started = await children.start_child(deps, run, claim.key, wait.tool, message.call,
                                             used, message.call_count,
                                             caller=_agent_name(deps, message, run_read))
        if isinstance(started, ToolOutcome):
            return started, None
        # start_child read the child: a redelivery that finds it ended takes its end at once.
        ended = child_end(deps, started) if children.has_ended(started) else None
        try:
            decision = await waits.begin(deps, ref, run_read, wait, message.call, found=ended,
                                         looked=True)
        except waits.WaitCancelled:
            waits_on, child = await waits.wind_down(deps, ref, run_read, wait, message.call)
            return (None if waits_on else _error("not run: the run was cancelled")), child
        if decision is None:
            return None, None
    if decision.decision == "received":
        return children.outcome(decision.payload or {}), decision.payload or {}
    # Rejected: the run was cancelled, or the child outlasted the wait's deadline; it was
    # cancelled and its end, come late, is on the decision (what it spent counts in the
    # parent's usage and cost), else it stops now and what it spent counts.
    return (rejection_of(decision, claim.step.waiting),
            await waits.forsake(deps, run, claim.step, wait))


async def _runs_unclaimed(deps: Deps, run_read: RunRead, message: ToolStepMessage) -> bool:
    """Whether this call may run without a claim (:func:`claims.tool_call_claims`): its tool is
    retry-safe and the call waits for nothing. Anything uncertain claims."""
    run = run_read.record
    if run.status is not RunStatus.RUNNING or run.cancel_requested:
        return False
    try:
        tools = deps.agents.get(message.agent if message.agent in deps.agents
                                else run.agent).tools
        await prepare_toolbox(tools)  # what is_retry_safe reads, for MCP tools; kept once done
        waiting = wait_of(tools, message.call.name, message.call.args,
                          deps.clock.now()) is not None
    except Exception:  # the claimed path reports it as it always did
        return False
    return not claims.tool_call_claims(deps.settings, waits=waiting,
                                       retry_safe=_retry_safe(tools, message.call.name))


def _error(text: str) -> ToolOutcome:
    return ToolOutcome(response={"error": text}, is_error=True)


def _agent_name(deps: Deps, message: ToolStepMessage, run_read: RunRead) -> str:
    """The agent whose turn made the call (the message names it; an older message, the run's)."""
    return message.agent if message.agent in deps.agents else run_read.record.agent


def _not_again(toolbox: Toolbox, name: str, asked: str) -> ToolOutcome | None:
    """Why a call taken over from a holder that died is not made again, or None."""
    if not _declared(toolbox, asked):
        # Started by a deployment that had the tool, which may have acted before it died.
        return _error("this call was interrupted and may or may not have taken effect; "
                      f"it is not retried: this deployment has no tool {name!r}")
    if not _retry_safe(toolbox, asked):
        # The previous holder may have acted before it died: do not act twice.
        return _error("this call was interrupted and may or may not have taken effect; it "
                      "is not retried automatically because it is not safe to repeat")
    return None


def _declared(toolbox: Toolbox, name: str) -> bool:
    return any(d.get("name") == name for d in toolbox.declarations())


def _retry_safe(toolbox: object, name: str) -> bool:
    check = getattr(toolbox, "is_retry_safe", None)
    return bool(check(name)) if callable(check) else True


def _decision(message: ToolStepMessage, outcome: ToolOutcome, seconds: float | None,
              model_result: JsonDict | None, child: JsonDict | None = None) -> Decision:
    """``child``: a sub-agent's call's child run's end, whose cost and usage the step counts
    (the next model step carries its usage on:
    :func:`ackloop.engine.model_inputs.with_children`)."""
    return Decision(
        child_cost=children.child_cost(child),
        child_usage=children.child_usage(child),
        result=outcome.model_dump(mode="json"),
        outbox=[after_tools(message, model_result)] if message.call_count == 1 else [],
        step_usage=Usage(tool_calls=1),
        call_seconds=seconds,
        error=str(outcome.response.get("error")) if outcome.is_error else None,
    )


async def join(deps: Deps, message: ToolStepMessage, model_result: JsonDict | None) -> None:
    """Trigger the next model step once every tool of this turn is done, from one sibling only
    (``model_result``: the turn's model step's, which tells the next one what to read).

    Each sibling reads the turn after its own commit. The one whose commit is the turn's last
    (the greatest document version: Firestore's commit time, a counter in memory; the call
    index breaks a tie) publishes; the others leave it to it. That sibling always sees all
    of them completed, since every other commit came before its own and its read comes after
    (Firestore reads are strongly consistent), so the trigger is never lost; and two siblings
    that finish together never both publish, so the next model step, which runs unclaimed
    where a duplicate is only Pub/Sub's rare one (:mod:`ackloop.engine.claims`), is delivered
    once and calls the model once. A redelivery of that sibling (its delivery died before the
    send) sends it again while the next step has no document; the sweeper's join is the net
    for the rest."""
    start, end = tool_turn_range(message.turn)
    steps = await deps.store.steps.steps_in_range_versioned(message.run_id, start, end)
    next_key = str(StepKey.model(message.turn + 1))
    if any(s.key == next_key for s, _ in steps):
        return
    done = [(version, s.index) for s, version in steps
            if s.kind == "tool" and s.status is StepStatus.COMPLETED]
    if len(done) < message.call_count:
        return
    if message.call_count > 1 and max(done)[1] != message.index:
        return  # a sibling committed after this one: the join is its to make
    await outbox_sending.send(deps, message.run_id, [after_tools(message, model_result)])
