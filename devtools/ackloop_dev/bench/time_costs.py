"""What time costs at list prices: a call that sleeps, and a schedule's month.

A schedule's firing is measured the same way: runs fired by an hourly schedule through its
wakes against the same runs asked on the queries topic; what a firing adds (its tick's wake,
its delivery, the schedule's document read and written) priced, and a month of it at a few
periods. The runs themselves (the agent's work, Gemini) are what they are either way.

``python -m ackloop_dev.bench.time_costs [--json F]``

Measured on the in-process engine (the handlers the functions run, the in-memory store
counting documents, the in-memory publisher counting messages, the in-memory waker counting
wakes armed): the same one-call run with the call sleeping and not, and the difference priced
at :data:`ackloop.domain.cost.PRICES` plus Cloud Tasks' price per operation (a wake is a task
created and a dispatch attempt). Nothing is billed while a call sleeps (no instance runs, no
message is delivered), so a sleep of three days costs what a sleep of three seconds does.
Cloud Run's part is a request and its CPU at the request-based rate, with the step CPU given
(the figure of ``python -m ackloop_dev.bench.step_cpu``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ackloop.domain.cost import PRICES, PUBSUB_MIN_BYTES

CLOUD_TASKS_OPERATION_USD = 0.40 / 1_000_000
"""cloud.google.com/tasks/docs/pricing (read 2026-12-04): $0.40 per million billable operations
beyond the first million a month; an API call (a task created) and a push delivery attempt
(its dispatch) are each one."""
CLOUD_SCHEDULER_JOB_USD_MONTH = 0.10
"""cloud.google.com/scheduler/pricing (read 2026-12-04): $0.10 per job a month (three free per
billing account): the sweeper's job, which a deployment has with or without time."""
STEP_CPU_S = 0.017
"""Function CPU of one step (the step profile's figure), billed per request."""


@dataclass(frozen=True)
class Counts:
    """What one thing used beyond what it would without time: documents, messages (each one
    publish and one delivery), Cloud Run requests, Cloud Tasks operations."""

    docs_read: int = 0
    docs_written: int = 0
    messages: int = 0
    requests: int = 0
    task_operations: int = 0

    def usd(self, step_cpu_s: float = STEP_CPU_S) -> float:
        p = PRICES
        return (self.docs_read * p.firestore_read + self.docs_written * p.firestore_write
                + self.messages * 2 * PUBSUB_MIN_BYTES * p.pubsub_byte
                + self.requests * (p.run_request + step_cpu_s * p.run_vcpu_second)
                + self.task_operations * CLOUD_TASKS_OPERATION_USD)


def minus(a: Counts, b: Counts) -> Counts:
    return Counts(**{k: v - asdict(b)[k] for k, v in asdict(a).items()})


async def one_call_run(sleeps: bool) -> Counts:
    """A run of one call (then its answer) on the in-process engine, the call sleeping an hour
    or not; what it used."""
    from ackloop.agents.agent import Agent
    from ackloop.bus.wakes import MemoryWaker
    from ackloop.domain.clock import ManualClock
    from ackloop.domain.wire import QueryMessage
    from ackloop.model.function_model import ScriptedTurns, call, text
    from ackloop.testing.agent_tester import AgentTester
    from ackloop.tools.definition import tool

    @tool(sleeps=3600.0 if sleeps else None)
    def follow_up(order: str) -> str:
        """Follow up on an order."""
        return "done"

    tester = AgentTester(Agent("default", "Follow up.", [follow_up]),
                         model=ScriptedTurns([call("follow_up", order="A-1"), text("done")]))
    waker = MemoryWaker()
    tester.deps.waker = waker
    tester.deps.clock = ManualClock()
    await tester.loop.submit(QueryMessage(request_id="cost", text="follow up"))
    await tester.loop.run_until_idle(wake=True)
    counters = tester.deps.store.db.counters  # type: ignore[attr-defined]
    deliveries = len(tester.loop.log)
    return Counts(docs_read=counters.docs_read, docs_written=counters.docs_written,
                  messages=deliveries, requests=deliveries, task_operations=2 * waker.arms)


async def answered_runs(count: int, scheduled: bool) -> Counts:
    """``count`` runs of a one-answer agent, asked through the queries topic or fired by an
    hourly schedule through its wakes; what they used."""
    from ackloop.agents.agent import Agent
    from ackloop.bus.wakes import MemoryWaker
    from ackloop.domain.clock import ManualClock
    from ackloop.domain.schedules import Schedule
    from ackloop.domain.wire import QueryMessage
    from ackloop.engine import schedule_control
    from ackloop.model.function_model import ScriptedTurns, text
    from ackloop.testing.agent_tester import AgentTester

    tester = AgentTester(Agent("default", "Report.", []),
                         model=ScriptedTurns([text("report")] * count))
    waker = MemoryWaker()
    tester.deps.waker = waker
    tester.deps.clock = ManualClock()
    if scheduled:
        await schedule_control.put_schedule(tester.deps, Schedule.model_validate(
            {"id": "hourly", "agent": "default", "text": "report", "every_seconds": 3600}))
        for _ in range(count):
            await tester.loop.wake_next()
            await tester.loop.run_until_idle()
    else:
        for number in range(count):
            await tester.loop.submit(QueryMessage(request_id=f"q{number}", text="report"))
            await tester.loop.run_until_idle()
    counters = tester.deps.store.db.counters  # type: ignore[attr-defined]
    deliveries = len(tester.loop.log)
    return Counts(docs_read=counters.docs_read, docs_written=counters.docs_written,
                  messages=deliveries, requests=deliveries, task_operations=2 * waker.arms)


def per(counts: Counts, n: int) -> dict[str, float]:
    return {k: round(v / n, 2) for k, v in asdict(counts).items()}


def measure(firings: int = 20) -> dict[str, Any]:
    plain = asyncio.run(one_call_run(sleeps=False))
    sleeping = asyncio.run(one_call_run(sleeps=True))
    extra = minus(sleeping, plain)
    per_sleep = extra.usd()
    fired = minus(asyncio.run(answered_runs(firings, scheduled=True)),
                  asyncio.run(answered_runs(firings, scheduled=False)))
    per_firing = fired.usd() / firings
    month = {name: round(per_firing * n, 6) for name, n in
             (("daily", 30.4), ("hourly", 730.0), ("every_minute", 43_800.0))}
    return {"prices_date": PRICES.date, "plain_call_run": asdict(plain),
            "sleeping_call_run": asdict(sleeping), "a_sleep_adds": asdict(extra),
            "a_sleep_usd": round(per_sleep, 9),
            "a_million_sleeps_usd": round(per_sleep * 1_000_000, 2),
            "while_asleep_usd_per_month": 0.0,
            "a_firing_adds": per(fired, firings), "a_firing_usd": round(per_firing, 9),
            "schedule_usd_per_month_beyond_its_runs": month}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    result = measure()
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
