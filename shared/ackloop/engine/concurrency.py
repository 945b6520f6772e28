"""Concurrency limits: at most N model steps or tool calls at once per key
(``ACKLOOP_CONCURRENCY_LIMITS``, :mod:`ackloop.config.concurrency`; a tool's own
``concurrency``), shared by every process. The slots' arithmetic is
:mod:`ackloop.domain.slots`'s; each key's slots are one document (``slots/{limit}:{key}``,
written at the version read).

**Before its call** a step takes a slot of each limit that applies to it (:func:`take`), in
the order of their ids (two steps never hold one each of two slots the other wants). One that
finds no free slot gives back what it took, keeps its place in line, and **waits**: it is
acknowledged, holding no process, no lease and no push slot, with a wake armed to bring it
back (:func:`wait_for_slot`), at the latest when the first holder's lease ends and at least
every :data:`~ackloop.domain.slots.RECHECK_SECONDS`. A delivery finds the slot it holds
(the holder is the run and the step, held by the delivery) and never takes a second one;
another delivery of the step (a redelivery after a crash, a duplicate, in this process or
another) waits until the first gives it back or its lease ends (the first may have crashed with
its call still running).

**While it works** the holder renews its lease (:func:`kept`): a crashed holder's slot frees
when its lease ends (:data:`~ackloop.domain.slots.HOLD_SECONDS`). **After its commit** it
gives its slots back (:func:`give_back`) and publishes the step of the first waiter in line,
which takes the slot.

What it costs: a step under a limit writes each key's document twice (take, give back); a
step that waits arms one wake. Without limits nothing is read or written.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from ackloop.domain.jsondict import JsonDict
from ackloop.domain.keys import limiter_doc_id
from ackloop.domain.records import RunRecord
from ackloop.domain.slots import (
    RECHECK_SECONDS,
    RENEW_SECONDS,
    Holder,
    Slots,
    Taken,
    Waiter,
    renew,
)
from ackloop.domain.slots import (
    give_back as slots_give_back,
)
from ackloop.domain.slots import (
    take as slots_take,
)
from ackloop.engine.deps import Deps
from ackloop.engine.lease import WAITED_SINCE, ClaimRef, LimiterWait, arm_limiter_wake
from ackloop.engine.outbox_sending import encode
from ackloop.tools.definition import Tool

log = logging.getLogger(__name__)


class SlotWait(LimiterWait):
    """No slot of a limit is free for the step: it waits in line."""

    def __init__(self, slots_id: str, ahead: int, next_free: float | None) -> None:
        super().__init__(f"waiting for a slot of {slots_id}: {ahead} ahead in line")
        self.slots_id, self.ahead, self.next_free = slots_id, ahead, next_free


@dataclass(frozen=True)
class Limit:
    """One key's slots a step needs: their document's id, how many there are, and whether
    they are held by runs (``steps: runs``) rather than steps."""

    slots_id: str
    limit: int
    per_run: bool = False

    def holder(self, step_holder: str) -> str:
        """Who holds the slot for the step ``step_holder`` (``run/step``): the step, or its
        run."""
        return step_holder.split("/", 1)[0] if self.per_run else step_holder


def limits_of(deps: Deps, run: RunRecord, kind: str, agent: str, tool: Tool | None = None
              ) -> list[Limit]:
    """The limits a step of ``kind`` (model, tool) of ``run`` holds a slot of, by id."""
    found = []
    for limit in deps.limits.concurrency_limits:
        value = {"owner": run.owner, "agent": run.agent if limit.per_run else agent,
                 "tenant": run.limits.tenant, "deployment": "*"}[limit.key]
        if limit.applies_to(kind) and value is not None:
            found.append(Limit(limiter_doc_id(f"{limit.steps}.{limit.key}:{value}"),
                               limit.limit, limit.per_run))
    if tool is not None and tool.concurrency is not None:
        key, most = tool.concurrency
        found.append(Limit(limiter_doc_id(f"tool:{key}"), most))
    # The run's slots first: a step waiting for a slot of its own keeps its run's.
    return sorted(found, key=lambda limit: (not limit.per_run, limit.slots_id))


def holder_of(run_id: str, key: str) -> str:
    return f"{run_id}/{key}"


def _slots(data: JsonDict | None) -> Slots:
    if data is None:
        return Slots()
    holders = data.get("holders")
    line = data.get("line")
    return Slots(
        tuple(Holder(str(h["name"]), float(h["until"]), str(h.get("by", "")),
                     str(h.get("key", ""))) for h in holders
              if isinstance(h, dict)) if isinstance(holders, list) else (),
        tuple(Waiter(str(w["name"]), float(w["since"]), float(w["until"]),
                     str(w.get("wake", "")),
                     float(w["woken"]) if w.get("woken") is not None else None,
                     str(w.get("key", "")), int(w.get("priority", 0)))
              for w in line if isinstance(w, dict)) if isinstance(line, list) else ())


def _doc(slots: Slots) -> JsonDict:
    return {"holders": [{"name": h.name, "until": h.until, "by": h.by, "key": h.key}
                        for h in slots.holders],
            "line": [{"name": w.name, "since": w.since, "until": w.until, "wake": w.wake,
                      "woken": w.woken, "key": w.key, "priority": w.priority}
                     for w in slots.line]}


def wake_of(topic: str, message: JsonDict, since: float) -> str:
    """What a holder giving its slot back publishes for a waiter: its step's message."""
    return json.dumps({"topic": topic, "message": message, "since": since},
                      separators=(",", ":"), sort_keys=True)


async def take(deps: Deps, limits: Sequence[Limit], holder: str, wake: str,
               run: RunRecord | None = None, delivery: str = "") -> None:
    """Take a slot of each limit, in order (its run's first), for a step of ``run`` (its
    tenant, else its owner, and its priority place it in a line:
    :meth:`~ackloop.domain.slots.Slots.served`). Raises :class:`SlotWait` (the step's own slots
    taken are given back first; its run's it keeps) when one has none free for ``holder``."""
    key = (run.limits.tenant or run.owner) if run is not None else ""
    priority = run.limits.priority if run is not None else 0
    taken: list[Limit] = []
    for limit in limits:
        now = deps.clock.now()

        def took(data: JsonDict | None, limit: Limit = limit, now: float = now
                 ) -> tuple[JsonDict | None, Taken]:
            # A run's slot is its steps' together (a fan-out's run side by side): no process
            # owns it.
            slots, verdict = slots_take(_slots(data), limit.holder(holder), limit.limit, now,
                                        wake, "" if limit.per_run else f"{deps.owner}/{delivery}",
                                        key, priority)
            return _doc(slots), verdict

        verdict = await deps.store.quotas.change_slots(limit.slots_id, took)
        for waiter in verdict.wake:  # served before this step, and a slot is free for them
            await _wake_now(deps, waiter)
        if not verdict.held:
            await give_back(deps, [t for t in taken if not t.per_run], holder)
            raise SlotWait(limit.slots_id, verdict.ahead, verdict.next_free)
        taken.append(limit)


async def give_back(deps: Deps, limits: Sequence[Limit], holder: str) -> None:
    """Give ``holder``'s slots back and publish the steps of the waiters now first in line."""
    for limit in limits:
        now = deps.clock.now()
        name = limit.holder(holder)

        def given(data: JsonDict | None, limit: Limit = limit, now: float = now,
                  name: str = name) -> tuple[JsonDict | None, list[Waiter]]:
            slots = _slots(data)
            if not slots.held_by(name):
                return None, []
            kept, woken = slots_give_back(slots, name, limit.limit, now)
            return _doc(kept), woken

        for waiter in await deps.store.quotas.change_slots(limit.slots_id, given):
            await _wake_now(deps, waiter)


async def _wake_now(deps: Deps, waiter: Waiter) -> None:
    """Publish a waiter's step (its own wake is the net when this fails)."""
    if not waiter.wake:
        return
    try:
        wake = json.loads(waiter.wake)
        await deps.publisher.publish(deps.topic(wake["topic"]), encode(wake["message"]),
                                     {WAITED_SINCE: f"{float(wake['since']):.3f}"})
    except Exception as exc:  # the waiter comes back by its own wake
        log.warning("could not wake %s (%s): its own wake brings it back", waiter.name, exc)


@contextlib.asynccontextmanager
async def kept(deps: Deps, limits: Sequence[Limit], holder: str) -> AsyncIterator[None]:
    """Renew ``holder``'s slots every :data:`RENEW_SECONDS` of the block's own running (real
    time: a test's manual clock jumps, the holder's work does not)."""
    if not limits:
        yield
        return

    async def renewing() -> None:
        while True:
            await asyncio.sleep(RENEW_SECONDS)
            for limit in limits:
                now = deps.clock.now()

                def renewed(data: JsonDict | None, now: float = now, limit: Limit = limit
                            ) -> tuple[JsonDict | None, None]:
                    return _doc(renew(_slots(data), limit.holder(holder), now)), None

                await deps.store.quotas.change_slots(limit.slots_id, renewed)

    task = asyncio.create_task(renewing())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


async def wait_for_slot(deps: Deps, topic: str, message: JsonDict, run_id: str, key: str,
                        wait: SlotWait, since: float) -> None:
    """The step waits in line: its own wake is armed to bring it back when the first holder's
    lease ends, and at least every :data:`RECHECK_SECONDS` (a holder giving its slot back
    wakes it sooner). Without a waker it is left to Pub/Sub's redelivery."""
    now = deps.clock.now()
    at = min(now + RECHECK_SECONDS, max(now + 1.0, wait.next_free or now + RECHECK_SECONDS))
    await arm_limiter_wake(deps, wait, limiter="slot", topic=topic, message=message,
                           run_id=run_id, step=key, at=at, since=since, stamp=f"{at:.0f}")


async def take_for(deps: Deps, ref: ClaimRef, run: RunRecord, limits: Sequence[Limit],
                   topic: str, message: JsonDict, since: float) -> None:
    """Take ``limits``' slots for the step of ``run`` that ``ref`` holds (kept on ``ref`` for
    :func:`give_back_held`); its wake, should it wait, publishes ``message`` to ``topic``."""
    if not limits:
        return
    claim = ref.claim
    await take(deps, limits, holder_of(claim.run_id, claim.key),
               wake_of(topic, message, since), run, ref.delivery)
    ref.slots = list(limits)


async def give_back_held(deps: Deps, ref: ClaimRef) -> None:
    """Give back the slots the step ``ref`` holds, if any (its run's, it keeps: they are
    the run's until it ends, :func:`give_back_run`)."""
    if ref.slots:
        held, ref.slots = [limit for limit in ref.slots if not limit.per_run], []
        await give_back(deps, held, holder_of(ref.claim.run_id, ref.claim.key))


async def give_back_run(deps: Deps, run: RunRecord) -> None:
    """Give back the slots ``run`` holds (``steps: runs``), once it has ended (by its last
    step's commit, or outside a step: :func:`ackloop.engine.ending.end_run_now`): the first
    run in line is woken. (A run whose step crashed after its end was committed frees its
    slots when their lease ends.)"""
    limits = [limit for limit in limits_of(deps, run, "model", run.agent) if limit.per_run]
    if limits:
        await give_back(deps, limits, f"{run.run_id}/")
