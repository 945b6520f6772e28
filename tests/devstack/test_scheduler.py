"""The local sweep job: a real process POSTing to a real HTTP endpoint, as Cloud Scheduler does."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from typing import Any

import httpx
import pytest

from ackloop_dev.devstack.emulators import free_port
from tests.support.json_server import json_server


@pytest.fixture
def fake_api() -> Iterator[tuple[str, list[str]]]:
    calls: list[str] = []

    def respond(path: str, _: Mapping[str, str]) -> tuple[int, Any]:
        calls.append(path)
        return 200, {"swept": [{"run_id": f"run-{len(calls)}", "action": "resumed",
                                "detail": "model step re-sent"}]}

    with json_server(respond) as url:
        yield f"{url}/sweep", calls


def start_job(url: str, port: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "ackloop_dev.devstack.scheduler", "--url", url,
                             "--every", "0.2", "--stats-port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stats_once(port: int, counter: str, at_least: int) -> dict[str, Any]:
    """The job's /_stats once ``counter`` reached ``at_least`` (or after 30 s)."""
    deadline = time.monotonic() + 30
    stats: dict[str, Any] = {}
    while time.monotonic() < deadline:
        try:
            stats = httpx.get(f"http://127.0.0.1:{port}/_stats", timeout=2).json()
        except httpx.HTTPError:
            stats = {}
        if stats.get(counter, 0) >= at_least:
            break
        time.sleep(0.1)
    return stats


def test_the_job_posts_to_sweep_on_schedule_and_reports_what_was_swept(
    fake_api: tuple[str, list[str]],
) -> None:
    url, calls = fake_api
    port = free_port()
    proc = start_job(url, port)
    try:
        stats = stats_once(port, "calls", 3)
        assert stats["calls"] >= 3 and stats["failures"] == 0, stats
        assert set(calls) == {"/sweep"} and len(calls) >= stats["calls"]
        assert stats["swept"] == {"resumed": stats["calls"]}  # every answer's runs counted
    finally:
        proc.kill()
        proc.wait()


def test_a_failing_api_is_counted_not_fatal() -> None:
    port = free_port()
    dead = f"http://127.0.0.1:{free_port()}/sweep"  # nothing listens there
    proc = start_job(dead, port)
    try:
        stats = stats_once(port, "failures", 2)
        assert stats["failures"] >= 2 and proc.poll() is None, stats
    finally:
        proc.kill()
        proc.wait()
