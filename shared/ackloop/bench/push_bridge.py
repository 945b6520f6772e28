"""A production-like push delivery for the emulator: long-poll pull, POST the push envelope,
ack on 2xx, retry later otherwise.

Why it exists: the Pub/Sub emulator's own push loop (``PushLoop`` in the emulator jar) pushes
ONE message at a time per subscription and, when it finds nothing, sleeps a hard-coded 100 ms
before looking again. Its streaming pull and its waiting unary ``Pull`` poll every 50 ms.
Production push delivers concurrently and promptly. So this bridge turns each push
subscription into a pull subscription, keeps several waiting pulls per subscription started at
staggered times (so one of them looks soon after a message arrives: the expected wait drops
from 25 ms to about 50 / (pullers + 1) ms), and delivers each message the way push does:

* the same envelope (``message`` with ``data``, ``attributes``, ``messageId``,
  ``publishTime``; ``subscription``; ``deliveryAttempt``) POSTed to the same endpoint;
* acknowledged only after a 2xx answer; otherwise the ack deadline is set to the answer's
  ``Retry-After`` (at least the subscription's 1 s minimum backoff) so it is redelivered, and
  the subscription's dead-letter policy still counts the attempts;
* no limit on deliveries in flight, as push (the endpoint's concurrency is the limit).

The benchmark measures ackloop with both transports and reports the emulator's floor.
Run as its own process (its CPU counts for the ackloop side)::

    python -m ackloop.bench.push_bridge --project P --route SUBSCRIPTION=URL [...]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import os
from collections.abc import Sequence
from typing import Any

import grpc
from google.cloud import pubsub_v1  # type: ignore[attr-defined]
from google.pubsub_v1.services.subscriber import SubscriberAsyncClient
from google.pubsub_v1.services.subscriber.transports import SubscriberGrpcAsyncIOTransport

from ackloop.bench.loopback_http import HttpError, LoopbackClient
from ackloop.push import encode_push

log = logging.getLogger("ackloop.bench.push_bridge")

PULLERS_PER_SUBSCRIPTION = 8
EMULATOR_POLL_S = 0.05
"""How often a waiting pull looks for messages in the emulator (hard-coded there)."""
MAX_MESSAGES_PER_PULL = 100
MIN_BACKOFF_S = 1


def retry_after(headers: dict[str, str]) -> int:
    """Seconds until redelivery: the answer's ``Retry-After``, at least the minimum backoff."""
    try:
        asked = float(headers.get("retry-after", "0"))
    except ValueError:
        asked = 0.0
    return max(MIN_BACKOFF_S, math.ceil(asked))


class Route:
    """Delivers one subscription's messages to one endpoint."""

    def __init__(
        self,
        subscriber: SubscriberAsyncClient,
        subscription: str,
        endpoint: str,
    ) -> None:
        self.subscription = subscription
        self.endpoint = endpoint
        self._subscriber = subscriber
        self._http = LoopbackClient(endpoint)
        self._acks: asyncio.Queue[str] = asyncio.Queue()
        self._tasks: set[asyncio.Task[None]] = set()

    async def pull_forever(self, delay_s: float) -> None:
        """After ``delay_s``, keep a pull waiting on the subscription and deliver what it gets."""
        await asyncio.sleep(delay_s)
        while True:
            try:
                response = await self._subscriber.pull(
                    subscription=self.subscription, max_messages=MAX_MESSAGES_PER_PULL,
                    timeout=30.0,
                )
            except Exception as exc:  # a failed pull is retried, as push would
                log.warning("pull %s failed: %s", self.subscription, exc)
                await asyncio.sleep(0.2)
                continue
            for received in response.received_messages:
                task = asyncio.create_task(self._deliver(received))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _deliver(self, received: Any) -> None:
        status = 0
        headers: dict[str, str] = {}
        try:
            status, headers = await self._http.post(encode_push(self.subscription, received))
        except HttpError as exc:
            log.warning("push to %s failed: %s", self.endpoint, exc)
        if 200 <= status < 300:
            self._acks.put_nowait(received.ack_id)
            return
        try:
            await self._subscriber.modify_ack_deadline(
                subscription=self.subscription, ack_ids=[received.ack_id],
                ack_deadline_seconds=retry_after(headers),
            )
        except Exception as exc:  # the ack deadline then expires on its own
            log.warning("nack on %s failed: %s", self.subscription, exc)

    async def ack_forever(self) -> None:
        """Acknowledge delivered messages, in batches under load."""
        while True:
            ids = [await self._acks.get()]
            while not self._acks.empty() and len(ids) < 1000:
                ids.append(self._acks.get_nowait())
            try:
                await self._subscriber.acknowledge(subscription=self.subscription, ack_ids=ids)
            except Exception as exc:  # unacked messages are redelivered: duplicates, not loss
                log.warning("ack on %s failed: %s", self.subscription, exc)


def to_pull(project: str, subscriptions: Sequence[str]) -> None:
    """Remove the push endpoint of each subscription, so the emulator stops pushing."""
    subscriber = pubsub_v1.SubscriberClient()
    try:
        for name in subscriptions:
            subscriber.modify_push_config(
                subscription=subscriber.subscription_path(project, name), push_config={}
            )
    finally:
        subscriber.close()


def async_subscriber() -> SubscriberAsyncClient:
    """An asyncio subscriber client for the emulator named by ``PUBSUB_EMULATOR_HOST``."""
    channel = grpc.aio.insecure_channel(os.environ["PUBSUB_EMULATOR_HOST"])
    return SubscriberAsyncClient(transport=SubscriberGrpcAsyncIOTransport(channel=channel))


async def serve(project: str, routes: dict[str, str]) -> None:
    """Deliver every route's messages until cancelled."""
    subscriber = async_subscriber()
    stagger = EMULATOR_POLL_S / PULLERS_PER_SUBSCRIPTION
    jobs = []
    for name, url in routes.items():
        route = Route(subscriber, f"projects/{project}/subscriptions/{name}", url)
        jobs += [route.pull_forever(i * stagger) for i in range(PULLERS_PER_SUBSCRIPTION)]
        jobs.append(route.ack_forever())
    await asyncio.gather(*jobs)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m ackloop.bench.push_bridge --project P --route SUB=URL [--route ...]``."""
    parser = argparse.ArgumentParser(description="Pull-to-push bridge for the Pub/Sub emulator.")
    parser.add_argument("--project", required=True)
    parser.add_argument("--route", action="append", required=True, help="SUBSCRIPTION=URL")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    routes = dict(r.split("=", 1) for r in args.route)
    to_pull(args.project, list(routes))
    asyncio.run(serve(args.project, routes))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
