"""Re-driving dead-lettered messages once their cause is fixed (``ackloop runs redrive``).

The dead-letter function kept each message in ``dead_letters/{message_id}`` and failed its run.
Re-driving one:

1. reopens the run, in a transaction, only if it failed by dead-lettering (see
   :meth:`~ackloop.store.Letters.reopen_dead_lettered_run`), and gives the step a fresh
   attempt budget;
2. re-publishes the recorded message, unchanged, to the topic it came from;
3. marks the dead letter ``redriven_at``.

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
from ackloop.clock import Clock
from ackloop.errors import ConversationBusy
from ackloop.settings import Settings
from ackloop.store import DEAD_LETTER_PAGE, AgentStore

log = logging.getLogger(__name__)

Outcome = Literal["redriven", "run_finished", "run_missing", "conversation_busy",
                  "unknown_origin", "dry_run"]


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
    raw = record.get("attributes")
    attributes = {str(k): str(v) for k, v in raw.items()} if isinstance(raw, dict) else {}
    data = base64.b64decode(str(record.get("data") or ""))
    await publisher.publish(topic, data, attributes)
    await store.letters.mark_redriven(message_id, clock.now(), "redriven")
    log.info("re-drove %s (run %s, %s) to %s", message_id, run, step, topic)
    return result("redriven")
