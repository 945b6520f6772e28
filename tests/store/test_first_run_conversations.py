"""A conversation with no document while its first run is its only run, on memory and on the
Firestore emulator: the first run's creation writes the run alone, and so does its end; a
follow-up creates the document (queued behind the run while it is active, marking it), and the
preconditions on the first run make exactly one of the follow-up and the end go first."""

from __future__ import annotations

import pytest

from ackloop.docdb.base import Write
from ackloop.domain.errors import ConversationNotStarted, PermanentError, StaleRead
from ackloop.domain.keys import StepKey, is_run_id, run_id_for_request
from ackloop.domain.records import ConversationRecord, RunLimits, RunRecord, RunStatus, StopReason
from ackloop.domain.wire import Usage
from ackloop.engine.step_commit import record
from ackloop.store import AgentStore, Basis, Decision, RunEnd
from tests.support.commits import free

T0 = 1_000.0


def run_record(request_id: str, conversation: str | None = None, owner: str = "alice",
               at: float = T0) -> RunRecord:
    run_id = run_id_for_request(request_id, owner)
    return RunRecord(
        run_id=run_id, request_id=request_id, request_hash="h",
        conversation_id=conversation or run_id, agent="default", text="hi", model="m",
        created_at=at, owner=owner,
        limits=RunLimits(max_steps=5, max_seconds=60, max_tool_calls=5))


def answered(model_calls: int = 1) -> RunEnd:
    return RunEnd(status=RunStatus.COMPLETED, stop_reason=StopReason.ANSWERED,
                  usage=Usage(model_calls=model_calls), answer="ok")


async def conversation(store: AgentStore, conversation_id: str) -> ConversationRecord:
    snap = await store.runs.get_conversation_snapshot(conversation_id)
    assert snap is not None
    return ConversationRecord.model_validate(snap.data)


async def end_by_its_step(store: AgentStore, run_id: str, now: float,
                          basis: Basis | None = None) -> None:
    """End ``run_id`` by the commit of a model step (unclaimed), as its last step does, from
    ``basis`` (default: the run read now)."""
    if basis is None:
        read = await store.runs.read_run(run_id)
        assert read is not None
        basis = Basis(read)
    claim = store.steps.unclaimed(run_id, StepKey.model(0), "model", owner="a", now=now)
    committed = await record(store, claim, basis, Decision(result={}, end=answered()),
                                        now=now, price=free)
    assert committed.end is not None


async def test_the_first_run_is_created_alone_and_ends_alone(store: AgentStore) -> None:
    """Neither the run's creation nor its end writes a conversation document: before and after
    the end, the run stands for its conversation."""
    run, created = await store.runs.create_run(run_record("first"))
    assert created and run.new_conversation and is_run_id(run.run_id)
    assert await store.runs.get_conversation_snapshot(run.run_id) is None
    seen = await store.runs.get_conversation(run.run_id)
    assert seen is not None and (seen.active_run_id, seen.owner, seen.run_count) == (
        run.run_id, "alice", 1)
    again, created = await store.runs.create_run(run_record("first"))  # a redelivered query
    assert not created and again.run_id == run.run_id

    await end_by_its_step(store, run.run_id, T0 + 5)

    assert await store.runs.get_conversation_snapshot(run.run_id) is None
    conv = await store.runs.get_conversation(run.run_id)
    assert conv is not None
    assert (conv.active_run_id, conv.queue, conv.run_count, conv.owner) == (
        None, [], 1, "alice")
    assert conv.usage == Usage(model_calls=1) and conv.updated_at == T0 + 5
    ended = await store.runs.get_run(run.run_id)
    assert ended is not None and ended.status is RunStatus.COMPLETED
    assert ended.cost is not None and conv.cost == ended.cost


async def test_a_follow_up_queues_behind_the_running_first_run_and_its_end_hands_over(
    store: AgentStore,
) -> None:
    """The follow-up creates the document and marks the first run in one commit; the first
    run's end, from a read made before that, is refused whole (nothing of it lands); read
    again, the marked run's end reads the conversation and hands it over."""
    first, _ = await store.runs.create_run(run_record("first"))
    before = await store.runs.read_run(first.run_id)
    assert before is not None and not before.record.conversation_document
    follow, created = await store.runs.create_run(run_record("second", first.run_id))
    assert created and follow.status is RunStatus.QUEUED and not follow.new_conversation
    conv = await conversation(store, first.run_id)
    assert (conv.active_run_id, conv.queue, conv.run_count, conv.owner) == (
        first.run_id, [follow.run_id], 2, "alice")
    marked = await store.runs.get_run(first.run_id)
    assert marked is not None and marked.conversation_document

    with pytest.raises(StaleRead):
        await end_by_its_step(store, first.run_id, T0 + 5, Basis(before))
    assert (await store.runs.get_run(first.run_id)).status is RunStatus.RUNNING  # type: ignore[union-attr]
    assert await store.steps.get_steps(first.run_id, [str(StepKey.model(0))]) == [None]

    await end_by_its_step(store, first.run_id, T0 + 5)

    conv = await conversation(store, first.run_id)
    assert (conv.active_run_id, conv.queue, conv.run_count) == (follow.run_id, [], 2)
    assert conv.usage == Usage(model_calls=1)
    started = await store.runs.get_run(follow.run_id)
    assert started is not None and started.status is RunStatus.RUNNING


async def test_a_follow_up_after_the_first_runs_end_is_active_at_once(store: AgentStore) -> None:
    first, _ = await store.runs.create_run(run_record("first"))
    await end_by_its_step(store, first.run_id, T0 + 5)
    follow, _ = await store.runs.create_run(run_record("second", first.run_id, at=T0 + 6))
    assert follow.status is RunStatus.RUNNING
    conv = await conversation(store, first.run_id)
    assert (conv.active_run_id, conv.queue, conv.run_count) == (follow.run_id, [], 2)
    ended = await store.runs.get_run(first.run_id)
    assert ended is not None and not ended.conversation_document  # it had ended: not marked
    assert conv.usage == Usage(model_calls=1) and conv.cost == ended.cost  # the first run's


async def test_the_end_of_a_first_run_outside_a_step_writes_its_fence_and_no_conversation(
    store: AgentStore,
) -> None:
    first, _ = await store.runs.create_run(run_record("first"))
    assert await store.runs.fail_run(first.run_id, "dead_lettered: boom", T0 + 5)
    assert await store.runs.get_conversation_snapshot(first.run_id) is None
    conv = await store.runs.get_conversation(first.run_id)
    assert conv is not None
    assert (conv.active_run_id, conv.queue, conv.run_count, conv.owner) == (
        None, [], 1, "alice")
    transcript = await store.transcript.load_transcript(first.run_id)
    assert [c.fence for c in transcript.chunks] == [f"{first.run_id}@{T0 + 5}"]


async def test_the_end_outside_a_step_starts_the_follow_up_that_created_the_document(
    store: AgentStore,
) -> None:
    first, _ = await store.runs.create_run(run_record("first"))
    follow, _ = await store.runs.create_run(run_record("second", first.run_id))
    assert await store.runs.fail_run(first.run_id, "dead_lettered: boom", T0 + 5)
    started = await store.runs.get_run(follow.run_id)
    assert started is not None and started.status is RunStatus.RUNNING
    conv = await conversation(store, first.run_id)
    assert (conv.active_run_id, conv.queue) == (follow.run_id, [])


async def test_another_callers_first_run_conversation_is_not_found(store: AgentStore) -> None:
    first, _ = await store.runs.create_run(run_record("first"))
    with pytest.raises(PermanentError) as refused:
        await store.runs.create_run(run_record("plant", first.run_id, owner="mallory"))
    assert refused.value.reason == "conversation_not_found"
    assert await store.runs.get_conversation_snapshot(first.run_id) is None  # nothing written
    assert await store.runs.get_run(run_id_for_request("plant", "mallory")) is None


async def test_a_follow_up_before_its_first_run_exists_waits_for_it(store: AgentStore) -> None:
    """A conversation named by a run id whose run does not exist: the follow-up writes nothing
    and is told to come back (its first run's creation reads nothing, so it could not see a
    conversation made before it). Any other id starts a conversation as before."""
    future = run_id_for_request("first", "alice")
    with pytest.raises(ConversationNotStarted):
        await store.runs.create_run(run_record("second", future))
    assert await store.runs.get_conversation(future) is None
    assert await store.runs.get_run(run_id_for_request("second", "alice")) is None

    named, _ = await store.runs.create_run(run_record("chat", "chat-42"))
    assert named.status is RunStatus.RUNNING and not named.new_conversation
    assert (await conversation(store, "chat-42")).active_run_id == named.run_id


async def test_a_redriven_first_run_takes_its_conversation_back_and_its_end_hands_it_on(
    store: AgentStore,
) -> None:
    """A dead-lettered first run left its conversation without a document; re-driven, it is
    active again and the conversation still has none. A follow-up queues behind it (marking
    it), and its end hands the conversation on."""
    first, _ = await store.runs.create_run(run_record("first"))
    assert await store.runs.fail_run(first.run_id, "dead_lettered: step 0000-model: boom", T0 + 5)
    assert await store.letters.reopen_dead_lettered_run(first.run_id, None, T0 + 10) == "reopened"
    assert await store.runs.get_conversation_snapshot(first.run_id) is None
    seen = await store.runs.get_conversation(first.run_id)
    assert seen is not None and seen.active_run_id == first.run_id
    follow, _ = await store.runs.create_run(run_record("second", first.run_id, at=T0 + 11))
    assert follow.status is RunStatus.QUEUED

    await end_by_its_step(store, first.run_id, T0 + 20)

    conv = await conversation(store, first.run_id)
    assert (conv.active_run_id, conv.queue, conv.run_count) == (follow.run_id, [], 2)


async def test_a_redrive_restarts_the_runs_clock_and_the_time_it_waited(
    store: AgentStore,
) -> None:
    """R4: a redrive restarted ``max_seconds`` from the redrive but kept ``waited_seconds``, which
    that budget excludes: the re-driven run got its budget plus every second it ever waited.
    Both start over."""
    first, _ = await store.runs.create_run(run_record("waited"))
    await store.db.commit([Write("update", store.run_path(first.run_id), {
        "waited_seconds": 5_000.0, "wait_ended_at": T0 + 5_000})])
    assert await store.runs.fail_run(first.run_id, "dead_lettered: step 0000-model: boom",
                                     T0 + 6_000)
    reopened = await store.letters.reopen_dead_lettered_run(first.run_id, None, T0 + 7_000)
    assert reopened == "reopened"
    run = await store.runs.get_run(first.run_id)
    assert run is not None and run.status is RunStatus.RUNNING
    assert (run.started_at, run.waited_seconds, run.wait_ended_at) == (T0 + 7_000, 0.0, T0 + 7_000)


@pytest.mark.parametrize("ends_first", ["alone", "with_a_document"])
async def test_a_follow_up_asked_during_a_run_that_starts_after_its_end_starts_at_its_end(
    store: AgentStore, ends_first: str,
) -> None:
    """A follow-up whose query came while the run before it was active (its ``created_at``),
    but that is created once that run has ended (its commit to queue was refused by the end,
    and it read again), starts then: a run of a conversation never starts before the one
    before it ended."""
    first, _ = await store.runs.create_run(run_record("first"))
    if ends_first == "with_a_document":  # a second run the first one's end hands over to
        queued, _ = await store.runs.create_run(run_record("second", first.run_id, at=T0 + 1))
        await end_by_its_step(store, first.run_id, T0 + 5)
        before = queued.run_id
        await end_by_its_step(store, before, T0 + 9)
    else:
        before = first.run_id
        await end_by_its_step(store, before, T0 + 9)
    late, created = await store.runs.create_run(run_record("third", first.run_id, at=T0 + 2))
    assert created and late.status is RunStatus.RUNNING
    ended = await store.runs.get_run(before)
    assert ended is not None and ended.finished_at == T0 + 9
    assert late.started_at == T0 + 9 and late.progress_at == T0 + 9
    stored = await store.runs.get_run(late.run_id)
    assert stored is not None and stored.started_at == T0 + 9 and stored.created_at == T0 + 2
