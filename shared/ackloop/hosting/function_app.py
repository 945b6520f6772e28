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
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger(__name__)

Function = Callable[[Request], Awaitable[Response]]
METHODS = ["GET", "POST", "PUT", "DELETE", "OPTIONS", "HEAD", "PATCH"]
_ALLOWED = frozenset(METHODS)
_NOT_FOUND = frozenset({"/robots.txt", "/favicon.ico"})
"""Answered 404 to GET (and HEAD); any other method goes to the function, as with
functions-framework's routes."""


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


async def _lifespan(receive: Receive, send: Send) -> None:
    """Nothing to start or stop: the process's dependencies are built before it serves
    (:mod:`ackloop.hosting.startup`)."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def _route_path(scope: Scope) -> str:
    """The request's path below the app's root path, as Starlette's routing matches it."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root) and path[len(root):len(root) + 1] in ("", "/"):
        return path[len(root):]
    return path


def _http_error(exc: HTTPException) -> Response:
    """What Starlette answers to an HTTP error raised inside (a body read too slowly: 408)."""
    if exc.status_code in {204, 304}:
        return Response(status_code=exc.status_code, headers=exc.headers)
    return PlainTextResponse(exc.detail, status_code=exc.status_code, headers=exc.headers)


def function_app(function: Function) -> ASGIApp:
    """The ASGI app serving ``function`` on every path and method.

    A bare ASGI callable, not a Starlette application: Starlette's middleware stack and router
    cost a step function CPU on every push for nothing it needs. It keeps their behaviour: a
    method but those of :data:`METHODS` is 405 (``Allow`` them); an
    :class:`~starlette.exceptions.HTTPException` raised inside is answered as Starlette does;
    any other exception is logged with its traceback and answered 500 (re-raised for the server
    to close the connection if the response had started)."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                await _lifespan(receive, send)
            return  # no websocket route: the server refuses the handshake
        method = scope["method"]
        if method not in _ALLOWED:
            await PlainTextResponse("Method Not Allowed", status_code=405,
                                    headers={"Allow": ", ".join(METHODS)})(scope, receive, send)
            return
        if method in ("GET", "HEAD") and _route_path(scope) in _NOT_FOUND:
            await PlainTextResponse("Not Found", status_code=404)(scope, receive, send)
            return
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            response = await function(Request(scope, receive, send))
            await response(scope, receive, sending)
        except HTTPException as exc:
            if started:
                raise
            await _http_error(exc)(scope, receive, send)
        except Exception:
            log.exception("exception on %s [%s]", scope.get("path", "/"), method)
            if started:  # too late for a 500: the connection is closed by the server
                raise
            await PlainTextResponse("Internal Server Error", status_code=500)(scope, receive, send)

    return app


def _first_segment(scope: Scope) -> str:
    return _route_path(scope).lstrip("/").split("/", 1)[0]


def combined_app(steps: Mapping[str, ASGIApp], other: ASGIApp | None = None) -> ASGIApp:
    """One service serving several step functions: a request whose path is ``/<kind>`` (or
    below it) goes to ``steps[kind]``; any other goes to ``other`` (the HTTP API, which also
    gets the lifespan events), or without one is answered: ``GET /`` 200 with the paths served
    (a start-up check), anything else 404 naming them.

    A push subscription's endpoint names the step kind (``<service URL>/model_step``), so each
    step function sees the requests it sees on a service of its own."""
    served = ", ".join(f"/{kind}" for kind in steps)
    listing = JSONResponse({"status": "ok", "serves": [f"/{kind}" for kind in steps]})

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (step := steps.get(_first_segment(scope))) is not None:
            await step(scope, receive, send)
        elif other is not None:
            await other(scope, receive, send)
        elif scope["type"] == "lifespan":
            await _lifespan(receive, send)
        elif scope["type"] == "http" and _route_path(scope) in ("", "/") and (
                scope["method"] in ("GET", "HEAD")):
            await listing(scope, receive, send)
        elif scope["type"] == "http":
            await PlainTextResponse(f"Not Found: this service serves {served}",
                                    status_code=404)(scope, receive, send)

    return app
