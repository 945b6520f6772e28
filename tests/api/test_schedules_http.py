"""The schedules API in process (httpx over ASGI) on the in-memory engine: create, list with
the next firings, an invalid spec's 422 (a catch-up window below a minute, a backfill of
the future), a catalog schedule's 409, operators only for writes,
pause, resume, trigger, backfill and delete."""

from __future__ import annotations

from typing import Any

from ackloop.agents.agent import AgentRegistry
from ackloop.bus.wakes import MemoryWaker
from ackloop.config.settings import Settings
from ackloop.domain.clock import ManualClock
from ackloop.domain.schedules import Schedule
from ackloop.engine import schedule_control as ops
from ackloop.model.scripted import ScriptedModel
from ackloop.model.turns import text_turn
from tests.api.test_owners import signed_in
from tests.engine.fakes import CountingToolbox, api_of, make_loop

T0 = 1_699_999_200.0
HOURLY = {"id": "hourly", "agent": "default", "text": "report", "every_seconds": 3600}


def loop_of() -> Any:
    model = ScriptedModel.from_turns([text_turn("done")] * 20)
    return make_loop(model, CountingToolbox(), waker=MemoryWaker(), clock=ManualClock(T0))


async def test_create_list_read_pause_resume_trigger_backfill_delete() -> None:
    loop = loop_of()
    async with api_of(loop) as api:
        created = await api.post("/schedules", json=HOURLY)
        assert created.status_code == 201, created.text
        view = created.json()
        assert view["next_firings"] == [T0 + h * 3600 for h in range(1, 6)]
        assert view["source"] == "api" and view["paused"] is False
        listed = (await api.get("/schedules")).json()["schedules"]
        assert [s["id"] for s in listed] == ["hourly"]
        paused = (await api.post("/schedules/hourly/pause")).json()
        assert paused["paused"] is True and paused["next_firings"] == []
        resumed = (await api.post("/schedules/hourly/resume")).json()
        assert resumed["next_fire_at"] == T0 + 3600
        fired = (await api.post("/schedules/hourly/trigger")).json()
        assert fired["outcome"] == "manual" and fired["run_id"]
        backfill = await api.post("/schedules/hourly/backfill",
                                  json={"start": T0 - 7200, "end": T0})
        assert [r["at"] for r in backfill.json()["runs"]] == [T0 - 7200, T0 - 3600, T0]
        await loop.run_until_idle()
        assert len(await loop.deps.store.runs.recent_runs(limit=10)) == 4
        shown = (await api.get("/schedules/hourly")).json()
        assert [f["outcome"] for f in shown["firings"]] == ["manual"] + ["backfill"] * 3
        assert (await api.delete("/schedules/hourly")).status_code == 200
        assert (await api.get("/schedules/hourly")).status_code == 404
        assert (await api.post("/schedules/hourly/trigger")).status_code == 404


async def test_an_invalid_spec_is_422_naming_what_to_fix() -> None:
    loop = loop_of()
    async with api_of(loop) as api:
        bad_cron = await api.post("/schedules", json=HOURLY | {"every_seconds": None,
                                                               "cron": "0 9 * *"})
        assert bad_cron.status_code == 422 and "give five" in bad_cron.text
        bad_zone = await api.post("/schedules", json=HOURLY | {"every_seconds": None,
                                                               "cron": "0 9 * * *",
                                                               "time_zone": "Nowhere/Town"})
        assert bad_zone.status_code == 422 and "IANA" in bad_zone.text
        unknown = await api.post("/schedules", json=HOURLY | {"agent": "nobody"})
        assert unknown.status_code == 422 and "nobody" in unknown.text
        no_window = await api.post("/schedules", json=HOURLY | {"catchup_window_seconds": 0})
        assert no_window.status_code == 422 and "below 60" in no_window.text
        backwards = await api.post("/schedules/hourly/backfill", json={"start": 10, "end": 5})
        assert backwards.status_code == 422
        await api.post("/schedules", json=HOURLY)
        future = await api.post("/schedules/hourly/backfill",
                                json={"start": T0 + 60, "end": T0 + 7200})
        assert future.status_code == 422 and "at their time" in future.text
        assert await loop.deps.store.runs.recent_runs(limit=10) == []


async def test_a_catalog_schedule_cannot_be_replaced_through_the_api() -> None:
    loop = loop_of()
    loop.deps.agents = AgentRegistry(list(loop.deps.agents), [Schedule.model_validate(HOURLY)])
    await ops.sync_catalog(loop.deps)
    async with api_of(loop) as api:
        answer = await api.post("/schedules", json=HOURLY | {"text": "other"})
        assert answer.status_code == 409 and "catalog" in answer.text
        assert (await api.get("/schedules/hourly")).json()["source"] == "catalog"


async def test_writes_are_for_operators_and_reads_for_every_caller() -> None:
    loop = loop_of()
    await ops.put_schedule(loop.deps, Schedule.model_validate(HOURLY))
    async with signed_in(Settings(api_operators=""), loop.deps, "alice") as (alice,):
        assert (await alice.get("/schedules/hourly")).status_code == 200
        for path in ("/schedules/hourly/pause", "/schedules/hourly/trigger"):
            refused = await alice.post(path)
            assert refused.status_code == 403 and "ACKLOOP_API_OPERATORS" in refused.text
        assert (await alice.post("/schedules", json=HOURLY)).status_code == 403
        assert (await alice.delete("/schedules/hourly")).status_code == 403
