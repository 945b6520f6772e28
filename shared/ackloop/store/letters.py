"""The letters room: messages acknowledged without effect (poison), dead letters, and what a
redrive of a dead letter writes (``ackloop runs redrive``)."""

from __future__ import annotations

import contextlib
import hashlib
import time
from typing import Literal

from ackloop.docdb.base import AlreadyExists, Snapshot, Transaction, Write
from ackloop.domain.errors import ConversationBusy
from ackloop.domain.jsondict import JsonDict
from ackloop.domain.keys import message_doc_id
from ackloop.domain.records import ConversationRecord, RunRecord, RunStatus, StepStatus
from ackloop.store.base import EXPIRE_AT, LAST_DOCUMENT_ID, StoreBase

# Dead letters read per query when listing them, and an id above every document id.
DEAD_LETTER_PAGE = 500


def _recorded_at(record: JsonDict) -> float:
    """When a poison or dead-letter record was received (its ``received_at``), else now."""
    received = record.get("received_at")
    if isinstance(received, (int, float)) and not isinstance(received, bool):
        return float(received)
    return time.time()


class Letters(StoreBase):
    """``poison/{message_id}`` and ``dead_letters/{message_id}``, and the reopening of a run that
    failed by dead-lettering."""

    async def record_poison(self, message_id: str, record: JsonDict) -> None:
        """Keep a rejected message under its (safe) id; the first record of an id stays."""
        # The same poison message delivered again (AlreadyExists): one record is enough.
        with contextlib.suppress(AlreadyExists):
            await self.db.create(f"{self._poison}/{message_doc_id(message_id)}",
                                 record | self._expiry(_recorded_at(record)))

    async def record_dead_letter(self, message_id: str, record: JsonDict) -> str:
        """Keep a dead letter, create-only; returns its document id.

        The dead letter's own redelivery (same id, same data) finds its record and keeps it. A
        different message under an id already recorded (ids come from the request) is kept
        beside it under an id derived from both, never over it.
        """
        doc_id = message_doc_id(message_id)
        expiry = self._expiry(_recorded_at(record))
        for _ in range(2):
            path = f"{self._dead_letters}/{doc_id}"
            try:
                await self.db.create(path, record | {"message_id": doc_id} | expiry)
                return doc_id
            except AlreadyExists:
                (snap,) = await self.db.get_all([path])
                if snap is not None and snap.data.get("data") == record.get("data"):
                    return doc_id
            digest = hashlib.sha256(str(record.get("data")).encode()).hexdigest()
            doc_id = message_doc_id(f"{doc_id}\n{digest}")
        return doc_id  # the derived id holds yet another message: that one stays

    async def get_poison(self, message_id: str) -> JsonDict | None:
        """The rejection recorded for a message (a query's reason, say), or None."""
        (snap,) = await self.db.get_all([f"{self._poison}/{message_doc_id(message_id)}"])
        return snap.data if snap else None

    async def list_poison(self) -> list[JsonDict]:
        return [s.data for s in await self.db.list_all(self._poison)]

    async def get_dead_letter(self, message_id: str) -> JsonDict | None:
        """The dead letter recorded for a message (re-driven or not), or None."""
        (snap,) = await self.db.get_all([f"{self._dead_letters}/{message_doc_id(message_id)}"])
        return {"message_id": snap.id, **snap.data} if snap else None

    async def list_dead_letters(self, page_size: int = DEAD_LETTER_PAGE) -> list[Snapshot]:
        """Every dead letter, by id, read ``page_size`` at a time from a cursor on the id (the
        last one read): however many there are, none is left out."""
        page = await self.db.list_all(self._dead_letters, limit=page_size)
        found = list(page)
        while len(page) == page_size:
            # The range starts at the cursor, inclusive: one more than a page, less the cursor.
            cursor = found[-1].id
            read = await self.db.list_range(self._dead_letters, cursor, LAST_DOCUMENT_ID,
                                            limit=page_size + 1)
            page = [snap for snap in read if snap.id != cursor][:page_size]
            found.extend(page)
        return found

    async def reopen_dead_lettered_run(
        self, run_id: str, step_key: str | None, now: float
    ) -> Literal["reopened", "running", "finished", "missing"]:
        """Make a run that failed by dead-lettering runnable again, before its message is re-sent.

        In one transaction: a run ``failed`` with a ``dead_lettered:`` error goes back to
        ``running`` and becomes its conversation's active run again; the dead-lettered step (if it
        is not completed) gets a fresh attempt budget. A run still running is left as it is (its
        step is still reset); a run that ended any other way is not touched ("finished"). Raises
        :class:`ConversationBusy` when another run of the conversation started meanwhile.
        """

        async def body(txn: Transaction) -> Literal["reopened", "running", "finished", "missing"]:
            snap = await txn.get(self.run_path(run_id))
            if snap is None:
                return "missing"
            run = RunRecord.model_validate(snap.data)
            step = await txn.get(self.step_path(run_id, step_key)) if step_key else None
            dead_lettered = (run.status is RunStatus.FAILED
                             and (run.error or "").startswith("dead_lettered:"))
            if run.status is not RunStatus.RUNNING and not dead_lettered:
                return "finished"
            outcome: Literal["reopened", "running"] = "running"
            if dead_lettered:
                conv_path = self.conversation_path(run.conversation_id)
                conv = await txn.get(conv_path)
                active = conv.data.get("active_run_id") if conv else None
                if active not in (None, run_id):
                    raise ConversationBusy(
                        f"conversation {run.conversation_id!r} moved on to run {active}"
                    )
                # A redrive is an operator's decision to try again: the run's time budget
                # starts over, or a run failed late would stop again at its first claim; so
                # does the time it waited for people and events, which that budget excludes
                # (kept, it would add every second waited before the redrive to the budget).
                # Running again: it no longer expires until it ends again.
                txn.write(Write("update", snap.path, {
                    "status": RunStatus.RUNNING.value, "stop_reason": None, "error": None,
                    "finished_at": None, "started_at": now, "progress_at": now,
                    "waited_seconds": 0.0, "wait_ended_at": now, "children_ending": [],
                } | ({"conversation_document": True} if conv is not None else {})
                  | ({EXPIRE_AT: None} if self.retention else {})))
                # A conversation that has no document goes on without one (the run stands
                # for it); one that has a document names the run active again, and a run that
                # started it is told so (its end reads and updates it).
                if conv is not None or run.conversation_id != run_id:
                    stored = conv.data if conv else {"conversation_id": run.conversation_id,
                                                     "owner": run.owner}
                    if conv is not None:
                        # The dead letter's end added the run's figures to the conversation;
                        # its next end adds them again, whole: take them out meanwhile.
                        record = ConversationRecord.model_validate(conv.data)
                        stored = stored | {
                            "usage": record.usage.minus(run.usage).model_dump(mode="json"),
                            "cost": (record.cost.minus(run.cost).model_dump(mode="json")
                                     if record.cost is not None and run.cost is not None
                                     else stored.get("cost"))}
                    txn.write(Write("set", conv_path, {
                        **stored, "active_run_id": run_id, "updated_at": now,
                    } | self._conversation_expiry(now)))
                outcome = "reopened"
            if step is not None and step.data.get("status") != StepStatus.COMPLETED.value:
                txn.write(Write("update", step.path, {"attempts": 0, "not_before": 0.0}
                                | self._live_expiry(now)))
            return outcome

        return await self.db.transact(body)

    async def mark_redriven(self, message_id: str, now: float, outcome: str) -> None:
        """Record that a dead letter was re-driven (or why it was not)."""
        path = f"{self._dead_letters}/{message_doc_id(message_id)}"
        await self.db.commit([Write("update", path,
                                    {"redriven_at": now, "redrive_outcome": outcome})])
