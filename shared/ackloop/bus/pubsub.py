"""The Pub/Sub adapter: ``Publish`` called on the caller's event loop.

A publish is one ``Publish`` RPC awaited on the event loop: no batching thread, no future
crossing threads (google-cloud-pubsub's ``PublisherClient`` starts a commit thread per batch
and the step waited for it). :meth:`PubSubPublisher.publish_many` sends several messages to one
topic in one request: a step's outbox usually targets one topic. Publishes to one topic asked
for in the same turn of the event loop (concurrent deliveries of a busy process) share one
request too: the request leaves on the loop's next turn, so batching costs no timer and no
wait.

The RPC is sent straight on a gRPC channel (:mod:`ackloop.gcp.rpc`), as the generated
``PublisherAsyncClient`` would send it (its ``x-goog-api-client`` and routing header, the
raw ``PublishRequest``) but without its wrappers, proto-plus messages and logging interceptor.
A gRPC asyncio channel belongs to the event loop it was first used on, so the channel is made
lazily, once per loop: a function process makes it on its first publish, in the loop it
serves on, and keeps it; a CLI command that runs each ``asyncio.run`` in a new loop gets a
channel per loop. Against the emulator (``PUBSUB_EMULATOR_HOST`` set) the channel is an
insecure one to that host, as the high-level client makes it; otherwise it is the generated
transport's channel to Pub/Sub (TLS, the Google default credentials through the OAuth metadata
plugin), made as the generated client makes it.

Transient errors (unavailable, deadline exceeded, aborted...) are retried for a few seconds
(:data:`RETRY`); an error that outlasts them is a :class:`RetryableError`, so the delivery is
answered for redelivery. The outbox was committed first, so nothing is lost.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.api_core import exceptions as gexc
from google.pubsub_v1.services.publisher.transports import base as transport_base
from google.pubsub_v1.services.publisher.transports.grpc_asyncio import (
    PublisherGrpcAsyncIOTransport,
)
from google.pubsub_v1.types import pubsub as pubsub_types

from ackloop.bus.base import Message
from ackloop.domain.errors import RetryableError
from ackloop.gcp import rpc
from ackloop.gcp.rpc import RetryPolicy

MAX_REQUEST_MESSAGES = 1000
"""Pub/Sub takes at most 1,000 messages in one publish request..."""
MAX_REQUEST_BYTES = 9_000_000
"""...and 10 MB: a request is cut below that, leaving room for attributes and framing."""
ATTEMPT_TIMEOUT_S = 10.0
"""How long one publish RPC may take."""
RETRY = RetryPolicy.of(
    gexc.ServiceUnavailable, gexc.DeadlineExceeded, gexc.Aborted, gexc.InternalServerError,
    gexc.ResourceExhausted, gexc.Unknown, gexc.Cancelled,
    initial=0.05, maximum=1.0, multiplier=2.0, deadline=20.0, timeout=ATTEMPT_TIMEOUT_S)
"""The retries of a transient error: a brief broker hiccup does not fail the step, a long
outage does within 20 s (well inside a push subscription's acknowledgement deadline). The
generated client's default would retry the same errors for 60 s."""

PublishRequestPb = pubsub_types.PublishRequest.pb()
PublishResponsePb = pubsub_types.PublishResponse.pb()
EMULATOR_CHANNEL_OPTIONS = (
    ("grpc.max_send_message_length", -1),
    ("grpc.max_receive_message_length", -1),
)
"""No message size limit: a request is kept under Pub/Sub's own by :func:`_chunks`."""
CHANNEL_OPTIONS = (
    *EMULATOR_CHANNEL_OPTIONS,
    ("grpc.max_metadata_size", 4 * 1024 * 1024),
    ("grpc.keepalive_time_ms", 30000),
)
"""The options the generated transport gives its channel to Pub/Sub."""
_PUBLISH = "/google.pubsub.v1.Publisher/Publish"


@dataclass
class _Batch:
    """The messages to one topic asked for in one turn of the loop, sent as one request."""

    done: asyncio.Future[list[str]]
    messages: list[Message] = field(default_factory=list)


class PubSubPublisher:
    """Publishes to the topics of ``project_id`` (short topic names) from async code."""

    def __init__(self, project_id: str, retry: RetryPolicy = RETRY) -> None:
        self._project_id = project_id
        self._retry = retry
        self._channel: _Channel | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._paths: dict[str, tuple[str, Any]] = {}
        """Per topic, its path and the metadata of a request to it."""
        self._open: dict[str, _Batch] = {}
        """Per topic, the batch still taking messages (it leaves on the loop's next turn)."""
        self._sending: set[asyncio.Task[None]] = set()
        self.published = 0
        """Messages published by this process (the bench reads it)."""
        self.requests = 0
        """Publish requests sent (one per topic per :meth:`publish_many`, or more above its
        limits)."""

    def topic_path(self, topic: str) -> str:
        return self._topic(topic)[0]

    def _topic(self, topic: str) -> tuple[str, Any]:
        known = self._paths.get(topic)
        if known is None:
            path = f"projects/{self._project_id}/topics/{topic}"
            metadata = grpc.aio.Metadata(
                rpc.api_client_header(transport_base.DEFAULT_CLIENT_INFO),
                rpc.routing(topic=path))
            known = self._paths[topic] = (path, metadata)
        return known

    async def publish(
        self, topic: str, data: bytes, attributes: Mapping[str, str] | None = None
    ) -> str:
        """Publish one message to ``topic``; its message id."""
        (message_id,) = await self.publish_many(topic, [(data, attributes)])
        return message_id

    async def publish_many(self, topic: str, messages: Sequence[Message]) -> list[str]:
        """Publish ``messages`` to ``topic`` in one request (shared with the other publishes to
        ``topic`` asked for in this turn of the event loop; more than one above Pub/Sub's
        limits per request); their message ids, in order. Raises :class:`RetryableError` when
        the broker cannot take them now (some may have been published: the consumers
        deduplicate)."""
        if not messages:
            return []
        self._channel_for_loop()
        batch = self._open.get(topic)
        if batch is None:
            batch = self._open[topic] = _Batch(asyncio.get_running_loop().create_future())
            # Not retrieved when every publisher waiting on it was cancelled: no warning then.
            batch.done.add_done_callback(lambda f: f.cancelled() or f.exception())
            asyncio.get_running_loop().call_soon(self._send, topic, batch)
        first = len(batch.messages)
        batch.messages += messages
        ids = await asyncio.shield(batch.done)  # one waiter cancelled does not fail the rest
        return ids[first:first + len(messages)]

    def _send(self, topic: str, batch: _Batch) -> None:
        if self._open.get(topic) is batch:
            del self._open[topic]
        task = asyncio.get_running_loop().create_task(self._request(topic, batch))
        self._sending.add(task)  # the loop keeps only a weak reference to a task
        task.add_done_callback(self._sending.discard)

    async def _request(self, topic: str, batch: _Batch) -> None:
        publish = self._channel_for_loop().publish
        path, metadata = self._topic(topic)
        ids: list[str] = []
        try:
            for chunk in _chunks(batch.messages):
                request = PublishRequestPb(topic=path)
                add = request.messages.add
                for data, attributes in chunk:
                    add(data=data, attributes=attributes)
                response = await rpc.unary(publish, request, metadata, self._retry)
                self.requests += 1
                self.published += len(chunk)
                ids += response.message_ids
        except gexc.GoogleAPICallError as exc:
            batch.done.set_exception(RetryableError(f"publish to {topic} failed: {exc}"))
        except asyncio.CancelledError:  # the loop is closing: the waiters must not hang
            batch.done.cancel()
            raise
        except Exception as exc:  # a bug: the waiters raise it
            batch.done.set_exception(exc)
        else:
            batch.done.set_result(ids)

    def _channel_for_loop(self) -> _Channel:
        loop = asyncio.get_running_loop()
        if self._channel is None or self._loop is not loop:
            self._channel, self._loop, self._open = _Channel.make(), loop, {}
        return self._channel

    async def aclose(self) -> None:
        """Close the channel (in the loop it was used on)."""
        if self._sending:
            await asyncio.gather(*self._sending, return_exceptions=True)
        channel, self._channel, self._loop = self._channel, None, None
        if channel is not None:
            await channel.channel.close()

    def close(self) -> None:
        """Forget the channel (it closes with its event loop); for callers outside any loop.
        In async code, prefer :meth:`aclose`."""
        self._channel = self._loop = None
        self._open = {}


@dataclass
class _Channel:
    """A channel to Pub/Sub (or its emulator) and its ``Publish`` method."""

    channel: Any
    publish: Any

    @classmethod
    def make(cls) -> _Channel:
        channel = _channel()
        return cls(channel, channel.unary_unary(
            _PUBLISH, request_serializer=PublishRequestPb.SerializeToString,
            response_deserializer=PublishResponsePb.FromString))


def _channel() -> Any:
    """A channel on this event loop: to the emulator when ``PUBSUB_EMULATOR_HOST`` is set."""
    host = os.environ.get("PUBSUB_EMULATOR_HOST")
    if host:
        return grpc.aio.insecure_channel(host, options=list(EMULATOR_CHANNEL_OPTIONS))
    return PublisherGrpcAsyncIOTransport.create_channel(
        f"{PublisherGrpcAsyncIOTransport.DEFAULT_HOST}:443", credentials=_credentials(),
        options=list(CHANNEL_OPTIONS))


def _credentials() -> Any:
    """The Google default credentials, as the generated client takes them (its transport's
    scopes; a service account key signs its own tokens, with no token exchange)."""
    import google.auth
    from google.oauth2 import service_account

    credentials, _ = google.auth.default(
        default_scopes=PublisherGrpcAsyncIOTransport.AUTH_SCOPES)
    if isinstance(credentials, service_account.Credentials):
        credentials = credentials.with_always_use_jwt_access(True)  # type: ignore[no-untyped-call]
    return credentials


def _chunks(messages: Sequence[Message]) -> list[Sequence[Message]]:
    """``messages`` cut into requests within Pub/Sub's limits (usually one)."""
    chunks: list[Sequence[Message]] = []
    start, size = 0, 0
    for index, (data, attributes) in enumerate(messages):
        weight = len(data) + sum(len(k) + len(v) for k, v in (attributes or {}).items())
        if index > start and (index - start >= MAX_REQUEST_MESSAGES
                              or size + weight > MAX_REQUEST_BYTES):
            chunks.append(messages[start:index])
            start, size = index, 0
        size += weight
    if start < len(messages):
        chunks.append(messages[start:])
    return chunks
