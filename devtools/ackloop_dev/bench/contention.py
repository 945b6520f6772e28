"""The Firestore emulator's lock floor, measured: why no ackloop step writes a shared document.

The emulator (like Firestore Standard edition) locks pessimistically: when transactions touch
the same document, the losers wait for its lock timeout (about 2 s), abort and retry. This
probe runs N concurrent read-modify-write transactions on ONE document, then N on N different
documents, and reports both wall times. ackloop's design keeps every step on documents of its
own (the step document, the run's transcript chunk written by the single step that holds the
run's current model step), so the benchmark's workload is never in the first case.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from ackloop.docdb.base import Transaction, Write
from ackloop.docdb.firestore import FirestoreDocumentDB


async def _increments(db: FirestoreDocumentDB, paths: list[str]) -> tuple[float, int]:
    """Run one increment transaction per path, all at once; (wall seconds, failures)."""

    async def one(path: str) -> bool:
        async def body(txn: Transaction) -> None:
            snap = await txn.get(path)
            value = int(snap.data.get("n", 0)) if snap else 0
            txn.write(Write("set", path, {"n": value + 1}))

        try:
            await db.transact(body)
        except Exception:  # an aborted transaction is a figure of the probe, not a crash
            return False
        return True

    started = time.perf_counter()
    results = await asyncio.gather(*(one(p) for p in paths))
    return time.perf_counter() - started, sum(1 for ok in results if not ok)


async def measure_lock_floor(project_id: str, transactions: int) -> dict[str, Any]:
    """Wall time of ``transactions`` concurrent increments of one document vs of distinct ones."""
    db = FirestoreDocumentDB.connect(project_id)
    tag = uuid.uuid4().hex[:8]
    hot = [f"bench_contention/{tag}-hot"] * transactions
    spread = [f"bench_contention/{tag}-{i}" for i in range(transactions)]
    spread_s, spread_failed = await _increments(db, spread)
    hot_s, hot_failed = await _increments(db, hot)
    return {
        "transactions": transactions,
        "one_document_s": round(hot_s, 3),
        "one_document_failed": hot_failed,
        "distinct_documents_s": round(spread_s, 3),
        "distinct_documents_failed": spread_failed,
        "slowdown": round(hot_s / spread_s, 1) if spread_s > 0 else 0.0,
    }
