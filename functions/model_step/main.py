"""The `model_step` function: a Pub/Sub push endpoint (served by `ackloop run`, which routes every
path and method of the service here: :mod:`ackloop.hosting.function_app`).

A thin adapter: decoding, dispatch and the status mapping live in :mod:`ackloop.http_push`.
"""

from starlette.requests import Request
from starlette.responses import Response

# Loaded now, at start-up, rather than by the first push (the dispatch imports it on use).
import ackloop.engine.model_step  # noqa: F401
from ackloop.http_push import handle_push


async def model_step(request: Request) -> Response:
    return await handle_push("model", request)
