"""Sending a step's outbox, after its commit.

On the first completion every entry is sent. When a completed step is delivered again, its
entries are sent again only by a redelivery of the message whose delivery completed it
(:func:`sends_again`): that delivery may have died between its commit and its send. A copy
of the step published by another message (the sweeper's re-send while Pub/Sub still held
the first message in its backoff, say) leaves the sending to that message, whose delivery
sent it or will be redelivered: re-sending from the copy would deliver the next step twice
while it runs unclaimed (:mod:`ackloop.engine.claims`), a second paid call. An entry that
triggers a step is re-sent only if that step was never claimed: once the target step's
document exists, the delivery that created it owns it and Pub/Sub will redeliver it until it
is done. This keeps one duplicate delivery from replaying the rest of the run.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence

from opentelemetry.trace import SpanKind

from ackloop.bus.base import Message
from ackloop.domain.keys import StepKey
from ackloop.domain.records import Outgoing, StepRecord
from ackloop.engine.deps import Deps
from ackloop.telemetry import tracing

log = logging.getLogger(__name__)


def encode(data: object) -> bytes:
    return json.dumps(data, separators=(",", ":"), sort_keys=True).encode()


async def send(deps: Deps, run_id: str, outbox: Sequence[Outgoing]) -> None:
    """Publish the entries, each with its trace context (the one it was committed with, else
    the current span's) among its attributes: one request per topic, the topics at once."""
    current = tracing.current_carrier()
    by_topic: dict[str, list[Message]] = {}
    for o in outbox:
        by_topic.setdefault(deps.topic(o.topic), []).append(
            (encode(o.data), _attributes(o, run_id, current)))
    await asyncio.gather(*(_publish(deps, topic, messages)
                           for topic, messages in by_topic.items()))


def _attributes(o: Outgoing, run_id: str, current: dict[str, str]) -> dict[str, str]:
    return {"run_id": o.target_run or run_id,
            **({"step": o.target_step} if o.target_step else {}),
            **({"reads": o.reads} if o.reads else {}),
            **({"traceparent": o.traceparent} if o.traceparent else current)}


async def _publish(deps: Deps, topic: str, messages: list[Message]) -> None:
    with tracing.span("pubsub.publish", {"messaging.system": "gcp_pubsub",
                                         "messaging.destination.name": topic,
                                         "messaging.batch.message_count": len(messages)},
                      kind=SpanKind.PRODUCER):
        await deps.publisher.publish_many(topic, messages)


async def committed_message(deps: Deps, run_id: str, key: str) -> Outgoing | None:
    """The message the model step of its turn committed for the tool step at ``key`` (None
    when there is none): what a resolved, or woken, wait sends again."""
    turn = StepKey.parse(key).turn
    (model_step,) = await deps.store.steps.get_steps(run_id, [str(StepKey.model(turn))])
    if model_step is None:
        return None
    return next((o for o in model_step.outbox if o.target_step == key), None)


REDRIVEN = "redriven"
"""The attribute a redrive sets on the dead letter's message it publishes again."""


def sends_again(step: StepRecord, message_id: str, redriven: bool = False) -> bool:
    """Whether the delivery of ``message_id``, finding ``step`` completed, sends its committed
    messages again: when it is the message whose delivery completed the step (or the step does
    not say which it was), or a redrive's (what the step sent met a failed run), so the
    engine's own copies of a step never duplicate what the step sent."""
    return redriven or not step.message_id or not message_id or step.message_id == message_id


async def resend(deps: Deps, run_id: str, outbox: Sequence[Outgoing]) -> int:
    """Re-send the entries whose target step was never claimed. Returns how many were sent."""
    targeted = [o for o in outbox if o.target_step]
    found = await deps.store.steps.steps_exist(
        [(o.target_run or run_id, str(o.target_step)) for o in targeted])
    claimed = {id(o) for o, exists in zip(targeted, found, strict=True) if exists}
    pending = [o for o in outbox if id(o) not in claimed]
    if pending:
        log.info("run %s: re-sending %d follow-up message(s)", run_id, len(pending))
        await send(deps, run_id, pending)
    return len(pending)
