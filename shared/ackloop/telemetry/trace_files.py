"""Reading a run's trace from the trace files of a deployment that writes them (the local stack:
``<stack directory>/traces/<service>-<pid>.jsonl``, one JSON span per line), for ``ackloop runs
trace`` and ``GET /runs/{run_id}/trace``. No OpenTelemetry import: the files are plain JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

Span = dict[str, Any]

KEY_ATTRIBUTES = ("ackloop.step", "ackloop.attempt", "ackloop.claim", "ackloop.outcome",
                  "http.response.status_code", "gen_ai.request.model",
                  "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens",
                  "messaging.destination.name", "messaging.batch.message_count",
                  "ackloop.writes", "ackloop.tool", "exception.type")
"""What a line of the text tree shows of a span's or an event's attributes."""
LABELS = {"messaging.destination.name": "topic", "messaging.batch.message_count": "messages",
          "exception.type": "error"}
"""Shown as ``label=value``; any other attribute by the last part of its name."""


def read_trace(directory: Path, trace_id: str) -> list[Span]:
    """Every span of ``trace_id`` in the directory's files, in start order. A line cut short
    (a process killed while writing it) is skipped."""
    spans: list[Span] = []
    for path in sorted(directory.glob("*.jsonl")):
        with path.open(encoding="utf-8") as lines:
            for line in lines:
                if f'"{trace_id}"' not in line:
                    continue
                try:
                    span = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(span, dict) and span.get("trace_id") == trace_id:
                    spans.append(span)
    return sorted(spans, key=lambda s: (s.get("start", 0), s.get("end", 0)))


def of_run(spans: list[Span], run_id: str, root_span_id: str) -> list[Span]:
    """The spans of ``spans`` (one trace) that belong to ``run_id``: those that name it
    (``ackloop.run_id``), its root span (``root_span_id``) and every span under one of those.
    A trace may hold other runs' spans (a caller can start several runs in one trace of theirs,
    or name another's trace id): those are left out, so a run's trace shows only its own."""
    by_id = {s.get("span_id"): s for s in spans}
    mine: dict[str, bool] = {}

    def belongs(span: Span, seen: frozenset[str] = frozenset()) -> bool:
        span_id = str(span.get("span_id"))
        if span_id in mine:
            return mine[span_id]
        attributes = span.get("attributes") or {}
        named = attributes.get("ackloop.run_id")
        if named is not None or span_id == root_span_id:
            verdict = named == run_id or (named is None and span_id == root_span_id)
        else:
            parent = by_id.get(span.get("parent_span_id"))
            verdict = (span.get("parent_span_id") == root_span_id
                       or (parent is not None and span_id not in seen
                           and belongs(parent, seen | {span_id})))
        mine[span_id] = verdict
        return verdict

    return [s for s in spans if belongs(s)]


def tree(spans: list[Span]) -> list[tuple[int, Span]]:
    """The spans depth first, each with its depth; a span whose parent is not among them (the
    root, or a caller's span) starts a tree of its own."""
    ids = {s["span_id"] for s in spans}
    children: dict[str | None, list[Span]] = {}
    for s in spans:
        parent = s.get("parent_span_id")
        children.setdefault(parent if parent in ids else None, []).append(s)
    ordered: list[tuple[int, Span]] = []

    def walk(span: Span, depth: int) -> None:
        ordered.append((depth, span))
        for child in children.get(span["span_id"], []):
            walk(child, depth + 1)

    for top in children.get(None, []):
        walk(top, 0)
    return ordered


def render(spans: list[Span]) -> list[str]:
    """One line per span (indentation, name, duration, key attributes), then one line per
    event of the span (what happened inside a delivery: the model call, the commit, each
    publish...), marked ``·``, with its duration where it has one."""
    lines = []
    for depth, span in tree(spans):
        millis = (span.get("end", 0) - span.get("start", 0)) * 1000
        line = f"{'  ' * depth}{span['name']}  {millis:.1f} ms{_shown(span.get('attributes'))}"
        if (span.get("status") or {}).get("code") == "ERROR":
            line += "  ERROR"
        lines.append(line)
        for event in span.get("events") or []:
            attrs = event.get("attributes") or {}
            took = attrs.get("duration_ms")
            lines.append(f"{'  ' * (depth + 1)}· {event.get('name', '')}"
                         + (f"  {took:.1f} ms" if isinstance(took, int | float) else "")
                         + _shown(attrs))
    return lines


def _shown(attributes: dict[str, Any] | None) -> str:
    attrs = attributes or {}
    shown = " ".join(f"{LABELS.get(k) or k.rsplit('.', 1)[-1]}={attrs[k]}"
                     for k in KEY_ATTRIBUTES if k in attrs)
    return f"  {shown}" if shown else ""
