"""A run's stored files, for their owner: ``GET /runs/{run_id}/files/{sha256}``.

Only a file one of the run's steps recorded (a tool's result names what it stored:
:func:`ackloop.engine.tool_step.store_files`) is served, read from the deployment's file store;
any other digest is 404, as is another caller's run. The bytes are served as what the tool
said they are, but never as something the browser runs: a sandboxing content security policy,
``nosniff``, and only raster images and PDF shown inline (anything else is a download).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Request, Response
from fastapi import Path as PathParam

from ackloop.api.auth import caller_of
from ackloop.api.errors import ApiError
from ackloop.api.runs import ERRORS, RunId, deps_of, existing_run
from ackloop.domain.records import StepRecord
from ackloop.files import StoredFile

router = APIRouter(tags=["runs"])

Digest = Annotated[str, PathParam(pattern="^[0-9a-f]{64}$",
                                  description="The file's SHA-256, as its step recorded it.")]
INLINE_TYPES = frozenset({"image/png", "image/jpeg", "image/webp", "image/gif",
                          "application/pdf"})
"""What is shown in the browser; any other type is served as a download."""


def step_files(steps: list[StepRecord]) -> list[StoredFile]:
    """The files the steps recorded (a tool step's ``result.response.files``), in step order."""
    found: list[StoredFile] = []
    for step in steps:
        response = (step.result or {}).get("response")
        listed = response.get("files") if isinstance(response, dict) else None
        for entry in listed if isinstance(listed, list) else []:
            try:
                found.append(StoredFile.model_validate(entry))
            except ValueError:
                continue
    return found


@router.get("/runs/{run_id}/files/{sha256}", response_class=Response,
            responses={200: {"content": {"application/octet-stream": {}},
                             "description": "The file's bytes, with its MIME type."},
                       **ERRORS},
            summary="A file a run's step stored")
async def get_run_file(request: Request, run_id: RunId, sha256: Digest) -> Response:
    """The bytes of a file one of the run's steps stored (a tool's image or document), by the
    SHA-256 the step recorded; 404 for any other digest, another caller's run, or a file no
    longer stored (past its retention)."""
    deps = await deps_of(request)
    await existing_run(deps, run_id, caller_of(request))
    stored = next((f for f in step_files(await deps.store.list_steps(run_id))
                   if f.sha256 == sha256), None)
    if stored is None:
        raise ApiError(404, "not_found", f"run {run_id} stored no file {sha256}")
    try:
        data = await deps.files.get(stored.uri)
    except FileNotFoundError:
        raise ApiError(404, "not_found", f"the file {sha256} of run {run_id} is no longer "
                       "stored") from None
    mime = stored.mime_type if stored.mime_type in INLINE_TYPES else "application/octet-stream"
    name = (stored.name or sha256).replace('"', "")
    disposition = "inline" if mime in INLINE_TYPES else "attachment"
    return Response(data, media_type=mime, headers={
        "Content-Disposition": f'{disposition}; filename="{name}"',
        "Content-Security-Policy": "sandbox; default-src 'none'",
        "X-Content-Type-Options": "nosniff",
        "Cache-Control": "private, max-age=3600",
        "ETag": f'"{sha256}"',
    })
