"""How Pub/Sub delivers pushes to ackloop: one set of numbers for deployment and local stack.

The numbers live in ``delivery.json`` at the package's root (package data). ``infra/pubsub.tf``
reads the same file with ``jsondecode(file(...))`` for the subscriptions' retry policy,
dead-letter policy and ack deadlines (and the services' request timeouts); the local stack reads
it here for its topology and for its push delivery (:mod:`ackloop_dev.devstack.push_delivery`).
Change a number in the file, never in code.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from types import MappingProxyType
from typing import Any

PUSH_SERVICES = ("ingest", "model_step", "tool_step", "dead_letter")
"""The services Pub/Sub pushes to: each one's request timeout is its subscription's ack deadline."""

_FILE = "delivery.json"


@dataclass(frozen=True)
class DeliveryPolicy:
    """Retry policy, dead-letter policy and ack deadlines of ackloop's push subscriptions."""

    minimum_backoff_s: float
    """Delay before the first redelivery of a message whose delivery failed."""
    maximum_backoff_s: float
    """Longest delay between two deliveries of one message."""
    max_delivery_attempts: int
    """Deliveries of one message before it is forwarded to the dead-letter topic."""
    request_timeout_s: Mapping[str, float]
    """Cloud Run request timeout of each service, by name (``api`` included)."""

    def ack_deadline_s(self, service: str) -> float:
        """Seconds a push to ``service`` may take before it counts as failed (its request
        timeout: for push, Pub/Sub's ack deadline is the time it waits for the answer)."""
        if service not in PUSH_SERVICES:
            raise KeyError(f"{service!r} is not pushed to; push services: {PUSH_SERVICES}")
        return self.request_timeout_s[service]

    def retry_delay_s(self, deliveries: int) -> float:
        """Delay before the next delivery of a message whose ``deliveries``-th delivery failed.

        Exponential between the minimum and the maximum backoff: the minimum doubles with each
        failed delivery after the first. Google documents only "exponential" and "best effort";
        doubling is the usual base and the one assumed here.
        """
        if deliveries < 1:
            raise ValueError(f"deliveries must be at least 1, got {deliveries}")
        doublings = min(deliveries - 1, 64)  # 2**64 times any backoff is past the maximum
        return min(self.maximum_backoff_s, self.minimum_backoff_s * 2.0**doublings)

    def scaled(self, factor: float) -> DeliveryPolicy:
        """The same policy with every duration multiplied by ``factor`` (counts unchanged)."""
        if factor <= 0:
            raise ValueError(f"time scale must be positive, got {factor}")
        return DeliveryPolicy(
            minimum_backoff_s=self.minimum_backoff_s * factor,
            maximum_backoff_s=self.maximum_backoff_s * factor,
            max_delivery_attempts=self.max_delivery_attempts,
            request_timeout_s=MappingProxyType(
                {name: seconds * factor for name, seconds in self.request_timeout_s.items()}),
        )


def parse_policy(raw: Mapping[str, Any]) -> DeliveryPolicy:
    """A policy from the JSON document's fields, checked against Pub/Sub's limits."""
    retry = raw["retry_policy"]
    policy = DeliveryPolicy(
        minimum_backoff_s=float(retry["minimum_backoff_seconds"]),
        maximum_backoff_s=float(retry["maximum_backoff_seconds"]),
        max_delivery_attempts=int(raw["max_delivery_attempts"]),
        request_timeout_s=MappingProxyType(
            {str(k): float(v) for k, v in raw["request_timeout_seconds"].items()}),
    )
    problems = []
    if not 0 <= policy.minimum_backoff_s <= policy.maximum_backoff_s <= 600:
        problems.append("retry_policy needs 0 <= minimum <= maximum <= 600 s")
    if not 5 <= policy.max_delivery_attempts <= 100:
        problems.append("max_delivery_attempts must be within 5..100")
    for service in PUSH_SERVICES:
        if not 10 <= policy.request_timeout_s.get(service, 0) <= 600:
            problems.append(f"request_timeout_seconds.{service} (an ack deadline) must be 10..600")
    if problems:
        raise ValueError(f"{_FILE}: " + "; ".join(problems))
    return policy


@cache
def load_policy() -> DeliveryPolicy:
    """The policy in ``ackloop/delivery.json``, read once per process."""
    text = resources.files("ackloop").joinpath(_FILE).read_text(encoding="utf-8")
    return parse_policy(json.loads(text))
