"""The local push delivery against a real HTTP endpoint on 127.0.0.1 and the Pub/Sub emulator.

Durations are the production policy's (ackloop.bus.delivery) multiplied by a small time scale,
so the
assertions are about the policy's shape (which delivery, which ratio, which cap), not about
seconds chosen here.
"""

from __future__ import annotations

import base64
import datetime as dt
import itertools
import time
from typing import Any

import pytest
from google.cloud import pubsub_v1

from ackloop.bus.delivery import load_policy
from ackloop_dev.devstack.push_flow import INITIAL_WINDOW
from tests.devstack.conftest import Twin
from tests.devstack.endpoint import Answer, Endpoint, Push, fail_then_succeed

pytestmark = pytest.mark.emulator

POLICY = load_policy()


def _gaps(pushes: list[Push]) -> list[float]:
    """Seconds from each answer to the next delivery of the same message."""
    return [b.arrived - (a.finished or a.arrived) for a, b in itertools.pairwise(pushes)]


def _assert_backoff(gaps: list[float], scale: float) -> None:
    expected = [POLICY.retry_delay_s(n) * scale for n in range(1, len(gaps) + 1)]
    for n, (gap, want) in enumerate(zip(gaps, expected, strict=True), start=1):
        assert want * 0.9 - 0.005 <= gap <= want + 0.3, f"gap {n}: {gap:.3f} s, want {want:.3f}"


def test_attempts_count_up_and_redeliveries_back_off_exponentially_ignoring_retry_after(
    start_twin,
) -> None:
    scale = 0.02
    # Retry-After asks for an immediate retry, then for an hour: production ignores both.
    retry_after = fail_then_succeed(4, headers=lambda n: {"Retry-After": "0" if n % 2 else "3600"})
    with Endpoint(retry_after).running() as endpoint:
        twin: Twin = start_twin(endpoint.url, time_scale=scale, max_delivery_attempts=10)
        message_id = twin.publish(b"hello", kind="test")
        endpoint.wait_for(lambda: len(endpoint.of(message_id)) == 5, 30, "five deliveries")
        endpoint.wait_for(lambda: twin.stats()["acked"] == 1, 10, "acknowledged")
        pushes = endpoint.of(message_id)
        stats = twin.stats()
    assert [p.envelope["deliveryAttempt"] for p in pushes] == [1, 2, 3, 4, 5]
    assert [p.status for p in pushes] == [503, 503, 503, 503, 204]
    envelope = pushes[0].envelope
    assert envelope["subscription"] == twin.subscription
    assert envelope["message"]["attributes"] == {"kind": "test"}
    assert envelope["message"]["messageId"] == message_id
    gaps = _gaps(pushes)
    _assert_backoff(gaps, scale)
    ratios = [later / earlier for earlier, later in itertools.pairwise(gaps)]
    assert all(1.6 <= r <= 2.4 for r in ratios), f"gaps {gaps}: not doubling"
    assert stats["answers"] == {"503": 4, "204": 1}
    assert (stats["acked"], stats["redeliveries"], stats["dead_lettered"]) == (1, 4, 0)
    assert stats["held"] == 0, "acknowledged after the 204: nothing left to deliver again"


def test_without_a_dead_letter_policy_retries_go_on_and_the_backoff_stops_at_its_maximum(
    start_twin,
) -> None:
    scale = 0.002  # 10 s .. 600 s become 20 ms .. 1.2 s
    failures = 10
    with Endpoint(fail_then_succeed(failures)).running() as endpoint:
        twin: Twin = start_twin(endpoint.url, time_scale=scale)
        message_id = twin.publish(b"letter")
        endpoint.wait_for(lambda: len(endpoint.of(message_id)) == failures + 1, 60,
                          "delivered until it succeeds")
        pushes = endpoint.of(message_id)
    assert all("deliveryAttempt" not in p.envelope for p in pushes), (
        "Pub/Sub sends deliveryAttempt only with a dead-letter policy")
    gaps = _gaps(pushes)
    _assert_backoff(gaps, scale)
    capped = POLICY.maximum_backoff_s * scale
    assert gaps[-1] == pytest.approx(capped, abs=0.3) and gaps[-2] == pytest.approx(capped, abs=0.3)


def test_after_max_delivery_attempts_the_message_is_dead_lettered_with_its_source(
    start_twin, emulator_session,
) -> None:
    scale, attempts = 0.01, 5
    with Endpoint(lambda *_: Answer(503)).running() as endpoint:
        twin: Twin = start_twin(endpoint.url, time_scale=scale, max_delivery_attempts=attempts)
        message_id = twin.publish(b"poison", origin="test")
        endpoint.wait_for(lambda: len(endpoint.of(message_id)) == attempts, 30, "all attempts")
        letters = twin.pull_dead_letters(timeout_s=10)
        pushes = endpoint.of(message_id)
        stats = twin.stats()
    assert [p.envelope["deliveryAttempt"] for p in pushes] == list(range(1, attempts + 1))
    assert len(letters) == 1
    letter = letters[0].message
    assert letter.data == b"poison"
    published = dt.datetime.fromisoformat(pushes[0].envelope["message"]["publishTime"])
    attributes = dict(letter.attributes)
    source_time = dt.datetime.fromisoformat(
        attributes.pop("CloudPubSubDeadLetterSourceTopicPublishTime"))
    assert abs((source_time - published).total_seconds()) < 0.001
    assert attributes == {
        "origin": "test",
        "CloudPubSubDeadLetterSourceSubscription": twin.subscription.rsplit("/", 1)[1],
        "CloudPubSubDeadLetterSourceSubscriptionProject": emulator_session.project_id,
        "CloudPubSubDeadLetterSourceDeliveryCount": str(attempts),
    }
    assert (stats["dead_lettered"], stats["redeliveries"], stats["held"]) == (1, attempts - 1, 0)
    # The original was acknowledged: stopped, the delivery hands nothing back to the emulator.
    twin.process.stop()
    subscriber = pubsub_v1.SubscriberClient()
    try:
        left = subscriber.pull(subscription=twin.subscription, max_messages=10, timeout=5)
    finally:
        subscriber.close()
    assert list(left.received_messages) == []


def test_a_push_past_its_ack_deadline_is_delivered_again_while_the_first_still_runs(
    start_twin,
) -> None:
    scale = 0.1  # ack deadline 10 s -> 1 s; first backoff 10 s -> 1 s
    deadline = 10 * scale

    def slow_first(index: int, _: object) -> Answer:
        return Answer(204, delay_s=4 * deadline) if index == 0 else Answer(204)

    with Endpoint(slow_first).running() as endpoint:
        twin: Twin = start_twin(endpoint.url, time_scale=scale, ack_deadline_s=10,
                                max_delivery_attempts=5)
        message_id = twin.publish(b"slow")
        endpoint.wait_for(lambda: len(endpoint.of(message_id)) == 2
                          and all(p.finished for p in endpoint.of(message_id)), 30, "two pushes")
        first, second = endpoint.of(message_id)
        stats = twin.stats()
    assert first.arrived < second.arrived < (first.finished or 0), "concurrent with the first"
    assert second.open_on_arrival == 2
    assert [first.envelope["deliveryAttempt"], second.envelope["deliveryAttempt"]] == [1, 2]
    expected = deadline + POLICY.retry_delay_s(1) * scale
    assert second.arrived - first.arrived == pytest.approx(expected, abs=0.4)
    assert stats["answers"] == {"timeout": 1, "204": 1}


def test_pushes_run_concurrently_and_the_window_opens_by_slow_start(start_twin) -> None:
    # Each answer takes 1 s: the whole first window arrives before the first answer, even on a
    # busy machine (at 0.3 s, a slow pull could leave part of it behind the first answer).
    messages = 40
    with Endpoint(lambda *_: Answer(204, delay_s=1.0)).running() as endpoint:
        twin: Twin = start_twin(endpoint.url, time_scale=1.0)
        publisher = pubsub_v1.PublisherClient()
        futures = [publisher.publish(twin.topic, b"m%d" % i) for i in range(messages)]
        [f.result(timeout=30) for f in futures]
        endpoint.wait_for(lambda: sum(p.status == 204 for p in endpoint.pushes) == messages, 60,
                          "every message answered")
        stats = twin.stats()
    first_answer = min(p.finished or 0 for p in endpoint.pushes)
    before_first_answer = [p for p in endpoint.pushes if p.arrived < first_answer]
    assert len(before_first_answer) == INITIAL_WINDOW, (
        f"slow start: a small first window, {len(before_first_answer)} pushes before the first "
        f"answer")
    assert endpoint.max_open > INITIAL_WINDOW, "the window grew with the successes"
    assert stats["window"] > INITIAL_WINDOW
    assert (stats["acked"], stats["redeliveries"]) == (messages, 0)


def test_the_window_shrinks_under_failures_and_grows_back(start_twin) -> None:
    scale, failing, messages = 0.01, 12, 30

    def failing_first(index: int, _: object) -> Answer:
        return Answer(503) if index < failing else Answer(204, delay_s=0.05)

    windows: list[int] = []
    with Endpoint(failing_first).running() as endpoint:
        twin: Twin = start_twin(endpoint.url, time_scale=scale, max_delivery_attempts=10)
        publisher = pubsub_v1.PublisherClient()
        [f.result(timeout=30) for f in
         [publisher.publish(twin.topic, b"m%d" % i) for i in range(messages)]]
        deadline = time.monotonic() + 60
        while (stats := twin.stats())["acked"] < messages:
            windows.append(stats["window"])
            assert time.monotonic() < deadline, f"not all acknowledged: {stats}"
            time.sleep(0.01)
    assert stats["answers"]["503"] == failing
    lowest = windows.index(min(windows))
    assert min(windows) == 1, f"the window did not shrink under failures: {windows}"
    assert max([*windows[lowest:], stats["window"]]) > INITIAL_WINDOW, (
        f"the window did not grow back: {windows}")


def test_a_subscription_recreated_by_someone_else_is_released(start_twin) -> None:
    """Another deliverer (the chaos suite's proxy) may recreate a subscription it delivers
    itself: the push delivery must stop delivering it rather than compete."""
    with Endpoint(lambda *_: Answer(204)).running() as endpoint:
        twin: Twin = start_twin(endpoint.url, time_scale=1.0)
        first = twin.publish(b"before")
        endpoint.wait_for(lambda: len(endpoint.of(first)) == 1, 10, "delivered while owned")
        subscriber = pubsub_v1.SubscriberClient()
        try:
            subscriber.delete_subscription(subscription=twin.subscription)
            subscriber.create_subscription(name=twin.subscription, topic=twin.topic,
                                           ack_deadline_seconds=15)
            endpoint.wait_for(lambda: not twin.stats()["owned"], 10, "released")
            second = twin.publish(b"after")
            taken = subscriber.pull(subscription=twin.subscription, max_messages=10, timeout=10)
        finally:
            subscriber.close()
        assert [m.message.message_id for m in taken.received_messages] == [second]
        assert endpoint.of(second) == []


def _pull_within(subscription: str, seconds: float) -> dict[str, float]:
    """Pull the subscription as another deliverer would: message id -> seconds until seen."""
    subscriber = pubsub_v1.SubscriberClient()
    seen: dict[str, float] = {}
    began = time.monotonic()
    try:
        while time.monotonic() - began < seconds:
            response = subscriber.pull(subscription=subscription, max_messages=10, timeout=2)
            for received in response.received_messages:
                seen.setdefault(received.message.message_id, time.monotonic() - began)
    finally:
        subscriber.close()
    return seen


def test_a_stopped_push_delivery_leaves_no_waiting_pull_behind(start_twin) -> None:
    """Stopping the push delivery (every ackloop process stopped, local stack) must not delay a
    message published afterwards. The emulator hands a new message to a waiting pull even when
    the process that opened it is gone, and then hides it for the ack deadline (60 s here):
    production push has no pull to leave behind."""
    with Endpoint(lambda *_: Answer(204)).running() as endpoint:
        twin: Twin = start_twin(endpoint.url, time_scale=1.0, ack_deadline_s=60)
        first = twin.publish(b"while running")
        endpoint.wait_for(lambda: len(endpoint.of(first)) == 1, 10, "delivered while running")
        time.sleep(0.5)  # every waiting pull is open again
        twin.process.stop()
        after = twin.publish(b"after the stop")
        seen = _pull_within(twin.subscription, 8.0)
    assert after in seen, f"published after the stop, not pullable within 8 s: {seen}"
    assert first not in seen, "the delivered message was not acknowledged before the stop"


def test_a_stopped_push_delivery_hands_back_what_it_held(start_twin) -> None:
    """A message being pushed and one waiting out its backoff are handed back at a stop, so
    the next deliverer has them at once, not after their lease (60 s) runs out."""
    def script(_: int, envelope: dict[str, Any]) -> Answer:
        data = base64.b64decode(envelope["message"]["data"])
        return Answer(204, delay_s=30.0) if data == b"slow" else Answer(503)

    with Endpoint(script).running() as endpoint:
        twin: Twin = start_twin(endpoint.url, time_scale=1.0, ack_deadline_s=60)
        slow = twin.publish(b"slow")
        failing = twin.publish(b"failing")
        endpoint.wait_for(lambda: endpoint.of(slow) and endpoint.of(failing), 10,
                          "both pushed once")
        twin.process.stop()
        seen = _pull_within(twin.subscription, 8.0)
    assert slow in seen and failing in seen, f"not handed back within 8 s: {seen}"
    assert len(endpoint.of(failing)) == 1, "the backoff (10 s) was not waited before the stop"
