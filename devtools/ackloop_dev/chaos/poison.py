"""Poison messages: published on every pushed topic, and POSTed straight at every function.

A poison message must be acknowledged (never redelivered forever), recorded once, and must not
disturb any run. Published ones go through Pub/Sub and the duplicating proxy; direct ones check
the push edge itself (a body that is not a push envelope gets a 400, an envelope whose data is
not a message gets a 200 and a record).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field

import httpx

from ackloop_dev.chaos.stackup import ChaosStack

FUNCTIONS = ("ingest", "model_step", "tool_step", "dead_letter")


@dataclass
class PoisonReport:
    """What was sent and how the functions answered the direct ones."""

    published: dict[str, str] = field(default_factory=dict)
    """message id -> topic kind."""
    direct: dict[str, str] = field(default_factory=dict)
    """message id -> function, for envelopes whose data is garbage."""
    direct_status: dict[str, list[int]] = field(default_factory=dict)
    """function -> [status for a non-envelope body, status for a garbage envelope]."""

    @property
    def count(self) -> int:
        return len(self.published) + len(self.direct) + len(self.direct_status)


def _bodies(tag: str) -> list[tuple[str, bytes]]:
    unknown = f"run-poison-{tag}"
    return [
        ("queries", b"this is not json"),
        ("queries", json.dumps({"v": 1, "text": ""}).encode()),
        ("model_steps", json.dumps({"v": 1, "kind": "model"}).encode()),
        ("model_steps", json.dumps({"v": 1, "kind": "model", "run_id": unknown,
                                    "turn": 0}).encode()),
        ("tool_steps", b"\x00\xff\xfe"),
        ("tool_steps", json.dumps({"v": 1, "kind": "tool", "run_id": unknown, "turn": 0,
                                   "index": 0, "call_count": 1,
                                   "call": {"name": "get_ip_address"}}).encode()),
        ("dead_letter", b"garbage on the dead-letter topic"),
    ]


def inject_poison(stack: ChaosStack, tag: str) -> PoisonReport:
    """Send every poison message once; returns what was sent."""
    s = stack.settings
    topics = {"queries": s.queries_topic, "model_steps": s.model_steps_topic,
              "tool_steps": s.tool_steps_topic, "dead_letter": s.dead_letter_topic}
    report = PoisonReport()
    for kind, data in _bodies(tag):
        report.published[stack.publish(topics[kind], data)] = kind
    for name in FUNCTIONS:
        url = stack.function_url(name)
        message_id = f"poison-direct-{name}-{tag}"
        envelope = {"message": {"data": base64.b64encode(b"\x01garbage").decode(),
                                "messageId": message_id}, "subscription": "chaos"}
        statuses = [httpx.post(url, content=b"{not json", timeout=10).status_code,
                    httpx.post(url, json=envelope, timeout=10).status_code]
        report.direct_status[name] = statuses
        report.direct[message_id] = name
    return report


async def poison_outcome(stack: ChaosStack, report: PoisonReport) -> dict[str, int]:
    """How many poison messages were handled as they should be."""
    store = stack.store()
    poison = {str(p.get("message_id")) for p in await store.letters.list_poison()}
    dead = {snap.id for snap in await store.letters.list_dead_letters()}
    recorded = 0
    for message_id, kind in [*report.published.items(), *report.direct.items()]:
        where = dead if kind == "dead_letter" else poison
        recorded += message_id in where
    edge_ok = sum(1 for statuses in report.direct_status.values() if statuses == [400, 200])
    return {
        "sent": report.count,
        "recorded_once": recorded,
        "expected_records": len(report.published) + len(report.direct),
        "edge_answers_ok": edge_ok,
        "edge_functions": len(report.direct_status),
    }
