"""Re-driving dead-lettered messages once their cause is fixed (``ackloop runs redrive``).

The dead-letter function kept each message in ``dead_letters/{message_id}`` and failed its run.
Re-driving one:

1. reopens the run, in a transaction, only if it failed by dead-lettering (see
   :meth:`~ackloop.store.Letters.reopen_dead_lettered_run`), and gives the step a fresh
   attempt budget;
2. re-publishes the recorded message to the topic it came from, as it was, with the attribute
   ``redriven`` (a step it finds completed sends what it committed again: what was sent then
   met a failed run);
3. marks the dead letter ``redriven_at``.

What a waiting call waits for, dead-lettered (a child run's end, a named event published on
the queries topic), is re-published the same way (its handler reads the child, or keeps the event,
and resolves the waiting call). A
child whose caller has ended or has taken its end already is not run again
(``parent_resolved``); a parent reopened has the ends of its children that ended meanwhile
sent again.

Nothing here can make a step run twice: the step's claim (its lease and fence) is what decides
who executes it, exactly as for any redelivery. A crash between 2 and 3 only means the message
is published again by the next ``redrive``, which the claim absorbs too.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from ackloop.bus.base import Publisher
from ackloop.config.settings import Settings
from ackloop.domain.clock import Clock
from ackloop.domain.errors import ConversationBusy
from ackloop.domain.wire import ChildEndedMessage
from ackloop.engine import children
from ackloop.engine.dead_letter import CHILD_ENDED, EVENT, WAITED_FOR
from ackloop.engine.outbox_sending import REDRIVEN, encode
from ackloop.store import DEAD_LETTER_PAGE, AgentStore

log = logging.getLogger(__name__)

Outcome = Literal["redriven", "run_finished", "run_missing", "conversation_busy",
                  "unknown_origin", "parent_resolved", "dry_run"]


@dataclass(frozen=True)
class Redriven:
    """What happened to one dead letter."""

    message_id: str
    run_id: str | None
    step: str | None
    origin: str | None
    outcome: Outcome
    cause: str = ""


def origin_topic(settings: Settings, origin: str | None) -> str | None:
    """The real topic a dead letter of kind ``origin`` came from."""
    return {
        "queries": settings.queries_topic,
        "model_steps": settings.model_steps_topic,
        "tool_steps": settings.tool_steps_topic,
        CHILD_ENDED: settings.queries_topic,
        EVENT: settings.queries_topic,
    }.get(origin or "")


async def pending_dead_letters(
    store: AgentStore, *, run_id: str | None = None, message_ids: Sequence[str] = (),
    page_size: int = DEAD_LETTER_PAGE,
) -> list[dict[str, object]]:
    """Dead letters not yet re-driven, oldest first, optionally for one run or some ids. Every
    dead letter is read, a page at a time (:meth:`~ackloop.store.Letters.list_dead_letters`)."""
    found = []
    for snap in await store.letters.list_dead_letters(page_size):
        record = {"message_id": snap.id, **snap.data}
        if record.get("redriven_at") is not None:
            continue
        if run_id and record.get("run_id") != run_id:
            continue
        if message_ids and snap.id not in message_ids:
            continue
        found.append(record)
    return sorted(found, key=lambda r: float(str(r.get("received_at") or 0.0)))


async def redrive(
    store: AgentStore,
    publisher: Publisher,
    settings: Settings,
    clock: Clock,
    *,
    run_id: str | None = None,
    message_ids: Sequence[str] = (),
    dry_run: bool = False,
) -> list[Redriven]:
    """Re-drive every pending dead letter (or those selected); see the module docstring."""
    results = []
    for record in await pending_dead_letters(store, run_id=run_id, message_ids=message_ids):
        results.append(await _redrive_one(store, publisher, settings, clock, record, dry_run))
    return results


async def _redrive_one(
    store: AgentStore,
    publisher: Publisher,
    settings: Settings,
    clock: Clock,
    record: dict[str, object],
    dry_run: bool,
) -> Redriven:
    message_id = str(record["message_id"])
    run = str(record["run_id"]) if record.get("run_id") else None
    step = str(record["step"]) if record.get("step") else None
    origin = str(record["origin"]) if record.get("origin") else None
    topic = origin_topic(settings, origin)

    def result(outcome: Outcome) -> Redriven:
        return Redriven(message_id, run, step, origin, outcome, str(record.get("cause") or ""))

    if topic is None or run is None:
        return result("unknown_origin")  # not one of ours (poison on the dead-letter topic)
    if dry_run:
        return result("dry_run")
    if origin in WAITED_FOR:
        # What a waiting call waits for (a child's end, a named event): its handler reads the
        # child or keeps the event and resolves the call, or says why not.
        await _publish(store, publisher, topic, clock, record)
        return result("redriven")
    found = await store.runs.get_run(run)
    if found is not None and (why := await children.caller_moved_on(store, found)):
        # A child whose caller has ended, or whose call has already taken its end: running
        # it again would spend for nobody (its end would be refused).
        log.warning("not re-driving %s: %s", message_id, why)
        await store.letters.mark_redriven(message_id, clock.now(), "parent_resolved")
        return result("parent_resolved")
    try:
        state = await store.letters.reopen_dead_lettered_run(run, step, clock.now())
    except ConversationBusy as exc:
        log.warning("not re-driving %s: %s", message_id, exc)
        return result("conversation_busy")
    if state == "missing" and origin == "queries":
        state = "reopened"  # the query never made its run: re-publishing it starts the run
    if state in ("finished", "missing"):
        outcome: Outcome = "run_finished" if state == "finished" else "run_missing"
        await store.letters.mark_redriven(message_id, clock.now(), outcome)
        return result(outcome)
    await _publish(store, publisher, topic, clock, record)
    if state == "reopened" and found is not None:
        # Its children that ended while it was failed had their ends refused: send them again.
        steps = await store.steps.list_steps(run)
        for child_id in await children.ended_children(store, found, steps):
            notice = ChildEndedMessage(type="child_ended", run_id=child_id)
            await publisher.publish(settings.queries_topic,
                                    encode(notice.model_dump(mode="json")), {"run_id": child_id})
    return result("redriven")


async def _publish(store: AgentStore, publisher: Publisher, topic: str, clock: Clock,
                   record: dict[str, object]) -> None:
    """Re-publish a dead letter's message, its data and attributes as they were plus
    ``redriven`` (:func:`ackloop.engine.outbox_sending.sends_again`), and mark it re-driven."""
    raw = record.get("attributes")
    attributes = {str(k): str(v) for k, v in raw.items()} if isinstance(raw, dict) else {}
    attributes[REDRIVEN] = "1"
    data = base64.b64decode(str(record.get("data") or ""))
    await publisher.publish(topic, data, attributes)
    await store.letters.mark_redriven(str(record["message_id"]), clock.now(), "redriven")
    log.info("re-drove %s (run %s, %s) to %s", record["message_id"], record.get("run_id"),
             record.get("step"), topic)
