"""Driving runs through ackloop the way a user does: publish a query, wait for its answer.

A run's end-to-end time is from publishing its query to receiving its answer on the answers
topic (a streaming pull on a subscription of the benchmark's own), as the client sees it, like
Temporal's ``start_workflow`` -> result.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from google.cloud import pubsub_v1  # type: ignore[attr-defined]

from ackloop.bus.pubsub import PubSubPublisher
from ackloop.config.settings import Settings
from ackloop.domain.keys import run_id_for_request
from ackloop.domain.wire import QueryMessage, RunOptions


@dataclass
class RunResult:
    """One run as the client saw it (wall-clock seconds, ``time.time()``)."""

    run_id: str
    started: float
    ended: float
    ok: bool
    error: str | None = None

    @property
    def seconds(self) -> float:
        """End-to-end seconds."""
        return self.ended - self.started


class AnswerWatcher:
    """Receives answers by streaming pull and resolves the future of each awaited run."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._subscriber = pubsub_v1.SubscriberClient()
        self._subscription = self._subscriber.subscription_path(
            settings.project_id, f"{settings.answers_topic}-bench-{uuid.uuid4().hex[:6]}"
        )
        self._waiting: dict[str, asyncio.Future[tuple[float, dict[str, Any]]]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._streaming: Any = None

    def start(self) -> None:
        """Create the subscription and open the stream (call inside the event loop)."""
        self._loop = asyncio.get_running_loop()
        topic = self._subscriber.topic_path(self._settings.project_id, self._settings.answers_topic)
        self._subscriber.create_subscription(name=self._subscription, topic=topic)
        flow = pubsub_v1.types.FlowControl(max_messages=2000)
        self._streaming = self._subscriber.subscribe(
            self._subscription, self._on_message, flow_control=flow
        )

    def _on_message(self, message: Any) -> None:
        received = time.time()
        message.ack()
        try:
            answer = json.loads(message.data)
        except ValueError:
            return
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._resolve, answer, received)

    def _resolve(self, answer: dict[str, Any], received: float) -> None:
        future = self._waiting.pop(str(answer.get("run_id")), None)
        if future is not None and not future.done():
            future.set_result((received, answer))

    def expect(self, run_id: str) -> asyncio.Future[tuple[float, dict[str, Any]]]:
        """A future of (receive time, answer) for ``run_id``; register before publishing."""
        assert self._loop is not None, "start() first"
        future: asyncio.Future[tuple[float, dict[str, Any]]] = self._loop.create_future()
        self._waiting[run_id] = future
        return future

    def stop(self) -> None:
        """Close the stream and delete the subscription."""
        if self._streaming is not None:
            self._streaming.cancel()
        try:
            self._subscriber.delete_subscription(subscription=self._subscription)
        finally:
            self._subscriber.close()


class RunDriver:
    """Publishes queries of one agent and awaits their answers."""

    def __init__(self, settings: Settings, watcher: AnswerWatcher, timeout_s: float) -> None:
        self._settings = settings
        self._watcher = watcher
        self._publisher = PubSubPublisher(settings.project_id)
        self._timeout_s = timeout_s

    async def run_once(
        self, *, agent: str = "reference", text: str = "reference run",
        options: RunOptions | None = None,
    ) -> RunResult:
        """Start one run and wait for its answer."""
        request_id = f"bench-{uuid.uuid4().hex[:16]}"
        run_id = run_id_for_request(request_id)
        query = QueryMessage(request_id=request_id, text=text, agent=agent,
                             options=options or RunOptions())
        answer = self._watcher.expect(run_id)
        started = time.time()
        try:
            await self._publisher.publish(self._settings.queries_topic,
                                          query.model_dump_json().encode())
            ended, body = await asyncio.wait_for(answer, self._timeout_s)
        except Exception as exc:  # a failed or timed-out run is a measurement, not a crash
            return RunResult(run_id, started, time.time(), False, repr(exc))
        ok = body.get("status") == "completed"
        return RunResult(run_id, started, ended, ok, None if ok else str(body.get("error")))

    async def run_sequence(self, count: int) -> list[RunResult]:
        """``count`` reference runs, one after the other."""
        return [await self.run_once() for _ in range(count)]

    async def run_pool(self, count: int, concurrency: int) -> list[RunResult]:
        """``count`` reference runs with at most ``concurrency`` in flight."""
        gate = asyncio.Semaphore(concurrency)

        async def one() -> RunResult:
            async with gate:
                return await self.run_once()

        return list(await asyncio.gather(*(one() for _ in range(count))))

    def close(self) -> None:
        """Flush and stop the publisher."""
        self._publisher.close()


def completed(results: Sequence[RunResult]) -> list[RunResult]:
    """The runs that completed."""
    return [r for r in results if r.ok]
