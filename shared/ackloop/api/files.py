"""A run's stored files, for their owner: ``GET /runs/{run_id}/files/{sha256}``.

Two kinds are served, read from the deployment's file store: a file the run's question carried
inline (the run's ``files`` keeps a ``file_data`` part naming where its bytes were stored, under
their digest: :func:`ackloop.files.object_name`), and a file one of the run's steps recorded (a
tool's result names what it stored: :func:`ackloop.engine.tool_step.store_files`). Any other
digest is 404, as is another caller's run; so is a file the question passed by its own URI (the
deployment holds no bytes of it). The bytes are served as what their sender said they are, but
never as something the browser runs: a sandboxing content security policy, ``nosniff``, and
only raster images and PDF shown inline, when their bytes are of the type declared (anything
else is a download of ``application/octet-stream``: :mod:`ackloop.files.download`). The name
goes into ``Content-Disposition`` as RFC 6266 says, whatever characters it holds.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Request, Response
from fastapi import Path as PathParam

from ackloop.api.auth import caller_of
from ackloop.api.errors import ApiError
from ackloop.api.runs import ERRORS, RunId, deps_of, existing_run
from ackloop.domain.records import RunRecord, StepRecord
from ackloop.files import FileStore, StoredFile, stored_digest, stored_size
from ackloop.files.download import content_disposition, served_type

router = APIRouter(tags=["runs"])

Digest = Annotated[str, PathParam(pattern="^[0-9a-f]{64}$",
                                  description="The file's SHA-256: the one its stored URI "
                                  "names (a question's file), or its step recorded.")]


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


def question_files(run: RunRecord, store: FileStore) -> list[StoredFile]:
    """The files the run's question carried that the deployment stored (an inline file's
    ``file_data`` part names its object in ``store``: ``files/<sha256>-<size>``), in the
    question's order; a file passed by the caller's own URI is not among them."""
    found: list[StoredFile] = []
    for part in run.files:
        data = part.get("file_data")
        uri = data.get("file_uri") if isinstance(data, dict) else None
        if not isinstance(data, dict) or not isinstance(uri, str) or not store.owns(uri):
            continue
        digest, size, name = stored_digest(uri), stored_size(uri), data.get("display_name")
        if digest is None or size is None:
            continue
        found.append(StoredFile(uri=uri, mime_type=str(data.get("mime_type") or ""), size=size,
                                sha256=digest, name=name if isinstance(name, str) else None))
    return found


@router.get("/runs/{run_id}/files/{sha256}", response_class=Response,
            responses={200: {"content": {"application/octet-stream": {}},
                             "description": "The file's bytes, with its MIME type."},
                       **ERRORS},
            summary="A file a run's question carried or its step stored")
async def get_run_file(request: Request, run_id: RunId, sha256: Digest) -> Response:
    """The bytes of a file the run's question carried inline (by the SHA-256 its URI in the
    run's ``files`` names) or one of its steps stored (a tool's image or document, by the
    SHA-256 the step recorded); 404 for any other digest, a file the question passed by its own
    URI, another caller's run, or a file no longer stored (past its retention)."""
    deps = await deps_of(request)
    run = await existing_run(deps, run_id, caller_of(request))
    stored = next((f for f in question_files(run, deps.files) if f.sha256 == sha256), None)
    if stored is None:
        stored = next((f for f in step_files(await deps.store.steps.list_steps(run_id))
                       if f.sha256 == sha256), None)
    if stored is None:
        raise ApiError(404, "not_found", f"run {run_id} stored no file {sha256}")
    try:
        data = await deps.files.get(stored.uri)
    except FileNotFoundError:
        raise ApiError(404, "not_found", f"the file {sha256} of run {run_id} is no longer "
                       "stored") from None
    mime, disposition = served_type(data, stored.mime_type)
    return Response(data, media_type=mime, headers={
        "Content-Disposition": content_disposition(disposition, stored.name or sha256, sha256),
        "Content-Security-Policy": "sandbox; default-src 'none'",
        "X-Content-Type-Options": "nosniff",
        "Cache-Control": "private, max-age=3600",
        "ETag": f'"{sha256}"',
    })
