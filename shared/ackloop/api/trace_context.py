"""W3C trace context on the HTTP API: an incoming ``traceparent`` is honoured (a run started
by the request joins the caller's trace), and every response carries a ``traceparent``: the
root span of the run it is about, once a handler has named the run, else the caller's own."""

from __future__ import annotations

import contextvars
from dataclasses import dataclass, field

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ackloop.domain.records import RunRecord
from ackloop.telemetry import tracing

HEADERS = (b"traceparent", b"tracestate")


@dataclass
class _Exchange:
    incoming: dict[str, str] = field(default_factory=dict)
    answer: str | None = None


_exchange: contextvars.ContextVar[_Exchange | None] = contextvars.ContextVar(
    "ackloop_api_trace", default=None)


def incoming() -> dict[str, str]:
    """The trace context the request came with (``traceparent``, ``tracestate``), if any."""
    exchange = _exchange.get()
    return dict(exchange.incoming) if exchange else {}


def answer_for(run: RunRecord) -> None:
    """The response is about ``run``: it carries the run's ``traceparent``."""
    exchange = _exchange.get()
    if exchange is not None:
        exchange.answer = tracing.run_traceparent(run.run_id, run.trace_id)


class TraceHeaders:
    """ASGI middleware: reads the request's trace context, adds ``traceparent`` to the answer.

    The exchange is one mutable object per request, so a handler that runs in a copied context
    (a task of its own) still reaches it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        exchange = _Exchange({name.decode(): value.decode("latin-1")
                              for name, value in scope.get("headers") or []
                              if name.lower() in HEADERS})
        if tracing.extract(exchange.incoming) is None:
            exchange.incoming = {}  # not a valid context: ignored, as W3C asks

        async def send_with_trace(message: Message) -> None:
            if message["type"] == "http.response.start":
                traceparent = exchange.answer or exchange.incoming.get("traceparent")
                if traceparent:
                    message = {**message, "headers": [*message.get("headers", []),
                                                      (b"traceparent", traceparent.encode())]}
            await send(message)

        token = _exchange.set(exchange)
        try:
            await self.app(scope, receive, send_with_trace)
        finally:
            _exchange.reset(token)
