"""ackloop's log lines in Cloud Logging's structured format, checked against the format of
google-cloud-logging's own ``StructuredLogHandler``: the same record, with the same span current
and the same labels, gives the same special keys with the same values."""

from __future__ import annotations

import io
import json
import logging
from datetime import datetime
from typing import Any

from google.cloud.logging_v2.handlers import StructuredLogHandler
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from ackloop.telemetry import logs
from ackloop.telemetry.context import current_labels, log_context, update_log_context

PROJECT = "demo-project"
TRACE_ID = 0x4BF92F3577B34DA6A3CE929D0E0E4736
SPAN_ID = 0x00F067AA0BA902B7
SPECIAL = (logs.TRACE, logs.SPAN_ID, logs.TRACE_SAMPLED, logs.LABELS, logs.SOURCE_LOCATION,
           "severity", "message")


def _span(sampled: bool = True) -> NonRecordingSpan:
    flags = TraceFlags(TraceFlags.SAMPLED if sampled else TraceFlags.DEFAULT)
    return NonRecordingSpan(SpanContext(TRACE_ID, SPAN_ID, is_remote=False, trace_flags=flags))


def _record(**extra: Any) -> logging.LogRecord:
    logger = logging.getLogger("ackloop.engine.model_step")
    return logger.makeRecord(logger.name, logging.WARNING, __file__, 42,
                             "step %s of %s retried", ("0001-model", "run-1"), None,
                             func="handler", extra=extra)


def _google(record: logging.LogRecord) -> dict[str, Any]:
    """What google-cloud-logging writes for ``record`` (its filter reads the current span)."""
    handler = StructuredLogHandler(project_id=PROJECT)
    assert handler.filter(record)  # its CloudLoggingFilter adds the trace, span and labels
    parsed: dict[str, Any] = json.loads(handler.format(record))
    return parsed


def _ours(record: logging.LogRecord) -> dict[str, Any]:
    parsed: dict[str, Any] = json.loads(logs.JsonFormatter(PROJECT).format(record))
    return parsed


def test_the_special_keys_match_google_cloud_loggings_structured_handler() -> None:
    with trace.use_span(_span()), log_context(run_id="run-1", step="0001-model"):
        update_log_context(attempt=2, agent="support", conversation_id="conv-9")
        labels = dict(current_labels())
        ours = _ours(_record())
        google = _google(_record(labels=labels))
    for key in SPECIAL:
        assert ours[key] == google[key], key
    assert ours[logs.TRACE] == f"projects/{PROJECT}/traces/4bf92f3577b34da6a3ce929d0e0e4736"
    assert ours[logs.SPAN_ID] == "00f067aa0ba902b7"
    assert ours[logs.TRACE_SAMPLED] is True
    assert ours[logs.LABELS] == {"python_logger": "ackloop.engine.model_step", "run_id": "run-1",
                                 "step": "0001-model", "attempt": "2", "agent": "support",
                                 "conversation_id": "conv-9"}
    assert ours[logs.SOURCE_LOCATION] == {"line": 42, "file": __file__, "function": "handler"}
    assert ours["message"] == "step 0001-model of run-1 retried"
    # RFC 3339, in UTC.
    assert ours["time"].endswith("Z") and datetime.fromisoformat(ours["time"]).tzinfo


def test_an_unsampled_span_is_marked_so_like_googles() -> None:
    with trace.use_span(_span(sampled=False)):
        ours, google = _ours(_record()), _google(_record())
    assert ours[logs.TRACE_SAMPLED] is False
    assert ours[logs.TRACE_SAMPLED] == google[logs.TRACE_SAMPLED]
    assert ours[logs.TRACE] == google[logs.TRACE]


def test_outside_a_span_and_a_delivery_a_line_has_no_trace_and_no_run_labels() -> None:
    ours = _ours(_record())
    assert logs.TRACE not in ours and logs.SPAN_ID not in ours and logs.TRACE_SAMPLED not in ours
    assert ours[logs.LABELS] == {"python_logger": "ackloop.engine.model_step"}
    # google-cloud-logging writes empty values there instead: both mean "no trace".
    assert _google(_record())[logs.TRACE] == ""


def test_fields_become_top_level_keys_masked_and_never_override_the_special_ones() -> None:
    stream = io.StringIO()
    logger = logging.getLogger("ackloop.test.fields")
    logger.propagate = False
    handler = logs.json_handler(stream, PROJECT)
    logger.addHandler(handler)
    try:
        logger.warning("run finished", extra={"fields": {
            "stop_reason": "answered", "tokens": 321, "usd": 0.0012,
            "severity": "DEBUG", "note": "Authorization: Bearer sk-abcdefghijklmnop1234"}})
    finally:
        logger.removeHandler(handler)
    entry = json.loads(stream.getvalue())
    assert entry["stop_reason"] == "answered" and entry["tokens"] == 321
    assert entry["usd"] == 0.0012
    assert entry["severity"] == "WARNING"
    assert "sk-abcdefghijklmnop1234" not in entry["note"]


def test_log_contexts_nest_and_an_update_made_in_a_task_is_seen_by_the_delivery() -> None:
    import asyncio

    async def delivery() -> dict[str, str]:
        with log_context(run_id="run-1"):
            async def claim() -> None:
                update_log_context(attempt=3)
            await asyncio.create_task(claim())
            with log_context(step="0000-model"):
                assert current_labels() == {"run_id": "run-1", "attempt": "3",
                                            "step": "0000-model"}
            return dict(current_labels())

    assert asyncio.run(delivery()) == {"run_id": "run-1", "attempt": "3"}
    assert current_labels() == {}
