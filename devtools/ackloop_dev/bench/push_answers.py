"""What the push delivery saw answered: pushes by HTTP status, from its ``GET /_stats``.

A non-2xx answer is a Pub/Sub nack: production redelivers it after the retry policy's backoff
(10 s, doubling) and counts it toward the dead-letter policy. In a fault-free run there must be
none: a step that is busy, a follow-up that has to wait for its conversation, a model that asks
to retry later — the engine waits for all of these inside the request (or records them), never by
answering 503 and letting Pub/Sub's redelivery act as its timer. So the count per 1,000 steps is
the benchmark's measure of "nacks are not used as a timer".

The counters are read from the push delivery process (:mod:`ackloop_dev.devstack.push_delivery`),
not from the functions: a push that timed out or found the function unreachable never reached a
function's counters.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

SETTLE_TIMEOUT_S = 10.0
SETTLE_POLL_S = 0.05


def answers(stats: Mapping[str, Any]) -> Counter[str]:
    """Pushes by outcome (``"204"``, ``"503"``, ``"timeout"``, ``"unreachable"``, …), summed
    over every subscription of one ``GET /_stats`` reading."""
    total: Counter[str] = Counter()
    for sub in (stats.get("subscriptions") or {}).values():
        total.update({str(k): int(v) for k, v in (sub.get("answers") or {}).items()})
    return total


def in_flight(stats: Mapping[str, Any]) -> int:
    """Pushes under way plus messages held and not yet answered, over every subscription."""
    subs = (stats.get("subscriptions") or {}).values()
    return sum(int(s.get("in_flight", 0)) + int(s.get("held", 0)) for s in subs)


def is_2xx(outcome: str) -> bool:
    return outcome.startswith("2") and len(outcome) == 3


def settled(read: Callable[[], Mapping[str, Any]],
            timeout_s: float = SETTLE_TIMEOUT_S) -> Mapping[str, Any]:
    """A reading taken once nothing is being pushed or held (the answer of a run's last step can
    reach the client before the push delivery has recorded that step's HTTP answer), or the last
    reading after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    stats = read()
    while in_flight(stats) and time.monotonic() < deadline:
        time.sleep(SETTLE_POLL_S)
        stats = read()
    return stats


def summary(by_status: Mapping[str, int], steps: int) -> dict[str, Any]:
    """Pushes, non-2xx answers and non-2xx answers per 1,000 steps for one span of time."""
    pushes = sum(by_status.values())
    non_2xx = sum(n for k, n in by_status.items() if not is_2xx(k))
    return {
        "by_status": dict(sorted((k, n) for k, n in by_status.items() if n)),
        "pushes": pushes,
        "non_2xx": non_2xx,
        "steps": steps,
        "non_2xx_per_1000_steps": round(1000 * non_2xx / steps, 2) if steps else None,
    }


def between(before: Mapping[str, Any], after: Mapping[str, Any], steps: int) -> dict[str, Any]:
    """:func:`summary` of the pushes answered between two readings."""
    delta = answers(after)
    delta.subtract(answers(before))
    return summary(+delta, steps)


def combined(phases: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """:func:`summary` of several phases together."""
    total: Counter[str] = Counter()
    steps = 0
    for phase in phases:
        total.update(phase["by_status"])
        steps += int(phase["steps"])
    return summary(total, steps)
