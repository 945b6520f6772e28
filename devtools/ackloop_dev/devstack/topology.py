"""Topics and subscriptions, as the deployment declares them (``infra/pubsub.tf``).

Used by ``ackloop dev up`` and the tests to lay out the same topology on the emulator, with the
same ack deadlines and dead-letter policy (both from :func:`ackloop.bus.delivery.load_policy`).
Who pushes is a choice (:data:`PushMode`): the local push delivery
(:mod:`ackloop_dev.devstack.push_delivery`, the default), which follows the production retry
policy, or the emulator's own push loop.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Literal

from google.api_core import exceptions as gexc
from google.cloud import pubsub_v1  # type: ignore[attr-defined]

from ackloop.bus.delivery import DeliveryPolicy, load_policy
from ackloop.config.settings import Settings

PushMode = Literal["twin", "emulator"]
"""``twin``: pull subscriptions delivered by :mod:`ackloop_dev.devstack.push_delivery`;
``emulator``: the emulator's own push (serial, ~1 s redelivery, no retry policy)."""


@dataclass(frozen=True)
class PushRoute:
    topic: str
    subscription: str
    endpoint: str
    dead_letter: bool = True
    """Whether the subscription dead-letters to the dead-letter topic (every one but the
    dead-letter topic's own, which dead-letters to :func:`parked_topic`)."""
    ack_deadline_s: int = 60
    """The pushed service's request timeout, as in production."""


def routes(
    settings: Settings, endpoints: dict[str, str], policy: DeliveryPolicy | None = None
) -> list[PushRoute]:
    """Push subscriptions for the functions listening at ``endpoints`` (by function name)."""
    s = settings
    policy = policy or load_policy()
    planned = [
        (s.queries_topic, "ingest"),
        (s.model_steps_topic, "model_step"),
        (s.tool_steps_topic, "tool_step"),
        (s.dead_letter_topic, "dead_letter"),
    ]
    return [
        PushRoute(topic, f"{topic}-push", endpoints[service], dead_letter=service != "dead_letter",
                  ack_deadline_s=int(policy.ack_deadline_s(service)))
        for topic, service in planned
    ]


def parked_topic(settings: Settings) -> str:
    """Where the dead-letter subscription dead-letters what its handler kept refusing: a
    topic nothing pushes (``infra/pubsub.tf`` does the same), so no message cycles forever."""
    return f"{settings.dead_letter_topic}-parked"


def all_topics(settings: Settings) -> list[str]:
    s = settings
    return [s.queries_topic, s.model_steps_topic, s.tool_steps_topic, s.answers_topic,
            s.dead_letter_topic]


def create_topology(
    settings: Settings,
    endpoints: dict[str, str],
    *,
    max_delivery_attempts: int | None = None,
    push: PushMode = "twin",
    answers_subscription: str | None = None,
) -> list[PushRoute]:
    """Create (or keep) every topic and push subscription. Idempotent.

    ``max_delivery_attempts`` defaults to the delivery policy's. With ``push="twin"`` the
    subscriptions get no push endpoint: the push delivery process delivers them.
    """
    policy = load_policy()
    attempts = max_delivery_attempts or policy.max_delivery_attempts
    publisher = pubsub_v1.PublisherClient()
    subscriber = pubsub_v1.SubscriberClient()
    project = settings.project_id
    try:
        for topic in all_topics(settings):
            with contextlib.suppress(gexc.AlreadyExists):
                publisher.create_topic(name=publisher.topic_path(project, topic))
        dead_letter_topic = publisher.topic_path(project, settings.dead_letter_topic)
        parked = publisher.topic_path(project, parked_topic(settings))
        with contextlib.suppress(gexc.AlreadyExists):
            publisher.create_topic(name=parked)
        with contextlib.suppress(gexc.AlreadyExists):
            subscriber.create_subscription(
                name=subscriber.subscription_path(project, f"{parked_topic(settings)}-pull"),
                topic=parked)
        planned = routes(settings, endpoints, policy)
        for route in planned:
            push_config = {"push_endpoint": route.endpoint} if push == "emulator" else {}
            request: dict[str, object] = {
                "name": subscriber.subscription_path(project, route.subscription),
                "topic": publisher.topic_path(project, route.topic),
                "push_config": push_config,
                "ack_deadline_seconds": route.ack_deadline_s,
                # No retry policy here, on purpose: with one set, the emulator redelivers a
                # rejected message about three times and then never again (measured for push
                # and for pull with modify_ack_deadline); without one it redelivers every ~1 s
                # until the dead-letter policy takes it. The push delivery follows production's
                # exponential retry policy (ackloop.bus.delivery) itself.
            }
            request["dead_letter_policy"] = {
                "dead_letter_topic": dead_letter_topic if route.dead_letter else parked,
                "max_delivery_attempts": attempts,
            }
            try:
                subscriber.create_subscription(request=request)
            except gexc.AlreadyExists:
                subscriber.modify_push_config(subscription=request["name"], push_config=push_config)
        if answers_subscription:
            with contextlib.suppress(gexc.AlreadyExists):
                subscriber.create_subscription(
                    name=subscriber.subscription_path(project, answers_subscription),
                    topic=publisher.topic_path(project, settings.answers_topic),
                )
        return planned
    finally:
        subscriber.close()
