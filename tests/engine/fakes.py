"""Small in-memory collaborators for engine tests."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx

from ackloop.agents.agent import Agent, AgentRegistry
from ackloop.api.app import create_app
from ackloop.bus.memory import MemoryPublisher
from ackloop.bus.wakes import NoWaker, Waker
from ackloop.config.settings import Settings
from ackloop.docdb.counting import CountingDocumentDB
from ackloop.docdb.memory import MemoryDocumentDB
from ackloop.domain.clock import Clock, ManualClock
from ackloop.domain.wire import FunctionCall, QueryMessage
from ackloop.engine.deps import Deps
from ackloop.model.base import ModelClient
from ackloop.store import AgentStore
from ackloop.store.deltas import read_deltas
from ackloop.testing.inprocess import InProcessLoop
from ackloop.tools.base import ToolContext, ToolOutcome
from ackloop_dev.faults import FaultPoints, with_faults


class SimulatedCrash(BaseException):
    """Stands for SIGKILL inside one process: nothing in the engine catches a BaseException."""


class CrashingFaults(FaultPoints):
    """The crash points of ackloop_dev.faults, raising :class:`SimulatedCrash` in place of a
    SIGKILL, ``times`` times each."""

    def __init__(self, points: set[str], times: int = 1) -> None:
        super().__init__(frozenset(points))
        self.remaining = Counter({p: times for p in points})

    def hit(self, name: str) -> None:
        if self.remaining[name] > 0:
            self.remaining[name] -= 1
            raise SimulatedCrash(name)


class CountingToolbox:
    """Tools that answer at once and count their executions."""

    def __init__(self, results: dict[str, Any] | None = None, retry_safe: bool = True) -> None:
        self.results = results or {}
        self.executed: Counter[str] = Counter()
        self.contexts: list[ToolContext] = []
        self.retry_safe = retry_safe

    def declarations(self) -> list[dict[str, Any]]:
        return [
            {"name": name, "description": f"The {name} tool.",
             "parameters": {"type": "object", "properties": {"key": {"type": "string"}}}}
            for name in self.results
        ]

    def is_retry_safe(self, name: str) -> bool:
        return self.retry_safe

    async def execute(self, call: FunctionCall, context: ToolContext) -> ToolOutcome:
        self.executed[call.name] += 1
        self.contexts.append(context)
        if call.name not in self.results:
            return ToolOutcome(response={"error": f"unknown tool {call.name}"}, is_error=True)
        return ToolOutcome(response={"result": self.results[call.name]})


def make_loop(
    model: ModelClient,
    toolbox: Any,
    *,
    settings: Settings | None = None,
    faults: FaultPoints | None = None,
    instructions: str = "Be brief.",
    clock: Clock | None = None,
    waker: Waker | None = None,
) -> InProcessLoop:
    settings = settings or Settings(lease_seconds=10.0)
    publisher = MemoryPublisher()
    deps = Deps(
        settings=settings,
        store=AgentStore(CountingDocumentDB(MemoryDocumentDB())),
        publisher=publisher,
        model=model,
        agents=AgentRegistry([Agent("default", instructions, toolbox)]),
        clock=clock or ManualClock(),
        owner="test-owner",
        waker=waker or NoWaker(),
    )
    return InProcessLoop(with_faults(deps, faults) if faults else deps, publisher)


async def delta_texts(loop: InProcessLoop, run_id: str) -> dict[int, str]:
    """The run's stored deltas' text, by attempt."""
    by_attempt: dict[int, str] = {}
    for _, delta in await read_deltas(loop.deps.store, run_id, "0", None):
        by_attempt[delta.attempt] = by_attempt.get(delta.attempt, "") + delta.text
    return by_attempt


async def first_model_step(loop: InProcessLoop, query: QueryMessage) -> tuple[Any, Any]:
    """Deliver ``query`` and hand back, undelivered, the message of its run's first model
    step (kind and message), for a test that delivers it its own way."""
    await loop.submit(query)
    loop._collect()
    (kind, message), = list(loop._queue)
    loop._queue.clear()
    await loop.deliver(kind, message)
    loop._collect()
    (kind, step), = list(loop._queue)
    loop._queue.clear()
    return kind, step


@asynccontextmanager
async def api_of(loop: InProcessLoop, settings: Settings | None = None
                 ) -> AsyncIterator[httpx.AsyncClient]:
    """The HTTP API over ``loop``'s engine, in process (``auth=none`` unless ``settings`` say)."""

    async def deps() -> Deps:
        return loop.deps

    app = create_app(settings or Settings(api_auth="none"), deps=deps)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as api:
        yield api
