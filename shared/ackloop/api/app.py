"""The HTTP service in front of the durable engine (``ackloop serve``, or FUNCTION_TARGET=api).

Starting a run here is the same operation as publishing a query: the run is created once per
request id (the ``Idempotency-Key`` header, or ``request_id`` in the body) and its first step
is published; the step functions do the rest. Reads come from the run's Firestore documents.

Routes: the runs API (:mod:`ackloop.api.runs`), the agents a run may start
(:mod:`ackloop.api.agents`), the Agent Runtime contract
(:mod:`ackloop.api.agent_runtime`), what the run inspector reads (:mod:`ackloop.api.inspector`),
the eval reports it shows (:mod:`ackloop.api.evals`) and its page at ``/ui``
(:mod:`ackloop.api.ui`), ``/healthz``, and the OpenAPI document at
``/openapi.json`` (generated from these routes and models, so it cannot drift).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import Depends, FastAPI, Request

from ackloop.api import (
    agent_runtime,
    agents,
    approvals,
    errors,
    evals,
    files,
    inspector,
    limiters,
    run_events,
    runs,
    schedules,
    trace,
    ui,
)
from ackloop.api.auth import ApiAuth
from ackloop.api.events import StreamSlots
from ackloop.api.limits import BodyLimit, LargeBodyGate, ReadDeadline
from ackloop.api.tokens import IdTokenVerifier
from ackloop.api.trace_context import TraceHeaders
from ackloop.config.settings import Settings
from ackloop.engine.deps import Deps
from ackloop.hosting.runtime import process_deps

DESCRIPTION = """Durable AI agents on Pub/Sub and Firestore.

Start a run with `POST /runs` (`GET /agents` lists the agents it may name), follow it with
`GET /runs/{run_id}/events` (ndjson or Server-Sent Events, resumable), read it with
`GET /runs/{run_id}`, stop it with
`POST /runs/{run_id}/cancel`, decide a tool call that waits for a person with
`POST /runs/{run_id}/approvals/{step}`, send a run the event one of its calls waits for with
`POST /runs/{run_id}/events/{name}`; keep an eval's report with `PUT /evals/{eval_id}`.
`POST /api/reasoning_engine` and
`POST /api/stream_reasoning_engine` implement the Vertex AI Agent Engine container contract.
Every error answers `{"error": message, "code": code}`, with `fields` for invalid input."""


FILE_ROUTES = ("/runs", "/api/reasoning_engine", "/api/stream_reasoning_engine")
"""The routes whose body may carry a query's files inline."""


def files_body_limit(settings: Settings) -> tuple[int, str]:
    """The body a route that takes files accepts: ``api_max_body_bytes`` for the rest of the
    request, plus the base64 of ``files_max_query_bytes`` (4/3 of it) and 1 KiB per file for
    its JSON. Every other route keeps ``api_max_body_bytes``. With the defaults: 18.9 MiB,
    under Cloud Run's 32 MiB request limit. The 413 says what to change."""
    limit = (settings.api_max_body_bytes + -(-settings.files_max_query_bytes * 4 // 3)
             + 1024 * settings.files_max_count)
    hint = (f" (a query's inline files may take {settings.files_max_query_bytes} bytes "
            "together before base64: send fewer or smaller files, or pass larger ones as "
            "gs:// or https:// file_uri)")
    return limit, hint


def create_app(
    settings: Settings | None = None,
    *,
    deps: Callable[[], Awaitable[Deps]] = process_deps,
    id_token_verifier: IdTokenVerifier | None = None,
) -> FastAPI:
    """Build the app. With no arguments (``uvicorn --factory``) it reads the environment.

    ``deps`` provides the engine's dependencies (built once per process by default);
    ``id_token_verifier`` replaces the Google ID-token verifier (tests sign their own tokens).
    Raises ``ValueError`` at start-up when the auth settings are incomplete.
    """
    settings = settings or Settings()
    auth = ApiAuth.from_settings(settings, id_token_verifier)

    async def authenticate(request: Request) -> None:
        await auth.check(request)

    guarded = [Depends(authenticate)] if auth.mode != "none" else []
    # /docs and /redoc load third-party scripts from a CDN: only when asked for (S1).
    docs = settings.api_docs
    app = FastAPI(title="ackloop", version="0.1.0", description=DESCRIPTION,
                  docs_url="/docs" if docs else None, redoc_url="/redoc" if docs else None)
    app.state.deps = deps
    app.state.settings = settings
    app.state.streams = StreamSlots(settings.api_stream_max_open)
    errors.install(app)
    app.add_middleware(BodyLimit, max_bytes=settings.api_max_body_bytes,
                       larger=dict.fromkeys(FILE_ROUTES, files_body_limit(settings)),
                       larger_puts={evals.EVALS_PREFIX: (evals.MAX_REPORT_BYTES,
                                                         evals.REPORT_TOO_LARGE)})
    app.add_middleware(ReadDeadline, seconds=settings.api_request_read_seconds)
    # Outside the read deadline: a body waiting for its slot is not being read yet.
    app.add_middleware(LargeBodyGate, paths=FILE_ROUTES, small_bytes=settings.api_max_body_bytes,
                       slots=settings.api_files_concurrency,
                       wait_seconds=settings.api_files_wait_seconds,
                       put_prefixes=(evals.EVALS_PREFIX,))
    app.add_middleware(TraceHeaders)
    app.include_router(runs.router, dependencies=guarded)
    app.include_router(agents.router, dependencies=guarded)
    app.include_router(approvals.router, dependencies=guarded)
    app.include_router(run_events.router, dependencies=guarded)
    app.include_router(trace.router, dependencies=guarded)
    app.include_router(agent_runtime.router, dependencies=guarded)
    app.include_router(inspector.router, dependencies=guarded)
    app.include_router(files.router, dependencies=guarded)
    app.include_router(evals.router, dependencies=guarded)
    app.include_router(schedules.router, dependencies=guarded)
    app.include_router(limiters.router, dependencies=guarded)
    app.include_router(ui.router)  # the page holds no data: it asks for the token

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str]:
        await deps()
        return {"status": "ok"}

    return app
