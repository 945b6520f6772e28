"""Faults the fake Gemini server can serve instead of an answer, and their spec syntax.

A spec is a comma-separated list of ``KIND[:VALUE][*COUNT]`` items:

- ``ok``: a normal answer (a placeholder in a schedule)
- ``429``, ``429:12``: too many requests; with a value, ``Retry-After: 12`` and a ``RetryInfo``
  ``retryDelay`` of ``12s``; ``429-details:12`` sends only the ``RetryInfo`` detail
- any other status code: ``500``, ``503``, ``400``, ``403``... an error with a Google-style body
- ``delay:5``: wait 5 s, then answer normally (to trip a client timeout)
- ``malformed``: 200 with a body that is not JSON
- ``safety``: ``promptFeedback.blockReason = SAFETY``, no candidates
- ``safety-finish``: one candidate with ``finishReason = SAFETY`` and no content
- ``empty``: ``candidates: []``; ``no-content``: a candidate without content
- ``midstream:2``: a streamed answer (``streamGenerateContent``) breaks off after 2 chunks with
  a 503 error event in the stream, as Gemini reports a failure after it started answering; a
  unary call gets the 503 at once

Example: ``429:2,500*2,ok,delay:3`` serves those five in order, then answers normally.
"""

from __future__ import annotations

import random
import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

NAMED_KINDS = frozenset(
    {"ok", "429-details", "delay", "malformed", "safety", "safety-finish", "empty", "no-content",
     "midstream"}
)


@dataclass(frozen=True)
class Fault:
    """One fault: ``kind`` is a name above or an HTTP status code; ``value`` is seconds."""

    kind: str
    value: float | None = None

    @property
    def status(self) -> int | None:
        """The HTTP status this fault answers with, when it is an error status."""
        return int(self.kind) if self.kind.isdigit() else None


def parse_fault_spec(spec: str) -> list[Fault]:
    """Parse ``"429:2,500*2,ok"`` into faults, in order. Raises ``ValueError`` on a bad item."""
    faults: list[Fault] = []
    for raw in spec.split(","):
        item = raw.strip()
        if not item:
            continue
        body, _, count_text = item.partition("*")
        kind, _, value_text = body.partition(":")
        kind = kind.strip().lower()
        if not (kind in NAMED_KINDS or (kind.isdigit() and 400 <= int(kind) <= 599)):
            raise ValueError(f"unknown fault {item!r}")
        value = float(value_text) if value_text else None
        if kind == "delay" and value is None:
            raise ValueError("delay needs seconds: delay:5")
        if kind == "midstream" and value is None:
            raise ValueError("midstream needs the chunks sent before the error: midstream:2")
        count = int(count_text) if count_text else 1
        faults.extend([Fault(kind, value)] * count)
    return faults


class FaultPlan:
    """What the next request gets: scheduled faults first, then random ones at ``rate``.

    Thread-safe; the random draws come from one seeded generator, so a run with the same seed and
    the same number of requests serves the same number of each fault.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: deque[Fault] = deque()
        self._rate = 0.0
        self._random_kinds: list[Fault] = []
        self._random = random.Random(0)

    def schedule(self, faults: Iterable[Fault]) -> None:
        """Append faults to serve, one per request, before any random ones."""
        with self._lock:
            self._queue.extend(faults)

    def set_random(self, rate: float, kinds: Iterable[Fault], seed: int = 0) -> None:
        """After the schedule, serve one of ``kinds`` (uniformly) with probability ``rate``."""
        if not 0.0 <= rate <= 1.0:
            raise ValueError("fault rate must be within [0, 1]")
        chosen = list(kinds)
        if rate > 0 and not chosen:
            raise ValueError("a fault rate needs fault kinds")
        with self._lock:
            self._rate, self._random_kinds, self._random = rate, chosen, random.Random(seed)

    def clear(self) -> None:
        """Forget scheduled and random faults."""
        with self._lock:
            self._queue.clear()
            self._rate, self._random_kinds = 0.0, []

    def pending(self) -> int:
        """Scheduled faults not served yet."""
        with self._lock:
            return len(self._queue)

    def next(self) -> Fault | None:
        """The fault for the request being served, or None for a normal answer."""
        with self._lock:
            if self._queue:
                fault = self._queue.popleft()
                return None if fault.kind == "ok" else fault
            if self._rate > 0 and self._random.random() < self._rate:
                fault = self._random.choice(self._random_kinds)
                return None if fault.kind == "ok" else fault
            return None
