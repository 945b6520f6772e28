"""The duplicating front: between the push delivery and the functions, it sends every push twice.

Delivery itself is the local stack's push delivery (:mod:`ackloop_dev.devstack.push_delivery`):
production's retry policy (exponential backoff, ``Retry-After`` ignored), ack deadlines,
``deliveryAttempt`` counting, dead-lettering and push flow control. Its routes point here,
``http://127.0.0.1:PORT/NAME``, and this front forwards each push to the function ``NAME``:

* duplicating (the fault phase): a second copy of the same push (same ``messageId``) is sent
  too, at the same time or right after the first one answered (seeded dice). The first copy's
  answer goes back to the push delivery, so the second is a pure duplicate the engine must
  absorb, as it must absorb Pub/Sub's at-least-once redeliveries;
* not duplicating: forwarded once, unchanged.

A function that cannot be reached (killed, restarting) answers 502 here, which the push
delivery treats as any failed push. Routes named with ``--no-duplicate`` are never duplicated
(the dead-letter function).

``python -m ackloop_dev.chaos.proxy --port N --route NAME=URL [...] [--no-duplicate NAME]``;
``GET /_stats`` (counters), ``POST /_config`` (``{"duplicate": bool, "concurrent_share": p}``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

log = logging.getLogger("ackloop_dev.chaos.proxy")

UNREACHABLE = 502
FORWARD_TIMEOUT_S = 3600.0
"""The push delivery enforces the ack deadline; the front never cuts a push short itself."""


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class DuplicatingFront:
    """Forwarding state: upstreams, the dice and the counters."""

    upstreams: dict[str, str]
    no_duplicate: frozenset[str] = frozenset()
    duplicate: bool = True
    concurrent_share: float = 0.5
    seed: int = 0
    counters: Counter[str] = field(default_factory=Counter)
    in_flight: Counter[str] = field(default_factory=Counter)
    duplicated_runs: set[str] = field(default_factory=set)
    """Runs with a step push this front sent twice: a step run unclaimed may then be executed
    more than once (both copies of its push, or a copy of its predecessor's re-sending its
    message while it runs), which the chaos checks report apart."""

    model_step_messages: dict[str, set[str]] = field(default_factory=dict)
    """Distinct message ids seen per model step (``run/step``): more than one is a model step
    the engine itself published again (two siblings both joining a turn, or an outbox re-sent
    while its target ran), told apart from this front's copies, which keep their id."""

    def __post_init__(self) -> None:
        self._random = random.Random(self.seed)
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(FORWARD_TIMEOUT_S, connect=2.0),
            limits=httpx.Limits(max_connections=400, max_keepalive_connections=100),
        )
        self._copies: set[asyncio.Task[Answer]] = set()

    async def _forward(self, name: str, body: bytes) -> Answer:
        self.in_flight[name] += 1
        try:
            response = await self._client.post(
                self.upstreams[name], content=body, headers={"content-type": "application/json"})
        except httpx.HTTPError:
            self.counters[f"{name}:unreachable"] += 1
            return Answer(UNREACHABLE)
        finally:
            self.in_flight[name] -= 1
        self.counters[f"{name}:status:{response.status_code}"] += 1
        headers = {k: v for k, v in response.headers.items() if k.lower() == "retry-after"}
        return Answer(response.status_code, response.content, headers)

    def _second_copy(self, name: str, body: bytes) -> asyncio.Task[Answer]:
        task = asyncio.create_task(self._forward(name, body))
        self._copies.add(task)
        task.add_done_callback(self._copies.discard)
        return task

    async def push(self, name: str, body: bytes) -> Answer:
        """Forward one push (twice when duplicating); the first copy's answer."""
        self.counters[f"{name}:pushes"] += 1
        if (sent := _model_step_of(body)) is not None:
            self.model_step_messages.setdefault(sent[0], set()).add(sent[1])
        if not self.duplicate or name in self.no_duplicate:
            return await self._forward(name, body)
        if run := _run_of(body):
            self.duplicated_runs.add(run)
        if self._random.random() < self.concurrent_share:
            self.counters[f"{name}:duplicated_concurrently"] += 1
            self._second_copy(name, body)
            return await self._forward(name, body)
        self.counters[f"{name}:duplicated_sequentially"] += 1
        first = await self._forward(name, body)
        self._second_copy(name, body)
        return first

    def stats(self) -> dict[str, Any]:
        return {"duplicate": self.duplicate, "concurrent_share": self.concurrent_share,
                "counters": dict(self.counters), "in_flight": dict(self.in_flight),
                "duplicated_runs": sorted(self.duplicated_runs),
                "model_steps_published_again": {
                    step: len(ids) - 1 for step, ids in self.model_step_messages.items()
                    if len(ids) > 1}}


def _model_step_of(body: bytes) -> tuple[str, str] | None:
    """``(run/step, message id)`` of a model step message's push envelope, else None."""
    try:
        message = json.loads(body)["message"]
        attributes = message["attributes"]
        step = str(attributes["step"])
        if not step.endswith("-model"):
            return None
        return f"{attributes['run_id']}/{step}", str(message["messageId"])
    except (ValueError, KeyError, TypeError):
        return None


def _run_of(body: bytes) -> str | None:
    """The run of a step message's push envelope (None for any other push)."""
    try:
        attributes = json.loads(body)["message"]["attributes"]
        return str(attributes["run_id"]) if "step" in attributes else None
    except (ValueError, KeyError, TypeError):
        return None


def published_again(before: dict[str, Any], after: dict[str, Any]) -> int:
    """Model step messages the engine published more than once for one step between two
    readings of the duplicating front (:class:`DuplicatingFront`: its
    own copies keep their message id, so these are the engine's: a join made by two siblings,
    or an outbox re-sent while its target ran)."""
    earlier = before.get("model_steps_published_again") or {}
    return sum(n - int(earlier.get(step, 0))
               for step, n in (after.get("model_steps_published_again") or {}).items())


def create_app(front: DuplicatingFront) -> Starlette:
    async def push(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in front.upstreams:
            return JSONResponse({"error": f"no route {name!r}"}, status_code=404)
        answer = await front.push(name, await request.body())
        return Response(answer.body, status_code=answer.status, headers=answer.headers,
                        media_type="application/json")

    async def stats(request: Request) -> Response:
        return JSONResponse(front.stats())

    async def configure(request: Request) -> Response:
        body = await request.json()
        if "duplicate" in body:
            front.duplicate = bool(body["duplicate"])
        if "concurrent_share" in body:
            front.concurrent_share = float(body["concurrent_share"])
        return JSONResponse(front.stats())

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok", "routes": sorted(front.upstreams)})

    return Starlette(routes=[
        Route("/", health, methods=["GET"]),
        Route("/_stats", stats, methods=["GET"]),
        Route("/_config", configure, methods=["POST"]),
        Route("/{name}", push, methods=["POST"]),
    ])


def main(argv: list[str] | None = None) -> None:
    """Serve until SIGTERM."""
    parser = argparse.ArgumentParser(description="Duplicating front of the functions (loopback).")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--route", action="append", default=[], help="NAME=http://upstream/")
    parser.add_argument("--no-duplicate", action="append", default=[], help="a route NAME")
    parser.add_argument("--concurrent-share", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    upstreams = dict(item.split("=", 1) for item in args.route)
    front = DuplicatingFront(upstreams, frozenset(args.no_duplicate),
                             concurrent_share=args.concurrent_share, seed=args.seed)
    uvicorn.run(create_app(front), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
