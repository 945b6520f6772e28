"""Submitting runs and waiting for them: the client side of a chaos run."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from ackloop.bus.pubsub import PubSubPublisher
from ackloop.chaos.workload import Template, question
from ackloop.keys import run_id_for_request
from ackloop.records import RunRecord
from ackloop.store import AgentStore
from ackloop.wire import QueryMessage


@dataclass
class Submitted:
    """One run asked for."""

    ref: str
    template: Template
    run_id: str
    submitted_at: float
    finished_at: float | None = None
    status: str = "running"


async def submit(publisher: PubSubPublisher, topic: str, template: Template, ref: str,
                 tag: str) -> Submitted:
    """Publish the query of run ``ref``."""
    request_id = f"{tag}-{ref}"
    query = QueryMessage(request_id=request_id, text=question(template, ref))
    await publisher.publish(topic, query.model_dump_json().encode())
    return Submitted(ref, template, run_id_for_request(request_id), time.time())


async def poll(store: AgentStore, pending: list[Submitted]) -> list[Submitted]:
    """Refresh ``pending``; returns those that finished."""
    if not pending:
        return []
    snaps = await store.db.get_all([store.run_path(s.run_id) for s in pending])
    done = []
    for item, snap in zip(pending, snaps, strict=True):
        if snap is None:
            continue
        run = RunRecord.model_validate(snap.data)
        if run.status.terminal:
            item.status, item.finished_at = run.status.value, run.finished_at or time.time()
            done.append(item)
    return done


async def wait_all(store: AgentStore, runs: list[Submitted], timeout_s: float) -> list[Submitted]:
    """Wait until every run finished or ``timeout_s`` passed; returns the unfinished ones."""
    pending = list(runs)
    deadline = time.monotonic() + timeout_s
    while pending and time.monotonic() < deadline:
        done = await poll(store, pending)
        pending = [p for p in pending if p not in done]
        if pending:
            await asyncio.sleep(0.2)
    return pending
