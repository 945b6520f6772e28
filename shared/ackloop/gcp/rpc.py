"""The hot-path RPCs to Google Cloud, called straight on a gRPC asyncio channel.

Every step does a Firestore batch get, a Firestore commit and a Pub/Sub publish. Through the
generated (GAPIC) async clients, each of those calls goes through google-api-core's wrappers
(the method wrapper, an ``AsyncRetry`` around every attempt, the error-mapping call wrapper),
proto-plus (a wrapper around every request and response) and the logging interceptor the
generated transports append to their channel, which sees every unary call even with logging
off: about 0.14 ms of CPU per call against the emulators, a fifth to a quarter of the call.
The adapters (:mod:`ackloop.docdb.firestore_rpc`, :mod:`ackloop.bus.pubsub`) call these three
methods with what is here instead:

* the method as a plain ``grpc.aio`` multicallable with the raw protobuf serializers
  (``SerializeToString`` and ``FromString`` of the ``_pb`` classes), on a channel of their own
  made as the library makes its own (same credentials, target and options) but without the
  interceptor;
* the request metadata the generated client sends (its ``x-goog-api-client``, the routing
  header ``x-goog-request-params``, and what the handwritten client adds);
* the retry policy of the method (:class:`RetryPolicy`, the generated client's defaults unless
  the adapter chose its own), applied only once an attempt has failed: the call that succeeds
  is one ``await``;
* errors as the library raises them: :func:`google.api_core.exceptions.from_grpc_error`, so the
  adapters' error mapping reads them unchanged.

One difference on purpose: when the retries run out of time, the last error is raised (a
``ServiceUnavailable``...), where google-api-core raises a ``RetryError`` wrapping it. The
adapters read both as a transient failure.

Everything else (transactions, queries, administration) stays on the client libraries.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
from google.api_core import exceptions as gexc
from google.api_core.gapic_v1 import client_info as gapic_client_info
from google.api_core.gapic_v1 import routing_header

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """When and how long a failed call is tried again: google-api-core's ``AsyncRetry`` with
    the method's default timeout, as a generated client's method config states them.

    A failed attempt whose status is in ``retryable`` is tried again after a random delay of up
    to ``initial`` seconds, the bound multiplied by ``multiplier`` after each attempt up to
    ``maximum`` (google-api-core's exponential sleep generator); no attempt starts once its
    delay would end past ``deadline`` seconds from the first one. Each attempt may take
    ``timeout`` seconds, and never more than what is left until the deadline.
    """

    retryable: frozenset[grpc.StatusCode]
    initial: float
    maximum: float
    multiplier: float
    deadline: float
    timeout: float

    def __post_init__(self) -> None:
        if not 0 < self.timeout <= self.deadline:
            raise ValueError(f"an attempt's timeout must be within the deadline: {self}")

    @classmethod
    def of(cls, *errors: type[gexc.GoogleAPICallError], initial: float, maximum: float,
           multiplier: float, deadline: float, timeout: float) -> RetryPolicy:
        """The policy of a method config whose predicate is ``if_exception_type(*errors)``:
        the status codes whose google-api-core exception is one of ``errors`` (or a subclass of
        one, as ``isinstance`` reads it)."""
        codes = frozenset(code for code in grpc.StatusCode
                          if issubclass(gexc.exception_class_for_grpc_status(code),  # type: ignore[no-untyped-call]
                                        errors))
        return cls(codes, initial, maximum, multiplier, deadline, timeout)

    def delays(self) -> Iterator[float]:
        """The successive delays between attempts (full jitter, truncated exponential)."""
        bound = min(self.initial, self.maximum)
        while True:
            yield random.uniform(0.0, bound)
            bound = min(bound * self.multiplier, self.maximum)


def api_client_header(info: gapic_client_info.ClientInfo) -> tuple[str, str]:
    """The ``x-goog-api-client`` entry a generated client built with ``info`` sends."""
    key, value = info.to_grpc_metadata()  # type: ignore[no-untyped-call]
    return key, value


def routing(**params: str) -> tuple[str, str]:
    """The routing header (``x-goog-request-params``) of a request whose routing fields are
    ``params``, encoded as the generated clients encode it."""
    key, value = routing_header.to_grpc_metadata(tuple(params.items()))  # type: ignore[no-untyped-call]
    return key, value


async def unary(call: Callable[..., Any], request: Any, metadata: Any,
                policy: RetryPolicy) -> Any:
    """The response of the unary-unary ``call`` of ``request``, retried per ``policy``;
    a failure is raised as google-api-core's exception for its status."""
    started = time.monotonic()
    try:
        return await call(request, timeout=policy.timeout, metadata=metadata)
    except grpc.RpcError as error:
        failure = error

    async def attempt(timeout: float) -> Any:
        return await call(request, timeout=timeout, metadata=metadata)

    return await _retry(attempt, failure, started, policy)


async def unary_stream(call: Callable[..., Any], request: Any, metadata: Any,
                       policy: RetryPolicy) -> list[Any]:
    """Every response of the unary-stream ``call`` of ``request``, read to the end, retried per
    ``policy``. A retry starts the call over and drops what the failed attempt had read (for
    a read outside a transaction, such as a batch get, that is what it would have read)."""
    started = time.monotonic()
    try:
        return [r async for r in call(request, timeout=policy.timeout, metadata=metadata)]
    except grpc.RpcError as error:
        failure = error

    async def attempt(timeout: float) -> list[Any]:
        return [r async for r in call(request, timeout=timeout, metadata=metadata)]

    return await _retry(attempt, failure, started, policy)


async def _retry(attempt: Callable[[float], Awaitable[T]], failure: grpc.RpcError,
                 started: float, policy: RetryPolicy) -> T:
    """Try again after ``failure`` (the first attempt's, which started at ``started``)."""
    deadline = started + policy.deadline
    for delay in policy.delays():
        if failure.code() not in policy.retryable or time.monotonic() + delay > deadline:
            break
        await asyncio.sleep(delay)
        try:
            return await attempt(min(policy.timeout, deadline - time.monotonic()))
        except grpc.RpcError as error:
            failure = error
    raise gexc.from_grpc_error(failure) from failure  # type: ignore[no-untyped-call]


__all__ = ["RetryPolicy", "api_client_header", "routing", "unary", "unary_stream"]
