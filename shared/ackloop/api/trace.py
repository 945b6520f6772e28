"""``GET /runs/{run_id}/trace``: a run's spans, for the run inspector.

Read from the trace files a deployment writes when ``ACKLOOP_TRACE_DIR`` is set (the local
stack). A deployment that writes none (production: its spans are in Cloud Trace) answers 404
with the run's trace id and a link to it in the Cloud Trace console.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from ackloop.api.auth import caller_of
from ackloop.api.runs import ERRORS, RunId, deps_of, existing_run
from ackloop.telemetry import tracing
from ackloop.telemetry.trace_files import of_run, read_trace

router = APIRouter(tags=["runs"])

CONSOLE = "https://console.cloud.google.com/traces/list?tid={trace_id}&project={project}"


@router.get("/runs/{run_id}/trace", responses=ERRORS, summary="Get a run's trace")
async def get_trace(request: Request, run_id: RunId) -> JSONResponse:
    """The run's own spans in start order (only those of this run, whatever else shares its
    trace id), each with ``trace_id``, ``span_id``,
    ``parent_span_id``, ``name``, ``service``, ``start``/``end`` (Unix seconds),
    ``attributes``, ``events`` and ``status``. 404 ``no_trace_files`` (with ``trace_id`` and
    ``console_url``) where the deployment sends its spans to Cloud Trace instead."""
    deps = await deps_of(request)
    run = await existing_run(deps, run_id, caller_of(request))
    settings = deps.settings
    trace_id = run.trace_id or tracing.run_trace_id(run.run_id)
    directory = settings.trace_dir
    if not directory or tracing.resolve_export(settings.trace_export, directory) != "file":
        console = CONSOLE.format(trace_id=trace_id, project=settings.project_id)
        return JSONResponse(status_code=404, content={
            "error": f"this deployment writes no trace files; run {run_id}'s trace is "
                     f"{trace_id} in Cloud Trace: {console}",
            "code": "no_trace_files", "trace_id": trace_id, "console_url": console})
    spans: list[dict[str, Any]] = await asyncio.to_thread(read_trace, Path(directory), trace_id)
    # Found by the run, not by the trace id alone, which a caller may have chosen (S4).
    spans = of_run(spans, run_id, tracing.run_root_span_id(run_id))
    return JSONResponse({"run_id": run_id, "trace_id": trace_id, "spans": spans})
