"""A local gRPC server standing in for Firestore or Pub/Sub: each call of a method gets the next
of the answers scripted for it (a response message, the messages of a stream, or an error
status), and the server keeps what it was sent (method, metadata, request, time).

Point a client at it as at an emulator (``FIRESTORE_EMULATOR_HOST``, ``PUBSUB_EMULATOR_HOST``):
the client libraries and the direct calls then talk real gRPC to it, in the test's event loop.
"""

from __future__ import annotations

import socket
import time
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import grpc

STREAMING = frozenset({"BatchGetDocuments", "RunQuery"})
"""The methods answered with a stream of messages."""


@dataclass
class Received:
    method: str
    """The method's short name (``Commit``)."""
    metadata: dict[str, str]
    request: bytes
    at: float
    """``time.monotonic()`` when the call arrived."""


@dataclass
class StandIn:
    address: str = ""
    answers: dict[str, list[Any]] = field(default_factory=dict)
    received: list[Received] = field(default_factory=list)

    def answer(self, method: str, *answers: Any) -> None:
        """Script the answers to the next calls of ``method`` (its short name): a
        ``grpc.StatusCode`` fails the call with that status; a message (or, for a streaming
        method, a list of messages) is sent back. The last answer repeats."""
        self.answers[method] = list(answers)

    def calls(self, method: str) -> list[Received]:
        return [r for r in self.received if r.method == method]

    def _next(self, method: str) -> Any:
        queue = self.answers.get(method)
        if not queue:
            return grpc.StatusCode.UNIMPLEMENTED
        return queue.pop(0) if len(queue) > 1 else queue[0]

    def _record(self, method: str, request: bytes, context: Any) -> Any:
        metadata = {m.key: m.value for m in context.invocation_metadata()}
        self.received.append(Received(method, metadata, request, time.monotonic()))
        return self._next(method)


class _Handler(grpc.GenericRpcHandler):
    def __init__(self, standin: StandIn) -> None:
        self._standin = standin

    def service(self, details: Any) -> Any:
        method = details.method.rsplit("/", 1)[-1]
        standin = self._standin

        async def unary(request: bytes, context: Any) -> bytes:
            answer = standin._record(method, request, context)
            if isinstance(answer, grpc.StatusCode):
                await context.abort(answer, f"stand-in: {answer.name}")
            return bytes(answer.SerializeToString())

        async def stream(request: bytes, context: Any) -> AsyncIterator[bytes]:
            answer = standin._record(method, request, context)
            if isinstance(answer, grpc.StatusCode):
                await context.abort(answer, f"stand-in: {answer.name}")
            messages: Iterable[Any] = answer
            for message in messages:
                yield message.SerializeToString()

        if method in STREAMING:
            return grpc.unary_stream_rpc_method_handler(stream)
        return grpc.unary_unary_rpc_method_handler(unary)


@asynccontextmanager
async def standin_server() -> AsyncIterator[StandIn]:
    """A stand-in serving on a loopback port for the ``async with`` block."""
    standin = StandIn()
    server = grpc.aio.server()
    server.add_generic_rpc_handlers([_Handler(standin)])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    standin.address = f"127.0.0.1:{port}"
    try:
        yield standin
    finally:
        await server.stop(None)


def closed_port() -> str:
    """A loopback address nothing listens on (a server that is down)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"
