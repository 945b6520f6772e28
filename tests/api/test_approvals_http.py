"""Approvals over real HTTP: the approval-demo agent on a stack of real processes on the
emulators waits for a decision, shows it, and resumes when one is posted."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import pytest

from tests.api.test_runs_http import wait_finished
from tests.support.stack import RunningStack

pytestmark = [pytest.mark.emulator, pytest.mark.slow]

PAYMENT = "0000-tool-000"


async def start(api: httpx.AsyncClient, text: str, **options: Any) -> str:
    body: dict[str, Any] = {"text": text, "agent": "approval-demo"}
    if options:
        body["options"] = options
    created = await api.post("/runs", json=body)
    assert created.status_code == 202, created.text
    run_id: str = created.json()["run_id"]
    return run_id


async def wait_waiting(api: httpx.AsyncClient, run_id: str, within: float = 60
                       ) -> dict[str, Any]:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        run: dict[str, Any] = (await api.get(f"/runs/{run_id}")).json()
        if run["waiting"]:
            return run
        assert run["status"] == "running", run
        await asyncio.sleep(0.2)
    raise AssertionError(f"run {run_id} did not wait within {within} s")


async def decide(api: httpx.AsyncClient, run_id: str, step: str = PAYMENT, **body: Any
                 ) -> httpx.Response:
    return await api.post(f"/runs/{run_id}/approvals/{step}", json=body)


async def test_approve_with_edited_args_runs_the_tool_with_them(
        api: httpx.AsyncClient, api_stack: RunningStack) -> None:
    run_id = await start(api, "pay 40 to Ada")
    run = await wait_waiting(api, run_id)
    (waiting,) = run["waiting"]
    assert waiting["step"] == PAYMENT and waiting["tool"] == "send_payment"
    assert waiting["args"] == {"to": "Ada", "amount": 40}
    assert waiting["deadline"] > waiting["since"]
    assert [s["status"] for s in run["steps"]] == ["completed", "waiting"]
    notices = [m for m in api_stack.pull_answers() if m.get("event") == "waiting"]
    assert any(n["run_id"] == run_id and n["step"] == PAYMENT for n in notices)

    first = await decide(api, run_id, decision="approve", args={"to": "Ada", "amount": 30},
                         comment="30 is enough")
    assert first.status_code == 200, first.text
    assert first.json()["recorded"] is True and first.json()["by"] == "anonymous"
    again = await decide(api, run_id, decision="approve", args={"to": "Ada", "amount": 30},
                         comment="30 is enough")
    assert again.status_code == 200 and again.json()["recorded"] is False
    assert again.json()["at"] == first.json()["at"]
    other = await decide(api, run_id, decision="reject")
    assert other.status_code == 409 and other.json()["code"] == "already_decided"

    done = await wait_finished(api, run_id)
    assert done["status"] == "completed" and done["waiting"] == []
    assert '"amount": 30' in done["answer"] and '"status": "sent"' in done["answer"]


async def test_a_rejection_with_a_comment_is_what_the_model_reads(
        api: httpx.AsyncClient) -> None:
    run_id = await start(api, "pay 900 to Bo")
    await wait_waiting(api, run_id)
    rejected = await decide(api, run_id, decision="reject", comment="too much")
    assert rejected.status_code == 200, rejected.text
    done = await wait_finished(api, run_id)
    assert "not run: rejected by anonymous (too much)" in done["answer"]
    assert '"status": "sent"' not in done["answer"]


async def test_bad_decisions_are_refused_with_what_to_fix(api: httpx.AsyncClient) -> None:
    run_id = await start(api, "pay 40 to Ada")
    await wait_waiting(api, run_id)
    bad_args = await decide(api, run_id, decision="approve", args={"to": "Ada", "amount": "x"})
    assert bad_args.status_code == 422 and "amount" in bad_args.json()["error"]
    unknown = await decide(api, run_id, decision="maybe")
    assert unknown.status_code == 422
    absent = await decide(api, run_id, step="0000-tool-007", decision="approve")
    assert absent.status_code == 404
    not_waiting = await decide(api, run_id, step="0000-model", decision="approve")
    assert not_waiting.status_code == 422  # not a tool step's key
    missing_run = await decide(api, "no-such-run", decision="approve")
    assert missing_run.status_code == 404
    assert (await decide(api, run_id, decision="approve")).status_code == 200
    await wait_finished(api, run_id)
    assert (await decide(api, run_id, decision="reject")).status_code == 409


async def test_parallel_calls_one_waits_one_runs_and_the_join_holds(
        api: httpx.AsyncClient) -> None:
    run_id = await start(api, "pay 40 to Ada and show the balance")
    deadline = time.monotonic() + 60
    while True:
        run = await wait_waiting(api, run_id)
        statuses = {s["key"]: s["status"] for s in run["steps"]}
        if statuses.get("0000-tool-001") == "completed" or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.2)
    assert statuses == {"0000-model": "completed", PAYMENT: "waiting",
                        "0000-tool-001": "completed"}
    await asyncio.sleep(2)  # the join had its chance: the next model step must not start
    still = (await api.get(f"/runs/{run_id}")).json()
    assert [s["key"] for s in still["steps"]] == ["0000-model", PAYMENT, "0000-tool-001"]
    assert (await decide(api, run_id, decision="approve")).status_code == 200
    done = await wait_finished(api, run_id)
    assert '"balance": 1000' in done["answer"] and '"status": "sent"' in done["answer"]


async def test_the_event_stream_says_the_run_waits(api: httpx.AsyncClient) -> None:
    run_id = await start(api, "pay 40 to Ada")
    await wait_waiting(api, run_id)
    events: list[dict[str, Any]] = []
    async with api.stream("GET", f"/runs/{run_id}/events") as stream:
        async for line in stream.aiter_lines():
            if line:
                events.append(json.loads(line))
            if events and events[-1]["type"] == "waiting":
                break
    assert [e["type"] for e in events] == ["step", "waiting"]
    assert events[-1]["waiting"]["step"] == PAYMENT
    assert (await decide(api, run_id, decision="approve")).status_code == 200
    await wait_finished(api, run_id)


async def test_a_wait_past_its_deadline_is_rejected_by_the_sweeper(
        api: httpx.AsyncClient) -> None:
    run_id = await start(api, "pay 40 to Ada", approval_timeout_seconds=1)
    run = await wait_waiting(api, run_id)
    assert run["waiting"][0]["deadline"] - run["waiting"][0]["since"] == pytest.approx(1)
    await asyncio.sleep(1.5)
    swept = (await api.post("/sweep", params={"stale_seconds": 0.5})).json()["swept"]
    assert {"run_id": run_id, "action": "resumed",
            "detail": f"no decision before the deadline: {PAYMENT}"} in swept
    done = await wait_finished(api, run_id)
    assert "not run: no decision before the deadline" in done["answer"]
