"""Each kind of wait on a stack of real processes on the emulators, as a person meets it: the
run waits (``ackloop ask`` shows for what and exits, or the call sleeps), every ackloop process
stops while it waits, and what ends the wait comes meanwhile (an approval from ``ackloop runs
approve``, an event published to the queries topic, the call's time); once the processes are
back the run resumes and answers. One test over the kinds, on one stack they share."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from ackloop.domain.keys import run_id_for_request
from ackloop.domain.records import RunRecord, RunStatus, StepRecord, StepStatus
from ackloop.domain.wire import EventMessage
from ackloop_dev.devstack.stack import PUSH_DELIVERY, SERVICES
from tests.cli.conftest import Cli
from tests.support.stack import RunningStack

pytestmark = [pytest.mark.emulator, pytest.mark.slow]

PAYMENT, RECEIPT = "0000-tool-000", "0000-tool-001"
CALL = "0000-tool-000"


@dataclass
class Waiter:
    """A test's run, its stack and a user's ``ackloop`` against it."""

    stack: RunningStack
    cli: Cli

    @property
    def directory(self) -> str:
        return self.stack.state.directory

    async def run(self, *args: str) -> tuple[int, str, str]:
        done = await asyncio.to_thread(self.cli, *args, "--directory", self.directory)
        return done.returncode, done.stdout, done.stderr

    async def steps(self, run_id: str) -> dict[str, StepRecord]:
        return {s.key: s for s in await self.stack.store().steps.list_steps(run_id)}


@dataclass(frozen=True)
class Kind:
    """What starts a wait of one kind, what ends it while every process is stopped, and what
    the run shows once they are back."""

    asks: Callable[[Waiter], Awaitable[str]]
    while_stopped: Callable[[Waiter, str], Awaitable[None]]
    answered: Callable[[Waiter, str, RunRecord, list[StepRecord]], Awaitable[None]]


# -- an approval -------------------------------------------------------------------------------

async def _ask_approval(w: Waiter) -> str:
    code, _, stderr = await w.run("ask", "--agent", "approval-demo", "pay 40 to Ada",
                                  "--request-id", "demo-1")
    run_id = run_id_for_request("demo-1")
    assert code == 2, stderr
    lines = stderr.splitlines()
    assert any(line.startswith(f"run {run_id} waits for approval of send_payment("
                               '{"amount": 40, "to": "Ada"}) at step 0000-tool-000, until ')
               for line in lines), lines
    assert f"  approve: ackloop runs approve {run_id} {PAYMENT} [--args JSON] " \
           "[--comment TEXT]" in lines
    return run_id


async def _approve_while_stopped(w: Waiter, run_id: str) -> None:
    (step,) = await w.stack.store().steps.get_steps(run_id, [PAYMENT])
    assert step is not None and step.status is StepStatus.WAITING and step.lease_expires_at == 0
    code, stdout, stderr = await w.run("runs", "approve", run_id, "--args",
                                       '{"to": "Ada", "amount": 30}')
    assert code == 0, stderr
    assert stdout.strip() == f"run {run_id} step {PAYMENT} approved; the run resumes"


async def _approved(w: Waiter, run_id: str, run: RunRecord, steps: list[StepRecord]) -> None:
    assert '"amount": 30' in (run.answer or "") and '"status": "sent"' in (run.answer or "")
    payment = next(s for s in steps if s.key == PAYMENT)
    assert payment.attempts == 1 and payment.decision is not None
    assert payment.decision.args == {"to": "Ada", "amount": 30}
    code, _, stderr = await w.run("runs", "reject", run_id, PAYMENT)
    assert code != 0 and "already decided: approve" in stderr


# -- an event ----------------------------------------------------------------------------------

async def _ask_event(w: Waiter) -> str:
    code, _, stderr = await w.run("ask", "--agent", "approval-demo",
                                  "pay 40 to Ada and wait for her receipt",
                                  "--request-id", "event-1")
    run_id = run_id_for_request("event-1")
    assert code == 2, stderr
    lines = stderr.splitlines()
    assert any(line.startswith(f"run {run_id} waits for the event 'receipt:Ada' in "
                               f'await_receipt({{"to": "Ada"}}) at step {RECEIPT}, until ')
               for line in lines), lines
    assert f"  send: ackloop runs send-event {run_id} receipt:Ada [--payload JSON]" in lines
    return run_id


async def _send_event_while_stopped(w: Waiter, run_id: str) -> None:
    steps = await w.steps(run_id)
    assert steps[RECEIPT].status is StepStatus.WAITING and steps[RECEIPT].lease_expires_at == 0
    # The event goes to the queries topic with nothing running: Pub/Sub holds it.
    event = EventMessage(type="event", run_id=run_id, name="receipt:Ada",
                         payload={"note": "got it"})
    await asyncio.to_thread(w.stack.publish, w.stack.settings.queries_topic,
                            event.model_dump_json().encode())
    code, _, stderr = await w.run("runs", "approve", run_id)
    assert code == 0, stderr  # the only approval among the waits


async def _received(w: Waiter, run_id: str, run: RunRecord, steps: list[StepRecord]) -> None:
    assert '"note": "got it"' in (run.answer or "") and '"status": "sent"' in (run.answer or "")
    receipt = next(s for s in steps if s.key == RECEIPT)
    assert receipt.attempts == 1 and receipt.decision is not None
    assert (receipt.decision.decision, receipt.decision.by) == ("received", "pubsub")

    code, stdout, stderr = await w.run("runs", "send-event", run_id, "receipt:Ada",
                                       "--payload", '{"note": "got it"}')
    assert code == 0, stderr  # a repeat of the kept event: a no-op
    assert stdout.strip() == (f"run {run_id} had already received this event "
                              "'receipt:Ada'; nothing changed")
    code, _, stderr = await w.run("runs", "send-event", run_id, "receipt:Bo")
    assert code != 0 and f"run {run_id} is completed" in stderr


# -- a call's time -----------------------------------------------------------------------------

async def _ask_sleep(w: Waiter) -> str:
    run_id = w.stack.ask("follow up on A-3 in 4 s", request_id="sleep-stopped",
                         agent="follow-up")
    store = w.stack.store()
    for _ in range(200):
        (call,) = await store.steps.get_steps(run_id, [CALL])
        if call is not None and call.status is StepStatus.WAITING:
            break
        await asyncio.sleep(0.05)
    assert call is not None and call.status is StepStatus.WAITING
    return run_id


async def _time_passes_while_stopped(w: Waiter, run_id: str) -> None:
    await asyncio.sleep(6)  # its time passes: the wake is published, nothing takes it yet
    (call,) = await w.stack.store().steps.get_steps(run_id, [CALL])
    assert call is not None and call.status is StepStatus.WAITING and call.decision is None


async def _woken(w: Waiter, run_id: str, run: RunRecord, steps: list[StepRecord]) -> None:
    (call,) = [s for s in steps if s.key == CALL]
    assert call.decision is not None and call.decision.by == "clock" and call.attempts == 1


KINDS = {
    "approval": Kind(_ask_approval, _approve_while_stopped, _approved),
    "event": Kind(_ask_event, _send_event_while_stopped, _received),
    "time": Kind(_ask_sleep, _time_passes_while_stopped, _woken),
}


@pytest.mark.parametrize("kind", list(KINDS))
async def test_a_wait_ends_with_every_process_stopped_and_the_run_resumes_when_they_are_back(
        processes_back: RunningStack, tmp_path: Path, kind: str) -> None:
    stack, what = processes_back, KINDS[kind]
    home = tmp_path / "home"
    home.mkdir()
    waiter = Waiter(stack, Cli(home))
    run_id = await what.asks(waiter)

    # Every ackloop process stops: nothing holds the run while it waits.
    stack.stop_every_process()
    assert all(stack.stack.processes[n].process.poll() is not None  # type: ignore[union-attr]
               for n in (*SERVICES, PUSH_DELIVERY))
    await what.while_stopped(waiter, run_id)

    await asyncio.to_thread(stack.restart_every_process)
    run, steps = await stack.wait_run(run_id, timeout=90)
    assert run.status is RunStatus.COMPLETED, run.error
    await what.answered(waiter, run_id, run, steps)
