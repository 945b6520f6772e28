"""``GET /limits`` for operators only, and what ``ackloop limits`` prints: the declared limits
and where each stands now (a quota's calls counted and waiting, a concurrency key's holders,
a budget's spend), read from the limiters' documents over real HTTP."""

from __future__ import annotations

from ackloop.config.concurrency import ConcurrencyLimit
from ackloop.config.quotas import ModelQuota
from ackloop.config.settings import Settings
from ackloop.config.spend import SpendLimit
from ackloop.domain.wire import QueryMessage
from ackloop.engine.limits_view import lines, snapshot
from tests.api.test_owners import signed_in
from tests.engine.test_quota import ALLOWED, world

LIMITS = {"model_quotas": [ModelQuota(model="*", rpm=10)],
          "concurrency_limits": [ConcurrencyLimit(steps="tool", key="owner", limit=3)],
          "spend_limits": [SpendLimit(key="deployment", usd=100.0)]}


async def test_operators_see_every_limit_and_where_it_stands() -> None:
    loop, _ = world()
    loop.deps.settings = loop.deps.settings.model_copy(update=LIMITS)
    for i in range(ALLOWED + 2):
        await loop.submit(QueryMessage(request_id=f"q{i}", text="hi", agent="solo"))
    await loop.run_until_idle()
    settings = Settings(api_operators="google:ops", **LIMITS)
    async with signed_in(settings, loop.deps, "ops", "alice") as (ops, alice):
        refused = await alice.get("/limits")
        assert refused.status_code == 403 and "ACKLOOP_API_OPERATORS" in refused.text
        seen = await ops.get("/limits")
    assert seen.status_code == 200, seen.text
    view = seen.json()
    (quota,) = view["model_quotas"]
    assert (quota["quota"], quota["per_shard"]["requests"]) == ("any@default", ALLOWED)
    (shard,) = quota["busy_shards"].values()
    assert (shard["counted"], shard["waiting"]) == (ALLOWED, 2)
    assert view["concurrency_limits"] == [{"steps": "tool", "key": "owner", "limit": 3}]
    (spent,) = view["spend_now"]
    assert spent["calls"] == ALLOWED and spent["usd"] >= 0
    printed = "\n".join(lines(await snapshot(loop.deps.settings, loop.deps.store,
                                             loop.deps.clock.now())))
    assert f"{ALLOWED} call(s) in the last minute, 2 waiting for their places" in printed
    assert "concurrency: at most 3 tool step(s) at once per owner" in printed
    assert "spend: $100 per day per deployment (over: wait)" in printed


def test_without_limits_the_cli_says_how_to_declare_them() -> None:
    empty = {"model_quotas": [], "concurrency_limits": [], "concurrency_now": [],
             "spend_limits": [], "spend_now": []}
    assert "ACKLOOP_MODEL_QUOTAS" in lines(empty)[0]
