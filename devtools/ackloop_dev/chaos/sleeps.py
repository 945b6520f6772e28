"""The time scenario: calls that sleep and a schedule firing, with what wakes them killed.

``config.sleep_runs`` questions are asked of the local stack's ``follow-up`` agent
(:mod:`ackloop_dev.agents.follow_up`), each call sleeping a few seconds (their wake times
spread), with every delivery duplicated by the front (half of the copies concurrently). Once
every call sleeps, the task queue (the stand-in for Cloud Tasks, which holds their wakes) and
the tool step (which armed them and runs them) are SIGKILLed and started again; the model step
is killed too, so the runs' last turns meet a fresh process.

A schedule (``every_seconds`` 2, ``allow_all``, its runs sleeping a second each) is created
through the API before the sleeps are asked, so its ticks fire through the same kills; it is
paused once the sleeps have ended.

What must hold: every run completes, answered with its own order; each sleeping call ran once
(its step completed, resolved ``by`` the clock, its result in the answer once) and never before
its time (``woke_at >= slept_until``); no run is left unfinished; the schedule's firings are
every tick from its first to its last (none missed: consecutive times), each started exactly
one run (none doubled), and each of those completed. How late the calls woke and the ticks
fired (median, p99, worst) is reported beside, with the kills.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

import httpx

from ackloop.bus.pubsub import PubSubPublisher
from ackloop.domain.records import RunStatus, StepStatus
from ackloop.domain.schedules import request_id_of
from ackloop_dev.agents.follow_up import NAME as FOLLOW_UP
from ackloop_dev.bench.wake_latency import spread
from ackloop_dev.chaos.config import ChaosConfig
from ackloop_dev.chaos.stackup import ChaosStack
from ackloop_dev.chaos.workflow import AnswerCollector, Submitted, submit, wait_all
from ackloop_dev.chaos.workload import Template
from ackloop_dev.devstack.stack import TASK_QUEUE

CALL = "0000-tool-000"
SCHEDULE_EVERY_S = 2.0
MIN_FIRINGS = 3
"""The schedule's firings the scenario waits for before it pauses the schedule."""
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
    firings: int = 0
    ticks_missed: int = 0
    runs_doubled: int = 0
    scheduled_runs_completed: int = 0
    tick_lateness_s: dict[str, float] = field(default_factory=dict)
    wall_s: float = 0.0
    submitted: list[Submitted] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (self.runs > 0 and self.completed == self.answers_ok == self.woken_by_clock
                == self.runs and not self.woke_early and self.stuck == 0
                and self.killed == list(KILLED) and not self.problems
                and self.firings >= 2 and self.ticks_missed == 0 and self.runs_doubled == 0
                and self.scheduled_runs_completed == self.firings)

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
    schedule = f"chaos-{tag}"
    api = stack.state.api_url
    async with httpx.AsyncClient(base_url=api, timeout=30.0) as http:
        created = await http.post("/schedules", json={
            "id": schedule, "agent": FOLLOW_UP, "text": "follow up on T-0 in 1 s",
            "every_seconds": SCHEDULE_EVERY_S, "overlap": "allow_all"})
        if created.status_code != 201:
            result.problems.append(f"schedule not created: {created.status_code} "
                                   f"{created.text[:200]}")
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
        # Ticks on both sides of the kills: on a busy machine the runs can end before the
        # schedule's next tick after the task queue came back (its wake is then re-armed).
        if not await _fired(stack, schedule, MIN_FIRINGS, stack.timing.s(config.settle_s)):
            result.problems.append(f"the schedule fired fewer than {MIN_FIRINGS} times")
    finally:
        publisher.close()
        async with httpx.AsyncClient(base_url=api, timeout=30.0) as http:
            await http.post(f"/schedules/{schedule}/pause")
    await answers.drain()
    await _check(stack, result)
    await _check_schedule(stack, result, schedule, stack.timing.s(config.settle_s))
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
    result.lateness_s = spread(late)


async def _fired(stack: ChaosStack, schedule: str, count: int, timeout_s: float) -> bool:
    """Whether the schedule has recorded ``count`` firings, waiting up to ``timeout_s``."""
    store, deadline = stack.store(), time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        (stored,) = await store.schedules.read(schedule)
        if stored is not None and len(stored.record.firings) >= count:
            return True
        await asyncio.sleep(0.5)
    return False


async def _check_schedule(stack: ChaosStack, result: SleepsResult, schedule: str,
                          settle_s: float) -> None:
    """Every tick from the first firing to the last, one completed run each, none doubled."""
    store = stack.store()
    (stored,) = await store.schedules.read(schedule)
    if stored is None:
        result.problems.append(f"schedule {schedule} not found")
        return
    firings = sorted(stored.record.firings, key=lambda f: f.at)
    result.firings = len(firings)
    result.ticks_missed = sum(round((b.at - a.at) / SCHEDULE_EVERY_S) - 1
                              for a, b in itertools.pairwise(firings))
    result.ticks_missed += sum(1 for f in firings if f.outcome != "started")
    result.tick_lateness_s = spread([f.recorded_at - f.at for f in firings])
    deadline = time.monotonic() + settle_s
    for firing in firings:
        if firing.run_id is None:
            continue
        while time.monotonic() < deadline:
            run = await store.runs.get_run(firing.run_id)
            if run is not None and run.status.terminal:
                break
            await asyncio.sleep(0.2)
        if run is not None and run.status is RunStatus.COMPLETED and (
                run.request_id == request_id_of(schedule, firing.at)):
            result.scheduled_runs_completed += 1
    prefix = f"schedule-{schedule}-"
    started = [r.request_id for r in await store.runs.recent_runs(limit=500)
               if r.request_id.startswith(prefix)]
    result.runs_doubled = len(started) - len(set(started))
    extra = len(set(started)) - len({f.run_id for f in firings if f.run_id})
    if extra > 0:
        result.problems.append(f"{extra} run(s) of the schedule not among its firings")
