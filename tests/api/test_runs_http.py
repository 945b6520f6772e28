"""The runs API over real HTTP against the api process of a stack on the emulators."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import httpx
import pytest

from tests.support.stack import RunningStack

pytestmark = [pytest.mark.emulator, pytest.mark.slow]

WEATHER = "are there any weather alerts where I am?"
WEATHER_KEYS = ["0000-model", "0000-tool-000", "0001-model", "0001-tool-000",
                "0002-model", "0002-tool-000", "0003-model"]


async def wait_finished(api: httpx.AsyncClient, run_id: str, within: float = 60
                        ) -> dict[str, Any]:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        run: dict[str, Any] = (await api.get(f"/runs/{run_id}")).json()
        if run["status"] != "running":
            return run
        await asyncio.sleep(0.2)
    raise AssertionError(f"run {run_id} still running after {within} s")


async def test_create_then_get_shows_status_answer_and_steps(api: httpx.AsyncClient) -> None:
    created = await api.post("/runs", json={"text": WEATHER})
    assert created.status_code == 202, created.text
    body = created.json()
    assert body["created"] is True and body["status"] == "running"
    assert created.headers["location"] == f"/runs/{body['run_id']}"

    run = await wait_finished(api, body["run_id"])
    assert run["status"] == "completed" and run["stop_reason"] == "answered"
    assert "Tornado Watch" in run["answer"]
    assert [s["key"] for s in run["steps"]] == WEATHER_KEYS
    for step in run["steps"]:
        assert step["status"] == "completed" and step["attempts"] == 1
        assert step["completed_at"] >= step["started_at"] >= step["created_at"] > 0
        assert step["duration_seconds"] >= 0
    models = [s for s in run["steps"] if s["kind"] == "model"]
    assert all(s["usage"]["total_tokens"] > 0 for s in models)
    assert run["usage"]["model_calls"] == 4 and run["usage"]["tool_calls"] == 3


async def test_a_budget_stop_names_its_budget_and_has_no_answer(api: httpx.AsyncClient) -> None:
    """A run stopped by a budget is `completed` (as before, for clients that read status) and
    `budget_stop` says which budget; an answered run has none."""
    created = await api.post("/runs", json={"text": WEATHER, "options": {"max_steps": 1}})
    run = await wait_finished(api, created.json()["run_id"])
    assert (run["status"], run["stop_reason"], run["budget_stop"]) == (
        "completed", "max_steps", "max_steps")
    assert run["answer"] is None
    events = (await api.get(f"/runs/{run['run_id']}/events")).text.splitlines()
    assert json.loads(events[-1])["budget_stop"] == "max_steps"
    answered = await api.post("/runs", json={"text": "tell me a joke"})
    run = await wait_finished(api, answered.json()["run_id"])
    assert (run["stop_reason"], run["budget_stop"]) == ("answered", None)


async def test_idempotency_key_makes_retries_safe_and_rejects_a_changed_body(
    api: httpx.AsyncClient,
) -> None:
    key = f"idem-{uuid.uuid4().hex[:10]}"
    headers = {"Idempotency-Key": key}
    first = await api.post("/runs", json={"text": "tell me a joke"}, headers=headers)
    again = await api.post("/runs", json={"text": "tell me a joke"}, headers=headers)
    assert first.status_code == again.status_code == 202
    assert first.json()["run_id"] == again.json()["run_id"]
    assert (first.json()["created"], again.json()["created"]) == (True, False)

    changed = await api.post("/runs", json={"text": "tell me two jokes"}, headers=headers)
    assert changed.status_code == 409
    assert changed.json()["code"] == "idempotency_mismatch"
    run = await wait_finished(api, first.json()["run_id"])
    listed = await api.get(f"/conversations/{run['conversation_id']}/runs")
    assert [r["run_id"] for r in listed.json()["runs"]] == [run["run_id"]]


async def test_list_runs_of_a_conversation_oldest_first(api: httpx.AsyncClient) -> None:
    conversation = f"conv-{uuid.uuid4().hex[:8]}"
    ids = []
    for text in ("tell me a joke", "what is my ip address?"):
        created = await api.post("/runs", json={"text": text, "conversation_id": conversation})
        ids.append(created.json()["run_id"])
        await wait_finished(api, ids[-1])
    listed = (await api.get(f"/conversations/{conversation}/runs")).json()
    assert [r["run_id"] for r in listed["runs"]] == ids
    assert all(r["status"] == "completed" for r in listed["runs"])
    assert (await api.get("/conversations/nobody-here/runs")).json()["runs"] == []


async def test_stream_ndjson_arrives_chunk_by_chunk_while_the_run_goes_on(
    api: httpx.AsyncClient, api_stack: RunningStack,
) -> None:
    api_stack.schedule_model_faults("delay:1*4")  # each model call takes a second
    run_id = (await api.post("/runs", json={"text": WEATHER})).json()["run_id"]
    seen: list[tuple[dict[str, Any], str]] = []
    async with api.stream("GET", f"/runs/{run_id}/events") as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("application/x-ndjson")
        async for line in response.aiter_lines():
            event = json.loads(line)
            if event["type"] == "delta":  # the answer's text while it is written
                continue
            status = (await api.get(f"/runs/{run_id}")).json()["status"]
            seen.append((event, status))
    events = [e for e, _ in seen]
    assert [e["cursor"] for e in events] == [*WEATHER_KEYS, "end"]
    assert events[-1]["type"] == "finished" and events[-1]["status"] == "completed"
    assert "Tornado Watch" in events[-1]["answer"]
    # The first events were read while the run was still running: a stream, not a dump.
    assert seen[0][1] == "running" and seen[2][1] == "running"


async def test_sse_stream_resumes_from_a_cursor(api: httpx.AsyncClient) -> None:
    run_id = (await api.post("/runs", json={"text": WEATHER})).json()["run_id"]
    await wait_finished(api, run_id)
    response = await api.get(f"/runs/{run_id}/events",
                             headers={"Accept": "text/event-stream"})
    assert response.headers["content-type"].startswith("text/event-stream")
    frames = [f for f in response.text.split("\n\n") if f.strip()]
    ids = [line.removeprefix("id: ") for f in frames for line in f.splitlines()
           if line.startswith("id: ")]
    assert ids == [*WEATHER_KEYS, "end"]
    assert frames[-1].splitlines()[1] == "event: finished"

    resumed = await api.get(f"/runs/{run_id}/events", params={"format": "sse"},
                            headers={"Last-Event-ID": "0001-tool-000"})
    ids = [line.removeprefix("id: ") for line in resumed.text.splitlines()
           if line.startswith("id: ")]
    assert ids == ["0002-model", "0002-tool-000", "0003-model", "end"]
    after = await api.get(f"/runs/{run_id}/events", params={"after": "0003-model"})
    assert [json.loads(x)["type"] for x in after.text.splitlines()] == ["finished"]
    assert (await api.get(f"/runs/{run_id}/events", params={"after": "end"})).text == ""


async def test_cancel_stops_at_the_next_step_and_keeps_the_inflight_result(
    api: httpx.AsyncClient, api_stack: RunningStack,
) -> None:
    api_stack.schedule_model_faults("delay:2")  # the first model call is slow
    before = api_stack.model_stats()["answered"]
    run_id = (await api.post("/runs", json={"text": WEATHER})).json()["run_id"]
    await asyncio.sleep(0.8)  # the first model step is in flight
    cancel = await api.post(f"/runs/{run_id}/cancel")
    assert cancel.status_code == 202 and cancel.json()["cancel_requested"] is True
    run = await wait_finished(api, run_id)
    assert run["status"] == "cancelled" and run["stop_reason"] == "cancelled"
    assert run["cancel_requested"] is True
    first = run["steps"][0]
    assert first["key"] == "0000-model" and first["status"] == "completed"
    assert first["result"] is not None  # the in-flight model call's result was recorded
    # Only the in-flight call reached the model: the next model step saw the cancel.
    assert api_stack.model_stats()["answered"] - before == 1
    again = await api.post(f"/runs/{run_id}/cancel")
    assert again.status_code == 200 and again.json()["status"] == "cancelled"


async def test_unknown_and_invalid_ids_are_4xx(api: httpx.AsyncClient) -> None:
    assert (await api.get("/runs/run-doesnotexist")).status_code == 404
    assert (await api.get("/runs/run-doesnotexist")).json()["code"] == "not_found"
    assert (await api.post("/runs/run-doesnotexist/cancel")).status_code == 404
    assert (await api.get("/runs/run-doesnotexist/events")).status_code == 404
    for bad in ("__name__", "a%2Fb", ".." , "x" * 200, "%F0%9F%98%80"):
        response = await api.get(f"/runs/{bad}")
        assert response.status_code in (404, 422), (bad, response.status_code)
        if response.status_code == 422:
            assert response.json()["fields"][0]["field"] == "path.run_id"
    bad_cursor = await api.get("/runs/run-x/events", params={"after": "../steps"})
    assert bad_cursor.status_code == 422


async def test_schema_errors_name_the_field(api: httpx.AsyncClient) -> None:
    response = await api.post("/runs", json={"text": "", "conversation_id": "a/b",
                                             "options": {"max_steps": 0}, "colour": "red"})
    assert response.status_code == 422
    fields = {f["field"] for f in response.json()["fields"]}
    assert {"body.text", "body.conversation_id", "body.options.max_steps",
            "body.colour"} <= fields
    surrogate = await api.post("/runs", content=b'{"text": "\\ud800 hi"}',
                               headers={"Content-Type": "application/json"})
    assert surrogate.status_code == 422
    assert (await api.post("/runs", content=b"{nope")).status_code == 422
    unknown_agent = await api.post("/runs", json={"text": "hi", "agent": "nobody"})
    assert unknown_agent.status_code == 422 and unknown_agent.json()["code"] == "unknown_agent"


async def test_body_size_limit_is_413_declared_or_streamed(api: httpx.AsyncClient) -> None:
    """A route that takes no files keeps ``api_max_body_bytes`` (64 KiB here); the routes that
    take a query's files inline accept that plus the files' base64, and no more."""
    from ackloop.api.app import files_body_limit
    from ackloop.config.settings import Settings

    files_limit, _ = files_body_limit(Settings(api_max_body_bytes=65_536))
    for path, size in (("/runs/run-x/events/done", 70_000), ("/runs", files_limit + 1)):
        big = json.dumps({"text": "x" * size}).encode()
        declared = await api.post(path, content=big,
                                  headers={"Content-Type": "application/json"})
        assert declared.status_code == 413, path
        assert declared.json()["code"] == "body_too_large"

        async def chunks(body: bytes = big):  # type: ignore[no-untyped-def]
            for i in range(0, len(body), 65_536):
                yield body[i:i + 65_536]

        streamed = await api.post(path, content=chunks(),
                                  headers={"Content-Type": "application/json"})
        assert streamed.status_code == 413, path


async def test_openapi_document_lists_every_route(api: httpx.AsyncClient) -> None:
    doc = (await api.get("/openapi.json")).json()
    assert set(doc["paths"]) == {
        "/runs", "/runs/{run_id}", "/runs/{run_id}/events", "/runs/{run_id}/cancel",
        "/conversations/{conversation_id}/runs", "/api/class_methods",
        "/api/reasoning_engine", "/api/stream_reasoning_engine", "/sweep",
        "/runs/{run_id}/trace", "/runs/{run_id}/transcript", "/dead-letters",
        "/dead-letters/{message_id}/redrive", "/poison", "/runs/{run_id}/approvals/{step}",
        "/runs/{run_id}/events/{name}", "/runs/{run_id}/files/{sha256}", "/evals",
        "/evals/{eval_id}", "/agents", "/schedules", "/schedules/{schedule_id}",
        "/schedules/{schedule_id}/pause", "/schedules/{schedule_id}/resume",
        "/schedules/{schedule_id}/trigger", "/schedules/{schedule_id}/backfill", "/limits",
    }
    events = doc["paths"]["/runs/{run_id}/events"]["get"]["responses"]["200"]["content"]
    assert {"application/x-ndjson", "text/event-stream"} <= set(events)
    create = doc["paths"]["/runs"]["post"]
    assert {"202", "409", "413", "422"} <= set(create["responses"])
    assert any(p["name"].lower() == "idempotency-key" for p in create["parameters"])
