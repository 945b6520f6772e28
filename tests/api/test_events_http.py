"""Named events over real HTTP and the real queries topic: the approval-demo agent on a stack
of real processes on the emulators waits for a payee's receipt (``receipt:<who>``) beside a
payment's approval, and resumes when the event is sent, whichever way it comes."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest

from ackloop.domain.wire import EventMessage
from tests.api.test_approvals_http import PAYMENT, decide, start, wait_waiting
from tests.api.test_runs_http import wait_finished
from tests.support.stack import RunningStack

pytestmark = [pytest.mark.emulator, pytest.mark.slow]

RECEIPT = "0000-tool-001"


async def both_waiting(api: httpx.AsyncClient, run_id: str, within: float = 60
                       ) -> dict[str, Any]:
    deadline = time.monotonic() + within
    while True:
        run = await wait_waiting(api, run_id)
        if len(run["waiting"]) == 2 or time.monotonic() > deadline:
            return run
        await asyncio.sleep(0.2)


async def send(api: httpx.AsyncClient, run_id: str, name: str, **body: Any) -> httpx.Response:
    return await api.post(f"/runs/{run_id}/events/{name}", json=body)


async def test_an_event_resumes_its_call_and_a_repeat_or_a_conflict_changes_nothing(
        api: httpx.AsyncClient, api_stack: RunningStack) -> None:
    run_id = await start(api, "pay 40 to Ada and wait for her receipt")
    run = await both_waiting(api, run_id)
    by_step = {w["step"]: w for w in run["waiting"]}
    assert by_step[PAYMENT]["waiting_for"] == "approval"
    receipt = by_step[RECEIPT]
    assert (receipt["waiting_for"], receipt["event_name"], receipt["tool"]) == (
        "event", "receipt:Ada", "await_receipt")
    notices = [m for m in api_stack.pull_answers() if m.get("event") == "waiting"]
    assert any(n["run_id"] == run_id and n["event_name"] == "receipt:Ada" for n in notices)

    # An approval cannot decide a call that waits for an event.
    wrong = await decide(api, run_id, step=RECEIPT, decision="approve")
    assert wrong.status_code == 409 and "receipt:Ada" in wrong.json()["error"]

    sent = await send(api, run_id, "receipt:Ada", payload={"note": "thanks"}, id="r-1")
    assert sent.status_code == 200, sent.text
    assert sent.json()["recorded"] is True and sent.json()["resumed"] == [RECEIPT]
    assert sent.json()["by"] == "anonymous"
    again = await send(api, run_id, "receipt:Ada", payload={"note": "thanks"}, id="r-1")
    assert again.status_code == 200 and again.json()["recorded"] is False
    assert again.json()["at"] == sent.json()["at"]
    other = await send(api, run_id, "receipt:Ada", payload={"note": "forged"}, id="r-2")
    assert other.status_code == 409 and other.json()["code"] == "already_received"

    assert (await decide(api, run_id, decision="approve")).status_code == 200
    done = await wait_finished(api, run_id)
    assert done["status"] == "completed", done
    assert '"note": "thanks"' in done["answer"] and '"receipt_from": "Ada"' in done["answer"]
    assert '"forged"' not in done["answer"]
    late = await send(api, run_id, "receipt:Bo")
    assert late.status_code == 409 and late.json()["code"] == "run_ended"


async def test_an_event_published_to_the_queries_topic_resumes_the_run(
        api: httpx.AsyncClient, api_stack: RunningStack) -> None:
    run_id = await start(api, "pay 40 to Ada and wait for her receipt")
    await both_waiting(api, run_id)
    event = EventMessage(type="event", run_id=run_id, name="receipt:Ada",
                         payload={"note": "by pubsub"})
    await asyncio.to_thread(api_stack.publish, api_stack.settings.queries_topic,
                            event.model_dump_json().encode())
    deadline = time.monotonic() + 60
    while True:
        run = (await api.get(f"/runs/{run_id}")).json()
        if [w["step"] for w in run["waiting"]] == [PAYMENT]:
            break
        assert time.monotonic() < deadline, run
        await asyncio.sleep(0.2)
    assert (await decide(api, run_id, decision="approve")).status_code == 200
    done = await wait_finished(api, run_id)
    assert '"note": "by pubsub"' in done["answer"]


async def test_bad_events_are_refused_with_what_to_fix(api: httpx.AsyncClient) -> None:
    run_id = await start(api, "pay 40 to Ada")
    await wait_waiting(api, run_id)
    bad_name = await send(api, run_id, "no spaces")
    assert bad_name.status_code == 422
    too_big = await send(api, run_id, "big", payload={"blob": "x" * 20_000})
    assert too_big.status_code == 422 and "at most 16384" in too_big.text
    not_object = await api.post(f"/runs/{run_id}/events/x", json={"payload": [1, 2]})
    assert not_object.status_code == 422
    unknown_field = await send(api, run_id, "x", data={})
    assert unknown_field.status_code == 422
    missing_run = await send(api, "no-such-run", "x")
    assert missing_run.status_code == 404
    # An event no call waits for yet is kept: a later wait for it is met at once.
    kept = await send(api, run_id, "receipt:Ada", payload={"early": True})
    assert kept.status_code == 200 and kept.json()["resumed"] == []
    assert (await decide(api, run_id, decision="approve")).status_code == 200
    await wait_finished(api, run_id)
