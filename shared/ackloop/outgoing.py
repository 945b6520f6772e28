"""The messages a commit records in a step's outbox: built here once, for the engine and the
store alike, each stamped with the trace context it will be sent with."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ackloop.keys import StepKey
from ackloop.records import Outgoing, RunRecord
from ackloop.telemetry import tracing
from ackloop.wire import AnswerMessage, ModelStepMessage, ToolStepMessage, Usage

if TYPE_CHECKING:
    from ackloop.store import RunEnd


def answer(run: RunRecord, end: RunEnd) -> Outgoing:
    """The run's end, for the answers topic."""
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


def stamped(outbox: Sequence[Outgoing]) -> list[Outgoing]:
    """The entries, each with the trace context it will be sent with (the current span's):
    committed with them, it stays the parent of a re-send."""
    traceparent = tracing.current_carrier().get("traceparent")
    return [o if o.traceparent or not traceparent
            else o.model_copy(update={"traceparent": traceparent}) for o in outbox]
