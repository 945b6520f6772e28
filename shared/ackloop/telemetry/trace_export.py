"""Where spans go: Cloud Trace in production, JSON lines files locally.

Imported only when tracing is on (:func:`ackloop.telemetry.tracing.configure`): the
OpenTelemetry SDK and the Cloud Trace exporter cost a cold start that records nothing.

Ending a span must not lose it in a serverless process: the Cloud Trace exporter batches
(``BatchSpanProcessor``), flushed when the process shuts down (the provider's exit hook, which
runs when Cloud Run's SIGTERM stops the server); a trace file is written span by span
(``SimpleSpanProcessor``), so a killed process has written every span that ended.
"""

from __future__ import annotations

import contextvars
import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

ForcedIds = contextvars.ContextVar[tuple[int, int] | None]


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
        provider.add_span_processor(SimpleSpanProcessor(JsonLinesExporter(directory, service)))
    elif export == "cloud_trace":
        from opentelemetry.exporter.cloud_trace import CloudTraceSpanExporter

        exporter = CloudTraceSpanExporter(project_id)  # type: ignore[no-untyped-call]
        provider.add_span_processor(BatchSpanProcessor(exporter))
    else:
        raise ValueError(f"unknown trace export {export!r}")
    return provider
