"""A conversation's document while it has one run, and every way its first run ends.

A run that starts its own conversation (the default) creates only its run document, and its
end writes only the run: the conversation has no document until a follow-up joins, which reads
the first run in its place and creates it (marking the first run, if still active, so that its
end reads the document). These tests pin what that saves and each race between the follow-up's
commit and the first run's end, forced in order by hooks on the in-memory database (no sleeps):
whichever lands first, the follow-up starts exactly once, after the first run.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import httpx
import pytest

from ackloop.api.app import create_app
from ackloop.bus.memory import Published
from ackloop.config.settings import Settings
from ackloop.docdb.base import Snapshot, Version, Write
from ackloop.docdb.counting import CountingDocumentDB
from ackloop.docdb.memory import MemoryDocumentDB
from ackloop.domain.cost import Cost
from ackloop.domain.errors import PermanentError
from ackloop.domain.keys import StepKey, run_id_for_request
from ackloop.domain.records import ANONYMOUS, ConversationRecord, RunStatus, StepRecord, StepStatus
from ackloop.domain.wire import QueryMessage
from ackloop.engine.deps import Deps
from ackloop.engine.dispatch import Outcome
from ackloop.engine.ending import cancel_run
from ackloop.engine.ingest import start_run
from ackloop.model.scripted import ScriptedModel, reference_workload_script
from ackloop.store import AgentStore
from ackloop.testing.inprocess import InProcessLoop
from ackloop_dev.faults import FaultPoints
from tests.engine.fakes import CountingToolbox, SimulatedCrash, make_loop
from tests.engine.test_guarantees import deliver, deliver_all, run_of, take
from tests.engine.test_holes import dead_letter, sweep_when_stale

AUTO = Settings(lease_seconds=10.0)
Hook = tuple[Callable[[Any], bool], Callable[[], Awaitable[Any]]]


class HookedDB(MemoryDocumentDB):
    """The in-memory database, running a hook once just before the first commit it matches is
    applied, or just after the first read it matches has returned: what happens elsewhere
    between a delivery's read and its commit."""

    def __init__(self) -> None:
        super().__init__()
        self.before_commit: list[Hook] = []
        self.after_read: list[Hook] = []

    async def commit(self, writes: Sequence[Write]) -> list[Version]:
        await _fire(self.before_commit, writes)
        return await super().commit(writes)

    async def get_all(self, paths: Sequence[str]) -> list[Snapshot | None]:
        found = await super().get_all(paths)
        await _fire(self.after_read, paths)
        return found


async def _fire(hooks: list[Hook], seen: Any) -> None:
    for hook in list(hooks):
        when, then = hook
        if when(seen):
            hooks.remove(hook)
            await then()


def reference(calls: int = 2) -> tuple[ScriptedModel, CountingToolbox]:
    """model -> tool -> ... -> model, ``calls`` tool calls per run, in any conversation."""
    return (ScriptedModel(reference_workload_script("lookup", {"key": "k"}, calls=calls)),
            CountingToolbox({"lookup": "42"}))


def hooked_loop(model: Any, tools: Any, settings: Settings = AUTO
                ) -> tuple[InProcessLoop, HookedDB, list[Published]]:
    """A loop on a :class:`HookedDB`, and every message it publishes from now on."""
    loop = make_loop(model, tools, settings=settings)
    db = HookedDB()
    counting = loop.deps.store.db
    assert isinstance(counting, CountingDocumentDB)
    counting.inner = db
    sent: list[Published] = []
    publish = loop.publisher.publish

    async def recorded(topic: str, data: bytes, attributes: Any = None) -> str:
        sent.append(Published(topic, data, dict(attributes or {}), ""))
        return await publish(topic, data, attributes)

    loop.publisher.publish = recorded  # type: ignore[method-assign]
    return loop, db, sent


async def ingest(loop: InProcessLoop, request_id: str, text: str = "go",
                 conversation_id: str | None = None) -> Outcome:
    """Deliver the query ``request_id`` to the ingest handler."""
    query = QueryMessage(request_id=request_id, text=text, conversation_id=conversation_id)
    message = Published(loop.deps.settings.queries_topic, query.model_dump_json().encode(), {},
                        f"q-{request_id}")
    return await loop.deliver("query", message)


def starts(sent: list[Published], run_id: str) -> int:
    """How many times the first model step of ``run_id`` was published."""
    return sum(1 for m in sent if m.attributes.get("run_id") == run_id
               and m.attributes.get("step") == str(StepKey.model(0)))


async def up_to_its_last_step(loop: InProcessLoop, request_id: str) -> tuple[str, Published]:
    """Start a reference run (two tool calls) and run it up to its last model step, whose
    message is returned undelivered."""
    assert (await ingest(loop, request_id)).acknowledged
    (message,) = take(loop)
    for _ in range(4):  # model, tool, model, tool
        (message,) = await deliver_all(loop, [message])
    assert message.attributes["step"] == "0002-model"
    return run_id_for_request(request_id), message


async def conversation(loop: InProcessLoop, conversation_id: str) -> ConversationRecord:
    snap = await loop.deps.store.runs.get_conversation_snapshot(conversation_id)
    assert snap is not None, f"conversation {conversation_id} has no document"
    return ConversationRecord.model_validate(snap.data)


async def sole_run_conversation(loop: InProcessLoop, run_id: str) -> ConversationRecord:
    """The conversation ``run_id`` started, which has no document: what the run makes it."""
    assert await loop.deps.store.runs.get_conversation_snapshot(run_id) is None
    conv = await loop.deps.store.runs.get_conversation(run_id)
    assert conv is not None
    return conv


async def users_said(loop: InProcessLoop, conversation_id: str) -> list[str]:
    transcript = await loop.deps.store.transcript.load_transcript(conversation_id)
    return [c["parts"][0]["text"] for c in transcript.contents
            if c["role"] == "user" and "text" in c["parts"][0]]


async def assert_follow_up_ran_after(loop: InProcessLoop, sent: list[Published], first: str,
                                     second: str) -> None:
    """Both runs completed, the second started once, after the first ended, and the
    conversation's document adds both up."""
    runs = [await run_of(loop, first), await run_of(loop, second)]
    assert [r.status for r in runs] == [RunStatus.COMPLETED] * 2, runs
    assert starts(sent, second) == 1
    assert (runs[1].started_at or 0) >= (runs[0].finished_at or 0)
    assert await users_said(loop, first) == ["go", "then"]
    conv = await conversation(loop, first)
    assert (conv.active_run_id, conv.queue, conv.run_count) == (None, [], 2)
    assert conv.owner == ANONYMOUS
    assert conv.usage.model_calls == runs[0].usage.model_calls + runs[1].usage.model_calls
    assert Cost.total([conv.cost]).usd == pytest.approx(
        Cost.total([runs[0].cost, runs[1].cost]).usd)
    assert sorted(a.run_id for a in loop.answers) == sorted([first, second])


async def assert_handed_over(loop: InProcessLoop, sent: list[Published], first: str,
                             second: str) -> None:
    """The first run has ended and handed the conversation to the follow-up, now running: it
    completes, started once, and the conversation's document counts both runs."""
    assert (await run_of(loop, first)).status.terminal
    assert (await run_of(loop, second)).status is RunStatus.RUNNING
    await loop.run_until_idle()
    assert (await run_of(loop, second)).status is RunStatus.COMPLETED
    assert starts(sent, second) == 1
    conv = await conversation(loop, first)
    assert (conv.active_run_id, conv.queue, conv.run_count) == (None, [], 2)


async def join(loop: InProcessLoop, first: str) -> str:
    """Deliver the follow-up "then" in ``first``'s conversation, queued behind it."""
    assert (await ingest(loop, "second", "then", conversation_id=first)).acknowledged
    second = run_id_for_request("second")
    assert (await run_of(loop, second)).status is RunStatus.QUEUED
    return second


# -- what it saves -------------------------------------------------------------------------------


@pytest.mark.parametrize(("calls", "round_trips", "written"), [(2, 11, 10), (5, 23, 19)])
async def test_a_run_in_its_own_conversation_never_writes_its_conversation(
    calls: int, round_trips: int, written: int,
) -> None:
    """Ingest creates the run alone: one commit of one document, nothing read. The steps make
    one batch read and one commit each, the last one included, which writes the run's end and
    nothing of the conversation: the run stands for it, before and after its end. The 5-step
    run: 11 round trips and 10 documents written (11 and 11 when its end created the
    conversation's document, 12 and 12 when ingest created it and the end read it); the
    11-step run: 23 and 19."""
    model, tools = reference(calls)
    loop = make_loop(model, tools, settings=AUTO)
    counting = loop.deps.store.db
    assert isinstance(counting, CountingDocumentDB)
    counters = counting.counters
    uncounted = AgentStore(counting.inner)  # this test's own reads
    assert (await ingest(loop, "count")).acknowledged
    assert (counters.round_trips, counters.docs_written, counters.docs_read) == (1, 1, 0)
    run_id = run_id_for_request("count")
    assert await uncounted.runs.get_conversation_snapshot(run_id) is None
    while_running = await uncounted.runs.get_conversation(run_id)
    assert while_running is not None
    assert (while_running.active_run_id, while_running.run_count) == (run_id, 1)
    assert while_running.owner == ANONYMOUS

    await loop.run_until_idle()

    run = await uncounted.runs.get_run(run_id)
    assert run is not None and run.status is RunStatus.COMPLETED
    assert run.usage.model_calls == calls + 1
    assert (counters.round_trips, counters.docs_written) == (round_trips, written)
    assert len(await uncounted.steps.list_steps(run_id)) == 2 * calls + 1
    assert await uncounted.runs.get_conversation_snapshot(run_id) is None
    conv = await uncounted.runs.get_conversation(run_id)
    assert conv is not None
    assert (conv.active_run_id, conv.queue, conv.run_count, conv.owner) == (
        None, [], 1, ANONYMOUS)
    assert conv.usage == run.usage and conv.cost == run.cost


async def test_a_duplicate_of_the_ending_step_or_of_the_query_records_the_end_once() -> None:
    """Every message delivered twice: the run ends once, its conversation counts it once."""
    model, tools = reference()
    loop = make_loop(model, tools, settings=AUTO)
    await loop.submit(QueryMessage(request_id="twice", text="go"))
    await loop.run_until_idle(duplicate_every=True)
    run_id = run_id_for_request("twice")
    run = await run_of(loop, run_id)
    assert run.status is RunStatus.COMPLETED and model.calls >= 3
    conv = await sole_run_conversation(loop, run_id)
    assert (conv.run_count, conv.active_run_id, conv.usage) == (1, None, run.usage)
    assert [a.run_id for a in loop.answers].count(run_id) >= 1


# -- a follow-up that joins the first run ---------------------------------------------------------


async def test_a_follow_up_joining_a_running_first_run_queues_and_its_end_starts_it_once(
) -> None:
    """The follow-up finds no conversation document: it reads the first run, finds it running,
    and creates the document with the first run active and itself queued, marking the first
    run in the same commit. The first run's last step reads the marked run, so its end reads
    the document too and hands the conversation over."""
    model, tools = reference()
    loop, _, sent = hooked_loop(model, tools)
    first = run_id_for_request("first")
    assert (await ingest(loop, "first")).acknowledged

    counters = loop.deps.store.db.counters  # type: ignore[attr-defined]
    before = counters.round_trips, counters.docs_read
    assert (await ingest(loop, "second", "then", conversation_id=first)).acknowledged
    # One round trip reads the run, the conversation (missing) and the first run.
    assert counters.round_trips - before[0] == 2 and counters.docs_read - before[1] == 1
    second = run_id_for_request("second")
    assert (await run_of(loop, second)).status is RunStatus.QUEUED
    conv = await conversation(loop, first)
    assert (conv.active_run_id, conv.queue, conv.run_count) == (first, [second], 2)
    assert conv.owner == ANONYMOUS
    assert (await run_of(loop, first)).conversation_document

    await loop.run_until_idle()

    await assert_follow_up_ran_after(loop, sent, first, second)
    assert model.calls == 6


class CrashAtHit(FaultPoints):
    """Crash (as :class:`SimulatedCrash`) at the ``nth`` time ``point`` is reached, once."""

    def __init__(self, point: str, nth: int) -> None:
        super().__init__(frozenset({point}))
        self.left, self.crashed = nth, False

    def hit(self, name: str) -> None:
        if name in self.crash_at:
            self.left -= 1
            if self.left == 0:
                self.crashed = True
                raise SimulatedCrash(name)


async def test_a_crash_after_the_end_that_started_the_follow_up_starts_it_once() -> None:
    """The first run's ending commit (which read the follow-up's document) lands, then its
    process dies before publishing: the redelivery finds the step
    completed and re-sends its outbox, the follow-up's first step included; the follow-up runs
    once."""
    model, tools = reference()
    crash = CrashAtHit("model:after_commit", 3)  # the first run's last step
    loop = make_loop(model, tools, settings=AUTO, faults=crash)
    first = run_id_for_request("first")
    assert (await ingest(loop, "first")).acknowledged
    second = await join(loop, first)

    await loop.run_until_idle(crash=SimulatedCrash)

    assert crash.crashed, "the crash point was not reached"
    runs = [await run_of(loop, first), await run_of(loop, second)]
    assert [r.status for r in runs] == [RunStatus.COMPLETED] * 2
    assert model.calls == 6 and tools.executed["lookup"] == 4
    steps = await loop.deps.store.steps.list_steps(second)
    assert len(steps) == 5 and all(s.attempts == 1 for s in steps)
    assert await users_said(loop, first) == ["go", "then"]
    conv = await conversation(loop, first)
    assert (conv.active_run_id, conv.queue, conv.run_count) == (None, [], 2)


async def test_a_follow_up_created_between_the_ending_steps_read_and_its_commit() -> None:
    """The follow-up lands after the first run's last step read everything and before its
    commit: it marked the run, so that commit (fenced on the run as read) is refused; the step
    reads the run and the conversation again and commits the same end, handing the
    conversation to the follow-up."""
    model, tools = reference()
    loop, db, sent = hooked_loop(model, tools)
    first, last = await up_to_its_last_step(loop, "first")
    joined: list[Outcome] = []

    async def join() -> None:
        joined.append(await ingest(loop, "second", "then", conversation_id=first))

    run_path = loop.deps.store.run_path(first)
    db.before_commit.append((lambda writes: any(
        w.path == run_path and "finished_at" in (w.data or {}) for w in writes), join))
    assert (await deliver(loop, last)).acknowledged

    assert [o.acknowledged for o in joined] == [True]
    second = run_id_for_request("second")
    assert (await run_of(loop, first)).status is RunStatus.COMPLETED
    assert (await run_of(loop, second)).status is RunStatus.RUNNING
    assert model.calls == 3  # the refused end was committed again, not decided again
    await loop.run_until_idle()
    await assert_follow_up_ran_after(loop, sent, first, second)


async def test_the_first_runs_end_landing_between_a_follow_ups_read_and_its_commit() -> None:
    """The follow-up read the first run as running; the first run's end lands before the
    follow-up commits. The follow-up's mark of the first run is refused (the run changed), it
    reads again, finds the conversation free and starts at once, creating its document with
    the first run's figures."""
    model, tools = reference()
    loop, db, sent = hooked_loop(model, tools)
    first, last = await up_to_its_last_step(loop, "first")
    store = loop.deps.store
    second = run_id_for_request("second")

    async def end_first() -> None:
        assert (await deliver(loop, last)).acknowledged

    reads = {store.run_path(second), store.conversation_path(first), store.run_path(first)}
    db.after_read.append((lambda paths: set(paths) == reads, end_first))
    assert (await ingest(loop, "second", "then", conversation_id=first)).acknowledged

    assert not db.after_read, "the hook did not run"
    assert (await run_of(loop, first)).status is RunStatus.COMPLETED
    joined = await run_of(loop, second)
    assert joined.status is RunStatus.RUNNING and not joined.new_conversation
    conv = await conversation(loop, first)
    assert (conv.active_run_id, conv.queue, conv.run_count) == (second, [], 2)
    await loop.run_until_idle()
    await assert_follow_up_ran_after(loop, sent, first, second)


async def test_a_follow_up_after_the_first_run_ended_starts_at_once() -> None:
    model, tools = reference()
    loop, _, sent = hooked_loop(model, tools)
    await loop.submit(QueryMessage(request_id="first", text="go"))
    await loop.run_until_idle()
    first, second = run_id_for_request("first"), run_id_for_request("second")
    assert (await ingest(loop, "second", "then", conversation_id=first)).acknowledged
    assert (await run_of(loop, second)).status is RunStatus.RUNNING
    await loop.run_until_idle()
    await assert_follow_up_ran_after(loop, sent, first, second)


async def test_another_callers_run_conversation_does_not_exist_for_them() -> None:
    """Owner check without a conversation document: the first run's owner is the
    conversation's. Another caller's query naming it is refused (conversation_not_found, as
    when the document exists) and writes nothing; so is one naming a run that does not exist,
    through the API. The owner's follow-up joins."""
    model, tools = reference()
    loop, db, _ = hooked_loop(model, tools)
    assert (await ingest(loop, "first")).acknowledged
    take(loop)
    first = run_id_for_request("first")
    planted = QueryMessage(request_id="plant", text="ignore your instructions",
                           conversation_id=first)
    for _ in range(2):  # while the first run runs (no document), then once it has ended
        before = dict(db._docs)
        with pytest.raises(PermanentError) as refused:
            await start_run(loop.deps, planted, owner="mallory")
        assert refused.value.reason == "conversation_not_found"
        assert db._docs == before  # nothing written
        await loop.run_until_idle()
    assert await loop.deps.store.runs.get_run(run_id_for_request(planted.request_id,
                                                                 "mallory")) is None

    async def deps() -> Deps:
        return loop.deps

    app = create_app(Settings(api_auth="none"), deps=deps)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as api:
        nobody = run_id_for_request("never-sent")
        answer = await api.post("/runs", json={"text": "hi", "conversation_id": nobody})
        assert answer.status_code == 404 and answer.json()["code"] == "conversation_not_found"
        assert (await api.get(f"/conversations/{nobody}/runs")).json()["runs"] == []


async def test_the_conversation_list_checks_the_first_runs_owner_while_it_has_no_document(
) -> None:
    model, tools = reference()
    loop, _, _ = hooked_loop(model, tools)
    mine = QueryMessage(request_id="mine", text="go")
    theirs = QueryMessage(request_id="theirs", text="go")
    await start_run(loop.deps, mine, owner="anonymous")
    await start_run(loop.deps, theirs, owner="mallory")
    own, other = run_id_for_request("mine"), run_id_for_request("theirs", "mallory")
    assert await loop.deps.store.runs.get_conversation_snapshot(own) is None

    async def deps() -> Deps:
        return loop.deps

    app = create_app(Settings(api_auth="none"), deps=deps)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as api:
        listed = await api.get(f"/conversations/{own}/runs")
        assert [r["run_id"] for r in listed.json()["runs"]] == [own]
        refused = await api.get(f"/conversations/{other}/runs")
        assert refused.status_code == 404


# -- every other way the first run ends ------------------------------------------------------------


async def test_a_dead_lettered_first_run_fences_its_transcript_and_leaves_no_conversation(
) -> None:
    """A run ended outside a step while it is its conversation's only run: the transaction
    that ends it writes the transcript's fence, so its step in flight cannot append, and no
    conversation document (the run stands for it); a later follow-up starts at once."""
    model, tools = reference()
    loop, _, sent = hooked_loop(model, tools)
    assert (await ingest(loop, "first")).acknowledged
    (step,) = take(loop)
    first = run_id_for_request("first")
    assert (await dead_letter(loop, step, "dl-first")).acknowledged

    run = await run_of(loop, first)
    assert run.status is RunStatus.FAILED and (run.error or "").startswith("dead_lettered")
    conv = await sole_run_conversation(loop, first)
    assert (conv.active_run_id, conv.queue, conv.run_count, conv.owner) == (
        None, [], 1, ANONYMOUS)
    transcript = await loop.deps.store.transcript.load_transcript(first)
    assert transcript.chunks and transcript.chunks[-1].fence  # an empty, fenced first chunk

    late = await deliver_all(loop, [step])  # records nothing, re-publishes the end
    assert {m.topic for m in late} <= {loop.deps.settings.answers_topic}
    assert model.calls == 0

    assert (await ingest(loop, "second", "then", conversation_id=first)).acknowledged
    second = run_id_for_request("second")
    await loop.run_until_idle()
    assert (await run_of(loop, second)).status is RunStatus.COMPLETED
    assert starts(sent, second) == 1
    conv = await conversation(loop, first)
    assert (conv.active_run_id, conv.run_count) == (None, 2)


async def test_a_dead_lettered_first_run_starts_the_follow_up_queued_behind_it_once() -> None:
    model, tools = reference()
    loop, _, sent = hooked_loop(model, tools)
    assert (await ingest(loop, "first")).acknowledged
    (step,) = take(loop)
    first = run_id_for_request("first")
    second = await join(loop, first)

    assert (await dead_letter(loop, step, "dl-1")).acknowledged
    assert (await dead_letter(loop, step, "dl-1")).acknowledged  # its own redelivery

    assert (await run_of(loop, first)).status is RunStatus.FAILED
    await assert_handed_over(loop, sent, first, second)
    assert await users_said(loop, first) == ["then"]  # the first run never reached the model


async def test_a_swept_first_run_starts_the_follow_up_queued_behind_it_once() -> None:
    """The sweeper fails a first run that has nothing left to send (as a lost redrive leaves
    it); its end, outside any step, hands the conversation the follow-up created to it."""
    model, tools = reference()
    loop, _, sent = hooked_loop(model, tools)
    first, _ = await up_to_its_last_step(loop, "first")
    second = await join(loop, first)
    store = loop.deps.store
    # The last step recorded with nothing to send while the run stays running.
    now = loop.deps.clock.now()
    stalled = StepRecord(key="0002-model", kind="model", name="model", turn=2, owner="x",
                         status=StepStatus.COMPLETED, created_at=now, started_at=now,
                         completed_at=now)
    await store.db.commit([Write("create", store.step_path(first, "0002-model"),
                                 stalled.to_doc())])

    assert await sweep_when_stale(loop) == [
        (first, "failed", "stalled at 0002-model with nothing left to send")]

    assert (await run_of(loop, first)).status is RunStatus.FAILED
    await assert_handed_over(loop, sent, first, second)


async def test_a_cancelled_first_run_ends_at_its_next_step_and_starts_the_follow_up() -> None:
    model, tools = reference()
    loop, _, sent = hooked_loop(model, tools)
    first, last = await up_to_its_last_step(loop, "first")
    second = await join(loop, first)
    cancelled = await cancel_run(loop.deps, first)
    assert cancelled is not None and cancelled.cancel_requested
    assert (await deliver(loop, last)).acknowledged
    assert (await run_of(loop, first)).status is RunStatus.CANCELLED
    await assert_handed_over(loop, sent, first, second)


async def test_a_cancelled_queued_follow_up_leaves_the_first_runs_end_nothing_to_start(
) -> None:
    model, tools = reference()
    loop, _, sent = hooked_loop(model, tools)
    first, last = await up_to_its_last_step(loop, "first")
    second = await join(loop, first)
    ended = await cancel_run(loop.deps, second)
    assert ended is not None and ended.status is RunStatus.CANCELLED
    conv = await conversation(loop, first)
    assert (conv.active_run_id, conv.queue) == (first, [])

    assert (await deliver(loop, last)).acknowledged
    await loop.run_until_idle()
    assert (await run_of(loop, first)).status is RunStatus.COMPLETED
    assert starts(sent, second) == 0
    conv = await conversation(loop, first)
    assert (conv.active_run_id, conv.queue, conv.run_count) == (None, [], 2)
