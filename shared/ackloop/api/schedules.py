"""The schedules API: list, read, create or replace, delete, pause, resume, trigger, backfill.

Reading is for every caller; writing (every POST and DELETE) for operators
(``ACKLOOP_API_OPERATORS``, as cancel-wide actions are): a schedule starts runs on its own,
deployment-wide. A schedule created here starts its runs as the caller who created it (who can
read them); a catalog's start anonymous runs. A schedule declared in the agent catalog cannot
be replaced here (409): change it in the code. See :mod:`ackloop.engine.schedule_control`.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Request
from fastapi import Path as PathParam
from pydantic import BaseModel, Field

from ackloop.api.auth import OPERATORS_SETTING, caller_of, is_operator
from ackloop.api.errors import ApiError
from ackloop.api.models import ErrorBody
from ackloop.api.runs import ERRORS, deps_of
from ackloop.domain.schedules import (
    MAX_BACKFILL,
    SCHEDULE_ID_PATTERN,
    Firing,
    Schedule,
    ScheduleRecord,
    Source,
)
from ackloop.engine import schedule_control as ops
from ackloop.engine.deps import Deps

router = APIRouter(tags=["schedules"])

ScheduleIdPath = Annotated[str, PathParam(pattern=SCHEDULE_ID_PATTERN, max_length=64,
                                          description="The schedule's id.")]
COMMON: dict[int | str, dict[str, Any]] = {code: ERRORS[code] for code in (401, 422, 503)}
NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorBody, "description": "No such schedule."}}
FORBIDDEN: dict[int | str, dict[str, Any]] = {
    403: {"model": ErrorBody, "description": "Operators only."}}


class ScheduleView(BaseModel):
    id: str
    spec: Schedule
    source: Source = Field(description="catalog (declared in code) or api.")
    paused: bool
    next_fire_at: float | None = Field(description="Unix seconds; null while paused or over.")
    next_firings: list[float] = Field(description="The next 5 firings (Unix seconds).")
    last_run_id: str | None
    firings: list[Firing] = Field(description="The recent firings, oldest first (at most 20).")

    @classmethod
    def of(cls, record: ScheduleRecord) -> ScheduleView:
        return cls(id=record.id, spec=record.spec, source=record.source, paused=record.paused,
                   next_fire_at=record.next_fire_at if record.active else None,
                   next_firings=ops.upcoming(record), last_run_id=record.last_run_id,
                   firings=record.firings)


class ScheduleList(BaseModel):
    schedules: list[ScheduleView] = Field(description="By id.")


class FiredView(BaseModel):
    schedule_id: str
    outcome: str = Field(description="manual (started), skipped (the overlap policy), failed.")
    at: float
    run_id: str | None
    detail: str | None


class BackfillRange(BaseModel):
    start: float = Field(description="Unix seconds: the first firing time included.")
    end: float = Field(description="Unix seconds: the last firing time included.")


class BackfilledRun(BaseModel):
    at: float
    run_id: str


class BackfillView(BaseModel):
    schedule_id: str
    runs: list[BackfilledRun] = Field(description=f"At most {MAX_BACKFILL}, earliest first.")


def _operator(request: Request) -> None:
    if not is_operator(request):
        raise ApiError(403, "forbidden", f"changing schedules is for operators: add "
                       f"{caller_of(request)!r} to {OPERATORS_SETTING} to grant it")


async def _found(request: Request, schedule_id: str) -> tuple[Deps, ScheduleRecord]:
    deps = await deps_of(request)
    try:
        return deps, (await ops.existing(deps, schedule_id)).record
    except ops.NoSchedule as exc:
        raise ApiError(404, "not_found", str(exc)) from exc


@router.get("/schedules", response_model=ScheduleList, responses=COMMON,
            summary="List schedules")
async def list_schedules(request: Request) -> ScheduleList:
    """Every schedule, with its next 5 firings and its recent firings."""
    deps = await deps_of(request)
    records = await deps.store.schedules.listing()
    return ScheduleList(schedules=[ScheduleView.of(r) for r in records])


@router.post("/schedules", status_code=201, response_model=ScheduleView,
             responses={**COMMON, **FORBIDDEN, 409: {"model": ErrorBody, "description":
                        "A schedule of the agent catalog has this id."}},
             summary="Create or replace a schedule")
async def put_schedule(request: Request, body: Schedule) -> ScheduleView:
    """Create the schedule, or replace the API schedule of that id (its next firing is then
    the first after now). An invalid spec (cron, time zone, neither or both of cron and
    every_seconds) is 422, naming what to fix."""
    _operator(request)
    deps = await deps_of(request)
    if body.agent not in deps.agents:
        raise ApiError(422, "unknown_agent", f"agent {body.agent!r} is not in the catalog "
                       f"(it has {deps.agents.startable_names()})")
    try:
        record = await ops.put_schedule(deps, body, caller_of(request))
    except ops.CatalogSchedule as exc:
        raise ApiError(409, "catalog_schedule", str(exc)) from exc
    return ScheduleView.of(record)


@router.get("/schedules/{schedule_id}", response_model=ScheduleView,
            responses={**COMMON, **NOT_FOUND}, summary="Read a schedule")
async def get_schedule(request: Request, schedule_id: ScheduleIdPath) -> ScheduleView:
    _, record = await _found(request, schedule_id)
    return ScheduleView.of(record)


async def _changed(request: Request, schedule_id: str, change: Any) -> ScheduleView:
    _operator(request)
    deps, _ = await _found(request, schedule_id)
    try:
        return ScheduleView.of(await change(deps, schedule_id))
    except ops.NoSchedule as exc:
        raise ApiError(404, "not_found", str(exc)) from exc


@router.delete("/schedules/{schedule_id}", response_model=ScheduleView,
               responses={**COMMON, **NOT_FOUND, **FORBIDDEN}, summary="Delete a schedule")
async def delete_schedule(request: Request, schedule_id: ScheduleIdPath) -> ScheduleView:
    """Delete it: it fires no more (a catalog schedule comes back when its spec changes)."""
    return await _changed(request, schedule_id, ops.delete)


@router.post("/schedules/{schedule_id}/pause", response_model=ScheduleView,
             responses={**COMMON, **NOT_FOUND, **FORBIDDEN}, summary="Pause a schedule")
async def pause_schedule(request: Request, schedule_id: ScheduleIdPath) -> ScheduleView:
    return await _changed(request, schedule_id, ops.pause)


@router.post("/schedules/{schedule_id}/resume", response_model=ScheduleView,
             responses={**COMMON, **NOT_FOUND, **FORBIDDEN}, summary="Resume a schedule")
async def resume_schedule(request: Request, schedule_id: ScheduleIdPath) -> ScheduleView:
    """Resume: it fires next at its first firing after now (none missed while paused)."""
    return await _changed(request, schedule_id, ops.resume)


@router.post("/schedules/{schedule_id}/trigger", response_model=FiredView,
             responses={**COMMON, **NOT_FOUND, **FORBIDDEN}, summary="Fire a schedule now")
async def trigger_schedule(request: Request, schedule_id: ScheduleIdPath) -> FiredView:
    """A manual firing, now: its overlap policy applies; the schedule does not advance."""
    _operator(request)
    deps, _ = await _found(request, schedule_id)
    fired = await ops.trigger(deps, schedule_id)
    return FiredView.model_validate(fired.body())


@router.post("/schedules/{schedule_id}/backfill", response_model=BackfillView,
             responses={**COMMON, **NOT_FOUND, **FORBIDDEN},
             summary="Run a schedule's firings of a past range (those due)")
async def backfill_schedule(request: Request, schedule_id: ScheduleIdPath,
                            body: BackfillRange) -> BackfillView:
    """Start the run of each firing time in ``[start, end]`` that is due (at most 1000), each
    under the request id of that time's normal firing: a time that ran already runs once. The
    times after now are not started: they fire at their own time (a start after now: 422)."""
    _operator(request)
    if body.end < body.start:
        raise ApiError(422, "invalid_range", "end is before start")
    deps, _ = await _found(request, schedule_id)
    try:
        done = await ops.backfill(deps, schedule_id, body.start, body.end)
    except ops.NothingDue as exc:
        raise ApiError(422, "nothing_due", str(exc)) from exc
    return BackfillView(schedule_id=schedule_id,
                        runs=[BackfilledRun(at=b.at, run_id=b.run_id) for b in done])
