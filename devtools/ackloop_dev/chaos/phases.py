"""The phases of a chaos run: calibration (fault-free references) and the fault phase.

The fault phase submits ``config.runs`` runs with every fault on: duplicated deliveries, kills
at the four commit boundaries, model fault bursts, tool API faults, poison messages. Every
``config.followup_every``-th run is asked in the conversation of the run before it, right after
it, so it is queued behind it under the same faults.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field

from ackloop.bus.pubsub import PubSubPublisher
from ackloop_dev.chaos.checks import Reference, RefKey, reference, tool_outcomes
from ackloop_dev.chaos.config import ChaosConfig
from ackloop_dev.chaos.kills import KillEvent, KillMonitor, kill_plan
from ackloop_dev.chaos.poison import PoisonReport, inject_poison
from ackloop_dev.chaos.stackup import ChaosStack
from ackloop_dev.chaos.workflow import Submitted, poll, submit, wait_all
from ackloop_dev.chaos.workload import BY_NAME, TEMPLATES, pick

log = logging.getLogger(__name__)

# Tool-fault settings the references are taken under: (nws 500 rate, ip-api timeout rate,
# templates). Each template meets each tool outcome it can meet in the fault phase.
CALIBRATION = (
    (0.0, 0.0, tuple(t.name for t in TEMPLATES)),
    (1.0, 0.0, ("alerts_ny", "alerts_ca", "alerts_tx", "alerts_here")),
    (0.0, 1.0, ("where", "alerts_here")),
)


async def calibrate(stack: ChaosStack, tag: str) -> dict[RefKey, Reference]:
    """Run each question fault-free (but for the tool fault it is calibrated for) once."""
    store = stack.store()
    publisher = PubSubPublisher(stack.settings.project_id)
    references: dict[RefKey, Reference] = {}
    stack.configure_front(duplicate=False)
    try:
        for index, (nws, ipapi, names) in enumerate(CALIBRATION):
            stack.tool_faults(nws_error_rate=nws, ipapi_timeout_rate=ipapi)
            runs = [await submit(publisher, stack.settings.queries_topic, BY_NAME[name],
                                 f"cal{index}-{i:02d}", tag) for i, name in enumerate(names)]
            unfinished = await wait_all(store, runs, stack.timing.s(stack.config.settle_s))
            if unfinished:
                raise RuntimeError(f"calibration runs did not finish: {unfinished}")
            for item in runs:
                run = await store.runs.get_run(item.run_id)
                assert run is not None
                if run.status.value != "completed":
                    raise RuntimeError(f"calibration run {item.ref} {run.status}: {run.error}")
                steps = await store.steps.list_steps(item.run_id)
                transcript = await store.transcript.load_transcript(run.conversation_id)
                references[(item.template.name, tool_outcomes(steps))] = reference(
                    run, steps, transcript, item.ref)
    finally:
        publisher.close()
        stack.tool_faults(nws_error_rate=0.0, ipapi_timeout_rate=0.0)
    return references


@dataclass
class FaultPhase:
    """What the fault phase did."""

    runs: list[Submitted] = field(default_factory=list)
    kills: list[KillEvent] = field(default_factory=list)
    kills_not_fired: list[str] = field(default_factory=list)
    unexpected_exits: list[str] = field(default_factory=list)
    bursts: list[str] = field(default_factory=list)
    poison: PoisonReport = field(default_factory=PoisonReport)
    started: float = 0.0
    ended: float = 0.0
    stuck: list[Submitted] = field(default_factory=list)


async def _watch_kills(monitor: KillMonitor, stop: asyncio.Event) -> None:
    while not stop.is_set():
        await monitor.check()
        await asyncio.sleep(0.05)


async def _bursts(stack: ChaosStack, config: ChaosConfig, phase: FaultPhase,
                  stop: asyncio.Event) -> None:
    index = 0
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=stack.timing.s(config.burst_every_s))
        if stop.is_set():
            return
        spec = config.model_bursts[index % len(config.model_bursts)]
        await asyncio.to_thread(stack.model_faults, spec)
        phase.bursts.append(spec)
        index += 1


async def fault_phase(stack: ChaosStack, config: ChaosConfig, tag: str) -> FaultPhase:
    """Submit ``config.runs`` runs at ``config.concurrency`` with every fault switched on."""
    store = stack.store()
    publisher = PubSubPublisher(stack.settings.project_id)
    phase = FaultPhase(started=time.time())
    pending: list[Submitted] = []
    monitor = KillMonitor(stack, kill_plan(config.kill_points, config.kills_per_point),
                          lambda: [p.run_id for p in pending])
    stack.configure_front(duplicate=True, concurrent_share=config.concurrent_share)
    stack.tool_faults(nws_error_rate=config.nws_error_rate,
                      ipapi_timeout_rate=config.ipapi_timeout_rate)
    phase.poison = await asyncio.to_thread(inject_poison, stack, tag)
    stop = asyncio.Event()
    helpers = [asyncio.create_task(_watch_kills(monitor, stop)),
               asyncio.create_task(_bursts(stack, config, phase, stop))]
    kill_every = max(1, config.runs // (config.kills + 1))
    try:
        next_index, last_submit = 0, time.monotonic()
        while next_index < config.runs or pending:
            while len(pending) < config.concurrency and next_index < config.runs:
                follow_up = (config.followup_every > 0 and phase.runs
                             and next_index % config.followup_every == config.followup_every - 1)
                item = await submit(
                    publisher, stack.settings.queries_topic, pick(next_index),
                    f"r{next_index:04d}", tag,
                    conversation_id=phase.runs[-1].conversation_id if follow_up else None)
                pending.append(item)
                phase.runs.append(item)
                next_index += 1
                last_submit = time.monotonic()
            if next_index >= kill_every * (len(monitor.events) + 1) and monitor.arm_next():
                pass
            done = await poll(store, pending)
            pending[:] = [p for p in pending if p not in done]
            if next_index >= config.runs and time.monotonic() - last_submit > (
                    stack.timing.s(config.settle_s)):
                break
            await asyncio.sleep(0.2)
    finally:
        stop.set()
        await asyncio.gather(*helpers, return_exceptions=True)
        publisher.close()
        stack.model_reset()
        stack.disarm_all()
        stack.tool_faults(nws_error_rate=0.0, ipapi_timeout_rate=0.0)
    phase.ended = time.time()
    phase.stuck = list(pending)
    phase.kills = monitor.events
    phase.kills_not_fired = ([monitor.armed] if monitor.armed else []) + monitor.plan
    phase.unexpected_exits = monitor.unexpected_exits
    return phase
