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

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from ackloop.docdb.base import Snapshot, StorageUnavailable, Write
from ackloop.engine.deps import Deps
from ackloop.engine.lease import ClaimRef
from ackloop.engine.outbox import send
from ackloop.errors import PermanentError, StaleRead
from ackloop.keys import StepKey
from ackloop.records import Outgoing, RunRecord, RunStatus, StopReason
from ackloop.store import RunEnd, Transcript
from ackloop.wire import AnswerMessage, ModelStepMessage, ToolStepMessage, Usage

JsonDict = dict[str, Any]
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
    redecide: Redecide | None = None,
) -> None:
    """Commit ``decision`` (see the module docstring), then send its messages."""
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
        if decision.end is not None:
            conv = await deps.store.get_conversation_snapshot(run.conversation_id)
            ending = deps.store.end_run_writes(reads.run, conv, decision.end, now)
            writes += ending.writes
            outbox.append(answer_outgoing(run, decision.end))
            if ending.next_run_id is not None:
                outbox.append(first_step(ending.next_run_id, other_run=True))
        elif reads.transcript is not None:
            # A model step moves the run: fenced, so it cannot commit into a run that ended.
            writes.append(Write("update", reads.run.path, {"progress_at": now},
                                if_version=reads.run.version))
        try:
            await deps.store.complete_step(
                claim, now=now, result=result, outbox=outbox, usage=decision.step_usage,
                call_seconds=decision.call_seconds, error=decision.error, extra_writes=writes,
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
        deps.faults.hit(f"{kind}:after_commit")
        await send(deps, run.run_id, outbox)
        return
    raise StorageUnavailable(f"step {claim.key} of {claim.run_id}: documents kept changing",
                             retry_after=1.0)


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
    then publish its end and start the conversation's next queued run. None: nothing ended."""
    ended = await deps.store.end_run_now(run_id, end, deps.clock.now(), only_active=only_active)
    if ended is None:
        return None
    run, next_run_id = ended
    outbox = [answer_outgoing(run, replace(end, usage=run.usage))]
    if next_run_id is not None:
        outbox.append(first_step(next_run_id, other_run=True))
    await send(deps, run_id, outbox)
    return run


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
    return await deps.store.request_cancel(run_id)
