"""Firestore's ``BatchGetDocuments`` and ``Commit``, called straight on a gRPC channel
(:mod:`ackloop.gcp.rpc`): the two Firestore calls of every step.

:class:`FirestoreRpc` serves one ``google.cloud.firestore.AsyncClient`` and sends exactly what
the library sends for it:

* on a channel made as the library makes its own for that client
  (``BaseClient._firestore_api_helper``): with ``FIRESTORE_EMULATOR_HOST`` set, the library's
  insecure emulator channel; otherwise the generated transport's ``create_channel`` (Google
  default credentials through the OAuth metadata plugin, TLS) to the client's target with the
  client's credentials and the library's channel options. The generated transport appends its
  logging interceptor to the channel it is given; this channel never has one;
* with the metadata of the generated client's calls: ``x-goog-api-client``, the client's own
  (``google-cloud-resource-prefix``; ``authorization`` on the emulator) and the routing header
  ``x-goog-request-params`` of the database;
* with the generated client's default retry policy and timeout for each method
  (:data:`BATCH_GET`, :data:`COMMIT`);
* raw protobuf requests and responses (no proto-plus), errors as google-api-core exceptions.

A gRPC asyncio channel belongs to the event loop it was made in: the channel is made on the
first call in a loop and kept while the calls come from that loop (a function process serves
from one); a call from another loop (a CLI command per ``asyncio.run``) makes another.

The library client's private members read here (``_emulator_host``, ``_emulator_channel``,
``_target``, ``_credentials``, ``_rpc_metadata``, ``_database_string``) and the method configs
copied into :data:`BATCH_GET` and :data:`COMMIT` are pinned by
``tests/docdb/test_firestore_rpc.py``, which fails when an upgrade of the library changes them.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
from google.api_core import exceptions as gexc
from google.cloud.firestore_v1.services.firestore.transports import base as transport_base
from google.cloud.firestore_v1.services.firestore.transports.grpc_asyncio import (
    FirestoreGrpcAsyncIOTransport,
)
from google.cloud.firestore_v1.types import firestore as firestore_types

from ackloop.gcp import rpc
from ackloop.gcp.rpc import RetryPolicy

BatchGetRequestPb = firestore_types.BatchGetDocumentsRequest.pb()
BatchGetResponsePb = firestore_types.BatchGetDocumentsResponse.pb()
CommitRequestPb = firestore_types.CommitRequest.pb()
CommitResponsePb = firestore_types.CommitResponse.pb()

BATCH_GET = RetryPolicy.of(
    gexc.DeadlineExceeded, gexc.InternalServerError, gexc.ServiceUnavailable,
    initial=0.1, maximum=60.0, multiplier=1.3, deadline=300.0, timeout=300.0)
"""``BatchGetDocuments``' default retry and timeout in the generated client."""
COMMIT = RetryPolicy.of(
    gexc.ResourceExhausted, gexc.ServiceUnavailable,
    initial=0.1, maximum=60.0, multiplier=1.3, deadline=60.0, timeout=60.0)
"""``Commit``'s default retry and timeout in the generated client (not retried on a deadline
exceeded or an internal error: a commit is not idempotent)."""

CHANNEL_OPTIONS = (
    ("grpc.keepalive_time_ms", 30000),
    ("grpc.max_send_message_length", -1),
    ("grpc.max_receive_message_length", -1),
)
"""The options google-cloud-firestore gives its channel to Firestore."""

_SERVICE = "/google.firestore.v1.Firestore/"


class FirestoreRpc:
    """``BatchGetDocuments`` and ``Commit`` for the Firestore ``client`` (an ``AsyncClient``)."""

    def __init__(self, client: Any, *, batch_get_policy: RetryPolicy = BATCH_GET,
                 commit_policy: RetryPolicy = COMMIT) -> None:
        self._client = client
        self.batch_get_policy = batch_get_policy
        self.commit_policy = commit_policy
        self._loop: asyncio.AbstractEventLoop | None = None
        self._channel: Any = None
        self._batch_get: Any = None
        self._commit: Any = None
        self._metadata: Any = None

    async def batch_get(self, request: Any) -> list[tuple[int, Any]]:
        """The responses (raw ``BatchGetDocumentsResponse``) to the raw ``request``, each with
        its size on the wire (what measuring the parsed message would cost as much as encoding
        it again: about 45 microseconds for a 20 KB transcript chunk)."""
        if self._loop is not asyncio.get_running_loop():
            self._connect()
        return await rpc.unary_stream(self._batch_get, request, self._metadata,
                                          self.batch_get_policy)

    async def commit(self, request: Any) -> Any:
        """The raw ``CommitResponse`` to the raw ``request``."""
        if self._loop is not asyncio.get_running_loop():
            self._connect()
        return await rpc.unary(self._commit, request, self._metadata, self.commit_policy)

    def _connect(self) -> None:
        client = self._client
        channel = channel_for(client)
        self._batch_get = channel.unary_stream(
            _SERVICE + "BatchGetDocuments",
            request_serializer=BatchGetRequestPb.SerializeToString,
            response_deserializer=_sized_batch_get_response)
        self._commit = channel.unary_unary(
            _SERVICE + "Commit",
            request_serializer=CommitRequestPb.SerializeToString,
            response_deserializer=CommitResponsePb.FromString)
        self._metadata = grpc.aio.Metadata(
            rpc.api_client_header(transport_base.DEFAULT_CLIENT_INFO),
            *client._rpc_metadata,
            rpc.routing(database=client._database_string))
        self._channel, self._loop = channel, asyncio.get_running_loop()

    async def aclose(self) -> None:
        """Close the channel (from the loop it was made in; otherwise it goes with its loop)."""
        channel, loop, self._channel, self._loop = self._channel, self._loop, None, None
        if channel is not None and loop is asyncio.get_running_loop():
            await channel.close()


def _sized_batch_get_response(data: bytes) -> tuple[int, Any]:
    return len(data), BatchGetResponsePb.FromString(data)


def channel_for(client: Any) -> Any:
    """A ``grpc.aio`` channel to Firestore as google-cloud-firestore makes its own for
    ``client``, with no interceptor."""
    if client._emulator_host is not None:
        return client._emulator_channel(FirestoreGrpcAsyncIOTransport)
    return FirestoreGrpcAsyncIOTransport.create_channel(
        client._target, credentials=client._credentials, options=list(CHANNEL_OPTIONS))


__all__ = ["BATCH_GET", "COMMIT", "FirestoreRpc", "channel_for"]
