"""The dead-letter handler: a message that used up its delivery attempts fails its run.

Pub/Sub forwards a message to the dead-letter topic after the subscription's maximum delivery
attempts. The message is kept in ``dead_letters`` so ``ackloop runs redrive`` can re-publish it
once the cause is fixed. Its step decides what happens to the run:

- the step has completed, or a live delivery holds it: the dead letter was a duplicate, and the
  run is left alone (failing it would throw away the holder's work);
- otherwise the run fails with the cause (the step's last recorded error), its end is
  published on the answers topic, and the conversation's next queued run starts. A query
  dead-lettered before its run existed fails nothing: re-drive it.
"""

from __future__ import annotations

import base64
import json
import logging
from typing import Any

from pydantic import TypeAdapter, ValidationError

from ackloop.engine.deps import Deps
from ackloop.engine.finish import end_run_now, publish_end, run_end
from ackloop.keys import StepKey, run_id_for_request
from ackloop.push import Delivery
from ackloop.records import StepStatus, StopReason
from ackloop.wire import ModelStepMessage, QueryMessage, ToolStepMessage, Usage

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
    verdict = "fail"
    if run_id and step_key:
        (step,) = await deps.store.get_steps(run_id, [step_key])
        if step is None:
            cause = "the step was never claimed (every delivery was rejected)"
        elif step.status is StepStatus.COMPLETED:
            verdict, cause = "duplicate", "the step has completed: this was a duplicate"
        elif step.lease_expires_at > deps.clock.now():
            verdict, cause = "duplicate", f"the step is held by a live delivery ({step.owner})"
        elif step.last_error:
            cause = step.last_error
    elif run_id:  # a query: its run either exists (the sweeper resumes it) or never started
        if await deps.store.get_run(run_id) is not None:
            verdict, cause = "duplicate", "its run exists"
        else:
            verdict, cause = "not_started", "the run was never created: re-drive the query"
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
        "verdict": verdict,
        "data": base64.b64encode(delivery.data).decode(),
        "attributes": {k: v for k, v in delivery.attributes.items()
                       if not k.startswith("CloudPubSubDeadLetter")},
        "received_at": deps.clock.now(),
        "redriven_at": None,
    }
    await deps.store.record_dead_letter(delivery.message_id, record)
    failed = False
    if run_id and verdict == "fail":
        error = f"dead_lettered: step {step_key} exhausted its delivery attempts; cause: {cause}"
        ended = await end_run_now(deps, run_id, run_end(StopReason.FAILED, Usage(), error=error),
                                  only_active=True)
        failed = ended is not None
        if not failed:  # ended before (maybe by this very message): say so again, at least once
            run = await deps.store.get_run(run_id)
            if run is not None and (run.error or "") == error:
                await publish_end(deps, run)
    if verdict != "duplicate":
        log.error("dead letter %s (run %s, %s): %s", delivery.message_id, run_id, step_key, cause)
    else:
        log.warning("dead letter %s (run %s, %s) left alone: %s", delivery.message_id, run_id,
                    step_key, cause)
    return {"run_id": run_id, "step": step_key, "run_failed": failed, "verdict": verdict,
            "data_preview": json.dumps(delivery.data[:200].decode(errors="replace"))}
