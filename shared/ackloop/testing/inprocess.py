"""Running the durable loop inside one process, on in-memory or real adapters.

The same handlers as the deployed functions, fed from an in-memory publisher instead of push
subscriptions. Unit tests use it to drive whole runs, inject duplicate deliveries and crashes
with a manual clock; nothing here is used in production.
"""

from __future__ import annotations

import itertools
import json
import random
from collections import deque
from dataclasses import dataclass, field

from ackloop.bus.memory import MemoryPublisher, Published
from ackloop.bus.push import Delivery
from ackloop.bus.wakes import MemoryWaker
from ackloop.domain.wire import AnswerMessage, QueryMessage, WaitingNotice
from ackloop.engine.deps import Deps
from ackloop.engine.dispatch import Kind, Outcome, dispatch


@dataclass
class DeliveryLog:
    kind: Kind
    message: Published
    outcome: Outcome


@dataclass
class InProcessLoop:
    deps: Deps
    publisher: MemoryPublisher
    answers: list[AnswerMessage] = field(default_factory=list)
    notices: list[WaitingNotice] = field(default_factory=list)
    """Runs waiting for a person (the answers topic's ``waiting`` notices)."""
    log: list[DeliveryLog] = field(default_factory=list)
    _queue: deque[tuple[Kind, Published]] = field(default_factory=deque)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _attempts: dict[int, int] = field(default_factory=dict)
    """Deliveries so far of each message (by identity), as Pub/Sub counts them."""

    def __post_init__(self) -> None:
        # A process that has started: it read the limits set when it did (a store the loop
        # starts on has none), as the hosting runtime's process does before its first step.
        # The next reading is due limits_refresh_seconds later on the loop's clock.
        self.deps.live_limits.started(self.deps.clock.now())

    def _kinds(self) -> dict[str, Kind]:
        s = self.deps.settings
        return {s.queries_topic: "query", s.model_steps_topic: "model",
                s.tool_steps_topic: "tool", s.dead_letter_topic: "dead_letter"}

    async def submit(self, query: QueryMessage) -> None:
        topic = self.deps.settings.queries_topic
        await self.publisher.publish(topic, query.model_dump_json().encode())

    def _collect(self) -> None:
        kinds = self._kinds()
        for message in self.publisher.take():
            if message.topic == self.deps.settings.answers_topic:
                data = json.loads(message.data)
                if data.get("event") == "waiting":
                    self.notices.append(WaitingNotice.model_validate(data))
                else:
                    self.answers.append(AnswerMessage.model_validate(data))
            else:
                self._queue.append((kinds[message.topic], message))

    async def deliver(self, kind: Kind, message: Published) -> Outcome:
        # Pub/Sub counts the deliveries of a message (a dead-letter policy is always set).
        self._attempts[id(message)] = attempt = self._attempts.get(id(message), 0) + 1
        delivery = Delivery(
            message_id=message.message_id or str(next(self._ids)),
            data=message.data,
            attributes=message.attributes,
            delivery_attempt=attempt,
        )
        outcome = await dispatch(self.deps, kind, delivery)
        self.log.append(DeliveryLog(kind, message, outcome))
        return outcome

    async def run_until_idle(
        self,
        *,
        max_deliveries: int = 500,
        duplicate_every: bool = False,
        shuffle_seed: int | None = None,
        crash: type[BaseException] | None = None,
        wake: bool = False,
    ) -> None:
        """Deliver queued messages until none is left; failed ones are redelivered. With
        ``wake``, a loop left with nothing to deliver but wakes armed (a call that sleeps)
        moves the clock to the next one and publishes it (:meth:`wake_next`).

        ``duplicate_every`` delivers every message twice in a row; ``shuffle_seed`` delivers
        in a random order (Pub/Sub does not promise order). A ``crash`` exception escaping a
        handler stands for the process dying mid-delivery: the message was not acknowledged,
        so it is delivered again.
        """
        rng = random.Random(shuffle_seed)
        self._collect()
        for _ in range(max_deliveries):
            if not self._queue and not (wake and await self.wake_next()):
                return
            if shuffle_seed is not None:
                self._queue.rotate(rng.randrange(len(self._queue)))
            kind, message = self._queue.popleft()
            try:
                outcome = await self.deliver(kind, message)
            except BaseException as exc:
                if crash is None or not isinstance(exc, crash):
                    raise
                self._queue.append((kind, message))
                self._collect()
                continue
            if duplicate_every:
                await self.deliver(kind, message)
            if not outcome.acknowledged:
                self._queue.append((kind, message))
                if outcome.retry_after:
                    advance = getattr(self.deps.clock, "advance", None)
                    if advance is not None:
                        advance(outcome.retry_after)
            self._collect()
        raise RuntimeError(f"loop still busy after {max_deliveries} deliveries")

    async def wake_next(self) -> bool:
        """Move the clock (it must have ``advance``) to the next armed wake and publish every
        wake then due; False when none is armed (the waker must be a :class:`MemoryWaker`)."""
        waker = self.deps.waker
        if not isinstance(waker, MemoryWaker) or (at := waker.next_at()) is None:
            return False
        return await self.wake_at(at)

    async def wake_at(self, at: float) -> bool:
        """Move the clock (it must have ``advance``) on to ``at`` (never back) and publish
        every wake then due; whether any was (the waker must be a :class:`MemoryWaker`)."""
        waker = self.deps.waker
        if not isinstance(waker, MemoryWaker):
            return False
        self.deps.clock.advance(max(0.0, at - self.deps.clock.now()))  # type: ignore[attr-defined]
        due = waker.due(self.deps.clock.now())
        for wake in due:
            await self.publisher.publish(wake.topic, wake.data, wake.attributes)
        self._collect()
        return bool(due)

    def deliveries(self, kind: Kind) -> list[DeliveryLog]:
        return [entry for entry in self.log if entry.kind == kind]

    def queued(self) -> list[tuple[Kind, dict[str, object]]]:
        return [(kind, json.loads(m.data)) for kind, m in self._queue]
