"""Large files are handled a bounded number at a time in each process, and nothing is lost.

The API reads at most ``api_files_concurrency`` large bodies at once on the routes that take
files: another waits, its body unread, then gets 503 with Retry-After (and is served when sent
again). A model step whose request inlines more than 1 MiB of files holds one of
``files_inline_concurrency`` slots: another waits, then is released as retryable, and its
redelivery answers. The memory these bounds keep under the deployed limits is measured by
``python -m ackloop_dev.bench.query_files_memory``, not here.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from ackloop.api.app import create_app
from ackloop.config.settings import Settings
from ackloop.domain.keys import run_id_for_request
from ackloop.domain.wire import QueryMessage
from ackloop.engine.deps import Deps
from ackloop.files import MemoryFileStore, gate
from ackloop.model.base import ModelRequest, ModelTurn
from ackloop.model.scripted import ScriptedModel
from ackloop.model.turns import text_turn
from ackloop.testing.inprocess import InProcessLoop
from tests.api.test_auth import serving
from tests.files.test_query_files import inline, loop_of

MIB = 1024 * 1024


def body_of(data: bytes) -> bytes:
    return json.dumps({"text": "what is it?",
                       "files": [inline(data, "image/png")]}).encode()


async def held_open(body: bytes, release: asyncio.Event, started: asyncio.Event
                    ) -> AsyncIterator[bytes]:
    """``body`` sent in two halves, the second once ``release`` is set (no Content-Length)."""
    yield body[:len(body) // 2]
    started.set()
    await release.wait()
    yield body[len(body) // 2:]


async def test_the_api_reads_one_large_body_at_a_time_and_the_next_is_503_then_served(
) -> None:
    settings = Settings(lease_seconds=10.0, api_files_concurrency=1,
                        api_files_wait_seconds=0.5)
    loop = loop_of(ScriptedModel(lambda r: text_turn("ok", request=r)), settings=settings)

    async def deps() -> Deps:
        return loop.deps

    first_file, second_file = os.urandom(300_000), os.urandom(300_000)
    release, started = asyncio.Event(), asyncio.Event()
    async with serving(create_app(settings, deps=deps)) as url, \
            httpx.AsyncClient(base_url=url, timeout=30) as api:
        first = asyncio.create_task(api.post(
            "/runs", content=held_open(body_of(first_file), release, started),
            headers={"Content-Type": "application/json", "Idempotency-Key": "first"}))
        await started.wait()
        busy = await api.post("/runs", content=body_of(second_file), headers={
            "Content-Type": "application/json", "Idempotency-Key": "second"})
        small = await api.post("/runs", json={"text": "no files"})  # never waits
        release.set()
        assert (await first).status_code == 202
        again = await api.post("/runs", content=body_of(second_file), headers={
            "Content-Type": "application/json", "Idempotency-Key": "second"})
    assert busy.status_code == 503, busy.text
    assert busy.json()["code"] == "busy" and busy.headers["retry-after"] == "1"
    assert small.status_code == 202, small.text
    assert again.status_code == 202, again.text
    assert sorted(loop.deps.files.objects.values()) == sorted(  # type: ignore[attr-defined]
        [first_file, second_file])


async def test_a_large_body_waits_for_the_slot_within_the_wait() -> None:
    settings = Settings(lease_seconds=10.0, api_files_concurrency=1, api_files_wait_seconds=10)
    loop = loop_of(ScriptedModel(lambda r: text_turn("ok", request=r)), settings=settings)

    async def deps() -> Deps:
        return loop.deps

    release, started = asyncio.Event(), asyncio.Event()
    async with serving(create_app(settings, deps=deps)) as url, \
            httpx.AsyncClient(base_url=url, timeout=30) as api:
        first = asyncio.create_task(api.post(
            "/runs", content=held_open(body_of(os.urandom(300_000)), release, started),
            headers={"Content-Type": "application/json"}))
        await started.wait()
        second = asyncio.create_task(api.post("/runs", content=body_of(os.urandom(300_000)),
                                              headers={"Content-Type": "application/json"}))
        await asyncio.sleep(0.3)
        assert not second.done()  # waiting for the slot
        release.set()
        assert [(await first).status_code, (await second).status_code] == [202, 202]


def sees_inline(request: ModelRequest) -> ModelTurn:
    kinds = [k for c in request.contents for p in c.get("parts") or [] for k in p]
    return text_turn(f"saw {kinds}", request=request)


async def hold_a_slot(store: MemoryFileStore, slots: int, held: asyncio.Event,
                      release: asyncio.Event) -> None:
    """Another step of this process, its request inlining a large file, in flight."""
    from ackloop.files import for_request, stored_part

    big = await store.put(os.urandom(2 * MIB), "image/png")
    async with gate.scope(slots, 10.0):
        await for_request(store, [{"role": "user", "parts": [stored_part(big)]}])
        held.set()
        await release.wait()


async def test_a_model_step_with_large_files_waits_then_retries_and_answers() -> None:
    settings = Settings(lease_seconds=10.0, files_inline_concurrency=1,
                        files_inline_wait_seconds=0.2)
    loop: InProcessLoop = loop_of(ScriptedModel(sees_inline), settings=settings)
    store = loop.deps.files
    assert isinstance(store, MemoryFileStore)
    held, release = asyncio.Event(), asyncio.Event()
    other = asyncio.create_task(hold_a_slot(store, 1, held, release))
    await held.wait()
    files: list[dict[str, Any]] = [inline(os.urandom(2 * MIB), "image/png")]
    await loop.submit(QueryMessage.model_validate({"request_id": "big", "text": "q",
                                                   "files": files}))
    with pytest.raises(RuntimeError, match="still busy"):
        await loop.run_until_idle(max_deliveries=2)  # the query, then its model step
    step = loop.deliveries("model")[-1].outcome
    assert not step.acknowledged and step.retry_after, step  # released, to be redelivered
    release.set()
    await other
    await loop.run_until_idle()
    run = await loop.deps.store.runs.get_run(run_id_for_request("big"))
    assert run is not None and run.answer == "saw ['inline_data', 'text']", run


async def test_a_small_file_never_waits_for_a_slot() -> None:
    from ackloop.files import for_request, stored_part

    store = MemoryFileStore()
    held, release = asyncio.Event(), asyncio.Event()
    other = asyncio.create_task(hold_a_slot(store, 1, held, release))
    await held.wait()
    small = await store.put(b"\x89PNG" + b"\0" * 1000, "image/png")
    async with gate.scope(1, 0.1):
        (sent,) = await for_request(store, [{"role": "user", "parts": [stored_part(small)]}])
    assert base64.b64decode(sent["parts"][0]["inline_data"]["data"]).startswith(b"\x89PNG")
    release.set()
    await other
