"""Submitting runs and waiting for them: the client side of a chaos run."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import warnings
from dataclasses import dataclass
from typing import Any

from google.cloud import pubsub_v1  # type: ignore[attr-defined,unused-ignore]

from ackloop.bus.pubsub import PubSubPublisher
from ackloop.domain.keys import run_id_for_request
from ackloop.domain.records import RunRecord
from ackloop.domain.wire import QueryMessage, RunOptions
from ackloop.store import AgentStore
from ackloop_dev.chaos.workload import Template, question


@dataclass
class Submitted:
    """One run asked for."""

    ref: str
    template: Template
    run_id: str
    submitted_at: float
    finished_at: float | None = None
    status: str = "running"
    conversation_id: str = ""


async def submit(publisher: PubSubPublisher, topic: str, template: Template, ref: str,
                 tag: str, *, conversation_id: str | None = None,
                 options: RunOptions | None = None, agent: str | None = None) -> Submitted:
    """Publish the query of run ``ref`` (in its own conversation unless one is named; to the
    default agent unless one is named)."""
    request_id = f"{tag}-{ref}"
    query = QueryMessage(request_id=request_id, text=question(template, ref),
                         conversation_id=conversation_id, options=options or RunOptions(),
                         agent=agent or "default")
    await publisher.publish(topic, query.model_dump_json().encode())
    run_id = run_id_for_request(request_id)
    return Submitted(ref, template, run_id, time.time(), conversation_id=conversation_id or run_id)


async def poll(store: AgentStore, pending: list[Submitted]) -> list[Submitted]:
    """Refresh ``pending``; returns those that finished."""
    if not pending:
        return []
    snaps = await store.db.get_all([store.run_path(s.run_id) for s in pending])
    done = []
    for item, snap in zip(pending, snaps, strict=True):
        if snap is None:
            continue
        run = RunRecord.model_validate(snap.data)
        if run.status.terminal:
            item.status, item.finished_at = run.status.value, run.finished_at or time.time()
            done.append(item)
    return done


async def wait_all(store: AgentStore, runs: list[Submitted], timeout_s: float) -> list[Submitted]:
    """Wait until every run finished or ``timeout_s`` passed; returns the unfinished ones."""
    pending = list(runs)
    deadline = time.monotonic() + timeout_s
    while pending and time.monotonic() < deadline:
        done = await poll(store, pending)
        pending = [p for p in pending if p not in done]
        if pending:
            await asyncio.sleep(0.2)
    return pending


class AnswerCollector:
    """Drains the answers subscription in the background; every end message, by run id."""

    def __init__(self, subscription: str) -> None:
        self.subscription = subscription
        self.by_run: dict[str, list[dict[str, Any]]] = {}
        self._stop = asyncio.Event()
        self._draining = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None

    def _pull(self) -> list[dict[str, Any]]:
        subscriber = pubsub_v1.SubscriberClient()
        found: list[dict[str, Any]] = []
        try:
            while True:
                # return_immediately (deprecated, still honoured by the emulator): a waiting pull
                # that the client abandons can hold messages until their ack deadline.
                with warnings.catch_warnings():
                    warnings.filterwarnings("ignore", "The return_immediately flag",
                                            DeprecationWarning)
                    response = subscriber.pull(subscription=self.subscription,
                                               max_messages=500, return_immediately=True,
                                               timeout=10)
                if not response.received_messages:
                    return found
                for received in response.received_messages:
                    with contextlib.suppress(ValueError):
                        found.append(json.loads(received.message.data))
                subscriber.acknowledge(subscription=self.subscription,
                                       ack_ids=[m.ack_id for m in response.received_messages])
        finally:
            subscriber.close()

    async def drain(self) -> None:
        """Pull what is there now."""
        async with self._draining:
            pulled = await asyncio.to_thread(self._pull)
        for message in pulled:
            if isinstance(message, dict) and message.get("run_id"):
                self.by_run.setdefault(str(message["run_id"]), []).append(message)

    async def _loop(self, every_s: float) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(Exception):  # the next pull tries again
                await self.drain()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), every_s)

    def start(self, every_s: float = 1.0) -> None:
        self._task = asyncio.create_task(self._loop(every_s))

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task
        await self.drain()
