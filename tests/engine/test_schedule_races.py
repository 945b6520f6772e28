"""Schedules written by two hands at once, on the in-memory engine: a firing records itself at
the version of the schedule it read, before its run starts, so a trigger, a pause or an edit
that lands while it is in flight (after the firing read the schedule) is met, not
overwritten; a firing recorded and killed before
its run starts it when redelivered; catch-up is measured from the jittered time."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, cast

import pytest

from ackloop.domain.schedules import ScheduleTick, jitter_of
from ackloop.engine import schedule_control as ops
from ackloop.engine.schedule_firing import fire
from ackloop.store.schedules import Schedules, StoredSchedule
from ackloop.testing.inprocess import InProcessLoop
from tests.engine.fakes import CrashingFaults, SimulatedCrash
from tests.engine.test_schedules import HOUR, T0, advance, hourly, loop_of, record_of, run_of, runs


class Meanwhile:
    """The schedules room, with ``other`` done once just after the next read of a schedule:
    another hand that changes it while the reader (a firing) is in flight."""

    def __init__(self, room: Schedules, other: Callable[[], Awaitable[Any]]) -> None:
        self._room, self._other = room, other
        self.done: list[Any] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._room, name)

    async def read(self, *schedule_ids: str) -> list[StoredSchedule | None]:
        found = await self._room.read(*schedule_ids)
        if not self.done:
            self.done.append(None)
            self.done[0] = await self._other()
        return found


def meanwhile(loop: InProcessLoop, other: Callable[[], Awaitable[Any]]) -> Meanwhile:
    room = Meanwhile(loop.deps.store.schedules, other)
    loop.deps.store.schedules = cast(Schedules, room)
    return room


async def active_runs(loop: InProcessLoop) -> list[str]:
    return [r.run_id for r in await runs(loop) if not r.status.terminal]


async def test_overlap_skip_runs_one_when_a_trigger_lands_together_with_a_tick() -> None:
    loop = loop_of()
    await ops.put_schedule(loop.deps, hourly(overlap="skip"))
    advance(loop, HOUR)
    other = meanwhile(loop, lambda: ops.trigger(loop.deps, "hourly"))
    fired = await fire(loop.deps, ScheduleTick(schedule_id="hourly", at=T0 + HOUR))
    (triggered,) = other.done
    assert (triggered.outcome, fired.outcome) == ("manual", "skipped")
    assert await active_runs(loop) == [triggered.run_id]  # one run, not two at once
    record = await record_of(loop)
    assert [f.outcome for f in record.firings] == ["manual", "skipped"]
    assert record.last_run_id == triggered.run_id and record.next_fire_at == T0 + 2 * HOUR


async def test_a_pause_that_lands_as_a_firing_starts_leaves_no_run_unrecorded() -> None:
    loop = loop_of()
    await ops.put_schedule(loop.deps, hourly(overlap="skip"))
    advance(loop, HOUR)
    meanwhile(loop, lambda: ops.pause(loop.deps, "hourly"))
    await fire(loop.deps, ScheduleTick(schedule_id="hourly", at=T0 + HOUR))
    record = await record_of(loop)
    recorded = {f.run_id for f in record.firings}
    for run in await runs(loop):  # every run the schedule started is recorded, the last too
        assert run.run_id in recorded and record.last_run_id == run.run_id
    await ops.resume(loop.deps, "hourly")
    advance(loop, 1)
    await ops.trigger(loop.deps, "hourly")
    assert len(await active_runs(loop)) == 1  # skip: never a second run beside the first


async def test_a_firing_is_written_at_the_version_it_read_so_a_pause_meanwhile_holds() -> None:
    loop = loop_of()
    await ops.put_schedule(loop.deps, hourly())
    advance(loop, HOUR)
    meanwhile(loop, lambda: ops.pause(loop.deps, "hourly"))
    fired = await fire(loop.deps, ScheduleTick(schedule_id="hourly", at=T0 + HOUR))
    record = await record_of(loop)
    assert record.paused and fired.outcome == "paused"
    assert await runs(loop) == []


async def test_an_edit_that_lands_while_a_firing_is_in_flight_is_kept() -> None:
    loop = loop_of()
    await ops.put_schedule(loop.deps, hourly())
    advance(loop, HOUR)
    meanwhile(loop, lambda: ops.put_schedule(loop.deps, hourly(text="report, shorter")))
    await fire(loop.deps, ScheduleTick(schedule_id="hourly", at=T0 + HOUR))
    record = await record_of(loop)
    assert record.spec.text == "report, shorter"
    assert [r.text for r in await runs(loop)] in ([], ["report, shorter"])


async def test_a_firing_recorded_then_killed_starts_its_run_when_redelivered_paused_since(
) -> None:
    loop = loop_of(faults=CrashingFaults({"schedule:after_claim"}))
    await ops.put_schedule(loop.deps, hourly())
    advance(loop, HOUR)
    tick = ScheduleTick(schedule_id="hourly", at=T0 + HOUR)
    with pytest.raises(SimulatedCrash):  # killed with the firing recorded, its run not started
        await fire(loop.deps, tick)
    assert await runs(loop) == []
    await ops.pause(loop.deps, "hourly")
    redelivered = await fire(loop.deps, tick)
    assert redelivered.outcome == "started"
    (run,) = await runs(loop)
    record = await record_of(loop)
    assert run.run_id == run_of(T0 + HOUR) == record.last_run_id
    assert [f.outcome for f in record.firings] == ["started"] and record.paused


async def test_catchup_is_measured_from_the_jittered_time() -> None:
    loop = loop_of()
    spec = hourly(id="late", jitter_seconds=3600, catchup_window_seconds=60)
    jitter = jitter_of(spec, T0 + HOUR)
    assert jitter > 2 * spec.catchup_window_seconds  # published long after its nominal time
    await ops.put_schedule(loop.deps, spec)
    assert await loop.wake_next()  # at T0 + 1h + jitter: on time, as jittered
    assert loop.deps.clock.now() == T0 + HOUR + jitter
    await loop.run_until_idle()
    record = await record_of(loop, "late")
    assert [f.outcome for f in record.firings] == ["started"]
    assert [r.run_id for r in await runs(loop)] == [run_of(T0 + HOUR, "late")]
    # and a tick found later than the window past its jittered time is missed
    advance(loop, HOUR + jitter_of(spec, T0 + 2 * HOUR) + 61 - jitter)
    missed = await fire(loop.deps, ScheduleTick(schedule_id="late", at=T0 + 2 * HOUR))
    assert missed.outcome == "missed"
