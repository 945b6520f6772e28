"""Firing schedules: a tick on the queries topic starts the schedule's run, once.

A :class:`~ackloop.domain.schedules.ScheduleTick` (``type: "schedule_tick"``) names a schedule
and the time it fires for. Its wake publishes it at that time plus the firing's jitter
(:mod:`ackloop.bus.wakes`, named ``schedule/<id>/<time>``: armed once); the sweeper publishes it
when the wake was lost (:mod:`ackloop.engine.schedule_control`). Firing a normal tick:

1. read the schedule: gone (deleted) or paused: acknowledged, nothing runs; a time that is not
   the schedule's ``next_fire_at`` is stale (fired already): its current next firing is armed
   again (absorbed when armed); a tick early for its time (a wait longer than the waker holds)
   is armed again too;
2. a firing later than the catch-up window is recorded missed (with every firing up to the
   window), and the schedule moves on to the first firing within the window;
3. the overlap policy, against the schedule's last run (unless this firing's own run exists
   already: a backfill of its time started it);
4. the firing is recorded, its run as the schedule's last run, and (a normal one) the
   schedule advanced (``next_fire_at``), at the version read: of two firings that read the
   schedule together (a tick and a trigger, a pause or an edit meanwhile), one writes, the
   other reads it again and meets what the first did; the next firing's wake is armed;
5. only then the run, through ingest, under the firing's request id
   (:func:`~ackloop.domain.schedules.request_id_of`): a tick delivered twice starts one run.
   A run refused (an agent the catalog no longer has) turns its firing ``failed``.

A crash before 4 leaves the tick unacknowledged and nothing written; a crash between 4 and 5
leaves the firing recorded and its run not created: the tick's redelivery finds its firing
recorded (paused, advanced or replaced since), arms the next firing's wake and starts that
run, and until then, for at most :data:`CLAIM_SECONDS`, the run counts as the schedule's
active one (``skip`` skips). Without a redelivery the next wake is left unarmed at worst: the
sweeper publishes it once it is due. So no firing is lost, none runs twice, and every run is
recorded.

A manual tick (a trigger) fires at the time it was asked, paused or not, under a request id of
its own; the policy applies and the schedule does not advance. A backfill tick starts the run
of a past firing time, under that time's normal request id (one run per time whoever starts
it), without the overlap policy and without writing the schedule (its request recorded them).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from ackloop.bus.wakes import Wake, WakeNotArmed
from ackloop.domain.errors import IdempotencyMismatch, PermanentError
from ackloop.domain.keys import run_id_for_request
from ackloop.domain.schedules import (
    MAX_FIRINGS_KEPT,
    Firing,
    FiringKind,
    Outcome,
    ScheduleRecord,
    ScheduleTick,
    conversation_of,
    firings_between,
    jitter_of,
    next_fire_after,
    request_id_of,
    wake_name,
)
from ackloop.domain.wire import QueryMessage, RunOptions
from ackloop.engine import ending
from ackloop.engine.deps import Deps
from ackloop.engine.ingest import start_run
from ackloop.store import ScheduleChanged, StoredSchedule

log = logging.getLogger(__name__)

__all__ = ["FIRE_ATTEMPTS", "Fired", "ScheduleTick", "arm", "fire"]

STARTED: dict[FiringKind, Outcome] = {"normal": "started", "manual": "manual",
                                      "backfill": "backfill"}
"""The outcome of a firing that started its run, by the kind of its tick."""
FIRE_ATTEMPTS = 5
"""Reads of a schedule written meanwhile before the tick is left to its redelivery."""
CLAIMS: frozenset[Outcome] = frozenset({"started", "manual", "buffered", "cancelled_other"})
"""The outcomes of a firing recorded before its run starts."""
CLAIM_SECONDS = 600.0
"""How long a firing recorded, its run not created yet, counts as the schedule's active run:
its tick's redelivery (Pub/Sub's longest backoff) starts it."""


@dataclass(frozen=True)
class Fired:
    """What a tick did: a firing's outcome, or why nothing ran (``gone``, ``paused``,
    ``stale``, ``early``)."""

    schedule_id: str
    outcome: str
    at: float
    run_id: str | None = None
    detail: str | None = None

    def body(self) -> dict[str, Any]:
        return {"schedule_id": self.schedule_id, "outcome": self.outcome, "at": self.at,
                "run_id": self.run_id, "detail": self.detail}


def tick_of(schedule_id: str, at: float, kind: str = "normal") -> bytes:
    return ScheduleTick.model_validate({"schedule_id": schedule_id, "at": at, "kind": kind}
                                       ).model_dump_json().encode()


async def arm(deps: Deps, record: ScheduleRecord) -> None:
    """Arm the wake of the schedule's next firing (none: paused, deleted or over), at its time
    plus its jitter, or at the waker's horizon, whence it is armed again. Not armed: the
    sweeper publishes it once due."""
    if not record.active or record.next_fire_at is None:
        return
    at = record.next_fire_at
    when = at + jitter_of(record.spec, at)
    name = wake_name(record.id, at)
    horizon = deps.clock.now() + deps.waker.horizon_s
    if when > horizon:
        when, name = horizon, f"{name}/{int(horizon)}"
    wake = Wake(name=name, at=when, topic=deps.topic("queries"), data=tick_of(record.id, at),
                attributes={"schedule_id": record.id})
    try:
        await deps.waker.arm(wake)
    except WakeNotArmed as exc:
        log.warning("schedule %s: the wake of %s was not armed (%s): the sweeper fires it",
                    record.id, at, exc)


async def fire(deps: Deps, tick: ScheduleTick) -> Fired:
    """Fire ``tick`` (see the module's doc), reading the schedule again when it was written
    meanwhile; :class:`~ackloop.store.ScheduleChanged` (retryable) past that."""
    for attempt in range(FIRE_ATTEMPTS):
        try:
            return await _fire_once(deps, tick)
        except ScheduleChanged:
            if attempt == FIRE_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


async def _fire_once(deps: Deps, tick: ScheduleTick) -> Fired:
    (stored,) = await deps.store.schedules.read(tick.schedule_id)
    if stored is None or stored.record.deleted:
        return Fired(tick.schedule_id, "gone", tick.at)
    record, now = stored.record, deps.clock.now()
    run_id = run_id_for_request(request_id_of(record.id, tick.at, tick.kind), record.owner)
    if tick.kind == "backfill":
        firing = Firing(at=tick.at, outcome="backfill", run_id=run_id, recorded_at=now)
        return await _started(deps, record, tick, firing, record_failure=False)
    claimed = _claimed(record, tick, run_id)
    if claimed is not None:  # recorded by an earlier delivery, paused or replaced since
        if tick.kind == "normal":
            await arm(deps, record)  # that delivery may have died before arming it
        if await deps.store.runs.get_run(run_id) is not None:  # and started its run
            return Fired(record.id, claimed.outcome, tick.at, run_id, claimed.detail)
        return await _started(deps, record, tick, claimed)
    if tick.kind == "normal":
        if record.paused:
            return Fired(record.id, "paused", tick.at)
        if tick.at != record.next_fire_at or now < tick.at + jitter_of(record.spec, tick.at):
            await arm(deps, record)  # absorbed when armed already
            return Fired(record.id, "stale" if tick.at != record.next_fire_at else "early",
                         tick.at)
        if now - (tick.at + jitter_of(record.spec, tick.at)) > record.spec.catchup_window_seconds:
            return await _missed(deps, stored, now)
    firing = await _decided(deps, record, tick, run_id, now)
    await _record(deps, stored, firing, now,
                  advance_from=tick.at if tick.kind == "normal" else None)
    if firing.run_id is None:
        return Fired(record.id, firing.outcome, tick.at, None, firing.detail)
    return await _started(deps, record, tick, firing)


def _claimed(record: ScheduleRecord, tick: ScheduleTick, run_id: str) -> Firing | None:
    """The firing of ``tick`` as the schedule recorded it, to start its run (None: not yet)."""
    return next((f for f in reversed(record.firings)
                 if f.at == tick.at and f.run_id == run_id and f.outcome in CLAIMS), None)


async def _record(deps: Deps, stored: StoredSchedule, firing: Firing, now: float, *,
                  advance_from: float | None) -> None:
    """Write the firing (and, for a normal one, the next firing) at the version read, then
    arm the next one."""
    record = stored.record
    changes: dict[str, Any] = {"firings": record.recorded(firing), "updated_at": now}
    if firing.run_id is not None and firing.outcome not in ("skipped", "failed"):
        changes["last_run_id"] = firing.run_id
    if advance_from is not None:
        changes["next_fire_at"] = next_fire_after(record.spec, advance_from)
    updated = record.model_copy(update=changes)
    await deps.store.schedules.write(updated, stored.version, now)
    if advance_from is not None:
        await arm(deps, updated)


async def _missed(deps: Deps, stored: StoredSchedule, now: float) -> Fired:
    """The firings later than the catch-up window are recorded missed; the schedule moves on
    to its first firing within the window (due already: armed now)."""
    record = stored.record
    assert record.next_fire_at is not None
    spec = record.spec
    edge = now - spec.catchup_window_seconds
    late = [at for at in firings_between(spec, record.next_fire_at, edge, MAX_FIRINGS_KEPT * 50)
            if at + jitter_of(spec, at) < edge] or [record.next_fire_at]
    following = next_fire_after(spec, late[-1])
    missed = [Firing(at=at, outcome="missed", recorded_at=now,
                     detail="later than the catch-up window") for at in late]
    updated = record.model_copy(update={
        "firings": record.recorded(*missed[-MAX_FIRINGS_KEPT:]), "next_fire_at": following,
        "updated_at": now})
    await deps.store.schedules.write(updated, stored.version, now)
    await arm(deps, updated)
    log.warning("schedule %s: %d firing(s) missed (later than its catch-up window of %ss)",
                record.id, len(late), spec.catchup_window_seconds)
    return Fired(record.id, "missed", record.next_fire_at, detail=f"{len(late)} missed")


def _query(record: ScheduleRecord, request_id: str) -> QueryMessage:
    spec = record.spec
    return QueryMessage(request_id=request_id, text=spec.text, agent=spec.agent,
                        options=spec.options or RunOptions(),
                        conversation_id=(conversation_of(record.id, record.owner)
                                         if spec.overlap == "buffer_one" else None))


async def _decided(deps: Deps, record: ScheduleRecord, tick: ScheduleTick, run_id: str,
                   now: float) -> Firing:
    """The firing as it is recorded before its run starts: the overlap policy applied (unless
    its run exists already: a backfill of its time started it)."""
    firing = Firing(at=tick.at, outcome=STARTED[tick.kind], run_id=run_id, recorded_at=now)
    if await deps.store.runs.get_run(run_id) is not None:
        return firing
    refusal, cancelled, queued = await _overlap(deps, record, now)
    if refusal is not None:
        return firing.model_copy(update={"outcome": "skipped", "run_id": None,
                                          "detail": refusal})
    if tick.kind != "normal":
        return firing
    if queued:
        return firing.model_copy(update={"outcome": "buffered"})
    if cancelled is not None:
        return firing.model_copy(update={"outcome": "cancelled_other",
                                          "detail": f"cancelled {cancelled}"})
    return firing


async def _started(deps: Deps, record: ScheduleRecord, tick: ScheduleTick, firing: Firing, *,
                   record_failure: bool = True) -> Fired:
    """Start the run of the recorded ``firing`` through ingest, under the firing's request id
    (a run started already is not started again); a refused run's firing recorded failed."""
    request_id = request_id_of(record.id, tick.at, tick.kind)
    outcome, detail = firing.outcome, firing.detail
    try:
        await start_run(deps, _query(record, request_id), owner=record.owner)
    except IdempotencyMismatch:  # started under an earlier spec of the schedule
        detail = "started before under another spec"
    except PermanentError as exc:
        log.warning("schedule %s: the run of %s was refused: %s", record.id, tick.at, exc)
        failed = firing.model_copy(update={"outcome": "failed", "run_id": None,
                                           "detail": str(exc)[:500]})
        if record_failure:
            await _failed(deps, record.id, firing, failed, record.last_run_id)
        return Fired(record.id, "failed", tick.at, None, failed.detail)
    return Fired(record.id, outcome, tick.at, firing.run_id, detail)


async def _failed(deps: Deps, schedule_id: str, claim: Firing, failed: Firing,
                  last_run_id: str | None) -> None:
    """Record the claimed firing ``claim`` as ``failed`` (its run refused), the schedule's
    last run the one before it."""
    for attempt in range(FIRE_ATTEMPTS):
        (stored,) = await deps.store.schedules.read(schedule_id)
        if stored is None or claim not in stored.record.firings:
            return
        record = stored.record
        firings = [failed if f == claim else f for f in record.firings]
        last = last_run_id if record.last_run_id == claim.run_id else record.last_run_id
        try:
            await deps.store.schedules.write(record.model_copy(update={
                "firings": firings, "last_run_id": last}), stored.version, deps.clock.now())
            return
        except ScheduleChanged:
            if attempt == FIRE_ATTEMPTS - 1:
                raise


async def _overlap(deps: Deps, record: ScheduleRecord, now: float
                   ) -> tuple[str | None, str | None, bool]:
    """The overlap policy against the schedule's last run: why this firing is skipped (None:
    it starts), the run it cancelled, and whether its run queues behind another."""
    policy = record.spec.overlap
    if policy == "allow_all":
        return None, None, False
    if policy == "buffer_one":
        conversation = await deps.store.runs.get_conversation(
            conversation_of(record.id, record.owner))
        if conversation is not None and conversation.queue:
            return f"run {conversation.queue[0]} is queued already", None, False
        return None, None, conversation is not None and conversation.active_run_id is not None
    last, starting = await _active(deps, record, now)
    if last is None:
        return None, None, False
    if policy == "skip" or starting:
        state = "starting" if starting else "still running"
        return f"run {last} is {state}", None, False
    await ending.cancel_run(deps, last)
    return None, last, False


async def _active(deps: Deps, record: ScheduleRecord, now: float) -> tuple[str | None, bool]:
    """The schedule's last run if it is active, and whether it is still starting: recorded by
    its firing less than :data:`CLAIM_SECONDS` ago, not created yet."""
    run_id = record.last_run_id
    if run_id is None:
        return None, False
    run = await deps.store.runs.get_run(run_id)
    if run is not None:
        return (None if run.status.terminal else run_id), False
    starting = any(f.run_id == run_id and f.outcome in CLAIMS
                   and now - f.recorded_at < CLAIM_SECONDS for f in record.firings)
    return (run_id if starting else None), starting
