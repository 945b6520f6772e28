"""Serving a process only once it has started, and exiting at once when it cannot start.

A process whose settings are invalid, whose agent catalog cannot be imported or whose model is
misconfigured can never answer a request. Built lazily on the first request, its dependencies
failed on every health probe: the process answered 500 forever and logged the same traceback
once per probe, while Cloud Run and ``ackloop dev up`` kept waiting for it. So everything that
can fail at start-up is built **before** the server binds its socket: the settings, the app,
and the process's dependencies (:func:`ackloop.hosting.runtime.process_deps`: the agent catalog, the
model client, the store and the publisher). A failure is logged as ONE line, in the process's
JSON log format, naming the exception's type and message and where it was raised, and the
process exits with code 1 (Cloud Run restarts a container that exits, with backoff).

The dependencies are built inside the event loop that serves (an override of
:meth:`uvicorn.Server.serve`), not before it: the async clients they hold (Firestore, Pub/Sub,
httpx) are bound to the loop they are created in.
"""

from __future__ import annotations

import importlib
import logging
import socket
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from pydantic import ValidationError

from ackloop.config.settings import Settings
from ackloop.hosting import asyncio_only, gcstart

if TYPE_CHECKING:
    import uvicorn
    from uvicorn.config import Config

LOGGER = "ackloop.hosting.startup"
"""The logger of the one start-up failure line (``ackloop dev up`` looks for it in a log)."""
PREFIX = "start-up failed: "
_IMPORTLIB = str(Path(importlib.__file__).parent)
"""Frames of the import machinery say nothing about where an import failed."""

log = logging.getLogger(LOGGER)


class StartupFailed(Exception):
    """The process could not start; its cause is ``__cause__``."""


def describe(exc: BaseException) -> str:
    """One line: the exception's type and message, and the innermost frame it came from.

    A settings error lists each invalid variable; a multi-line message is joined with "; ".
    """
    if isinstance(exc, ValidationError):
        message = "; ".join(
            f"ACKLOOP_{'.'.join(str(p) for p in error['loc']).upper()}: {error['msg']}"
            for error in exc.errors()
        )
    else:
        message = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    line = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    if not isinstance(exc, ValidationError) and (where := _origin(exc)):
        line += f" (at {where})"
    return line


def _origin(exc: BaseException) -> str | None:
    """``file:line`` of the innermost frame of the deepest cause that is a real file."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not f.filename.startswith("<") and _IMPORTLIB not in f.filename]
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else None


def report(exc: BaseException, level: str = "INFO") -> None:
    """Log the one start-up failure line (JSON on stderr, secrets masked)."""
    from ackloop.telemetry.logs import configure

    configure(level)
    log.critical("%s%s", PREFIX, describe(exc))


def _server(config: Config) -> uvicorn.Server:
    """A uvicorn server that loads its app and builds the process's dependencies in its own
    event loop before it binds; a failure there is :class:`StartupFailed`."""
    import uvicorn

    from ackloop.hosting.runtime import process_deps

    class StartFirst(uvicorn.Server):
        async def serve(self, sockets: list[socket.socket] | None = None) -> None:
            try:
                if not self.config.loaded:
                    self.config.load()
                await process_deps()
            except Exception as exc:
                raise StartupFailed from exc
            gcstart.resume()  # started: what exists now lives as long as the process
            asyncio_only.show()
            await super().serve(sockets)

    return StartFirst(config)


def serve(config_for: Callable[[Settings], Config]) -> None:
    """Read the settings, then serve the app ``config_for`` configures, once it has started.

    Exits with code 1 after one log line if anything fails before the server binds.
    """
    try:
        settings = Settings()
    except ValidationError as exc:
        _exit(exc, "INFO")
    try:
        server = _server(config_for(settings))
    except Exception as exc:
        _exit(exc, settings.log_level)
    try:
        server.run()
    except StartupFailed as failed:
        assert failed.__cause__ is not None
        _exit(failed.__cause__, settings.log_level)
    if not server.started:  # uvicorn gave up before serving (it logged why)
        raise SystemExit(1)


def _exit(exc: BaseException, level: str) -> NoReturn:
    report(exc, level)
    raise SystemExit(1)
