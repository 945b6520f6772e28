"""The local stand-in for the Cloud Tasks wake queue (``infra/wakes.tf``).

``python -m ackloop_dev.devstack.task_queue --port P --state FILE``

Serves what the runtime's :class:`~ackloop.bus.wakes.CloudTasksWaker` calls,
``POST /v2/projects/P/locations/L/queues/Q/tasks`` (``{"task": {name, scheduleTime,
httpRequest}}``), as Cloud Tasks does: a task name already created (or dispatched) answers
409 ``ALREADY_EXISTS``; at its ``scheduleTime`` the task's HTTP request is made (the runtime's
are Pub/Sub ``topics.publish`` calls, made here to the Pub/Sub emulator's REST endpoint), and
one not answered 2xx is tried again with the queue's backoff (1 s, doubling, at most 300 s,
without end), as ``infra/wakes.tf`` configures it. Tasks are kept in ``--state`` (JSON lines),
so a task queue started again dispatches what it held. ``GET /_stats`` counts the tasks held,
dispatched and retried, with each dispatch's lateness (how long after its time it was made).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import datetime as dt
import heapq
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

log = logging.getLogger("ackloop_dev.devstack.task_queue")

MIN_BACKOFF_S = 1.0
MAX_BACKOFF_S = 300.0


def parse_time(text: str) -> float:
    """An RFC 3339 time (``...Z`` or with an offset) as seconds since the epoch."""
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


@dataclass
class Task:
    name: str
    at: float
    request: dict[str, Any]
    attempts: int = 0


@dataclass
class TaskQueue:
    state: Path
    tasks: dict[str, Task] = field(default_factory=dict)
    done: set[str] = field(default_factory=set)
    due: list[tuple[float, str]] = field(default_factory=list)
    dispatched: int = 0
    retried: int = 0
    lateness_s: list[float] = field(default_factory=list)
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    _http: httpx.AsyncClient | None = None
    _sending: set[asyncio.Task[None]] = field(default_factory=set)
    _runner: asyncio.Task[None] | None = None

    def load(self) -> None:
        """What an earlier run of this queue held (its adds, minus what it dispatched)."""
        if not self.state.exists():
            return
        for line in self.state.read_text().splitlines():
            record = json.loads(line)
            if record["op"] == "add":
                self.tasks[record["name"]] = Task(record["name"], record["at"], record["request"])
            else:
                self.tasks.pop(record["name"], None)
                self.done.add(record["name"])
        for task in self.tasks.values():
            heapq.heappush(self.due, (task.at, task.name))

    def _log(self, record: dict[str, Any]) -> None:
        with self.state.open("a") as out:
            out.write(json.dumps(record) + "\n")

    def add(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        task = body.get("task") or {}
        name, request = task.get("name"), task.get("httpRequest")
        if not isinstance(name, str) or not isinstance(request, dict) or not request.get("url"):
            return 400, {"error": {"code": 400, "status": "INVALID_ARGUMENT",
                                   "message": "task needs a name and an httpRequest with a url"}}
        if name in self.tasks or name in self.done:
            return 409, {"error": {"code": 409, "status": "ALREADY_EXISTS",
                                   "message": f"task {name} already exists"}}
        at = parse_time(task["scheduleTime"]) if task.get("scheduleTime") else time.time()
        self.tasks[name] = Task(name, at, request)
        self._log({"op": "add", "name": name, "at": at, "request": request})
        heapq.heappush(self.due, (at, name))
        self._wake.set()
        return 200, {**task, "scheduleTime": task.get("scheduleTime")}

    async def run(self) -> None:
        self._http = httpx.AsyncClient(timeout=30.0)
        while True:
            self._wake.clear()
            delay = self.due[0][0] - time.time() if self.due else 3600.0
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout=delay)
                continue
            at, name = heapq.heappop(self.due)
            task = self.tasks.get(name)
            if task is not None and task.at == at:
                sent = asyncio.create_task(self._dispatch(task))
                self._sending.add(sent)
                sent.add_done_callback(self._sending.discard)

    async def _dispatch(self, task: Task) -> None:
        assert self._http is not None
        request = task.request
        task.attempts += 1
        lateness = time.time() - task.at
        try:
            answer = await self._http.request(
                request.get("httpMethod", "POST"), request["url"],
                headers=request.get("headers") or {},
                content=base64.b64decode(request.get("body") or ""))
            ok = answer.is_success
            why = f"{answer.status_code} {answer.text[:200]}"
        except httpx.HTTPError as exc:
            ok, why = False, f"{type(exc).__name__}: {exc}"
        if ok:
            self.dispatched += 1
            self.lateness_s.append(round(lateness, 4))
            del self.tasks[task.name]
            self.done.add(task.name)
            self._log({"op": "done", "name": task.name})
            return
        self.retried += 1
        backoff = min(MAX_BACKOFF_S, MIN_BACKOFF_S * 2 ** (task.attempts - 1))
        log.warning("task %s failed (%s): tried again in %g s", task.name, why, backoff)
        task.at = time.time() + backoff
        heapq.heappush(self.due, (task.at, task.name))
        self._wake.set()

    def stats(self) -> dict[str, Any]:
        return {"held": len(self.tasks), "dispatched": self.dispatched, "retried": self.retried,
                "lateness_s": self.lateness_s[-1000:],
                "next": sorted((t.at, n) for n, t in self.tasks.items())[:20]}


def app(queue: TaskQueue) -> Starlette:
    async def create(request: Request) -> JSONResponse:
        try:
            body = await request.json()
        except ValueError:
            return JSONResponse({"error": {"code": 400, "message": "body is not JSON"}}, 400)
        status, answer = queue.add(body if isinstance(body, dict) else {})
        return JSONResponse(answer, status)

    async def stats(request: Request) -> JSONResponse:
        return JSONResponse(queue.stats())

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        queue._runner = asyncio.create_task(queue.run())
        yield
        queue._runner.cancel()

    return Starlette(routes=[
        Route("/v2/projects/{project}/locations/{location}/queues/{queue}/tasks", create,
              methods=["POST"]),
        Route("/_stats", stats), Route("/", stats),
    ], lifespan=lifespan)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--state", type=Path, required=True, help="where tasks are kept")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    queue = TaskQueue(args.state)
    queue.load()
    log.info("task queue on 127.0.0.1:%d holding %d task(s)", args.port, len(queue.tasks))
    uvicorn.run(app(queue), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
