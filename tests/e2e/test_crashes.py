"""Processes killed at the exact commit boundaries, on the emulators. (The dead-letter path on a
stack: tests/api/test_inspector.py, whose dead letter is then re-driven.)"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from ackloop.domain.records import RunStatus
from tests.support.stack import RunningStack

pytestmark = [pytest.mark.emulator, pytest.mark.slow]


async def _restart_when_killed(stack: RunningStack, name: str, stop: asyncio.Event) -> list[float]:
    """Play the platform: start a function again as soon as it dies."""
    restarts: list[float] = []
    while not stop.is_set():
        proc = stack.stack.processes[name]
        if proc.process is not None and proc.process.poll() is not None:
            await asyncio.to_thread(stack.stack.restart_service, name)
            restarts.append(time.monotonic())
        await asyncio.sleep(0.05)
    return restarts


@pytest.mark.parametrize(
    ("point", "service", "model_calls", "tool_calls"),
    [
        ("model:after_call", "model_step", 4, 2),   # the in-flight model call runs twice
        ("model:after_commit", "model_step", 3, 2),
        ("tool:after_call", "tool_step", 3, 3),     # the in-flight tool call runs twice
        ("tool:after_commit", "tool_step", 3, 2),
    ],
)
async def test_kill_at_a_fault_point_loses_nothing_and_duplicates_nothing(
    fresh_stack, tmp_path: Path, point: str, service: str, model_calls: int, tool_calls: int
) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    stack: RunningStack = fresh_stack(service_env={service: {
        "ACKLOOP_FAULT_CRASH_AT": point, "ACKLOOP_FAULT_MARKER_DIR": str(markers)}})
    stop = asyncio.Event()
    watcher = asyncio.create_task(_restart_when_killed(stack, service, stop))
    try:
        run_id = stack.ask("where am I?")
        run, steps = await stack.wait_run(run_id, timeout=90)
    finally:
        stop.set()
        restarts = await watcher
    assert len(restarts) == 1 and (markers / point.replace(":", "_")).exists()
    assert run.status is RunStatus.COMPLETED, run.error
    assert "Norman, Oklahoma" in (run.answer or "")
    assert [s.key for s in steps] == [
        "0000-model", "0000-tool-000", "0001-model", "0001-tool-000", "0002-model"]
    transcript = await stack.store().transcript.load_transcript(run.conversation_id)
    assert [c["role"] for c in transcript.contents] == ["user", "model"] * 3
    assert stack.model_stats()["answered"] == model_calls
    # Each tool call is one request to the tool APIs' sandbox.
    assert stack.sandbox_stats().get("requests", 0) == tool_calls
