"""The Pub/Sub adapter on the emulator: publishes on the event loop, one request per topic for
what is asked in one turn of the loop, messages and attributes read back through a real
subscription, and a failure that is a RetryableError."""

from __future__ import annotations

import asyncio

import pytest
from google.cloud import pubsub_v1

from ackloop.bus import pubsub
from ackloop.bus.pubsub import PubSubPublisher
from ackloop.domain.errors import RetryableError
from tests.support.emulators import EmulatorSession

pytestmark = pytest.mark.emulator


def _topic_with_subscription(session: EmulatorSession) -> tuple[str, str]:
    topic_name, sub_name = session.unique("pub-topic"), session.unique("pub-sub")
    publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    topic = publisher.create_topic(name=publisher.topic_path(session.project_id,
                                                              topic_name)).name
    subscription = subscriber.create_subscription(
        name=subscriber.subscription_path(session.project_id, sub_name), topic=topic).name
    return topic_name, subscription


def _pull(subscription: str, count: int) -> dict[bytes, dict[str, str]]:
    subscriber = pubsub_v1.SubscriberClient()
    got: dict[bytes, dict[str, str]] = {}
    for _ in range(20):
        response = subscriber.pull(subscription=subscription, max_messages=50, timeout=10)
        got |= {r.message.data: dict(r.message.attributes) for r in response.received_messages}
        if len(got) >= count:
            break
    return got


async def test_concurrent_publishes_to_one_topic_share_one_request_and_arrive_whole(
    emulator_session: EmulatorSession,
) -> None:
    topic, subscription = _topic_with_subscription(emulator_session)
    publisher = PubSubPublisher(emulator_session.project_id)
    try:
        one, many = await asyncio.gather(
            publisher.publish(topic, b"alone", {"run_id": "run-a", "traceparent": "tp"}),
            publisher.publish_many(topic, [(b"first", {"step": "0000-tool-000"}),
                                           (b"second", None)]))
        assert publisher.requests == 1 and publisher.published == 3
        assert len({one, *many}) == 3, "each message its own id"
        assert await publisher.publish_many(topic, []) == []
        await publisher.publish(topic, b"later")
        assert publisher.requests == 2, "a publish in a later turn is a request of its own"
    finally:
        await publisher.aclose()
    assert _pull(subscription, 4) == {b"alone": {"run_id": "run-a", "traceparent": "tp"},
                                      b"first": {"step": "0000-tool-000"}, b"second": {},
                                      b"later": {}}


async def test_a_publish_the_broker_refuses_is_retryable(
    emulator_session: EmulatorSession,
) -> None:
    publisher = PubSubPublisher(emulator_session.project_id)
    try:
        with pytest.raises(RetryableError, match="publish to no-such-topic"):
            await publisher.publish("no-such-topic", b"x")
        assert publisher.published == 0
    finally:
        await publisher.aclose()


def test_a_publisher_serves_one_event_loop_after_another(
    emulator_session: EmulatorSession,
) -> None:
    """The CLI runs each command in a loop of its own (``asyncio.run``)."""
    topic, subscription = _topic_with_subscription(emulator_session)
    publisher = PubSubPublisher(emulator_session.project_id)
    asyncio.run(publisher.publish(topic, b"one"))
    asyncio.run(publisher.publish(topic, b"two"))
    publisher.close()
    assert set(_pull(subscription, 2)) == {b"one", b"two"}


def test_requests_stay_within_pubsubs_limits() -> None:
    big = b"x" * (pubsub.MAX_REQUEST_BYTES // 2 + 1)
    assert [len(c) for c in pubsub._chunks([(big, None)] * 3)] == [1, 1, 1]
    small = [(b"m", None)] * (pubsub.MAX_REQUEST_MESSAGES + 1)
    assert [len(c) for c in pubsub._chunks(small)] == [pubsub.MAX_REQUEST_MESSAGES, 1]
    assert pubsub._chunks([]) == []
