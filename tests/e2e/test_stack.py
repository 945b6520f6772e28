"""End to end on the emulators, through real processes, real HTTP and the real clients."""

from __future__ import annotations

import asyncio
import base64
import json
import time

import httpx
import pytest

from ackloop.domain.records import RunStatus
from tests.support.stack import RunningStack

pytestmark = [pytest.mark.emulator, pytest.mark.slow]


async def test_published_query_completes_with_expected_calls(stack: RunningStack) -> None:
    before = stack.model_stats()["answered"]
    run_id = stack.ask("are there any weather alerts where I am?")
    run, steps = await stack.wait_run(run_id)

    assert run.status is RunStatus.COMPLETED and run.stop_reason == "answered"
    assert "Norman, Oklahoma" in (run.answer or "") and "Tornado Watch" in (run.answer or "")
    assert [s.key for s in steps] == [
        "0000-model", "0000-tool-000", "0001-model", "0001-tool-000",
        "0002-model", "0002-tool-000", "0003-model",
    ]
    assert [s.name for s in steps if s.kind == "tool"] == [
        "get_ip_address", "get_location_info", "get_weather_alerts"
    ]
    assert all(s.attempts == 1 for s in steps)
    # Four model calls reached the Gemini-compatible server, through google-genai.
    assert stack.model_stats()["answered"] - before == 4
    answers = [a for a in stack.pull_answers() if a["run_id"] == run_id]
    assert answers and answers[0]["answer"] == run.answer and answers[0]["status"] == "completed"


async def test_thought_signatures_are_sent_back_unchanged(stack: RunningStack) -> None:
    run_id = stack.ask("where am I?")
    run, _ = await stack.wait_run(run_id)
    assert run.status is RunStatus.COMPLETED
    bodies = [b for b in stack.model_requests()
              if any("where am I?" in json.dumps(c) for c in b["contents"])]
    assert len(bodies) == 3
    last = bodies[-1]["contents"]
    signatures = [p["thoughtSignature"] for c in last if c["role"] == "model"
                  for p in c["parts"] if "thoughtSignature" in p]
    assert len(signatures) == 2 and all(base64.urlsafe_b64decode(s + "==") for s in signatures)


async def test_same_request_id_published_twice_makes_one_run(stack: RunningStack) -> None:
    run_id = stack.ask("what is my ip address?", request_id="dup-query-1")
    assert stack.ask("what is my ip address?", request_id="dup-query-1") == run_id
    run, steps = await stack.wait_run(run_id)
    await asyncio.sleep(1.0)
    assert run.status is RunStatus.COMPLETED and len(steps) == 3
    assert len(await stack.store().list_runs(run.conversation_id)) == 1


async def test_step_delivered_twice_and_concurrently_executes_once(stack: RunningStack) -> None:
    run_id = stack.ask("tell me a joke")
    run, steps = await stack.wait_run(run_id)
    assert run.status is RunStatus.COMPLETED and len(steps) == 1
    before = stack.model_stats()["answered"]
    data = json.dumps({"v": 1, "kind": "model", "run_id": run_id, "turn": 0}).encode()
    envelope = {"message": {"data": base64.b64encode(data).decode(), "messageId": "dup-1",
                            "attributes": {"run_id": run_id}}, "subscription": "test"}
    url = f"http://127.0.0.1:{stack.state.ports['model_step']}/"
    async with httpx.AsyncClient() as client:
        twice = [await client.post(url, json=envelope) for _ in range(2)]
        together = await asyncio.gather(*(client.post(url, json=envelope) for _ in range(4)))
    assert {r.status_code for r in [*twice, *together]} == {204}
    assert stack.model_stats()["answered"] == before  # the model was not called again
    _, again = await stack.wait_run(run_id)
    assert [s.model_dump() for s in again] == [s.model_dump() for s in steps]


async def test_poison_messages_are_acknowledged_and_recorded(stack: RunningStack) -> None:
    s = stack.settings
    functions = ("ingest", "model_step", "tool_step")
    before = {f: stack.push_answers(f) for f in functions}
    stack.publish(s.queries_topic, b"this is not json")
    stack.publish(s.model_steps_topic, json.dumps({"v": 1, "kind": "model"}).encode())
    stack.publish(s.tool_steps_topic, json.dumps(
        {"v": 1, "kind": "tool", "run_id": "run-does-not-exist", "turn": 0, "index": 0,
         "call_count": 1, "call": {"name": "get_ip_address"}}).encode())
    store = stack.store()
    deadline = time.monotonic() + 20
    poison: list[dict] = []
    while time.monotonic() < deadline and len(poison) < 3:
        poison = await store.letters.list_poison()
        await asyncio.sleep(0.2)
    reasons = sorted(p["reason"] for p in poison)
    assert reasons == ["poison_message", "poison_message", "unknown_run"]
    # Each was pushed once and acknowledged (answered 200 with its reason): not redelivered.
    # The push delivery's reading waits for what it holds, a nacked message included.
    for function in functions:
        assert stack.push_answers(function) - before[function] == {"200": 1}, function
    assert len(await store.letters.list_poison()) == 3


async def test_malformed_push_body_gets_a_clear_400(stack: RunningStack) -> None:
    url = f"http://127.0.0.1:{stack.state.ports['ingest']}/"
    async with httpx.AsyncClient() as client:
        response = await client.post(url, content=b"{not json", timeout=5)
    assert response.status_code == 400 and "not JSON" in response.json()["error"]
