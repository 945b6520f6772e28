"""The runs API: create, read, stream, cancel, and list a conversation's runs.

Runs and conversations belong to the caller who created them (:func:`ackloop.api.auth.caller_of`):
the idempotency key is scoped to the caller (the same key from two callers makes two runs), a
run names the caller as its owner, and so does a conversation when its first run creates it.
Another caller gets 404 for them, exactly as for an id that does not exist, and writes nothing.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request
from fastapi import Path as PathParam
from fastapi.responses import JSONResponse, StreamingResponse

from ackloop.api import events, trace_context, tree
from ackloop.api.auth import OPERATORS_SETTING, caller_of, is_operator, is_the_sweeper
from ackloop.api.errors import ApiError
from ackloop.api.models import (
    CURSOR_PATTERN,
    CancelAccepted,
    ConversationRuns,
    CreateRun,
    ErrorBody,
    Event,
    QuotaWaitView,
    RunCreated,
    RunSummary,
    RunView,
    SweepReport,
    SweptRun,
)
from ackloop.domain.errors import ConversationNotStarted, IdempotencyMismatch, PermanentError
from ackloop.domain.keys import run_id_for_request
from ackloop.domain.records import RunRecord
from ackloop.domain.wire import ID_PATTERN, QueryMessage
from ackloop.engine import ending, quota
from ackloop.engine.deps import Deps
from ackloop.engine.ingest import start_run
from ackloop.engine.sweep import sweep
from ackloop.files import FileRefused
from ackloop.telemetry import tracing

RunId = Annotated[str, PathParam(pattern=ID_PATTERN, max_length=128,
                                 description="A run id, as returned on create.")]
ConversationId = Annotated[str, PathParam(pattern=ID_PATTERN, max_length=128)]
Cursor = Annotated[str | None, Query(pattern=CURSOR_PATTERN,
                                     description="Resume after this cursor (an event's cursor).")]

MIN_SWEEP_STALE_SECONDS = 0.5
"""The shortest idle time a sweep may be asked for: below it, every step in flight is re-sent."""

ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody, "description": text} for code, text in {
        401: "Authentication required.", 404: "No such run.", 413: "Body too large.",
        422: "Invalid input, with field-level messages.", 503: "Store briefly unavailable.",
    }.items()
}
STREAM_CONTENT = {
    "application/x-ndjson": {"schema": {"type": "string"},
                             "example": '{"type":"step","cursor":"0000-model",...}\n'},
    "text/event-stream": {"schema": {"type": "string"},
                          "example": "id: 0000-model\nevent: step\ndata: {...}\n\n"},
}

router = APIRouter(tags=["runs"])


async def deps_of(request: Request) -> Deps:
    deps: Deps = await request.app.state.deps()
    return deps


# A PermanentError's reason -> the status it answers (422 for any other: internal_agent among
# them, like unknown_agent: the agent is no resource at this URL that could be missing, it is
# a field of the body naming one a query may not start; the message says it is internal).
_REFUSALS = {"conversation_queue_full": 409, "conversation_not_found": 404}


async def start(deps: Deps, body: CreateRun, idempotency_key: str | None, caller: str
                ) -> tuple[RunRecord, bool]:
    """Start (or find) the run for ``body``: once per caller and request id, whatever the
    retries."""
    if body.request_id and idempotency_key and body.request_id != idempotency_key:
        raise ApiError(422, "invalid_request",
                       "request_id and the Idempotency-Key header differ; send one of them")
    request_id = body.request_id or idempotency_key or f"http-{uuid.uuid4().hex}"
    if body.agent not in deps.agents:
        raise ApiError(422, "unknown_agent", f"no agent {body.agent!r}; known: "
                       f"{', '.join(deps.agents.startable_names())}")
    query = QueryMessage(request_id=request_id, text=body.text,
                         conversation_id=body.conversation_id, agent=body.agent,
                         options=body.options, files=body.files)
    try:
        # The run is durable once committed: if its first publish fails, it is still accepted
        # (202) and the sweeper sends that message, rather than a 503 inviting a second run.
        with tracing.delivery_span("query", trace_context.incoming(),
                                   run_id_for_request(request_id, caller)):
            run, created = await start_run(deps, query, publish_failure_ok=True, owner=caller)
        trace_context.answer_for(run)
        return run, created
    except IdempotencyMismatch as exc:
        raise ApiError(409, "idempotency_mismatch", str(exc)) from exc
    except ConversationNotStarted as exc:
        # A run id whose run does not exist: no such conversation (a query on the topic waits
        # for the run instead, as its publisher may have sent the two at once).
        raise ApiError(404, "conversation_not_found",
                       f"no conversation {body.conversation_id!r}") from exc
    except FileRefused as exc:  # 413 too large, 415 a type not accepted, 422 malformed
        raise ApiError(exc.http_status, exc.reason, str(exc)) from exc
    except PermanentError as exc:
        raise ApiError(_REFUSALS.get(exc.reason, 422), exc.reason, str(exc)) from exc


async def wait_for(deps: Deps, run_id: str, seconds: float, caller: str) -> RunRecord:
    """The run once it has ended, or as it is when ``seconds`` have passed."""
    deadline = time.monotonic() + seconds
    poll = deps.settings.api_stream_poll_seconds
    while True:
        run = await existing_run(deps, run_id, caller)
        left = deadline - time.monotonic()
        if run.status.terminal or left <= 0:
            return run
        await asyncio.sleep(min(poll, left))


async def existing_run(deps: Deps, run_id: str, caller: str) -> RunRecord:
    """The run, if it exists and belongs to ``caller``; else 404 (the same answer for both)."""
    run = await deps.store.runs.get_run(run_id)
    if run is None or run.owner != caller:
        raise ApiError(404, "not_found", f"no run {run_id}")
    trace_context.answer_for(run)
    return run


def wants_sse(request: Request, fmt: str | None) -> bool:
    if fmt is not None:
        return fmt == "sse"
    return "text/event-stream" in request.headers.get("accept", "")


def stream_response(request: Request, deps: Deps, lines: AsyncIterator[str], media_type: str
                    ) -> events.EventStreamResponse:
    """``lines`` as a stream bounded like every stream of this process (see
    :class:`~ackloop.api.events.EventStreamResponse`); 503 when the process has too many."""
    settings = deps.settings
    return events.EventStreamResponse(
        lines, slots=request.app.state.streams, media_type=media_type,
        send_timeout=settings.api_stream_send_timeout_seconds,
        max_seconds=settings.api_stream_max_seconds)


def run_events(request: Request, deps: Deps, run_id: str, after: str | None
               ) -> AsyncIterator[Event | None]:
    settings = deps.settings
    return events.run_events(
        deps.store, run_id, after, poll_seconds=settings.api_stream_poll_seconds,
        max_seconds=settings.api_stream_max_seconds, page_size=settings.api_stream_page_size,
        turns=request.app.state.streams.turns)


def event_stream(request: Request, deps: Deps, run_id: str, after: str | None, sse: bool
                 ) -> StreamingResponse:
    """The run's events as ndjson, or as Server-Sent Events."""

    async def body() -> AsyncIterator[str]:
        async for event in run_events(request, deps, run_id, after):
            if sse:
                yield events.sse(event)
            elif event is not None:
                yield events.ndjson(event)

    media = "text/event-stream" if sse else "application/x-ndjson"
    return stream_response(request, deps, body(), media)


FILE_ERRORS: dict[int | str, dict[str, Any]] = {
    413: {"model": ErrorBody, "description": "Body too large, or a file too large or too many "
          "files (code file_too_large)."},
    415: {"model": ErrorBody, "description": "A file's type is not accepted "
          "(code file_type_not_accepted)."},
}
"""What the routes that take a query's files answer beside :data:`ERRORS`."""


@router.post("/runs", status_code=202, response_model=RunCreated,
             responses={409: {"model": ErrorBody, "description":
                              "Idempotency key reused with another body, or too many runs "
                              "already queued for the conversation."},
                        **ERRORS, **FILE_ERRORS},
             summary="Start a run")
async def create_run(
    request: Request,
    body: CreateRun,
    idempotency_key: Annotated[str | None, Header(pattern=ID_PATTERN, max_length=128,
                                                  description="Makes retries safe.")] = None,
) -> JSONResponse:
    """Start a run; it goes on in the background. Poll it, stream it, or cancel it.

    The same ``Idempotency-Key`` (or ``request_id``) with the same body answers the same run
    (``created: false``); with a different body, 409.
    """
    deps = await deps_of(request)
    run, created = await start(deps, body, idempotency_key, caller_of(request))
    answer = RunCreated(run_id=run.run_id, request_id=run.request_id,
                        conversation_id=run.conversation_id, status=run.status.value,
                        created=created)
    return JSONResponse(answer.model_dump(mode="json"), status_code=202,
                        headers={"Location": f"/runs/{run.run_id}"})


@router.get("/runs/{run_id}", response_model=RunView, responses=ERRORS, summary="Get a run")
async def get_run(request: Request, run_id: RunId) -> RunView:
    """The run's status, stop reason, answer and usage, each step with its timing, and its
    child runs (its sub-agents' calls: status, cost and usage each), read in one batch."""
    deps = await deps_of(request)
    run = await existing_run(deps, run_id, caller_of(request))
    steps = await deps.store.steps.list_steps(run_id)
    return RunView.of_run(run, steps, await tree.children_of(deps.store, run, steps),
                          await quota_waits(deps, run))


@router.get("/runs/{run_id}/events", responses={200: {"content": STREAM_CONTENT,
            "description": "Step events, then a finished event."}, **ERRORS},
            response_class=StreamingResponse, summary="Stream a run's events")
async def stream_run(
    request: Request,
    run_id: RunId,
    after: Cursor = None,
    format: Annotated[str | None, Query(pattern="^(ndjson|sse)$",
                                        description="Overrides the Accept header.")] = None,
    last_event_id: Annotated[str | None, Header(pattern=CURSOR_PATTERN)] = None,
) -> StreamingResponse:
    """Each completed step once (in execution order), each step of the child runs under it
    too (its sub-agents' calls, tagged with the child's ``run_id``), then ``finished``: ndjson
    by default, Server-Sent Events with ``Accept: text/event-stream`` or ``format=sse``.
    Resume with ``after`` (or ``Last-Event-ID``) set to the last cursor received."""
    deps = await deps_of(request)
    await existing_run(deps, run_id, caller_of(request))
    return event_stream(request, deps, run_id, after or last_event_id, wants_sse(request, format))


@router.post("/runs/{run_id}/cancel", status_code=202, response_model=CancelAccepted,
             responses={200: {"model": CancelAccepted, "description": "Already finished."},
                        **ERRORS}, summary="Cancel a run")
async def cancel_run(request: Request, run_id: RunId) -> JSONResponse:
    """Ask the run to stop: a queued run ends ``cancelled`` at once; a running one ends
    ``cancelled`` at its next step boundary (the call in flight still records its result, tool
    calls not started yet are not made). Idempotent; 200 when the run had already finished."""
    deps = await deps_of(request)
    await existing_run(deps, run_id, caller_of(request))
    run = await ending.cancel_run(deps, run_id)
    if run is None:
        raise ApiError(404, "not_found", f"no run {run_id}")
    body = CancelAccepted(run_id=run_id, status=run.status.value,
                          cancel_requested=run.cancel_requested)
    return JSONResponse(body.model_dump(mode="json"), status_code=200 if run.status.terminal
                        else 202)


@router.get("/conversations/{conversation_id}/runs", response_model=ConversationRuns,
            responses=ERRORS, summary="List a conversation's runs")
async def list_runs(
    request: Request,
    conversation_id: ConversationId,
    limit: Annotated[int, Query(ge=1, le=100)] = 100,
) -> ConversationRuns:
    """The runs of a conversation, oldest first (empty for an unknown conversation)."""
    deps = await deps_of(request)
    caller = caller_of(request)
    conversation = await deps.store.runs.get_conversation(conversation_id)
    if conversation is not None and conversation.owner != caller:
        raise ApiError(404, "not_found", f"no conversation {conversation_id}")
    runs = [r for r in await deps.store.runs.list_runs(conversation_id, limit) if r.owner == caller]
    return ConversationRuns(conversation_id=conversation_id,
                            runs=[RunSummary.of(r) for r in runs])


@router.post("/sweep", response_model=SweepReport,
             responses={**ERRORS, 403: {"model": ErrorBody, "description": "Operators and the "
                                        "scheduled sweeper only."}},
             summary="Resume stalled runs (for Cloud Scheduler)")
async def sweep_runs(
    request: Request,
    stale_seconds: Annotated[float | None, Query(ge=MIN_SWEEP_STALE_SECONDS, le=86_400,
                                                 description=(
        "Idle time after which a running run is resumed; default ACKLOOP_SWEEP_STALE_SECONDS."
    ))] = None,
) -> SweepReport:
    """Find running runs that made no progress for a while and resume each from its ledger
    (re-publishing the step message it needs; the step's claim absorbs duplicates), fail
    those that cannot be resumed, and start queued runs whose conversation is free.

    Deployment-wide (every caller's runs, hundreds of reads and publishes a pass), so only the
    scheduled sweeper (``ACKLOOP_API_SWEEPER_EMAIL``) and operators (``ACKLOOP_API_OPERATORS``)
    may call it; anyone else gets 403."""
    if not (is_the_sweeper(request) or is_operator(request)):
        raise ApiError(403, "forbidden", f"a sweep is for the scheduled sweeper and operators: "
                       f"add {caller_of(request)!r} to {OPERATORS_SETTING} to grant it")
    deps = await deps_of(request)
    swept = await sweep(deps, stale_after=stale_seconds)
    return SweepReport(swept=[SweptRun(run_id=s.run_id, action=s.action, detail=s.detail)
                              for s in swept])


async def quota_waits(deps: Deps, run: RunRecord) -> list[QuotaWaitView]:
    """The run's model steps waiting for their places (read only while it runs, and only where
    quotas are declared)."""
    if run.status.terminal:
        return []
    await deps.refresh_limits()
    quotas = deps.limits.model_quotas
    if not quotas:
        return []
    now = deps.clock.now()
    return [QuotaWaitView.of(w, now) for w in
            await quota.waiting_of(quotas, deps.store, run.run_id, now)]
