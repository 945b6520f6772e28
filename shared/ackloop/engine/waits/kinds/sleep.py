"""A call that sleeps (``Tool.sleeps``) waits for its time: it records when it wakes, arms a
wake that publishes its step's own message then (:mod:`ackloop.bus.wakes`), and runs once at
its time, told when it woke (``context.event``). Its time is also its deadline: the sweeper
finds it then if the wake is lost. A sleep of no time is no wait."""

from __future__ import annotations

import logging

from ackloop.bus.wakes import Wake, WakeNotArmed, rfc3339
from ackloop.domain.jsondict import JsonDict
from ackloop.domain.records import CLOCK, RunRecord, StepDecision, Waiting
from ackloop.engine.deps import Deps
from ackloop.engine.outbox_sending import committed_message, encode
from ackloop.engine.waits.kind import Wait, WaitKind, call_of, utc
from ackloop.tools.definition import Tool

log = logging.getLogger(__name__)


def _of(tool: Tool, args: JsonDict, now: float) -> Wait | None:
    seconds = tool.sleep_seconds(args, now)
    return Wait(tool, KIND, seconds=max(0.0, seconds)) if seconds is not None else None


async def _arrived(deps: Deps, run: RunRecord, key: str, waiting: Waiting
                   ) -> StepDecision | None:
    """The call's time, once it has come: the tool runs, told when it woke."""
    now = deps.clock.now()
    if waiting.wake_at is None or now < waiting.wake_at:
        return None
    return StepDecision(decision="received", by=CLOCK, at=now,
                        payload={"slept_until": rfc3339(waiting.wake_at),
                                 "woke_at": rfc3339(now)})


async def _arm(deps: Deps, run: RunRecord, key: str, waiting: Waiting) -> None:
    """Arm the call's wake: its step's message, published at its time (or at the waker's
    horizon, whence it is armed again). A wake not armed is the sweeper's to find."""
    assert waiting.wake_at is not None
    message = await committed_message(deps, run.run_id, key)
    if message is None:
        return
    at = min(waiting.wake_at, deps.clock.now() + deps.waker.horizon_s)
    wake = Wake(name=f"{run.run_id}/{key}/{at:.3f}", at=at, topic=deps.topic(message.topic),
                data=encode(message.data),
                attributes={"run_id": run.run_id, "step": key, "wake": "time"})
    try:
        await deps.waker.arm(wake)
    except WakeNotArmed as exc:
        log.warning("run %s step %s: its wake was not armed (%s): the sweeper wakes it",
                    run.run_id, key, exc)


def _wakes(waiting: Waiting) -> float:
    return waiting.wake_at if waiting.wake_at is not None else waiting.deadline


KIND = WaitKind(
    "time", clock_runs=False, announced=False, shown_as="time", of=_of,
    label=lambda waiting: ("asleep until", utc(_wakes(waiting))),
    awaits=lambda run_id, waiting: f"its time ({utc(_wakes(waiting))})",
    missed=lambda waiting: "its time did not come before the deadline",
    told=lambda run_id, key, waiting: [
        f"run {run_id} sleeps in {call_of(waiting)} at step {key} until "
        f"{utc(_wakes(waiting))}, then goes on by itself",
        f"  follow: ackloop runs follow {run_id}"],
    arrived=_arrived, arm=_arm)
