"""Live token streaming end to end: a stack of real processes on the emulators, the model step
calling the fake Gemini server through google-genai's streaming client, the API reading the
deltas from Firestore. Prints the delay from a chunk leaving the fake model to its text
reaching the client (a figure to read, not asserted)."""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from tests.api.conftest import API_ENV
from tests.support.emulators import EmulatorSession
from tests.support.stack import RunningStack, stack_factory

QUESTION = "write me something about the quiet harbour"  # the seed agent answers in a haiku


@pytest.fixture(scope="module")
def streaming_stack(emulator_session: EmulatorSession, tmp_path_factory: pytest.TempPathFactory
                    ) -> Iterator[RunningStack]:
    """A stack whose fake model streams 6 characters every 150 ms; redelivery at a tenth of
    production's backoff, so a retried step comes back in about a second."""
    with stack_factory(emulator_session, tmp_path_factory.mktemp("streaming"), API_ENV) as make:
        running = make(push_time_scale=0.1)
        httpx.post(f"{running.fake_gemini}/_admin/stream", json={"delay": 0.15, "chunk_chars": 6},
                   timeout=5).raise_for_status()
        yield running


@pytest.fixture
async def client(streaming_stack: RunningStack) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=streaming_stack.state.api_url, timeout=60) as api:
        yield api


async def _follow(api: httpx.AsyncClient, run_id: str
                  ) -> list[tuple[dict[str, Any], float, str | None]]:
    """Every event with when it arrived and, for the first delta of each attempt, the status
    of its step as GET /runs/{id} read it right then."""
    seen: list[tuple[dict[str, Any], float, str | None]] = []
    attempts: set[int] = set()
    async with api.stream("GET", f"/runs/{run_id}/events") as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            event, at, status = json.loads(line), time.time(), None
            if event["type"] == "delta" and event["attempt"] not in attempts:
                attempts.add(event["attempt"])
                steps = (await api.get(f"/runs/{run_id}")).json()["steps"]
                status = next(s["status"] for s in steps if s["key"] == event["step"])
            seen.append((event, at, status))
    return seen


def _latencies(stack: RunningStack, deltas: list[tuple[dict[str, Any], float]]) -> list[float]:
    """For each delta, from when the fake model sent the last chunk whose text it carries to
    when the client read it."""
    chunks = httpx.get(f"{stack.fake_gemini}/_admin/chunks", timeout=5).json()["chunks"]
    ends, offset = [], 0
    for chunk in chunks:
        offset += len(chunk["text"])
        ends.append((offset, chunk["at"]))
    latencies, shown = [], 0
    for delta, received in deltas:
        shown += len(delta["text"])
        sent = next(at for end, at in ends if end >= shown)
        latencies.append(received - sent)
    return latencies


async def test_deltas_arrive_before_the_step_completes_and_add_up_to_its_text(
    client: httpx.AsyncClient, streaming_stack: RunningStack,
) -> None:
    (await client.post(f"{streaming_stack.fake_gemini}/_admin/reset")).raise_for_status()
    run_id = (await client.post("/runs", json={"text": QUESTION})).json()["run_id"]
    seen = await _follow(client, run_id)
    run = (await client.get(f"/runs/{run_id}")).json()

    kinds = [e["type"] for e, _, _ in seen]
    deltas = [(e, at) for e, at, _ in seen if e["type"] == "delta"]
    assert kinds[-2:] == ["step", "finished"] and set(kinds[:-2]) == {"delta"}
    assert len(deltas) >= 3, "the answer came in several deltas"
    # The first delta was read while its step was still running.
    assert seen[0][2] == "running"
    assert {(e["step"], e["attempt"]) for e, _ in deltas} == {("0000-model", 1)}
    assert [e["seq"] for e, _ in deltas] == list(range(len(deltas)))
    text = "".join(e["text"] for e, _ in deltas)
    step = run["steps"][0]
    assert text == step["result"]["text"] == run["answer"]
    # The writes were bounded: the 150 ms chunks went out in fewer, batched writes.
    chunks = (await client.get(f"{streaming_stack.fake_gemini}/_admin/chunks")).json()
    assert len(deltas) <= len(chunks["chunks"])
    writes = step["cost"]["firestore_writes"]
    latencies = _latencies(streaming_stack, deltas)
    print(f"\ndelta latency, fake model's chunk -> client, {len(latencies)} deltas of "
          f"{len(chunks['chunks'])} chunks: median {statistics.median(latencies) * 1000:.0f} ms, "
          f"max {max(latencies) * 1000:.0f} ms; the step's Firestore writes: {writes}")


async def test_a_step_retried_after_some_chunks_streams_again_under_attempt_2(
    client: httpx.AsyncClient, streaming_stack: RunningStack,
) -> None:
    """The call fails after 5 chunks: the same request takes attempt 2 and calls again."""
    streaming_stack.schedule_model_faults("midstream:5")
    run_id = (await client.post("/runs", json={"text": QUESTION + " at dusk"})).json()["run_id"]
    seen = await _follow(client, run_id)
    run = (await client.get(f"/runs/{run_id}")).json()
    transcript = (await client.get(f"/runs/{run_id}/transcript")).json()["contents"]

    deltas = [e for e, _, _ in seen if e["type"] == "delta"]
    first = "".join(e["text"] for e in deltas if e["attempt"] == 1)
    second = "".join(e["text"] for e in deltas if e["attempt"] == 2)
    assert [e["attempt"] for e in deltas] == sorted(e["attempt"] for e in deltas)
    assert {e["attempt"] for e in deltas} == {1, 2}
    assert [e["seq"] for e in deltas if e["attempt"] == 2] == list(
        range(len([e for e in deltas if e["attempt"] == 2])))
    # Attempt 1 showed some of the 5 chunks sent before the failure (what was not written yet
    # when the call failed is dropped); attempt 2 the whole answer.
    assert first and second.startswith(first) and len(first) <= 30
    assert [s for _, _, s in seen if s] == ["running", "running"]
    step = run["steps"][0]
    assert step["attempts"] == 2 and second == step["result"]["text"] == run["answer"]
    assert run["status"] == "completed"
    # In the request that streamed attempt 1, not after a redelivery.
    assert step["result"]["model_retries"] == 1
    assert step["last_error"].startswith("retried in the request: ModelRetryableError")
    # The record is one turn: the user's question and one model answer.
    assert [c["role"] for c in transcript] == ["user", "model"]
    assert "".join(p.get("text", "") for p in transcript[1]["parts"]) == second
    assert seen[-1][0]["type"] == "finished"


async def test_a_step_taken_over_after_a_crash_mid_stream_streams_again_under_attempt_2(
    client: httpx.AsyncClient, streaming_stack: RunningStack,
) -> None:
    """model_step SIGKILLed once its first delta is on the stream, then started again: the
    redelivery takes the dead holder's step over (after its 10 s lease) and calls the model
    again, streaming under attempt 2."""
    run_id = (await client.post("/runs", json={"text": QUESTION + " at noon"})).json()["run_id"]
    seen: list[dict[str, Any]] = []
    async with client.stream("GET", f"/runs/{run_id}/events") as response:
        async for line in response.aiter_lines():
            seen.append(json.loads(line))
            if len(seen) == 1 and seen[0]["type"] == "delta":
                streaming_stack.stack.processes["model_step"].kill()  # its process group
                await asyncio.to_thread(streaming_stack.stack.restart_service, "model_step")
    run = (await client.get(f"/runs/{run_id}")).json()
    transcript = (await client.get(f"/runs/{run_id}/transcript")).json()["contents"]

    deltas = [e for e in seen if e["type"] == "delta"]
    assert seen[0]["attempt"] == 1 and {e["attempt"] for e in deltas} == {1, 2}
    second = "".join(e["text"] for e in deltas if e["attempt"] == 2)
    step = run["steps"][0]
    assert step["attempts"] == 2 and second == step["result"]["text"] == run["answer"]
    assert [c["role"] for c in transcript] == ["user", "model"]
    assert [e["type"] for e in seen[-2:]] == ["step", "finished"]


async def test_stream_query_and_sse_carry_the_deltas(
    client: httpx.AsyncClient, streaming_stack: RunningStack,
) -> None:
    lines: list[dict[str, Any]] = []
    async with client.stream("POST", "/api/stream_reasoning_engine", json={
            "class_method": "stream_query", "input": {"message": QUESTION + " in winter"}}
            ) as response:
        async for line in response.aiter_lines():
            lines.append(json.loads(line))
    kinds = [x["type"] for x in lines]
    assert kinds[0] == "started" and kinds[-2:] == ["step", "finished"]
    assert "delta" in kinds
    assert "".join(x["text"] for x in lines if x["type"] == "delta") == lines[-1]["answer"]

    run_id = (await client.post("/runs", json={"text": QUESTION + " in spring"})).json()[
        "run_id"]
    async with client.stream("GET", f"/runs/{run_id}/events",
                             headers={"accept": "text/event-stream"}) as response:
        body = "".join([chunk async for chunk in response.aiter_text()])
    frames = [f.splitlines() for f in body.split("\n\n") if f.strip()]
    delta_frames = [f for f in frames if f[0] == "event: delta"]
    assert delta_frames and all(len(f) == 2 for f in delta_frames)  # no id: a delta no cursor
    assert [f[0] for f in frames if f[0].startswith("id: ")] == ["id: 0000-model", "id: end"]
