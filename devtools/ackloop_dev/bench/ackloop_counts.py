"""What the function processes counted themselves: Firestore requests and documents, Pub/Sub
publishes. Read from each function's ``GET /`` before and after a phase; the difference divided
by the steps the phase ran gives the figures per step. (Pushes by answer are the push
delivery's count, :mod:`ackloop_dev.bench.push_answers`: it is what pushed them.)

A Firestore *request* here is one round trip to the database: a (batch) get, a create, a
commit, a query, or a transactional get, plus two per transaction (its begin and its commit,
which the adapter counts as one transaction).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

FIRESTORE_FIELDS = ("round_trips", "docs_read", "docs_written", "transactions", "bytes_read")


def flatten(snapshot: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """Per function: the numeric counters of one ``GET /`` reading."""
    flat: dict[str, dict[str, float]] = {}
    for function, body in snapshot.items():
        firestore = body.get("firestore") or {}
        row = {f: float(firestore.get(f, 0) or 0) for f in FIRESTORE_FIELDS}
        row["published"] = float(body.get("published") or 0)
        flat[function] = row
    return flat


def difference(
    before: Mapping[str, Mapping[str, Any]], after: Mapping[str, Mapping[str, Any]]
) -> dict[str, dict[str, float]]:
    """Counters accumulated between two readings, per function and ``total``."""
    b, a = flatten(before), flatten(after)
    delta = {fn: {k: a[fn][k] - b.get(fn, {}).get(k, 0.0) for k in a[fn]} for fn in a}
    keys = next(iter(delta.values())).keys() if delta else ()
    delta["total"] = {k: sum(row[k] for row in delta.values()) for k in keys}
    for row in delta.values():
        row["requests"] = row["round_trips"] + 2 * row["transactions"]
    return delta


def per_unit(delta: Mapping[str, float], units: float, digits: int = 3) -> dict[str, float]:
    """Each counter divided by ``units`` (steps or runs)."""
    if units <= 0:
        return {k: 0.0 for k in delta}
    return {k: round(v / units, digits) for k, v in delta.items()}
