"""The Pub/Sub adapter: the generated asyncio client, publishing on the caller's event loop.

A publish is one ``Publish`` RPC awaited on the event loop: no batching thread, no future
crossing threads (google-cloud-pubsub's ``PublisherClient`` starts a commit thread per batch
and the step waited for it). :meth:`PubSubPublisher.publish_many` sends several messages to one
topic in one request: a step's outbox usually targets one topic. Publishes to one topic asked
for in the same turn of the event loop (concurrent deliveries of a busy process) share one
request too: the request leaves on the loop's next turn, so batching costs no timer and no
wait.

A gRPC asyncio channel belongs to the event loop it was first used on, so the client is built
lazily, once per loop: a function process builds it on its first publish, in the loop it
serves on, and keeps it; a CLI command that runs each ``asyncio.run`` in a new loop gets a
client per loop. Against the emulator (``PUBSUB_EMULATOR_HOST`` set) the channel is an
insecure one to that host, as the high-level client makes it; otherwise the client uses the
default credentials.

Transient errors (unavailable, deadline exceeded, aborted...) are retried for a few seconds,
as the high-level client did; an error that outlasts them is a :class:`RetryableError`, so the
delivery is answered for redelivery. The outbox was committed first, so nothing is lost.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import grpc
from google.api_core import exceptions as gexc
from google.api_core import retry_async
from google.pubsub_v1 import PublisherAsyncClient, PubsubMessage
from google.pubsub_v1.services.publisher.transports import PublisherGrpcAsyncIOTransport

from ackloop.bus.base import Message
from ackloop.errors import RetryableError

MAX_REQUEST_MESSAGES = 1000
"""Pub/Sub takes at most 1,000 messages in one publish request..."""
MAX_REQUEST_BYTES = 9_000_000
"""...and 10 MB: a request is cut below that, leaving room for attributes and framing."""
ATTEMPT_TIMEOUT_S = 10.0
"""How long one publish RPC may take."""
RETRY = retry_async.AsyncRetry(
    predicate=retry_async.if_exception_type(
        gexc.ServiceUnavailable, gexc.DeadlineExceeded, gexc.Aborted, gexc.InternalServerError,
        gexc.ResourceExhausted, gexc.Unknown, gexc.Cancelled),
    initial=0.05, maximum=1.0, multiplier=2.0, timeout=20.0)
"""The retries of a transient error: a brief broker hiccup does not fail the step, a long
outage does within 20 s (well inside a push subscription's acknowledgement deadline)."""


@dataclass
class _Batch:
    """The messages to one topic asked for in one turn of the loop, sent as one request."""

    done: asyncio.Future[list[str]]
    messages: list[Message] = field(default_factory=list)


class PubSubPublisher:
    """Publishes to the topics of ``project_id`` (short topic names) from async code."""

    def __init__(self, project_id: str) -> None:
        self._project_id = project_id
        self._client: PublisherAsyncClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._paths: dict[str, str] = {}
        self._open: dict[str, _Batch] = {}
        """Per topic, the batch still taking messages (it leaves on the loop's next turn)."""
        self._sending: set[asyncio.Task[None]] = set()
        self.published = 0
        """Messages published by this process (the bench reads it)."""
        self.requests = 0
        """Publish requests sent (one per topic per :meth:`publish_many`, or more above its
        limits)."""

    def topic_path(self, topic: str) -> str:
        path = self._paths.get(topic)
        if path is None:
            path = self._paths[topic] = f"projects/{self._project_id}/topics/{topic}"
        return path

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
        self._client_for_loop()
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
        client = self._client_for_loop()
        ids: list[str] = []
        try:
            for chunk in _chunks(batch.messages):
                request = [PubsubMessage(data=data, attributes=dict(attributes or {}))
                           for data, attributes in chunk]
                response = await client.publish(topic=self.topic_path(topic), messages=request,
                                                retry=RETRY, timeout=ATTEMPT_TIMEOUT_S)
                self.requests += 1
                self.published += len(chunk)
                ids += response.message_ids
        except (gexc.GoogleAPICallError, gexc.RetryError, TimeoutError) as exc:
            batch.done.set_exception(RetryableError(f"publish to {topic} failed: {exc}"))
        except asyncio.CancelledError:  # the loop is closing: the waiters must not hang
            batch.done.cancel()
            raise
        except Exception as exc:  # a bug: the waiters raise it
            batch.done.set_exception(exc)
        else:
            batch.done.set_result(ids)

    def _client_for_loop(self) -> PublisherAsyncClient:
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            self._client, self._loop, self._open = _build_client(), loop, {}
        return self._client

    async def aclose(self) -> None:
        """Close the client's channel (in the loop it was used on)."""
        if self._sending:
            await asyncio.gather(*self._sending, return_exceptions=True)
        client, self._client, self._loop = self._client, None, None
        if client is not None:
            await client.transport.close()  # type: ignore[no-untyped-call]

    def close(self) -> None:
        """Forget the client (its channel closes with its event loop); for callers outside any
        loop. In async code, prefer :meth:`aclose`."""
        self._client = self._loop = None
        self._open = {}


def _build_client() -> PublisherAsyncClient:
    """A client on this event loop: to the emulator when ``PUBSUB_EMULATOR_HOST`` is set."""
    host = os.environ.get("PUBSUB_EMULATOR_HOST")
    if not host:
        return PublisherAsyncClient()
    # The options the generated transport gives its own channel: no message size limit here
    # (a request is kept under Pub/Sub's own by _chunks).
    channel = grpc.aio.insecure_channel(host, options=[("grpc.max_send_message_length", -1),
                                                       ("grpc.max_receive_message_length", -1)])
    return PublisherAsyncClient(transport=PublisherGrpcAsyncIOTransport(channel=channel))


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
