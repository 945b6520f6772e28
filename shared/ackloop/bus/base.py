"""The publisher port."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol


class Publisher(Protocol):
    async def publish(
        self, topic: str, data: bytes, attributes: Mapping[str, str] | None = None
    ) -> str:
        """Publish one message to ``topic`` (a short topic name) and return its message id.

        Raises :class:`ackloop.errors.RetryableError` when the broker cannot take it now.
        """
        ...
