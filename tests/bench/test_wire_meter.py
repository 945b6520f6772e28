"""The counting proxy in front of the emulators counts what Firestore and Pub/Sub bill: checked
with the real client libraries against the emulators."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator

import pytest
from google.api_core import exceptions as gexc
from google.cloud import firestore, pubsub_v1  # type: ignore[attr-defined]
from tests.support.emulators import EmulatorSession

from ackloop_dev.bench.wire_meter import WireMeter, start_meter

pytestmark = pytest.mark.emulator

PROJECT = "wire-meter-test"


@pytest.fixture
def meters(emulator_session: EmulatorSession, monkeypatch: pytest.MonkeyPatch
           ) -> Iterator[tuple[WireMeter, WireMeter]]:
    pubsub = start_meter(f"127.0.0.1:{emulator_session.pubsub_port}")
    fs = start_meter(f"127.0.0.1:{emulator_session.firestore_port}")
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", f"127.0.0.1:{pubsub.port}")
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", f"127.0.0.1:{fs.port}")
    try:
        yield pubsub, fs
    finally:
        pubsub.stop()
        fs.stop()


def test_firestore_reads_writes_deletes_and_transactions(meters: tuple[WireMeter, WireMeter]
                                                         ) -> None:
    _, meter = meters
    col = f"meter-{uuid.uuid4().hex[:8]}"

    async def work() -> None:
        client = firestore.AsyncClient(project=PROJECT)
        await client.document(f"{col}/a").set({"x": 1})
        batch = client.batch()
        batch.set(client.document(f"{col}/b"), {"x": 2})
        batch.delete(client.document(f"{col}/c"))
        await batch.commit()
        [_ async for _ in client.get_all([client.document(f"{col}/a"),
                                          client.document(f"{col}/missing")])]
        [_ async for _ in client.collection(col).stream()]
        [_ async for _ in client.collection(f"{col}-empty").stream()]

        @firestore.async_transactional
        async def bump(transaction: firestore.AsyncTransaction) -> None:
            await client.document(f"{col}/a").get(transaction=transaction)
            transaction.update(client.document(f"{col}/a"), {"x": 3})

        await bump(client.transaction())
        await client.document(f"{col}/a/sub/d").set({"x": "z" * 3000})  # not top-level
        with pytest.raises(gexc.Conflict):  # already there: the commit is refused
            await client.document(f"{col}/a").create({"x": 4})

    asyncio.run(work())
    counts = meter.counts()
    assert (counts.docs_found, counts.docs_missing, counts.query_docs, counts.empty_queries) == (
        2, 1, 2, 1)
    assert counts.firestore_reads == 6
    assert (counts.firestore_writes, counts.firestore_deletes, counts.transactions) == (4, 1, 1)
    assert counts.refused_commits == 1  # and none of its writes counted
    # Round trips: 3 commits, a batch get, 2 queries, the transaction's begin, get and commit,
    # and the refused commit.
    assert counts.firestore_calls == 10
    # The subcollection's document is in the bytes written, not in the top-level part.
    assert counts.firestore_write_bytes - counts.firestore_top_write_bytes > 3000
    assert 0 < counts.firestore_top_write_bytes < 1000
    assert meter.timeline() == []  # not kept unless asked for


def test_a_timeline_keeps_each_count_with_its_time(emulator_session: EmulatorSession,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    meter = start_meter(f"127.0.0.1:{emulator_session.firestore_port}", timeline=True)
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", f"127.0.0.1:{meter.port}")
    col = f"meter-{uuid.uuid4().hex[:8]}"
    try:
        client = firestore.Client(project=PROJECT)
        began = time.time()
        client.document(f"{col}/small").set({"x": 1})
        between = time.time()
        client.document(f"{col}/large").set({"x": "y" * 5000})
        ended = time.time()
    finally:
        meter.stop()
    events = meter.timeline()
    first = {name: by for at, name, by in events if began <= at < between}
    second = {name: by for at, name, by in events if between <= at <= ended}
    assert first["firestore_calls"] == second["firestore_calls"] == 1
    assert first["firestore_writes"] == second["firestore_writes"] == 1
    assert second["firestore_write_bytes"] - first["firestore_write_bytes"] >= 5000
    assert meter.counts().firestore_write_bytes == (first["firestore_write_bytes"]
                                                    + second["firestore_write_bytes"])


def test_pubsub_publishes_and_pulled_deliveries(meters: tuple[WireMeter, WireMeter]) -> None:
    meter, _ = meters
    tag = uuid.uuid4().hex[:8]
    publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    topic = publisher.topic_path(PROJECT, f"t-{tag}")
    subscription = subscriber.subscription_path(PROJECT, f"s-{tag}")
    publisher.create_topic(name=topic)
    subscriber.create_subscription(name=subscription, topic=topic)
    for data in (b"small", b"x" * 3000):
        publisher.publish(topic, data).result(timeout=30)
    received = 0
    while received < 2:
        pulled = subscriber.pull(subscription=subscription, max_messages=10, timeout=30)
        received += len(pulled.received_messages)
    subscriber.close()
    counts = meter.counts()
    assert counts.published == 2 and counts.published_by_topic == {f"t-{tag}": 2}
    assert counts.delivered == 2 and counts.delivered_by_subscription == {f"s-{tag}": 2}
    # Each message is billed at least 1,000 bytes; the large one at its size.
    assert counts.published_bytes >= 1000 + 3000
