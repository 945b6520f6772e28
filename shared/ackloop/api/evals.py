"""The evals API: the reports ``ackloop eval`` stores, which the inspector's eval pages show.

A report belongs to the caller who stored it, as a run does (:func:`ackloop.api.auth.caller_of`):
another caller's is 404, and the same eval id from two callers is two reports. ``PUT`` again
under the same eval id replaces it. ``ackloop eval`` on the local stack writes its report
straight to the store (:meth:`ackloop.store.Evals.put_report`) as the anonymous caller, whom
every caller is when the API checks no one; against a deployment it sends it here.

Text the store cannot keep whole is cut to its bounds (:mod:`ackloop.store.evals`): a report
read back may hold less than was sent, never more.
"""

from __future__ import annotations

import math
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi import Path as PathParam
from pydantic import BaseModel, Field

from ackloop.api.auth import caller_of
from ackloop.api.errors import ApiError
from ackloop.api.models import ErrorBody, FieldError
from ackloop.api.runs import ERRORS, deps_of
from ackloop.domain.eval_reports import EvalReport
from ackloop.domain.wire import ID_PATTERN
from ackloop.store.evals import EvalHead

router = APIRouter(tags=["evals"])

EVALS_PREFIX = "/evals/"
MAX_REPORT_BYTES = 8 * 1024 * 1024
"""The largest report ``PUT /evals/{eval_id}`` accepts (any other route keeps
``api_max_body_bytes``)."""
REPORT_TOO_LARGE = (" (an eval's report may take 8 MiB: run fewer cases at a time, or store "
                    "the report from the local stack)")

EvalId = Annotated[str, PathParam(pattern=ID_PATTERN, max_length=128,
                                  description="The eval's id, as `ackloop eval` prints it.")]
COMMON: dict[int | str, dict[str, Any]] = {code: ERRORS[code] for code in (401, 413, 422, 503)}
NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorBody, "description": "No such eval."}}


class EvalList(BaseModel):
    evals: list[EvalHead] = Field(description="The latest started first, without their cases.")
    next: str | None = Field(description="Pass as `before` for the next page; null at the end.")


def refused(report: EvalReport) -> FieldError | None:
    """Where the report holds what no answer can carry back (a number that is not finite, text
    that is not valid Unicode), or None. Read without recursion: an answer may nest deeply."""
    stack: list[tuple[str, Any]] = [("body", report)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, BaseModel):
            stack.extend((f"{where}.{name}", item) for name, item in vars(value).items())
        elif isinstance(value, dict):
            stack.extend((f"{where}.{str(key)[:40]}", item) for key, item in value.items())
            stack.extend((f"{where} (a key)", str(key)) for key in value)
        elif isinstance(value, list):
            stack.extend((f"{where}.{i}", item) for i, item in enumerate(value))
        elif isinstance(value, float) and not math.isfinite(value):
            return FieldError(field=where, message=f"{value} is not a finite number")
        elif isinstance(value, str) and not _unicode(value):
            return FieldError(field=where, message="text that is not valid Unicode (a lone "
                              "surrogate such as \\ud800)")
    return None


def _unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@router.put("/evals/{eval_id}", response_model=EvalHead, responses=COMMON,
            summary="Store an eval's report")
async def put_eval(request: Request, eval_id: EvalId, report: EvalReport) -> EvalHead:
    """Store the report ``ackloop eval`` produced (its JSON, ``--json``) as the caller's,
    replacing the one stored under the same eval id; answers what the list of evals shows of
    it. The body's ``eval_id`` must be the path's."""
    if report.eval_id != eval_id:
        raise ApiError(422, "invalid_request", f"the body's eval_id {report.eval_id!r} is not "
                       f"the path's {eval_id!r}",
                       fields=[FieldError(field="body.eval_id", message="not the path's")])
    if (problem := refused(report)) is not None:
        raise ApiError(422, "invalid_request",
                       f"invalid request: {problem.field}: {problem.message}", fields=[problem])
    deps = await deps_of(request)
    return await deps.store.evals.put_report(report, caller_of(request))


@router.get("/evals", response_model=EvalList, responses=COMMON, summary="List your evals")
async def list_evals(
    request: Request,
    limit: Annotated[int, Query(ge=1, le=100)] = 50,
    before: Annotated[float | None, Query(
        gt=0, description="A previous answer's `next`: the page after it.")] = None,
) -> EvalList:
    """The caller's eval reports, the latest started first: each one's summary, no cases."""
    deps = await deps_of(request)
    heads = await deps.store.evals.list_reports(caller_of(request), limit, before)
    more = len(heads) == limit and heads[-1].started_at > 0
    return EvalList(evals=heads, next=repr(heads[-1].started_at) if more else None)


@router.get("/evals/{eval_id}", response_model=EvalReport, responses={**COMMON, **NOT_FOUND},
            summary="Get an eval's report")
async def get_eval(request: Request, eval_id: EvalId) -> EvalReport:
    """The whole report: its summary, and each case's run, checks (with their reasons: a
    trajectory's diff among them), answer, trajectory and spend."""
    deps = await deps_of(request)
    report = await deps.store.evals.get_report(eval_id, caller_of(request))
    if report is None:
        raise ApiError(404, "not_found", f"no eval {eval_id}")
    return report
