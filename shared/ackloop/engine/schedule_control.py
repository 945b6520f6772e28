"""What the API, the CLI and the sweeper do to schedules: create or replace, pause, resume,
delete, trigger, backfill; the sweeper's pass (the catalog's schedules synced, the due
schedules whose wake was lost fired).

Each change is written at the version read (the room's :class:`~ackloop.store.ScheduleChanged`
makes it read again) and arms the next firing's wake; a firing itself is
:mod:`ackloop.engine.schedule_firing`'.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from ackloop.bus.wakes import NoWaker
from ackloop.domain.keys import run_id_for_request
from ackloop.domain.records import ANONYMOUS
from ackloop.domain.schedules import (
    MAX_BACKFILL,
    Firing,
    Schedule,
    ScheduleRecord,
    ScheduleTick,
    firings_between,
    jitter_of,
    new_record,
    next_fire_after,
    request_id_of,
)
from ackloop.engine.deps import Deps
from ackloop.engine.schedule_firing import Fired, arm, fire, tick_of
from ackloop.store import ScheduleChanged, StoredSchedule

log = logging.getLogger(__name__)

WRITE_ATTEMPTS = 5


class NoSchedule(LookupError):
    """No such schedule (or a deleted one)."""


class CatalogSchedule(Exception):
    """A catalog schedule cannot be replaced through the API (change it in the code)."""


@dataclass(frozen=True)
class Backfilled:
    at: float
    run_id: str


async def _changed(deps: Deps, schedule_id: str,
                   change: Callable[[ScheduleRecord, float], ScheduleRecord]) -> ScheduleRecord:
    """Apply ``change`` to the schedule (:class:`NoSchedule` when there is none)."""

    def changed(stored: StoredSchedule | None, now: float) -> ScheduleRecord:
        if stored is None or stored.record.deleted:
            raise NoSchedule(f"no schedule {schedule_id!r}")
        return change(stored.record, now).model_copy(update={"updated_at": now})

    return await _written(deps, schedule_id, changed)


async def _written(deps: Deps, schedule_id: str,
                   build: Callable[[StoredSchedule | None, float], ScheduleRecord]
                   ) -> ScheduleRecord:
    """Write what ``build`` makes of the schedule as read, at the version read (again when
    written meanwhile), then arm its next firing."""
    for attempt in range(WRITE_ATTEMPTS):
        (stored,) = await deps.store.schedules.read(schedule_id)
        now = deps.clock.now()
        updated = build(stored, now)
        try:
            await deps.store.schedules.write(updated, stored.version if stored else None, now)
        except ScheduleChanged:
            if attempt == WRITE_ATTEMPTS - 1:
                raise
            continue
        await arm(deps, updated)
        return updated
    raise AssertionError("unreachable")


async def existing(deps: Deps, schedule_id: str) -> StoredSchedule:
    (stored,) = await deps.store.schedules.read(schedule_id)
    if stored is None or stored.record.deleted:
        raise NoSchedule(f"no schedule {schedule_id!r}")
    return stored


async def put_schedule(deps: Deps, spec: Schedule, owner: str = ANONYMOUS) -> ScheduleRecord:
    """Create the API schedule ``spec``, or replace the API schedule of its id (its firings
    and last run kept, its next firing after now). :class:`CatalogSchedule` for a catalog's."""

    def put(stored: StoredSchedule | None, now: float) -> ScheduleRecord:
        record = new_record(spec, "api", owner, now)
        if stored is None or stored.record.deleted:
            return record
        before = stored.record
        if before.source == "catalog":
            raise CatalogSchedule(f"schedule {spec.id!r} is declared in the agent catalog: "
                                  "change it in the code, or pick another id")
        return record.model_copy(update={"firings": before.firings,
                                         "last_run_id": before.last_run_id,
                                         "created_at": before.created_at})

    return await _written(deps, spec.id, put)


async def pause(deps: Deps, schedule_id: str) -> ScheduleRecord:
    return await _changed(deps, schedule_id, lambda r, now: r.model_copy(update={"paused": True}))


async def resume(deps: Deps, schedule_id: str) -> ScheduleRecord:
    """Resume: the next firing is the first after now (those missed while paused are not
    fired)."""
    return await _changed(deps, schedule_id, lambda r, now: r.model_copy(
        update={"paused": False, "next_fire_at": next_fire_after(r.spec, now)}))


async def delete(deps: Deps, schedule_id: str) -> ScheduleRecord:
    """Delete: a firing in flight finds it gone. A catalog schedule deleted comes back at the
    next sync only if its spec changes; remove it from the code to remove it for good."""
    return await _changed(deps, schedule_id,
                          lambda r, now: r.model_copy(update={"deleted": True}))


async def trigger(deps: Deps, schedule_id: str) -> Fired:
    """Fire now, a manual firing: the overlap policy applies; the schedule does not advance."""
    await existing(deps, schedule_id)
    return await fire(deps, ScheduleTick(schedule_id=schedule_id, at=deps.clock.now(),
                                         kind="manual"))


async def publish_trigger(deps: Deps, schedule_id: str) -> Fired:
    """Fire now by publishing the manual tick (for a process without the catalog: the CLI):
    the run it will start, not started yet."""
    stored = await existing(deps, schedule_id)
    at = deps.clock.now()
    await deps.publisher.publish(deps.topic("queries"), tick_of(schedule_id, at, "manual"),
                                 {"schedule_id": schedule_id})
    run_id = run_id_for_request(request_id_of(schedule_id, at, "manual"), stored.record.owner)
    return Fired(schedule_id, "published", at, run_id)


class NothingDue(ValueError):
    """A backfill whose range holds no firing time that is due yet (its start is in the
    future): those fire at their own time."""


async def backfill(deps: Deps, schedule_id: str, start: float, end: float) -> list[Backfilled]:
    """Start the run of every firing time in ``[start, end]`` that is due (at most
    :data:`~ackloop.domain.schedules.MAX_BACKFILL`), each under its normal request id: a time
    that already ran runs once. The times after now are not started: they fire at their own
    time, as the schedule does (:class:`NothingDue` when ``start`` is after now). The ticks are
    published, then the firings recorded."""
    stored = await existing(deps, schedule_id)
    record = stored.record
    now = deps.clock.now()
    if start > now:
        raise NothingDue(f"start {start:g} is after now ({now:.0f}): a backfill runs the "
                         "firings already due; the schedule fires the later ones at their time")
    times = firings_between(record.spec, start, min(end, now), MAX_BACKFILL)
    if not times:
        return []
    await deps.publisher.publish_many(deps.topic("queries"), [
        (tick_of(schedule_id, at, "backfill"), {"schedule_id": schedule_id}) for at in times])
    done = [Backfilled(at, run_id_for_request(request_id_of(schedule_id, at, "backfill"),
                                              record.owner)) for at in times]
    firings = [Firing(at=b.at, outcome="backfill", run_id=b.run_id, recorded_at=now)
               for b in done]
    await _changed(deps, schedule_id, lambda r, _: r.model_copy(
        update={"firings": r.recorded(*firings)}))
    return done


async def sweep_schedules(deps: Deps, *, grace: float | None = None) -> list[str]:
    """The sweeper's pass: the catalog's schedules synced, then a tick published for every
    schedule due for longer than ``grace`` (default ``sweep_stale_seconds``; without a waker,
    none: the sweeper is what fires them). The ids of the schedules it published for."""
    await sync_catalog(deps)
    if grace is None:
        grace = 0.0 if isinstance(deps.waker, NoWaker) else deps.settings.sweep_stale_seconds
    now = deps.clock.now()
    due = [r for r in await deps.store.schedules.due(now - grace + 1e-3)
           if r.next_fire_at is not None
           and r.next_fire_at + jitter_of(r.spec, r.next_fire_at) + grace <= now]
    if due:
        await deps.publisher.publish_many(deps.topic("queries"), [
            (tick_of(r.id, r.next_fire_at or 0.0), {"schedule_id": r.id}) for r in due])
        log.warning("sweeper: schedule(s) %s due with no wake delivered: fired",
                    ", ".join(r.id for r in due))
    return [r.id for r in due]


async def sync_catalog(deps: Deps) -> list[str]:
    """Make the stored catalog schedules what the code declares (created, replaced where the
    spec's digest changed, deleted where the code no longer declares them). One read when
    nothing changed: the digests as last synced. The ids it wrote."""
    if not deps.agents.names():
        return []  # no catalog loaded here (the CLI's sweep): nothing to sync it with
    declared = {s.id: s for s in deps.agents.schedules}
    digests = {sid: spec.digest() for sid, spec in declared.items()}
    synced = await deps.store.schedules.catalog()
    if synced.digests == digests:
        return []
    ids = sorted(set(digests) | set(synced.digests))
    now = deps.clock.now()
    written: list[str] = []
    for sid, stored in zip(ids, await deps.store.schedules.read(*ids), strict=True):
        unchanged = sid in digests and synced.digests.get(sid) == digests[sid]
        record = _synced(declared.get(sid), stored, now, unchanged=unchanged)
        if record is None:
            continue
        await deps.store.schedules.write(record, stored.version if stored else None, now)
        await arm(deps, record)
        written.append(sid)
    await deps.store.schedules.write_catalog(digests, synced.version, now)
    if written:
        log.info("schedules synced from the catalog: %s", ", ".join(written))
    return written


def _synced(spec: Schedule | None, stored: StoredSchedule | None, now: float, *,
            unchanged: bool) -> ScheduleRecord | None:
    """What the record of a catalog schedule becomes (None: left as it is). ``unchanged``:
    its spec is the one last synced, so a record deleted since (or gone) stays so."""
    before = stored.record if stored is not None else None
    if spec is None:  # no longer declared: deleted, if it is still the catalog's
        if before is None or before.deleted or before.source != "catalog":
            return None
        return before.model_copy(update={"deleted": True, "updated_at": now})
    if unchanged and (before is None or before.deleted):
        return None  # deleted by an operator: back only when its own spec changes
    if before is not None and not before.deleted and before.digest == spec.digest() and (
            before.source == "catalog"):
        return None
    record = new_record(spec, "catalog", ANONYMOUS, now)
    if before is None or before.deleted:
        return record
    if before.source != "catalog":
        log.warning("schedule %s: the catalog's replaces the API's of that id", spec.id)
    kept = before.next_fire_at
    if kept is not None and next_fire_after(spec, kept - 1) == kept:
        record = record.model_copy(update={"next_fire_at": kept})  # a firing of both specs
    paused = spec.paused if spec.paused != before.spec.paused else before.paused
    return record.model_copy(update={"firings": before.firings, "paused": paused,
                                     "last_run_id": before.last_run_id,
                                     "created_at": before.created_at})


def upcoming(record: ScheduleRecord, count: int = 5) -> list[float]:
    """The schedule's next ``count`` firings from its next one (none while paused)."""
    if not record.active or record.next_fire_at is None:
        return []
    found = [record.next_fire_at]
    while len(found) < count and (at := next_fire_after(record.spec, found[-1])) is not None:
        found.append(at)
    return found
