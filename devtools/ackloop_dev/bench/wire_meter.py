"""A counting gRPC proxy in front of an emulator: what every process of a stack asks of Firestore
and Pub/Sub, counted on the wire the way Google bills it.

Counting in each process (:mod:`ackloop.docdb.counting`) sees one process at a time and only
what goes through the document port; this proxy sees every process that talks to the emulator
(the functions, the API, the sweeper's calls), through the real client libraries, and counts
from the requests and answers themselves:

* Firestore reads: every document a batch get returns, and every one it reports missing (a
  lookup is billed whether or not the document exists); every document a query returns, and
  one read for a query that returns none (Firestore's minimum).
* Firestore writes and deletes: the writes of every commit that succeeded (a delete is a write
  whose operation is ``delete``); a refused commit (a failed precondition) writes nothing. The
  bytes those writes took on the wire (their encoded size) are counted too.
* Firestore round trips: every call to the Firestore service that is not administrative.
* Firestore transactions: ``BeginTransaction`` calls (a contended transaction that is retried
  begins again, and its reads are billed again); rollbacks.
* Pub/Sub: each published message and its billed bytes (at least 1,000); each message handed
  out by a pull, which on the local stack is one push delivery (the push delivery pulls, then
  POSTs).

Administrative calls (creating topics, reading a subscription) are forwarded and not counted:
they are not billed per call. Run it with :func:`start_meter`; it serves on a thread pool until
:meth:`WireMeter.stop`. ``start_meter(..., timeline=True)`` also keeps every count with the time
it was made (:meth:`WireMeter.timeline`), so a window of time (one step of a run) can be told
apart afterwards.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.cloud.firestore_v1.types import firestore as firestore_types
from google.pubsub_v1.types import PublishRequest, PullRequest, PullResponse

from ackloop.domain.cost import pubsub_billed_bytes

_MESSAGE_LIMIT = 64 * 1024 * 1024
_OPTIONS = [("grpc.max_receive_message_length", _MESSAGE_LIMIT),
            ("grpc.max_send_message_length", _MESSAGE_LIMIT)]
_STREAMED_ANSWERS = {"BatchGetDocuments", "RunQuery", "RunAggregationQuery"}
_STREAMED_BOTH = {"Listen", "Write", "StreamingPull"}
_FIRESTORE = "/google.firestore.v1.Firestore/"
_NOT_FORWARDED = {"user-agent", "content-type", "te", "grpc-timeout", "grpc-encoding",
                  "grpc-accept-encoding"}


@dataclass
class WireCounts:
    """What the emulators were asked, as billed units."""

    firestore_reads: int = 0
    """Billed document reads: found + missing lookups + query documents + empty queries."""
    docs_found: int = 0
    docs_missing: int = 0
    query_docs: int = 0
    empty_queries: int = 0
    firestore_writes: int = 0
    firestore_deletes: int = 0
    firestore_write_bytes: int = 0
    """Encoded size of the writes of the commits that succeeded."""
    firestore_top_write_bytes: int = 0
    """The part of ``firestore_write_bytes`` written to top-level documents (a run's or a
    conversation's own document, as a run's end writes them), not to a subcollection's."""
    firestore_calls: int = 0
    """Round trips to Firestore: every call of its service (gets, queries, commits,
    transactions' begins and rollbacks)."""
    transactions: int = 0
    rollbacks: int = 0
    refused_commits: int = 0
    published: int = 0
    published_bytes: int = 0
    """Billed: each message at least 1,000 bytes."""
    delivered: int = 0
    delivered_bytes: int = 0
    published_by_topic: dict[str, int] = field(default_factory=dict)
    delivered_by_subscription: dict[str, int] = field(default_factory=dict)

    def minus(self, other: WireCounts) -> WireCounts:
        """What was counted since ``other`` (an earlier copy)."""
        scalars = {name: getattr(self, name) - getattr(other, name) for name in _SCALARS}
        return WireCounts(**scalars,
                          published_by_topic=_minus(self.published_by_topic,
                                                    other.published_by_topic),
                          delivered_by_subscription=_minus(self.delivered_by_subscription,
                                                           other.delivered_by_subscription))

    def plus(self, other: WireCounts) -> WireCounts:
        """Both together."""
        scalars = {name: getattr(self, name) + getattr(other, name) for name in _SCALARS}
        return WireCounts(**scalars,
                          published_by_topic=_plus(self.published_by_topic,
                                                   other.published_by_topic),
                          delivered_by_subscription=_plus(self.delivered_by_subscription,
                                                          other.delivered_by_subscription))

    def billed(self) -> tuple[int, ...]:
        """The billed quantities: equal tuples mean nothing billable happened in between."""
        return (self.firestore_reads, self.firestore_writes, self.firestore_deletes,
                self.transactions, self.published, self.delivered)


_SCALARS = [name for name in WireCounts.__dataclass_fields__
            if name not in ("published_by_topic", "delivered_by_subscription")]


def _minus(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    return {k: v - b.get(k, 0) for k, v in a.items() if v - b.get(k, 0)}


def _plus(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    return {k: a.get(k, 0) + b.get(k, 0) for k in {*a, *b}}


Event = tuple[float, str, int]
"""One count as it was made: Unix time, the count's name, by how much."""


class _Tally:
    """The counts, updated from the proxy's threads (and, kept, each count with its time)."""

    def __init__(self, timeline: bool = False) -> None:
        self._lock = threading.Lock()
        self._counts = WireCounts()
        self._events: list[Event] | None = [] if timeline else None

    def add(self, name: str, by: int = 1, *, per: tuple[str, str] | None = None) -> None:
        """Add ``by`` to the count ``name`` (and, with ``per=(mapping, key)``, to that key of
        that mapping); a document read also adds to the billed reads."""
        with self._lock:
            counts = self._counts
            setattr(counts, name, getattr(counts, name) + by)
            if self._events is not None:
                self._events.append((time.time(), name, by))
            if name in _READS:
                counts.firestore_reads += by
            if per is not None:
                mapping: dict[str, int] = getattr(counts, per[0])
                mapping[per[1]] = mapping.get(per[1], 0) + by

    def copy(self) -> WireCounts:
        with self._lock:
            return WireCounts().plus(self._counts)

    def events(self) -> list[Event]:
        with self._lock:
            return list(self._events or ())


_READS = ("docs_found", "docs_missing", "query_docs", "empty_queries")


def _short(name: str) -> str:
    return name.rsplit("/", 1)[-1]


def _count_answer(tally: _Tally, method: str, answer: bytes) -> int:
    """Count one streamed answer; returns the documents it carried."""
    name = None
    if method == "BatchGetDocuments":
        got = firestore_types.BatchGetDocumentsResponse.pb().FromString(answer)
        name = {"found": "docs_found", "missing": "docs_missing"}.get(
            got.WhichOneof("result") or "")
    elif method == "RunQuery" and firestore_types.RunQueryResponse.pb().FromString(
            answer).HasField("document"):
        name = "query_docs"
    if name is None:
        return 0
    tally.add(name)
    return 1


def _top_level(write: Any) -> bool:
    """Whether a commit's write is to a top-level document (``collection/id``)."""
    operation = write.WhichOneof("operation")
    name = write.update.name if operation == "update" else getattr(write, operation or "", "")
    return isinstance(name, str) and name.partition("/documents/")[2].count("/") == 1


def _count_unary(tally: _Tally, method: str, request: bytes, answer: bytes) -> None:
    if method == "Commit":
        commit = firestore_types.CommitRequest.pb().FromString(request)
        deletes = sum(1 for w in commit.writes if w.WhichOneof("operation") == "delete")
        tally.add("firestore_deletes", deletes)
        tally.add("firestore_writes", len(commit.writes) - deletes)
        tally.add("firestore_write_bytes", sum(w.ByteSize() for w in commit.writes))
        tally.add("firestore_top_write_bytes",
                  sum(w.ByteSize() for w in commit.writes if _top_level(w)))
    elif method == "BeginTransaction":
        tally.add("transactions")
    elif method == "Rollback":
        tally.add("rollbacks")
    elif method == "Publish":
        publish = PublishRequest.pb().FromString(request)
        sizes = [pubsub_billed_bytes(m.ByteSize()) for m in publish.messages]
        tally.add("published", len(sizes), per=("published_by_topic", _short(publish.topic)))
        tally.add("published_bytes", sum(sizes))
    elif method == "Pull":
        pulled = PullResponse.pb().FromString(answer)
        sizes = [pubsub_billed_bytes(m.message.ByteSize()) for m in pulled.received_messages]
        if sizes:
            tally.add("delivered", len(sizes),
                      per=("delivered_by_subscription", _subscription_of(request)))
            tally.add("delivered_bytes", sum(sizes))


def _subscription_of(request: bytes) -> str:
    return _short(PullRequest.pb().FromString(request).subscription)


class _Forwarder(grpc.GenericRpcHandler):  # type: ignore[misc]
    """Forwards every call, whatever its service, to ``upstream``, counting as it goes."""

    def __init__(self, upstream: grpc.Channel, tally: _Tally) -> None:
        self._upstream = upstream
        self._tally = tally

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        path: str = details.method
        method = _short(path)
        if method in _STREAMED_BOTH:
            return grpc.stream_stream_rpc_method_handler(self._both_streamed(path))
        if method in _STREAMED_ANSWERS:
            return grpc.unary_stream_rpc_method_handler(self._answers_streamed(path, method))
        return grpc.unary_unary_rpc_method_handler(self._unary(path, method))

    def _round_trip(self, path: str) -> None:
        if path.startswith(_FIRESTORE):
            self._tally.add("firestore_calls")

    def _unary(self, path: str, method: str) -> Callable[[bytes, grpc.ServicerContext], bytes]:
        call = self._upstream.unary_unary(path)

        def handle(request: bytes, context: grpc.ServicerContext) -> bytes:
            self._round_trip(path)
            try:
                answer: bytes = call(request, metadata=_metadata(context),
                                     timeout=context.time_remaining())
            except grpc.RpcError as exc:
                if method == "Commit":
                    self._tally.add("refused_commits")
                _abort(context, exc)
            _count_unary(self._tally, method, request, answer)
            return answer

        return handle

    def _answers_streamed(self, path: str, method: str
                          ) -> Callable[[bytes, grpc.ServicerContext], Iterator[bytes]]:
        call = self._upstream.unary_stream(path)

        def handle(request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
            self._round_trip(path)
            answers = call(request, metadata=_metadata(context), timeout=context.time_remaining())
            context.add_callback(answers.cancel)
            documents = 0
            try:
                for answer in answers:
                    documents += _count_answer(self._tally, method, answer)
                    yield answer
            except grpc.RpcError as exc:
                _abort(context, exc)
            # A query that matched nothing still answers (its read time); it is billed one read.
            if method == "RunQuery" and documents == 0:
                self._tally.add("empty_queries")

        return handle

    def _both_streamed(self, path: str
                       ) -> Callable[[Iterator[bytes], grpc.ServicerContext], Iterator[bytes]]:
        call = self._upstream.stream_stream(path)

        def handle(requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
            answers = call(requests, metadata=_metadata(context))
            context.add_callback(answers.cancel)
            try:
                yield from answers
            except grpc.RpcError as exc:
                _abort(context, exc)

        return handle


def _metadata(context: grpc.ServicerContext) -> list[tuple[str, str | bytes]]:
    return [(k, v) for k, v in context.invocation_metadata()
            if not k.startswith(":") and k not in _NOT_FORWARDED]


def _abort(context: grpc.ServicerContext, exc: grpc.RpcError) -> Any:
    code = exc.code() if isinstance(exc, grpc.Call) else grpc.StatusCode.UNKNOWN
    details = exc.details() if isinstance(exc, grpc.Call) else str(exc)
    context.abort(code, details or "")


@dataclass
class WireMeter:
    """A running proxy: point a client at ``127.0.0.1:port`` instead of the emulator."""

    port: int
    upstream: str
    _server: grpc.Server
    _channel: grpc.Channel
    _tally: _Tally

    def counts(self) -> WireCounts:
        """Everything counted so far (a copy)."""
        return self._tally.copy()

    def timeline(self) -> list[Event]:
        """Every count with its time, oldest first (empty unless started with ``timeline``)."""
        return self._tally.events()

    def stop(self) -> None:
        self._server.stop(grace=1.0).wait()
        self._channel.close()


def start_meter(upstream: str, workers: int = 64, *, timeline: bool = False) -> WireMeter:
    """Serve a counting proxy to ``upstream`` (``host:port`` of an emulator) on a free port;
    with ``timeline``, keep every count with its time too."""
    channel = grpc.insecure_channel(upstream, options=_OPTIONS)
    tally = _Tally(timeline)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers,
                                                    thread_name_prefix="wire-meter"),
                         handlers=[_Forwarder(channel, tally)], options=_OPTIONS)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return WireMeter(port, upstream, server, channel, tally)
