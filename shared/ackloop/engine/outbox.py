"""Sending a step's outbox, after its commit.

On the first completion every entry is sent. When a completed step is delivered again (its
publish may never have happened, or this is a duplicate), an entry that triggers a step is
re-sent only if that step was never claimed: once the target step's document exists, the
delivery that created it owns it and Pub/Sub will redeliver it until it is done. This keeps
one duplicate delivery from replaying the rest of the run.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence

from opentelemetry.trace import SpanKind

from ackloop.engine.deps import Deps
from ackloop.records import Outgoing
from ackloop.telemetry import tracing

log = logging.getLogger(__name__)


def encode(data: object) -> bytes:
    return json.dumps(data, separators=(",", ":"), sort_keys=True).encode()


async def send(deps: Deps, run_id: str, outbox: Sequence[Outgoing]) -> None:
    """Publish the entries, each with its trace context (the one it was committed with, else
    the current span's) among its attributes, under a span of its own."""
    current = tracing.current_carrier()
    await asyncio.gather(*(_publish(deps, run_id, o, current) for o in outbox))


async def _publish(deps: Deps, run_id: str, o: Outgoing, current: dict[str, str]) -> None:
    topic = deps.topic(o.topic)
    attributes = {"run_id": o.target_run or run_id,
                  **({"step": o.target_step} if o.target_step else {}),
                  **({"traceparent": o.traceparent} if o.traceparent else current)}
    with tracing.span("pubsub.publish", {"messaging.system": "gcp_pubsub",
                                         "messaging.destination.name": topic,
                                         "ackloop.target_step": o.target_step or ""},
                      kind=SpanKind.PRODUCER):
        await deps.publisher.publish(topic, encode(o.data), attributes)


async def resend(deps: Deps, run_id: str, outbox: Sequence[Outgoing]) -> int:
    """Re-send the entries whose target step was never claimed. Returns how many were sent."""
    targeted = [o for o in outbox if o.target_step]
    found = await deps.store.steps_exist(
        [(o.target_run or run_id, str(o.target_step)) for o in targeted])
    claimed = {id(o) for o, exists in zip(targeted, found, strict=True) if exists}
    pending = [o for o in outbox if id(o) not in claimed]
    if pending:
        log.info("run %s: re-sending %d follow-up message(s)", run_id, len(pending))
        await send(deps, run_id, pending)
    return len(pending)
