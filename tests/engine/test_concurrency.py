"""Concurrency limits: at most N model steps (or tool calls) at once per key, whatever number of
deliveries run side by side; a step over the limit waits in line, acknowledged, and is woken
when a slot frees; a crashed holder's slot frees when its lease ends; a tool declares a limit
of its own; a tenant's limit counts its runs and their children.

On the in-memory engine with the real dispatch: deliveries run side by side (``asyncio``) so
that the limit is put to the test at every instant."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest

from ackloop.agents.agent import Agent, AgentRegistry
from ackloop.bus.memory import MemoryPublisher
from ackloop.bus.wakes import MemoryWaker
from ackloop.config.concurrency import ConcurrencyLimit
from ackloop.config.quotas import ModelQuota
from ackloop.config.settings import Settings
from ackloop.docdb.base import Version, Write
from ackloop.docdb.counting import CountingDocumentDB
from ackloop.docdb.memory import MemoryDocumentDB
from ackloop.domain.clock import ManualClock
from ackloop.domain.keys import run_id_for_request
from ackloop.domain.records import RunStatus, StopReason
from ackloop.domain.slots import HOLD_SECONDS, RECHECK_SECONDS, Slots, give_back, take
from ackloop.domain.wire import QueryMessage, RunOptions, Usage
from ackloop.engine import concurrency
from ackloop.engine.deps import Deps
from ackloop.engine.ending import end_run_now, run_end
from ackloop.engine.ingest import request_hash
from ackloop.model.base import ModelRequest, ModelTurn
from ackloop.model.turns import calls_turn, text_turn
from ackloop.store import AgentStore
from ackloop.telemetry.context import current_labels
from ackloop.testing.inprocess import InProcessLoop
from ackloop.tools import ToolSet, tool


class Overlap:
    """Counts what runs at once, and the most that ever did."""

    def __init__(self) -> None:
        self.now = 0
        self.most = 0
        self.done = 0

    async def during(self, seconds: float = 0.02) -> None:
        self.now += 1
        self.most = max(self.most, self.now)
        try:
            await asyncio.sleep(seconds)
        finally:
            self.now -= 1
            self.done += 1


class SlowModel:
    """Answers after a little while; a query naming ``pay`` calls the ``pay`` tool first."""

    provider = "scripted"

    def __init__(self) -> None:
        self.calls = Overlap()

    async def generate(self, request: ModelRequest) -> ModelTurn:
        await self.calls.during()
        asked = str(request.contents[0])
        answered = any("function_response" in p or "functionResponse" in p
                       for c in request.contents for p in c.get("parts", []))
        if "pay" in asked and not answered:
            return calls_turn([("pay", {"amount": 1})], request=request)
        return text_turn("done", request=request)


TOOL_CALLS = Overlap()


@tool(concurrency=("bank", 1))
async def pay(amount: int) -> str:
    """Pay."""
    await TOOL_CALLS.during()
    return f"paid {amount}"


def world(*limits: ConcurrencyLimit, db: MemoryDocumentDB | None = None,
          quotas: list[ModelQuota] | None = None) -> tuple[InProcessLoop, SlowModel]:
    model = SlowModel()
    publisher = MemoryPublisher()
    deps = Deps(settings=Settings(concurrency_limits=list(limits), model_quotas=quotas or []),
                store=AgentStore(CountingDocumentDB(db or MemoryDocumentDB())),
                publisher=publisher,
                model=model,  # type: ignore[arg-type]
                agents=AgentRegistry([Agent("solo", "Answer.", ToolSet([pay]))]),
                clock=ManualClock(), owner="test-owner", waker=MemoryWaker())
    return InProcessLoop(deps, publisher), model


async def side_by_side(loop: InProcessLoop, rounds: int = 200) -> None:
    """Deliver every queued message at once, again and again (wakes too) until none is left."""
    for _ in range(rounds):
        loop._collect()
        queued = list(loop._queue)
        loop._queue.clear()
        if not queued and not await loop.wake_next():
            return
        await asyncio.gather(*(loop.deliver(kind, message) for kind, message in queued))
    raise AssertionError("still busy")


async def ask(loop: InProcessLoop, n: int, text: str = "hi", **options: Any) -> list[str]:
    for i in range(n):
        await loop.submit(QueryMessage(request_id=f"q{i}", text=text, agent="solo",
                                       options=RunOptions(**options)))
    return [run_id_for_request(f"q{i}") for i in range(n)]


async def completed(loop: InProcessLoop, runs: list[str]) -> bool:
    found = [await loop.deps.store.runs.get_run(r) for r in runs]
    return all(r is not None and r.status is RunStatus.COMPLETED for r in found)


async def test_an_owners_limit_of_two_holds_at_every_instant_and_every_run_answers() -> None:
    loop, model = world(ConcurrencyLimit(steps="model", key="owner", limit=2))
    runs = await ask(loop, 8)
    for _ in range(12):  # no wake needed: each slot given back wakes the next in line
        await deliver_queued(loop)
    assert model.calls.most == 2 and model.calls.done == 8  # each call made once
    assert await completed(loop, runs)
    assert all(o.outcome.acknowledged for o in loop.log)  # a wait is never a failure


class Writes(MemoryDocumentDB):
    """Counts the writes to each collection."""

    def __init__(self) -> None:
        super().__init__()
        self.collections: Counter[str] = Counter()

    def _apply(self, writes: Sequence[Write]) -> list[Version]:
        versions = super()._apply(writes)
        self.collections.update(w.path.split("/")[-2] for w in writes)
        return versions


async def test_a_step_that_waits_for_its_place_under_a_quota_writes_no_slot() -> None:
    db = Writes()
    loop, model = world(ConcurrencyLimit(steps="model", key="owner", limit=2), db=db,
                        quotas=[ModelQuota(model="*", rpm=2, headroom=0.0)])
    runs = await ask(loop, 8)
    await side_by_side(loop, rounds=400)
    assert await completed(loop, runs)
    assert model.calls.most <= 2 and model.calls.done == 8
    # Each call's slot taken once and given back once: the steps that waited for their
    # places (all but two, at 2 a minute: never more at once than the slots) wrote no slot
    # document while they waited.
    assert db.collections["slots"] == 2 * 8, db.collections


async def test_a_place_whose_slot_did_not_come_is_given_back() -> None:
    loop, model = world(ConcurrencyLimit(steps="model", key="owner", limit=1),
                        quotas=[ModelQuota(model="*", rpm=1000)])
    runs = await ask(loop, 4)
    await side_by_side(loop)
    assert await completed(loop, runs)
    assert model.calls.most == 1 and model.calls.done == 4
    # The quota's minute counts the calls made, not the places taken by steps that then
    # waited for the slot.
    entries = [e for _, doc in await loop.deps.store.quotas.listed("quotas")
               for e in doc["entries"]]
    assert len(entries) == 4, entries


async def test_a_duplicate_delivery_never_calls_beside_the_first_under_its_slot() -> None:
    loop, model = world(ConcurrencyLimit(steps="model", key="owner", limit=1))
    (run_id,) = await ask(loop, 1)
    await deliver_queued(loop)  # the query: its model step's message is queued
    loop._collect()
    ((kind, step),) = list(loop._queue)
    loop._queue.clear()
    # Pub/Sub's duplicate, delivered beside the first in this very process (a model step runs
    # unclaimed): one calls, the other waits for the slot the first holds.
    await asyncio.gather(loop.deliver(kind, step), loop.deliver(kind, step))
    assert model.calls.most == 1
    await side_by_side(loop)
    assert model.calls.done == 1 and await completed(loop, [run_id])


async def test_without_a_limit_the_same_deliveries_overlap() -> None:
    loop, model = world()
    runs = await ask(loop, 8)
    await side_by_side(loop)
    assert model.calls.most == 8 and await completed(loop, runs)


async def test_a_tools_own_limit_holds_across_runs() -> None:
    TOOL_CALLS.most = TOOL_CALLS.done = 0
    loop, model = world()
    runs = await ask(loop, 5, text="pay please")
    await side_by_side(loop)
    assert TOOL_CALLS.most == 1 and TOOL_CALLS.done == 5
    assert model.calls.most > 1  # the model steps are not limited
    assert await completed(loop, runs)


async def test_a_tenants_limit_counts_only_its_runs() -> None:
    loop, model = world(ConcurrencyLimit(steps="all", key="tenant", limit=1))
    noisy = await ask(loop, 6, tenant="noisy")
    quiet = []
    for i in range(2):
        await loop.submit(QueryMessage(request_id=f"quiet{i}", text="hi", agent="solo",
                                       options=RunOptions(tenant="quiet")))
        quiet.append(run_id_for_request(f"quiet{i}"))
    untagged = []
    for i in range(2):
        await loop.submit(QueryMessage(request_id=f"free{i}", text="hi", agent="solo"))
        untagged.append(run_id_for_request(f"free{i}"))
    await side_by_side(loop)
    # At most one of each tenant at once, and the runs asked without one are not limited.
    assert model.calls.most <= 1 + 1 + 2
    assert await completed(loop, noisy + quiet + untagged)


async def test_a_tenants_burst_does_not_hold_the_others_behind_it_in_line() -> None:
    loop, model = world(ConcurrencyLimit(steps="model", key="deployment", limit=1))
    noisy = await ask(loop, 8, tenant="noisy")
    for _ in range(3):  # the queries, then the model steps: one takes the slot, 7 wait
        await deliver_queued(loop)
    await loop.submit(QueryMessage(request_id="quiet", text="hi", agent="solo",
                                   options=RunOptions(tenant="quiet")))
    quiet = run_id_for_request("quiet")
    ended = [r for r in noisy if await completed(loop, [r])]  # before the quiet one asked
    before = len(ended)
    for _ in range(40):
        await deliver_queued(loop)
        for run_id in [*noisy, quiet]:
            run = await loop.deps.store.runs.get_run(run_id)
            if run is not None and run.status is RunStatus.COMPLETED and run_id not in ended:
                ended.append(run_id)
    assert len(ended) == 9 and model.calls.most == 1 and before < 7
    # Served round by round across tenants: the quiet run right after the noisy one that
    # held the slot (and one woken for it already), not after every noisy one in line.
    assert ended.index(quiet) - before <= 2, (before, ended.index(quiet))


class RunWatchingModel(SlowModel):
    """Notes, at each call, the runs holding a run slot and the run the call is for."""

    def __init__(self, loop: list[InProcessLoop]) -> None:
        super().__init__()
        self.loop = loop
        self.seen: list[tuple[str, list[str]]] = []

    async def generate(self, request: ModelRequest) -> ModelTurn:
        docs = await self.loop[0].deps.store.quotas.listed("slots")
        now = self.loop[0].deps.clock.now()
        holding = [h["name"] for sid, doc in docs if sid.startswith("runs.")
                   for h in doc["holders"] if h["until"] > now]
        self.seen.append((current_labels().get("run_id", ""), holding))
        return await super().generate(request)


async def test_a_runs_limit_keeps_at_most_n_runs_at_work_and_frees_a_slot_at_each_end() -> None:
    holder: list[InProcessLoop] = []
    loop, _ = world(ConcurrencyLimit(steps="runs", key="owner", limit=2))
    model = RunWatchingModel(holder)
    loop.deps.model = model  # type: ignore[assignment]
    holder.append(loop)
    runs = await ask(loop, 5, text="pay please")  # each: a model call, a tool call, a model call
    for _ in range(30):  # no wake needed: a run's end wakes the next run in line
        await deliver_queued(loop)
    assert await completed(loop, runs)
    assert len(model.seen) == 10 and all(len(held) <= 2 for _, held in model.seen)
    assert all(run in held for run, held in model.seen)  # each call by a run holding a slot
    # A run is at work from its first call to its last: at most two at once, in call order
    # (without the limit, all five make their first calls before any makes its second).
    assert _most_open([run for run, _ in model.seen]) == 2
    (slots,) = [doc for sid, doc in await loop.deps.store.quotas.listed("slots")
                if sid.startswith("runs.")]
    assert slots["holders"] == [] and slots["line"] == []  # every run's slot given back


async def test_a_run_ended_outside_a_step_gives_its_run_slot_back() -> None:
    loop, _ = world(ConcurrencyLimit(steps="runs", key="owner", limit=1))
    (first,) = await ask(loop, 1, text="pay please")
    for _ in range(2):  # its query, then its first call: it holds the slot, its tool call waits
        await deliver_queued(loop)
    (held,) = [doc for _, doc in await loop.deps.store.quotas.listed("slots")]
    assert [h["name"] for h in held["holders"]] == [first]
    # A dead letter (or the sweeper) ends it between its steps.
    await end_run_now(loop.deps, first, run_end(StopReason.FAILED, Usage(), error="dead"))
    await loop.submit(QueryMessage(request_id="second", text="hi", agent="solo"))
    for _ in range(10):  # no wake, no lease's end: the slot is free at once
        await deliver_queued(loop)
    assert await completed(loop, [run_id_for_request("second")])
    (slots,) = [doc for sid, doc in await loop.deps.store.quotas.listed("slots")
                if sid.startswith("runs.")]
    assert slots["holders"] == [] and slots["line"] == []


def _most_open(calls: list[str]) -> int:
    """The most runs between their first call and their last at once, in call order."""
    first = {run: calls.index(run) for run in calls}
    last = {run: len(calls) - 1 - calls[::-1].index(run) for run in calls}
    return max(sum(1 for run in first if first[run] <= i <= last[run])
               for i in range(len(calls)))


async def test_a_crashed_holders_slot_frees_when_its_lease_ends() -> None:
    loop, model = world(ConcurrencyLimit(steps="model", key="deployment", limit=1))
    slots_id = concurrency.limits_of(loop.deps, *await _a_run(loop), "model", "solo")[0].slots_id

    def crashed(data: Any) -> tuple[Any, None]:  # a holder that died without giving it back
        return {"holders": [{"name": "dead/0000-model", "until": loop.deps.clock.now()
                             + HOLD_SECONDS}], "line": []}, None

    await loop.deps.store.quotas.change_slots(slots_id, crashed)
    before = model.calls.done  # the first run's
    runs = [run_id_for_request(f"late{i}") for i in range(2)]
    for i in range(2):
        await loop.submit(QueryMessage(request_id=f"late{i}", text="hi", agent="solo"))
    for _ in range(3):  # the queries, then the model steps: the clock does not move
        await deliver_queued(loop)
    assert model.calls.done == before  # both wait behind the dead holder, acknowledged
    clock = loop.deps.clock
    began = clock.now()
    await side_by_side(loop)  # their wakes move the clock on
    assert model.calls.done == before + 2 and model.calls.most == 1
    assert await completed(loop, runs)
    assert clock.now() - began <= HOLD_SECONDS + RECHECK_SECONDS  # freed when its lease ended


async def deliver_queued(loop: InProcessLoop) -> None:
    loop._collect()
    queued = list(loop._queue)
    loop._queue.clear()
    await asyncio.gather(*(loop.deliver(kind, message) for kind, message in queued))


async def _a_run(loop: InProcessLoop) -> tuple[Any]:
    (run_id,) = await ask(loop, 1)
    await side_by_side(loop)
    run = await loop.deps.store.runs.get_run(run_id)
    assert run is not None
    return (run,)


@pytest.mark.parametrize(("holders", "line", "name", "limit", "held", "ahead"), [
    ([], [], "a", 2, True, 0),  # a free slot
    (["x", "y"], [], "a", 2, False, 0),  # none free: first in line
    (["x"], ["b"], "a", 2, False, 1),  # one free, but b is ahead: a waits
    (["x"], ["a", "b"], "a", 2, True, 0),  # a is first in line: it takes it
    (["x", "a"], [], "a", 2, True, 0),  # it holds one already: no second
])
def test_take_serves_the_line_first(holders: list[str], line: list[str], name: str, limit: int,
                                    held: bool, ahead: int) -> None:
    slots = Slots()
    for h in holders:
        slots, _ = take(slots, h, 99, 0.0)
    for w in line:
        slots, _ = take(Slots(slots.holders, slots.line), w, len(slots.holders), 0.0)
    after, taken = take(slots, name, limit, 1.0)
    assert (taken.held, taken.ahead) == (held, ahead)
    assert len(after.holders) <= max(limit, len(holders))
    assert sum(1 for h in after.holders if h.name == name) <= 1


@pytest.mark.parametrize(("by", "at", "held", "next_free"), [
    ("p1", 1.0, True, None),  # the delivery that holds it: its own slot
    ("p2", 1.0, False, HOLD_SECONDS),  # another (the holder crashed, or a duplicate runs)
    ("p2", HOLD_SECONDS + 1.0, True, None),  # once the first's lease ended: free again
])
def test_a_slot_held_by_another_delivery_is_its_until_its_lease_ends(
        by: str, at: float, held: bool, next_free: float | None) -> None:
    slots, _ = take(Slots(), "run/0000-model", 2, 0.0, by="p1")
    slots, _ = take(slots, "other/0000-model", 2, 0.0, by="p1")
    after, taken = take(slots, "run/0000-model", 2, at, by=by)
    assert (taken.held, taken.next_free) == (held, next_free)
    if not held:  # it waits by its own wake: nothing changed, no place in line to outlive it
        assert after == slots.live(at)
    assert sum(1 for h in after.holders if h.name == "run/0000-model") == 1


def _line(*waiters: tuple[str, str, int]) -> Slots:
    """A full slot (``x`` holds the only one) and a line of (name, key, priority), in the
    order they came."""
    slots, _ = take(Slots(), "x", 1, 0.0)
    for i, (name, key, priority) in enumerate(waiters):
        slots, _ = take(slots, name, 1, float(i + 1), key=key, priority=priority)
    return slots


@pytest.mark.parametrize(("waiters", "served"), [
    ([("a1", "a", 0), ("a2", "a", 0), ("b1", "b", 0)], ["a1", "b1", "a2"]),  # round by round
    ([("a1", "a", 0), ("a2", "a", 0), ("a3", "a", 0), ("b1", "b", 0), ("c1", "c", 0)],
     ["a1", "b1", "c1", "a2", "a3"]),  # ten times the load takes no more than a turn each
    ([("a1", "a", 0), ("b1", "b", 5)], ["b1", "a1"]),  # a higher priority first
    ([("a1", "a", 0), ("a2", "a", 0)], ["a1", "a2"]),  # one key: in the order they came
])
def test_the_line_is_served_by_priority_then_round_by_round_across_keys(
        waiters: list[tuple[str, str, int]], served: list[str]) -> None:
    slots = _line(*waiters)
    assert [w.name for w in slots.served()] == served
    assert [slots.position(name) for name in served] == list(range(len(served)))
    _, woken = give_back(slots, "x", 1, 10.0)
    assert [w.name for w in woken] == served[:1]  # the slot given back goes to the first


def test_a_waiter_that_finds_a_free_slot_and_others_first_wakes_them() -> None:
    # x crashed holding the only slot: nobody gave it back, so nobody in line was woken.
    slots = _line(("a1", "a", 0), ("b1", "b", 0), ("a2", "a", 0))
    after, taken = take(slots, "a2", 1, HOLD_SECONDS + 5.0, key="a")  # back by its own wake
    assert not taken.held and taken.ahead == 2  # a1 and b1 are served first
    assert [w.name for w in taken.wake] == ["a1"]  # the free slot's first: woken now
    again, taken = take(after, "a2", 1, HOLD_SECONDS + 6.0, key="a")
    assert taken.wake == []  # a1 is on its way: not woken twice
    assert not again.holders


def test_giving_back_wakes_as_many_as_slots_free() -> None:
    slots, _ = take(Slots(), "x", 1, 0.0)
    for w in ("a", "b"):
        slots, _ = take(slots, w, 1, 0.0, wake=f"wake {w}")
    kept, woken = give_back(slots, "x", 1, 1.0)
    assert [w.name for w in woken] == ["a"] and not kept.holders
    assert [w.wake for w in woken] == ["wake a"]
    _, again = give_back(kept, "nobody", 1, 2.0)
    assert again == []  # a is on its way: not woken twice (its step would run twice at once)
    _, later = give_back(kept, "nobody", 1, 12.0)
    assert [w.name for w in later] == ["a"]  # its wake lost: woken again


@pytest.mark.parametrize(("options", "fingerprint"), [
    # What a query without tenant or priority was fingerprinted as before they existed: a
    # retry delivered across an upgrade is still the same request.
    (RunOptions(max_steps=5), "402fe5d6f7139f57c04fa693e0c3e0f7"),
    (RunOptions(max_steps=5, tenant="acme"), None),
    (RunOptions(max_steps=5, priority=3), None),
])
def test_tenant_and_priority_count_in_a_querys_fingerprint_only_when_given(
        options: RunOptions, fingerprint: str | None) -> None:
    found = request_hash(QueryMessage(request_id="r1", text="what is the weather in Paris?",
                                      agent="default", options=options))
    if fingerprint is None:
        assert found != "402fe5d6f7139f57c04fa693e0c3e0f7"
    else:
        assert found == fingerprint
