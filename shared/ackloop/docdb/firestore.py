"""The Firestore adapter (google-cloud-firestore's AsyncClient).

Against the emulator, set ``FIRESTORE_EMULATOR_HOST``: the client library then talks to it with
no credentials. Transport failures and contention become :class:`StorageUnavailable`, which the
step handlers turn into a redelivery.

The two calls of every step, :meth:`FirestoreDocumentDB.get_all` (``BatchGetDocuments``) and
:meth:`FirestoreDocumentDB.commit` (``Commit``), are sent straight on a gRPC channel by
:class:`~ackloop.docdb.firestore_rpc.FirestoreRpc`, as the library would send them; the rest
(``create``, queries, transactions) goes through the library.
"""

from __future__ import annotations

import asyncio
import functools
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from google.api_core import exceptions as gexc
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter
from google.cloud.firestore_v1.field_path import FieldPath

from ackloop.docdb import firestore_codec as codec
from ackloop.docdb.base import (
    AlreadyExists,
    InvalidWrite,
    PreconditionFailed,
    Snapshot,
    StorageUnavailable,
    Version,
    Write,
)
from ackloop.docdb.decode_cache import DecodeCache, version_key
from ackloop.docdb.firestore_rpc import BatchGetRequestPb, CommitRequestPb, FirestoreRpc
from ackloop.domain.jsondict import JsonDict

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Awaitable[Any]])

_TRANSIENT = (
    gexc.Aborted,
    gexc.DeadlineExceeded,
    gexc.ServiceUnavailable,
    gexc.InternalServerError,
    gexc.ResourceExhausted,
    gexc.Unknown,
)


def _translated(fn: F) -> F:
    """Map google-api-core errors to the port's error types."""

    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return await fn(*args, **kwargs)
        except _TRANSIENT as exc:
            # First: Aborted (contention) is a subclass of Conflict in google-api-core, and
            # must not read as AlreadyExists.
            raise StorageUnavailable(f"Firestore: {type(exc).__name__}: {exc}") from exc
        except (gexc.AlreadyExists, gexc.Conflict) as exc:
            raise AlreadyExists(str(exc)) from exc
        except gexc.InvalidArgument as exc:
            raise InvalidWrite(f"Firestore refused the write: {exc}") from exc
        except (gexc.FailedPrecondition, gexc.NotFound) as exc:
            raise PreconditionFailed(str(exc)) from exc

    return wrapper  # type: ignore[return-value]


class FirestoreDocumentDB:
    def __init__(self, client: firestore.AsyncClient, rpc: FirestoreRpc | None = None,
                 decode_cache: DecodeCache | None = None) -> None:
        self._client = client
        self._rpc = rpc if rpc is not None else FirestoreRpc(client)
        self.decode_cache = decode_cache
        """Where :meth:`get_all` decodes the documents it admits (:mod:`.decode_cache`)."""

    @classmethod
    def connect(cls, project: str, database: str = "(default)",
                decode_cache: DecodeCache | None = None) -> FirestoreDocumentDB:
        return cls(firestore.AsyncClient(project=project, database=database),
                   decode_cache=decode_cache)

    @property
    def client(self) -> firestore.AsyncClient:
        return self._client

    async def aclose(self) -> None:
        """Close the channel of the direct calls (the library's client keeps its own)."""
        await self._rpc.aclose()

    @_translated
    async def get_all(self, paths: Sequence[str]) -> list[Snapshot | None]:
        # The library's request on the raw messages, its answers decoded here (firestore_codec):
        # no DocumentSnapshot, whose data is deep-copied twice on the way to a dict.
        client = self._client
        prefix = f"{client._database_string}/documents/"
        request = BatchGetRequestPb(database=client._database_string,
                                    documents=[prefix + p for p in paths])
        found: dict[str, Snapshot] = {}
        cache = self.decode_cache
        for size, response in await self._rpc.batch_get(request):
            if response.WhichOneof("result") == "found":
                doc = response.found
                path = doc.name[len(prefix):] if doc.name.startswith(prefix) else doc.name
                data = (codec.decode_admitted(path, doc, client, cache)
                        if cache is not None and cache.admits(path)
                        else codec.decode_fields(doc.fields, client))
                # Its size: the response that carried it (the document and its read time).
                found[path] = Snapshot(path, data, codec.version_of(doc.update_time), size)
        return [found.get(p) for p in paths]

    @_translated
    async def create(self, path: str, data: JsonDict) -> Version:
        # A commit of one create, built on the raw messages like every other (firestore_codec):
        # the library's create goes through proto-plus, 1-2 ms of CPU a step claim.
        (version,) = await self.commit([Write("create", path, data)])
        return version

    @_translated
    async def commit(self, writes: Sequence[Write]) -> list[Version]:
        # The library's commit request, its writes built on the raw messages (firestore_codec).
        client = self._client
        prefix = f"{client._database_string}/documents/"
        request = CommitRequestPb(database=client._database_string)
        request.writes.extend(self._write_pb(prefix + w.path, w) for w in writes)
        response = await self._rpc.commit(request)
        if (cache := self.decode_cache) is not None:
            # What this process now knows the admitted documents it wrote hold: each write
            # applied in order, as Firestore applies them (a second write to a document in
            # one commit is fenced on no version it knows: the document is read again).
            for w, pb, result in zip(writes, request.writes, response.write_results,
                                     strict=True):
                if cache.admits(w.path):
                    cache.wrote(w.path, pb, version_key(result.update_time))
        return [codec.version_of(r.update_time) for r in response.write_results]

    def _write_pb(self, path: str, w: Write) -> Any:
        if w.op == "create":
            return codec.create_pb(path, w.data)
        if w.op == "set":
            return codec.set_pb(path, w.data)
        option = (self._client.write_option(last_update_time=w.if_version)
                  if w.if_version is not None else None)
        return codec.update_pb(path, _update_fields(w), option)

    def _add(self, target: Any, w: Write) -> None:
        """Add ``w`` to a transaction (the library's own write path)."""
        if self.decode_cache is not None:
            self.decode_cache.forget(w.path)  # known again from its next read
        ref = self._client.document(w.path)
        if w.op == "create":
            target.create(ref, w.data)
        elif w.op == "set":
            target.set(ref, w.data)
        elif w.if_version is not None:
            option = self._client.write_option(last_update_time=w.if_version)
            target.update(ref, _update_fields(w), option=option)
        else:
            target.update(ref, _update_fields(w))

    @_translated
    async def list_range(
        self, collection: str, start_id: str, end_id: str, limit: int | None = None
    ) -> list[Snapshot]:
        col = self._client.collection(collection)
        doc_id = FieldPath.document_id()
        query = (
            col.where(filter=FieldFilter(doc_id, ">=", col.document(start_id)))
            .where(filter=FieldFilter(doc_id, "<=", col.document(end_id)))
            .order_by(doc_id)
        )
        if limit is not None:
            query = query.limit(limit)
        return [_snap(s) async for s in query.stream()]

    @_translated
    async def list_where(
        self, collection: str, field_name: str, value: Any, order_by: str, limit: int = 100
    ) -> list[Snapshot]:
        query = (
            self._client.collection(collection)
            .where(filter=FieldFilter(field_name, "==", value))
            .order_by(order_by)
            .limit(limit)
        )
        return [_snap(s) async for s in query.stream()]

    @_translated
    async def list_newest(
        self, collection: str, equal: Mapping[str, Any], order_by: str, limit: int = 100,
        below: Any = None,
    ) -> list[Snapshot]:
        query: Any = self._client.collection(collection)
        for name, value in equal.items():
            query = query.where(filter=FieldFilter(name, "==", value))
        if below is not None:
            query = query.where(filter=FieldFilter(order_by, "<", below))
        query = query.order_by(order_by, direction=firestore.Query.DESCENDING).limit(limit)
        return [_snap(s) async for s in query.stream()]

    @_translated
    async def list_all(self, collection: str, limit: int = 1000) -> list[Snapshot]:
        col = self._client.collection(collection)
        query = col.order_by(FieldPath.document_id()).limit(limit)
        return [_snap(s) async for s in query.stream()]

    @_translated
    async def transact(self, fn: Callable[[Any], Awaitable[T]]) -> T:
        client = self._client

        @firestore.async_transactional
        async def body(transaction: Any) -> T:
            return await fn(_FirestoreTransaction(client, transaction, self))

        last: Exception | None = None
        for attempt in range(TRANSACTION_ATTEMPTS):
            if attempt:
                # Contended: the library retries at once, so transactions that collided
                # collide again (the emulator's lock timeouts abort every one of them). A
                # jittered pause between rounds lets one of them go first.
                await asyncio.sleep(random.uniform(0.0, min(2.0, 0.1 * 2 ** attempt)))
            try:
                result: T = await body(client.transaction())
                return result
            except gexc.Aborted as exc:  # aborted in a read: a lock wait timed out
                last = exc
            except ValueError as exc:
                # The client library gives up on a contended transaction with a ValueError
                # ("Failed to commit transaction in N attempts"): contention, so retryable.
                if not (isinstance(exc.__cause__, gexc.GoogleAPICallError)
                        or "attempts" in str(exc)):
                    raise
                last = exc
        raise StorageUnavailable(f"Firestore transaction: {last}") from last


TRANSACTION_ATTEMPTS = 4
"""Rounds of a contended transaction (each the client library's own retries), apart by a
jittered pause."""


class _FirestoreTransaction:
    def __init__(self, client: Any, transaction: Any, db: FirestoreDocumentDB) -> None:
        self._client = client
        self._transaction = transaction
        self._db = db

    async def get(self, path: str) -> Snapshot | None:
        snap = await self._client.document(path).get(transaction=self._transaction)
        return _snap(snap) if snap.exists else None

    def write(self, write: Write) -> None:
        self._db._add(self._transaction, write)


def _snap(snap: Any) -> Snapshot:
    return Snapshot(snap.reference.path, snap.to_dict() or {}, snap.update_time)


def _update_fields(w: Write) -> JsonDict:
    """An update's fields as Firestore's update() takes them: top-level fields, and each
    ``into`` entry as the field path of its key inside its map."""
    from google.cloud.firestore_v1.field_path import FieldPath

    return _top_level(w.data) | {FieldPath(name, key).to_api_repr(): value
                                 for name, entries in w.into.items()
                                 for key, value in entries.items()}


def _top_level(data: JsonDict) -> JsonDict:
    # Firestore's update() reads dots in keys as nested field paths; ackloop only ever updates
    # whole top-level fields, so quote any key that contains a dot.
    return {(f"`{k}`" if "." in k else k): v for k, v in data.items()}
