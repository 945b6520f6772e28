"""What a delivery spends, measured while it is served and recorded with the step it commits.

:func:`metered` opens a :class:`Meter` around one delivery (the dispatcher does, and ingest does
for a run created through the API): it notes when the request started, the Pub/Sub bytes of the
message received and, through :func:`ackloop.store.delivery_counters`, every Firestore
read and write the delivery makes (a heartbeat task it starts included; concurrent deliveries of
one process each have their own). :func:`spent` prices it at the moment of a commit: the reads
and writes so far plus the writes of the commit itself, the model's tokens, the bytes received
and those the outbox will publish, and the request time up to the commit. What a delivery does
after its commit (the tool join's range read, the publish itself) is not in the step's cost.

Each delivery pays for itself: a retried or taken-over step records the spend of the delivery
that committed it; an attempt that did not commit (released for a redelivery, or killed) is not
counted anywhere. A run's cost is its ingest's plus the sum of its steps' (:func:`rolled_up`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass

from ackloop.domain.cost import Cost, Spend, price, pubsub_billed_bytes
from ackloop.domain.records import Outgoing, RunRecord, StepRecord
from ackloop.domain.wire import Usage
from ackloop.engine.deps import Deps
from ackloop.engine.outbox_sending import encode
from ackloop.store import DocumentCounters, delivery_counters


@dataclass(frozen=True)
class Meter:
    started_at: float
    received_bytes: int
    documents: DocumentCounters


_meter: ContextVar[Meter | None] = ContextVar("ackloop_meter", default=None)


@contextlib.contextmanager
def metered(deps: Deps, received: bytes | None = None) -> Iterator[Meter]:
    """Measure the delivery served inside (``received``: the Pub/Sub message's data, None for
    an HTTP request). Inside a delivery already measured, that delivery's meter goes on."""
    current = _meter.get()
    if current is not None:
        yield current
        return
    with delivery_counters() as documents:
        meter = Meter(deps.clock.now(),
                      0 if received is None else pubsub_billed_bytes(len(received)), documents)
        token = _meter.set(meter)
        try:
            yield meter
        finally:
            _meter.reset(token)


def spent(
    deps: Deps, *, model: str | None, usage: Usage | None, commit_writes: int,
    outbox: Sequence[Outgoing],
) -> Cost:
    """The cost of the delivery being served, priced as its commit of ``commit_writes``
    documents is made and before ``outbox`` is published."""
    meter = _meter.get() or Meter(deps.clock.now(), 0, DocumentCounters())
    usage = usage or Usage()
    settings = deps.settings
    return price(Spend(
        model=model,
        prompt_tokens=usage.prompt_tokens,
        output_tokens=usage.output_tokens,
        cached_tokens=usage.cached_tokens,
        firestore_reads=meter.documents.docs_read,
        firestore_writes=meter.documents.docs_written + commit_writes,
        pubsub_bytes=meter.received_bytes + sum(
            pubsub_billed_bytes(len(encode(o.data))) for o in outbox),
        request_seconds=round(max(0.0, deps.clock.now() - meter.started_at), 6),
        vcpu=settings.service_vcpu,
        memory_gib=settings.service_memory_gib,
    ))


def rolled_up(run: RunRecord, steps: Sequence[StepRecord]) -> Cost:
    """The run's cost from its ingest and ``steps`` (every step: the run in flight, or a run
    ended outside a step). A step that recorded a wait and has no cost of its own yet counts
    that wait's delivery (``wait_cost``, which its completion would add to its cost): a run
    ended by a dead letter or the sweeper while a call waits has spent it too."""
    return Cost.total([run.ingest_cost,
                       *(s.cost if s.cost is not None else s.wait_cost for s in steps)])


def steps_usage(steps: Sequence[StepRecord]) -> Usage:
    """What the steps recorded, summed: the run's usage before any end recorded it."""
    usage = Usage()
    for step in steps:
        usage = usage.plus(step.usage)
        compacted = (step.result or {}).get("compaction") if step.kind == "model" else None
        if isinstance(compacted, dict) and isinstance(compacted.get("usage"), dict):
            usage = usage.plus(Usage.model_validate(compacted["usage"]))  # its summary's
    return usage
