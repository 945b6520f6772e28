"""One step function as an ASGI app: every path and method of the service goes to the function.

``ackloop run`` serves ``functions/<target>/main.py`` with this instead of functions-framework's
ASGI app, whose package imports Flask and Werkzeug (a fifth of a step function's import time)
for the WSGI side it never uses here. The routing is the same as functions-framework's for an
HTTP function: ``/`` and any other path, any method, go to the function; ``/robots.txt`` and
``/favicon.ico`` answer 404; an exception the function lets out is logged with its traceback and
answered ``500 Internal Server Error``.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger(__name__)

Function = Callable[[Request], Awaitable[Response]]
METHODS = ["GET", "POST", "PUT", "DELETE", "OPTIONS", "HEAD", "PATCH"]


class FunctionNotFound(Exception):
    """The source file does not define the target as an async function."""


def load_function(target: str, source: Path) -> Function:
    """Import ``source`` as functions-framework does (named after its file, its directory on
    ``sys.path`` so that it can import modules next to it) and return its async function named
    ``target``. Raises :class:`FunctionNotFound`, or whatever importing the module raises."""
    path = source.resolve()
    spec = importlib.util.spec_from_file_location(path.stem, path)
    if spec is None or spec.loader is None:
        raise FunctionNotFound(f"{source} is not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.path.append(str(path.parent))
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    function = getattr(module, target, None)
    if function is None or not callable(function):
        raise FunctionNotFound(f"{source} defines no function named {target!r}")
    return function  # type: ignore[no-any-return]


class _Crashes:
    """Answers 500 to an exception the function let out (logged with its traceback)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception:
            log.exception("exception on %s [%s]", scope.get("path", "/"), scope.get("method"))
            if started:  # too late for a 500: the connection is closed by the server
                raise
            await PlainTextResponse("Internal Server Error", status_code=500)(scope, receive, send)


async def _not_found(request: Request) -> Response:
    return PlainTextResponse("Not Found", status_code=404)


def function_app(function: Function) -> ASGIApp:
    """The ASGI app serving ``function`` on every path and method."""

    async def endpoint(request: Request) -> Response:
        return await function(request)

    routes = [
        Route("/", endpoint, methods=METHODS),
        Route("/robots.txt", _not_found, methods=["GET"]),
        Route("/favicon.ico", _not_found, methods=["GET"]),
        Route("/{path:path}", endpoint, methods=METHODS),
    ]
    # Inside Starlette's own error middleware, as functions-framework's: it answers first.
    return Starlette(routes=routes, middleware=[Middleware(_Crashes)])
