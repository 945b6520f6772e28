"""The Agent Runtime container contract over real HTTP, and a stream over a retried step."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest

from tests.support.stack import RunningStack

pytestmark = [pytest.mark.emulator, pytest.mark.slow]


async def test_query_answers_output(api: httpx.AsyncClient) -> None:
    response = await api.post("/api/reasoning_engine", json={
        "class_method": "query", "input": {"message": "what is my ip address?"}})
    assert response.status_code == 200, response.text
    output = response.json()["output"]
    assert output["finished"] is True and output["status"] == "completed"
    assert output["answer"] and output["run_id"].startswith("run-")

    got = await api.post("/api/reasoning_engine", json={
        "class_method": "get_run", "input": {"run_id": output["run_id"]}})
    assert got.json()["output"]["steps"][0]["key"] == "0000-model"


async def test_query_gives_up_waiting_with_the_run_id_and_status(
    api: httpx.AsyncClient, api_stack: RunningStack,
) -> None:
    api_stack.schedule_model_faults("delay:3")
    began = time.monotonic()
    response = await api.post("/api/reasoning_engine", json={
        "class_method": "query", "input": {"message": "tell me a joke", "wait_seconds": 1}})
    took = time.monotonic() - began
    output = response.json()["output"]
    assert response.status_code == 200 and took < 2.5
    assert output["finished"] is False and output["status"] == "running"
    assert output["answer"] is None
    # The run goes on; the id is enough to follow it.
    events = await api.get(f"/runs/{output['run_id']}/events")
    assert json.loads(events.text.splitlines()[-1])["status"] == "completed"


async def test_stream_query_streams_ndjson_lines_until_the_answer(api: httpx.AsyncClient,
                                                                   api_stack: RunningStack,
                                                                   ) -> None:
    api_stack.schedule_model_faults("delay:0.7*4")
    lines: list[dict[str, Any]] = []
    arrived: list[float] = []
    async with api.stream("POST", "/api/stream_reasoning_engine", json={
        "class_method": "stream_query",
        "input": {"message": "are there any weather alerts where I am?"}}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("application/x-ndjson")
        async for line in response.aiter_lines():
            lines.append(json.loads(line))
            arrived.append(time.monotonic())
    assert lines[0]["type"] == "started" and lines[0]["created"] is True
    # Deltas (the answer's text while it is written) may come between them.
    assert [x["type"] for x in lines[1:] if x["type"] != "delta"] == ["step"] * 7 + ["finished"]
    assert "Tornado Watch" in lines[-1]["answer"]
    assert arrived[-1] - arrived[0] > 2.0  # lines came as the run progressed


async def test_unknown_class_method_is_400_naming_the_valid_ones(api: httpx.AsyncClient) -> None:
    response = await api.post("/api/reasoning_engine", json={"class_method": "fly"})
    assert response.status_code == 400
    assert response.json()["valid_class_methods"] == ["query", "get_run", "cancel_run"]
    assert "query" in response.json()["error"]
    streaming = await api.post("/api/stream_reasoning_engine", json={"class_method": "query"})
    assert streaming.status_code == 400
    assert streaming.json()["valid_class_methods"] == ["stream_query"]
    bad_input = await api.post("/api/reasoning_engine", json={
        "class_method": "query", "input": {"message": "", "color": 1}})
    assert bad_input.status_code == 422
    assert {f["field"] for f in bad_input.json()["fields"]} == {"input.message", "input.color"}


async def test_class_methods_are_declared_for_the_deployment_spec(api: httpx.AsyncClient) -> None:
    methods = (await api.get("/api/class_methods")).json()["class_methods"]
    assert {(m["name"], m["api_mode"]) for m in methods} == {
        ("query", ""), ("stream_query", "stream"), ("get_run", ""), ("cancel_run", "")}
    query = next(m for m in methods if m["name"] == "query")
    assert "message" in query["parameters"]["required"]


async def test_stream_over_a_retried_step_shows_it_once(api: httpx.AsyncClient,
                                                        api_stack: RunningStack) -> None:
    # The first model call is refused with a retry-after beyond the in-request bound
    # (retry_wait_seconds, 20 s): the step is released and delivered again.
    api_stack.schedule_model_faults("429:21")
    run_id = (await api.post("/runs", json={"text": "what is my ip address?"})).json()["run_id"]
    response = await api.get(f"/runs/{run_id}/events")
    events = [json.loads(line) for line in response.text.splitlines()]
    events = [e for e in events if e["type"] != "delta"]
    keys = [e["cursor"] for e in events]
    assert keys == ["0000-model", "0000-tool-000", "0001-model", "end"]
    assert events[0]["step"]["attempts"] >= 2  # delivered (and claimed) more than once
    assert events[-1]["status"] == "completed"
