"""The dead-letter handler: a message that used up its delivery attempts fails its run.

Pub/Sub forwards a message to the dead-letter topic after the subscription's maximum delivery
attempts. The run it belongs to is marked failed with the cause (the step's last recorded
error), and the message is kept in ``dead_letters`` so ``ackloop runs redrive`` can re-publish
it once the cause is fixed.
"""

from __future__ import annotations

import base64
import json
import logging
from typing import Any

from pydantic import TypeAdapter, ValidationError

from ackloop.engine.deps import Deps
from ackloop.keys import StepKey, run_id_for_request
from ackloop.push import Delivery
from ackloop.wire import ModelStepMessage, QueryMessage, ToolStepMessage

log = logging.getLogger(__name__)

_ANY = TypeAdapter(ModelStepMessage | ToolStepMessage | QueryMessage)


def _identify(data: bytes) -> tuple[str | None, str | None, str | None]:
    """(origin topic kind, run id, step key) of a dead-lettered message, as far as known."""
    try:
        message = _ANY.validate_json(data)
    except ValidationError:
        return None, None, None
    if isinstance(message, QueryMessage):
        return "queries", run_id_for_request(message.request_id), None
    if isinstance(message, ModelStepMessage):
        return "model_steps", message.run_id, str(StepKey.model(message.turn))
    return "tool_steps", message.run_id, str(StepKey.tool(message.turn, message.index))


async def handle_dead_letter(deps: Deps, delivery: Delivery) -> dict[str, Any]:
    origin, run_id, step_key = _identify(delivery.data)
    cause = "no error was recorded"
    if run_id and step_key:
        (step,) = await deps.store.get_steps(run_id, [step_key])
        if step is not None and step.last_error:
            cause = step.last_error
        elif step is None:
            cause = "the step was never claimed (every delivery was rejected)"
    source = delivery.attributes.get("CloudPubSubDeadLetterSourceSubscription", "")
    record = {
        "message_id": delivery.message_id,
        "origin": origin,
        "run_id": run_id,
        "step": step_key,
        "source_subscription": source,
        "delivery_attempts": delivery.attributes.get(
            "CloudPubSubDeadLetterSourceDeliveryCount", delivery.delivery_attempt
        ),
        "cause": cause,
        "data": base64.b64encode(delivery.data).decode(),
        "attributes": {k: v for k, v in delivery.attributes.items()
                       if not k.startswith("CloudPubSubDeadLetter")},
        "received_at": deps.clock.now(),
        "redriven_at": None,
    }
    await deps.store.record_dead_letter(delivery.message_id, record)
    failed = False
    if run_id:
        where = f"step {step_key}" if step_key else "its query"
        failed = await deps.store.fail_run(
            run_id, f"dead_lettered: {where} exhausted its delivery attempts; cause: {cause}",
            deps.clock.now(),
        )
    log.error("dead letter %s (run %s, %s): %s", delivery.message_id, run_id, step_key, cause)
    return {"run_id": run_id, "step": step_key, "run_failed": failed,
            "data_preview": json.dumps(delivery.data[:200].decode(errors="replace"))}
