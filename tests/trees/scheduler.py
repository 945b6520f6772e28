"""The seeded scheduler: it plays one tree's life through the engine's real entry points.

Pub/Sub is a pool of unacknowledged messages delivered in random order, some twice; a delivery
may be killed at a commit boundary (the message stays in the pool, its attempt counted); a
message that failed ``MAX_ATTEMPTS`` times, or one picked at random, goes to the dead-letter
handler; dead letters are redriven; runs are cancelled; people approve or reject and events are
sent at random times; the clock moves by small ticks and big jumps over deadlines, and the
sweeper runs each minute of it. Then the tree is settled: no more faults, every message
delivered, the clock moved past each remaining deadline, until nothing moves.

Everything it does goes through what an operator or a deployment does (the handlers, the
cancel, the decision and event functions the API calls, the redrive and sweep commands), and
it watches only what they leave: the run and step records, the tools' and the model's counts.
"""

from __future__ import annotations

import contextlib
import random
from dataclasses import dataclass, field
from typing import Any

from ackloop.bus.memory import Published
from ackloop.domain.keys import run_id_for_request
from ackloop.domain.records import ReceivedEvent, RunRecord, StepDecision, StepRecord, StepStatus
from ackloop.domain.wire import QueryMessage
from ackloop.engine.dispatch import Kind
from ackloop.engine.ending import cancel_run
from ackloop.engine.redrive import redrive
from ackloop.engine.sweep import sweep
from ackloop.engine.waits import arrivals, core
from ackloop.store import DecisionRefused
from tests.trees.plan import GATED, WAITS
from tests.trees.world import SimulatedCrash, World

MAX_ATTEMPTS = 5
"""Deliveries of a message before Pub/Sub forwards it to the dead-letter topic."""
SWEEP_EVERY = 60.0
"""The sweeper's schedule (Cloud Scheduler, every minute)."""
KILL_POINTS = ("model:after_call", "model:after_commit", "tool:after_call",
               "tool:after_commit", "tool:after_child")


@dataclass
class Pending:
    kind: Kind
    message: Published
    failures: int = 0

    @property
    def where(self) -> tuple[str, str]:
        return (self.message.attributes.get("run_id", "?"),
                self.message.attributes.get("step", self.kind))


@dataclass
class Observed:
    """What the scheduler saw happen, for the checks and the report."""

    kills: list[tuple[str, str, str]] = field(default_factory=list)
    """(run, step, point) of each kill."""
    late: list[str] = field(default_factory=list)
    """Waits of a running run found undecided past their deadline after a sweep."""
    changed: list[str] = field(default_factory=list)
    """A step's decision or result seen to change once recorded."""
    orphans: list[str] = field(default_factory=list)
    seen: dict[tuple[str, str], tuple[object, object]] = field(default_factory=dict)
    actions: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)


class Scheduler:
    def __init__(self, world: World, seed: int) -> None:
        self.world = world
        self.rng = random.Random(seed * 7919 + 1)
        self.pool: list[Pending] = []
        self.observed = Observed()
        self.answers: list[str] = []
        self.letters = 0
        self.next_sweep = world.clock.now() + SWEEP_EVERY
        self.started = world.clock.now()
        self._read: dict[str, list[Any]] = {}
        """What :meth:`runs` and :meth:`waiting` read, until the next change."""

    # -- the pool ---------------------------------------------------------------------------

    def collect(self) -> None:
        """Take what was published; the records may have changed: read them again."""
        self._read.clear()
        s = self.world.deps.settings
        kinds: dict[str, Kind] = {s.queries_topic: "query", s.model_steps_topic: "model",
                                  s.tool_steps_topic: "tool"}
        for message in self.world.loop.publisher.take():
            if message.topic == s.answers_topic:
                self.answers.append(message.data.decode())
            else:
                self.pool.append(Pending(kinds[message.topic], message))

    def note(self, action: str) -> None:
        self.observed.actions.append(action)
        name = action.split(" ")[0]
        self.observed.counts[name] = self.observed.counts.get(name, 0) + 1

    async def deliver(self, pending: Pending, *, kill: str | None = None,
                      duplicate: bool = False) -> None:
        self.world.faults.armed = kill
        try:
            outcome = await self.world.loop.deliver(pending.kind, pending.message)
        except SimulatedCrash as crash:
            self.observed.kills.append((*pending.where, str(crash)))
            self.note(f"kill {pending.where} at {crash}")
            pending.failures += 1
            outcome = None
        finally:
            self.world.faults.armed = None
        self.collect()
        if outcome is not None:
            self.note(f"deliver {pending.where}{' again' if duplicate else ''}: {outcome.status}"
                      f" at {self.world.clock.now() - self.started:.0f}")
        if outcome is not None and outcome.acknowledged:
            if not duplicate:
                self.pool.remove(pending)
            return
        if outcome is not None:
            pending.failures += 1
            if outcome.retry_after:
                await self.tick(outcome.retry_after)
        if pending.failures >= MAX_ATTEMPTS and pending in self.pool:
            await self.dead_letter(pending)

    async def dead_letter(self, pending: Pending) -> None:
        """Forward the message as Pub/Sub does after its last attempt."""
        self.pool.remove(pending)
        self.letters += 1
        original = pending.message
        forwarded = Published(
            self.world.deps.settings.dead_letter_topic, original.data,
            {**original.attributes,
             "CloudPubSubDeadLetterSourceDeliveryCount": str(MAX_ATTEMPTS),
             "CloudPubSubDeadLetterSourceSubscription": f"projects/p/subscriptions/{pending.kind}"},
            f"dl-{self.letters}")
        self.note(f"dead_letter {pending.where}")
        await self.world.loop.deliver("dead_letter", forwarded)
        self.collect()

    # -- the clock and the sweeper -------------------------------------------------------------

    async def tick(self, seconds: float) -> None:
        """Move the clock, sweeping at each minute it passes."""
        clock = self.world.clock
        end = clock.now() + seconds
        while self.next_sweep <= end:
            clock.advance(max(0.0, self.next_sweep - clock.now()))
            await self.sweep()
            self.next_sweep += SWEEP_EVERY
        clock.advance(max(0.0, end - clock.now()))

    async def sweep(self) -> None:
        await sweep(self.world.deps)
        self.collect()
        await self.watch()

    async def watch(self) -> None:
        """After a sweep: no running run's wait is undecided past its deadline (and the
        sweeper's lateness); no recorded decision or result has changed; no child runs on
        under an ended parent past a sweep."""
        now = self.world.clock.now()
        grace = self.world.deps.settings.sweep_stale_seconds + SWEEP_EVERY
        runs = await self.runs()
        by_id = {r.run_id: r for r in runs}
        for run in runs:
            steps = await self.world.deps.store.steps.list_steps(run.run_id)
            self._remember(run, steps)
            if run.status.terminal:
                continue
            winding_down = {r.parent_step for r in runs
                            if r.parent_run_id == run.run_id and r.cancel_requested}
            for step in steps:
                # A call whose child was cancelled (at its deadline) waits for that child's
                # end, its final figures, which decides it as at the deadline.
                if (step.status is StepStatus.WAITING and step.decision is None
                        and step.waiting is not None and step.key not in winding_down
                        and step.waiting.deadline + grace < now):
                    self.observed.late.append(
                        f"[deadline] {run.text} step {step.key} undecided "
                        f"{now - step.waiting.deadline:.0f} s past its deadline")
            parent = by_id.get(run.parent_run_id or "")
            if (parent is not None and parent.status.terminal and not run.cancel_requested
                    and parent.finished_at and now - parent.finished_at > grace):
                self.observed.orphans.append(
                    f"[orphan] {run.text} still {run.status.value}, no cancel asked, "
                    f"{now - parent.finished_at:.0f} s after "
                    f"its parent {parent.text} ended {parent.status.value}")

    def _remember(self, run: RunRecord, steps: list[StepRecord]) -> None:
        for step in steps:
            decision = step.decision.model_dump() if step.decision else None
            result = step.result if step.status is StepStatus.COMPLETED else None
            key = (run.run_id, step.key)
            before = self.observed.seen.get(key)
            if before is not None:
                for then, now, what in zip(before, (decision, result), ("decision", "result"),
                                           strict=True):
                    if then is not None and now != then:
                        self.observed.changed.append(
                            f"[changed] {run.text} step {step.key}: {what} {then} became {now}")
            self.observed.seen[key] = (before[0] if before and before[0] else decision,
                                       before[1] if before and before[1] else result)

    async def runs(self) -> list[RunRecord]:
        if "runs" not in self._read:
            self._read["runs"] = await self.world.deps.store.runs.recent_runs(limit=1000)
        return self._read["runs"]

    # -- what people and operators do ---------------------------------------------------------

    async def waiting(self, tool: str) -> list[tuple[RunRecord, StepRecord]]:
        """The calls of ``tool`` (``gated``, ``waiter``) that wait, undecided, in running runs."""
        if tool in self._read:
            return self._read[tool]
        found = []
        for run in await self.runs():
            if run.status.terminal:
                continue
            found += [(run, s) for s in await self.world.deps.store.steps.list_steps(run.run_id)
                      if s.name == tool and s.status is StepStatus.WAITING
                      and s.waiting is not None and s.decision is None]
        self._read[tool] = found
        return found

    async def decide(self) -> None:
        choices = await self.waiting(GATED)
        if not choices:
            return
        run, step = self.rng.choice(choices)
        verdict = "approve" if self.rng.random() < 0.7 else "reject"
        self.note(f"decide {run.text} {step.key} {verdict}")
        with contextlib.suppress(DecisionRefused):
            await core.resolve(self.world.deps, run.run_id, step.key, StepDecision(
                decision=verdict, by="person", at=self.world.clock.now()), "approval")
        self.collect()

    async def send_event(self) -> None:
        """An event to a run that waits for it, or (early) to one whose call will."""
        wanted = self.world.plan.events()
        if not wanted:
            return
        name = self.rng.choice(sorted(wanted))
        question = wanted[name]
        run = next((r for r in await self.runs() if r.text == question), None)
        if run is None:
            return
        self.note(f"event {name} to {question}")
        event = ReceivedEvent(payload={"name": name}, by="sender", at=self.world.clock.now(),
                              id=name)
        with contextlib.suppress(DecisionRefused):
            await arrivals.deliver(self.world.deps, run.run_id, name, event)
        self.collect()

    async def cancel(self) -> None:
        runs = [r for r in await self.runs() if not r.status.terminal]
        if not runs:
            return
        run = self.rng.choice(runs)
        self.note(f"cancel {run.text}")
        await cancel_run(self.world.deps, run.run_id)
        self.collect()

    async def redrive(self) -> None:
        """Redrive every pending dead letter, or one of them (an operator picks)."""
        deps = self.world.deps
        some = ([] if self.letters == 0 or self.rng.random() < 0.5
                else [f"dl-{self.rng.randint(1, self.letters)}"])
        done = await redrive(deps.store, deps.publisher, deps.settings, deps.clock,
                             message_ids=some)
        if done:
            self.note(f"redrive {[r.outcome for r in done]}")
        self.collect()

    async def jump(self) -> None:
        """Move the clock to a random waiting call's deadline and a little past it."""
        waits = [s.waiting.deadline for _, s in await self.waiting(GATED)
                 + await self.waiting(WAITS) if s.waiting is not None]
        if not waits:
            return
        target = self.rng.choice(waits) + self.rng.uniform(0, 2 * SWEEP_EVERY)
        self.note(f"jump {max(0.0, target - self.world.clock.now()):.0f} s")
        await self.tick(max(0.0, target - self.world.clock.now()))

    # -- the life of the tree ------------------------------------------------------------------

    async def start(self) -> str:
        request_id = f"tree-{self.world.plan.seed}"
        await self.world.loop.submit(QueryMessage(
            request_id=request_id, text=self.world.plan.root.question,
            agent=self.world.plan.root.agent))
        self.collect()
        return run_id_for_request(request_id)

    async def chaos(self, actions: int) -> None:
        """``actions`` random moves, or fewer once nothing is left to move."""
        for _ in range(actions):
            roll = self.rng.random()
            if self.pool and roll < 0.62:
                await self.deliver_one()
            elif roll < 0.70:
                await self.decide()
            elif roll < 0.77:
                await self.send_event()
            elif roll < 0.80:
                await self.cancel_sometimes()
            elif roll < 0.84:
                await self.redrive()
            elif roll < 0.86 and self.pool:
                await self.dead_letter(self.rng.choice(self.pool))
            elif roll < 0.89:
                await self.jump()
            else:
                await self.tick(self.rng.uniform(1, 90))

    async def cancel_sometimes(self) -> None:
        if self.rng.random() < 0.35:
            await self.cancel()

    async def deliver_one(self) -> None:
        pending = self.rng.choice(self.pool)
        roll = self.rng.random()
        kill = self.rng.choice(KILL_POINTS) if roll < 0.25 else None
        await self.deliver(pending, kill=kill, duplicate=0.25 <= roll < 0.4)

    async def drain(self, limit: int = 3000) -> None:
        """Deliver everything (in random order, no kills) until the pool is empty."""
        for _ in range(limit):
            if not self.pool:
                return
            await self.deliver(self.rng.choice(self.pool))
        raise AssertionError(f"seed {self.world.plan.seed}: the pool never emptied")

    async def settle(self, rounds: int = 60) -> None:
        """No more faults: deliver all, then move the clock over the remaining deadlines and
        the sweeper's staleness, until every run has ended or nothing changes."""
        stale = self.world.deps.settings.sweep_stale_seconds
        for _ in range(rounds):
            await self.drain()
            runs = await self.runs()
            if all(r.status.terminal for r in runs):
                return
            deadlines = [s.waiting.deadline for _, s in await self.waiting(GATED)
                         + await self.waiting(WAITS) if s.waiting is not None
                         and s.decision is None and s.waiting.deadline > self.world.clock.now()]
            step = min(deadlines) - self.world.clock.now() + 1 if deadlines else stale + 1
            await self.tick(min(step, stale + SWEEP_EVERY))
