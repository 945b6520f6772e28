"""The publisher port."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

Message = tuple[bytes, Mapping[str, str] | None]
"""One message to publish: its data and its attributes."""


class Publisher(Protocol):
    async def publish(
        self, topic: str, data: bytes, attributes: Mapping[str, str] | None = None
    ) -> str:
        """Publish one message to ``topic`` (a short topic name) and return its message id.

        Raises :class:`ackloop.domain.errors.RetryableError` when the broker cannot take it now.
        """
        ...

    async def publish_many(self, topic: str, messages: Sequence[Message]) -> list[str]:
        """Publish ``messages`` to ``topic`` together (one request where the broker allows);
        their message ids, in order.

        Raises :class:`ackloop.domain.errors.RetryableError` when the broker cannot take them now;
        some may have been published (consumers deduplicate).
        """
        ...
