"""Delivery for the chaos stack: pull from each step subscription, POST the push envelope to the
function twice, acknowledge on the first copy's 2xx, redeliver otherwise.

Why not the emulator's own push: measured on this machine, the Pub/Sub emulator redelivers a
push message that got a non-2xx answer twice (after ~1 s and ~3 s) and then not again (nothing
in the next 100 s), and its dead-letter forwarding never triggers for push. A killed function
makes exactly those failures, so runs would stall on the emulator, not on ackloop. Here every
non-2xx answer sets the message's ack deadline to its ``Retry-After`` (at least 1 s), so Pub/Sub
redelivers it, counts the delivery attempt and dead-letters it after the subscription's
``max_delivery_attempts``, as production push does.

Every delivery is forwarded twice, one after the other or both at once (seeded dice); the first
copy's status decides the acknowledgement, so the second copy is a pure duplicate the engine
must absorb. A function that cannot be reached (killed, restarting) counts as a 502.

``python -m ackloop.chaos.proxy --port N --project P --route SUBSCRIPTION=NAME=URL ...``;
``GET /_stats`` (counters), ``POST /_config`` (``{"duplicate": bool, "concurrent_share": p}``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import math
import random
from collections import Counter
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx
import uvicorn
from google.api_core import exceptions as gexc
from google.cloud import pubsub_v1  # type: ignore[attr-defined,unused-ignore]
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ackloop.push import encode_push

log = logging.getLogger("ackloop.chaos.proxy")

UNREACHABLE = 502
PULLERS = 3
MAX_MESSAGES = 50
EMPTY_PAUSE_S = 0.05


@dataclass(frozen=True)
class Route_:
    """A pull subscription and the function its messages go to."""

    subscription: str
    name: str
    url: str


@dataclass
class DuplicatingDelivery:
    """Forwarding state: routes, the dice and the counters."""

    routes: list[Route_]
    duplicate: bool = True
    concurrent_share: float = 0.5
    seed: int = 0
    counters: Counter[str] = field(default_factory=Counter)
    in_flight: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self._random = random.Random(self.seed)
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(120.0, connect=2.0),
            limits=httpx.Limits(max_connections=200, max_keepalive_connections=50),
        )
        self._subscriber = pubsub_v1.SubscriberClient()

    async def _forward(self, route: Route_, body: bytes) -> tuple[int, float | None]:
        self.in_flight[route.name] += 1
        try:
            response = await self._client.post(
                route.url, content=body, headers={"content-type": "application/json"})
        except httpx.HTTPError:
            self.counters[f"{route.name}:unreachable"] += 1
            return UNREACHABLE, None
        finally:
            self.in_flight[route.name] -= 1
        self.counters[f"{route.name}:status:{response.status_code}"] += 1
        retry = response.headers.get("retry-after")
        return response.status_code, float(retry) if retry else None

    async def deliver(self, route: Route_, body: bytes) -> tuple[int, float | None]:
        """Forward one message (twice when duplicating); the first copy's answer."""
        self.counters[f"{route.name}:pushes"] += 1
        if not self.duplicate:
            return await self._forward(route, body)
        if self._random.random() < self.concurrent_share:
            self.counters[f"{route.name}:duplicated_concurrently"] += 1
            first, _ = await asyncio.gather(self._forward(route, body),
                                            self._forward(route, body))
            return first
        self.counters[f"{route.name}:duplicated_sequentially"] += 1
        first = await self._forward(route, body)
        await self._forward(route, body)
        return first

    async def _handle(self, route: Route_, received: Any) -> None:
        try:
            await self._deliver_and_settle(route, received)
        except Exception:  # not acknowledged: Pub/Sub redelivers after the ack deadline
            log.exception("delivery of %s failed", received.message.message_id)

    async def _deliver_and_settle(self, route: Route_, received: Any) -> None:
        status, retry_after = await self.deliver(route, encode_push(route.subscription, received))
        log.info("%s %s run=%s attempt=%s -> %s", route.name, received.message.message_id,
                 received.message.attributes.get("run_id"), received.delivery_attempt, status)
        if 200 <= status < 300:
            await asyncio.to_thread(self._subscriber.acknowledge, subscription=route.subscription,
                                    ack_ids=[received.ack_id])
            return
        seconds = max(1, math.ceil(retry_after or 1))
        await asyncio.to_thread(self._subscriber.modify_ack_deadline,
                                subscription=route.subscription, ack_ids=[received.ack_id],
                                ack_deadline_seconds=seconds)

    async def pull_forever(self, route: Route_) -> None:
        """One puller: long-poll, hand each message to its own task."""
        tasks: set[asyncio.Task[None]] = set()
        while True:
            try:
                # return_immediately: a waiting pull that the client gives up on can swallow
                # messages until their ack deadline (measured on the emulator).
                response = await asyncio.to_thread(
                    self._subscriber.pull, request={
                        "subscription": route.subscription, "max_messages": MAX_MESSAGES,
                        "return_immediately": True}, timeout=10)
            except (gexc.DeadlineExceeded, gexc.ServiceUnavailable, gexc.RetryError):
                continue
            except gexc.NotFound:  # being re-created (another dead-letter policy)
                await asyncio.sleep(0.2)
                continue
            except Exception:  # the puller must outlive any one failed pull
                log.exception("pull from %s failed", route.subscription)
                await asyncio.sleep(0.2)
                continue
            if not response.received_messages:
                await asyncio.sleep(EMPTY_PAUSE_S)
            for received in response.received_messages:
                task = asyncio.create_task(self._handle(route, received))
                tasks.add(task)
                task.add_done_callback(tasks.discard)

    def stats(self) -> dict[str, Any]:
        return {"duplicate": self.duplicate, "concurrent_share": self.concurrent_share,
                "counters": dict(self.counters), "in_flight": dict(self.in_flight)}


def create_app(delivery: DuplicatingDelivery) -> Starlette:
    """Admin endpoints; the pullers start with the app."""
    tasks: list[asyncio.Task[None]] = []

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # Blocking pulls, acks and deadline changes run in threads: enough of them that the
        # long-polling pulls never starve an acknowledgement.
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=64))
        for route in delivery.routes:
            tasks.extend(asyncio.create_task(delivery.pull_forever(route))
                         for _ in range(PULLERS))
        yield
        for task in tasks:
            task.cancel()

    async def stats(request: Request) -> Response:
        return JSONResponse(delivery.stats())

    async def configure(request: Request) -> Response:
        body = await request.json()
        if "duplicate" in body:
            delivery.duplicate = bool(body["duplicate"])
        if "concurrent_share" in body:
            delivery.concurrent_share = float(body["concurrent_share"])
        return JSONResponse(delivery.stats())

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok", "pullers": len(tasks)})

    return Starlette(lifespan=lifespan, routes=[
        Route("/", health, methods=["GET"]),
        Route("/_stats", stats, methods=["GET"]),
        Route("/_config", configure, methods=["POST"]),
    ])


def main(argv: list[str] | None = None) -> None:
    """Serve until SIGTERM."""
    parser = argparse.ArgumentParser(description="Duplicating pull->push delivery (loopback).")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--route", action="append", default=[],
                        help="projects/P/subscriptions/S=name=http://upstream/")
    parser.add_argument("--concurrent-share", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    routes = [Route_(*item.split("=", 2)) for item in args.route]
    delivery = DuplicatingDelivery(routes, concurrent_share=args.concurrent_share, seed=args.seed)
    uvicorn.run(create_app(delivery), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
