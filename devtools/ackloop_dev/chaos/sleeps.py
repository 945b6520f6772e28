"""The sleeps scenario: calls that sleep, with what wakes them killed while they sleep.

``config.sleep_runs`` questions are asked of the local stack's ``follow-up`` agent
(:mod:`ackloop_dev.agents.follow_up`), each call sleeping a few seconds (their wake times
spread), with every delivery duplicated by the front (half of the copies concurrently). Once
every call sleeps, the task queue (the stand-in for Cloud Tasks, which holds their wakes) and
the tool step (which armed them and runs them) are SIGKILLed and started again; the model step
is killed too, so the runs' last turns meet a fresh process.

What must hold: every run completes, answered with its own order; each sleeping call ran once
(its step completed, resolved ``by`` the clock, its result in the answer once) and never before
its time (``woke_at >= slept_until``); no run is left unfinished. How late the calls woke
(median, p99, worst) is reported beside, with the kills.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from ackloop.bus.pubsub import PubSubPublisher
from ackloop.domain.records import RunStatus, StepStatus
from ackloop_dev.agents.follow_up import NAME as FOLLOW_UP
from ackloop_dev.chaos.config import ChaosConfig
from ackloop_dev.chaos.stackup import ChaosStack
from ackloop_dev.chaos.workflow import AnswerCollector, Submitted, submit, wait_all
from ackloop_dev.chaos.workload import Template
from ackloop_dev.devstack.stack import TASK_QUEUE

CALL = "0000-tool-000"
KILLED = (TASK_QUEUE, "tool_step", "model_step")


def _seconds(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


@dataclass
class SleepsResult:
    runs: int = 0
    completed: int = 0
    answers_ok: int = 0
    woken_by_clock: int = 0
    woke_early: list[str] = field(default_factory=list)
    stuck: int = 0
    killed: list[str] = field(default_factory=list)
    lateness_s: dict[str, float] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    submitted: list[Submitted] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (self.runs > 0 and self.completed == self.answers_ok == self.woken_by_clock
                == self.runs and not self.woke_early and self.stuck == 0
                and self.killed == list(KILLED) and not self.problems)

    def as_dict(self) -> dict[str, Any]:
        found = asdict(self)
        found.pop("submitted")
        return {**found, "ok": self.ok}


async def _all_asleep(stack: ChaosStack, pending: list[Submitted], timeout_s: float) -> bool:
    store = stack.store()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        calls = [c for item in pending
                 for c in await store.steps.get_steps(item.run_id, [CALL])]
        if len(calls) == len(pending) and all(
                c is not None and c.status is StepStatus.WAITING for c in calls):
            return True
        await asyncio.sleep(0.1)
    return False


async def _kill_and_restart(stack: ChaosStack, result: SleepsResult) -> None:
    """SIGKILL what holds and runs the wakes, then start each again."""
    for name in KILLED:
        stack.stack.processes[name].kill()
        result.killed.append(name)
    await asyncio.to_thread(stack.stack.start_task_queue().wait_ready, 30.0)
    for name in KILLED[1:]:
        await asyncio.to_thread(stack.restart, name)


async def sleeps_scenario(stack: ChaosStack, config: ChaosConfig, tag: str,
                          answers: AnswerCollector) -> SleepsResult:
    """Run the scenario of the module docstring."""
    result = SleepsResult()
    began = time.monotonic()
    publisher = PubSubPublisher(stack.settings.project_id)
    stack.configure_front(duplicate=True, concurrent_share=config.concurrent_share)
    try:
        for number in range(config.sleep_runs):
            seconds = config.sleep_s + (number % 4)  # wake times spread over four seconds
            template = Template(f"sleep_{number}", f"follow up on S-{number} in {seconds:g} s",
                                ())
            result.submitted.append(await submit(
                publisher, stack.settings.queries_topic, template, f"sl{number:03d}", tag,
                agent=FOLLOW_UP))
        result.runs = len(result.submitted)
        if not await _all_asleep(stack, result.submitted, stack.timing.s(config.settle_s)):
            result.problems.append("not every call was asleep in time")
        await _kill_and_restart(stack, result)
        unfinished = await wait_all(stack.store(), list(result.submitted),
                                    stack.timing.s(config.settle_s))
        result.stuck = len(unfinished)
    finally:
        publisher.close()
    await answers.drain()
    await _check(stack, result)
    result.wall_s = round(time.monotonic() - began, 1)
    return result


async def _check(stack: ChaosStack, result: SleepsResult) -> None:
    store = stack.store()
    late = []
    for number, item in enumerate(result.submitted):
        run = await store.runs.get_run(item.run_id)
        (call,) = await store.steps.get_steps(item.run_id, [CALL])
        if run is None or call is None:
            result.problems.append(f"{item.ref}: no run or no call")
            continue
        if run.status is RunStatus.COMPLETED:
            result.completed += 1
        order = f'"followed_up": "S-{number}"'
        if (run.answer or "").count(order) == 1:
            result.answers_ok += 1
        decision = call.decision
        if call.status is StepStatus.COMPLETED and decision is not None and (
                decision.by == "clock" and decision.payload):
            result.woken_by_clock += 1
            woke = _seconds(decision.payload["woke_at"])
            due = _seconds(decision.payload["slept_until"])
            late.append(woke - due)
            if woke < due:
                result.woke_early.append(item.ref)
    if late:
        ordered = sorted(late)
        result.lateness_s = {"median": round(statistics.median(ordered), 3),
                             "p99": round(ordered[min(len(ordered) - 1,
                                                      round(0.99 * (len(ordered) - 1)))], 3),
                             "max": round(ordered[-1], 3)}
