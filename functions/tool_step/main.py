"""The `tool_step` function: a Pub/Sub push endpoint (served by `ackloop run`).

A thin adapter: decoding, dispatch and the status mapping live in :mod:`ackloop.http_push`.
"""

from functions_framework import aio
from starlette.requests import Request
from starlette.responses import Response

from ackloop.http_push import handle_push


@aio.http
async def tool_step(request: Request) -> Response:
    return await handle_push("tool", request)
