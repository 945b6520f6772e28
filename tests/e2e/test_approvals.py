"""Approvals on a stack of real processes on the emulators, as a person uses them: ``ackloop ask``
shows the wait and exits, every ackloop process may stop while the run waits, and ``ackloop
runs approve`` resumes it once they are back; a crash after the decision loses nothing."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest

from ackloop.domain.keys import run_id_for_request
from ackloop.domain.records import RunStatus, StepDecision, StepStatus
from ackloop_dev.devstack.stack import PUSH_DELIVERY, SERVICES
from tests.cli.conftest import Cli
from tests.support.stack import RunningStack

pytestmark = [pytest.mark.emulator, pytest.mark.slow]

PAYMENT = "0000-tool-000"


async def _wait_status(stack: RunningStack, run_id: str, status: StepStatus,
                       timeout: float = 60) -> None:
    store = stack.store()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        (step,) = await store.get_steps(run_id, [PAYMENT])
        if step is not None and step.status is status:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"step {PAYMENT} of {run_id} never became {status}")


async def test_a_run_waits_with_every_process_stopped_and_resumes_when_approved(
        fresh_stack, tmp_path: Path) -> None:
    stack: RunningStack = fresh_stack()
    home = tmp_path / "home"
    home.mkdir()
    cli = Cli(home)
    directory = stack.state.directory
    asked = await asyncio.to_thread(cli, "ask", "--agent", "approval-demo", "pay 40 to Ada",
                                    "--request-id", "demo-1", "--directory", directory)
    run_id = run_id_for_request("demo-1")
    assert asked.returncode == 2, asked.stderr
    lines = asked.stderr.splitlines()
    assert any(line.startswith(f"run {run_id} waits for approval of send_payment("
                               '{"amount": 40, "to": "Ada"}) at step 0000-tool-000, until ')
               for line in lines), lines
    assert f"  approve: ackloop runs approve {run_id} {PAYMENT} [--args JSON] " \
           "[--comment TEXT]" in lines

    # Every ackloop process stops: nothing holds the run while it waits.
    stack.stop_every_process()
    assert all(stack.stack.processes[n].process.poll() is not None  # type: ignore[union-attr]
               for n in (*SERVICES, PUSH_DELIVERY))
    (step,) = await stack.store().get_steps(run_id, [PAYMENT])
    assert step is not None and step.status is StepStatus.WAITING and step.lease_expires_at == 0

    approved = await asyncio.to_thread(cli, "runs", "approve", run_id, "--args",
                                       '{"to": "Ada", "amount": 30}', "--directory", directory)
    assert approved.returncode == 0, approved.stderr
    assert approved.stdout.strip() == f"run {run_id} step {PAYMENT} approved; the run resumes"

    await asyncio.to_thread(stack.restart_every_process)
    run, steps = await stack.wait_run(run_id, timeout=90)
    assert run.status is RunStatus.COMPLETED, run.error
    assert '"amount": 30' in (run.answer or "") and '"status": "sent"' in (run.answer or "")
    payment = next(s for s in steps if s.key == PAYMENT)
    assert payment.attempts == 1 and payment.decision is not None
    assert payment.decision.args == {"to": "Ada", "amount": 30}
    again = await asyncio.to_thread(cli, "runs", "reject", run_id, PAYMENT,
                                    "--directory", directory)
    assert again.returncode != 0 and "already decided: approve" in again.stderr


async def test_a_decision_whose_publish_was_lost_is_resumed_by_the_sweeper(
        fresh_stack) -> None:
    stack: RunningStack = fresh_stack()
    run_id = stack.ask("pay 40 to Ada", agent="approval-demo")
    await _wait_status(stack, run_id, StepStatus.WAITING)
    # The decider died right after its commit: the decision is recorded, nothing was sent.
    await stack.store().decide_step(run_id, PAYMENT, StepDecision(
        decision="approve", by="alice", at=time.time()))
    await asyncio.sleep(3)
    (step,) = await stack.store().get_steps(run_id, [PAYMENT])
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
