"""No message cycles forever: the dead-letter subscription has a dead-letter policy of its own,
to a parked topic nothing pushes, in Terraform and in the local stack's topology."""

from __future__ import annotations

import uuid

import pytest
from google.cloud import pubsub_v1

from ackloop.bus.delivery import load_policy
from ackloop.config.settings import Settings
from ackloop_dev.devstack.topology import create_topology, parked_topic, routes
from tests.infra.terraform import TerraformConfig, block
from tests.support.emulators import EmulatorSession


def test_the_dead_letter_subscription_dead_letters_to_a_parked_topic(
    terraform: TerraformConfig,
) -> None:
    subscription = terraform.resource("google_pubsub_subscription", "dead_letter")
    policy = block(subscription, "dead_letter_policy")
    assert policy["dead_letter_topic"] == "${google_pubsub_topic.dead_letter_parked.id}"
    assert policy["max_delivery_attempts"] == "${local.max_delivery_attempts}"
    parked = terraform.resource("google_pubsub_topic", "dead_letter_parked")
    assert parked["name"] == "${local.topics.dead_letter}-parked"
    pull = terraform.resource("google_pubsub_subscription", "dead_letter_parked")
    assert pull["topic"] == "${google_pubsub_topic.dead_letter_parked.id}"
    assert "push_config" not in pull, "parked letters are read, never pushed"
    publishes = terraform.resource("google_pubsub_topic_iam_member",
                                   "service_agent_parks_dead_letters")
    assert publishes["role"] == "roles/pubsub.publisher"
    assert publishes["member"] == "${local.pubsub_service_agent}"
    acks = terraform.resource("google_pubsub_subscription_iam_member",
                              "service_agent_acks_parked_letters")
    assert acks["subscription"] == "${google_pubsub_subscription.dead_letter.name}"


@pytest.mark.emulator
def test_the_local_dead_letter_subscription_dead_letters_to_the_parked_topic(
    emulator_session: EmulatorSession,
) -> None:
    tag = f"b{uuid.uuid4().hex[:8]}"
    settings = Settings(project_id=emulator_session.project_id, **{
        f"{name}_topic": f"{tag}-{name}"
        for name in ("queries", "model_steps", "tool_steps", "answers", "dead_letter")})
    endpoints = {name: f"http://127.0.0.1/{name}"
                 for name in ("ingest", "model_step", "tool_step", "dead_letter")}
    create_topology(settings, endpoints)
    subscriber = pubsub_v1.SubscriberClient()
    try:
        (own,) = [r for r in routes(settings, endpoints) if r.topic == settings.dead_letter_topic]
        found = subscriber.get_subscription(
            subscription=subscriber.subscription_path(settings.project_id, own.subscription))
        assert found.dead_letter_policy.dead_letter_topic.endswith(f"/{parked_topic(settings)}")
        assert found.dead_letter_policy.max_delivery_attempts == load_policy(
        ).max_delivery_attempts
        parked = subscriber.get_subscription(subscription=subscriber.subscription_path(
            settings.project_id, f"{parked_topic(settings)}-pull"))
        assert not parked.push_config.push_endpoint
    finally:
        subscriber.close()
