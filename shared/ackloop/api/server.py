"""Serving the HTTP API and the step functions with uvicorn, bounded against slow and numerous
clients (every service: the API and each push function).

- ``limit_concurrency`` (``ACKLOOP_API_MAX_CONNECTIONS``): beyond that many open connections or
  tasks, uvicorn answers 503 instead of taking more work;
- ``timeout_keep_alive`` (``ACKLOOP_API_KEEP_ALIVE_SECONDS``): an idle connection is closed;
- a client must send a request's headers within ``ACKLOOP_API_REQUEST_READ_SECONDS`` of its first
  byte (or of the connection), or the connection is closed (:class:`BoundedH11Protocol`: h11
  has no read timeout of its own), and its body within the same time once the headers are in
  (:class:`~ackloop.api.limits.ReadDeadline`, 408).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import H11Protocol

from ackloop.config.settings import Settings

log = logging.getLogger(__name__)


class BoundedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose request headers take too long."""

    header_seconds = 30.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_timer: asyncio.TimerHandle | None = None

    def _awaiting_request(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _arm(self) -> None:
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(self.header_seconds, self._expire)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _expire(self) -> None:
        self._header_timer = None
        if self._awaiting_request() and not self.transport.is_closing():
            log.info("closing a connection whose request headers took over %g s",
                     self.header_seconds)
            self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._awaiting_request():
            self._arm()  # the first bytes of a request: its headers must follow in time
        super().data_received(data)
        if not self._awaiting_request():
            self._disarm()  # the headers are in; the body is ReadDeadline's

    def on_response_complete(self) -> None:
        self._disarm()  # an idle keep-alive connection is uvicorn's keep-alive timeout's
        super().on_response_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)


def uvicorn_config(settings: Settings, *, host: str, port: int,
                   app: Any = "ackloop.api.app:create_app", **options: Any) -> Config:
    """A server's configuration, its limits from ``settings``: the API's by default (its
    factory), or any ASGI ``app`` (the step functions, which bound the body read themselves
    with :class:`~ackloop.api.limits.ReadDeadline`)."""
    protocol = type("BoundedH11", (BoundedH11Protocol,),
                    {"header_seconds": settings.api_request_read_seconds})
    if isinstance(app, str):
        options.setdefault("factory", True)
    return Config(
        app, host=host, port=port, log_level="warning",
        http=protocol, limit_concurrency=settings.api_max_connections,
        timeout_keep_alive=int(max(1, round(settings.api_keep_alive_seconds))), **options,
    )


def serve(*, host: str, port: int) -> None:
    """Run the API until the process is stopped; exit at once if it cannot start
    (:mod:`ackloop.hosting.startup`)."""
    from ackloop.hosting import startup

    startup.serve(lambda settings: uvicorn_config(settings, host=host, port=port))
