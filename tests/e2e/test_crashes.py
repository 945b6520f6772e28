"""Processes killed at the exact commit boundaries, and the dead-letter path, on the emulators."""

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
    transcript = await stack.store().load_transcript(run.conversation_id)
    assert [c["role"] for c in transcript.contents] == ["user", "model"] * 3
    assert stack.model_stats()["answered"] == model_calls
    # Each tool call is one request to the tool APIs' sandbox.
    assert stack.sandbox_stats().get("requests", 0) == tool_calls


async def test_a_step_that_exhausts_its_delivery_attempts_is_dead_lettered(fresh_stack) -> None:
    """A model that keeps asking for more time than a request may wait (retry-after 30 s, beyond
    retry_wait_seconds) releases its step on every delivery; Pub/Sub's dead-letter policy ends
    it, and the run fails with the step's last error as its cause.

    Shipped engine settings; the push delivery keeps production's policy shape at a tenth of its
    time (backoff 1, 2, 4, 8 s) and Pub/Sub's minimum of 5 attempts, so this takes ~20 s, not
    ~3 minutes."""
    stack: RunningStack = fresh_stack(max_delivery_attempts=5, push_time_scale=0.1)
    stack.schedule_model_faults("429:30*40")
    run_id = stack.ask("tell me a joke")
    run, _ = await stack.wait_run(run_id, timeout=120)
    assert run.status is RunStatus.FAILED
    assert run.error is not None and run.error.startswith("dead_lettered")
    assert "429" in run.error  # the cause: the step's last recorded error
    letters = await stack.store().letters.list_dead_letters()
    assert [d.data["run_id"] for d in letters] == [run_id]
    assert letters[0].data["step"] == "0000-model"
