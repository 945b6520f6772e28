"""Logging: one JSON object per line in Cloud Logging's structured-log format, secrets masked.

Cloud Run turns each line a process writes on stderr into a log entry, and reads some keys as
the entry's own fields rather than its payload (cloud.google.com/logging/docs/structured-logging):
``severity``, ``time``, ``logging.googleapis.com/sourceLocation``, ``…/labels`` (indexed, so a
run's lines are found by ``labels.run_id``), ``…/trace``, ``…/spanId`` and ``…/trace_sampled``
(the entry is shown inside its trace in Cloud Trace). The keys and their value formats are those
google-cloud-logging's ``StructuredLogHandler`` writes (``tests/logs``), without importing it:
the labels come from :mod:`ackloop.telemetry.context`, the trace from the current OpenTelemetry
span through the API alone. A call's ``extra={"fields": {...}}`` become top-level keys of the
entry (the payload), never overriding the keys above.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import IO, Any

from opentelemetry import trace

from ackloop.telemetry.context import current_labels

TRACE = "logging.googleapis.com/trace"
SPAN_ID = "logging.googleapis.com/spanId"
TRACE_SAMPLED = "logging.googleapis.com/trace_sampled"
LABELS = "logging.googleapis.com/labels"
SOURCE_LOCATION = "logging.googleapis.com/sourceLocation"


class JsonFormatter(logging.Formatter):
    """One Cloud Logging structured entry per record; ``project`` completes the trace's name."""

    def __init__(self, project: str | None = None) -> None:
        super().__init__()
        self.project = project

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {}
        fields = getattr(record, "fields", None)
        if isinstance(fields, Mapping):
            entry.update({str(key): value for key, value in fields.items()})
        entry.update({
            "severity": record.levelname,
            "message": record.getMessage(),
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(
                timespec="microseconds").replace("+00:00", "Z"),
            "logger": record.name,
            SOURCE_LOCATION: {"line": record.lineno, "file": record.pathname,
                              "function": record.funcName},
            LABELS: {"python_logger": record.name, **current_labels()},
        })
        entry.update(self._trace())
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:  # the masking filter has already masked it
            entry["exception"] = record.exc_text
        return json.dumps(entry, ensure_ascii=False, default=str)

    def _trace(self) -> dict[str, Any]:
        """The current span's trace, span id and sampling flag (nothing outside a valid span)."""
        context = trace.get_current_span().get_span_context()
        if not context.is_valid:
            return {}
        trace_id = trace.format_trace_id(context.trace_id)
        return {
            TRACE: f"projects/{self.project}/traces/{trace_id}" if self.project else trace_id,
            SPAN_ID: trace.format_span_id(context.span_id),
            TRACE_SAMPLED: context.trace_flags.sampled,
        }


def json_handler(stream: IO[str], project: str | None = None) -> logging.Handler:
    """A handler writing :class:`JsonFormatter` lines to ``stream``, secrets masked."""
    from ackloop.telemetry.masking import SecretMaskingFilter

    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter(project))
    handler.addFilter(SecretMaskingFilter())
    return handler


def configure(level: str = "INFO", project: str | None = None) -> None:
    """JSON lines on stderr for the whole process, once (a later call changes nothing)."""
    root = logging.getLogger()
    if any(getattr(h, "_ackloop", False) for h in root.handlers):
        return
    handler = json_handler(sys.stderr, project)
    handler._ackloop = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level.upper())
    for noisy in ("httpx", "httpcore", "google", "grpc", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
