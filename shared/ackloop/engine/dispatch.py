"""From a decoded delivery to an acknowledgement decision.

The error's type decides: success and permanent failures are acknowledged (2xx); retryable
failures answer 503 so Pub/Sub redelivers; anything unexpected answers 500 (redelivered too,
and bounded by the step's attempt count and the subscription's dead-letter policy).
"""

from __future__ import annotations

import base64
import json
import logging
import time
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from ackloop.bus.push import Delivery
from ackloop.domain.errors import (
    PermanentError,
    PoisonMessage,
    RetryableError,
    StepConflict,
    StepHeldElsewhere,
)
from ackloop.domain.keys import StepKey, run_id_for_request
from ackloop.domain.records import ANONYMOUS, Outgoing, ReceivedEvent, StopReason
from ackloop.domain.schedules import ScheduleTick
from ackloop.domain.wire import (
    ChildEndedMessage,
    EventMessage,
    ModelStepMessage,
    QueryMessage,
    StepMessage,
    ToolStepMessage,
    Usage,
)
from ackloop.engine import schedule_firing
from ackloop.engine.dead_letter import handle_dead_letter
from ackloop.engine.deps import Deps
from ackloop.engine.ending import end_run_now, run_end
from ackloop.engine.ingest import start_run
from ackloop.engine.lease import WAITED_SINCE, RequestScope
from ackloop.engine.outbox_sending import REDRIVEN, encode
from ackloop.engine.spend import metered
from ackloop.engine.tool_step import handle_tool_step
from ackloop.engine.waits import arrivals
from ackloop.engine.waits.core import CarryOn
from ackloop.files import gate
from ackloop.store import DecisionRefused
from ackloop.telemetry import metrics, tracing
from ackloop.telemetry.context import log_context, update_log_context

log = logging.getLogger(__name__)

MAX_KEPT_ERROR_CHARS = 16 * 1024
"""What a poison record keeps of the error that rejected its message."""

Kind = Literal["query", "model", "tool", "dead_letter"]
_MODELS: dict[str, type[BaseModel]] = {
    "query": QueryMessage,
    "model": ModelStepMessage,
    "tool": ToolStepMessage,
}


@dataclass(frozen=True)
class Outcome:
    status: int
    body: dict[str, Any] = field(default_factory=dict)
    retry_after: float | None = None

    @property
    def acknowledged(self) -> bool:
        return 200 <= self.status < 300

    @property
    def name(self) -> str:
        """What the answer means, for metrics: done, deferred, rejected, retry or error."""
        if self.status == 200:
            return "deferred" if "deferred" in self.body else (
                "rejected" if "reason" in self.body else "done")
        return {204: "done", 503: "retry"}.get(self.status, "error")


def decode(kind: Kind, data: bytes) -> BaseModel:
    typed = _type_of(data) if kind == "query" else None
    model: type[BaseModel] = (EventMessage if typed == "event" else ChildEndedMessage
                              if typed == "child_ended" else ScheduleTick
                              if typed == "schedule_tick" else _MODELS[kind])
    try:
        return model.model_validate_json(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'message'}: {e['msg']}"
            for e in exc.errors()[:5]
        )
        what = "event" if model is EventMessage else kind
        raise PoisonMessage(f"not a valid {what} message: {problems}") from exc


def _type_of(data: bytes) -> str | None:
    """A queries-topic message's ``type`` (``event``, ``child_ended``, ``schedule_tick``),
    None for a query."""
    if b'"type"' not in data:
        return None
    try:
        value = json.loads(data)
    except ValueError:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    return kind if isinstance(kind, str) else None


def _is_event(data: bytes) -> bool:
    """Whether a queries-topic message is an event (``"type": "event"``) rather than a query."""
    return _type_of(data) == "event"


async def dispatch(deps: Deps, kind: Kind, delivery: Delivery) -> Outcome:
    """Handle one delivery; every line it logs carries its run and step (``log_context``)."""
    started = time.monotonic()
    with log_context(), tracing.delivery_span(kind, delivery.attributes, _run_of(kind, delivery),
                                              _span_attributes(delivery)) as span, \
            metered(deps, delivery.data):  # what the step it commits spent (engine.spend)
        outcome = await _handle(deps, kind, delivery)
        tracing.answered(span, outcome.status)
    if kind in ("model", "tool"):
        metrics.step_answered(kind, outcome.name, time.monotonic() - started)
    return outcome


def _here(deps: Deps, delivery: Delivery) -> CarryOn:
    """Carries a resolved call on in the delivery at hand (a child's end): its tool step runs
    as if its message had come, under this delivery's message id. A permanent failure of the
    step is recorded as its own delivery would record it (its message kept as a tool step's
    poison; a step its run cannot record ends the run), and the end is acknowledged."""

    async def carry_on(entry: Outgoing) -> None:
        message = ToolStepMessage.model_validate(entry.data)
        with log_context(**_labels(message)):
            try:
                await handle_tool_step(deps, message, RequestScope.starting(
                    deps, delivery.message_id, delivery.delivery_attempt or 1, entry.reads))
            except PermanentError as exc:
                step = replace(delivery, data=encode(entry.data),
                               attributes={"run_id": message.run_id,
                                           "step": str(entry.target_step)})
                await _record_rejection(deps, "tool", step, exc, message)

    return CarryOn(delivery.message_id, carry_on)


def _run_of(kind: Kind, delivery: Delivery) -> str | None:
    """The run a delivery is for, as far as its attributes (or a query's request id) say: the
    trace its span joins when the message carries no trace context."""
    if run_id := delivery.attributes.get("run_id"):
        return run_id
    if kind == "query":
        try:
            if _type_of(delivery.data) is not None:
                return ChildEndedMessage.model_validate_json(delivery.data).run_id if (
                    _type_of(delivery.data) == "child_ended") else (
                    EventMessage.model_validate_json(delivery.data).run_id)
            return run_id_for_request(QueryMessage.model_validate_json(delivery.data).request_id)
        except ValidationError:
            return None
    return None


def _span_attributes(delivery: Delivery) -> dict[str, str | int | None]:
    return {"messaging.message.id": delivery.message_id,
            "messaging.gcp_pubsub.message.delivery_attempt": delivery.delivery_attempt,
            "ackloop.step": delivery.attributes.get("step")}


def _labels(message: BaseModel) -> dict[str, str | int | None]:
    """The log labels a step message names (the rest is known once its run is read)."""
    if isinstance(message, ModelStepMessage):
        return {"run_id": message.run_id, "step": str(StepKey.model(message.turn))}
    if isinstance(message, ToolStepMessage):
        return {"run_id": message.run_id, "agent": message.agent,
                "step": str(StepKey.tool(message.turn, message.index))}
    return {}


async def _handle(deps: Deps, kind: Kind, delivery: Delivery) -> Outcome:
    message: BaseModel | None = None
    try:
        if kind == "dead_letter":
            return Outcome(200, await handle_dead_letter(deps, delivery))
        message = decode(kind, delivery.data)
        update_log_context(**_labels(message))
        if isinstance(message, QueryMessage):
            run, created = await start_run(deps, message)
            return Outcome(200, {"run_id": run.run_id, "created": created})
        if isinstance(message, EventMessage):
            return Outcome(200, await _deliver_event(deps, message))
        if isinstance(message, ChildEndedMessage):
            return Outcome(200, await arrivals.deliver_end(deps, message.run_id,
                                                           _here(deps, delivery)))
        if isinstance(message, ScheduleTick):
            return Outcome(200, (await schedule_firing.fire(deps, message)).body())
        await deps.limits_before_step()  # the process's reading: none of the step's own
        served = RequestScope.starting(deps, delivery.message_id, delivery.delivery_attempt or 1,
                                       delivery.attributes.get("reads"),
                                       delivery.attributes.get(REDRIVEN) == "1",
                                       _seconds(delivery.attributes.get(WAITED_SINCE)))
        # A step whose model request inlines large files holds one of the process's slots
        # until it ends (ackloop.files.gate).
        async with gate.scope(deps.settings.files_inline_concurrency,
                              deps.settings.files_inline_wait_seconds):
            if isinstance(message, ModelStepMessage):
                # Imported by the model step's own module at start-up; the other services
                # never load it (structured output, JSON Schema, the streamed deltas: 40 ms
                # of CPU).
                from ackloop.engine.model_step import handle_model_step

                await handle_model_step(deps, message, served)
            elif isinstance(message, ToolStepMessage):
                await handle_tool_step(deps, message, served)
        return Outcome(204)
    except StepHeldElsewhere as exc:
        log.info("%s message %s acknowledged: %s", kind, delivery.message_id, exc)
        return Outcome(200, {"deferred": str(exc)})
    except RetryableError as exc:
        return _retry(kind, delivery, exc)
    except PermanentError as exc:
        try:
            await _record_rejection(deps, kind, delivery, exc, message)
        except RetryableError as failed:  # not recorded yet: the redelivery records it
            return _retry(kind, delivery, failed)
        except Exception:  # a redelivery could not record it either: the log line is its record
            log.exception("%s message %s: its rejection could not be recorded", kind,
                          delivery.message_id)
        return Outcome(200, {"error": str(exc), "reason": exc.reason, "acknowledged": True})
    except Exception:
        log.exception("%s message %s failed unexpectedly", kind, delivery.message_id)
        return Outcome(500, {"error": "internal error; the message will be redelivered"})


async def _deliver_event(deps: Deps, message: EventMessage) -> dict[str, Any]:
    """An event from the queries topic: kept and its waiting steps resumed; a refusal (no such
    run, an ended one, another event of the name) is permanent, so acknowledged and recorded."""
    update_log_context(run_id=message.run_id)
    event = ReceivedEvent(payload=message.payload, by=arrivals.PUBSUB, at=deps.clock.now(),
                          id=message.id)
    try:
        delivered = await arrivals.deliver(deps, message.run_id, message.name, event,
                                         owner=ANONYMOUS)
    except DecisionRefused as exc:
        raise PermanentError(str(exc), reason=exc.reason) from exc
    return {"run_id": message.run_id, "event": message.name, "recorded": delivered.recorded,
            "resumed": delivered.resumed}


def _retry(kind: Kind, delivery: Delivery, exc: RetryableError) -> Outcome:
    log.info("%s message %s will be redelivered: %s", kind, delivery.message_id, exc)
    return Outcome(503, {"error": str(exc), "retryable": True}, exc.retry_after)


async def _record_rejection(
    deps: Deps, kind: Kind, delivery: Delivery, exc: PermanentError, message: BaseModel | None
) -> None:
    log.warning("%s message %s rejected (%s): %s", kind, delivery.message_id, exc.reason, exc)
    await deps.store.letters.record_poison(
        delivery.message_id,
        {
            "message_id": delivery.message_id,
            "kind": kind,
            "reason": exc.reason,
            "error": str(exc)[:MAX_KEPT_ERROR_CHARS],
            "data": base64.b64encode(delivery.data[:4096]).decode(),
            "attributes": delivery.storable_attributes(),
            "subscription": delivery.subscription,
            "received_at": deps.clock.now(),
        },
    )
    # A different step recorded at this step's key, or a step whose record Firestore cannot
    # store (a value nested too deep, an array in an array): the run cannot go on, so it ends
    # now, failed with the reason, instead of staying running with nothing to move it. The run
    # is the one named by the message's body (which its ledger checks have read), never by its
    # attributes, which nothing checked.
    if ((isinstance(exc, StepConflict) or exc.reason == "invalid_write")
            and isinstance(message, StepMessage)):
        await end_run_now(deps, message.run_id, run_end(StopReason.FAILED, Usage(),
                                                        error=f"{exc.reason}: {exc}"))


def _seconds(value: str | None) -> float | None:
    """A message attribute holding a time (Unix seconds), if it holds one."""
    try:
        return float(value) if value else None
    except ValueError:
        return None
