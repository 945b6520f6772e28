"""The run and step a log line belongs to, set once per delivery and read by every log line.

A delivery's handler enters :func:`log_context` with what the message names (the run, the
step); what is only known later (the attempt, once the step is claimed; the agent and the
conversation, once the run is read) is added with :func:`update_log_context`. The formatter of
:mod:`ackloop.telemetry.logs` reads :func:`current_labels` and writes them as the entry's Cloud
Logging
labels, so a run's lines can be filtered by label instead of by parsing message text.

The context variable holds one mutable dict per :func:`log_context`: an update made inside a
task the handler started (a heartbeat, a ``wait_for``) is seen by the handler's later lines,
which a plain ``ContextVar.set`` in that task would not be.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar

LABELS = ("run_id", "step", "attempt", "agent", "conversation_id")
"""The labels a delivery's log lines carry (each one only once it is known)."""

_EMPTY: dict[str, str] = {}
_labels: ContextVar[dict[str, str]] = ContextVar("ackloop_log_labels", default=_EMPTY)

Value = str | int | None


def _strings(fields: Mapping[str, Value]) -> dict[str, str]:
    unknown = set(fields) - set(LABELS)
    if unknown:
        raise TypeError(f"unknown log labels {sorted(unknown)}; known: {LABELS}")
    return {name: str(value) for name, value in fields.items() if value is not None}


@contextmanager
def log_context(**fields: Value) -> Iterator[None]:
    """Label every line logged inside with ``fields`` (as strings; None leaves a label out).

    Nested contexts start from the enclosing one's labels and restore them on exit.
    """
    token = _labels.set({**_labels.get(), **_strings(fields)})
    try:
        yield
    finally:
        _labels.reset(token)


def update_log_context(**fields: Value) -> None:
    """Add labels to the current :func:`log_context` (no effect outside one)."""
    current = _labels.get()
    if current is not _EMPTY:
        current.update(_strings(fields))


def current_labels() -> Mapping[str, str]:
    """The labels of the current delivery (empty outside any)."""
    return _labels.get()
