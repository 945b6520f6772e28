"""Sending a named event to a run: ``POST /runs/{run_id}/events/{name}``.

The calls of the run waiting for the event (a tool with ``waits_for``) resume with its
payload; an event that arrives before any call waits for it is kept on the run, and a call
that waits for it later runs at once (:mod:`ackloop.engine.waits.arrivals`). Each name is received
once per run: the same event again (same payload and id) answers 200 with ``recorded: false``
and re-sends the waiting steps' messages; another one under the name gets 409. The same
events can be published to the queries topic (``{"type": "event", ...}``). Owner-checked like
every run route.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Request
from fastapi import Path as PathParam
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ackloop.api.auth import caller_of
from ackloop.api.errors import ApiError, refused
from ackloop.api.models import ErrorBody
from ackloop.api.runs import ERRORS, RunId, deps_of, existing_run
from ackloop.domain.records import ReceivedEvent
from ackloop.domain.wire import ID_PATTERN, MAX_EVENT_PAYLOAD_BYTES, Identifier, check_event_payload
from ackloop.engine.waits import arrivals
from ackloop.store import DecisionRefused

EventName = Annotated[str, PathParam(pattern=ID_PATTERN, max_length=128,
                                     description="The event's name, as the waiting tool "
                                     "names it.")]

router = APIRouter(tags=["runs"])


class EventBody(BaseModel):
    """A named event for a run."""

    model_config = ConfigDict(extra="forbid")

    payload: dict[str, Any] = Field(
        default_factory=dict, description="What the event carries; the waiting tool reads it "
        f"(at most {MAX_EVENT_PAYLOAD_BYTES} bytes as JSON).")
    id: Identifier | None = Field(
        default=None, description="Your id for the event: sent again with the same id and "
        "payload, it is recognised as a repeat.")

    @field_validator("payload")
    @classmethod
    def _fits(cls, value: dict[str, Any]) -> dict[str, Any]:
        return check_event_payload(value)


class EventView(BaseModel):
    run_id: str
    name: str
    payload: dict[str, Any]
    id: str | None
    by: str = Field(description="Who sent the event the run keeps: the caller, or 'pubsub'.")
    at: float = Field(description="When it was received (Unix seconds).")
    recorded: bool = Field(description="False when the run had received this event already.")
    resumed: list[str] = Field(description="The waiting steps it resumed (none yet: the run "
                               "keeps it until a call waits for it).")


@router.post("/runs/{run_id}/events/{name}", response_model=EventView,
             responses={409: {"model": ErrorBody, "description": "The run has ended, has "
                              "received another event of that name, or every call waiting for "
                              "it waited past its deadline (deadline_passed)."}, **ERRORS},
             summary="Send a named event to a run")
async def send_event(request: Request, run_id: RunId, name: EventName, body: EventBody
                     ) -> EventView:
    """Deliver the event: the calls waiting for it run with its payload. Idempotent: the same
    event again answers the kept one."""
    deps = await deps_of(request)
    caller = caller_of(request)
    await existing_run(deps, run_id, caller)
    event = ReceivedEvent(payload=body.payload, by=caller, at=deps.clock.now(), id=body.id)
    try:
        delivered = await arrivals.deliver(deps, run_id, name, event, owner=caller)
    except DecisionRefused as exc:
        raise refused(exc) from exc
    if delivered.too_late and delivered.too_late == delivered.resumed:
        # Every call that waited for it had waited past its deadline: each is rejected as at
        # its deadline (and re-sent so), not run with the event.
        raise ApiError(409, "deadline_passed", f"the calls waiting for {name!r} waited past "
                       f"their deadline: {', '.join(delivered.too_late)} rejected, not run")
    kept = delivered.event
    return EventView(run_id=run_id, name=name, payload=kept.payload, id=kept.id, by=kept.by,
                     at=kept.at, recorded=delivered.recorded, resumed=delivered.resumed)
