"""Steps run without a claim (ackloop.engine.claims): one read and one commit, and a concurrent
duplicate that loses the commit records nothing and re-sends the winner's outbox."""

from __future__ import annotations

import asyncio

from ackloop.config.settings import Settings
from ackloop.domain.clock import SystemClock
from ackloop.domain.keys import run_id_for_request
from ackloop.domain.records import RunStatus, StepStatus
from ackloop.domain.wire import QueryMessage
from ackloop.engine.claims import model_call_claims, tool_call_claims
from ackloop.model.base import ModelRequest, ModelTurn
from ackloop.model.scripted import ScriptedModel
from ackloop.model.turns import text_turn
from tests.engine.fakes import CountingToolbox, first_model_step, make_loop
from tests.engine.test_loop import reference

AUTO = Settings(lease_seconds=10.0)
ALWAYS = Settings(lease_seconds=10.0, step_claims="always")


async def _counted_run(settings: Settings) -> tuple[int, int, int]:
    """The reference workload (3 model steps, 2 tool steps): round trips and documents
    written by the whole run, and its steps' highest attempt."""
    model, tools = reference()
    loop = make_loop(model, tools, settings=settings)
    counters = loop.deps.store.db.counters  # type: ignore[attr-defined]
    await loop.submit(QueryMessage(request_id="count", text="go"))
    await loop.run_until_idle()
    run = await loop.deps.store.get_run(run_id_for_request("count"))
    assert run is not None and run.status is RunStatus.COMPLETED
    steps = await loop.deps.store.list_steps(run.run_id)
    assert len(steps) == 5 and {s.status for s in steps} == {StepStatus.COMPLETED}
    return counters.round_trips, counters.docs_written, max(s.attempts for s in steps)


async def test_an_unclaimed_step_saves_its_claim_write_and_round_trip() -> None:
    claimed = await _counted_run(ALWAYS)
    unclaimed = await _counted_run(AUTO)
    # Five steps: five claims fewer, each one write and one round trip.
    assert claimed[0] - unclaimed[0] == 5
    assert claimed[1] - unclaimed[1] == 5
    assert claimed[2] == unclaimed[2] == 1


async def test_a_concurrent_duplicate_of_an_unclaimed_step_is_recorded_once() -> None:
    """Both deliveries call the model (the cost the claim would have saved); one commit creates
    the step, the other finds it taken, drops its result and is acknowledged."""
    release, both_called = asyncio.Event(), asyncio.Event()
    calls = 0

    async def slow_generate(request: ModelRequest) -> ModelTurn:
        nonlocal calls
        calls += 1
        if calls == 2:
            both_called.set()
        await release.wait()
        return text_turn(f"answer {calls}", request=request)

    model = ScriptedModel()
    model.generate = slow_generate  # type: ignore[method-assign]
    loop = make_loop(model, CountingToolbox(), clock=SystemClock(), settings=AUTO)
    kind, step = await first_model_step(loop, QueryMessage(request_id="dup", text="hi"))

    first = asyncio.create_task(loop.deliver(kind, step))
    second = asyncio.create_task(loop.deliver(kind, step))
    await asyncio.wait_for(both_called.wait(), timeout=10)
    release.set()
    outcomes = [await first, await second]

    assert all(o.acknowledged for o in outcomes), outcomes
    run = await loop.deps.store.get_run(run_id_for_request("dup"))
    assert run is not None and run.status is RunStatus.COMPLETED
    (recorded,) = await loop.deps.store.list_steps(run.run_id)
    assert recorded.status is StepStatus.COMPLETED and recorded.attempts == 1
    transcript = await loop.deps.store.load_transcript(run.conversation_id)
    assert [c["role"] for c in transcript.contents] == ["user", "model"]
    assert transcript.contents[-1]["parts"][0]["text"] == run.answer


def test_the_claim_rule_claims_where_a_duplicate_costs_more_than_a_write() -> None:
    # 1 in 1,000 duplicates, $0.09 per 100,000 writes: a claim pays above $0.0009 of prompt.
    flash = "gemini-3-flash-preview"  # $0.50 per 1M input tokens: about 1,800 tokens
    assert not model_call_claims(AUTO, flash, prompt_bytes=4 * 1_700)
    assert model_call_claims(AUTO, flash, prompt_bytes=4 * 1_900)
    assert not model_call_claims(AUTO, "scripted-seed-1", prompt_bytes=10**9)  # unpriced
    assert model_call_claims(ALWAYS, "scripted-seed-1", prompt_bytes=0)
    assert tool_call_claims(AUTO, retry_safe=False, waits=False)
    assert tool_call_claims(AUTO, retry_safe=True, waits=True)
    assert not tool_call_claims(AUTO, retry_safe=True, waits=False)
    assert tool_call_claims(ALWAYS, retry_safe=True, waits=False)


async def test_a_later_model_step_reads_its_inputs_in_one_round_trip() -> None:
    """The message that triggers a model step names what it will read (its ``reads`` hint):
    the run, the previous turn's steps, its own document and the transcript come in one batch
    get, then one commit. Turn 0 of a run that starts its conversation knows its transcript is
    empty; the last step creates the conversation's document without reading it (no follow-up
    joined: nothing to hand on)."""
    model, tools = reference()
    loop = make_loop(model, tools, settings=AUTO)
    counters = loop.deps.store.db.counters  # type: ignore[attr-defined]
    trips: list[tuple[str, int]] = []
    deliver = loop.deliver

    async def counted(kind, message):  # type: ignore[no-untyped-def]
        before = counters.round_trips
        outcome = await deliver(kind, message)
        trips.append((message.attributes.get("step", kind), counters.round_trips - before))
        return outcome

    loop.deliver = counted  # type: ignore[method-assign]
    await loop.submit(QueryMessage(request_id="one-read", text="go"))
    await loop.run_until_idle()

    assert dict(trips) == {"0000-model": 2, "0000-tool-000": 2, "0001-model": 2,
                           "0001-tool-000": 2, "0002-model": 2, "query": 1}


async def test_a_hint_that_what_is_read_does_not_bear_out_is_ignored() -> None:
    """``reads`` is only a hint: one naming another conversation or another number of calls
    makes the step read the way it would without it, and the run goes on unchanged."""
    model, tools = reference()
    loop = make_loop(model, tools, settings=AUTO)
    forged = 0

    def forge(kind, message):  # type: ignore[no-untyped-def]
        nonlocal forged
        if message.attributes.get("reads"):
            forged += 1
            message.attributes["reads"] = "7,3,someone-else" if forged == 1 else "x,y"
        return kind, message

    deliver = loop.deliver
    loop.deliver = lambda kind, message: deliver(*forge(kind, message))  # type: ignore[method-assign]
    await loop.submit(QueryMessage(request_id="forged-hint", text="go"))
    await loop.run_until_idle()

    assert forged == 2
    run = await loop.deps.store.get_run(run_id_for_request("forged-hint"))
    assert run is not None and run.status is RunStatus.COMPLETED
    assert len(model.requests) == 3 and tools.executed["lookup"] == 2
    transcript = await loop.deps.store.load_transcript(run.conversation_id)
    assert [c["role"] for c in transcript.contents] == ["user", "model"] * 3


async def test_a_follow_up_that_arrives_before_its_conversations_run_waits_for_it() -> None:
    """A follow-up naming a conversation by the id of a run whose query has not arrived yet
    cannot start that conversation (the run's own creation reads nothing, so it would not see
    it): it is answered for redelivery, writing nothing, until the run exists, then queues
    behind it. The run starts its conversation as any first run does, and the follow-up reads
    the transcript the run left."""
    model, tools = reference()
    loop = make_loop(model, tools, settings=AUTO)
    first = run_id_for_request("first")
    await loop.submit(QueryMessage(request_id="second", text="then", conversation_id=first))
    await loop.submit(QueryMessage(request_id="first", text="go"))
    await loop.run_until_idle()

    refused, *_ = loop.deliveries("query")
    assert refused.outcome.status == 503 and not refused.outcome.acknowledged
    runs = [await loop.deps.store.get_run(run_id_for_request(r)) for r in ("first", "second")]
    assert all(r is not None and r.status is RunStatus.COMPLETED for r in runs), runs
    assert [r.new_conversation for r in runs if r] == [True, False]
    assert runs[1] is not None and runs[0] is not None
    assert (runs[1].started_at or 0) >= (runs[0].finished_at or 0)  # behind the first run
    transcript = await loop.deps.store.load_transcript(first)
    assert [c["role"] for c in transcript.contents] == ["user", "model"] * 6
    users = [c["parts"][0]["text"] for c in transcript.contents
             if c["role"] == "user" and "text" in c["parts"][0]]
    assert users == ["go", "then"]


async def test_a_duplicate_that_reads_the_transcript_after_its_step_was_recorded_calls_nothing(
) -> None:
    """A follow-up's first model step reads its own document and the conversation's transcript
    in two round trips. When the other delivery of the step records it in between, the
    transcript read already holds the step's turn: the late delivery does not call the model
    (on a context that repeats the question after its answer) and, as a duplicate whose commit
    loses, sends nothing (the delivery that recorded the step sent its outbox)."""
    contexts: list[list[str]] = []

    async def answer(request: ModelRequest) -> ModelTurn:
        contexts.append([c["role"] for c in request.contents])
        return text_turn(f"answer {len(contexts)}", request=request)

    model = ScriptedModel()
    model.generate = answer  # type: ignore[method-assign]
    loop = make_loop(model, CountingToolbox(), settings=AUTO)
    await loop.submit(QueryMessage(request_id="first", text="hi"))
    await loop.run_until_idle()
    first = run_id_for_request("first")
    kind, step = await first_model_step(
        loop, QueryMessage(request_id="then", text="then", conversation_id=first))
    answers_before = len(loop.answers)

    store = loop.deps.store
    load = store.load_transcript_view
    late_reads, recorded = asyncio.Event(), asyncio.Event()

    async def after_the_other(conversation_id: str):  # type: ignore[no-untyped-def]
        if not late_reads.is_set():  # the late delivery: its step is recorded meanwhile
            late_reads.set()
            await recorded.wait()
        return await load(conversation_id)

    store.load_transcript_view = after_the_other  # type: ignore[method-assign]
    late = asyncio.create_task(loop.deliver(kind, step))
    await asyncio.wait_for(late_reads.wait(), timeout=10)
    assert (await loop.deliver(kind, step)).acknowledged
    recorded.set()
    assert (await asyncio.wait_for(late, timeout=10)).acknowledged

    assert contexts == [["user"], ["user", "model", "user"]]  # one call per run
    run = await loop.deps.store.get_run(run_id_for_request("then"))
    assert run is not None and run.status is RunStatus.COMPLETED and run.answer == "answer 2"
    (recorded_step,) = await loop.deps.store.list_steps(run.run_id)
    assert recorded_step.status is StepStatus.COMPLETED
    loop._collect()
    assert [a.run_id for a in loop.answers[answers_before:]] == [run.run_id]
