"""A step process SIGKILLed while its upstream call is in flight, on the shipped defaults.

The stack is the one ``ackloop dev up`` starts: the shipped lease (10 s) and waits, the push
delivery with production's retry policy (first redelivery after 10 s) and dead-letter policy
(10 attempts). The call takes 12 s and the process is killed 2 s into it, then started again
as the platform would. The run must complete with one redelivery of the killed step's message:
the redelivery finds the dead holder's lease expired (or waits it out inside its request) and
takes the step over, or, for a step run unclaimed (the retry-safe tool; the model step, whose
streamed turn of function calls shows no text, so it never claims), finds no document and runs
it as the message's second delivery; no 503 is spent on it and nothing is dead-lettered.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from ackloop.bus.delivery import load_policy
from ackloop.domain.records import RunStatus, StepStatus
from tests.support.stack import RunningStack

pytestmark = [pytest.mark.emulator, pytest.mark.slow]

CALL_SECONDS = 12.0
KILL_AFTER_SECONDS = 2.0


async def _wait_in_flight(stack: RunningStack, run_id: str, key: str, timeout: float) -> None:
    """Until the step's call is under way: its claim says so, or (a step run unclaimed writes
    nothing before its result or, streamed, its first text) the tool's API or the model has
    received the call."""
    store = stack.store()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        (step,) = await store.steps.get_steps(run_id, [key])
        if step is not None and step.status is StepStatus.RUNNING:
            return
        if "tool" in key and stack.sandbox_stats().get("faults:delay", 0) > 0:
            return
        if "model" in key and stack.model_stats()["faults_served"].get("delay", 0) > 0:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"step {key} of {run_id} never started")


@pytest.mark.parametrize(("service", "key"), [("model_step", "0000-model"),
                                              ("tool_step", "0000-tool-000")])
async def test_sigkill_mid_call_recovers_with_one_redelivery(
    fresh_stack, service: str, key: str
) -> None:
    stack: RunningStack = fresh_stack()
    assert stack.settings.lease_seconds == 10.0  # the shipped default, not a tuned one
    if service == "model_step":
        stack.schedule_model_faults(f"delay:{CALL_SECONDS:g}")  # the first model call only
    else:
        stack.set_sandbox_faults(delay_seconds=CALL_SECONDS)

    run_id = stack.ask("where am I?")
    await _wait_in_flight(stack, run_id, key, timeout=60)
    await asyncio.sleep(KILL_AFTER_SECONDS)
    process = stack.stack.processes[service]
    process.kill()  # SIGKILL to its process group, mid-call
    killed_at = time.monotonic()
    if service == "tool_step":
        stack.set_sandbox_faults(delay_seconds=0)
    await asyncio.to_thread(stack.stack.restart_service, service)
    down_s = time.monotonic() - killed_at

    run, steps = await stack.wait_run(run_id, timeout=120)
    recovered_s = time.monotonic() - killed_at
    print(f"{service}: SIGKILL {KILL_AFTER_SECONDS:g} s into a {CALL_SECONDS:g} s call -> run "
          f"{run.status.value} {recovered_s:.1f} s after the kill")

    assert run.status is RunStatus.COMPLETED, run.error
    assert "Norman, Oklahoma" in (run.answer or "")
    assert [s.key for s in steps] == [
        "0000-model", "0000-tool-000", "0001-model", "0001-tool-000", "0002-model"]
    assert all(s.attempts == 1 for s in steps if s.key != key)
    transcript = await stack.store().transcript.load_transcript(run.conversation_id)
    assert [c["role"] for c in transcript.contents] == ["user", "model"] * 3
    # The push delivery saw one failed push (the killed request) and no other non-2xx answer.
    subscriptions = stack.stack.push_stats()["subscriptions"]
    answers: dict[str, int] = {}
    for sub in subscriptions.values():
        for status, count in sub["answers"].items():
            answers[status] = answers.get(status, 0) + count
    refused = {s: n for s, n in answers.items() if not str(s).startswith("2")}
    # The killed request fails as unreachable. The first redelivery comes 10 s later (the
    # shipped minimum backoff); only a restart slower than that (a loaded machine) makes it
    # unreachable too. No push is ever refused by the service itself.
    assert set(refused) == {"unreachable"}, answers
    if down_s < load_policy().minimum_backoff_s - 1.0:
        assert refused["unreachable"] == 1, (answers, f"down {down_s:.1f} s")
    # The killed step ran once more than its message met a dead service: the killed delivery
    # (and any redelivery a slow restart left unanswered), then the one that completed it.
    killed = next(s for s in steps if s.key == key)
    assert killed.attempts == refused["unreachable"] + 1, (killed, answers, f"down {down_s:.1f} s")
    assert sum(sub["dead_lettered"] for sub in subscriptions.values()) == 0
