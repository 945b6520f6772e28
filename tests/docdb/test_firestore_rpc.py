"""The Firestore adapter's direct calls (ackloop.docdb.firestore_rpc) send what the client library
sends, read and write what it reads and writes, retry as its generated client retries, and
fail as it fails.

Against a gRPC stand-in (tests/support/grpc_standin.py): the metadata and requests on the wire,
the retries (which statuses, how long apart), a server that is down. Against the emulator: the
results of batch gets and commits, and the errors of refused writes. And the library internals
the direct calls rely on, so that an upgrade that moves them fails here.
"""

from __future__ import annotations

import asyncio
import datetime
import random
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from itertools import pairwise
from typing import Any

import grpc
import pytest
from google.api_core import exceptions as gexc
from google.auth.credentials import AnonymousCredentials
from google.cloud import firestore
from google.cloud.firestore_v1 import base_client
from google.cloud.firestore_v1.services.firestore import FirestoreClient
from google.cloud.firestore_v1.services.firestore.transports.grpc_asyncio import (
    FirestoreGrpcAsyncIOTransport,
)
from google.cloud.firestore_v1.types import write as write_types
from google.protobuf import timestamp_pb2

from ackloop.docdb.base import (
    AlreadyExists,
    InvalidWrite,
    PreconditionFailed,
    StorageUnavailable,
    Write,
)
from ackloop.docdb.firestore import FirestoreDocumentDB
from ackloop.docdb.firestore_rpc import (
    BATCH_GET,
    CHANNEL_OPTIONS,
    COMMIT,
    BatchGetResponsePb,
    CommitRequestPb,
    CommitResponsePb,
    FirestoreRpc,
    channel_for,
)
from ackloop.gcp.rpc import RetryPolicy
from tests.support.emulators import EmulatorSession
from tests.support.grpc_standin import StandIn, closed_port

DATABASE = "projects/p/databases/(default)"
DOCUMENTS = f"{DATABASE}/documents/"
Code = grpc.StatusCode


def _committed(count: int = 1) -> Any:
    """A commit's answer: ``count`` write results, each at its own update time."""
    return CommitResponsePb(write_results=[
        write_types.WriteResult.pb()(update_time=timestamp_pb2.Timestamp(seconds=1_700_000_000 + i,
                                                                         nanos=1000))
        for i in range(count)])


def _missing(*paths: str) -> list[Any]:
    return [BatchGetResponsePb(missing=DOCUMENTS + p) for p in paths]


@pytest.fixture
def slowest_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every backoff delay at its bound (the policy draws it at random below the bound)."""
    monkeypatch.setattr(random, "uniform", lambda low, high: high)


# -- on the wire --------------------------------------------------------------------------------


async def test_the_direct_calls_send_the_metadata_and_requests_the_library_sends(
    standin: StandIn,
) -> None:
    standin.answer("BatchGetDocuments", _missing("c/x"))
    standin.answer("Commit", _committed())
    db = FirestoreDocumentDB.connect("p")
    client = db.client
    # The library's own calls, then the adapter's of the same documents.
    assert [s.exists async for s in client.get_all([client.document("c/x")])] == [False]
    await client.document("c/y").set({"a": 1, "b": [True, None]})
    assert await db.get_all(["c/x"]) == [None]
    assert len(await db.commit([Write("set", "c/y", {"a": 1, "b": [True, None]})])) == 1

    library_get, direct_get = standin.calls("BatchGetDocuments")
    library_commit, direct_commit = standin.calls("Commit")
    assert direct_get.metadata == library_get.metadata
    assert direct_commit.metadata == library_commit.metadata
    # Parsed: the order of a map's entries on the wire is not fixed.
    assert (CommitRequestPb.FromString(direct_commit.request)
            == CommitRequestPb.FromString(library_commit.request))
    assert {"x-goog-api-client", "x-goog-request-params",
            "google-cloud-resource-prefix"} <= set(direct_get.metadata)
    assert direct_get.metadata["x-goog-request-params"] == (
        "database=projects/p/databases/%28default%29")
    assert direct_get.request == library_get.request


async def test_the_direct_channel_has_no_interceptor_and_serves_one_loop_after_another(
    standin: StandIn,
) -> None:
    standin.answer("BatchGetDocuments", _missing("c/x"))
    db = FirestoreDocumentDB.connect("p")
    assert await db.get_all(["c/x"]) == [None]
    rpc = db._rpc
    assert rpc._channel._unary_unary_interceptors == []
    assert rpc._channel._unary_stream_interceptors == []

    # Another event loop (a CLI command per asyncio.run) gets a channel of its own.
    first = rpc._channel
    other = await asyncio.to_thread(asyncio.run, db.get_all(["c/x"]))
    assert other == [None] and rpc._channel is not first
    await db.aclose()


# -- retries -------------------------------------------------------------------------------------


async def test_a_commit_refused_as_unavailable_is_tried_again_after_the_policys_backoff(
    standin: StandIn, slowest_backoff: None,
) -> None:
    standin.answer("Commit", Code.UNAVAILABLE, Code.RESOURCE_EXHAUSTED, _committed())
    db = FirestoreDocumentDB.connect("p")
    (version,) = await db.commit([Write("set", "c/a", {"n": 1})])
    assert version.timestamp() == pytest.approx(1_700_000_000.000001)
    calls = standin.calls("Commit")
    assert len(calls) == 3
    gaps = [b.at - a.at for a, b in pairwise(calls)]
    bounds = [COMMIT.initial, COMMIT.initial * COMMIT.multiplier]
    assert all(bound <= gap < bound + 0.5 for gap, bound in zip(gaps, bounds, strict=True)), gaps


@pytest.mark.parametrize(("status", "error"), [
    (Code.ALREADY_EXISTS, AlreadyExists),
    (Code.FAILED_PRECONDITION, PreconditionFailed),
    (Code.NOT_FOUND, PreconditionFailed),
    (Code.INVALID_ARGUMENT, InvalidWrite),
    (Code.ABORTED, StorageUnavailable),
    (Code.DEADLINE_EXCEEDED, StorageUnavailable),
    (Code.INTERNAL, StorageUnavailable),
])
async def test_a_commit_error_the_policy_does_not_retry_is_raised_at_once(
    standin: StandIn, status: grpc.StatusCode, error: type[Exception],
) -> None:
    """Commit is retried on unavailable and resource exhausted only (it is not idempotent):
    anything else is the caller's, mapped as the library's errors always were."""
    standin.answer("Commit", status, _committed())
    db = FirestoreDocumentDB.connect("p")
    with pytest.raises(error) as raised:
        await db.commit([Write("set", "c/a", {"n": 1})])
    assert len(standin.calls("Commit")) == 1
    cause = raised.value.__cause__
    assert isinstance(cause, gexc.GoogleAPICallError) and cause.grpc_status_code == status
    assert isinstance(cause.response, grpc.aio.AioRpcError)  # from_grpc_error's, as before


async def test_a_batch_get_is_retried_on_the_statuses_of_its_policy_only(
    standin: StandIn,
) -> None:
    standin.answer("BatchGetDocuments", Code.INTERNAL, Code.DEADLINE_EXCEEDED,
                   Code.UNAVAILABLE, _missing("c/x"))
    db = FirestoreDocumentDB.connect("p")
    assert await db.get_all(["c/x"]) == [None]
    assert len(standin.calls("BatchGetDocuments")) == 4

    standin.answer("BatchGetDocuments", Code.RESOURCE_EXHAUSTED, _missing("c/x"))
    with pytest.raises(StorageUnavailable, match="ResourceExhausted"):
        await db.get_all(["c/x"])
    assert len(standin.calls("BatchGetDocuments")) == 5


@pytest.mark.parametrize("operation", ["get_all", "commit"])
async def test_firestore_down_is_storage_unavailable_within_the_deadline(
    monkeypatch: pytest.MonkeyPatch, operation: str,
) -> None:
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", closed_port())
    client = firestore.AsyncClient(project="p")
    deadline = 1.5
    rpc = FirestoreRpc(
        client, batch_get_policy=replace(BATCH_GET, deadline=deadline, timeout=deadline),
        commit_policy=replace(COMMIT, deadline=deadline, timeout=deadline))
    db = FirestoreDocumentDB(client, rpc)
    started = time.monotonic()
    with pytest.raises(StorageUnavailable, match="ServiceUnavailable") as raised:
        if operation == "get_all":
            await db.get_all(["c/a"])
        else:
            await db.commit([Write("set", "c/a", {"n": 1})])
    assert time.monotonic() - started < deadline + 0.5
    assert isinstance(raised.value.__cause__, gexc.ServiceUnavailable)


# -- the library's configuration and internals, pinned ------------------------------------------


@pytest.mark.parametrize(("method", "policy"), [("batch_get_documents", BATCH_GET),
                                                ("commit", COMMIT)])
async def test_the_retry_policies_are_the_generated_clients_defaults(
    method: str, policy: RetryPolicy,
) -> None:
    """Read from the installed library's method config (transports' _prep_wrapped_messages):
    an upgrade that changes it fails here, and the policy is updated to match."""
    transport = FirestoreGrpcAsyncIOTransport(channel=grpc.aio.insecure_channel(closed_port()))
    wrapped = transport._wrapped_methods[getattr(transport, method)]
    retry = wrapped._retry
    assert (retry._initial, retry._maximum, retry._multiplier, retry._timeout) == (
        policy.initial, policy.maximum, policy.multiplier, policy.deadline)
    assert wrapped._timeout == policy.timeout
    for code in grpc.StatusCode:
        retried = retry._predicate(gexc.from_grpc_status(code, "x"))
        assert retried == (code in policy.retryable), code
    await transport.grpc_channel.close()


async def test_the_library_members_the_direct_channel_is_made_from(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The production branch of channel_for (the emulator's runs in every test above)."""
    monkeypatch.delenv("FIRESTORE_EMULATOR_HOST", raising=False)
    credentials = AnonymousCredentials()
    client = firestore.AsyncClient(project="p", credentials=credentials)
    assert client._emulator_host is None
    assert client._credentials is credentials
    assert client._target == FirestoreClient.DEFAULT_ENDPOINT
    assert client._database_string == DATABASE
    assert list(client._rpc_metadata) == [("google-cloud-resource-prefix", DATABASE)]
    assert list(CHANNEL_OPTIONS) == base_client._DEFAULT_CHANNEL_OPTIONS
    channel = channel_for(client)
    assert isinstance(channel, grpc.aio.Channel)
    assert channel._unary_unary_interceptors == []
    await channel.close()


# -- against the emulator: what the library reads, writes and refuses -----------------------------


@pytest.fixture
async def emulator_db(emulator_session: EmulatorSession) -> AsyncIterator[FirestoreDocumentDB]:
    db = FirestoreDocumentDB.connect(emulator_session.project_id)
    yield db
    await db.aclose()


@pytest.mark.emulator
async def test_a_batch_get_reads_what_the_library_reads_in_the_order_asked(
    emulator_db: FirestoreDocumentDB, prefix: str,
) -> None:
    db, client = emulator_db, emulator_db.client
    a, b, missing = f"{prefix}c/a", f"{prefix}c/b", f"{prefix}c/missing"
    await client.document(a).set({"n": 1, "m": {"x": [1, "two", None]},
                                  "at": datetime.datetime(2026, 1, 2, tzinfo=datetime.UTC)})
    await client.document(b).set({"s": "b"})
    paths = [b, missing, a]
    got = await db.get_all(paths)
    library = {s.reference.path: s
               async for s in client.get_all([client.document(p) for p in paths])}
    assert [(s.path, s.data, s.version) if s else None for s in got] == [
        (p, library[p].to_dict(), library[p].update_time) if library[p].exists else None
        for p in paths]


@pytest.mark.emulator
async def test_a_commit_writes_what_the_library_writes_and_fails_as_it_fails(
    emulator_db: FirestoreDocumentDB, prefix: str,
) -> None:
    db, client = emulator_db, emulator_db.client

    async def stored(path: str) -> tuple[Any, Any]:
        snap = await client.document(path).get()
        return snap.to_dict(), snap.update_time

    a, b = f"{prefix}c/a", f"{prefix}c/b"
    created, was_set = await db.commit([Write("create", a, {"n": 1}),
                                        Write("set", b, {"s": "x"})])
    assert await stored(a) == ({"n": 1}, created)
    assert await stored(b) == ({"s": "x"}, was_set)
    (updated,) = await db.commit([Write("update", a, {"n": 2}, if_version=created)])
    assert await stored(a) == ({"n": 2}, updated)

    async def library(op: str, path: str, data: dict[str, Any], version: Any = None) -> Any:
        batch, ref = client.batch(), client.document(path)
        if op == "create":
            batch.create(ref, data)
        else:
            batch.update(ref, data, option=client.write_option(last_update_time=version))
        with pytest.raises(gexc.GoogleAPICallError) as raised:
            await batch.commit()
        return raised.value

    # Create of an existing document; update on a stale version; update of a missing one.
    cases = [(AlreadyExists, "create", a, {"n": 0}, None),
             (PreconditionFailed, "update", a, {"n": 3}, created),
             (PreconditionFailed, "update", f"{prefix}c/missing", {"n": 3}, created)]
    for error, op, path, data, version in cases:
        expected = await library(op, path, data, version)
        with pytest.raises(error) as raised:
            await db.commit([Write(op, path, data, if_version=version)])
        assert type(raised.value.__cause__) is type(expected), (op, path)
    assert await stored(a) == ({"n": 2}, updated)


@pytest.mark.emulator
async def test_a_raw_commit_request_is_answered_as_the_library_is(
    emulator_session: EmulatorSession, prefix: str,
) -> None:
    """FirestoreRpc alone, on a request with no writes (the library's empty batch)."""
    client = firestore.AsyncClient(project=emulator_session.project_id)
    rpc = FirestoreRpc(client)
    response = await rpc.commit(CommitRequestPb(database=client._database_string))
    assert list(response.write_results) == []
    assert await client.batch().commit() == []
    await rpc.aclose()
