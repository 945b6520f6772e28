"""Poison on every topic a function is pushed from, through the stack's push delivery (production
push semantics: backoff, delivery attempts, dead-lettering): every message ends acknowledged on
its first delivery and recorded (in ``poison`` or ``dead_letters``), none is redelivered."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.security.figures import FIGURES
from tests.security.probes import finish_all, firestore_client
from tests.support.stack import RunningStack

pytestmark = [pytest.mark.emulator, pytest.mark.slow, pytest.mark.timeout(180)]

RECORD_WAIT_S = 60.0

COMMON: list[tuple[bytes, dict[str, str]]] = [
    (b"\x00\xffnot json at all", {}),
    (b"{}", {"run_id": "run-0000000000000000000000000000dead"}),
    (b'{"v": 1, "request_id": "\\ud800", "text": "lone surrogate"}', {}),
    (b'{"v": 1, "kind": "model", "run_id": "run-nope", "turn": 10000}', {}),
    (json.dumps({"v": 1, "kind": "tool", "run_id": "run-nope", "turn": 0, "index": 1000,
                 "call_count": 1001, "call": {"name": "get_ip_address"}}).encode(), {}),
    (json.dumps({"v": 1, "kind": "model", "run_id": "run-nope", "turn": 1,
                 "usage": {"model_calls": -5, "total_tokens": -(2**62)}}).encode(),
     {"run_id": "a/b/c"}),
    (b"[" * 5000 + b"]" * 5000, {}),
]
DEAD_LETTER_ONLY: list[tuple[bytes, dict[str, str]]] = [
    (b'{"v": 1, "kind": "model", "run_id": "run-nope", "turn": 0, "pad": "'
     + b"x" * (1536 * 1024) + b'"}', {"CloudPubSubDeadLetterSourceDeliveryCount": "10"}),
    (b'{"v": 1, "kind": "tool", "run_id": "run-nope", "turn": 99999, "index": 0, '
     b'"call_count": 1, "call": {"name": "x"}}',
     {"CloudPubSubDeadLetterSourceSubscription": "projects/p/subscriptions/s"}),
]


def records(stack: RunningStack) -> set[str]:
    """Message ids of every poison and dead-letter record (by field, whatever the doc id)."""
    db = firestore_client(stack)
    prefix = stack.settings.collection_prefix
    found: set[str] = set()
    for name in ("poison", "dead_letters"):
        for snap in db.collection(f"{prefix}{name}").stream():
            found.add(str((snap.to_dict() or {}).get("message_id", snap.id)))
    return found


def subscription_counts(stack: RunningStack) -> dict[str, dict[str, Any]]:
    return dict(stack.stack.push_stats()["subscriptions"])


def test_poison_on_every_topic_is_acknowledged_once_and_recorded(
    security_stack: RunningStack,
) -> None:
    stack = security_stack
    s = stack.settings
    topics = {s.queries_topic: COMMON, s.model_steps_topic: COMMON,
              s.tool_steps_topic: COMMON, s.dead_letter_topic: COMMON + DEAD_LETTER_ONLY}
    finish_all(stack, 120)  # nothing else moves through the subscriptions meanwhile
    before = subscription_counts(stack)
    published: dict[str, str] = {}
    for topic, payloads in topics.items():
        for data, attributes in payloads:
            published[stack.publish(topic, data, **attributes)] = topic
    FIGURES.envelopes += len(published)

    deadline = time.monotonic() + RECORD_WAIT_S
    while time.monotonic() < deadline and not set(published) <= records(stack):
        time.sleep(0.5)
    missing = sorted(set(published) - records(stack))
    time.sleep(2.0)  # let the push delivery count the last answers
    after = subscription_counts(stack)

    problems = [f"message {m} on {published[m]} was never recorded" for m in missing]
    for topic, payloads in topics.items():
        name = f"{topic}-push"
        old, new = before.get(name, {}), after[name]
        answers = {k: v - old.get("answers", {}).get(k, 0) for k, v in new["answers"].items()}
        failed = {k: v for k, v in answers.items() if v and not (k.isdigit() and k[0] == "2")}
        redelivered = new["redeliveries"] - old.get("redeliveries", 0)
        delivered = sum(answers.values())
        if failed or redelivered:
            FIGURES.redelivered += max(redelivered, sum(failed.values()))
            FIGURES.sample(f"poison on {topic}: answers {answers}, redeliveries {redelivered}")
            problems.append(f"{topic}: non-2xx answers {failed}, {redelivered} redeliveries "
                            f"(every poison message must be acknowledged on its first delivery)")
        if delivered != len(payloads):
            problems.append(f"{topic}: {delivered} deliveries for {len(payloads)} messages")
    assert not problems, "\n".join(problems)
