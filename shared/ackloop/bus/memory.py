"""An in-memory publisher for unit tests: it keeps every message, in order."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ackloop.bus.base import Message


@dataclass(frozen=True)
class Published:
    topic: str
    data: bytes
    attributes: dict[str, str] = field(default_factory=dict)
    message_id: str = ""


class MemoryPublisher:
    def __init__(self) -> None:
        self.messages: list[Published] = []
        self._ids = itertools.count(1)
        self.requests = 0
        """How many :meth:`publish_many` calls (requests, for a broker) were made."""

    async def publish(
        self, topic: str, data: bytes, attributes: Mapping[str, str] | None = None
    ) -> str:
        message_id = str(next(self._ids))
        self.messages.append(Published(topic, data, dict(attributes or {}), message_id))
        return message_id

    async def publish_many(self, topic: str, messages: Sequence[Message]) -> list[str]:
        self.requests += 1
        return [await self.publish(topic, data, attributes) for data, attributes in messages]

    def take(self) -> list[Published]:
        """Return and forget everything published so far."""
        taken, self.messages = self.messages, []
        return taken
