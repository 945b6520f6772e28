"""A push body is read as it streams in and refused at the limit, over real HTTP on 127.0.0.1:
a client cannot make a step function buffer an unbounded body before it is told 413."""

from __future__ import annotations

import asyncio

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ackloop.http_push import MAX_PUSH_BYTES, BodyTooLarge, read_bounded_body
from tests.api.test_auth import serving

CHUNK = 256 * 1024


def _app() -> Starlette:
    async def endpoint(request: Request) -> Response:
        try:
            body = await read_bounded_body(request, MAX_PUSH_BYTES)
        except BodyTooLarge:
            return Response("too large", status_code=413)
        return Response(str(len(body)))

    return Starlette(routes=[Route("/", endpoint, methods=["POST"])])


async def _status_line(url: str, head: bytes, body_chunks: int) -> bytes:
    """Send ``head`` then ``body_chunks`` chunks of a chunked body that never ends (no final
    zero-length chunk), and read the status line: a server that waits for the whole body
    before answering never answers."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(head)
        piece = b"%x\r\n" % CHUNK + b"x" * CHUNK + b"\r\n"
        for _ in range(body_chunks):
            writer.write(piece)
            await writer.drain()
        return await asyncio.wait_for(reader.readline(), timeout=20)
    finally:
        writer.close()


async def test_an_endless_chunked_body_is_refused_once_past_the_limit() -> None:
    chunks = MAX_PUSH_BYTES // CHUNK + 2  # just past the limit, and the body never ends
    head = b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n"
    async with serving(_app()) as url:
        status = await _status_line(url, head, chunks)
    assert status.startswith(b"HTTP/1.1 413"), status


async def test_a_declared_length_over_the_limit_is_refused_before_reading() -> None:
    head = (b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n\r\n"
            % (MAX_PUSH_BYTES * 100))
    async with serving(_app()) as url:
        status = await _status_line(url, head, 0)
    assert status.startswith(b"HTTP/1.1 413"), status


async def test_a_body_within_the_limit_is_read_whole() -> None:
    async with serving(_app()) as url, httpx.AsyncClient(base_url=url) as client:
        response = await client.post("/", content=b"y" * (CHUNK * 3 + 7))
    assert response.status_code == 200 and response.text == str(CHUNK * 3 + 7)
