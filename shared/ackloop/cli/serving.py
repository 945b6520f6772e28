"""What ``ackloop run`` does once its options are known: serve one function or the API.

Imports nothing of the command line (typer, click): the container's ``ackloop run`` reaches it
straight from :mod:`ackloop.cli.entry`, and the ``run`` command of :mod:`ackloop.cli.main`
after checking its options.
"""

from __future__ import annotations

import sys
from pathlib import Path

STEP_KINDS = ("ingest", "model_step", "tool_step", "dead_letter")
"""The step functions, each ``<functions_dir>/<kind>/main.py`` defining an async ``<kind>``."""

COMBINED = {"steps": STEP_KINDS, "all": STEP_KINDS}
"""The targets that serve several step kinds from one service, each under ``/<kind>``
(a push subscription's endpoint is ``<service URL>/<kind>``); ``all`` serves the HTTP API at
every other path too. One service instead of one per step kind: a question that finds every
instance scaled to zero pays one cold start, not one per hop (docs/deployment-layouts.md)."""

FUNCTION_TARGETS = (*STEP_KINDS, "api", *COMBINED)


def function_sources(target: str, functions_dir: Path) -> dict[str, Path]:
    """The modules serving ``target``, by step kind (``<functions_dir>/<kind>/main.py``):
    one for a step function, each step kind's for a combined target, none for the API."""
    kinds = COMBINED.get(target, (target,) if target in STEP_KINDS else ())
    return {kind: functions_dir / kind / "main.py" for kind in kinds}


def serve_target(target: str, sources: dict[str, Path], *, host: str, port: int) -> None:
    """Serve ``target`` (one of :data:`FUNCTION_TARGETS`; ``sources``, its modules by step
    kind: :func:`function_sources`) until the process is stopped."""
    prepare()
    from ackloop.hosting import runtime

    runtime.serve_target(target)  # the process builds only what this service uses
    if target in COMBINED:
        serve_combined(sources, with_api=target == "all", host=host, port=port)
    elif not sources:
        from ackloop.api import server

        server.serve(host=host, port=port)
    else:
        serve_function(target, sources[target], host=host, port=port)


def prepare() -> None:
    """What a serving process does before it imports anything else: no cyclic garbage
    collection and no trio until it has started (:mod:`ackloop.hosting.gcstart`,
    :mod:`ackloop.hosting.asyncio_only`; :mod:`ackloop.hosting.startup` undoes both), and httpx
    imported without its command line."""
    from ackloop.hosting import asyncio_only, gcstart

    gcstart.pause()
    asyncio_only.hide()
    _import_httpx_without_its_cli()


def _import_httpx_without_its_cli() -> None:
    """Import httpx without ``httpx._main``, its command line, which its package imports
    whenever rich is installed (it is: this CLI uses it), and with it rich and pygments: a
    third of httpx's import time, in every cold start, for a command no service runs. Its
    ``httpx.main`` is then httpx's own stand-in (it asks for ``httpx[cli]``); importing
    ``httpx._main`` afterwards still works."""
    if "httpx" in sys.modules:
        return
    sys.modules["httpx._main"] = None  # type: ignore[assignment]  # import raises ImportError
    try:
        import httpx  # noqa: F401
    finally:
        del sys.modules["httpx._main"]


def serve_function(target: str, source: Path, *, host: str, port: int) -> None:
    """Serve one function in this process: its ASGI app (:mod:`ackloop.hosting.function_app`) under
    uvicorn.

    One process per container instead of exec'ing ``functions-framework`` (a second
    interpreter whose gunicorn master forks a worker): about 40% less memory and a faster cold
    start. Cloud Run restarts a container whose process exits, so it needs no supervisor.
    """
    from uvicorn.config import Config

    from ackloop.api.limits import ReadDeadline
    from ackloop.api.server import uvicorn_config
    from ackloop.config.settings import Settings
    from ackloop.hosting import startup
    from ackloop.hosting.function_app import function_app, load_function

    def configured(settings: Settings) -> Config:
        asgi = function_app(load_function(target, source))
        # The same bounds as the API's against slow and numerous clients: headers and body
        # each within api_request_read_seconds, at most api_max_connections at once.
        bounded = ReadDeadline(asgi, settings.api_request_read_seconds)
        # ws="none": a function answers HTTP only; uvicorn would import websockets for nothing.
        return uvicorn_config(settings, host=host, port=port, app=bounded, access_log=False,
                              ws="none")

    # Exits at once, after one log line, if the function cannot start (ackloop.hosting.startup).
    startup.serve(configured)


def serve_combined(sources: dict[str, Path], *, with_api: bool, host: str, port: int) -> None:
    """Serve every step kind of ``sources`` under ``/<kind>``, and with ``with_api`` the HTTP
    API at every other path, from this one process
    (:func:`ackloop.hosting.function_app.combined_app`)."""
    from uvicorn.config import Config

    from ackloop.api.limits import ReadDeadline
    from ackloop.api.server import uvicorn_config
    from ackloop.config.settings import Settings
    from ackloop.hosting import startup
    from ackloop.hosting.function_app import combined_app, function_app, load_function

    def configured(settings: Settings) -> Config:
        steps = {kind: ReadDeadline(function_app(load_function(kind, source)),
                                    settings.api_request_read_seconds)
                 for kind, source in sources.items()}
        if not with_api:
            return uvicorn_config(settings, host=host, port=port, app=combined_app(steps),
                                  access_log=False, ws="none")

        def factory() -> object:
            from ackloop.api.app import create_app

            return combined_app(steps, create_app())

        return uvicorn_config(settings, host=host, port=port, app=factory, factory=True)

    startup.serve(configured)
