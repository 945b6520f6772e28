"""The Vertex AI Agent Engine (Agent Runtime) container contract.

``POST /api/reasoning_engine`` serves the unary class methods and answers ``{"output": ...}``;
``POST /api/stream_reasoning_engine`` serves ``stream_query`` as newline-delimited JSON.
:data:`CLASS_METHODS` is the single declaration: it routes requests, and
``GET /api/class_methods`` lists it in the form a deployment spec's ``classMethods`` takes.
Runs belong to their caller here as on ``/runs`` (see :mod:`ackloop.api.runs`).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field, ValidationError

from ackloop.api import events
from ackloop.api.auth import caller_of
from ackloop.api.errors import ApiError, field_errors
from ackloop.api.models import (
    CancelAccepted,
    CreateRun,
    ErrorBody,
    Id,
    Options,
    QueryFiles,
    QueryText,
    RunOutcomeView,
    Strict,
)
from ackloop.api.runs import (
    ERRORS,
    FILE_ERRORS,
    deps_of,
    existing_run,
    get_run,
    run_events,
    start,
    stream_response,
    wait_for,
)
from ackloop.engine.deps import Deps
from ackloop.engine.ending import cancel_run

ApiMode = Literal["", "async", "stream", "async_stream"]


class QueryInput(Strict):
    """Input of ``query`` and ``stream_query``."""

    message: QueryText
    conversation_id: Id | None = Field(default=None, description="Continue a conversation.")
    request_id: Id | None = Field(default=None, description="Idempotency key.")
    agent: Id = "default"
    options: Options = Options()
    files: QueryFiles = Field(default_factory=list)

    def to_create(self) -> CreateRun:
        return CreateRun(text=self.message, request_id=self.request_id,
                         conversation_id=self.conversation_id, agent=self.agent,
                         options=self.options, files=self.files)


class SyncQueryInput(QueryInput):
    wait_seconds: float | None = Field(
        default=None, ge=0, le=3600,
        description="Wait at most this long (capped by the service's query timeout).",
    )


class RunRef(Strict):
    run_id: Id


class _QueryHead(BaseModel):
    run_id: str
    conversation_id: str


class QueryOutput(RunOutcomeView, _QueryHead):
    """What ``query`` answers: the finished run, or its id and status when it took too long."""

    finished: bool


class ReasoningEngineRequest(BaseModel):
    class_method: str = Field(description="A name listed by GET /api/class_methods.")
    input: dict[str, Any] = Field(default_factory=dict)


class ReasoningEngineResponse(BaseModel):
    output: Any


@dataclass(frozen=True)
class ClassMethod:
    name: str
    api_mode: ApiMode
    description: str
    input: type[BaseModel]
    call: Callable[[Deps, Any], Awaitable[Any]] | None = None


async def _query(deps: Deps, data: SyncQueryInput, caller: str) -> QueryOutput:
    run, _ = await start(deps, data.to_create(), None, caller)
    limit = deps.settings.api_query_timeout_seconds
    wait = limit if data.wait_seconds is None else min(data.wait_seconds, limit)
    run = await wait_for(deps, run.run_id, wait, caller)
    return QueryOutput(run_id=run.run_id, conversation_id=run.conversation_id,
                       finished=run.status.terminal, **QueryOutput.outcome_of(run))


async def _cancel(deps: Deps, data: RunRef, caller: str) -> CancelAccepted:
    await existing_run(deps, data.run_id, caller)
    run = await cancel_run(deps, data.run_id)
    if run is None:
        raise ApiError(404, "not_found", f"no run {data.run_id}")
    return CancelAccepted(run_id=run.run_id, status=run.status.value,
                          cancel_requested=run.cancel_requested)


CLASS_METHODS = (
    ClassMethod("query", "", "Ask the agent and wait for the answer (up to the query "
                "timeout; then the run id and status).", SyncQueryInput),
    ClassMethod("stream_query", "stream", "Ask the agent; stream the run's events as they "
                "happen (ndjson): its steps, the model's text as 'delta' lines while it is "
                "written, the last one with the answer.", QueryInput),
    ClassMethod("get_run", "", "A run with its steps.", RunRef),
    ClassMethod("cancel_run", "", "Ask a run to stop at its next step.", RunRef),
)
_STREAMING = {"stream", "async_stream"}


def class_methods_spec() -> list[dict[str, Any]]:
    """The ``classMethods`` entries of a deployment spec: name, api_mode, parameters."""
    return [{"name": m.name, "api_mode": m.api_mode, "description": m.description,
             "parameters": m.input.model_json_schema()} for m in CLASS_METHODS]


def _resolve(body: ReasoningEngineRequest, streaming: bool) -> tuple[ClassMethod, Any]:
    served = [m for m in CLASS_METHODS if (m.api_mode in _STREAMING) == streaming]
    method = next((m for m in served if m.name == body.class_method), None)
    if method is None:
        names = [m.name for m in served]
        raise ApiError(400, "unknown_class_method",
                       f"unknown class_method {body.class_method!r} for this endpoint; "
                       f"valid: {', '.join(names)}", valid_class_methods=names)
    try:
        return method, method.input.model_validate(body.input)
    except ValidationError as exc:
        fields = field_errors({**e, "loc": ("input", *e["loc"])} for e in exc.errors())
        raise ApiError(422, "invalid_request", "invalid input for "
                       f"{method.name}: {fields[0].field}: {fields[0].message}",
                       fields=fields) from exc


router = APIRouter(prefix="/api", tags=["agent runtime"])
_ERRORS = {400: {"model": ErrorBody, "description": "Unknown class_method."}, **ERRORS,
           **FILE_ERRORS}


@router.get("/class_methods", summary="The declared class methods")
async def list_class_methods() -> dict[str, list[dict[str, Any]]]:
    """What to list under ``classMethods`` when deploying this container on Agent Engine."""
    return {"class_methods": class_methods_spec()}


@router.post("/reasoning_engine", response_model=ReasoningEngineResponse, responses=_ERRORS,
             summary="Unary class methods (query, get_run, cancel_run)")
async def reasoning_engine(request: Request, body: ReasoningEngineRequest) -> Any:
    method, data = _resolve(body, streaming=False)
    deps = await deps_of(request)
    caller = caller_of(request)
    if method.name == "query":
        output: Any = await _query(deps, data, caller)
    elif method.name == "get_run":
        output = await get_run(request, data.run_id)
    else:
        output = await _cancel(deps, data, caller)
    return ReasoningEngineResponse(output=output.model_dump(mode="json"))


@router.post("/stream_reasoning_engine", response_class=StreamingResponse,
             responses={200: {"content": {"application/x-ndjson": {"schema": {"type": "string"}}},
                              "description": "One JSON object per line."}, **_ERRORS},
             summary="Streaming class methods (stream_query)")
async def stream_reasoning_engine(request: Request, body: ReasoningEngineRequest
                                  ) -> StreamingResponse:
    """``stream_query``: a ``started`` line, each completed step (and, while a model step runs,
    its text as ``delta`` lines), then ``finished`` whose ``answer`` is the agent's answer."""
    _, data = _resolve(body, streaming=True)
    deps = await deps_of(request)
    request.app.state.streams.check()  # no run started for a stream that would be refused
    run, created = await start(deps, data.to_create(), None, caller_of(request))
    started = {"type": "started", "run_id": run.run_id, "request_id": run.request_id,
               "conversation_id": run.conversation_id, "created": created}

    async def lines() -> AsyncIterator[str]:
        yield json.dumps(started, separators=(",", ":")) + "\n"
        async for event in run_events(request, deps, run.run_id, None):
            if event is not None:
                yield events.ndjson(event)

    return stream_response(request, deps, lines(), "application/x-ndjson")

