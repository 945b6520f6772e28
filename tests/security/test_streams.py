"""Many idle event streams on a long run: 400 clients follow the events of the longest run the
shipped budget ceilings allow (max_steps_ceiling model steps, one tool call each)
while a caller keeps reading the run. The API process's resident memory (real process, /proc)
stays under 256 MiB, no stream or read is answered 5xx (a stream over the process's limit may be
refused with 503 and Retry-After, which is counted apart), and reads keep being answered."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from ackloop.config.settings import Settings
from tests.security.figures import FIGURES
from tests.security.probes import bound_s, rss_sampler
from tests.support.stack import RunningStack

pytestmark = [pytest.mark.emulator, pytest.mark.slow, pytest.mark.timeout(420)]

STREAMS = 400
CALLS = Settings().max_steps_ceiling - 1
"""Tool calls of the long run: 2 * CALLS + 1 steps (199 with the shipped ceiling of 100)."""
RSS_LIMIT_MIB = 256
RUN_WAIT_S = 300


async def follow(client: httpx.AsyncClient, url: str, outcome: dict[str, int]) -> None:
    try:
        async with client.stream("GET", url, timeout=httpx.Timeout(bound_s("api"),
                                                                   connect=30)) as response:
            key = str(response.status_code)
            if response.status_code == 503 and response.headers.get("retry-after"):
                key = "503 refused (Retry-After)"
            outcome[key] = outcome.get(key, 0) + 1
            async for _ in response.aiter_raw():
                pass
    except httpx.HTTPError as exc:
        outcome[type(exc).__name__] = outcome.get(type(exc).__name__, 0) + 1


async def read_while(client: httpx.AsyncClient, url: str, running: asyncio.Event,
                     held: list[float], statuses: list[int]) -> None:
    while not running.is_set():
        began = time.monotonic()
        try:
            statuses.append((await client.get(url, timeout=bound_s("api"))).status_code)
        except httpx.HTTPError:
            statuses.append(0)
        held.append(time.monotonic() - began)
        await asyncio.sleep(1.0)


def test_idle_streams_on_a_long_run_keep_memory_bounded(security_stack: RunningStack) -> None:
    stack = security_stack
    api = stack.state.api_url
    created = httpx.post(f"{api}/runs", timeout=30, json={
        "text": f"reference run, calls={CALLS}", "agent": "reference-long",
        "options": {"max_steps": CALLS + 1, "max_tool_calls": CALLS}})
    assert created.status_code == 202, f"the long run was refused: {created.text}"
    run_id = created.json()["run_id"]
    pid = stack.stack.processes["api"].pid
    assert pid is not None
    outcome: dict[str, int] = {}
    held: list[float] = []
    reads: list[int] = []

    async def scenario() -> None:
        done = asyncio.Event()
        limits = httpx.Limits(max_connections=STREAMS + 10, max_keepalive_connections=0)
        async with httpx.AsyncClient(limits=limits) as streams, httpx.AsyncClient() as reader:
            followers = [asyncio.create_task(follow(streams, f"{api}/runs/{run_id}/events",
                                                    outcome)) for _ in range(STREAMS)]
            poller = asyncio.create_task(read_while(reader, f"{api}/runs/{run_id}", done, held,
                                                    reads))
            deadline = time.monotonic() + RUN_WAIT_S
            while time.monotonic() < deadline:
                run = await stack.store().get_run(run_id)
                if run is not None and run.status.terminal:
                    break
                await asyncio.sleep(1.0)
            done.set()
            await asyncio.wait_for(asyncio.gather(*followers, poller), bound_s("api"))

    with rss_sampler(pid) as readings:
        asyncio.run(scenario())
    peak = max(readings)
    FIGURES.idle_streams = STREAMS
    FIGURES.peak_api_rss_mib = max(FIGURES.peak_api_rss_mib or 0.0, peak)
    FIGURES.requests += STREAMS + len(reads)
    for seconds in held:
        FIGURES.held("api GET /runs/{id} during the streams", seconds)
    errors = {k: v for k, v in outcome.items() if not (k.startswith("2") or k.startswith("503 "))}
    failed_reads = [s for s in reads if s == 0 or s >= 500]
    FIGURES.server_errors += sum(v for k, v in errors.items() if k[:1] == "5") + len(
        [s for s in reads if s >= 500])
    FIGURES.hangs += sum(v for k, v in errors.items() if not k[:1].isdigit()) + reads.count(0)
    run = asyncio.run(stack.store().get_run(run_id))
    assert run is not None and run.status.value == "completed", f"the long run: {run}"
    assert peak < RSS_LIMIT_MIB, f"API RSS peaked at {peak:.0f} MiB with {STREAMS} streams"
    assert not errors, f"streams: {outcome}"
    assert not failed_reads, f"reads of the run during the streams: {reads}"
