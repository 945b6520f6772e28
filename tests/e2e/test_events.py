"""A run waiting for a named event on a stack of real processes on the emulators: ``ackloop
ask`` shows what it waits for and exits, every ackloop process stops, the event is published to
the queries topic and the payment approved from the CLI meanwhile, and the run resumes and
answers once the processes are back."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ackloop.domain.keys import run_id_for_request
from ackloop.domain.records import RunStatus, StepStatus
from ackloop.domain.wire import EventMessage
from tests.cli.conftest import Cli
from tests.support.stack import RunningStack

pytestmark = [pytest.mark.emulator, pytest.mark.slow]

PAYMENT, RECEIPT = "0000-tool-000", "0000-tool-001"


async def test_a_run_waits_for_its_event_with_every_process_stopped(
        fresh_stack, tmp_path: Path) -> None:
    stack: RunningStack = fresh_stack()
    home = tmp_path / "home"
    home.mkdir()
    cli = Cli(home)
    directory = stack.state.directory
    asked = await asyncio.to_thread(cli, "ask", "--agent", "approval-demo",
                                    "pay 40 to Ada and wait for her receipt",
                                    "--request-id", "event-1", "--directory", directory)
    run_id = run_id_for_request("event-1")
    assert asked.returncode == 2, asked.stderr
    lines = asked.stderr.splitlines()
    assert any(line.startswith(f"run {run_id} waits for the event 'receipt:Ada' in "
                               f'await_receipt({{"to": "Ada"}}) at step {RECEIPT}, until ')
               for line in lines), lines
    assert f"  send: ackloop runs send-event {run_id} receipt:Ada [--payload JSON]" in lines

    stack.stop_every_process()
    steps = {s.key: s for s in await stack.store().list_steps(run_id)}
    assert steps[RECEIPT].status is StepStatus.WAITING and steps[RECEIPT].lease_expires_at == 0

    # The event goes to the queries topic with nothing running: Pub/Sub holds it.
    event = EventMessage(type="event", run_id=run_id, name="receipt:Ada",
                         payload={"note": "got it"})
    await asyncio.to_thread(stack.publish, stack.settings.queries_topic,
                            event.model_dump_json().encode())
    approved = await asyncio.to_thread(cli, "runs", "approve", run_id, "--directory", directory)
    assert approved.returncode == 0, approved.stderr  # the only approval among the waits

    await asyncio.to_thread(stack.restart_every_process)
    run, steps_after = await stack.wait_run(run_id, timeout=90)
    assert run.status is RunStatus.COMPLETED, run.error
    assert '"note": "got it"' in (run.answer or "") and '"status": "sent"' in (run.answer or "")
    receipt = next(s for s in steps_after if s.key == RECEIPT)
    assert receipt.attempts == 1 and receipt.decision is not None
    assert (receipt.decision.decision, receipt.decision.by) == ("received", "pubsub")

    again = await asyncio.to_thread(cli, "runs", "send-event", run_id, "receipt:Ada",
                                    "--payload", '{"note": "got it"}', "--directory",
                                    directory)
    assert again.returncode == 0, again.stderr  # a repeat of the kept event: a no-op
    assert again.stdout.strip() == (f"run {run_id} had already received this event "
                                    "'receipt:Ada'; nothing changed")
    other = await asyncio.to_thread(cli, "runs", "send-event", run_id, "receipt:Bo",
                                    "--directory", directory)
    assert other.returncode != 0 and f"run {run_id} is completed" in other.stderr
