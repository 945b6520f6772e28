"""Approvals on a stack of real processes on the emulators: a decision whose publish was lost is
resumed by the sweeper, and a crash after the decision loses nothing. (A run that waits for its
approval with every process stopped: ``tests/e2e/test_waits.py``.)"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest

from ackloop.domain.records import RunStatus, StepDecision, StepStatus
from tests.support.stack import RunningStack

pytestmark = [pytest.mark.emulator, pytest.mark.slow]

PAYMENT = "0000-tool-000"


async def _wait_status(stack: RunningStack, run_id: str, status: StepStatus,
                       timeout: float = 60) -> None:
    store = stack.store()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        (step,) = await store.steps.get_steps(run_id, [PAYMENT])
        if step is not None and step.status is status:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"step {PAYMENT} of {run_id} never became {status}")


async def test_a_decision_whose_publish_was_lost_is_resumed_by_the_sweeper(
        processes_back: RunningStack) -> None:
    stack = processes_back
    run_id = stack.ask("pay 40 to Ada", agent="approval-demo")
    await _wait_status(stack, run_id, StepStatus.WAITING)
    # The decider died right after its commit: the decision is recorded, nothing was sent.
    await stack.store().waits.decide_step(run_id, PAYMENT, StepDecision(
        decision="approve", by="alice", at=time.time()))
    await asyncio.sleep(3)
    (step,) = await stack.store().steps.get_steps(run_id, [PAYMENT])
    assert step is not None and step.status is StepStatus.WAITING  # nothing resumed it yet
    async with httpx.AsyncClient(base_url=stack.state.api_url, timeout=30) as api:
        swept = (await api.post("/sweep", params={"stale_seconds": 1})).json()["swept"]
    assert {"run_id": run_id, "action": "resumed", "detail": f"re-sent {PAYMENT}"} in swept
    run, _ = await stack.wait_run(run_id, timeout=60)
    assert run.status is RunStatus.COMPLETED and '"status": "sent"' in (run.answer or "")


async def test_a_tool_step_killed_right_after_the_decision_resumes_once(
        fresh_stack, tmp_path: Path) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    stack: RunningStack = fresh_stack(service_env={"tool_step": {
        "ACKLOOP_FAULT_CRASH_AT": "tool:after_call", "ACKLOOP_FAULT_MARKER_DIR": str(markers)}})
    run_id = stack.ask("pay 40 to Ada", agent="approval-demo")
    await _wait_status(stack, run_id, StepStatus.WAITING)
    process = stack.stack.processes["tool_step"]
    approved = await asyncio.to_thread(
        httpx.post, f"{stack.state.api_url}/runs/{run_id}/approvals/{PAYMENT}",
        json={"decision": "approve"}, timeout=30)
    assert approved.status_code == 200, approved.text
    deadline = time.monotonic() + 60
    while process.process is not None and process.process.poll() is None:
        assert time.monotonic() < deadline, "the tool step was not killed"
        await asyncio.sleep(0.05)
    await asyncio.to_thread(stack.stack.restart_service, "tool_step")
    run, steps = await stack.wait_run(run_id, timeout=90)
    assert (markers / "tool_after_call").exists()
    assert run.status is RunStatus.COMPLETED, run.error
    payment = next(s for s in steps if s.key == PAYMENT)
    # Taken over once; send_payment is not safe to repeat, so the model is told it may or may
    # not have happened instead of paying twice.
    assert payment.attempts == 2 and payment.decision is not None
    assert "may or may not have taken effect" in (run.answer or "")
