"""Where spans go: Cloud Trace in production, JSON lines files locally.

Imported only when tracing is on (:func:`ackloop.telemetry.tracing.configure`): the
OpenTelemetry SDK and the Cloud Trace exporter cost a cold start that records nothing.

Both exporters run off the request path: a ``BatchSpanProcessor`` queues an ended span (no
I/O in the request) and its thread exports the queue, every few seconds to Cloud Trace, every
:data:`FILE_EXPORT_DELAY_MS` to a trace file (a local run's trace is readable a moment after it
ends). The provider's exit hook (run when Cloud Run's SIGTERM, or ``ackloop dev down``, stops
the server) flushes what is queued; a killed process loses at most its last moment of spans.

Spans are output, like logs: their attributes, events' attributes and status text are masked
(:func:`ackloop.telemetry.masking.mask_secrets`) in the export thread, before they leave the
process.
"""

from __future__ import annotations

import contextvars
import functools
import json
import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace import Status
from opentelemetry.util.types import AttributeValue

from ackloop.telemetry.masking import mask_secrets, registered_secrets

ForcedIds = contextvars.ContextVar[tuple[int, int] | None]
FILE_EXPORT_DELAY_MS = 200
"""How long an ended span may wait in the queue before a trace file gets it."""


class RunIdGenerator(RandomIdGenerator):
    """Random ids, except where the caller forces them (a run's root span, whose ids are derived
    from the run id so that every process can name it)."""

    def __init__(self, forced: ForcedIds) -> None:
        self._forced = forced

    def generate_trace_id(self) -> int:
        forced = self._forced.get()
        return forced[0] if forced else super().generate_trace_id()

    def generate_span_id(self) -> int:
        forced = self._forced.get()
        return forced[1] if forced else super().generate_span_id()


def span_record(span: ReadableSpan, service: str) -> dict[str, Any]:
    """One span as a trace file line: ids as lowercase hex, times as Unix seconds."""
    context = span.get_span_context()
    assert context is not None
    return {
        "trace_id": f"{context.trace_id:032x}",
        "span_id": f"{context.span_id:016x}",
        "parent_span_id": f"{span.parent.span_id:016x}" if span.parent else None,
        "name": span.name,
        "service": service,
        "start": (span.start_time or 0) / 1e9,
        "end": (span.end_time or 0) / 1e9,
        "attributes": dict(span.attributes or {}),
        "events": [{"name": e.name, "time": e.timestamp / 1e9,
                    "attributes": dict(e.attributes or {})} for e in span.events],
        "status": {"code": span.status.status_code.name,
                   "description": span.status.description},
    }


SHORT_TEXT = 256
"""Text up to this long is masked through a cache: a span's ids, names and topics repeat from
one span to the next, and masking costs a few regular expressions per value."""


def _mask(text: str) -> str:
    if len(text) > SHORT_TEXT:
        return mask_secrets(text)
    return _mask_short(text, registered_secrets())


@functools.lru_cache(maxsize=4096)
def _mask_short(text: str, registered: tuple[str, ...]) -> str:
    return mask_secrets(text)  # ``registered`` keys the cache: mask_secrets reads them itself


def _masked_value(value: AttributeValue) -> AttributeValue:
    if isinstance(value, str):
        return _mask(value)
    if isinstance(value, Sequence) and value and isinstance(value[0], str):
        return [_mask(str(item)) for item in value]
    return value


def _masked_attributes(attributes: Mapping[str, AttributeValue] | None,
                       ) -> dict[str, AttributeValue]:
    return {key: _masked_value(value) for key, value in (attributes or {}).items()}


def masked(span: ReadableSpan) -> ReadableSpan:
    """``span`` with the text of its attributes, its events' attributes and its status masked."""
    status = span.status
    if status.description:
        status = Status(status.status_code, _mask(status.description))
    return ReadableSpan(
        name=span.name, context=span.get_span_context(), parent=span.parent,
        resource=span.resource, attributes=_masked_attributes(span.attributes),
        events=[Event(e.name, _masked_attributes(e.attributes), e.timestamp)
                for e in span.events],
        links=span.links, kind=span.kind, status=status, start_time=span.start_time,
        end_time=span.end_time, instrumentation_scope=span.instrumentation_scope)


class MaskingExporter(SpanExporter):
    """Hands ``inner`` the spans masked (:func:`masked`)."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return self.inner.export([masked(s) for s in spans])

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.inner.force_flush(timeout_millis)

    def shutdown(self) -> None:
        self.inner.shutdown()


class JsonLinesExporter(SpanExporter):
    """Appends each span to ``<directory>/<service>-<pid>.jsonl``: one file per process, so no
    two processes ever write the same file."""

    def __init__(self, directory: Path, service: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / f"{service}-{os.getpid()}.jsonl"
        self._service = service
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = "".join(json.dumps(span_record(s, self._service), default=str) + "\n"
                        for s in spans)
        with self._lock, self.path.open("a", encoding="utf-8") as out:
            out.write(lines)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


def build_provider(export: str, directory: Path | None, service: str, project_id: str, *,
                   forced_ids: ForcedIds) -> TracerProvider:
    """A tracer provider exporting to ``export`` (``cloud_trace`` or ``file``)."""
    provider = TracerProvider(resource=Resource.create({"service.name": service}),
                              id_generator=RunIdGenerator(forced_ids))
    if export == "file":
        if directory is None:
            raise ValueError("ACKLOOP_TRACE_EXPORT=file needs ACKLOOP_TRACE_DIR")
        provider.add_span_processor(BatchSpanProcessor(
            MaskingExporter(JsonLinesExporter(directory, service)),
            schedule_delay_millis=FILE_EXPORT_DELAY_MS))
    elif export == "cloud_trace":
        from opentelemetry.exporter.cloud_trace import CloudTraceSpanExporter

        exporter = CloudTraceSpanExporter(project_id)  # type: ignore[no-untyped-call]
        provider.add_span_processor(BatchSpanProcessor(MaskingExporter(exporter)))
    else:
        raise ValueError(f"unknown trace export {export!r}")
    return provider
