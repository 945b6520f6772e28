"""A push delivery process of its own per test, delivering one fresh subscription on the
session's Pub/Sub emulator to a test endpoint."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from google.cloud import pubsub_v1

from ackloop_dev.devstack.emulators import free_port
from ackloop_dev.devstack.processes import ManagedProcess
from tests.support.emulators import EmulatorSession


@dataclass
class Twin:
    """A running push delivery for one subscription, and what the test needs to drive it."""

    process: ManagedProcess
    stats_url: str
    topic: str
    subscription: str
    dead_letters: str | None
    """A pull subscription on the dead-letter topic, for the test to read."""

    def publish(self, data: bytes, **attributes: str) -> str:
        publisher = pubsub_v1.PublisherClient()
        message_id: str = publisher.publish(self.topic, data, **attributes).result(timeout=30)
        return message_id

    def stats(self) -> dict[str, Any]:
        """This subscription's counters from ``GET /_stats``."""
        body = httpx.get(self.stats_url, timeout=5).json()
        stats: dict[str, Any] = body["subscriptions"][self.subscription.rsplit("/", 1)[1]]
        return stats

    def pull_dead_letters(self, timeout_s: float = 10.0) -> list[Any]:
        assert self.dead_letters is not None
        subscriber = pubsub_v1.SubscriberClient()
        try:
            response = subscriber.pull(subscription=self.dead_letters, max_messages=10,
                                       timeout=timeout_s)
            return list(response.received_messages)
        finally:
            subscriber.close()


@pytest.fixture
def start_twin(emulator_session: EmulatorSession, tmp_path: Path
               ) -> Iterator[Callable[..., Twin]]:
    """``start_twin(url, time_scale=, ack_deadline_s=60, max_delivery_attempts=None)``."""
    started: list[ManagedProcess] = []
    project = emulator_session.project_id

    def start(url: str, *, time_scale: float, ack_deadline_s: int = 60,
              max_delivery_attempts: int | None = None) -> Twin:
        publisher = pubsub_v1.PublisherClient()
        subscriber = pubsub_v1.SubscriberClient()
        tag = EmulatorSession.unique("twin")
        topic = publisher.create_topic(name=publisher.topic_path(project, tag)).name
        request: dict[str, Any] = {
            "name": subscriber.subscription_path(project, f"{tag}-push"),
            "topic": topic,
            "ack_deadline_seconds": ack_deadline_s,
        }
        dead_letters = None
        if max_delivery_attempts is not None:
            dead_topic = publisher.create_topic(
                name=publisher.topic_path(project, f"{tag}-dead")).name
            dead_letters = subscriber.create_subscription(
                name=subscriber.subscription_path(project, f"{tag}-dead-tail"), topic=dead_topic,
            ).name
            request["dead_letter_policy"] = {"dead_letter_topic": dead_topic,
                                             "max_delivery_attempts": max_delivery_attempts}
        subscription = subscriber.create_subscription(request=request).name
        subscriber.close()
        port = free_port()
        process = ManagedProcess(
            "push-delivery",
            [sys.executable, "-m", "ackloop_dev.devstack.push_delivery", "--project", project,
             "--route", f"{subscription}={url}", "--time-scale", str(time_scale),
             "--stats-port", str(port)],
            tmp_path / f"{tag}.log", f"http://127.0.0.1:{port}/_stats", env=dict(os.environ),
        )
        started.append(process.start())
        process.wait_ready(30.0)
        return Twin(process, f"http://127.0.0.1:{port}/_stats", topic, subscription,
                    dead_letters)

    try:
        yield start
    finally:
        for process in started:
            process.stop()
