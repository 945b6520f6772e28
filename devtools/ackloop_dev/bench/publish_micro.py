"""The cost of a step's publish, against the Pub/Sub emulator: ackloop's publisher (one
``Publish`` RPC on the event loop) next to google-cloud-pubsub's ``PublisherClient`` (a commit
thread per batch, the shape the adapter had before), in alternating rounds so that a noisy
machine weighs on both alike.

Each round publishes ``--concurrency`` outboxes at once (``--messages`` messages to one topic
each, as concurrent deliveries of one process would) with each publisher and records the
round's wall time and the process's CPU time (every thread's, so the client's background
threads count), per outbox. Run with ``PUBSUB_EMULATOR_HOST`` set::

    python -m ackloop_dev.bench.publish_micro --rounds 300 --messages 1 --concurrency 1
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence

from google.cloud import pubsub_v1  # type: ignore[attr-defined]

from ackloop.bus.base import Message
from ackloop.bus.pubsub import PubSubPublisher

Publish = Callable[[str, Sequence[Message]], Awaitable[object]]


class ThreadedPublisher:
    """The high-level client as the adapter used it: a 1 ms batch, one future per message."""

    def __init__(self, project_id: str) -> None:
        self._project_id = project_id
        self._client = pubsub_v1.PublisherClient(
            batch_settings=pubsub_v1.types.BatchSettings(max_messages=100, max_latency=0.001))

    async def publish_many(self, topic: str, messages: Sequence[Message]) -> list[str]:
        path = self._client.topic_path(self._project_id, topic)
        futures = [self._client.publish(path, data, **dict(attributes or {}))
                   for data, attributes in messages]
        return list(await asyncio.gather(*(asyncio.wrap_future(f) for f in futures)))

    def close(self) -> None:
        self._client.stop()


def _outbox(count: int) -> list[tuple[bytes, Mapping[str, str]]]:
    attributes = {"run_id": "run-bench", "step": "0001-model",
                  "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
    return [(b'{"run_id":"run-bench","step":"0001-model","kind":"model"}', attributes)
            for _ in range(count)]


async def _measure(publish: Publish, topic: str, outbox: Sequence[Message],
                   concurrency: int) -> tuple[float, float]:
    """Wall and CPU seconds per outbox of one round."""
    wall, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(publish(topic, outbox) for _ in range(concurrency)))
    return ((time.perf_counter() - wall) / concurrency,
            (time.process_time() - cpu) / concurrency)


async def run(project_id: str, rounds: int, messages: int,
              concurrency: int = 1) -> dict[str, dict[str, float]]:
    """Median and mean wall and CPU (ms) per outbox published, by publisher."""
    topic = f"publish-micro-{uuid.uuid4().hex[:8]}"
    admin = pubsub_v1.PublisherClient()
    admin.create_topic(name=admin.topic_path(project_id, topic))
    new, old = PubSubPublisher(project_id), ThreadedPublisher(project_id)
    outbox = _outbox(messages)
    samples: dict[str, list[tuple[float, float]]] = {"event loop": [], "thread": []}
    try:
        for _ in range(10):  # warm both up: channels, first-call setup
            await new.publish_many(topic, outbox)
            await old.publish_many(topic, outbox)
        for index in range(rounds):
            order = [("event loop", new.publish_many), ("thread", old.publish_many)]
            for name, publish in order if index % 2 else reversed(order):
                samples[name].append(await _measure(publish, topic, outbox, concurrency))
    finally:
        old.close()
        await new.aclose()
        admin.delete_topic(topic=admin.topic_path(project_id, topic))
    return {name: {"wall_ms_median": statistics.median(w for w, _ in got) * 1000,
                   "wall_ms_mean": statistics.fmean(w for w, _ in got) * 1000,
                   "cpu_ms_mean": statistics.fmean(c for _, c in got) * 1000}
            for name, got in samples.items()}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--messages", type=int, default=1, help="messages per outbox")
    parser.add_argument("--concurrency", type=int, default=1,
                        help="outboxes published at once in a round")
    parser.add_argument("--project", default=os.environ.get("ACKLOOP_PROJECT_ID", "ackloop-dev"))
    args = parser.parse_args(argv)
    if not os.environ.get("PUBSUB_EMULATOR_HOST"):
        raise SystemExit("set PUBSUB_EMULATOR_HOST: this measures against the emulator")
    found = asyncio.run(run(args.project, args.rounds, args.messages, args.concurrency))
    for name, figures in found.items():
        print(f"{name:<11} " + "  ".join(f"{k} {v:7.3f}" for k, v in figures.items()))
    new, old = found["event loop"], found["thread"]
    wall = old["wall_ms_median"] / new["wall_ms_median"]
    cpu = old["cpu_ms_mean"] / new["cpu_ms_mean"]
    print(f"ratio thread/event loop: wall median {wall:.2f}x, cpu mean {cpu:.2f}x")


if __name__ == "__main__":
    main()
