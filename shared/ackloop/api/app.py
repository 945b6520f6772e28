"""The HTTP API in front of the durable engine.

Starting a run here is the same operation as publishing a query: the run is created once per
request id (the ``Idempotency-Key`` header, or ``request_id`` in the body) and its first step
is published; the functions do the rest.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import FastAPI, Header, HTTPException, Path
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from ackloop.errors import ConversationBusy, IdempotencyMismatch, PermanentError, RetryableError
from ackloop.engine.ingest import start_run
from ackloop.records import RunRecord, StepRecord
from ackloop.runtime import process_deps
from ackloop.wire import ID_PATTERN, MAX_QUERY_CHARS, QueryMessage, RunOptions

RunId = Annotated[str, Path(pattern=ID_PATTERN, description="A run id, as returned on create.")]


class CreateRun(BaseModel):
    """Body of ``POST /runs``."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1, max_length=MAX_QUERY_CHARS, description="The question.")
    request_id: str | None = Field(
        default=None, pattern=ID_PATTERN,
        description="Idempotency key; defaults to the Idempotency-Key header, else a new id.",
    )
    conversation_id: str | None = Field(default=None, pattern=ID_PATTERN)
    agent: str = Field(default="default", pattern=ID_PATTERN)
    options: RunOptions = RunOptions()


class RunCreated(BaseModel):
    run_id: str
    request_id: str
    status: str
    created: bool


class RunView(BaseModel):
    run: dict[str, Any]
    steps: list[dict[str, Any]]


def _step_view(step: StepRecord) -> dict[str, Any]:
    return step.model_dump(mode="json", exclude={"outbox", "owner", "fence"})


def create_app() -> FastAPI:
    app = FastAPI(title="ackloop", version="0.1.0",
                  description="Durable AI agents on Pub/Sub and Firestore.")

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str]:
        await process_deps()
        return {"status": "ok"}

    @app.post("/runs", status_code=202, response_model=RunCreated)
    async def create_run(
        body: CreateRun,
        idempotency_key: Annotated[str | None, Header(pattern=ID_PATTERN)] = None,
    ) -> Any:
        deps = await process_deps()
        request_id = body.request_id or idempotency_key or f"http-{uuid.uuid4().hex}"
        query = QueryMessage(
            request_id=request_id, text=body.text, conversation_id=body.conversation_id,
            agent=body.agent, options=body.options,
        )
        try:
            run, created = await start_run(deps, query)
        except IdempotencyMismatch as exc:
            raise HTTPException(409, str(exc)) from exc
        except ConversationBusy as exc:
            return JSONResponse({"detail": str(exc)}, status_code=409)
        except PermanentError as exc:
            raise HTTPException(422, str(exc)) from exc
        except RetryableError as exc:
            return JSONResponse({"detail": str(exc)}, status_code=503,
                                headers={"Retry-After": "1"})
        return RunCreated(run_id=run.run_id, request_id=run.request_id,
                          status=run.status.value, created=created)

    @app.get("/runs/{run_id}", response_model=RunView)
    async def get_run(run_id: RunId) -> Any:
        deps = await process_deps()
        run: RunRecord | None = await deps.store.get_run(run_id)
        if run is None:
            raise HTTPException(404, f"no run {run_id}")
        steps = await deps.store.list_steps(run_id)
        return RunView(run=run.model_dump(mode="json"), steps=[_step_view(s) for s in steps])

    return app
