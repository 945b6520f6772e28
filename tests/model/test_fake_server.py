"""The fake Gemini server itself: fault specs, concurrency, admin endpoints, and as a process."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

import ackloop
from ackloop.domain.errors import ModelRetryableError
from ackloop.model.base import ModelRequest
from ackloop.model.gemini import GeminiModel
from ackloop_dev.fakes.gemini_faults import Fault, FaultPlan, parse_fault_spec
from ackloop_dev.fakes.gemini_server import FakeGeminiServer

# Where the ackloop package lives, so the child process imports the same code.
LIBRARY_ROOT = str(Path(ackloop.__file__).resolve().parents[1])
REQUEST = ModelRequest(
    model="gemini-test",
    system_instruction="",
    contents=[{"role": "user", "parts": [{"text": "tell me a joke"}]}],
)


def test_fault_spec_syntax() -> None:
    assert parse_fault_spec("429:2, 500*2,ok,delay:0.5") == [
        Fault("429", 2.0),
        Fault("500"),
        Fault("500"),
        Fault("ok"),
        Fault("delay", 0.5),
    ]
    with pytest.raises(ValueError):
        parse_fault_spec("teapot")
    with pytest.raises(ValueError):
        parse_fault_spec("delay")


def test_random_faults_repeat_with_the_same_seed() -> None:
    def draw(seed: int) -> list[str]:
        plan = FaultPlan()
        plan.set_random(0.3, parse_fault_spec("500,429:1"), seed)
        return [fault.kind if (fault := plan.next()) else "ok" for _ in range(400)]

    counts = Counter(draw(7))
    assert draw(7) == draw(7) and draw(7) != draw(8)
    assert 80 <= counts["500"] + counts["429"] <= 160  # about 30% of 400


async def test_serves_concurrent_requests_in_parallel() -> None:
    with FakeGeminiServer(faults="delay:0.5*8") as server:
        model = GeminiModel(api_key="k", base_url=server.url)
        started = time.monotonic()
        turns = await asyncio.gather(*(model.generate(REQUEST) for _ in range(8)))
        elapsed = time.monotonic() - started
        stats = server.stats()

    assert all(turn.text for turn in turns)
    assert elapsed < 2.0  # eight half-second answers overlapped
    assert stats["requests"] == 8 and stats["faults_served"] == {"delay": 8}
    # It counts the calls it answered at once (what a concurrency limit is checked against).
    assert stats["in_flight"] == 0 and stats["in_flight_max"] == 8


async def test_counts_the_most_calls_answered_at_once() -> None:
    with FakeGeminiServer(faults="delay:0.3*6") as server:
        model = GeminiModel(api_key="k", base_url=server.url)
        for _ in range(3):  # two at a time, three times
            await asyncio.gather(model.generate(REQUEST), model.generate(REQUEST))
        assert server.stats()["in_flight_max"] == 2
        server.reset()
        assert server.stats()["in_flight_max"] == 0


async def test_admin_endpoints_schedule_faults_and_report_counts() -> None:
    with FakeGeminiServer() as server:
        async with httpx.AsyncClient(base_url=server.url) as admin:
            health = await admin.get("/")
            scheduled = await admin.post("/_admin/faults", json={"faults": "503"})
            with pytest.raises(ModelRetryableError):
                await GeminiModel(api_key="k", base_url=server.url).generate(REQUEST)
            stats = (await admin.get("/_admin/stats")).json()
            bodies = (await admin.get("/_admin/requests")).json()["requests"]
            bad = await admin.post("/_admin/faults", json={"faults": "teapot"})

    assert health.status_code == 200
    assert scheduled.json()["faults_pending"] == 1
    assert stats["requests"] == 1 and stats["faults_served"] == {"503": 1}
    assert bodies[0]["contents"][0]["parts"][0]["text"] == "tell me a joke"
    assert bad.status_code == 400


@pytest.mark.slow
async def test_runs_as_a_process_until_sigterm() -> None:
    env = os.environ | {"PYTHONPATH": LIBRARY_ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    process = await asyncio.create_subprocess_exec(
        *[sys.executable, "-m", "ackloop_dev.fakes.gemini_server", "--port", "0",
          "--faults", "500"],
        stdout=asyncio.subprocess.PIPE,
        env=env,
    )
    try:
        assert process.stdout is not None
        banner = (await asyncio.wait_for(process.stdout.readline(), timeout=30)).decode()
        url = banner.strip().rsplit(" ", 1)[-1]
        model = GeminiModel(api_key="k", base_url=url)
        with pytest.raises(ModelRetryableError):
            await model.generate(REQUEST)
        turn = await model.generate(REQUEST)
        async with httpx.AsyncClient(base_url=url) as admin:
            stats = (await admin.get("/_admin/stats")).json()
    finally:
        process.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(process.wait(), timeout=10)

    assert banner.startswith("fake Gemini server listening on http://127.0.0.1:")
    assert turn.text is not None and len(turn.text.splitlines()) == 3
    assert stats == {
        "requests": 2,
        "answered": 1,
        "faults_served": {"500": 1},
        "faults_pending": 0,
        "models": {"gemini-test": 2},
        "quota": {"requests_per_minute": None, "input_tokens_per_minute": None,
                  "style": "gemini-api", "rounding": "floor",
                  "in_window": {"requests": 0, "input_tokens": 0}, "refused": 0},
        "in_flight": 0,
        "in_flight_max": 1,
    }
    assert code == 0
