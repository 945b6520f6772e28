"""Schedules on the in-memory engine with a manual clock and a memory waker: each firing
starts one run through ingest, the overlap policies, catch-up after an outage, backfill,
duplicate and killed deliveries, pause, resume, trigger, delete, and the sweeper's pass (lost
wakes, the catalog's schedules)."""

from __future__ import annotations

from typing import Any

import pytest

from ackloop.agents.agent import Agent, AgentRegistry
from ackloop.bus.wakes import MemoryWaker
from ackloop.domain.clock import ManualClock
from ackloop.domain.keys import run_id_for_request
from ackloop.domain.records import RunStatus
from ackloop.domain.schedules import Schedule, ScheduleRecord, ScheduleTick, request_id_of
from ackloop.engine import schedule_control as ops
from ackloop.engine.schedule_firing import fire, tick_of
from ackloop.engine.sweep import sweep
from ackloop.model.scripted import ScriptedModel
from ackloop.model.turns import text_turn
from ackloop.testing.inprocess import InProcessLoop
from tests.engine.fakes import CountingToolbox, CrashingFaults, SimulatedCrash, make_loop

T0 = 1_699_999_200.0  # the manual clock's start: a whole hour
HOUR = 3600.0


def loop_of(**kwargs: Any) -> InProcessLoop:
    model = ScriptedModel.from_turns([text_turn("done")] * 50)
    return make_loop(model, CountingToolbox(), waker=kwargs.pop("waker", MemoryWaker()),
                     clock=ManualClock(T0), **kwargs)


def hourly(**fields: Any) -> Schedule:
    return Schedule.model_validate({"id": "hourly", "agent": "default", "text": "report",
                                    "every_seconds": 3600} | fields)


async def record_of(loop: InProcessLoop, schedule_id: str = "hourly") -> ScheduleRecord:
    (stored,) = await loop.deps.store.schedules.read(schedule_id)
    assert stored is not None
    return stored.record


def run_of(at: float, schedule_id: str = "hourly") -> str:
    return run_id_for_request(request_id_of(schedule_id, at))


async def runs(loop: InProcessLoop) -> list[Any]:
    return await loop.deps.store.runs.recent_runs(limit=100)


async def run_until(loop: InProcessLoop, until: float) -> None:
    """Deliver everything, publishing the wakes due by ``until`` as the clock reaches them."""
    waker = loop.deps.waker
    assert isinstance(waker, MemoryWaker)
    await loop.run_until_idle()
    while (at := waker.next_at()) is not None and at <= until:
        assert await loop.wake_next()
        await loop.run_until_idle()


def advance(loop: InProcessLoop, seconds: float) -> None:
    loop.deps.clock.advance(seconds)  # type: ignore[attr-defined]


async def test_a_schedule_fires_at_each_time_through_its_wake_and_starts_one_run_each() -> None:
    loop = loop_of()
    record = await ops.put_schedule(loop.deps, hourly())
    first = T0 + HOUR
    assert record.next_fire_at == first and record.source == "api"
    waker = loop.deps.waker
    assert isinstance(waker, MemoryWaker)
    assert [w.name for w in waker.armed.values()] == [f"schedule/hourly/{int(first)}"]
    await loop.run_until_idle()
    assert await runs(loop) == []  # nothing before its time
    for _ in range(3):
        assert await loop.wake_next()
        await loop.run_until_idle()
    started = {r.run_id: r for r in await runs(loop)}
    assert set(started) == {run_of(first), run_of(first + HOUR), run_of(first + 2 * HOUR)}
    assert all(r.status is RunStatus.COMPLETED and r.text == "report" for r in started.values())
    record = await record_of(loop)
    assert record.next_fire_at == first + 3 * HOUR
    assert [f.outcome for f in record.firings] == ["started"] * 3
    assert record.last_run_id == run_of(first + 2 * HOUR)


async def test_a_tick_delivered_twice_starts_one_run() -> None:
    loop = loop_of()
    await ops.put_schedule(loop.deps, hourly())
    assert await loop.wake_next()
    await loop.run_until_idle(duplicate_every=True)
    assert [r.run_id for r in await runs(loop)] == [run_of(T0 + HOUR)]
    record = await record_of(loop)
    assert [f.outcome for f in record.firings] == ["started"]
    assert record.next_fire_at == T0 + 2 * HOUR


async def test_a_firing_killed_between_its_record_and_its_run_fires_once_when_redelivered(
) -> None:
    loop = loop_of(faults=CrashingFaults({"schedule:after_claim"}))
    await ops.put_schedule(loop.deps, hourly())
    assert await loop.wake_next()
    await loop.run_until_idle(crash=SimulatedCrash)  # killed once, then redelivered
    (run,) = await runs(loop)
    assert run.run_id == run_of(T0 + HOUR) and run.status is RunStatus.COMPLETED
    record = await record_of(loop)
    assert [f.outcome for f in record.firings] == ["started"]
    assert record.next_fire_at == T0 + 2 * HOUR
    waker = loop.deps.waker  # the next firing's wake, which the kill left unarmed
    assert isinstance(waker, MemoryWaker)
    assert [w.name for w in waker.armed.values()] == [f"schedule/hourly/{int(T0 + 2 * HOUR)}"]


async def fire_while_the_last_runs(policy: str) -> tuple[InProcessLoop, list[str]]:
    """Two firings, the second while the first's run is still running (not delivered yet)."""
    loop = loop_of()
    await ops.put_schedule(loop.deps, hourly(overlap=policy))
    outcomes = []
    for at in (T0 + HOUR, T0 + 2 * HOUR):
        advance(loop, at - loop.deps.clock.now())
        fired = await fire(loop.deps, ScheduleTick(schedule_id="hourly", at=at))
        outcomes.append(fired.outcome)
    return loop, outcomes


async def test_overlap_skip_records_the_firing_skipped_while_the_last_run_is_active() -> None:
    loop, outcomes = await fire_while_the_last_runs("skip")
    assert outcomes == ["started", "skipped"]
    assert [r.run_id for r in await runs(loop)] == [run_of(T0 + HOUR)]
    record = await record_of(loop)
    assert record.next_fire_at == T0 + 3 * HOUR  # it still advances
    assert record.last_run_id == run_of(T0 + HOUR)


async def test_overlap_allow_all_starts_both() -> None:
    loop, outcomes = await fire_while_the_last_runs("allow_all")
    assert outcomes == ["started", "started"]
    await loop.run_until_idle()
    assert {r.status for r in await runs(loop)} == {RunStatus.COMPLETED}
    assert len(await runs(loop)) == 2


async def test_overlap_cancel_other_cancels_the_active_run_then_starts() -> None:
    loop, outcomes = await fire_while_the_last_runs("cancel_other")
    assert outcomes == ["started", "cancelled_other"]
    await loop.run_until_idle()
    first = await loop.deps.store.runs.get_run(run_of(T0 + HOUR))
    second = await loop.deps.store.runs.get_run(run_of(T0 + 2 * HOUR))
    assert first is not None and first.status is RunStatus.CANCELLED
    assert second is not None and second.status is RunStatus.COMPLETED


async def test_overlap_buffer_one_queues_one_run_behind_the_active_one_and_skips_more() -> None:
    loop, outcomes = await fire_while_the_last_runs("buffer_one")
    advance(loop, HOUR)
    third = await fire(loop.deps, ScheduleTick(schedule_id="hourly", at=T0 + 3 * HOUR))
    assert outcomes == ["started", "buffered"] and third.outcome == "skipped"
    queued = await loop.deps.store.runs.get_run(run_of(T0 + 2 * HOUR))
    assert queued is not None and queued.status is RunStatus.QUEUED
    await loop.run_until_idle()  # the first ends; the buffered one runs after it
    statuses = {r.run_id: r.status for r in await runs(loop)}
    assert statuses == {run_of(T0 + HOUR): RunStatus.COMPLETED,
                        run_of(T0 + 2 * HOUR): RunStatus.COMPLETED}


async def test_after_an_outage_firings_within_the_catchup_window_fire_and_older_are_missed(
) -> None:
    loop = loop_of()
    await ops.put_schedule(loop.deps, hourly(catchup_window_seconds=2.5 * HOUR))
    waker = loop.deps.waker
    assert isinstance(waker, MemoryWaker)
    waker.armed.clear()  # the outage: the wake is lost, nothing fires for 5 hours
    advance(loop, 5 * HOUR + 60)
    assert await ops.sweep_schedules(loop.deps) == ["hourly"]  # the sweeper finds it due
    await run_until(loop, loop.deps.clock.now())
    record = await record_of(loop)
    outcomes = [(f.at, f.outcome) for f in record.firings]
    # 1h and 2h are older than the window (now = 5h01): missed; 3h, 4h, 5h fire
    assert outcomes[:2] == [(T0 + HOUR, "missed"), (T0 + 2 * HOUR, "missed")]
    assert [o for _, o in outcomes[2:5]] == ["started", "started", "started"]
    assert {r.run_id for r in await runs(loop)} == {run_of(T0 + h * HOUR) for h in (3, 4, 5)}


async def test_a_backfill_starts_one_run_per_firing_and_none_twice() -> None:
    loop = loop_of()
    await ops.put_schedule(loop.deps, hourly())
    assert await loop.wake_next()  # T0+1h fires normally
    await loop.run_until_idle()
    done = await ops.backfill(loop.deps, "hourly", T0 - 2 * HOUR, T0 + HOUR)
    assert [b.at for b in done] == [T0 - 2 * HOUR, T0 - HOUR, T0, T0 + HOUR]
    await loop.run_until_idle(duplicate_every=True)
    again = await ops.backfill(loop.deps, "hourly", T0 - 2 * HOUR, T0 + HOUR)
    await loop.run_until_idle()
    assert again == done
    assert sorted(r.run_id for r in await runs(loop)) == sorted(b.run_id for b in done)
    assert run_of(T0 + HOUR) in {b.run_id for b in done}  # the normal firing's run, once
    record = await record_of(loop)
    assert [f.outcome for f in record.firings].count("backfill") == 8


async def test_pause_stops_firings_and_resume_fires_from_now_without_those_missed() -> None:
    loop = loop_of()
    await ops.put_schedule(loop.deps, hourly())
    paused = await ops.pause(loop.deps, "hourly")
    assert paused.paused
    assert await loop.wake_next()  # its wake still comes: acknowledged, nothing runs
    await loop.run_until_idle()
    advance(loop, 3 * HOUR)
    assert await ops.sweep_schedules(loop.deps) == []  # a paused schedule is never due
    await loop.run_until_idle()
    assert await runs(loop) == []
    resumed = await ops.resume(loop.deps, "hourly")
    now = loop.deps.clock.now()
    assert not resumed.paused and resumed.next_fire_at == (now // HOUR + 1) * HOUR
    await run_until(loop, resumed.next_fire_at or 0.0)
    assert [r.run_id for r in await runs(loop)] == [run_of(resumed.next_fire_at)]


async def test_trigger_fires_now_without_advancing_and_the_policy_applies() -> None:
    loop = loop_of()
    await ops.put_schedule(loop.deps, hourly())
    fired = await ops.trigger(loop.deps, "hourly")
    assert fired.outcome == "manual"
    assert fired.run_id == run_id_for_request(request_id_of("hourly", T0, "manual"))
    advance(loop, 1)
    again = await ops.trigger(loop.deps, "hourly")  # the manual run is still active: skipped
    assert again.outcome == "skipped"
    record = await record_of(loop)
    assert record.next_fire_at == T0 + HOUR  # not advanced
    assert [f.outcome for f in record.firings] == ["manual", "skipped"]
    await loop.run_until_idle()
    assert [r.status for r in await runs(loop)] == [RunStatus.COMPLETED]


async def test_a_deleted_schedule_fires_no_more_and_is_gone() -> None:
    loop = loop_of()
    await ops.put_schedule(loop.deps, hourly())
    await ops.delete(loop.deps, "hourly")
    assert await loop.wake_next()
    await loop.run_until_idle()
    assert await runs(loop) == []
    assert await loop.deps.store.schedules.listing() == []
    with pytest.raises(ops.NoSchedule):
        await ops.trigger(loop.deps, "hourly")
    # the id can be used again
    assert (await ops.put_schedule(loop.deps, hourly())).next_fire_at is not None


async def test_a_stale_tick_runs_nothing_and_an_unknown_agent_is_recorded_failed() -> None:
    loop = loop_of()
    await ops.put_schedule(loop.deps, hourly(agent="nobody"))
    advance(loop, HOUR)
    await loop.publisher.publish(loop.deps.topic("queries"), tick_of("hourly", T0 + HOUR))
    await loop.publisher.publish(loop.deps.topic("queries"), tick_of("hourly", T0 - HOUR))
    await loop.run_until_idle()
    outcomes = [entry.outcome.body.get("outcome") for entry in loop.deliveries("query")]
    assert outcomes == ["failed", "stale"]
    record = await record_of(loop)
    assert record.next_fire_at == T0 + 2 * HOUR and record.firings[-1].outcome == "failed"


async def test_without_a_waker_the_sweeper_fires_what_is_due() -> None:
    loop = loop_of(waker=None)
    await ops.put_schedule(loop.deps, hourly())
    advance(loop, HOUR)
    await sweep(loop.deps)
    await loop.run_until_idle()
    assert [r.run_id for r in await runs(loop)] == [run_of(T0 + HOUR)]
    assert (await record_of(loop)).next_fire_at == T0 + 2 * HOUR


async def test_the_sweeper_syncs_the_catalogs_schedules() -> None:
    loop = loop_of()
    agents = list(loop.deps.agents)
    nightly = Schedule(id="nightly", agent="default", text="digest", cron="0 2 * * *")
    loop.deps.agents = AgentRegistry(agents, [nightly, hourly()])
    await sweep(loop.deps)
    assert {r.id: r.source for r in await loop.deps.store.schedules.listing()} == {
        "nightly": "catalog", "hourly": "catalog"}
    counters = loop.deps.store.counters
    assert counters is not None
    before = counters.docs_read, counters.round_trips
    await ops.sync_catalog(loop.deps)  # nothing changed: one document read
    assert (counters.docs_read - before[0], counters.round_trips - before[1]) == (1, 1)
    # a changed spec replaces the record; a schedule gone from the code is deleted
    loop.deps.agents = AgentRegistry(agents, [nightly.model_copy(update={"text": "digest!"})])
    await sweep(loop.deps)
    listed = await loop.deps.store.schedules.listing()
    assert [(r.id, r.spec.text) for r in listed] == [("nightly", "digest!")]
    with pytest.raises(ops.CatalogSchedule):
        await ops.put_schedule(loop.deps, nightly)


def test_the_catalog_refuses_a_schedule_naming_an_unknown_agent() -> None:
    from ackloop.agents.agent import MissingAgent

    with pytest.raises(MissingAgent, match="schedule 'hourly' names agent 'nobody'"):
        AgentRegistry([Agent("default", "Be brief.")], [hourly(agent="nobody")])


async def test_a_backfill_ending_in_the_future_starts_what_is_due_and_the_rest_at_their_time(
) -> None:
    loop = loop_of()
    await ops.put_schedule(loop.deps, hourly())
    advance(loop, HOUR / 2)
    done = await ops.backfill(loop.deps, "hourly", T0 - 2 * HOUR, T0 + 3 * HOUR)
    assert [b.at for b in done] == [T0 - 2 * HOUR, T0 - HOUR, T0]  # due now: no later one
    await loop.run_until_idle()
    assert {r.run_id for r in await runs(loop)} == {b.run_id for b in done}
    await run_until(loop, T0 + 3 * HOUR)
    for at in (T0 + HOUR, T0 + 2 * HOUR, T0 + 3 * HOUR):  # each at its real time
        run = await loop.deps.store.runs.get_run(run_of(at))
        assert run is not None and run.created_at >= at
    record = await record_of(loop)
    assert [f.outcome for f in record.firings] == ["backfill"] * 3 + ["started"] * 3
    with pytest.raises(ops.NothingDue, match="after now"):
        await ops.backfill(loop.deps, "hourly", T0 + 4 * HOUR, T0 + 5 * HOUR)


async def test_a_buffer_one_schedule_goes_on_when_another_operator_or_the_catalog_owns_it(
) -> None:
    loop = loop_of()
    await ops.put_schedule(loop.deps, hourly(overlap="buffer_one"), owner="alice")
    await run_until(loop, T0 + HOUR)
    await ops.put_schedule(loop.deps, hourly(overlap="buffer_one", text="go"), owner="bob")
    await run_until(loop, T0 + 2 * HOUR)
    loop.deps.agents = AgentRegistry(list(loop.deps.agents), [hourly(overlap="buffer_one")])
    await ops.sync_catalog(loop.deps)  # the catalog takes the id over: anonymous runs
    await run_until(loop, T0 + 3 * HOUR)
    record = await record_of(loop)
    assert [f.outcome for f in record.firings] == ["started"] * 3
    owners = {r.owner: r.status for r in await runs(loop)}
    assert owners == {"alice": RunStatus.COMPLETED, "bob": RunStatus.COMPLETED,
                      "anonymous": RunStatus.COMPLETED}


async def test_a_catalog_schedule_deleted_stays_deleted_until_its_own_spec_changes() -> None:
    loop = loop_of()
    agents = list(loop.deps.agents)
    nightly = Schedule(id="nightly", agent="default", text="digest", cron="0 2 * * *")
    loop.deps.agents = AgentRegistry(agents, [nightly, hourly()])
    await sweep(loop.deps)
    await ops.delete(loop.deps, "hourly")
    loop.deps.agents = AgentRegistry(agents, [nightly.model_copy(update={"text": "d!"}),
                                              hourly()])  # an unrelated schedule changes
    await sweep(loop.deps)
    assert [r.id for r in await loop.deps.store.schedules.listing()] == ["nightly"]
    loop.deps.agents = AgentRegistry(agents, [nightly, hourly(text="report!")])
    await sweep(loop.deps)  # its own spec changes: it comes back
    assert {r.id: r.spec.text for r in await loop.deps.store.schedules.listing()} == {
        "nightly": "digest", "hourly": "report!"}
