"""One trace per run: W3C trace context on every message and response, and a span per step.

A run's trace id is chosen once, at ingest: the caller's when the query (a Pub/Sub message's
attributes, or the HTTP request's ``traceparent`` header) carries one, else one derived from
the run id, so a duplicate query lands in the same trace. The run's root span (``ackloop.run``)
has a span id derived from the run id too: a message that lost its context (a re-publish of an
old message) still joins the run's trace, under that root.

Each delivery of a step is ONE span (``ackloop.ingest``, ``ackloop.model_step``,
``ackloop.tool_step``, ``ackloop.dead_letter``) whose parent is the context its message carries.
What happens inside it (the model call, a tool call, the commit, a publish: :func:`span`) is
recorded as an event on that span, named for the operation, with its attributes and its
``duration_ms``: a step costs one span to record and export, not one per operation. What a
step sends carries the step span's context, and the outbox keeps it, so a re-send after a crash
has the same parent. Outside a delivery (the sweeper, the CLI), :func:`span` records a span of
its own, a child of the current context.

Only the OpenTelemetry API is imported here (google-cloud-pubsub imports it anyway). Until
:func:`configure` installs the SDK (:mod:`ackloop.telemetry.trace_export`, imported then), the
tracer is the API's no-op one: no span is recorded, and the context still flows from message to
message, so a caller's trace id survives a deployment that records nothing. Spans are exported
in batches off the request path, with their text masked like logs
(:mod:`ackloop.telemetry.trace_export`).
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import NonRecordingSpan, Span, SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from ackloop.config.settings import TraceExport

SPAN_NAMES = {
    "query": "ackloop.ingest",
    "model": "ackloop.model_step",
    "tool": "ackloop.tool_step",
    "dead_letter": "ackloop.dead_letter",
}
"""The span of one delivery, by the function that serves it."""
ROOT_SPAN = "ackloop.run"

_PROPAGATOR = TraceContextTextMapPropagator()
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)

_tracer: trace.Tracer = trace.NoOpTracer()
_exporter: str = "none"
_flush: Any = None

_forced_ids: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar(
    "ackloop_forced_span_ids", default=None)
"""The (trace id, span id) the next span gets: the run's root span, whose ids are derived."""
_caller: contextvars.ContextVar[SpanContext | None] = contextvars.ContextVar(
    "ackloop_caller_span", default=None)
"""The context a query arrived with (the caller's span), parent of the run's root span."""
_delivery: contextvars.ContextVar[Span | None] = contextvars.ContextVar(
    "ackloop_delivery_span", default=None)
"""The recording span of the delivery being served: where :func:`span` records its events."""


def resolve_export(mode: TraceExport, directory: str | None) -> str:
    """``auto``: Cloud Trace on Cloud Run (``K_SERVICE`` set), trace files where a directory is
    configured (the local stack), else nothing."""
    if mode != "auto":
        return mode
    if os.environ.get("K_SERVICE"):
        return "cloud_trace"
    return "file" if directory else "none"


def service_name() -> str:
    """The process's service: Cloud Run's name for it, else the function it serves."""
    return os.environ.get("K_SERVICE") or os.environ.get("FUNCTION_TARGET") or "ackloop"


def configure(mode: TraceExport, directory: str | None, project_id: str) -> str:
    """Record spans from now on, to the exporter ``mode`` resolves to; returns its name.

    Spans go to a tracer provider of this module's own, not the global one: the Google client
    libraries' own instrumentation stays off.
    """
    global _tracer, _exporter, _flush
    export = resolve_export(mode, directory)
    if export == "none":
        _tracer, _exporter, _flush = trace.NoOpTracer(), export, None
        return export
    from ackloop.telemetry.trace_export import build_provider

    provider = build_provider(export, Path(directory) if directory else None, service_name(),
                              project_id, forced_ids=_forced_ids)
    _tracer, _exporter, _flush = provider.get_tracer("ackloop"), export, provider.force_flush
    return export


def exporter() -> str:
    """Where this process's spans go: ``cloud_trace``, ``file`` or ``none``."""
    return _exporter


def force_flush() -> None:
    """Export every span that has ended now (spans are exported in batches; tests, and a
    reader that needs a trace at once)."""
    if _flush is not None:
        _flush()


def run_trace_id(run_id: str) -> str:
    """The trace id of a run whose query carried none (32 lowercase hex)."""
    return _derived(f"trace:{run_id}", 32)


def run_root_span_id(run_id: str) -> str:
    """The span id of a run's root span (16 lowercase hex)."""
    return _derived(f"root:{run_id}", 16)


def _derived(text: str, digits: int) -> str:
    value = hashlib.sha256(text.encode()).hexdigest()[:digits]
    return value if int(value, 16) else "1".rjust(digits, "0")  # all zeros is invalid


def run_traceparent(run_id: str, trace_id: str | None) -> str:
    """The ``traceparent`` that names a run's root span."""
    return f"00-{trace_id or run_trace_id(run_id)}-{run_root_span_id(run_id)}-01"


def extract(carrier: Mapping[str, str]) -> SpanContext | None:
    """The span context ``carrier`` (message attributes, request headers) names, if valid."""
    lowered = {k.lower(): v for k, v in carrier.items() if k.lower() in ("traceparent",
                                                                          "tracestate")}
    context = trace.get_current_span(_PROPAGATOR.extract(lowered)).get_span_context()
    return context if context.is_valid else None


def current_carrier() -> dict[str, str]:
    """The current context as W3C headers (``traceparent``, and ``tracestate`` if any)."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return carrier


def current_trace_id() -> str | None:
    context = trace.get_current_span().get_span_context()
    return f"{context.trace_id:032x}" if context.is_valid else None


def _context_of(parent: SpanContext | None) -> Context:
    return trace.set_span_in_context(NonRecordingSpan(parent)) if parent else Context()


def _run_root(run_id: str, trace_id: str | None, flags: TraceFlags = _SAMPLED) -> SpanContext:
    return SpanContext(int(trace_id or run_trace_id(run_id), 16),
                       int(run_root_span_id(run_id), 16), is_remote=True, trace_flags=flags)


@contextlib.contextmanager
def delivery_span(kind: str, carrier: Mapping[str, str], run_id: str | None,
                  attributes: Mapping[str, Any] | None = None) -> Iterator[Span]:
    """The span of one delivery of ``kind`` (see :data:`SPAN_NAMES`), made current.

    Its parent is the context ``carrier`` holds; without one, the root span of ``run_id``'s
    run. A query's span is always a child of its run's root span, in the caller's trace if the
    query carried one (:func:`record_run_root` then makes the caller's span the root's parent).
    """
    incoming = extract(carrier)
    parent = incoming
    if kind == "query" and run_id:
        parent = _run_root(run_id, f"{incoming.trace_id:032x}" if incoming else None,
                           incoming.trace_flags if incoming else _SAMPLED)
    elif parent is None and run_id:
        parent = _run_root(run_id, None)
    token = _caller.set(incoming)
    try:
        with _tracer.start_as_current_span(
                SPAN_NAMES.get(kind, f"ackloop.{kind}"), context=_context_of(parent),
                kind=SpanKind.CONSUMER, attributes=_attributes(run_id, attributes)) as span:
            recording = _delivery.set(span if span.is_recording() else None)
            try:
                yield span
            finally:
                _delivery.reset(recording)
    finally:
        _caller.reset(token)


@contextlib.contextmanager
def run_context(run_id: str, trace_id: str | None) -> Iterator[None]:
    """Make the run's root span the current context (what is sent in it joins the run's
    trace): for work on a run outside any delivery of its messages, like the sweeper's."""
    with trace.use_span(NonRecordingSpan(_run_root(run_id, trace_id)), end_on_exit=False):
        yield


def record_run_root(run_id: str, trace_id: str) -> None:
    """Record the run's root span (once, when the run is created), from the start of the
    current span until now, under the caller's span if the query came with one."""
    current = trace.get_current_span()
    start = getattr(current, "start_time", None)
    token = _forced_ids.set((int(trace_id, 16), int(run_root_span_id(run_id), 16)))
    try:
        root = _tracer.start_span(ROOT_SPAN, context=_context_of(_caller.get()),
                                  kind=SpanKind.SERVER, start_time=start,
                                  attributes={"ackloop.run_id": run_id})
        root.end()
    finally:
        _forced_ids.reset(token)


class Operation:
    """What :func:`span` yields: attributes set on it are recorded with the operation."""

    __slots__ = ("_span", "attributes")

    def __init__(self, attributes: dict[str, Any], span_: Span | None = None) -> None:
        self.attributes = attributes
        self._span = span_

    def set_attribute(self, key: str, value: str | int | float | bool) -> None:
        if self._span is not None:
            self._span.set_attribute(key, value)
        else:
            self.attributes[key] = value


@contextlib.contextmanager
def span(name: str, attributes: Mapping[str, Any] | None = None,
         kind: SpanKind = SpanKind.INTERNAL) -> Iterator[Operation]:
    """An operation (the model call, a tool call, the commit, a publish) inside the current
    work.

    Inside a delivery it is an event on the delivery's span, stamped with the operation's start,
    with its attributes, ``duration_ms`` and, when it raised, ``exception.type`` and
    ``exception.message``. Outside one (the sweeper, the CLI) it is a child span of the current
    context. With tracing off it records nothing and costs next to nothing.
    """
    delivery = _delivery.get()
    if delivery is not None:
        with _as_event(delivery, name, dict(attributes or {})) as operation:
            yield operation
    elif _exporter == "none":
        yield Operation({})
    else:
        with _tracer.start_as_current_span(name, kind=kind,
                                           attributes=dict(attributes or {})) as child:
            yield Operation({}, child)


@contextlib.contextmanager
def _as_event(delivery: Span, name: str, attributes: dict[str, Any]) -> Iterator[Operation]:
    operation = Operation(attributes)
    started_ns, clock = time.time_ns(), time.perf_counter_ns()
    try:
        yield operation
    except BaseException as exc:
        attributes["exception.type"] = type(exc).__qualname__
        attributes["exception.message"] = str(exc)[:500]
        raise
    finally:
        attributes["duration_ms"] = round((time.perf_counter_ns() - clock) / 1e6, 3)
        delivery.add_event(name, attributes, timestamp=started_ns)


def note(**attributes: str | int | float | bool) -> None:
    """Set ``ackloop.<name>`` attributes on the current span."""
    trace.get_current_span().set_attributes({f"ackloop.{k}": v for k, v in attributes.items()})


def event(name: str, **attributes: str | int | float | bool) -> None:
    """Add an event (a takeover, a wait, a retry) to the current span."""
    trace.get_current_span().add_event(name, attributes)


def claimed(key: str, attempts: int, state: str, waited_seconds: float) -> None:
    """What a step's claim found: its attempt, a takeover, a completed step delivered again,
    and how long the delivery waited for another holder's lease."""
    note(step=key, attempt=attempts, claim=state)
    if waited_seconds > 0:
        event("lease wait", seconds=round(waited_seconds, 3))
    if state == "taken_over":
        event("takeover", attempt=attempts)
    elif state == "completed":
        event("redelivery of a completed step", step=key)


def model_answered(call: Operation, input_tokens: int, output_tokens: int,
                   model_version: str | None) -> None:
    """What a model call used (the semantic conventions' ``gen_ai.*`` names)."""
    call.set_attribute("gen_ai.usage.input_tokens", input_tokens)
    call.set_attribute("gen_ai.usage.output_tokens", output_tokens)
    if model_version:
        call.set_attribute("gen_ai.response.model", model_version)


def answered(span_: Span, status: int) -> None:
    """The delivery's answer: acknowledged (2xx) or redelivered."""
    span_.set_attribute("http.response.status_code", status)
    span_.set_attribute("ackloop.outcome",
                        "acknowledged" if 200 <= status < 300 else "redelivered")
    if status >= 500:
        span_.set_status(trace.Status(trace.StatusCode.ERROR, f"answered {status}"))


def _attributes(run_id: str | None, extra: Mapping[str, Any] | None) -> dict[str, Any]:
    found = {"ackloop.run_id": run_id} if run_id else {}
    return found | {k: v for k, v in (extra or {}).items() if v is not None}
