"""The Pub/Sub adapter's direct ``Publish`` call, against a gRPC stand-in for Pub/Sub: what it
sends is what the generated client sends, a transient refusal is tried again per its policy,
anything else (or an outage that outlasts the policy) is a RetryableError at once.
(tests/bus/test_pubsub_publisher.py runs the adapter on the emulator.)"""

from __future__ import annotations

import random
import time
from dataclasses import replace
from itertools import pairwise

import grpc
import pytest
from google.pubsub_v1 import PublisherAsyncClient, PubsubMessage
from google.pubsub_v1.services.publisher.transports import PublisherGrpcAsyncIOTransport

from ackloop.bus import pubsub
from ackloop.bus.pubsub import PublishRequestPb, PublishResponsePb, PubSubPublisher
from ackloop.domain.errors import RetryableError
from tests.support.grpc_standin import StandIn, closed_port

Code = grpc.StatusCode


def _published(*ids: str) -> PublishResponsePb:
    return PublishResponsePb(message_ids=list(ids))


async def test_a_publish_sends_the_metadata_and_request_the_generated_client_sends(
    standin: StandIn,
) -> None:
    standin.answer("Publish", _published("1", "2"))
    channel = grpc.aio.insecure_channel(standin.address)
    library = PublisherAsyncClient(transport=PublisherGrpcAsyncIOTransport(channel=channel))
    await library.publish(topic="projects/p/topics/t", messages=[
        PubsubMessage(data=b"one", attributes={"run_id": "r", "step": "s"}),
        PubsubMessage(data=b"two")])
    publisher = PubSubPublisher("p")
    assert await publisher.publish_many(
        "t", [(b"one", {"run_id": "r", "step": "s"}), (b"two", None)]) == ["1", "2"]
    await publisher.aclose()
    await channel.close()

    by_library, direct = standin.calls("Publish")
    assert direct.metadata == by_library.metadata
    assert direct.metadata["x-goog-request-params"] == "topic=projects/p/topics/t"
    assert "x-goog-api-client" in direct.metadata
    assert (PublishRequestPb.FromString(direct.request)
            == PublishRequestPb.FromString(by_library.request))


async def test_a_publish_refused_as_transient_is_tried_again_after_the_policys_backoff(
    standin: StandIn, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(random, "uniform", lambda low, high: high)  # every delay at its bound
    standin.answer("Publish", Code.UNAVAILABLE, Code.ABORTED, Code.UNKNOWN, _published("7"))
    publisher = PubSubPublisher("p")
    assert await publisher.publish("t", b"x") == "7"
    await publisher.aclose()
    calls = standin.calls("Publish")
    assert len(calls) == 4 and publisher.requests == 1 and publisher.published == 1
    gaps = [b.at - a.at for a, b in pairwise(calls)]
    bounds = [pubsub.RETRY.initial * pubsub.RETRY.multiplier ** i for i in range(3)]
    assert all(bound <= gap < bound + 0.5 for gap, bound in zip(gaps, bounds, strict=True)), gaps


async def test_the_publish_policy_retries_the_transient_statuses_only() -> None:
    assert pubsub.RETRY.retryable == {
        Code.UNAVAILABLE, Code.DEADLINE_EXCEEDED, Code.ABORTED, Code.INTERNAL,
        Code.RESOURCE_EXHAUSTED, Code.UNKNOWN, Code.CANCELLED}


@pytest.mark.parametrize("status", [Code.NOT_FOUND, Code.PERMISSION_DENIED,
                                    Code.INVALID_ARGUMENT])
async def test_a_publish_refused_for_good_is_retryable_at_once(
    standin: StandIn, status: grpc.StatusCode,
) -> None:
    standin.answer("Publish", status, _published("7"))
    publisher = PubSubPublisher("p")
    with pytest.raises(RetryableError, match="publish to t failed"):
        await publisher.publish("t", b"x")
    await publisher.aclose()
    assert len(standin.calls("Publish")) == 1 and publisher.published == 0


async def test_pubsub_down_is_retryable_within_the_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", closed_port())
    deadline = 1.5
    publisher = PubSubPublisher("p", retry=replace(pubsub.RETRY, deadline=deadline,
                                                   timeout=deadline))
    started = time.monotonic()
    with pytest.raises(RetryableError, match="publish to t failed: 503"):
        await publisher.publish("t", b"x")
    assert time.monotonic() - started < deadline + 0.5
    await publisher.aclose()
