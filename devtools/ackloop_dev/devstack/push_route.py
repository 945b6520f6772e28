"""One push subscription delivered by the local push delivery: pull, push, retry, dead-letter.

The subscription is a pull subscription on the emulator; :class:`RouteDelivery` does what
Pub/Sub's push does for it: POSTs each message's push envelope to the endpoint, several at once
(as many as the push window allows, :mod:`ackloop_dev.devstack.push_flow`), acknowledges it on a
2xx answer and otherwise delivers it again after the retry policy's backoff, until the
dead-letter policy's attempts are used up. While it waits, the message stays leased in the
emulator (its ack deadline is extended, as a streaming-pull client's lease manager does), so
the emulator does not redeliver it on its own; if this process dies, the lease runs out and
the emulator redelivers it to the next one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

from google.api_core import exceptions as gexc
from google.pubsub_v1.services.publisher import PublisherAsyncClient
from google.pubsub_v1.services.subscriber import SubscriberAsyncClient
from google.pubsub_v1.types import PubsubMessage

from ackloop.bus.delivery import DeliveryPolicy
from ackloop.bus.push import push_envelope
from ackloop_dev.devstack.push_flow import FlowControl
from ackloop_dev.devstack.push_http import HttpError, LoopbackClient

log = logging.getLogger("ackloop_dev.devstack.push_delivery")

PULLERS = 8
"""Waiting pulls per subscription, started at staggered times: the emulator answers a waiting
pull only when it polls (every 50 ms), so more of them shorten the wait for a new message."""
EMULATOR_POLL_S = 0.05
PULL_TIMEOUT_S = 3.0
"""Deadline of each waiting pull (the emulator answers an empty one about a second before it).
Short on purpose: the emulator ignores a pull's cancellation and keeps handing new messages to
it until its deadline, where they stay hidden for the subscription's ack deadline. At a stop,
:meth:`RouteDelivery.shutdown` therefore lets every pull come back by itself, which takes at
most this long."""
MAX_MESSAGES_PER_PULL = 100
LEASE_S = 60
"""Ack deadline the held messages are kept at in the emulator (not scaled: it is no production
duration, and the emulator accepts only 10..600 s)."""
LEASE_RENEW_S = 5.0
"""How often the held messages' lease is extended (well within the shortest ack deadline)."""
ACK_BATCH = 1000


@dataclass(frozen=True)
class Subscription:
    """What a push subscription says about its delivery, read from the emulator."""

    path: str
    """``projects/P/subscriptions/S``: the ``subscription`` field of the envelope."""
    project: str
    name: str
    ack_deadline_s: float
    """How long a push may go unanswered before it counts as failed (already time-scaled)."""
    dead_letter_topic: str | None
    max_delivery_attempts: int | None


@dataclass(eq=False)
class Held:
    """A message held (leased) until it is acknowledged or dead-lettered."""

    ack_id: str
    message: Any
    deliveries: int
    """Deliveries so far. Starts from the emulator's count (a message redelivered after this
    process died continues its count), so the next push is delivery ``deliveries + 1``."""
    timer: asyncio.TimerHandle | None = None


@dataclass
class RouteStats:
    """Counters of one subscription, for ``GET /_stats``."""

    answers: Counter[str] = field(default_factory=Counter)
    """Pushes by outcome: the HTTP status, ``timeout`` (ack deadline) or ``unreachable``."""
    acked: int = 0
    redeliveries: int = 0
    """Pushes of a message after its first (by this process)."""
    dead_lettered: int = 0


class RouteDelivery:
    """Delivers one subscription's messages to one endpoint, the way Pub/Sub push does."""

    def __init__(
        self, subscriber: SubscriberAsyncClient, publisher: PublisherAsyncClient,
        subscription: Subscription, endpoint: str, policy: DeliveryPolicy, time_scale: float,
    ) -> None:
        self.subscription = subscription
        self.endpoint = endpoint
        self.policy = policy
        self.flow = FlowControl(time_scale)
        self.stats = RouteStats()
        self.owned = True
        self._subscriber = subscriber
        self._publisher = publisher
        self._http = LoopbackClient(endpoint, timeout_s=subscription.ack_deadline_s)
        self._held: dict[str, Held] = {}
        self._ready: deque[Held] = deque()
        self._acks: list[str] = []
        self._wake = asyncio.Event()
        self._ack_wake = asyncio.Event()
        self._room = asyncio.Event()
        self._pushes: set[asyncio.Task[None]] = set()
        self._pushing: set[str] = set()
        """Ack ids of the messages being pushed right now."""
        self._pullers: list[asyncio.Task[None]] = []
        self._workers: list[asyncio.Task[None]] = []
        self._loop = asyncio.get_running_loop()

    # -- running ----------------------------------------------------------------------------

    def start(self) -> None:
        """Pull, push, acknowledge and lease until :meth:`shutdown`."""
        create = self._loop.create_task
        self._pullers = [create(self._pull_forever(i * EMULATOR_POLL_S / PULLERS))
                         for i in range(PULLERS)]
        self._workers = [create(self._dispatch_forever()), create(self._ack_forever()),
                         create(self._lease_forever())]

    async def release(self) -> None:
        """Stop delivering: give back (nack) every held message that is not being pushed, so
        another deliverer gets it at once. Pushes under way finish on their own."""
        self.owned = False
        await self._hand_back([h for h in self._held.values() if h.ack_id not in self._pushing])

    async def _hand_back(self, held: list[Held]) -> None:
        """Nack ``held`` so the emulator delivers them again at once, and forget them."""
        for one in held:
            if one.timer is not None:
                one.timer.cancel()
            self._held.pop(one.ack_id, None)
        self._ready.clear()
        await self._modify_deadline([h.ack_id for h in held], 0)

    def snapshot(self) -> dict[str, Any]:
        """Counters and flow-control state, JSON-able."""
        return {
            "endpoint": self.endpoint,
            "owned": self.owned,
            "answers": dict(self.stats.answers),
            "acked": self.stats.acked,
            "redeliveries": self.stats.redeliveries,
            "dead_lettered": self.stats.dead_lettered,
            "window": self.flow.window.limit,
            "in_flight": self.flow.in_flight,
            "held": len(self._held),
            "paused_s": round(max(0.0, self.flow.paused_until - self._loop.time()), 3),
        }

    # -- pulling ----------------------------------------------------------------------------

    def _backlog_limit(self) -> int:
        return max(MAX_MESSAGES_PER_PULL, 2 * self.flow.window.limit)

    async def _pull_forever(self, delay_s: float) -> None:
        await asyncio.sleep(delay_s)
        while self.owned:
            room = self._backlog_limit() - len(self._ready)
            if room <= 0:
                self._room.clear()
                await self._room.wait()
                continue
            try:
                response = await self._subscriber.pull(
                    subscription=self.subscription.path,
                    max_messages=min(MAX_MESSAGES_PER_PULL, room), timeout=PULL_TIMEOUT_S,
                )
            except Exception as exc:  # a failed pull is retried, as Pub/Sub would
                log.warning("pull %s failed: %s", self.subscription.name, exc)
                await asyncio.sleep(0.2)
                continue
            if not self.owned:  # released while this pull waited: hand its messages back
                await self._modify_deadline([r.ack_id for r in response.received_messages], 0)
                return
            for received in response.received_messages:
                self._take(received)

    def _take(self, received: Any) -> None:
        held = Held(received.ack_id, received.message, max(received.delivery_attempt, 1) - 1)
        self._held[held.ack_id] = held
        self._ready.append(held)
        self._wake.set()

    # -- pushing ----------------------------------------------------------------------------

    async def _dispatch_forever(self) -> None:
        while True:
            self._wake.clear()
            while self._ready and self.flow.may_start(self._loop.time()):
                self._start(self._ready.popleft())
            if len(self._ready) < self._backlog_limit():
                self._room.set()
            pause = self.flow.paused_until - self._loop.time()
            timeout = pause if self._ready and pause > 0 else None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)

    def _start(self, held: Held) -> None:
        held.deliveries += 1
        if held.deliveries > 1:
            self.stats.redeliveries += 1
        started_round = self.flow.started()
        self._pushing.add(held.ack_id)
        task = self._loop.create_task(self._push(held, started_round))
        self._pushes.add(task)
        task.add_done_callback(self._pushes.discard)

    async def shutdown(self) -> None:
        """Stop delivering and leave the emulator as if this process had never held anything.

        The acknowledgements still batched are sent; the pushes under way are abandoned and
        their messages handed back (nacked) with every other held one, so the next deliverer
        gets them at once instead of after a lease runs out. No pull is left waiting on the
        emulator (see :data:`PULL_TIMEOUT_S`)."""
        self.owned = False
        self._room.set()
        if self._pullers:  # each ends when its pull comes back, handing back what it got
            await asyncio.wait(self._pullers, timeout=PULL_TIMEOUT_S + 2.0)
        for task in [*self._pullers, *self._workers, *self._pushes]:
            task.cancel()
        await asyncio.gather(*self._pullers, *self._workers, *self._pushes,
                             return_exceptions=True)
        await self._send_acks()
        await self._hand_back(list(self._held.values()))

    async def _push(self, held: Held, started_round: int) -> None:
        try:
            await self._deliver(held, started_round)
        finally:
            self._pushing.discard(held.ack_id)

    async def _deliver(self, held: Held, started_round: int) -> None:
        sub = self.subscription
        # deliveryAttempt is sent only with a dead-letter policy, as Pub/Sub does.
        attempt = held.deliveries if sub.dead_letter_topic else None
        status = 0
        try:
            # The answer's headers are ignored: Pub/Sub does not honour Retry-After.
            status, _ = await self._http.post(push_envelope(sub.path, held.message, attempt))
            outcome = str(status)
        except HttpError as exc:
            outcome = "timeout" if exc.timed_out else "unreachable"
            log.info("push to %s failed: %s", self.endpoint, exc)
        ok = 200 <= status < 300
        self.stats.answers[outcome] += 1
        self.flow.finished(ok, started_round, self._loop.time())
        self._wake.set()
        if ok:
            self._acknowledge(held)
        elif not self.owned:  # released meanwhile: hand it back to whoever delivers it now
            self._held.pop(held.ack_id, None)
            await self._modify_deadline([held.ack_id], 0)
        elif sub.max_delivery_attempts and held.deliveries >= sub.max_delivery_attempts:
            await self._dead_letter(held)
        else:
            self._retry_later(held)

    def _retry_later(self, held: Held) -> None:
        delay = self.policy.retry_delay_s(max(held.deliveries, 1))
        held.timer = self._loop.call_later(delay, self._due, held)

    def _due(self, held: Held) -> None:
        held.timer = None
        if self.owned and held.ack_id in self._held:
            self._ready.append(held)
            self._wake.set()

    def _acknowledge(self, held: Held) -> None:
        self._held.pop(held.ack_id, None)
        self._acks.append(held.ack_id)
        self.stats.acked += 1
        self._ack_wake.set()

    async def _dead_letter(self, held: Held) -> None:
        """Forward to the dead-letter topic with the attributes Pub/Sub adds, then ack."""
        sub = self.subscription
        assert sub.dead_letter_topic is not None
        message = held.message
        attributes = {
            **message.attributes,
            "CloudPubSubDeadLetterSourceSubscription": sub.name,
            "CloudPubSubDeadLetterSourceSubscriptionProject": sub.project,
            "CloudPubSubDeadLetterSourceTopicPublishTime":
                message.publish_time.isoformat(timespec="milliseconds"),
            "CloudPubSubDeadLetterSourceDeliveryCount": str(held.deliveries),
        }
        try:
            await self._publisher.publish(
                topic=sub.dead_letter_topic,
                messages=[PubsubMessage(data=message.data, attributes=attributes)],
            )
        except Exception as exc:  # as in Pub/Sub, a message that cannot be forwarded stays
            log.warning("dead-lettering %s failed (delivered again later): %s",
                        message.message_id, exc)
            self._retry_later(held)
            return
        log.warning("message %s of %s dead-lettered after %d deliveries",
                    message.message_id, sub.name, held.deliveries)
        self.stats.dead_lettered += 1
        self._acknowledge(held)

    # -- acknowledging and leasing ----------------------------------------------------------

    async def _ack_forever(self) -> None:
        """Acknowledge delivered messages, in batches under load."""
        while True:
            await self._ack_wake.wait()
            self._ack_wake.clear()
            await self._send_acks()

    async def _send_acks(self) -> None:
        while self._acks:
            batch, self._acks = self._acks[:ACK_BATCH], self._acks[ACK_BATCH:]
            try:
                await self._subscriber.acknowledge(
                    subscription=self.subscription.path, ack_ids=batch)
            except Exception as exc:  # unacked messages come back: duplicates, not loss
                log.warning("ack on %s failed: %s", self.subscription.name, exc)

    async def _lease_forever(self) -> None:
        """Keep every held message leased, so the emulator does not redeliver it by itself."""
        while self.owned:
            await asyncio.sleep(LEASE_RENEW_S)
            await self._modify_deadline(list(self._held), LEASE_S)

    async def _modify_deadline(self, ack_ids: list[str], seconds: int) -> None:
        for start in range(0, len(ack_ids), ACK_BATCH):
            try:
                await self._subscriber.modify_ack_deadline(
                    subscription=self.subscription.path,
                    ack_ids=ack_ids[start:start + ACK_BATCH], ack_deadline_seconds=seconds,
                )
            except gexc.GoogleAPICallError as exc:  # the emulator redelivers when it lapses
                log.warning("lease on %s failed: %s", self.subscription.name, exc)
