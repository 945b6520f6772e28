"""The local stack's push delivery: production Pub/Sub push semantics on top of the emulator.

Why not the emulator's own push: it pushes one message at a time per subscription and idles
100 ms between looks, sends no ``deliveryAttempt``, and cannot follow a retry policy (with one
set it redelivers about three times and then never again). So the local stack creates its push
subscriptions as pull subscriptions (no push endpoint, no retry policy) and this process
delivers them the way production push does (:mod:`ackloop_dev.devstack.push_route`):

* the push envelope (``message`` with ``data``, ``attributes``, ``messageId``,
  ``publishTime``; ``subscription``; ``deliveryAttempt`` when a dead-letter policy is set,
  counting from 1) is POSTed to the endpoint, many pushes in flight per subscription;
* a 2xx answer acknowledges; a non-2xx answer, a connection error, or no answer within the
  subscription's ack deadline (the request timeout) is delivered again after the retry
  policy's exponential backoff (:class:`ackloop.bus.delivery.DeliveryPolicy`); ``Retry-After``
  is ignored, as production ignores it;
* after the dead-letter policy's ``max_delivery_attempts`` failed deliveries the message is
  published to the dead-letter topic with the ``CloudPubSubDeadLetterSource*`` attributes
  Pub/Sub adds, and the original is acknowledged;
* flow control as Google documents it (:mod:`ackloop_dev.devstack.push_flow`): a slow-start window
  of outstanding pushes per subscription, and a subscription-wide pause after failures.

Each subscription's ack deadline and dead-letter policy are read from the subscription itself,
as Pub/Sub does; the retry policy comes from :func:`ackloop.bus.delivery.load_policy` (the
emulator
cannot hold one, see above). One factor, ``--time-scale`` (default 1), multiplies every
duration of that policy, the ack deadlines and the push backoff; it is printed at start-up.

At start the process takes each subscription over (removing any push endpoint, so the emulator
stops pushing it) and then checks it every second: a subscription that is recreated or given a
push endpoint by someone else is released (its held messages are handed back), so another
deliverer can take over without duplicates from this one.

On SIGTERM or SIGINT it stops pulling, lets its waiting pulls come back (at most
:data:`~ackloop_dev.devstack.push_route.PULL_TIMEOUT_S`), sends the acknowledgements it owes and
hands every other held message back, so a stack stopped and started again delays no message, as
production push (which has no process to stop) delays none. Only a killed push delivery leaves
messages hidden on the emulator: the ones it held until their lease runs out, and new ones
handed to its abandoned pulls until their ack deadline runs out.

``python -m ackloop_dev.devstack.push_delivery --project P --route SUBSCRIPTION=URL [...]
[--time-scale F] [--stats-port N]`` (or ``--config FILE``, a JSON object with the same keys:
``project``, ``routes`` as ``{subscription: url}``, ``time_scale``, ``stats_port``).
``GET http://127.0.0.1:N/_stats`` returns the counters of every subscription: answers by
status, redeliveries, dead letters, the current window, pushes in flight.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from google.api_core import exceptions as gexc
from google.pubsub_v1.services.publisher import PublisherAsyncClient
from google.pubsub_v1.services.publisher.transports import PublisherGrpcAsyncIOTransport
from google.pubsub_v1.services.subscriber import SubscriberAsyncClient
from google.pubsub_v1.services.subscriber.transports import SubscriberGrpcAsyncIOTransport
from google.pubsub_v1.types import PushConfig

from ackloop.bus.delivery import DeliveryPolicy, load_policy
from ackloop_dev.devstack.push_route import RouteDelivery, Subscription

log = logging.getLogger("ackloop_dev.devstack.push_delivery")

OWNERSHIP_CHECK_S = 1.0
"""How often each subscription is checked for having been recreated or given a push endpoint."""


@dataclass(frozen=True)
class DeliveryConfig:
    """What to deliver: subscriptions (short names or paths) to endpoint URLs."""

    project: str
    routes: dict[str, str]
    time_scale: float = 1.0
    stats_port: int = 0
    """Loopback port of ``GET /_stats`` (0: any free port, printed at start-up)."""


def subscription_path(project: str, name: str) -> str:
    return name if name.startswith("projects/") else f"projects/{project}/subscriptions/{name}"


def _fingerprint(sub: Any) -> tuple[object, ...]:
    """What identifies the subscription this process took over (the emulator has no uid)."""
    return (sub.topic, sub.ack_deadline_seconds, tuple(sorted(sub.labels.items())),
            sub.dead_letter_policy.dead_letter_topic, sub.push_config.push_endpoint)


class PushDelivery:
    """Every route of one stack, and the counters endpoint."""

    def __init__(self, config: DeliveryConfig, policy: DeliveryPolicy) -> None:
        self.config = config
        self.policy = policy.scaled(config.time_scale)
        host = os.environ.get("PUBSUB_EMULATOR_HOST")
        if not host:
            raise RuntimeError("PUBSUB_EMULATOR_HOST is not set: the push delivery needs the "
                               "Pub/Sub emulator")
        self._channel = channel = grpc.aio.insecure_channel(host)
        self.subscriber = SubscriberAsyncClient(
            transport=SubscriberGrpcAsyncIOTransport(channel=channel))
        self.publisher = PublisherAsyncClient(
            transport=PublisherGrpcAsyncIOTransport(channel=channel))
        self.routes: dict[str, RouteDelivery] = {}
        self._fingerprints: dict[str, tuple[object, ...]] = {}

    async def take_over(self) -> None:
        """Turn each subscription into a pull subscription and read its delivery settings."""
        for name, url in self.config.routes.items():
            path = subscription_path(self.config.project, name)
            await self.subscriber.modify_push_config(subscription=path, push_config=PushConfig())
            sub = await self.subscriber.get_subscription(subscription=path)
            dead_letter = sub.dead_letter_policy
            subscription = Subscription(
                path=path,
                project=path.split("/")[1],
                name=path.rsplit("/", 1)[1],
                ack_deadline_s=sub.ack_deadline_seconds * self.config.time_scale,
                dead_letter_topic=dead_letter.dead_letter_topic or None,
                max_delivery_attempts=(dead_letter.max_delivery_attempts or None)
                if dead_letter.dead_letter_topic else None,
            )
            self._fingerprints[path] = _fingerprint(sub)
            self.routes[path] = RouteDelivery(self.subscriber, self.publisher, subscription,
                                              url, self.policy, self.config.time_scale)
            dead_letter_text = (
                f"dead-letter to {subscription.dead_letter_topic} after "
                f"{subscription.max_delivery_attempts} deliveries"
                if subscription.dead_letter_topic else "no dead-letter policy")
            log.info("delivering %s -> %s (ack deadline %.3g s, %s)",
                     path, url, subscription.ack_deadline_s, dead_letter_text)

    async def watch_ownership(self) -> None:
        """Release a subscription someone else recreated or gave a push endpoint."""
        while True:
            await asyncio.sleep(OWNERSHIP_CHECK_S)
            for path, route in self.routes.items():
                if not route.owned:
                    continue
                try:
                    sub = await self.subscriber.get_subscription(subscription=path)
                    changed = _fingerprint(sub) != self._fingerprints[path]
                except gexc.NotFound:
                    changed = True
                except gexc.GoogleAPICallError as exc:
                    log.warning("checking %s failed: %s", path, exc)
                    continue
                if changed:
                    log.warning("%s was recreated or set to push by someone else: released",
                                path)
                    await route.release()

    def stats(self) -> dict[str, Any]:
        return {
            "time_scale": self.config.time_scale,
            "policy": {
                "minimum_backoff_s": self.policy.minimum_backoff_s,
                "maximum_backoff_s": self.policy.maximum_backoff_s,
            },
            "subscriptions": {r.subscription.name: r.snapshot() for r in self.routes.values()},
        }

    async def serve_stats(self) -> asyncio.Server:
        """``GET /_stats`` on 127.0.0.1 (one request per connection)."""

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                request = await reader.readuntil(b"\r\n\r\n")
                target = request.split(b" ", 2)[1] if request.count(b" ") >= 2 else b""
                if target == b"/_stats":
                    status, body = "200 OK", json.dumps(self.stats()).encode()
                else:
                    status, body = "404 Not Found", b'{"error": "GET /_stats"}'
                writer.write(f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
                             f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
                             .encode() + body)
                await writer.drain()
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
                pass
            finally:
                writer.close()

        return await asyncio.start_server(handle, "127.0.0.1", self.config.stats_port)

    async def run(self, stop: asyncio.Event) -> None:
        """Take over, then deliver until ``stop`` is set; on the way out hand every held
        message back and leave no pull waiting, so a stop delays no message."""
        await self.take_over()
        server = await self.serve_stats()
        port = server.sockets[0].getsockname()[1]
        print(f"push delivery: stats at http://127.0.0.1:{port}/_stats", flush=True)
        for route in self.routes.values():
            route.start()
        watch = asyncio.get_running_loop().create_task(self.watch_ownership())
        try:
            await stop.wait()
        finally:
            server.close()
            watch.cancel()
            await asyncio.gather(watch, *(route.shutdown() for route in self.routes.values()),
                                 return_exceptions=True)
            await self._channel.close()


def parse_args(argv: Sequence[str] | None) -> DeliveryConfig:
    parser = argparse.ArgumentParser(
        prog="python -m ackloop_dev.devstack.push_delivery",
        description="Deliver emulator subscriptions to HTTP endpoints the way Pub/Sub push does.")
    parser.add_argument("--config", type=Path, help="JSON file with the options below")
    parser.add_argument("--project")
    parser.add_argument("--route", action="append", default=[], help="SUBSCRIPTION=URL")
    parser.add_argument("--time-scale", type=float, default=None,
                        help="multiplies every delivery duration (default 1: production)")
    parser.add_argument("--stats-port", type=int, default=None)
    args = parser.parse_args(argv)
    raw: dict[str, Any] = json.loads(args.config.read_text()) if args.config else {}
    routes = dict(raw.get("routes", {}))
    for route in args.route:
        subscription, sep, url = route.partition("=")
        if not sep:
            parser.error(f"--route wants SUBSCRIPTION=URL, got {route!r}")
        routes[subscription] = url
    project = args.project or raw.get("project")
    if not project or not routes:
        parser.error("a project and at least one route are needed")
    time_scale = args.time_scale if args.time_scale is not None else raw.get("time_scale", 1.0)
    if time_scale <= 0:
        parser.error("--time-scale must be positive")
    stats_port = args.stats_port if args.stats_port is not None else raw.get("stats_port", 0)
    return DeliveryConfig(project, routes, float(time_scale), int(stats_port))


async def _main(config: DeliveryConfig) -> None:
    delivery = PushDelivery(config, load_policy())
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await delivery.run(stop)


def main(argv: Sequence[str] | None = None) -> int:
    config = parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stdout,
                        format="%(asctime)s %(levelname)s %(message)s")
    policy = load_policy().scaled(config.time_scale)
    # Printed first, so a log always says whether its timings are production's.
    print(f"push delivery: time scale {config.time_scale:g} (backoff "
          f"{policy.minimum_backoff_s:g}..{policy.maximum_backoff_s:g} s, "
          f"{'production policy' if config.time_scale == 1 else 'SCALED, not production'})",
          flush=True)
    asyncio.run(_main(config))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
