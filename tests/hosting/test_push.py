"""The push envelope: what the bridges encode is what the functions decode."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace

import pytest

from ackloop.bus.push import MalformedPush, decode_push, encode_push


def test_encoded_push_decodes_to_the_same_message() -> None:
    received = SimpleNamespace(
        delivery_attempt=3,
        message=SimpleNamespace(
            data=b'{"v": 1}', attributes={"run_id": "r"}, message_id="42",
            publish_time=dt.datetime(2026, 11, 30, 5, 0, tzinfo=dt.UTC),
        ),
    )
    delivery = decode_push(encode_push("projects/p/subscriptions/s", received), {})
    assert delivery.message_id == "42" and delivery.data == b'{"v": 1}'
    assert delivery.attributes == {"run_id": "r"} and delivery.delivery_attempt == 3
    assert delivery.subscription == "projects/p/subscriptions/s"
    assert delivery.publish_time == "2026-11-30T05:00:00Z"


@pytest.mark.parametrize("body", [b"not json", b"[]", b'{"message": 1}', b'{"message": {}}'])
def test_bodies_that_are_not_push_envelopes_are_refused(body: bytes) -> None:
    with pytest.raises(MalformedPush):
        decode_push(body, {})
