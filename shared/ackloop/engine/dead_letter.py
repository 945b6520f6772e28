"""The dead-letter handler: a message that used up its delivery attempts fails its run.

Pub/Sub forwards a message to the dead-letter topic after the subscription's maximum delivery
attempts. The message is kept in ``dead_letters`` so ``ackloop runs redrive`` can re-publish it
once the cause is fixed. Its step decides what happens to the run:

- the run's ledger never scheduled the step (see :mod:`ackloop.engine.ledger`): the message
  was not published by the engine, and the run is left alone;
- the step has completed, or a live delivery holds it: the dead letter was a duplicate, and the
  run is left alone (failing it would throw away the holder's work); so is a step that waits
  for a person's decision, which re-sends its message. A completed step's committed outbox is
  sent again, as one more redelivery would: its deliveries may all have died after the commit
  and before the publish (the run's answer, a child's end to its parent);
- what a waiting call waits for (a child run's end, a named event published on the queries
  topic) fails nothing: it is kept with its origin (``child_ended``, ``event``) for a redrive to
  re-publish as it is (:mod:`ackloop.engine.redrive`), and the sweeper resolves a call whose child
  ended meanwhile;
- otherwise the run fails with the cause (the step's last recorded error), its end is
  published on the answers topic, and the conversation's next queued run starts. A query
  dead-lettered before its run existed fails nothing: re-drive it.

Every dead letter is recorded once (create-only, under an id that is safe as a path), with at
most :data:`MAX_KEPT_DATA_BYTES` of its data, and acknowledged: the dead-letter topic's own
subscription never has to redeliver a message because of what it holds.
"""

from __future__ import annotations

import base64
import json
import logging
from typing import Any, NamedTuple

from pydantic import TypeAdapter, ValidationError

from ackloop.bus.push import Delivery
from ackloop.domain.keys import StepKey, run_id_for_request, turn_range
from ackloop.domain.records import StepRecord, StepStatus, StopReason
from ackloop.domain.wire import (
    ChildEndedMessage,
    EventMessage,
    ModelStepMessage,
    QueryMessage,
    StepMessage,
    ToolStepMessage,
    Usage,
)
from ackloop.engine.deps import Deps
from ackloop.engine.ending import end_run_now, publish_end, run_end
from ackloop.engine.ledger import Unscheduled, committed_tool_message, scheduled_model_step
from ackloop.engine.outbox_sending import resend

log = logging.getLogger(__name__)

Ours = StepMessage | ChildEndedMessage | EventMessage | QueryMessage
_ANY: TypeAdapter[Ours] = TypeAdapter(Ours)

CHILD_ENDED = "child_ended"
"""The origin of a dead-lettered child run's end (:class:`ChildEndedMessage`, on the queries
topic): re-driven as it is, since its handler reads the child and delivers its end to the
parent, or says why not."""

EVENT = "event"
"""The origin of a dead-lettered named event (:class:`EventMessage`, on the queries topic):
what a waiting call waits for, re-driven as it is (its handler keeps it on the run and resolves
the calls waiting for it, or says why not)."""
WAITED_FOR = (CHILD_ENDED, EVENT)
"""The origins of what a waiting call waits for, arriving: re-driven to the queries topic as
they are, never reopening a run."""

MAX_KEPT_DATA_BYTES = 512 * 1024
"""What a dead-letter record keeps of the message's data (a document holds at most 1 MiB);
a message cut short is kept for inspection and never re-driven."""


def _identify(data: bytes) -> Ours | None:
    """The dead-lettered message, if it is one of ours."""
    try:
        return _ANY.validate_json(data)
    except ValidationError:
        return None


def _where(message: Ours | None) -> tuple[str | None, str | None, str | None]:
    """(origin topic kind, run id, step key) of a dead-lettered message, as far as known."""
    if message is None:
        return None, None, None
    if isinstance(message, ChildEndedMessage):
        return CHILD_ENDED, message.run_id, None
    if isinstance(message, EventMessage):
        return EVENT, message.run_id, None
    if isinstance(message, QueryMessage):
        return "queries", run_id_for_request(message.request_id), None
    if isinstance(message, ModelStepMessage):
        return "model_steps", message.run_id, str(StepKey.model(message.turn))
    return "tool_steps", message.run_id, str(StepKey.tool(message.turn, message.index))


async def _scheduled(deps: Deps, message: StepMessage) -> str | None:
    """Why the run's ledger does not know ``message`` as one of its step messages, or None
    when it does (the engine published it)."""
    try:
        if isinstance(message, ToolStepMessage):
            run, (model_step,) = await deps.store.steps.run_and_steps(
                message.run_id, [str(StepKey.model(message.turn))])
            if run is None:
                return f"run {message.run_id} does not exist"
            committed_tool_message(model_step, message)
            return None
        if message.turn == 0:
            exists = await deps.store.runs.read_run(message.run_id) is not None
            return None if exists else f"run {message.run_id} does not exist"
        turn = message.turn - 1
        previous = await deps.store.steps.steps_in_range(message.run_id, *turn_range(turn))
        scheduled_model_step(message, {s.key: s for s in previous})
        return None
    except Unscheduled as exc:
        return str(exc)


UNRECORDED = ("the step has no record: every delivery was rejected, or one ran it unclaimed "
              "and died before its commit (a retry-safe call may have run)")


class Verdict(NamedTuple):
    """What a dead-lettered message means for its run: ``fail`` fails it."""

    verdict: str
    cause: str
    completed: StepRecord | None = None
    """Its step, when it has completed: its committed outbox is sent again."""


async def _verdict(deps: Deps, message: Ours | None, run_id: str | None,
                   step_key: str | None) -> Verdict:
    """The verdict on a dead-lettered message, and its cause."""
    if message is None:
        return Verdict("unknown", "not a message of ours: nothing to fail")
    if isinstance(message, ChildEndedMessage):
        return Verdict("child_end", ("a child run's end its parent did not take: the sweeper "
                                     "delivers it, or re-drive it"))
    if isinstance(message, EventMessage):
        return Verdict("event", (f"an event {message.name!r} its run did not take: a call "
                                 "waiting for it is rejected at its deadline unless it is "
                                 "re-driven"))
    if isinstance(message, QueryMessage):
        # Its run either exists (the sweeper resumes it) or never started.
        if run_id and await deps.store.runs.get_run(run_id) is not None:
            return Verdict("duplicate", "its run exists")
        return Verdict("not_started", "the run was never created: re-drive the query")
    if step_key is None or run_id is None:
        return Verdict("fail", "no error was recorded")
    unknown = await _scheduled(deps, message)
    if unknown is not None:
        return Verdict("unscheduled", ("not a step its run's ledger scheduled, so the run is "
                                       f"left alone: {unknown}"))
    (step,) = await deps.store.steps.get_steps(run_id, [step_key])
    if step is None:
        return Verdict("fail", UNRECORDED)
    if step.status is StepStatus.COMPLETED:
        return Verdict("duplicate", "the step has completed: this was a duplicate", step)
    if step.lease_expires_at > deps.clock.now():
        return Verdict("duplicate", f"the step is held by a live delivery ({step.owner})")
    if step.status is StepStatus.WAITING:
        return Verdict("duplicate", ("the step waits for a decision, which sends it again (or "
                                     "the sweeper does)"))
    return Verdict("fail", step.last_error or "no error was recorded")


async def _record_step(deps: Deps, message: ModelStepMessage | ToolStepMessage,
                       delivery: Delivery) -> None:
    """Give a dead-lettered step that has no document one, released with the cause (as an
    unclaimed step's failure is recorded), so the run's steps show the call that may have
    run, and a redrive claims it as its next attempt."""
    if isinstance(message, ModelStepMessage):
        key, name = StepKey.model(message.turn), "model"
    else:
        key, name = StepKey.tool(message.turn, message.index), message.call.name
    attempts = str(delivery.attributes.get("CloudPubSubDeadLetterSourceDeliveryCount") or "")
    claim = deps.store.steps.unclaimed(
        message.run_id, key, name, owner=deps.owner, now=deps.clock.now(),
        message_id=delivery.message_id,
        attempt=int(attempts) if attempts.isdigit() else (delivery.delivery_attempt or 1))
    await deps.store.steps.release_step(claim, error=f"dead_lettered: {UNRECORDED}")


async def _send_committed(deps: Deps, run_id: str, step: StepRecord) -> None:
    """Send a completed step's outbox again (what was never claimed, and every answer): the
    publish after its commit may be what every delivery died on."""
    if step.outbox:
        await resend(deps, run_id, step.outbox)


async def handle_dead_letter(deps: Deps, delivery: Delivery) -> dict[str, Any]:
    message = _identify(delivery.data)
    origin, run_id, step_key = _where(message)
    verdict, cause, completed = await _verdict(deps, message, run_id, step_key)
    source = delivery.attributes.get("CloudPubSubDeadLetterSourceSubscription", "")
    kept = delivery.data[:MAX_KEPT_DATA_BYTES]
    truncated = len(kept) < len(delivery.data)
    record = {
        "message_id": delivery.message_id,
        # Cut short, or not one of the run's messages: never re-driven.
        "origin": None if truncated or verdict == "unscheduled" else origin,
        "run_id": run_id,
        "step": step_key,
        "source_subscription": source[:1024],
        "delivery_attempts": delivery.attributes.get(
            "CloudPubSubDeadLetterSourceDeliveryCount", delivery.delivery_attempt
        ),
        "cause": cause,
        "verdict": verdict,
        "data": base64.b64encode(kept).decode(),
        "data_bytes": len(delivery.data),
        "data_truncated": truncated,
        "attributes": {k: v for k, v in delivery.storable_attributes().items()
                       if not k.startswith("CloudPubSubDeadLetter")},
        "pubsub_message_id": delivery.message_id,
        "received_at": deps.clock.now(),
        "redriven_at": None,
    }
    doc_id = await deps.store.letters.record_dead_letter(delivery.message_id, record)
    if completed is not None and run_id:
        await _send_committed(deps, run_id, completed)
    if cause == UNRECORDED and isinstance(message, ModelStepMessage | ToolStepMessage):
        await _record_step(deps, message, delivery)
    failed = False
    if run_id and verdict == "fail":
        error = f"dead_lettered: step {step_key} exhausted its delivery attempts; cause: {cause}"
        ended = await end_run_now(deps, run_id, run_end(StopReason.FAILED, Usage(), error=error),
                                  only_active=True)
        failed = ended is not None
        if not failed:  # ended before (maybe by this very message): say so again, at least once
            run = await deps.store.runs.get_run(run_id)
            if run is not None and (run.error or "") == error:
                await publish_end(deps, run)
    if verdict == "fail":
        log.error("dead letter %s (run %s, %s): %s", doc_id, run_id, step_key, cause)
    else:
        log.warning("dead letter %s (run %s, %s) left alone: %s", doc_id, run_id, step_key,
                    cause)
    return {"run_id": run_id, "step": step_key, "run_failed": failed, "verdict": verdict,
            "record": doc_id,
            "data_preview": json.dumps(delivery.data[:200].decode(errors="replace"))}
