"""Decoding what a Pub/Sub push subscription POSTs, once, at the edge.

Accepted: the raw push envelope ``{"message": {...}, "subscription": ...}`` that Pub/Sub push
sends, and a CloudEvent (structured, or binary with ``ce-*`` headers) whose data is that
envelope, as Eventarc sends it.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class MalformedPush(ValueError):
    """The request body is not a push envelope at all (this is not Pub/Sub talking)."""


@dataclass(frozen=True)
class Delivery:
    message_id: str
    data: bytes
    attributes: dict[str, str] = field(default_factory=dict)
    subscription: str | None = None
    delivery_attempt: int | None = None
    publish_time: str | None = None


def decode_push(body: bytes, headers: Mapping[str, str]) -> Delivery:
    try:
        payload = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise MalformedPush(f"body is not JSON: {exc}") from exc
    if not isinstance(payload, dict):
        raise MalformedPush("body must be a JSON object with a 'message' field")
    if "specversion" in payload and isinstance(payload.get("data"), dict):
        payload = payload["data"]  # structured-mode CloudEvent
    message = payload.get("message")
    if not isinstance(message, dict):
        raise MalformedPush("body has no 'message' object: not a Pub/Sub push envelope")
    message_id = message.get("messageId") or message.get("message_id")
    if not isinstance(message_id, str) or not message_id:
        raise MalformedPush("message has no messageId")
    try:
        data = base64.b64decode(message.get("data") or "", validate=False)
    except (binascii.Error, ValueError) as exc:
        raise MalformedPush(f"message data is not base64: {exc}") from exc
    attributes = message.get("attributes") or {}
    attempt = payload.get("deliveryAttempt")
    return Delivery(
        message_id=message_id,
        data=data,
        attributes={str(k): str(v) for k, v in attributes.items()},
        subscription=_str(payload.get("subscription")) or _str(headers.get("ce-source")),
        delivery_attempt=int(attempt) if isinstance(attempt, int) else None,
        publish_time=_str(message.get("publishTime") or message.get("publish_time")),
    )


def encode_push(subscription: str, received: Any) -> bytes:
    """The body Pub/Sub push would POST for ``received`` (a pulled ``ReceivedMessage``).

    Used where a pull subscription stands in for push (the chaos suite's delivery proxy), so
    functions see exactly what production push sends them.
    """
    return push_envelope(subscription, received.message, received.delivery_attempt or 1)


def push_envelope(subscription: str, message: Any, delivery_attempt: int | None) -> bytes:
    """The push body for ``message`` (a ``PubsubMessage``) on its ``delivery_attempt``-th
    delivery; ``None`` leaves ``deliveryAttempt`` out, as Pub/Sub does for a subscription
    without a dead-letter policy."""
    body: dict[str, Any] = {
        "message": {
            "data": base64.b64encode(message.data).decode(),
            "attributes": dict(message.attributes),
            "messageId": message.message_id,
            "publishTime": message.publish_time.isoformat().replace("+00:00", "Z"),
        },
        "subscription": subscription,
    }
    if delivery_attempt is not None:
        body["deliveryAttempt"] = delivery_attempt
    return json.dumps(body).encode()


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None
