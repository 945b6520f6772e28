"""Step leases, fencing, runs and the transcript, on memory and on the Firestore emulator."""

from __future__ import annotations

import pytest

from ackloop.docdb.base import PreconditionFailed
from ackloop.domain.context_window import summary_content
from ackloop.domain.errors import IdempotencyMismatch, LeaseLost, StepBusy, StepConflict
from ackloop.domain.keys import StepKey
from ackloop.domain.records import RunLimits, RunRecord, RunStatus
from ackloop.store import CHUNK_BYTES, AgentStore
from ackloop.store.transcript import append_writes
from tests.support.commits import complete

KEY = StepKey.model(0)


def run_record(run_id: str = "run-1", conversation: str = "conv-1", h: str = "h1") -> RunRecord:
    return RunRecord(
        run_id=run_id, request_id=f"req-{run_id}", request_hash=h, conversation_id=conversation,
        agent="default", text="hi", model="m", created_at=100.0,
        limits=RunLimits(max_steps=5, max_seconds=60, max_tool_calls=5),
    )


async def test_first_claim_is_new_and_a_live_lease_is_busy(store: AgentStore) -> None:
    claim = await store.steps.claim_step("r", KEY, "model", owner="a", now=100, lease_seconds=10)
    assert claim.state == "new" and claim.step.fence == 1
    with pytest.raises(StepBusy) as busy:
        await store.steps.claim_step("r", KEY, "model", owner="b", now=105, lease_seconds=10)
    assert busy.value.retry_after == pytest.approx(5)


async def test_expired_lease_is_taken_over_and_the_old_holder_is_fenced(store: AgentStore) -> None:
    old = await store.steps.claim_step("r", KEY, "model", owner="a", now=100, lease_seconds=10)
    new = await store.steps.claim_step("r", KEY, "model", owner="b", now=111, lease_seconds=10)
    assert new.state == "taken_over" and new.step.fence == 2 and new.step.attempts == 2
    with pytest.raises(LeaseLost):
        await complete(store, old, now=112, result={"by": "a"})
    with pytest.raises(LeaseLost):
        await store.steps.renew_lease(old, now=112, lease_seconds=10)
    await complete(store, new, now=113, result={"by": "b"})
    done = await store.steps.claim_step("r", KEY, "model", owner="c", now=114, lease_seconds=10)
    assert done.state == "completed" and done.step.result == {"by": "b"}


async def test_heartbeat_keeps_the_lease_and_the_commit_uses_the_new_version(
    store: AgentStore,
) -> None:
    claim = await store.steps.claim_step("r", KEY, "model", owner="a", now=100, lease_seconds=10)
    renewed = await store.steps.renew_lease(claim, now=108, lease_seconds=10)
    with pytest.raises(StepBusy):
        await store.steps.claim_step("r", KEY, "model", owner="b", now=115, lease_seconds=10)
    await complete(store, renewed, now=116, result={})


async def test_a_different_step_at_the_same_key_is_a_conflict(store: AgentStore) -> None:
    key = StepKey.tool(0, 0)
    await store.steps.claim_step("r", key, "get_ip_address", owner="a", now=100, lease_seconds=10)
    with pytest.raises(StepConflict):
        await store.steps.claim_step("r", key, "get_weather_alerts", owner="b", now=200,
                                     lease_seconds=10)


async def test_release_lets_the_next_delivery_in_after_not_before(store: AgentStore) -> None:
    claim = await store.steps.claim_step("r", KEY, "model", owner="a", now=100, lease_seconds=10)
    await store.steps.release_step(claim, error="429", not_before=103)
    with pytest.raises(StepBusy):
        await store.steps.claim_step("r", KEY, "model", owner="b", now=101, lease_seconds=10)
    again = await store.steps.claim_step("r", KEY, "model", owner="b", now=104, lease_seconds=10)
    assert again.state == "taken_over" and again.step.last_error == "429"


async def test_create_run_is_idempotent_and_queues_behind_the_active_run(
    store: AgentStore,
) -> None:
    run, created = await store.runs.create_run(run_record())
    assert created and run.status is RunStatus.RUNNING
    again, created_again = await store.runs.create_run(run_record())
    assert not created_again and again.run_id == "run-1"
    with pytest.raises(IdempotencyMismatch):
        await store.runs.create_run(run_record(h="other"))
    second, created = await store.runs.create_run(run_record("run-2"))
    assert created and second.status is RunStatus.QUEUED
    third, _ = await store.runs.create_run(run_record("run-3"))
    assert third.status is RunStatus.QUEUED
    assert await store.runs.fail_run("run-1", "boom", now=101)
    # The end of the active run hands the conversation to the first queued run, in order.
    assert (await store.runs.get_run("run-2")).status is RunStatus.RUNNING  # type: ignore[union-attr]
    assert (await store.runs.get_run("run-3")).status is RunStatus.QUEUED  # type: ignore[union-attr]
    assert [r.run_id for r in await store.runs.list_runs("conv-1")] == ["run-1", "run-2", "run-3"]


async def test_a_stale_transcript_append_cannot_overwrite_a_newer_one(store: AgentStore) -> None:
    """A writer that read the transcript before another appended is refused (H3)."""
    transcript = await store.transcript.load_transcript("c")
    await store.db.commit(append_writes(store, transcript, [{"a": 1}], "r/0"))
    stale = await store.transcript.load_transcript("c")
    await store.db.commit(append_writes(store, stale, [{"b": 2}], "r2/0"))
    with pytest.raises(PreconditionFailed):
        await store.db.commit(append_writes(store, stale, [{"c": 3}], "r/1"))
    assert (await store.transcript.load_transcript("c")).contents == [{"a": 1}, {"b": 2}]


async def test_transcript_appends_roll_over_to_new_chunks(store: AgentStore) -> None:
    big = {"role": "user", "parts": [{"text": "x" * (CHUNK_BYTES // 3)}]}
    tail = None
    for i in range(5):
        transcript = await store.transcript.load_transcript("conv")
        assert transcript.tail == tail
        await store.db.commit(append_writes(store, transcript, [big], f"run/{i:04d}-model"))
        tail = f"run/{i:04d}-model"
    transcript = await store.transcript.load_transcript("conv")
    assert len(transcript.contents) == 5 and len(transcript.chunks) >= 2
    assert all(c.size <= CHUNK_BYTES for c in transcript.chunks)
    assert transcript.tail == "run/0004-model"


async def test_an_append_sends_only_its_own_turn(store: AgentStore) -> None:
    """What an append writes does not grow with the conversation: it adds one entry to the last
    chunk's map of turns, and the history stays in one document until it fills."""
    turn = {"role": "user", "parts": [{"text": "x" * 2000}]}
    sent = []
    for i in range(6):
        transcript = await store.transcript.load_transcript("grow")
        writes = append_writes(store, transcript, [turn], f"run/{i:04d}-model")
        sent.append(sum(len(str(w.data)) + len(str(w.into)) for w in writes))
        await store.db.commit(writes)
    transcript = await store.transcript.load_transcript("grow")
    assert len(transcript.chunks) == 1 and transcript.contents == [turn] * 6
    assert max(sent[1:]) - min(sent[1:]) < 10  # only the size and the tail's digits differ
    assert transcript.tail == "run/0005-model"


async def test_dead_letters_are_listed_past_any_page(store: AgentStore) -> None:
    """More dead letters than one query returns (Firestore's former cap of 1000, and pages of
    7): every one is listed, and the newest are not dropped."""
    from ackloop.docdb.base import Write
    from ackloop.engine.redrive import pending_dead_letters

    count = 1010
    writes = [Write("set", f"{store._dead_letters}/m-{n:05d}",
                    {"run_id": f"run-{n % 3}", "received_at": float(n), "origin": "model_steps"})
              for n in range(count)]
    for start in range(0, count, 500):
        await store.db.commit(writes[start:start + 500])
    listed = [snap.id for snap in await store.letters.list_dead_letters()]
    assert listed == [f"m-{n:05d}" for n in range(count)]
    small_pages = [snap.id for snap in await store.letters.list_dead_letters(page_size=7)]
    assert small_pages == listed
    newest = await pending_dead_letters(store, run_id="run-1", page_size=7)
    assert [r["message_id"] for r in newest][-1] == f"m-{count - 1 - (count - 1 - 1) % 3:05d}"
    assert len(newest) == len(range(1, count, 3))


async def test_recent_runs_newest_first_filtered_and_limited(store: AgentStore) -> None:
    """`ackloop runs list`: newest first; status, agent and conversation filter together."""
    from ackloop.docdb.base import Write

    shapes = [("default", RunStatus.COMPLETED, "c1"), ("other", RunStatus.FAILED, "c1"),
              ("default", RunStatus.FAILED, "c2"), ("default", RunStatus.FAILED, "c1"),
              ("other", RunStatus.RUNNING, "c2")]
    writes = []
    for n, (agent, status, conversation) in enumerate(shapes):
        run = run_record(f"run-{n}", conversation).model_copy(update={
            "agent": agent, "status": status, "created_at": 100.0 + n})
        writes.append(Write("create", store.run_path(run.run_id), run.to_doc()))
    await store.db.commit(writes)

    def ids(runs: list[RunRecord]) -> list[str]:
        return [r.run_id for r in runs]

    assert ids(await store.runs.recent_runs()) == ["run-4", "run-3", "run-2", "run-1", "run-0"]
    assert ids(await store.runs.recent_runs(2)) == ["run-4", "run-3"]
    assert ids(await store.runs.recent_runs(status=RunStatus.FAILED)) == ["run-3", "run-2", "run-1"]
    assert ids(await store.runs.recent_runs(agent="other")) == ["run-4", "run-1"]
    assert ids(await store.runs.recent_runs(conversation_id="c2")) == ["run-4", "run-2"]
    both = await store.runs.recent_runs(status=RunStatus.FAILED, agent="default",
                                        conversation_id="c1")
    assert ids(both) == ["run-3"]
    assert await store.runs.recent_runs(agent="nobody") == []


async def test_a_rejected_message_is_found_by_its_id(store: AgentStore) -> None:
    """What `ackloop ask` polls for: the reason its query was rejected, by message id."""
    assert await store.letters.get_poison("12345") is None
    await store.letters.record_poison("12345", {"reason": "unknown_agent", "received_at": 1.0})
    poison = await store.letters.get_poison("12345")
    assert poison is not None and poison["reason"] == "unknown_agent"


async def test_a_compaction_commit_that_finds_its_chunk_made_returns_none(
        store: AgentStore) -> None:
    """A compaction's chunk is created once: a second commit for the same next chunk, whose
    fence on the last chunk still holds (it read that chunk after the first commit, not the
    chunk made), returns None, so the caller reads the chunk found, and leaves it as made. A
    second commit on the transcript as first read is refused by its fence (StaleRead)."""
    from ackloop.domain.errors import StaleRead
    from ackloop.store import Transcript

    turn = {"role": "user", "parts": [{"text": "hello"}]}
    for i in range(3):
        transcript = await store.transcript.load_transcript("squash")
        await store.db.commit(append_writes(store, transcript, [turn], f"run/{i:04d}-model"))
    read = await store.transcript.load_transcript("squash")
    last = read.chunks[-1].index
    record = {"by": "run/0003-model", "chunk": last + 1}
    made = await store.transcript.commit_compaction(read, "the summary", [turn], record, 100.0,
                                                    opening=summary_content("the summary"))
    assert made is not None and made.chunks[0].summary == "the summary"

    with pytest.raises(StaleRead):
        await store.transcript.commit_compaction(read, "another", [turn], record, 101.0,
                                                 opening=summary_content("another"))
    found = await store.transcript.read_chunk("squash", last)
    assert found is not None
    chunk, version = found
    assert chunk.compacted_into == last + 1
    fenced = Transcript("squash", [*read.chunks[:-1], chunk], version)
    again = await store.transcript.commit_compaction(fenced, "another summary", [turn],
                                                     record | {"at": 101.0}, 101.0,
                                                     opening=summary_content("another summary"))
    assert again is None
    kept = await store.transcript.read_chunk("squash", last + 1)
    assert kept is not None and kept[0].summary == "the summary"
    assert (kept[0].compaction or {}).get("by") == "run/0003-model"
