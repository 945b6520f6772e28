"""The local wake queue: a real process taking Cloud Tasks' create-task requests, as the
runtime's waker sends them, and making each task's HTTP request at its time: once per task
name (a name created again is 409 ALREADY_EXISTS, as Cloud Tasks answers), again with backoff
when the target fails, and still after the queue is started again (it keeps its tasks)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from ackloop.bus.wakes import CloudTasksWaker, Wake
from ackloop_dev.devstack.emulators import free_port
from tests.support.json_server import json_server

QUEUE = "projects/p/locations/local/queues/ackloop-wakes"


def start_queue(port: int, state: Path) -> subprocess.Popen[bytes]:
    process = subprocess.Popen([sys.executable, "-m", "ackloop_dev.devstack.task_queue",
                                "--port", str(port), "--state", str(state)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/_stats", timeout=1)
            return process
        except httpx.HTTPError:
            time.sleep(0.05)
    process.kill()
    raise RuntimeError("the task queue did not start")


def stats(port: int) -> dict[str, Any]:
    answer: dict[str, Any] = httpx.get(f"http://127.0.0.1:{port}/_stats", timeout=5).json()
    return answer


def until(check: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.fixture
def target() -> Iterator[tuple[str, list[Any], list[int]]]:
    """A publish endpoint answering 500 as many times as ``failures`` holds, then 200."""
    received: list[Any] = []
    failures: list[int] = []

    def respond(path: str, _: Mapping[str, str]) -> tuple[int, Any]:
        if failures:
            failures.pop()
            return 500, {"error": "not now"}
        return 200, {"messageIds": ["1"]}

    with json_server(respond, received) as url:
        yield url.removeprefix("http://"), received, failures


def arm(port: int, pubsub: str, wake: Wake) -> None:
    async def go() -> None:
        waker = CloudTasksWaker(QUEUE, None, "p", emulator_host=f"127.0.0.1:{port}",
                                pubsub_emulator_host=pubsub)
        try:
            await waker.arm(wake)
        finally:
            await waker.aclose()

    asyncio.run(go())


def test_a_wake_is_published_once_at_its_time_and_kept_across_a_restart(
        target: tuple[str, list[Any], list[int]], tmp_path: Path) -> None:
    pubsub, received, failures = target
    port = free_port()
    state = tmp_path / "tasks.jsonl"
    queue = start_queue(port, state)
    try:
        now = time.time()
        arm(port, pubsub, Wake("soon", now + 0.5, "steps", b'{"a":1}', {"run_id": "r"}))
        arm(port, pubsub, Wake("soon", now + 0.5, "steps", b'{"a":1}'))  # absorbed
        arm(port, pubsub, Wake("later", now + 4.0, "steps", b'{"b":2}'))
        assert stats(port)["held"] == 2
        until(lambda: len(received) == 1)
        assert received[0] == {"messages": [{"data": "eyJhIjoxfQ==",
                                             "attributes": {"run_id": "r"}}]}
        assert stats(port)["held"] == 1
        queue.terminate()
        queue.wait(10)
        queue = start_queue(port, state)  # started again: "later" is still held
        assert stats(port)["held"] == 1
        failures.append(1)  # its first publish fails: it is tried again
        until(lambda: len(received) == 3)
        assert received[1] == received[2] == {"messages": [{"data": "eyJiIjoyfQ=="}]}
        after = stats(port)
        assert (after["held"], after["dispatched"], after["retried"]) == (0, 1, 1)
        time.sleep(0.5)
        assert len(received) == 3  # nothing more: "soon" was not dispatched again
        arm(port, pubsub, Wake("soon", time.time(), "steps", b"{}"))  # a done name: absorbed
        time.sleep(0.5)
        assert len(received) == 3
    finally:
        queue.terminate()
        queue.wait(10)


def test_a_malformed_task_is_refused_with_what_to_fix(tmp_path: Path) -> None:
    port = free_port()
    queue = start_queue(port, tmp_path / "tasks.jsonl")
    try:
        answer = httpx.post(f"http://127.0.0.1:{port}/v2/{QUEUE}/tasks", json={"task": {}})
        assert answer.status_code == 400
        assert "needs a name and an httpRequest" in answer.text
    finally:
        queue.terminate()
        queue.wait(10)
