"""A model quota shared by every run: a call takes its place before it is made, a step whose
place is later waits for it at no cost (acknowledged, woken at its place), a redelivery never
takes a second place, a 429 pauses the quota for at least a second and the step waits instead
of retrying, and the time waited is not the run's.

On the in-memory engine with the real dispatch, a manual clock and a memory waker: what the
scripted model is asked, and when, is what Gemini would have been asked."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from typing import Any

import pytest

from ackloop.agents.agent import Agent
from ackloop.api.models import QuotaWaitView, RunView
from ackloop.bus.wakes import MemoryWaker
from ackloop.cli.follow import POLL_SECONDS, follow
from ackloop.config.quotas import ModelQuota
from ackloop.config.settings import Settings
from ackloop.docdb.base import PreconditionFailed
from ackloop.docdb.memory import MemoryDocumentDB
from ackloop.domain.clock import ManualClock
from ackloop.domain.errors import ModelRetryableError
from ackloop.domain.keys import run_id_for_request
from ackloop.domain.quota import WINDOW_SECONDS, Limits
from ackloop.domain.records import RunStatus, StopReason
from ackloop.domain.wire import QueryMessage, RunOptions
from ackloop.engine import quota, quota_log
from ackloop.model.base import ModelRequest, ModelTurn
from ackloop.model.turns import text_turn
from ackloop.store import AgentStore
from ackloop.testing.inprocess import InProcessLoop
from tests.engine.test_children import team_loop

RPM = 10
"""The quota: 10 requests a minute, 2 % kept under it: 9 calls in any minute."""
ALLOWED = 9


class Model:
    """Answers every request at once, noting when it was asked; ``refuse`` 429s first."""

    def __init__(self, loop_clock: Callable[[], float], refuse: int = 0,
                 retry_after: float | None = 0.0) -> None:
        self.now, self.refuse, self.retry_after = loop_clock, refuse, retry_after
        self.asked: list[float] = []
        self.refused: list[float] = []

    def __call__(self, request: ModelRequest) -> ModelTurn:
        if self.refuse:
            self.refuse -= 1
            self.refused.append(self.now())
            raise ModelRetryableError("Gemini answered 429 RESOURCE_EXHAUSTED", status=429,
                                      retry_after=self.retry_after)
        self.asked.append(self.now())
        return text_turn("done", request=request)


def world(refuse: int = 0, retry_after: float | None = 0.0, **settings: Any
          ) -> tuple[InProcessLoop, Model]:
    holder: list[InProcessLoop] = []
    model = Model(lambda: holder[0].deps.clock.now(), refuse, retry_after)
    loop = team_loop([Agent("solo", "Answer.")], model, Settings(  # type: ignore[arg-type]
        model_quotas=[ModelQuota(model="*", rpm=RPM)], **settings))
    loop.deps.waker = MemoryWaker()
    holder.append(loop)
    return loop, model


async def ask(loop: InProcessLoop, n: int, **options: Any) -> list[str]:
    for i in range(n):
        await loop.submit(QueryMessage(request_id=f"q{i}", text="hi", agent="solo",
                                       options=RunOptions(**options)))
    return [run_id_for_request(f"q{i}") for i in range(n)]


def most_in_a_window(times: list[float]) -> int:
    return max((sum(1 for u in times if t <= u < t + WINDOW_SECONDS) for t in times), default=0)


async def test_calls_over_the_quota_wait_for_their_place_and_every_run_answers() -> None:
    loop, model = world()
    runs = await ask(loop, 2 * ALLOWED + 2)
    await loop.run_until_idle()
    assert len(model.asked) == ALLOWED  # the rest wait, acknowledged: nothing is redelivered
    assert all(o.outcome.acknowledged for o in loop.log)
    waker = loop.deps.waker
    assert isinstance(waker, MemoryWaker) and len(waker.armed) == ALLOWED + 2
    await loop.run_until_idle(wake=True)
    assert len(model.asked) == 2 * ALLOWED + 2  # each call made once
    assert most_in_a_window(model.asked) <= ALLOWED
    for run_id in runs:
        run = await loop.deps.store.runs.get_run(run_id)
        assert run is not None and run.status is RunStatus.COMPLETED, run


async def test_a_redelivered_waiting_step_keeps_its_place_and_takes_no_second_one() -> None:
    loop, model = world()
    runs = await ask(loop, ALLOWED + 1)
    await loop.run_until_idle()
    (waiting,) = [d.message for d in loop.deliveries("model")
                  if runs[-1].encode() in d.message.data]
    shard = quota.shard_id(loop.deps.settings.model_quotas[0], runs[-1])
    before = await quota_log.read(loop.deps.store, shard, loop.deps.clock.now())
    for _ in range(3):  # Pub/Sub's duplicates, and the sweeper's re-send
        await loop.deliver("model", waiting)
    after = await quota_log.read(loop.deps.store, shard, loop.deps.clock.now())
    assert after.entries == before.entries and len(after.entries) == ALLOWED + 1
    waker = loop.deps.waker
    assert isinstance(waker, MemoryWaker) and len(waker.armed) == 1  # one wake, armed again
    await loop.run_until_idle(wake=True)
    assert len(model.asked) == ALLOWED + 1


@pytest.mark.parametrize("retry_after", [0.0, None, 7.0])
async def test_a_429_pauses_the_quota_at_least_a_second_and_the_step_waits(
        retry_after: float | None) -> None:
    loop, model = world(refuse=1, retry_after=retry_after)
    (run_id,) = await ask(loop, 1)
    await loop.run_until_idle()
    assert len(model.refused) == 1 and model.asked == []  # not retried in the request
    await loop.run_until_idle(wake=True)
    assert len(model.asked) == 1
    paused = max(retry_after or 0.0, 1.0)  # "0s" and no delay mean a second, never "now"
    assert model.asked[0] - model.refused[0] >= paused
    run = await loop.deps.store.runs.get_run(run_id)
    assert run is not None and run.status is RunStatus.COMPLETED
    assert run.answer == "done"


@pytest.mark.parametrize("retry_after", [0.0, None])
async def test_429s_without_a_delay_that_follow_each_other_pause_twice_as_long_each_time(
        retry_after: float | None) -> None:
    loop, model = world(refuse=4, retry_after=retry_after)
    await ask(loop, 1)
    await loop.run_until_idle(wake=True)
    assert len(model.refused) == 4 and len(model.asked) == 1
    tries = [*model.refused, *model.asked]
    gaps = [b - a for a, b in itertools.pairwise(tries)]
    # A pool still busy a second later is not asked again every second: 1, 2, 4, 8 s.
    assert gaps == pytest.approx([1.0, 2.0, 4.0, 8.0], abs=0.01), gaps


async def test_time_waited_for_a_place_is_not_the_runs() -> None:
    loop, model = world()
    runs = await ask(loop, ALLOWED + 1, max_seconds=30)
    await loop.run_until_idle(wake=True)
    last = await loop.deps.store.runs.get_run(runs[-1])
    assert last is not None and last.status is RunStatus.COMPLETED, last
    assert last.stop_reason is StopReason.ANSWERED
    assert last.waited_seconds >= WINDOW_SECONDS  # it waited a minute for its place
    assert len(model.asked) == ALLOWED + 1


async def test_a_claimed_step_that_waits_gives_its_claim_back_as_not_tried() -> None:
    loop, model = world(step_claims="always")
    runs = await ask(loop, ALLOWED + 1)
    await loop.run_until_idle(wake=True)
    (step,) = await loop.deps.store.steps.get_steps(runs[-1], ["0000-model"])
    assert step is not None and step.attempts == 1, step
    assert len(model.asked) == ALLOWED + 1


async def test_without_a_quota_nothing_is_read_or_written_for_it() -> None:
    loop, model = world()
    loop.deps.settings = Settings()
    await ask(loop, 2 * ALLOWED)
    await loop.run_until_idle()
    assert len(model.asked) == 2 * ALLOWED
    assert await loop.deps.store.db.list_all("quotas") == []


async def test_a_run_waiting_for_its_place_says_so_with_the_calls_ahead_and_how_long() -> None:
    loop, _ = world()
    runs = await ask(loop, ALLOWED + 3)
    await loop.run_until_idle()
    now = loop.deps.clock.now()
    seen = []
    for run_id in runs:
        run = await loop.deps.store.runs.get_run(run_id)
        assert run is not None
        places = await quota.waiting_of(loop.deps.limits.model_quotas, loop.deps.store, run_id, now)
        view = RunView.of_run(run, [], quota_waits=[QuotaWaitView.of(p, now) for p in places])
        seen.append([(w.step, w.ahead, w.label) for w in view.waiting_for_quota])
    assert seen[:ALLOWED] == [[]] * ALLOWED  # called at once: nothing to wait for
    quota_id = loop.deps.settings.model_quotas[0].quota_id
    assert seen[ALLOWED:] == [
        [("0000-model", ahead, ("waiting for", f"its turn under quota {quota_id}: {ahead} "
                                               "call(s) ahead, about 62 s"))]
        for ahead in range(3)]
    await loop.run_until_idle(wake=True)
    assert await quota.waiting_of(loop.deps.limits.model_quotas, loop.deps.store, runs[-1],
                                  loop.deps.clock.now()) == []


async def test_the_cli_following_a_run_tells_its_place_once() -> None:
    loop, _ = world()
    clock = loop.deps.clock
    clock.advance(time.time() - clock.now())  # type: ignore[attr-defined]  # the CLI's clock
    runs = await ask(loop, ALLOWED + 2)
    await loop.run_until_idle()
    told: list[str] = []
    followed = await follow(loop.deps.store, runs[-1], timeout=3 * POLL_SECONDS,
                            quotas=loop.deps.settings, on_quota=told.append)
    assert followed.run is not None and not followed.ended  # polled a few times: told once
    assert len(told) == 1 and "0000-model" in told[0], told
    assert "waiting for its turn under quota any@default: 1 call(s) ahead, about" in told[0]
    quiet: list[str] = []
    await follow(loop.deps.store, runs[0], timeout=0, quotas=loop.deps.settings,
                 on_quota=quiet.append)
    assert quiet == []  # it did not wait


async def test_metrics_count_the_places_the_waits_and_the_429s(
        monkeypatch: pytest.MonkeyPatch) -> None:
    places: list[tuple[str, bool]] = []
    waits: list[float] = []
    refused: list[tuple[str, bool]] = []
    monkeypatch.setattr(quota.metrics, "quota_place", lambda q, waited: places.append(
        (q, waited)))
    monkeypatch.setattr(quota.metrics, "quota_waited", lambda q, s: waits.append(s))
    monkeypatch.setattr(quota.metrics, "model_refused", lambda m, limited: refused.append(
        (m, limited)))
    loop, model = world(refuse=1)
    await ask(loop, ALLOWED + 1)
    await loop.run_until_idle(wake=True)
    assert len(model.refused) == 1 and len(model.asked) == ALLOWED + 1
    # The first call went at once and met the 429, which paused the quota for a second: every
    # other call, and the refused one again, waited for its place.
    assert sorted(w for _, w in places) == [False] + [True] * (ALLOWED + 1)
    assert len(waits) == ALLOWED + 1 and all(s >= 1.0 for s in waits)
    assert [limited for _, limited in refused] == [True]


class Interleaved(MemoryDocumentDB):
    """Every read lets the other tasks run before the caller goes on: what concurrent
    processes on one document do to each other."""

    async def get_all(self, paths: Any) -> Any:
        found = await super().get_all(paths)
        await asyncio.sleep(0)
        return found


async def test_a_burst_of_calls_on_one_shard_each_takes_its_own_place() -> None:
    store = AgentStore(Interleaved())
    limits = Limits(requests=100)
    calls = [quota_log.Call(f"run-{i}/0000-model", 10) for i in range(40)]
    places = await asyncio.gather(*(quota_log.reserve(store, "q-000", c, limits,
                                                      ManualClock(1000.0)) for c in calls))
    assert all(p.taken_now for p in places)
    shard = await quota_log.read(store, "q-000", 1000.0)
    assert sorted(e.holder for e in shard.entries) == sorted(c.holder for c in calls)


class Contended(MemoryDocumentDB):
    """A shard other writers keep changing: its first ``refusals`` writes are refused, each a
    second after the one before (a burst of steps on one shard, on a loaded machine)."""

    def __init__(self, clock: ManualClock, refusals: int) -> None:
        super().__init__()
        self.clock, self.refusals = clock, refusals

    async def create(self, path: str, data: Any) -> Any:
        if self.refusals:
            self.refusals -= 1
            self.clock.advance(1.0)
            raise PreconditionFailed(path)
        return await super().create(path, data)


async def test_a_place_taken_after_refused_writes_is_at_the_time_it_is_written() -> None:
    # The server counts a call when it comes: a place dated when the step first asked, seconds
    # before the write that took it, would leave the limiter's minute before the server's.
    clock = ManualClock(1000.0)
    store = AgentStore(Contended(clock, refusals=3))
    place = await quota_log.reserve(store, "q-000", quota_log.Call("run-1/0000-model", 10),
                                    Limits(requests=100), clock)
    assert place.taken_now and place.at == 1003.0
    (entry,) = (await quota_log.read(store, "q-000", clock.now())).entries
    assert entry.at == 1003.0
