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

MAX_MESSAGE_ID_CHARS = 256
"""Pub/Sub's message ids are a few dozen digits; a longer one is not from Pub/Sub."""
MAX_FIELD_CHARS = 1024
"""Optional text of the envelope (subscription, publish time) kept beyond this is dropped."""
MAX_KEPT_ATTRIBUTE_CHARS = 64 * 1024
"""What a poison or dead-letter record keeps of a message's attributes."""


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

    def storable_attributes(self, limit: int = MAX_KEPT_ATTRIBUTE_CHARS) -> dict[str, str]:
        """The attributes, as many as fit in ``limit`` characters: what a record keeps of them
        (a push may carry more than a document can hold)."""
        kept: dict[str, str] = {}
        for key, value in sorted(self.attributes.items()):
            limit -= len(key) + len(value)
            if limit < 0:
                break
            kept[key] = value
        return kept


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
    if len(message_id) > MAX_MESSAGE_ID_CHARS or not _printable(message_id):
        raise MalformedPush(
            f"messageId must be printable text of at most {MAX_MESSAGE_ID_CHARS} characters")
    raw_data = message.get("data") or ""
    if not isinstance(raw_data, str):
        raise MalformedPush("message data must be a base64 string")
    try:
        data = base64.b64decode(raw_data, validate=False)
    except (binascii.Error, ValueError) as exc:
        raise MalformedPush(f"message data is not base64: {exc}") from exc
    attributes = message.get("attributes") or {}
    if not isinstance(attributes, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and _printable(k)
            and _printable(v, lines=True) for k, v in attributes.items()):
        raise MalformedPush("message attributes must be an object of strings")
    attempt = payload.get("deliveryAttempt")
    return Delivery(
        message_id=message_id,
        data=data,
        attributes=dict(attributes),
        subscription=_text(payload.get("subscription")) or _text(headers.get("ce-source")),
        # Pub/Sub counts up to its maximum of 100 attempts; anything else is not a count.
        delivery_attempt=attempt if type(attempt) is int and 0 <= attempt < 2**31 else None,
        publish_time=_text(message.get("publishTime") or message.get("publish_time")),
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


def _printable(text: str, *, lines: bool = False) -> bool:
    """Text that can be stored and logged as it is: valid UTF-8 (no lone surrogate), and no
    control character (``lines``: tabs and line breaks allowed)."""
    if text.isprintable():  # the usual case; no lone surrogate is printable
        return True
    allowed = "\t\n\r" if lines else ""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return all(c.isprintable() or c in allowed for c in text)


def _text(value: Any) -> str | None:
    """An optional string field of the envelope: kept only if it is storable text."""
    if isinstance(value, str) and len(value) <= MAX_FIELD_CHARS and _printable(value):
        return value
    return None
