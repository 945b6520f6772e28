"""The Pub/Sub adapter (google-cloud-pubsub's PublisherClient).

Against the emulator, set ``PUBSUB_EMULATOR_HOST``: the client library then needs no
credentials. The client batches in a background thread; a 1 ms batch latency keeps a step's
publish fast without giving up batching when a model asks for many tools at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from google.api_core import exceptions as gexc
from google.cloud import pubsub_v1  # type: ignore[attr-defined]

from ackloop.errors import RetryableError


class PubSubPublisher:
    def __init__(self, project_id: str, client: pubsub_v1.PublisherClient | None = None) -> None:
        self._project_id = project_id
        self._client = client or pubsub_v1.PublisherClient(
            batch_settings=pubsub_v1.types.BatchSettings(max_messages=100, max_latency=0.001)
        )
        self._paths: dict[str, str] = {}
        self.published = 0

    def topic_path(self, topic: str) -> str:
        path = self._paths.get(topic)
        if path is None:
            path = self._paths[topic] = self._client.topic_path(self._project_id, topic)
        return path

    async def publish(
        self, topic: str, data: bytes, attributes: Mapping[str, str] | None = None
    ) -> str:
        future = self._client.publish(self.topic_path(topic), data, **dict(attributes or {}))
        try:
            message_id: str = await asyncio.wrap_future(future)
        except (gexc.GoogleAPICallError, gexc.RetryError, TimeoutError) as exc:
            raise RetryableError(f"publish to {topic} failed: {exc}") from exc
        self.published += 1
        return message_id

    def close(self) -> None:
        self._client.stop()
