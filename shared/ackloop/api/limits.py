"""Limits on what a client may make the API hold: a body's size, the time it takes to send it.

The server's own limits (connections, keep-alive, the time to send headers) are set where it
is started (:mod:`ackloop.api.server`).
"""

from __future__ import annotations

import asyncio
import json

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class BodyTooLarge(HTTPException):
    """Raised while the body is read: the app's handlers answer 413 (so does the middleware)."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(413, f"request body larger than {max_bytes} bytes")


class BodyLimit:
    """ASGI middleware: 413 for a body over ``max_bytes``, declared or streamed (chunked).

    ``larger``: routes (``POST`` to an exact path) allowed a larger body, each with the limit
    and what its 413 adds (the routes that take a query's files inline). ``larger_puts``: the
    same for a ``PUT`` to any path under a prefix (an eval's report, ``/evals/``)."""

    def __init__(self, app: ASGIApp, max_bytes: int,
                 larger: dict[str, tuple[int, str]] | None = None,
                 larger_puts: dict[str, tuple[int, str]] | None = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.larger = larger or {}
        self.larger_puts = larger_puts or {}

    def _limit(self, scope: Scope) -> tuple[int, str]:
        path = scope.get("path") or ""
        if scope.get("method") == "POST" and path in self.larger:
            return self.larger[path]
        if scope.get("method") == "PUT":
            for prefix, limit in self.larger_puts.items():
                if path.startswith(prefix):
                    return limit
        return self.max_bytes, ""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        max_bytes, hint = self._limit(scope)
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None:
            try:
                too_big = int(declared) > max_bytes
            except ValueError:
                too_big = False  # the server rejects a malformed Content-Length itself
            if too_big:
                await self._reject(send, max_bytes, hint)
                return
        seen = 0

        async def limited_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > max_bytes:
                    raise BodyTooLarge(max_bytes)
            return message

        tracked = _TrackedSend(send)
        try:
            await self.app(scope, limited_receive, tracked)
        except BodyTooLarge:
            if not tracked.started:
                await self._reject(send, max_bytes, hint)

    async def _reject(self, send: Send, max_bytes: int, hint: str) -> None:
        await _answer(send, 413, {"error": f"request body larger than {max_bytes} bytes{hint}",
                                  "code": "body_too_large"})


class ReadTimedOut(HTTPException):
    """Raised while the body is read too slowly: the app's handlers answer 408 and close the
    connection (so does the middleware)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(408, f"request body not received within {seconds:g} seconds",
                         headers={"Connection": "close"})


class ReadDeadline:
    """ASGI middleware: 408 (and the connection closed) for a client that takes more than
    ``seconds`` to send its request body, counted from when its headers arrived. Only reads of
    the body are timed: once it is complete, waiting for a disconnect is not."""

    def __init__(self, app: ASGIApp, seconds: float) -> None:
        self.app = app
        self.seconds = seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.seconds
        body_done = False

        async def timed_receive() -> Message:
            nonlocal body_done
            if body_done:
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
            except TimeoutError as exc:
                raise ReadTimedOut(self.seconds) from exc
            if message["type"] != "http.request" or not message.get("more_body", False):
                body_done = True
            return message

        tracked = _TrackedSend(send)
        try:
            await self.app(scope, timed_receive, tracked)
        except ReadTimedOut as exc:
            if not tracked.started:
                await _answer(send, 408, {"error": str(exc.detail), "code": "request_timeout"},
                              close=True)


class LargeBodyGate:
    """ASGI middleware: at most ``slots`` large bodies (a ``POST`` to one of ``paths``, or a
    ``PUT`` under one of ``put_prefixes``, whose declared body is over ``small_bytes``, or not
    declared) are read and handled at once. A query carrying the largest files holds its body
    several times over while it is decoded and stored (about 100 MiB for 14 MiB of files), and
    so does an eval's report while it is parsed, so a burst of them would take the instance past
    its memory. Another waits for a slot, its body unread, up to ``wait_seconds``, then is
    answered 503 with ``Retry-After`` (nothing was read, stored or created: the same request
    may be sent again). Small requests never wait."""

    def __init__(self, app: ASGIApp, paths: tuple[str, ...], small_bytes: int, slots: int,
                 wait_seconds: float, put_prefixes: tuple[str, ...] = ()) -> None:
        self.app = app
        self.paths = frozenset(paths)
        self.put_prefixes = put_prefixes
        self.small_bytes = small_bytes
        self.slots = slots
        self.wait_seconds = wait_seconds
        self.semaphore = asyncio.Semaphore(slots)

    def _gated(self, scope: Scope) -> bool:
        path = scope.get("path") or ""
        if scope.get("method") == "PUT":
            return path.startswith(self.put_prefixes) if self.put_prefixes else False
        return scope.get("method") == "POST" and path in self.paths

    def _large(self, scope: Scope) -> bool:
        if scope["type"] != "http" or not self._gated(scope):
            return False
        declared = dict(scope.get("headers") or []).get(b"content-length")
        try:
            return declared is None or int(declared) > self.small_bytes
        except ValueError:
            return True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self._large(scope):
            await self.app(scope, receive, send)
            return
        try:
            await asyncio.wait_for(self.semaphore.acquire(), self.wait_seconds)
        except TimeoutError:
            retry = max(1, round(self.wait_seconds))
            await _answer(send, 503, {
                "error": f"{self.slots} large requests (queries with files, eval reports) are "
                f"being received by this instance; send this one again in {retry} s",
                "code": "busy"},
                headers=[(b"retry-after", str(retry).encode())])
            return
        try:
            await self.app(scope, receive, send)
        finally:
            self.semaphore.release()


class _TrackedSend:
    """``send``, remembering whether the response has started (then no error can replace it)."""

    def __init__(self, send: Send) -> None:
        self.send = send
        self.started = False

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.started = True
        await self.send(message)


async def _answer(send: Send, status: int, body: dict[str, str], *, close: bool = False,
                  headers: list[tuple[bytes, bytes]] | None = None) -> None:
    data = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"),
               (b"content-length", str(len(data)).encode()), *(headers or [])]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})
