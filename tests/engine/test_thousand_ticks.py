"""A thousand ticks of a schedule, with what fires them killed at random: a firing killed after
starting its run and before recording it, the run's model step killed after its call or its
commit, a wake lost (the process holding it killed: the sweeper finds the schedule due), the
deliveries of some ticks duplicated. Not one tick is missed, not one run is doubled: the
store holds exactly one run per tick (every run it holds is the schedule's, under that tick's
request id), and every firing the schedule recorded, read after each tick (it keeps its last
20), is one tick's, once, started.

On the in-memory engine with a manual clock (a minute a tick), a seeded random source, and
deliveries crashed as a SIGKILL would (:class:`SimulatedCrash`)."""

from __future__ import annotations

import random
from collections import Counter

from ackloop.bus.wakes import MemoryWaker, Wake
from ackloop.domain.clock import ManualClock
from ackloop.domain.keys import run_id_for_request
from ackloop.domain.records import RunStatus
from ackloop.domain.schedules import Firing, Schedule, request_id_of
from ackloop.engine import schedule_control as ops
from ackloop.model.scripted import ScriptedModel
from ackloop.model.turns import text_turn
from ackloop_dev.faults import FaultPoints
from tests.engine.fakes import CountingToolbox, SimulatedCrash, make_loop

TICKS = 1000
EVERY = 60.0
T0 = 1_699_999_200.0
POINTS = ("schedule:after_claim", "model:after_call", "model:after_commit")


class RandomKills(FaultPoints):
    """Each armed point kills the process (raises) with probability ``rate``."""

    def __init__(self, rng: random.Random, rate: float) -> None:
        super().__init__(frozenset(POINTS))
        self.rng, self.rate = rng, rate
        self.kills: Counter[str] = Counter()

    def hit(self, name: str) -> None:
        if name in POINTS and self.rng.random() < self.rate:
            self.kills[name] += 1
            raise SimulatedCrash(name)


class LossyWaker(MemoryWaker):
    """A waker whose process is killed now and then between arming a wake and holding it."""

    def __init__(self, rng: random.Random, rate: float) -> None:
        super().__init__()
        self.rng, self.rate, self.lost = rng, rate, 0

    async def arm(self, wake: Wake) -> None:
        if wake.name not in self.armed and self.rng.random() < self.rate:
            self.lost += 1
            return
        await super().arm(wake)


async def test_a_thousand_ticks_with_their_firing_killed_at_random_miss_none_and_double_none(
) -> None:
    rng = random.Random(20261204)
    kills = RandomKills(rng, rate=0.05)
    waker = LossyWaker(rng, rate=0.05)
    loop = make_loop(ScriptedModel.from_turns([text_turn("done")] * (2 * TICKS)),
                     CountingToolbox(), waker=waker, clock=ManualClock(T0), faults=kills)
    schedule = Schedule.model_validate({"id": "tick", "agent": "default", "text": "tick",
                                        "every_seconds": EVERY, "overlap": "allow_all"})
    await ops.put_schedule(loop.deps, schedule)
    swept = 0
    recorded: set[Firing] = set()  # every firing the schedule recorded, however many it keeps
    for _ in range(10 * TICKS):
        (stored,) = await loop.deps.store.schedules.read("tick")
        assert stored is not None
        recorded.update(stored.record.firings)
        if stored.record.next_fire_at is None or stored.record.next_fire_at > T0 + TICKS * EVERY:
            break
        if not await loop.wake_next():  # its wake was lost: the sweeper finds it due
            due = stored.record.next_fire_at
            loop.deps.clock.advance(  # type: ignore[attr-defined]
                max(0.0, due + loop.deps.settings.sweep_stale_seconds + 1
                    - loop.deps.clock.now()))
            await ops.sweep_schedules(loop.deps)  # the sweeper's pass over the schedules
            swept += 1
        await loop.run_until_idle(crash=SimulatedCrash, duplicate_every=rng.random() < 0.2,
                                  max_deliveries=5000)
    times = [T0 + EVERY * n for n in range(1, TICKS + 1)]
    expected = Counter(request_id_of("tick", at) for at in times)
    runs = await loop.deps.store.runs.recent_runs(limit=10 * TICKS)
    # Every run in the store is one tick's, exactly one per tick: none missed, none extra.
    assert Counter(r.request_id for r in runs) == expected, (
        f"{len(runs)} runs for {TICKS} ticks")
    assert all(r.status is RunStatus.COMPLETED for r in runs)
    # Each firing recorded once, as started, with its tick's run: across all of them.
    assert Counter(f.at for f in recorded) == Counter(times)
    assert all(f.outcome == "started" and f.run_id == run_id_for_request(
        request_id_of("tick", f.at)) for f in recorded)
    print(f"{TICKS} ticks: {len(runs)} runs, {len(recorded)} firings recorded, "
          f"{sum(kills.kills.values())} kills {dict(kills.kills)}, {waker.lost} wakes lost, "
          f"{swept} sweeps found them due")
    assert sum(kills.kills.values()) > 50 and kills.kills["schedule:after_claim"] > 5
    assert waker.lost > 10 and swept > 10
