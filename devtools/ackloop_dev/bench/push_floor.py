"""The Pub/Sub emulator's delivery floor, measured: publish -> delivery latency of each way a
message can reach a subscriber, one message at a time on an idle subscription.

* emulator push: the emulator's ``PushLoop`` sleeps a hard-coded 100 ms whenever it finds
  nothing, and pushes one message at a time per subscription;
* streaming pull: the emulator's streaming-pull sender polls every 50 ms;
* unary pull (what :mod:`ackloop_dev.devstack.push_delivery` uses): a waiting ``Pull`` is
  answered as soon as the message arrives.

Each figure includes the publish call itself (also reported on its own).
"""

from __future__ import annotations

import asyncio
import base64
import json
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.cloud import pubsub_v1  # type: ignore[attr-defined]

SAMPLES = 8


class _Receiver(BaseHTTPRequestHandler):
    """Records when each pushed message arrived."""

    arrived: dict[str, float] = {}

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        data = base64.b64decode(body["message"]["data"]).decode()
        self.arrived[data] = time.time()
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        return


def _timed(
    publisher: pubsub_v1.PublisherClient, topic: str, arrived: dict[str, float]
) -> tuple[list[float], list[float]]:
    """(publish -> arrival, publish call) seconds for :data:`SAMPLES` messages, one at a time."""
    latencies, publishes = [], []
    for i in range(SAMPLES):
        key = uuid.uuid4().hex
        started = time.time()
        publisher.publish(topic, key.encode()).result(timeout=30)
        publishes.append(time.time() - started)
        deadline = time.monotonic() + 10
        while key not in arrived and time.monotonic() < deadline:
            time.sleep(0.0005)
        latencies.append(arrived.get(key, time.time()) - started)
        time.sleep(0.013 * (i % 5))  # vary the phase against the emulator's poll
    return latencies, publishes


def _ms(values: list[float]) -> dict[str, float]:
    ms = sorted(v * 1000 for v in values)
    return {"p50": round(statistics.median(ms), 1), "min": round(ms[0], 1),
            "max": round(ms[-1], 1)}


def _probe(project: str) -> dict[str, Any]:
    publisher = pubsub_v1.PublisherClient(
        batch_settings=pubsub_v1.types.BatchSettings(max_messages=100, max_latency=0.001)
    )
    subscriber = pubsub_v1.SubscriberClient()
    tag = uuid.uuid4().hex[:8]
    topic = publisher.topic_path(project, f"floor-{tag}")
    publisher.create_topic(name=topic)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    result: dict[str, Any] = {}
    stoppers: list[Callable[[], None]] = [server.shutdown]
    try:
        push = subscriber.subscription_path(project, f"floor-push-{tag}")
        endpoint = f"http://127.0.0.1:{server.server_port}/"
        subscriber.create_subscription(name=push, topic=topic,
                                       push_config={"push_endpoint": endpoint})
        latencies, publishes = _timed(publisher, topic, _Receiver.arrived)
        result["emulator_push_ms"] = _ms(latencies)
        result["publish_call_ms"] = _ms(publishes)
        subscriber.delete_subscription(subscription=push)

        streaming = subscriber.subscription_path(project, f"floor-stream-{tag}")
        subscriber.create_subscription(name=streaming, topic=topic)
        arrived: dict[str, float] = {}

        def on_message(message: Any) -> None:
            arrived[message.data.decode()] = time.time()
            message.ack()

        future = subscriber.subscribe(streaming, on_message)
        stoppers.append(future.cancel)
        time.sleep(0.5)
        result["streaming_pull_ms"] = _ms(_timed(publisher, topic, arrived)[0])
        future.cancel()
        subscriber.delete_subscription(subscription=streaming)

        unary = subscriber.subscription_path(project, f"floor-pull-{tag}")
        subscriber.create_subscription(name=unary, topic=topic)
        pulled: dict[str, float] = {}
        stop = threading.Event()

        def pull_loop() -> None:
            while not stop.is_set():
                response = subscriber.pull(subscription=unary, max_messages=10, timeout=2)
                now = time.time()
                for m in response.received_messages:
                    pulled[m.message.data.decode()] = now
                if response.received_messages:
                    subscriber.acknowledge(subscription=unary,
                                           ack_ids=[m.ack_id for m in response.received_messages])

        puller = threading.Thread(target=pull_loop, daemon=True)
        puller.start()
        time.sleep(0.3)
        result["unary_pull_ms"] = _ms(_timed(publisher, topic, pulled)[0])
        stop.set()
        puller.join(timeout=5)
        subscriber.delete_subscription(subscription=unary)
    finally:
        for stopper in stoppers:
            stopper()
        publisher.delete_topic(topic=topic)
        subscriber.close()
    result["note"] = ("publish -> delivery on an idle subscription, publish call included; the "
                      "emulator's push loop polls every 100 ms and pushes one message at a time")
    return result


async def measure_delivery_floor(project: str) -> dict[str, Any]:
    """Publish -> delivery latency by emulator push, streaming pull and unary pull."""
    return await asyncio.to_thread(_probe, project)
