"""Limits changed while the deployment runs: a list set replaces the declared one in every
process within ``limits_refresh_seconds``, ``null`` goes back to the declared list, a step in
between reads nothing for it, and ``limits_refresh_seconds = 0`` reads nothing at all.
``PUT /limits`` over real HTTP is for operators only and says what to fix in a bad body.

On the in-memory engine with the real dispatch, a manual clock and a memory waker."""

from __future__ import annotations

from typing import Any

import pytest

from ackloop.config.concurrency import ConcurrencyLimit
from ackloop.config.quotas import ModelQuota
from ackloop.config.settings import Settings
from ackloop.config.spend import SpendLimit
from ackloop.domain.clock import ManualClock
from ackloop.domain.records import RunStatus
from ackloop.domain.wire import QueryMessage
from ackloop.engine import live_limits
from ackloop.engine.live_limits import LimitsChange, changed, in_force
from tests.api.test_owners import signed_in
from tests.engine.test_quota import ask, world

DECLARED = Settings(model_quotas=[ModelQuota(model="*", rpm=10)],
                    spend_limits=[SpendLimit(key="owner", usd=5.0)])
TWENTY = [{"model": "*", "rpm": 20}]


@pytest.mark.parametrize(("doc", "quotas", "spend", "set_lists"), [
    (None, [ModelQuota(model="*", rpm=10)], [SpendLimit(key="owner", usd=5.0)], ()),
    ({"lists": {"model_quotas": TWENTY}, "by": "ops", "at": 1.0},
     [ModelQuota(model="*", rpm=20)], [SpendLimit(key="owner", usd=5.0)], ("model_quotas",)),
    ({"lists": {"model_quotas": [], "spend_limits": []}, "by": "ops", "at": 1.0},
     [], [], ("model_quotas", "spend_limits")),  # an empty list set: no quota at all
    ({"lists": {"model_quotas": [{"model": "*"}]}, "by": "ops", "at": 1.0},  # limits nothing
     [ModelQuota(model="*", rpm=10)], [SpendLimit(key="owner", usd=5.0)], ()),
])
def test_the_lists_set_replace_the_declared_ones(doc: Any, quotas: Any, spend: Any,
                                                  set_lists: tuple[str, ...]) -> None:
    limits = in_force(DECLARED, doc)
    assert (limits.model_quotas, limits.spend_limits) == (quotas, spend)
    assert limits.concurrency_limits == [] and limits.set_lists == set_lists
    assert limits.set_by == ("ops" if set_lists else None)


@pytest.mark.parametrize(("before", "change", "after"), [
    (None, {"model_quotas": TWENTY}, {"model_quotas": TWENTY}),
    ({"model_quotas": TWENTY}, {"spend_limits": [{"key": "owner", "usd": 1}]},
     {"model_quotas": TWENTY,
      "spend_limits": [{"key": "owner", "usd": 1}]}),
    ({"model_quotas": TWENTY}, {"model_quotas": None}, {}),  # null: the declared list again
    ({"model_quotas": TWENTY}, {}, {"model_quotas": TWENTY}),  # a list left out is kept
])
def test_a_change_sets_the_lists_it_names_and_keeps_the_others(
        before: Any, change: Any, after: Any) -> None:
    doc = changed({"lists": before} if before is not None else None,
                  LimitsChange.model_validate(change), "ops", 5.0)
    assert set(doc["lists"]) == set(after)
    assert LimitsChange.model_validate(doc["lists"]) == LimitsChange.model_validate(after)
    assert (doc["by"], doc["at"]) == ("ops", 5.0)


def test_a_change_that_does_not_validate_is_refused_whole() -> None:
    with pytest.raises(ValueError, match="limits nothing"):
        LimitsChange.model_validate({"model_quotas": [{"model": "*"}]})
    with pytest.raises(ValueError, match="extra"):
        LimitsChange.model_validate({"model_quota": TWENTY})


async def _completed(loop: Any, runs: list[str]) -> int:
    done = 0
    for run_id in runs:
        run = await loop.deps.store.runs.get_run(run_id)
        done += run is not None and run.status is RunStatus.COMPLETED
    return done


async def test_a_quota_set_while_running_holds_in_every_process_within_the_refresh() -> None:
    loop, model = world()
    loop.deps.settings = Settings()  # nothing declared
    clock = loop.deps.clock
    assert isinstance(clock, ManualClock)
    await ask(loop, 3)
    await loop.run_until_idle()
    assert len(model.asked) == 3  # no quota: every call goes
    await live_limits.change(loop.deps.store, LimitsChange(model_quotas=[
        ModelQuota(model="*", rpm=2, headroom=0.0)]), "ops", clock.now())
    clock.advance(loop.deps.settings.limits_refresh_seconds)
    # The next step starts the process's reading beside it (and goes under the last one).
    await loop.submit(QueryMessage(request_id="next", text="hi", agent="solo"))
    await loop.run_until_idle()
    await loop.deps.live_limits.settled()
    assert len(model.asked) == 4
    for i in range(5):
        await loop.submit(QueryMessage(request_id=f"later-{i}", text="hi", agent="solo"))
    await loop.run_until_idle()
    assert len(model.asked) == 4 + 2  # the quota set holds: 2 in the minute, the rest wait
    await live_limits.change(loop.deps.store, LimitsChange(model_quotas=None), "ops",
                             clock.now())
    clock.advance(loop.deps.settings.limits_refresh_seconds)
    await loop.run_until_idle(wake=True)
    assert len(model.asked) == 4 + 5


def _counting_reads(loop: Any) -> list[float]:
    """Note when the process reads the limits set (``limits/set``)."""
    reads: list[float] = []
    quotas = loop.deps.store.quotas
    read_set = quotas.read_set

    async def counted() -> Any:
        reads.append(loop.deps.clock.now())
        return await read_set()

    quotas.read_set = counted
    return reads


async def test_a_step_between_refreshes_reads_nothing_for_them() -> None:
    loop, model = world()
    reads = _counting_reads(loop)
    await ask(loop, 6)
    await loop.run_until_idle()  # 6 steps at the moment the process started: no read
    await loop.deps.live_limits.settled()
    assert len(model.asked) == 6 and reads == []
    clock = loop.deps.clock
    assert isinstance(clock, ManualClock)
    clock.advance(loop.deps.settings.limits_refresh_seconds)
    for i in range(6):
        await loop.submit(QueryMessage(request_id=f"next-{i}", text="hi", agent="solo"))
    await loop.run_until_idle()
    await loop.deps.live_limits.settled()
    assert len(reads) == 1  # one after the refresh, for every step after it


async def test_a_process_that_has_read_nothing_yet_waits_for_its_first_reading() -> None:
    loop, model = world()
    loop.deps.settings = Settings()  # nothing declared
    await live_limits.change(loop.deps.store, LimitsChange(model_quotas=[
        ModelQuota(model="*", rpm=1, headroom=0.0)]), "ops", loop.deps.clock.now())
    loop.deps.live_limits = live_limits.LiveLimits()  # a process just started
    await ask(loop, 3)
    await loop.run_until_idle()
    assert len(model.asked) == 1  # its first step waited for the reading: the quota holds


async def test_with_refresh_zero_the_set_lists_are_never_read() -> None:
    loop, model = world()
    loop.deps.settings = Settings(limits_refresh_seconds=0)
    reads = _counting_reads(loop)
    await live_limits.change(loop.deps.store, LimitsChange(model_quotas=[
        ModelQuota(model="*", rpm=1, headroom=0.0)]), "ops", loop.deps.clock.now())
    await ask(loop, 3)
    await loop.run_until_idle()
    assert len(model.asked) == 3  # the quota set is not in force: only the declared are
    assert reads == []


async def test_operators_set_and_reset_limits_over_http() -> None:
    loop, _ = world()
    settings = Settings(api_operators="google:ops", model_quotas=[ModelQuota(model="*", rpm=10)])
    loop.deps.settings = settings
    async with signed_in(settings, loop.deps, "ops", "alice") as (ops, alice):
        refused = await alice.put("/limits", json={"model_quotas": TWENTY})
        assert refused.status_code == 403 and "ACKLOOP_API_OPERATORS" in refused.text
        bad = await ops.put("/limits", json={"model_quotas": [{"model": "*"}]})
        assert bad.status_code == 422 and "limits nothing" in bad.text, bad.text
        empty = await ops.put("/limits", json={})
        assert empty.status_code == 422 and "model_quotas" in empty.text, empty.text
        put = await ops.put("/limits", json={
            "model_quotas": TWENTY,
            "concurrency_limits": [{"steps": "model", "key": "tenant", "limit": 4}]})
        assert put.status_code == 200, put.text
        view = (await ops.get("/limits")).json()
        assert [q["rpm"] for q in view["model_quotas"]] == [20]
        assert view["concurrency_limits"] == [{"steps": "model", "key": "tenant", "limit": 4}]
        assert view["set"]["lists"] == ["model_quotas", "concurrency_limits"]
        assert view["set"]["by"] and view["set"]["applies_within_s"] == 10.0
        reset = await ops.put("/limits", json={"model_quotas": None})
        assert [q["rpm"] for q in reset.json()["model_quotas"]] == [10]  # as declared
        assert reset.json()["set"]["lists"] == ["concurrency_limits"]
    assert ConcurrencyLimit(steps="model", key="tenant", limit=4) in in_force(
        settings, await loop.deps.store.quotas.read_set()).concurrency_limits
