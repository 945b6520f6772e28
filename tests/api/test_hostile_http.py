"""Hostile HTTP callers against the api process of a stack (real uvicorn on 127.0.0.1, shipped
settings): many idle event streams, text that is not Unicode, budgets above the
deployment's ceilings."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from ackloop.config.settings import Settings
from ackloop.domain.keys import run_id_for_request
from tests.api.test_runs_http import wait_finished
from tests.support.long_runs import copy_longer
from tests.support.stack import RunningStack

pytestmark = [pytest.mark.emulator, pytest.mark.slow]

SHIPPED = Settings()
MIB = 1024 * 1024


def rss_bytes(pid: int, field: str = "VmRSS") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} for {pid}")


async def open_idle_stream(host: str, port: int, path: str
                           ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A client that asks for a stream and then reads nothing."""
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    await writer.drain()
    return reader, writer


READ_BOUND_S = 2.0
"""The median time a read of the run may take while the streams are open (S10)."""


async def test_400_idle_streams_on_a_601_step_run_keep_the_api_small(
    fresh_stack: Callable[..., RunningStack],
) -> None:
    running = fresh_stack()
    url = running.state.api_url
    async with httpx.AsyncClient(base_url=url, timeout=30) as api:
        # A short run of the long agent, copied into a run of 300 tool turns: the documents
        # its 601 steps would have left, without running them.
        created = await api.post("/runs", json={"agent": "reference-long",
                                                "text": "reference run, calls=2"})
        assert created.status_code == 202, created.text
        await wait_finished(api, created.json()["run_id"])
        run_id = await copy_longer(running.store(), created.json()["run_id"], turns=300)
        run = (await api.get(f"/runs/{run_id}")).json()
        assert run["status"] == "completed" and len(run["steps"]) == 601

    pid = running.state.pids["api"]
    assert "ackloop" in Path(f"/proc/{pid}/cmdline").read_text()  # noqa: ASYNC240
    before = rss_bytes(pid)
    host, port = "127.0.0.1", running.state.ports["api"]
    streams = await asyncio.gather(*(open_idle_stream(host, port, f"/runs/{run_id}/events")
                                     for _ in range(400)))
    peak = before
    # S10: another caller reads the run, one read after another, while every stream is open
    # and catching up on its 601 steps: the streams take turns (4 at a time), so the reads
    # are answered within the bound (a read of this run alone takes about 0.5 s here).
    reads: list[float] = []
    async with httpx.AsyncClient(base_url=url, timeout=30) as reader:
        for _ in range(5):
            started = time.monotonic()
            answer = await reader.get(f"/runs/{run_id}")
            assert answer.status_code == 200, answer.text
            reads.append(time.monotonic() - started)
    for _ in range(30):  # 6 s with every stream open and unread (VmHWM below keeps the peak)
        peak = max(peak, rss_bytes(pid))
        await asyncio.sleep(0.2)
    peak = max(peak, rss_bytes(pid, "VmHWM"))
    reads.sort()
    print(f"GET /runs/{{id}} during the streams: median {reads[2]:.2f} s, max {reads[-1]:.2f} s")
    assert reads[2] <= READ_BOUND_S, f"reads during the streams: {reads}"

    statuses: dict[int, int] = {}
    refusals = set()
    for reader, writer in streams:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
        status = int(head.split(b" ", 2)[1])
        statuses[status] = statuses.get(status, 0) + 1
        if status == 503:
            body = await asyncio.wait_for(reader.read(2000), 30)
            refusals.add(body.decode().rsplit("\n", 1)[-1])
        writer.close()
    print(f"API RSS {before / MIB:.0f} MiB before, peak {peak / MIB:.0f} MiB; {statuses}")
    assert peak < 256 * MIB, f"API RSS {before / MIB:.0f} MiB -> peak {peak / MIB:.0f} MiB"
    limit = SHIPPED.api_stream_max_open
    assert statuses == {200: min(400, limit), 503: 400 - min(400, limit)}, statuses
    assert all("event streams open" in r and "too_many_streams" in r for r in refusals)

    # Every slot is given back: a stream opens again once they are closed.
    async with httpx.AsyncClient(base_url=url, timeout=30) as api:
        deadline = time.monotonic() + 60
        while True:
            answer = await api.get(f"/runs/{run_id}/events")
            if answer.status_code == 200 or time.monotonic() > deadline:
                break
            await asyncio.sleep(1)
        assert answer.status_code == 200 and answer.text.count('"type":"step"') == 601


async def test_a_lone_surrogate_anywhere_in_a_body_is_4xx(api: httpx.AsyncClient) -> None:
    schema = ('{"type": "object", "properties": {"a": {"type": "string", '
              '"description": "\\ud800"}}}')
    bodies = {
        "output_schema value": '{"text": "hi", "options": {"output_schema": ' + schema + "}}",
        "output_schema key": '{"text": "hi", "options": {"output_schema": '
                             '{"type": "object", "\\udfff": 1}}}',
        "unknown field": '{"text": "hi", "\\ud800": 1}',
        "text": '{"text": "\\ud800"}',
    }
    for name, raw in bodies.items():
        response = await api.post("/runs", content=raw.encode(),
                                  headers={"Content-Type": "application/json"})
        assert 400 <= response.status_code < 500, (name, response.status_code, response.text)
        assert response.json()["code"] == "invalid_request", name
    runtime = await api.post("/api/reasoning_engine", content=(
        '{"class_method": "query", "input": {"message": "hi", "options": {"output_schema": '
        + schema + "}}}").encode(), headers={"Content-Type": "application/json"})
    assert runtime.status_code == 422, runtime.text
    for raw in ('{"eval_id": "ev-x", "name": "\\ud800"}',
                '{"eval_id": "ev-x", "name": "n", "cases": [{"name": "c", "answer": '
                '{"\\udfff": [1]}}]}'):
        report = await api.put("/evals/ev-x", content=raw.encode(),
                               headers={"Content-Type": "application/json"})
        assert report.status_code == 422, (raw, report.text)


async def test_budgets_above_the_deployment_ceilings_are_refused(
    api: httpx.AsyncClient, api_stack: RunningStack
) -> None:
    asks: dict[str, Any] = {
        "max_steps": SHIPPED.max_steps_ceiling + 1,
        "max_seconds": SHIPPED.max_seconds_ceiling + 1,
        "max_tool_calls": SHIPPED.max_tool_calls_ceiling + 1,
    }
    for name, value in asks.items():
        key = f"ceiling-{uuid.uuid4().hex[:8]}"
        response = await api.post("/runs", json={"text": "hi", "options": {name: value}},
                                  headers={"Idempotency-Key": key})
        assert response.status_code == 422, (name, response.text)
        assert response.json()["code"] == "over_ceiling"
        assert f"{name} {value:g} is above this deployment's ceiling" in response.json()["error"]
        assert await api_stack.store().runs.get_run(run_id_for_request(key)) is None
    at = {"max_steps": SHIPPED.max_steps_ceiling, "max_tool_calls": SHIPPED.max_tool_calls_ceiling}
    accepted = await api.post("/runs", json={"text": "write me a haiku", "options": at})
    assert accepted.status_code == 202, accepted.text
    await wait_finished(api, accepted.json()["run_id"])

    # The same ceilings hold for a query published straight to the topic: acknowledged as
    # poison, no run.
    run_id = api_stack.ask("hi", options={"max_steps": SHIPPED.max_steps_ceiling + 1})
    store = api_stack.store()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        poison = [p for p in await store.letters.list_poison() if p.get("reason") == "over_ceiling"]
        if poison:
            break
        await asyncio.sleep(0.5)
    assert poison and "max_steps" in poison[-1]["error"]
    assert await store.runs.get_run(run_id) is None


def test_the_benchmark_agents_are_served_only_by_the_development_catalog() -> None:
    from ackloop.agents.builtin import builtin_agents
    from ackloop_dev.agents import catalog

    http = httpx.AsyncClient()
    assert [a.name for a in builtin_agents(Settings(), http)] == ["default"]
    served = [a.name for a in catalog(Settings(), http)]
    assert served == ["default", "reference", "reference-long", "reference-padded",
                      "approval-demo", "follow-up",
                      "research-team", "researcher", "critic", "writer"]
