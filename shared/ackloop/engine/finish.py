"""Committing what a step decided, and ending runs.

A handler reads (claim, run, transcript), calls (the model or the tool), then *decides*: a
:class:`Decision` says what the step produced, what the transcript gains, which messages
follow and whether the run ends. :func:`commit` turns it into one atomic batch, every write
fenced on the version that was read:

- the step, on the holder's version (a holder whose lease was taken over writes nothing);
- the last transcript chunk, on its version (a stale writer cannot erase another run's turn);
- the run, on its version: a model step records its progress there, and a run end is written
  there, so a run that ended meanwhile (cancelled, failed) refuses the commit;
- the conversation, on its version, when the run ends: the same commit starts the next queued
  run of the conversation.

When a document other than the step changed, the documents are read again and the handler's
``redecide`` is asked again; a run that has ended meanwhile is left as it is and the step is
released unrecorded (it did not apply). Only then are the messages sent.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ackloop.cost import Cost
from ackloop.docdb.base import Snapshot, StorageUnavailable, Write
from ackloop.engine import approval
from ackloop.engine.deps import Deps
from ackloop.engine.lease import ClaimRef
from ackloop.engine.outbox import send, stamped
from ackloop.engine.spend import rolled_up, spent, steps_usage
from ackloop.errors import PermanentError, StaleRead
from ackloop.jsondict import JsonDict
from ackloop.keys import StepKey
from ackloop.records import Outgoing, RunRecord, RunStatus, StepRecord, StopReason
from ackloop.store import RunEnd, Transcript
from ackloop.telemetry import metrics, tracing
from ackloop.wire import AnswerMessage, ModelStepMessage, ToolStepMessage, Usage

log = logging.getLogger(__name__)

COMMIT_ATTEMPTS = 4

STOP_STATUS = {
    StopReason.ANSWERED: RunStatus.COMPLETED,
    StopReason.FINAL_TOOL: RunStatus.COMPLETED,
    StopReason.MAX_STEPS: RunStatus.COMPLETED,
    StopReason.MAX_SECONDS: RunStatus.COMPLETED,
    StopReason.MAX_TOOL_CALLS: RunStatus.COMPLETED,
    StopReason.MAX_TOKENS: RunStatus.COMPLETED,
    StopReason.CANCELLED: RunStatus.CANCELLED,
    StopReason.FAILED: RunStatus.FAILED,
}


def run_end(stop_reason: StopReason, usage: Usage, **fields: Any) -> RunEnd:
    return RunEnd(STOP_STATUS[stop_reason], stop_reason, usage, **fields)


@dataclass(frozen=True)
class Decision:
    """What one step produced, decided from what it read."""

    result: JsonDict | None
    outbox: list[Outgoing] = field(default_factory=list)
    contents: list[JsonDict] = field(default_factory=list)
    """Appended to the conversation's transcript (model steps only)."""
    end: RunEnd | None = None
    step_usage: Usage | None = None
    call_seconds: float | None = None
    error: str | None = None


@dataclass(frozen=True)
class Reads:
    """The documents a decision was made from, with the versions its commit is fenced on."""

    run: Snapshot
    transcript: Transcript | None = None
    """Model steps: the transcript as read (None: the step writes no transcript)."""

    @property
    def record(self) -> RunRecord:
        return RunRecord.model_validate(self.run.data)


Redecide = Callable[[RunRecord], Decision]


def answer_outgoing(run: RunRecord, end: RunEnd) -> Outgoing:
    message = AnswerMessage(
        run_id=run.run_id, request_id=run.request_id, conversation_id=run.conversation_id,
        status=end.status.value, stop_reason=end.stop_reason.value, answer=end.answer,
        output=end.output, error=end.error, usage=end.usage,
    )
    return Outgoing(topic="answers", data=message.model_dump(mode="json"))


def first_step(run_id: str, *, other_run: bool = False) -> Outgoing:
    """The message that starts ``run_id`` (its model step of turn 0)."""
    message = ModelStepMessage(run_id=run_id, turn=0)
    return Outgoing(topic="model_steps", data=message.model_dump(mode="json"),
                    target_step=str(StepKey.model(0)), target_run=run_id if other_run else None)


def after_tools(message: ToolStepMessage) -> Outgoing:
    """The model step that follows the turn of tool step ``message`` (what the join sends)."""
    follow_up = ModelStepMessage(
        run_id=message.run_id,
        turn=message.turn + 1,
        usage=message.usage.plus(Usage(tool_calls=message.call_count)),
    )
    return Outgoing(topic="model_steps", data=follow_up.model_dump(mode="json"),
                    target_step=str(StepKey.model(message.turn + 1)))


async def commit(
    deps: Deps, ref: ClaimRef, decision: Decision, reads: Reads, *, kind: str,
    redecide: Redecide | None = None, rolls_up: Sequence[StepRecord] = (),
) -> None:
    """Commit ``decision`` (see the module docstring), then send its messages.

    The step records what its delivery spent (:mod:`ackloop.engine.spend`); a model step also
    adds it to the run's cost, with the costs of the tool steps among ``rolls_up`` (the
    previous turn's steps, which no commit has added yet)."""
    claim = ref.claim
    for _ in range(COMMIT_ATTEMPTS):
        run = reads.record
        now = deps.clock.now()
        writes: list[Write] = []
        outbox = list(decision.outbox)
        result = decision.result
        if reads.transcript is not None and decision.contents:
            appended = deps.store.append_writes(reads.transcript, decision.contents,
                                                f"{run.run_id}/{claim.key}", now)
            writes += appended
            if decision.end is None and result is not None:
                result = result | {"transcript": deps.store.transcript_pointer(
                    reads.transcript, appended)}
        end = decision.end
        run_writes = 1 if reads.transcript is not None else 0
        if end is not None:
            conv = await deps.store.get_conversation_snapshot(run.conversation_id)
            ending = deps.store.end_run_writes(reads.run, conv, end, now)
            run_writes = len(ending.writes)
            outbox.append(answer_outgoing(run, end))
            if ending.next_run_id is not None:
                outbox.append(first_step(ending.next_run_id, other_run=True))
        cost = spent(deps, model=run.model if kind == "model" else None,
                     usage=decision.step_usage, commit_writes=1 + len(writes) + run_writes,
                     outbox=outbox)
        if claim.step.wait_cost is not None:  # the delivery that recorded its wait
            cost = cost.plus(claim.step.wait_cost)
        # The run's cost so far gains this step's and the previous turn's tool steps' (a
        # model step's commit writes the run anyway; a tool step's does not).
        total = Cost.total([run.cost, *(s.cost for s in rolls_up if s.kind == "tool"), cost])
        if end is not None:
            end = replace(end, cost=total)  # the same writes, now with the run's total
            writes += deps.store.end_run_writes(reads.run, conv, end, now).writes
        elif reads.transcript is not None:
            # A model step moves the run: fenced, so it cannot commit into a run that ended.
            writes.append(Write("update", reads.run.path,
                                {"progress_at": now, "cost": total.model_dump(mode="json")},
                                if_version=reads.run.version))
        outbox = stamped(outbox)
        try:
            with tracing.span("firestore.commit", {"ackloop.writes": len(writes) + 1}):
                await deps.store.complete_step(
                    claim, now=now, result=result, outbox=outbox, usage=decision.step_usage,
                    call_seconds=decision.call_seconds, error=decision.error, cost=cost,
                    extra_writes=writes,
                )
        except StaleRead:
            reads = await _read_again(deps, reads)
            fresh = reads.record
            if fresh.status.terminal:
                await deps.store.release_step(
                    claim, error=f"not recorded: the run became {fresh.status} meanwhile")
                return
            if redecide is not None and decision.end is None:
                decision = redecide(fresh)
            continue
        _committed(run, decision)
        metrics.step_cost(kind, cost.usd)
        if end is not None:
            log_finished(run, end, now)
        deps.faults.hit(f"{kind}:after_commit")
        await send(deps, run.run_id, outbox)
        return
    raise StorageUnavailable(f"step {claim.key} of {claim.run_id}: documents kept changing",
                             retry_after=1.0)


def _committed(run: RunRecord, decision: Decision) -> None:
    """Count what a step's commit recorded: the model's tokens and the run's end (the commit is
    fenced, so each is counted once whatever the deliveries); its cost is counted beside it."""
    if decision.step_usage is not None:
        metrics.model_tokens(run.model, decision.step_usage.prompt_tokens,
                             decision.step_usage.output_tokens)
    if decision.end is not None:
        metrics.run_finished(run.agent, decision.end.status.value,
                             decision.end.stop_reason.value)


async def _read_again(deps: Deps, reads: Reads) -> Reads:
    snap = await deps.store.get_run_snapshot(reads.record.run_id)
    if snap is None:
        raise PermanentError(f"run {reads.record.run_id} vanished", reason="unknown_run")
    if reads.transcript is None:
        return Reads(snap)
    fresh = await deps.store.load_transcript(reads.transcript.conversation_id)
    if fresh.tail != reads.transcript.tail and not RunRecord.model_validate(
            snap.data).status.terminal:
        raise PermanentError(
            f"transcript of {fresh.conversation_id} was extended by {fresh.tail!r} while this "
            f"step ran", reason="transcript_inconsistent")
    return Reads(snap, fresh)


async def end_run_now(deps: Deps, run_id: str, end: RunEnd, *,
                      only_active: bool = False) -> RunRecord | None:
    """End a run outside any step (dead letter, conflict, sweeper, cancel of a queued run),
    then publish its end and start the conversation's next queued run. None: nothing ended.

    The run's usage and cost are rolled up from its steps as recorded (no step message carries
    them here): a run whose model step completed before a dead letter ended it says so."""
    found = await deps.store.get_run(run_id)
    if found is None or found.status.terminal:
        return None
    steps = await deps.store.list_steps(run_id)
    end = replace(end, usage=steps_usage(steps), cost=rolled_up(found, steps))
    now = deps.clock.now()
    ended = await deps.store.end_run_now(run_id, end, now, only_active=only_active)
    if ended is None:
        return None
    run, next_run_id = ended
    metrics.run_finished(run.agent, end.status.value, end.stop_reason.value)
    log_finished(run, end, now)
    outbox = [answer_outgoing(run, end)]
    if next_run_id is not None:
        outbox.append(first_step(next_run_id, other_run=True))
    await send(deps, run_id, outbox)
    return run


def log_finished(run: RunRecord, end: RunEnd, now: float) -> None:
    """The one line a run's end logs, after the commit that ended it (a redelivery finds the
    run ended and commits nothing, so it logs nothing)."""
    log.info("run finished", extra={"fields": {
        "run_id": run.run_id, "agent": run.agent, "conversation_id": run.conversation_id,
        "status": end.status.value, "stop_reason": end.stop_reason.value,
        "elapsed_seconds": round(now - (run.started_at or run.created_at), 3),
        "steps": end.usage.model_calls + end.usage.tool_calls,
        "usage": end.usage.model_dump(mode="json"),
        "cost": (end.cost or Cost()).model_dump(mode="json"),
    }})


async def publish_end(deps: Deps, run: RunRecord) -> None:
    """Publish an ended run's end again (the answers topic is at least once)."""
    if run.status.terminal and run.stop_reason is not None:
        end = RunEnd(run.status, run.stop_reason, run.usage, answer=run.answer,
                     output=run.output, error=run.error)
        await send(deps, run.run_id, [answer_outgoing(run, end)])


async def cancel_run(deps: Deps, run_id: str) -> RunRecord | None:
    """Cancel a run: a queued one ends at once; a running one stops at its next step."""
    run = await deps.store.get_run(run_id)
    if run is not None and run.status is RunStatus.QUEUED:
        ended = await end_run_now(deps, run_id, run_end(StopReason.CANCELLED, run.usage,
                                                        error="cancelled before it started"))
        if ended is not None:
            return ended
    requested = await deps.store.request_cancel(run_id)
    if requested is not None and requested.status is RunStatus.RUNNING:
        await approval.reject_on_cancel(deps, run_id)
    return requested
