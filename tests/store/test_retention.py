"""Retention: every document the store writes carries the ``expire_at`` timestamp that
Firestore's TTL policies delete by, as configured, on memory and on the Firestore emulator.

A run's documents expire ``retention`` after it ended (its steps, written before the end, carry
a horizon from their claim that outlives that end); a conversation and its transcript stay while
it is used; poison and dead letters expire ``retention`` after they were recorded; retention 0
writes no ``expire_at`` at all.
"""

from __future__ import annotations

from datetime import datetime

import pytest

from ackloop.config.settings import Settings
from ackloop.docdb.base import DocumentDB
from ackloop.domain.keys import StepKey, run_id_for_request
from ackloop.domain.records import RunLimits, RunRecord, RunStatus, StopReason
from ackloop.domain.wire import QueryMessage, Usage
from ackloop.model.scripted import ScriptedModel
from ackloop.model.turns import calls_turn, text_turn
from ackloop.store import CHUNK_BYTES, DAY_SECONDS, EXPIRE_AT, AgentStore, Retention, RunEnd
from tests.engine.fakes import CountingToolbox, make_loop
from tests.support.commits import complete

DAYS = 30
CEILING = 3600.0
RETENTION = Retention(DAYS * DAY_SECONDS, CEILING)
T0 = 1_700_000_000.0


@pytest.fixture
def kept(db: DocumentDB, prefix: str) -> AgentStore:
    return AgentStore(db, prefix, RETENTION)


async def expiry(store: AgentStore, path: str) -> float | None:
    """The document's expire_at as seconds, checking it is stored as a timestamp."""
    (snap,) = await store.db.get_all([path])
    assert snap is not None, f"{path} is missing"
    value = snap.data.get("expire_at")
    if value is None:
        return None
    # A real timestamp (Firestore gives back a datetime only for a timestampValue): a TTL
    # policy ignores a field of any other type.
    assert isinstance(value, datetime) and value.tzinfo is not None, repr(value)
    return value.timestamp()


def after(now: float) -> float:
    return now + DAYS * DAY_SECONDS


def live(now: float) -> float:
    return after(now) + CEILING + DAY_SECONDS


def run_record(run_id: str, conversation: str | None = None, at: float = T0) -> RunRecord:
    return RunRecord(
        run_id=run_id, request_id=f"req-{run_id}", request_hash="h",
        conversation_id=conversation or run_id, agent="default", text="hi", model="m",
        created_at=at, limits=RunLimits(max_steps=5, max_seconds=60, max_tool_calls=5),
    )


def ended(status: RunStatus = RunStatus.COMPLETED) -> RunEnd:
    reason = StopReason.ANSWERED if status is RunStatus.COMPLETED else StopReason.FAILED
    return RunEnd(status=status, stop_reason=reason, usage=Usage(model_calls=1), answer="ok")


async def test_a_run_expires_retention_after_its_end_and_its_steps_outlive_that(
    kept: AgentStore,
) -> None:
    run, _ = await kept.create_run(run_record("r"))
    assert await expiry(kept, kept.run_path("r")) is None, "a live run never expires"
    step = await kept.claim_step("r", StepKey.model(0), "model", owner="a", now=T0 + 5,
                                 lease_seconds=10)
    assert await expiry(kept, kept.step_path("r", step.key)) == pytest.approx(live(T0 + 5))
    # A takeover (and so a redelivery after a redrive) moves the step's horizon with it.
    taken = await kept.claim_step("r", StepKey.model(0), "model", owner="b", now=T0 + 30,
                                  lease_seconds=10)
    assert taken.state == "taken_over"
    assert await expiry(kept, kept.step_path("r", step.key)) == pytest.approx(live(T0 + 30))
    await complete(kept, taken, now=T0 + 40, result={})

    end_at = T0 + CEILING  # as late as the deployment lets a run live
    assert await kept.end_run_now("r", ended(), end_at) is not None
    run_expires = await expiry(kept, kept.run_path("r"))
    assert run_expires == pytest.approx(after(end_at))
    step_expires = await expiry(kept, kept.step_path("r", step.key))
    assert step_expires is not None and run_expires is not None
    assert step_expires >= run_expires, "a step written before the end outlives its run"
    conv_expires = await expiry(kept, kept.conversation_path(run.conversation_id))
    assert conv_expires == pytest.approx(live(end_at) + DAY_SECONDS)


async def test_a_conversation_stays_while_runs_queue_and_end_and_moves_on_with_each(
    kept: AgentStore,
) -> None:
    await kept.create_run(run_record("r1", "c", at=T0))
    conv = kept.conversation_path("c")
    assert await expiry(kept, conv) == pytest.approx(live(T0) + DAY_SECONDS)
    queued, _ = await kept.create_run(run_record("r2", "c", at=T0 + 10))
    assert queued.status is RunStatus.QUEUED
    assert await expiry(kept, kept.run_path("r2")) is None
    assert await expiry(kept, conv) == pytest.approx(live(T0 + 10) + DAY_SECONDS)
    # The end of r1 starts r2 in the same commit: r1 expires, r2 (now running) does not.
    later = T0 + 5 * DAY_SECONDS
    await kept.end_run_now("r1", ended(), later)
    assert await expiry(kept, kept.run_path("r1")) == pytest.approx(after(later))
    started = await kept.get_run("r2")
    assert started is not None and started.status is RunStatus.RUNNING
    assert await expiry(kept, kept.run_path("r2")) is None
    assert await expiry(kept, conv) == pytest.approx(live(later) + DAY_SECONDS)


async def test_transcript_chunks_expire_with_their_conversation_not_while_it_is_used(
    kept: AgentStore,
) -> None:
    chunk0, chunk1 = kept.chunk_path("c", 0), kept.chunk_path("c", 1)
    await kept.db.commit(kept._append_writes(await kept.load_transcript("c"), [{"a": 1}], "r/0",
                                            now=T0))
    assert await expiry(kept, chunk0) == pytest.approx(live(T0))
    # A chunk that fills up: the next append starts chunk 1, fenced on chunk 0 (written
    # unchanged); chunk 0, written less than a day ago, keeps its expiry.
    big = {"text": "x" * CHUNK_BYTES}
    writes = kept._append_writes(await kept.load_transcript("c"), [big], "r/1", now=T0 + 60)
    assert [w.path for w in writes] == [chunk0, chunk1]
    assert writes[0].if_version is not None and EXPIRE_AT not in writes[0].data
    await kept.db.commit(writes)
    assert await expiry(kept, chunk0) == pytest.approx(live(T0))
    assert await expiry(kept, chunk1) == pytest.approx(live(T0 + 60))
    # Used again 20 days later (a new run of the conversation): the chunk it writes (a new
    # one, chunk 1 being full) and every older chunk move to the new horizon, in one commit.
    used = T0 + 20 * DAY_SECONDS
    transcript = await kept.load_transcript("c")
    await kept.db.commit(kept._append_writes(transcript, [{"b": 2}], "r2/0", now=used))
    for index in (0, 1, 2):
        assert await expiry(kept, kept.chunk_path("c", index)) == pytest.approx(live(used))
    loaded = await kept.load_transcript("c")
    assert [c.index for c in loaded.chunks] == [0, 1, 2] and loaded.contents[-1] == {"b": 2}
    # And an append to a chunk that is not full rewrites it with the new horizon as well.
    again = used + 2 * DAY_SECONDS
    await kept.db.commit(kept._append_writes(loaded, [{"c": 3}], "r3/0", now=again))
    for index in (0, 1, 2):
        assert await expiry(kept, kept.chunk_path("c", index)) == pytest.approx(live(again))
    assert len((await kept.load_transcript("c")).chunks) == 3


async def test_a_conversation_record_outlives_its_transcript(kept: AgentStore) -> None:
    """The record that says whose conversation it is goes last, so no transcript is ever left
    without its owner's record (TTL deletes within about a day, in no given order)."""
    run, _ = await kept.create_run(run_record("r", "c", at=T0))
    transcript = await kept.load_transcript("c")
    await kept.db.commit(kept._append_writes(transcript, [{"a": 1}], "r/0", now=T0 + 100))
    await kept.end_run_now("r", ended(), T0 + 120)
    conv_expires = await expiry(kept, kept.conversation_path(run.conversation_id))
    chunk_expires = await expiry(kept, kept.chunk_path("c", 0))
    assert conv_expires is not None and chunk_expires is not None
    assert conv_expires - chunk_expires >= DAY_SECONDS


async def test_poison_and_dead_letters_expire_retention_after_they_were_received(
    kept: AgentStore, prefix: str
) -> None:
    await kept.letters.record_poison("m-1", {"message_id": "m-1", "reason": "bad",
                                             "received_at": T0})
    (poison,) = await kept.db.list_all(f"{prefix}poison")
    assert await expiry(kept, poison.path) == pytest.approx(after(T0))
    doc_id = await kept.letters.record_dead_letter("m-2", {"data": "eA==", "received_at": T0 + 7})
    assert await expiry(kept, f"{prefix}dead_letters/{doc_id}") == pytest.approx(after(T0 + 7))


async def test_a_redriven_run_no_longer_expires_until_it_ends_again(kept: AgentStore) -> None:
    await kept.create_run(run_record("r", at=T0))
    key = StepKey.model(0)
    await kept.claim_step("r", key, "model", owner="a", now=T0 + 1, lease_seconds=10)
    await kept.fail_run("r", "dead_lettered: step 0000-model exhausted its attempts", T0 + 60)
    assert await expiry(kept, kept.run_path("r")) == pytest.approx(after(T0 + 60))
    redrive_at = T0 + 10 * DAY_SECONDS
    assert await kept.letters.reopen_dead_lettered_run("r", str(key), redrive_at) == "reopened"
    assert await expiry(kept, kept.run_path("r")) is None
    assert await expiry(kept, kept.step_path("r", str(key))) == pytest.approx(live(redrive_at))
    assert (await expiry(kept, kept.conversation_path("r"))
            == pytest.approx(live(redrive_at) + DAY_SECONDS))


async def test_without_retention_nothing_expires(store: AgentStore, prefix: str) -> None:
    assert store.retention is None
    await store.create_run(run_record("r", at=T0))
    claim = await store.claim_step("r", StepKey.model(0), "model", owner="a", now=T0,
                                   lease_seconds=10)
    await complete(store, claim, now=T0 + 1, result={})
    await store.db.commit(store._append_writes(await store.load_transcript("r"), [{"a": 1}],
                                              "r/0", now=T0))
    await store.end_run_now("r", ended(), T0 + 2)
    await store.letters.record_poison("m", {"received_at": T0})
    await store.letters.record_dead_letter("d", {"data": "", "received_at": T0})
    paths = [store.run_path("r"), store.step_path("r", claim.key), store.conversation_path("r"),
             store.chunk_path("r", 0), f"{prefix}poison/m", f"{prefix}dead_letters/d"]
    assert [await expiry(store, p) for p in paths] == [None] * len(paths)


async def test_every_document_of_a_run_through_the_engine_expires(db: DocumentDB,
                                                                   prefix: str) -> None:
    """A whole run (a tool call, then the answer) with the shipped settings: the run, each of
    its steps and its transcript carry expire_at, from the engine's clock, and so does its
    conversation's document once a follow-up has created it."""
    settings = Settings(lease_seconds=10.0)
    retention = Retention.from_settings(settings)
    assert retention == Retention(30 * DAY_SECONDS, settings.max_seconds_ceiling)
    loop = make_loop(ScriptedModel.from_turns([calls_turn([("lookup", {"q": "x"})]),
                                               text_turn("done"), text_turn("again")]),
                     CountingToolbox({"lookup": "found"}), settings=settings)
    loop.deps.store = store = AgentStore(db, prefix, retention)
    now = loop.deps.clock.now()
    await loop.submit(QueryMessage(request_id=f"{prefix}q", text="go"))
    await loop.run_until_idle()

    run = await store.get_run(run_id_for_request(f"{prefix}q"))
    assert run is not None and run.status is RunStatus.COMPLETED and run.finished_at
    assert await expiry(store, store.run_path(run.run_id)) == pytest.approx(
        after(run.finished_at))
    steps = await db.list_all(store.steps_collection(run.run_id))
    chunks = await db.list_all(store.transcript_collection(run.conversation_id))
    assert len(steps) == 3 and chunks
    # Each written at the engine's clock (not the host's): between the query and the end.
    for snap in [*steps, *chunks]:
        expires = await expiry(store, snap.path)
        assert expires is not None and live(now) - 1 <= expires <= live(run.finished_at) + 1, (
            snap.path)
    # The conversation it started has no document of its own: the run stands for it.
    (conversation,) = await db.get_all([store.conversation_path(run.conversation_id)])
    assert conversation is None

    # A follow-up gives the conversation its document, which expires a day after its chunks.
    await loop.submit(QueryMessage(request_id=f"{prefix}q2", text="and then",
                                   conversation_id=run.conversation_id))
    await loop.run_until_idle()
    second = await store.get_run(run_id_for_request(f"{prefix}q2"))
    assert second is not None and second.status is RunStatus.COMPLETED and second.finished_at
    assert await expiry(store, store.conversation_path(run.conversation_id)) == pytest.approx(
        live(second.finished_at) + DAY_SECONDS)


def test_the_retention_setting() -> None:
    assert Settings().retention_days == 30
    assert Retention.from_settings(Settings(retention_days=0)) is None
    shipped = Retention.from_settings(Settings(retention_days=7, max_seconds_ceiling=600))
    assert shipped == Retention(7 * DAY_SECONDS, 600)


def test_the_retention_setting_comes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ACKLOOP_RETENTION_DAYS", "0")
    assert Settings().retention_days == 0
    monkeypatch.setenv("ACKLOOP_RETENTION_DAYS", "-1")
    with pytest.raises(ValueError):
        Settings()
