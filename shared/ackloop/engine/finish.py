"""Committing a step that ends its run, and the answer message that goes with it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ackloop.docdb.base import Snapshot, Write
from ackloop.engine.deps import Deps
from ackloop.engine.outbox import send
from ackloop.records import Outgoing, RunRecord, RunStatus, StopReason
from ackloop.store import Claim
from ackloop.wire import AnswerMessage, Usage

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


async def finish_run(
    deps: Deps,
    claim: Claim,
    run_snapshot: Snapshot,
    *,
    stop_reason: StopReason,
    usage: Usage,
    answer: str | None = None,
    output: Any = None,
    error: str | None = None,
    step_result: dict[str, Any] | None = None,
    step_usage: Usage | None = None,
    call_seconds: float | None = None,
    transcript_writes: Sequence[Write] = (),
) -> None:
    """Complete ``claim``'s step, end the run and send the answer — one atomic commit, then
    the publish."""
    run = RunRecord.model_validate(run_snapshot.data)
    status = STOP_STATUS[stop_reason]
    now = deps.clock.now()
    answer_message = AnswerMessage(
        run_id=run.run_id,
        request_id=run.request_id,
        conversation_id=run.conversation_id,
        status=status.value,
        stop_reason=stop_reason.value,
        answer=answer,
        output=output,
        error=error,
        usage=usage,
    )
    outbox = [Outgoing(topic="answers", data=answer_message.model_dump(mode="json"))]
    run_writes = deps.store.finish_run_writes(
        run_snapshot,
        status=status,
        stop_reason=stop_reason,
        now=now,
        usage=usage,
        steps_total=usage.model_calls + usage.tool_calls,
        answer=answer,
        output=output,
        error=error,
    )
    await deps.store.complete_step(
        claim,
        now=now,
        result=step_result if step_result is not None else {"stop_reason": stop_reason.value},
        outbox=outbox,
        usage=step_usage,
        call_seconds=call_seconds,
        error=error,
        extra_writes=[*transcript_writes, *run_writes],
    )
    await send(deps, run.run_id, outbox)
