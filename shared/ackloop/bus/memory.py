"""An in-memory publisher for unit tests: it keeps every message, in order."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field


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

    async def publish(
        self, topic: str, data: bytes, attributes: Mapping[str, str] | None = None
    ) -> str:
        message_id = str(next(self._ids))
        self.messages.append(Published(topic, data, dict(attributes or {}), message_id))
        return message_id

    def take(self) -> list[Published]:
        """Return and forget everything published so far."""
        taken, self.messages = self.messages, []
        return taken
