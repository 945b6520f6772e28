"""Topics and subscriptions, as the deployment declares them (``infra/pubsub.tf``).

Used by ``ackloop dev up`` and the tests to lay out the same topology on the emulator.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from google.api_core import exceptions as gexc
from google.cloud import pubsub_v1  # type: ignore[attr-defined]

from ackloop.settings import Settings


@dataclass(frozen=True)
class PushRoute:
    topic: str
    subscription: str
    endpoint: str
    dead_letter: bool = True


def routes(settings: Settings, endpoints: dict[str, str]) -> list[PushRoute]:
    """Push subscriptions for the functions listening at ``endpoints`` (by function name)."""
    s = settings
    return [
        PushRoute(s.queries_topic, f"{s.queries_topic}-push", endpoints["ingest"]),
        PushRoute(s.model_steps_topic, f"{s.model_steps_topic}-push", endpoints["model_step"]),
        PushRoute(s.tool_steps_topic, f"{s.tool_steps_topic}-push", endpoints["tool_step"]),
        PushRoute(
            s.dead_letter_topic, f"{s.dead_letter_topic}-push", endpoints["dead_letter"],
            dead_letter=False,
        ),
    ]


def all_topics(settings: Settings) -> list[str]:
    s = settings
    return [s.queries_topic, s.model_steps_topic, s.tool_steps_topic, s.answers_topic,
            s.dead_letter_topic]


def create_topology(
    settings: Settings,
    endpoints: dict[str, str],
    *,
    max_delivery_attempts: int = 5,
    ack_deadline_seconds: int = 60,
    answers_subscription: str | None = None,
) -> list[PushRoute]:
    """Create (or keep) every topic and push subscription. Idempotent."""
    publisher = pubsub_v1.PublisherClient()
    subscriber = pubsub_v1.SubscriberClient()
    project = settings.project_id
    try:
        for topic in all_topics(settings):
            with contextlib.suppress(gexc.AlreadyExists):
                publisher.create_topic(name=publisher.topic_path(project, topic))
        dead_letter_topic = publisher.topic_path(project, settings.dead_letter_topic)
        planned = routes(settings, endpoints)
        for route in planned:
            request: dict[str, object] = {
                "name": subscriber.subscription_path(project, route.subscription),
                "topic": publisher.topic_path(project, route.topic),
                "push_config": {"push_endpoint": route.endpoint},
                "ack_deadline_seconds": ack_deadline_seconds,
                # No retry policy here, on purpose: with one set, the emulator redelivers a
                # rejected message about three times and then never again (measured for push
                # and for pull with modify_ack_deadline); without one it redelivers every ~1 s
                # until the dead-letter policy takes it. Production's exponential retry policy
                # is declared in infra/pubsub.tf.
            }
            if route.dead_letter:
                request["dead_letter_policy"] = {
                    "dead_letter_topic": dead_letter_topic,
                    "max_delivery_attempts": max_delivery_attempts,
                }
            try:
                subscriber.create_subscription(request=request)
            except gexc.AlreadyExists:
                subscriber.modify_push_config(
                    subscription=request["name"], push_config=request["push_config"]
                )
        if answers_subscription:
            with contextlib.suppress(gexc.AlreadyExists):
                subscriber.create_subscription(
                    name=subscriber.subscription_path(project, answers_subscription),
                    topic=publisher.topic_path(project, settings.answers_topic),
                )
        return planned
    finally:
        subscriber.close()
