"""The `dead_letter` function: a Pub/Sub push endpoint (served by `ackloop run`, which routes every
path and method of the service here: :mod:`ackloop.hosting.function_app`).

A thin adapter: decoding, dispatch and the status mapping live in :mod:`ackloop.http_push`.
"""

from starlette.requests import Request
from starlette.responses import Response

from ackloop.http_push import handle_push


async def dead_letter(request: Request) -> Response:
    return await handle_push("dead_letter", request)
