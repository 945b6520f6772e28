"""Spend limits checked before each paid call: over a budget, a call waits for the next period
(acknowledged, woken when it begins) or fails its run naming the budget; what each call cost
is counted once, per budget and period; a run without a tenant is not held by a tenant's.

On the in-memory engine with the real dispatch, a manual clock and a memory waker."""

from __future__ import annotations

from typing import Any

from ackloop.agents.agent import Agent
from ackloop.bus.wakes import MemoryWaker
from ackloop.config.settings import Settings
from ackloop.config.spend import SpendLimit
from ackloop.domain.keys import run_id_for_request
from ackloop.domain.records import RunStatus
from ackloop.domain.wire import QueryMessage, RunOptions
from ackloop.engine.spend_limits import budgets_of
from ackloop.model.base import ModelRequest, ModelTurn
from ackloop.model.turns import text_turn
from ackloop.testing.inprocess import InProcessLoop
from tests.engine.test_children import team_loop

ONE_CALL_USD = 1.2e-5
"""More than one short call costs on gemini-3-flash-preview (about $9.5e-6), less than two."""


def world(*limits: SpendLimit) -> tuple[InProcessLoop, list[float]]:
    asked: list[float] = []
    holder: list[InProcessLoop] = []

    def answer(request: ModelRequest) -> ModelTurn:
        asked.append(holder[0].deps.clock.now())
        return text_turn("x" * 200, request=request)

    loop = team_loop([Agent("solo", "Answer.")], answer,  # type: ignore[arg-type]
                     Settings(spend_limits=list(limits), model="gemini-3-flash-preview"))
    loop.deps.waker = MemoryWaker()
    holder.append(loop)
    return loop, asked


async def ask(loop: InProcessLoop, n: int, **options: Any) -> list[str]:
    for i in range(n):
        await loop.submit(QueryMessage(request_id=f"q{i}", text="hi", agent="solo",
                                       options=RunOptions(**options)))
    return [run_id_for_request(f"q{i}") for i in range(n)]


async def test_a_call_over_the_owners_daily_budget_waits_for_the_next_day() -> None:
    loop, asked = world(SpendLimit(key="owner", period="day", usd=ONE_CALL_USD))
    runs = await ask(loop, 3)
    await loop.run_until_idle()
    assert len(asked) == 1  # the day's first call goes; the rest would go over: they wait
    assert all(o.outcome.acknowledged for o in loop.log)
    await loop.run_until_idle(wake=True)
    days = sorted({int(t // 86_400) for t in asked})
    assert len(asked) == 3 and days == [days[0], days[0] + 1, days[0] + 2]  # one a day
    for run_id in runs:
        run = await loop.deps.store.runs.get_run(run_id)
        assert run is not None and run.status is RunStatus.COMPLETED, run


async def test_a_budget_that_fails_ends_the_run_naming_it() -> None:
    loop, asked = world(SpendLimit(key="agent", period="hour", usd=ONE_CALL_USD, over="fail"))
    runs = await ask(loop, 2)
    await loop.run_until_idle()
    first, second = [await loop.deps.store.runs.get_run(r) for r in runs]
    assert first is not None and first.status is RunStatus.COMPLETED
    assert second is not None and second.status is RunStatus.FAILED
    assert "the spend limit agent solo: $1.2e-05 per hour is spent" in (second.error or "")
    assert len(asked) == 1


async def test_each_call_is_counted_once_in_each_of_its_budgets() -> None:
    loop, asked = world(SpendLimit(key="owner", usd=100.0), SpendLimit(key="deployment",
                                                                       usd=100.0))
    runs = await ask(loop, 4)
    await loop.run_until_idle()
    run = await loop.deps.store.runs.get_run(runs[0])
    assert run is not None
    budgets = budgets_of(loop.deps, run, "solo", loop.deps.clock.now())
    docs = await loop.deps.store.quotas.read_spend([b.spend_id for b in budgets])
    assert [d["calls"] for d in docs if d] == [4, 4] and len(asked) == 4
    assert docs[0] is not None and docs[0]["usd"] > 0


async def test_a_tenants_budget_holds_only_its_runs() -> None:
    loop, asked = world(SpendLimit(key="tenant", usd=ONE_CALL_USD))
    await ask(loop, 3, tenant="acme")
    for i in range(3):
        await loop.submit(QueryMessage(request_id=f"free{i}", text="hi", agent="solo"))
    await loop.run_until_idle()
    assert len(asked) == 1 + 3
