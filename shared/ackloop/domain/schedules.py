"""Schedules: an agent, an input and when; each firing starts a run. Pure: no I/O, no clock.

A :class:`Schedule` says when it fires with exactly one of ``cron`` (five fields, read in its
``time_zone``) or ``every_seconds`` (anchored at ``start_at``, else at the Unix epoch), between
``start_at`` and ``end_at`` when given. Firing times are whole seconds. What this module
computes from a spec and a time, the engine (:mod:`ackloop.engine.schedule_firing`) and the store
(:mod:`ackloop.store.schedules`) only apply:

- :func:`next_fire_after`: the next firing strictly after a time (None: the schedule is over);
- :func:`firings_between`: the firings in a range (a backfill), capped;
- :func:`jitter_of`: how long after its nominal time a firing is published (a hash of the
  schedule and the time: the same however often it is computed);
- :func:`request_id_of`: the request id of a firing, which makes its run once: a firing at a
  time, normal or backfilled, is ``schedule-<id>-<UTC time>``; a manual trigger's is its own.

Daylight saving: a wall time skipped by a change forward fires at the first instant after it
(``30 2 * * *`` fires at 03:00 that day); a wall time that repeats when the clocks go back fires
once, at its first occurrence, unless the hour field is ``*`` (an hourly schedule fires every
real hour).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

from ackloop.domain.records import ANONYMOUS
from ackloop.domain.wire import RunOptions

SCHEDULE_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"
ScheduleId = Annotated[str, StringConstraints(pattern=SCHEDULE_ID_PATTERN)]
Overlap = Literal["skip", "buffer_one", "allow_all", "cancel_other"]
FiringKind = Literal["normal", "manual", "backfill"]

MAX_BACKFILL = 1000
"""The most firings one backfill starts."""
MAX_JITTER_SECONDS = 3600
MAX_TEXT_CHARS = 32_000
MIN_CATCHUP_WINDOW_SECONDS = 60.0
"""The smallest catch-up window: a wake, or the sweeper's tick for a lost one, is always some
late, and a firing later than its window is recorded missed, not run."""
_SEARCH_LIMIT = 2000
"""Cron matches skipped (the repeated hour of a change back) before a search gives up."""


class Schedule(BaseModel):
    """When ``agent`` is asked ``text`` (with ``options``): see the module's doc.

    ``overlap``: what a firing does while the schedule's last run is still active: ``skip``
    (records the firing skipped), ``buffer_one`` (queues one run behind it, in the schedule's
    own conversation; a firing while one is queued already is skipped), ``allow_all`` (starts
    anyway), ``cancel_other`` (cancels it, then starts). ``catchup_window_seconds``: a firing
    found late (an outage) by more than this is recorded missed, not run."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: ScheduleId
    agent: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$")]
    text: Annotated[str, StringConstraints(min_length=1, max_length=MAX_TEXT_CHARS)]
    options: RunOptions | None = None
    cron: str | None = Field(default=None,
                             description="Five fields: minute hour day month weekday.")
    time_zone: str = Field(default="UTC", description="The IANA zone the cron is read in.")
    every_seconds: int | None = Field(default=None, ge=1, le=366 * 86_400)
    jitter_seconds: int = Field(default=0, ge=0, le=MAX_JITTER_SECONDS)
    start_at: float | None = Field(default=None, description="Unix seconds (or an aware datetime).")
    end_at: float | None = Field(default=None, description="Unix seconds (or an aware datetime).")
    overlap: Overlap = "skip"
    catchup_window_seconds: float = Field(default=3600.0, le=366 * 86_400)
    paused: bool = False

    @field_validator("catchup_window_seconds")
    @classmethod
    def _window(cls, value: float) -> float:
        if value < MIN_CATCHUP_WINDOW_SECONDS:
            raise ValueError(
                f"catchup_window_seconds {value:g} is below {MIN_CATCHUP_WINDOW_SECONDS:g}: "
                "every firing arrives some late (its wake's delivery, the sweeper's period), "
                "so a smaller window would record firings missed that are on time")
        return value

    @field_validator("start_at", "end_at", mode="before")
    @classmethod
    def _epoch(cls, value: Any) -> Any:
        if isinstance(value, dt.datetime):
            if value.tzinfo is None:
                raise ValueError("give an aware datetime (with its time zone) or Unix seconds")
            return value.timestamp()
        return value

    @field_validator("time_zone")
    @classmethod
    def _zone(cls, value: str) -> str:
        zone_of(value)
        return value

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str | None) -> str | None:
        if value is not None:
            check_cron(value)
        return value

    @model_validator(mode="after")
    def _one_rule(self) -> Schedule:
        if (self.cron is None) == (self.every_seconds is None):
            raise ValueError("give exactly one of cron (e.g. '0 9 * * 1-5') or every_seconds")
        if self.start_at is not None and self.end_at is not None and self.end_at < self.start_at:
            raise ValueError("end_at is before start_at")
        return self

    def digest(self) -> str:
        """What the spec is, as a short hash: a changed spec has another."""
        body = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(body.encode()).hexdigest()[:24]


def zone_of(name: str) -> ZoneInfo:
    """The IANA zone ``name``; a ValueError that says what to give."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"time_zone {name!r} is not an IANA time zone (e.g. 'UTC', "
                         "'Europe/Paris', 'America/New_York')") from exc


def check_cron(expression: str) -> None:
    """A ValueError that says what to fix unless ``expression`` is a valid five-field cron."""
    fields = expression.split()
    if len(fields) != 5:
        raise ValueError(f"cron {expression!r} has {len(fields)} fields; give five: minute hour "
                         "day-of-month month day-of-week (e.g. '0 9 * * 1-5')")
    from croniter import croniter  # here: only schedules use it, no step service's start

    if not croniter.is_valid(expression):
        raise ValueError(f"cron {expression!r} is not a valid cron expression (each field: "
                         "a number, a range a-b, a list a,b, a step */n, or *)")


def _start(spec: Schedule) -> float | None:
    return None if spec.start_at is None else float(math.ceil(spec.start_at))


def next_fire_after(spec: Schedule, after: float) -> float | None:
    """The schedule's first firing strictly after ``after`` (and at or after ``start_at``),
    or None when there is none by ``end_at``."""
    start = _start(spec)
    if start is not None and after < start:
        found = _first_from(spec, start)
    else:
        found = _next_rule(spec, after)
    if found is None or (spec.end_at is not None and found > spec.end_at):
        return None
    return found


def _first_from(spec: Schedule, at: float) -> float | None:
    """The first firing at or after ``at`` (a whole second)."""
    return _next_rule(spec, at - 1)


def _next_rule(spec: Schedule, after: float) -> float | None:
    if spec.every_seconds is not None:
        anchor = _start(spec) or 0.0
        steps = math.floor((after - anchor) / spec.every_seconds) + 1
        return anchor + max(steps, 0) * spec.every_seconds
    assert spec.cron is not None
    zone = zone_of(spec.time_zone)
    hourly = spec.cron.split()[1] == "*"
    from croniter import croniter

    matches = croniter(spec.cron, dt.datetime.fromtimestamp(math.floor(after), zone))
    for _ in range(_SEARCH_LIMIT):
        at = float(matches.get_next(float))
        if at <= after:
            continue
        if hourly or dt.datetime.fromtimestamp(at, zone).fold == 0:
            return _skipped_before(spec.cron, zone, after, at) or at
    return None


def _offset(at: float, zone: ZoneInfo) -> dt.timedelta | None:
    return dt.datetime.fromtimestamp(at, zone).utcoffset()


def _skipped_before(cron: str, zone: ZoneInfo, after: float, at: float) -> float | None:
    """The instant the clocks went forward between ``after`` and ``at``, when a wall time the
    change skipped matches ``cron`` (it fires then, the first instant after it); else None.
    Whatever the size of the change (an hour, Lord Howe's 30 minutes, Chatham's 45 at 02:45)."""
    before, later = _offset(after, zone), _offset(at, zone)
    if before is None or later is None or later <= before:
        return None
    low, high = math.floor(after), math.ceil(at)  # the change is in (low, high]
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if _offset(middle, zone) == before else (low, middle)
    skipped_from = dt.datetime.fromtimestamp(high, dt.timezone(before)).replace(tzinfo=None)
    skipped_to = dt.datetime.fromtimestamp(high, zone).replace(tzinfo=None)
    from croniter import croniter

    first = croniter(cron, skipped_from - dt.timedelta(seconds=1)).get_next(dt.datetime)
    return float(high) if first < skipped_to else None


def firings_between(spec: Schedule, start: float, end: float,
                    cap: int = MAX_BACKFILL) -> list[float]:
    """The firings in ``[start, end]``, earliest first, at most ``cap`` of them."""
    found: list[float] = []
    at = next_fire_after(spec, math.ceil(start) - 1)
    while at is not None and at <= end and len(found) < cap:
        found.append(at)
        at = next_fire_after(spec, at)
    return found


def next_firings(spec: Schedule, after: float, count: int) -> list[float]:
    """The next ``count`` firings after ``after`` (fewer when the schedule ends first)."""
    found: list[float] = []
    at = next_fire_after(spec, after)
    while at is not None and len(found) < count:
        found.append(at)
        at = next_fire_after(spec, at)
    return found


def jitter_of(spec: Schedule, at: float) -> int:
    """Seconds after ``at`` that its firing is published: in ``[0, jitter_seconds]``, a hash
    of the schedule and the time, so every computation of it gives the same."""
    if spec.jitter_seconds <= 0:
        return 0
    digest = hashlib.sha256(f"{spec.id}\n{int(at)}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % (spec.jitter_seconds + 1)


def compact_time(at: float, *, millis: bool = False) -> str:
    """``at`` in UTC as ``20250102T030405Z`` (with milliseconds: ``20250102T030405123Z``)."""
    moment = dt.datetime.fromtimestamp(at, dt.UTC)
    text = moment.strftime("%Y%m%dT%H%M%S")
    return f"{text}{moment.microsecond // 1000:03d}Z" if millis else f"{text}Z"


def request_id_of(schedule_id: str, at: float, kind: FiringKind = "normal") -> str:
    """The request id of the firing at ``at``: the same for a normal and a backfilled firing
    of that time (it runs once); a manual trigger's, at the time it was asked, is its own."""
    if kind == "manual":
        return f"schedule-{schedule_id}-manual-{compact_time(at, millis=True)}"
    return f"schedule-{schedule_id}-{compact_time(at)}"


def conversation_of(schedule_id: str, owner: str = ANONYMOUS) -> str:
    """The conversation of a ``buffer_one`` schedule's runs (where one queues behind another),
    the owner's: only the caller who started a conversation may continue it, so a schedule
    whose owner changes (replaced by another operator, taken over by the catalog) goes on in
    a conversation of its new owner's. An anonymous owner's is ``schedule-<id>``, another's
    ``schedule-<id>-<a hash of the owner>``."""
    if owner == ANONYMOUS:
        return f"schedule-{schedule_id}"
    return f"schedule-{schedule_id}-{hashlib.sha256(owner.encode()).hexdigest()[:12]}"


def wake_name(schedule_id: str, at: float) -> str:
    """The name of the wake that fires the schedule at ``at`` (armed once per name)."""
    return f"schedule/{schedule_id}/{int(at)}"


Outcome = Literal["started", "skipped", "missed", "buffered", "cancelled_other", "manual",
                  "backfill", "failed"]
MAX_FIRINGS_KEPT = 20
Source = Literal["catalog", "api"]


class Firing(BaseModel):
    """One firing as the schedule keeps it: its time, its run, what became of it."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    at: float
    outcome: Outcome
    run_id: str | None = None
    detail: str | None = None
    recorded_at: float = 0.0


class ScheduleRecord(BaseModel):
    """``schedules/{id}``: the spec, where it comes from, when it fires next, what it did."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    id: str
    spec: Schedule
    source: Source
    digest: str
    owner: str = ANONYMOUS
    """Whose runs its firings start (the caller who created it; a catalog's: anonymous)."""
    next_fire_at: float | None = None
    paused: bool = False
    deleted: bool = False
    last_run_id: str | None = None
    firings: list[Firing] = Field(default_factory=list)
    created_at: float = 0.0
    updated_at: float = 0.0

    @property
    def active(self) -> bool:
        """Whether it may fire by itself (the due query's ``active``)."""
        return not (self.paused or self.deleted) and self.next_fire_at is not None

    def recorded(self, *firings: Firing) -> list[Firing]:
        """Its recent firings with ``firings`` added, the last :data:`MAX_FIRINGS_KEPT`."""
        return [*self.firings, *firings][-MAX_FIRINGS_KEPT:]


def new_record(spec: Schedule, source: Source, owner: str, now: float) -> ScheduleRecord:
    """The record of a schedule created at ``now``: it fires next after now."""
    return ScheduleRecord(id=spec.id, spec=spec, source=source, digest=spec.digest(),
                          owner=owner, next_fire_at=next_fire_after(spec, now),
                          paused=spec.paused, created_at=now, updated_at=now)


class ScheduleTick(BaseModel):
    """Fire schedule ``schedule_id`` for its time ``at``, on the queries topic (``type``
    tells it from a query): ``normal`` (its wake, or the sweeper), ``manual`` (a trigger) or
    ``backfill`` (a past time asked for)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    v: Literal[1] = 1
    type: Literal["schedule_tick"] = "schedule_tick"
    schedule_id: ScheduleId
    at: float
    kind: FiringKind = "normal"
