"""The messages a commit records in a step's outbox: built here once, for the engine and the
store alike, each stamped with the trace context it will be sent with."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ackloop.domain.jsondict import JsonDict
from ackloop.domain.keys import StepKey
from ackloop.domain.records import Outgoing, RunRecord
from ackloop.domain.wire import (
    AnswerMessage,
    ChildEndedMessage,
    ModelStepMessage,
    ToolStepMessage,
    Usage,
)
from ackloop.telemetry import tracing

if TYPE_CHECKING:
    from ackloop.store.base import RunEnd


def answer(run: RunRecord, end: RunEnd) -> Outgoing:
    """The run's end, for the answers topic."""
    message = AnswerMessage(
        run_id=run.run_id, request_id=run.request_id, conversation_id=run.conversation_id,
        status=end.status.value, stop_reason=end.stop_reason.value, answer=end.answer,
        output=end.output, error=end.error, usage=end.usage,
    )
    return Outgoing(topic="answers", data=message.model_dump(mode="json"))


def ends(run: RunRecord, end: RunEnd) -> list[Outgoing]:
    """What a run's end sends: its answer, and for a child run the notice its parent's waiting
    call resumes on (:mod:`ackloop.engine.children`)."""
    sent = [answer(run, end)]
    if run.parent_run_id is not None:
        notice = ChildEndedMessage(type="child_ended", run_id=run.run_id)
        sent.append(Outgoing(topic="queries", data=notice.model_dump(mode="json")))
    return sent


def first_step(run_id: str, *, other_run: bool = False, trace_id: str | None = None
               ) -> Outgoing:
    """The message that starts ``run_id`` (its model step of turn 0). Sent by another run's end
    (``other_run``: a queued run whose turn has come), it carries ``run_id``'s own trace context
    (its root span, in its trace ``trace_id``, else the one derived from its id), never the
    sender's: the queued run's steps are traced in its own trace (R5)."""
    message = ModelStepMessage(run_id=run_id, turn=0)
    return Outgoing(topic="model_steps", data=message.model_dump(mode="json"),
                    target_step=str(StepKey.model(0)), target_run=run_id if other_run else None,
                    traceparent=(tracing.run_traceparent(run_id, trace_id) if other_run
                                 else None))


def after_tools(message: ToolStepMessage, model_result: Mapping[str, Any] | None = None
                ) -> Outgoing:
    """The model step that follows the turn of tool step ``message`` (what the join sends);
    ``model_result``, the result of the model step that asked for the calls, tells it what to
    read (:func:`reads`)."""
    follow_up = ModelStepMessage(
        run_id=message.run_id,
        turn=message.turn + 1,
        usage=message.usage.plus(Usage(tool_calls=message.call_count)),
    )
    pointer = (model_result or {}).get("transcript")
    return Outgoing(topic="model_steps", data=follow_up.model_dump(mode="json"),
                    target_step=str(StepKey.model(message.turn + 1)),
                    reads=reads(message.call_count, pointer))


def reads(calls: int, pointer: object) -> str | None:
    """The ``reads`` hint of a model step whose previous turn made ``calls`` calls and left the
    transcript where ``pointer`` says (None without a pointer)."""
    if not isinstance(pointer, Mapping):
        return None
    chunks = str(int(pointer["chunks"]))
    if pointer.get("start"):  # read from a compaction's chunk on: "{start}-{chunks}"
        chunks = f"{int(pointer['start'])}-{chunks}"
    return f"{calls},{chunks},{pointer['conversation_id']}"


def parse_reads(hint: str | None) -> tuple[int, JsonDict] | None:
    """``(calls, transcript pointer)`` of a ``reads`` hint, or None when it says nothing usable
    (the step then reads the way it would without one)."""
    if not hint:
        return None
    calls, _, rest = hint.partition(",")
    chunks, _, conversation_id = rest.partition(",")
    start, _, count = chunks.rpartition("-")
    if (not (calls.isdigit() and count.isdigit() and conversation_id) or int(calls) > 999
            or not (start == "" or start.isdigit())):
        return None
    pointer: JsonDict = {"conversation_id": conversation_id, "chunks": int(count)}
    if start and int(start):
        pointer["start"] = int(start)
    return int(calls), pointer


def stamped(outbox: Sequence[Outgoing]) -> list[Outgoing]:
    """The entries, each with the trace context it will be sent with (the current span's):
    committed with them, it stays the parent of a re-send."""
    traceparent = tracing.current_carrier().get("traceparent")
    return [o if o.traceparent or not traceparent
            else o.model_copy(update={"traceparent": traceparent}) for o in outbox]
