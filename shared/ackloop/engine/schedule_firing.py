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
   already: an earlier delivery started it), then the run, through ingest, under the firing's
   request id (:func:`~ackloop.domain.schedules.request_id_of`): a tick delivered twice starts
   one run;
4. only then the schedule advances (``next_fire_at``, the firing recorded, ``last_run_id``),
   at the version read, and the next firing's wake is armed.

A crash before 4 leaves the tick unacknowledged: its redelivery finds the run started and
advances; a crash after 4 leaves the next wake unarmed at worst: the sweeper publishes it once
it is due. So no firing is lost and none runs twice.

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
from ackloop.domain.records import RunRecord, RunStatus
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
    if tick.kind == "backfill":
        firing = await _start(deps, record, tick, now, policy=False)
        return Fired(record.id, firing.outcome, tick.at, firing.run_id, firing.detail)
    if tick.kind == "normal":
        if record.paused:
            return Fired(record.id, "paused", tick.at)
        if tick.at != record.next_fire_at or now < tick.at + jitter_of(record.spec, tick.at):
            await arm(deps, record)  # absorbed when armed already
            return Fired(record.id, "stale" if tick.at != record.next_fire_at else "early",
                         tick.at)
        if now - (tick.at + jitter_of(record.spec, tick.at)) > record.spec.catchup_window_seconds:
            return await _missed(deps, stored, now)
    firing = await _start(deps, record, tick, now, policy=True)
    after = tick.at if tick.kind == "normal" else None
    await _record(deps, stored, firing, now, advance_from=after)
    return Fired(record.id, firing.outcome, tick.at, firing.run_id, firing.detail)


async def _record(deps: Deps, stored: StoredSchedule, firing: Firing, now: float, *,
                  advance_from: float | None) -> None:
    """Write the firing (and, for a normal one, the next firing), then arm the next one."""
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
                        conversation_id=(conversation_of(record.id)
                                         if spec.overlap == "buffer_one" else None))


async def _start(deps: Deps, record: ScheduleRecord, tick: ScheduleTick, now: float, *,
                 policy: bool) -> Firing:
    """Apply the overlap policy (``policy``), then start the firing's run through ingest."""
    request_id = request_id_of(record.id, tick.at, tick.kind)
    run_id = run_id_for_request(request_id, record.owner)
    base = Firing(at=tick.at, outcome="started", run_id=run_id, recorded_at=now)
    started: Outcome = STARTED[tick.kind]
    cancelled: str | None = None
    if policy and await deps.store.runs.get_run(run_id) is None:
        refusal, cancelled = await _overlap(deps, record)
        if refusal is not None:
            return base.model_copy(update={"outcome": "skipped", "run_id": None,
                                            "detail": refusal})
    try:
        run, _ = await start_run(deps, _query(record, request_id), owner=record.owner)
    except IdempotencyMismatch:  # started under an earlier spec of the schedule
        return base.model_copy(update={"outcome": started,
                                        "detail": "started before under another spec"})
    except PermanentError as exc:
        log.warning("schedule %s: the run of %s was refused: %s", record.id, tick.at, exc)
        return base.model_copy(update={"outcome": "failed", "run_id": None,
                                        "detail": str(exc)[:500]})
    outcome: Outcome = ("buffered" if run.status is RunStatus.QUEUED and tick.kind == "normal"
                        else "cancelled_other" if cancelled and tick.kind == "normal"
                        else started)
    return base.model_copy(update={"outcome": outcome, "run_id": run.run_id,
                                    "detail": f"cancelled {cancelled}" if cancelled else None})


async def _overlap(deps: Deps, record: ScheduleRecord) -> tuple[str | None, str | None]:
    """The overlap policy against the schedule's last run: why this firing is skipped (None:
    it starts), and the run it cancelled."""
    policy = record.spec.overlap
    if policy == "allow_all":
        return None, None
    if policy == "buffer_one":
        conversation = await deps.store.runs.get_conversation(conversation_of(record.id))
        if conversation is not None and conversation.queue:
            return f"run {conversation.queue[0]} is queued already", None
        return None, None
    last = await _active(deps, record.last_run_id)
    if last is None:
        return None, None
    if policy == "skip":
        return f"run {last.run_id} is still {last.status.value}", None
    await ending.cancel_run(deps, last.run_id)
    return None, last.run_id


async def _active(deps: Deps, run_id: str | None) -> RunRecord | None:
    if run_id is None:
        return None
    run = await deps.store.runs.get_run(run_id)
    return run if run is not None and not run.status.terminal else None
