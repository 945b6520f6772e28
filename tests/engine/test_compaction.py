"""The context policy: a long conversation is compacted into a summary and its recent turns, once
per compaction whatever is redelivered or killed, and every turn stays in the history."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from ackloop.agents.agent import Agent, AgentRegistry
from ackloop.bus.memory import MemoryPublisher
from ackloop.config.settings import Settings
from ackloop.docdb.base import DocumentDB
from ackloop.docdb.counting import CountingDocumentDB
from ackloop.docdb.memory import MemoryDocumentDB
from ackloop.domain.clock import ManualClock
from ackloop.domain.context_window import SUMMARY_HEADER, Context, is_summary_request
from ackloop.domain.errors import ModelPermanentError
from ackloop.domain.keys import run_id_for_request
from ackloop.domain.records import RunStatus
from ackloop.domain.wire import QueryMessage, Usage
from ackloop.engine.deps import Deps
from ackloop.model.base import ModelClient, ModelRequest, ModelTurn
from ackloop.model.scripted import ScriptedModel
from ackloop.model.turns import calls_turn, estimate_usage, text_turn
from ackloop.store import VIEW_PAGE, AgentStore
from ackloop.testing.inprocess import InProcessLoop
from tests.engine.fakes import CountingToolbox, SimulatedCrash
from tests.store.conftest import db  # noqa: F401  (the fixture: memory, then the emulator)

CONVERSATION = "long-talk"
RESULT = " ".join(f"word{i}" for i in range(40))  # a tool result of 40 words


def one_lookup_per_question(request: ModelRequest) -> ModelTurn:
    """Stateless, and indifferent to compaction: a question gets a lookup, a lookup's result
    gets the answer (which names the question it answers, from the call's key)."""
    last = request.contents[-1]
    responses = [p["function_response"] for p in last.get("parts", [])
                 if "function_response" in p]
    if not responses:
        question = last["parts"][0]["text"]
        return calls_turn([("lookup", {"key": question})], request=request)
    previous_model = next(c for c in reversed(request.contents[:-1]) if c["role"] == "model")
    key = previous_model["parts"][0]["function_call"]["args"]["key"]
    return text_turn(f"answer to {key}", request=request)


class Recording:
    """A scripted model that keeps every request (summaries included) and can die once."""

    provider = "scripted"

    def __init__(self, die: str | None = None, refuse_over: int | None = None) -> None:
        self.model = ScriptedModel(one_lookup_per_question)
        self.requests: list[ModelRequest] = []
        self.die = die
        self.refuse_over = refuse_over
        self.summaries_answered = 0

    async def generate(self, request: ModelRequest) -> ModelTurn:
        self.requests.append(request)
        summary = is_summary_request(request.contents)
        if self.die == "during_summary" and summary:
            self.die = None
            raise SimulatedCrash("killed during the summary's call")
        if self.die == "after_summary" and not summary and self.summaries_answered:
            self.die = None  # the compaction is committed; the step's own call dies
            raise SimulatedCrash("killed after the compaction was committed")
        tokens = estimate_usage(request, []).prompt_tokens
        if self.refuse_over is not None and tokens > self.refuse_over:
            raise ModelPermanentError(
                f"The input token count ({tokens}) exceeds the maximum number of tokens "
                f"allowed ({self.refuse_over}).", reason="model_input_too_long")
        turn = self.model.decide(request)
        if summary:
            self.summaries_answered += 1
        return turn

    def summaries(self) -> list[ModelRequest]:
        return [r for r in self.requests if is_summary_request(r.contents)]

    def main(self) -> list[ModelRequest]:
        return [r for r in self.requests if not is_summary_request(r.contents)]


def loop_with(model: ModelClient, context: Context, database: DocumentDB | None = None,
              prefix: str = "") -> InProcessLoop:
    publisher = MemoryPublisher()
    agent = Agent("default", "Answer from the lookup.", CountingToolbox({"lookup": RESULT}),
                  context=context)
    deps = Deps(settings=Settings(lease_seconds=10.0),
                store=AgentStore(CountingDocumentDB(database or MemoryDocumentDB()), prefix),
                publisher=publisher, model=model, agents=AgentRegistry([agent]),
                clock=ManualClock(), owner="test-owner")
    return InProcessLoop(deps, publisher)


async def converse(loop: InProcessLoop, questions: int, *, first: int = 0,
                   crash: bool = False) -> None:
    for i in range(first, first + questions):
        await loop.submit(QueryMessage(request_id=f"q{i}", text=f"question {i}",
                                       conversation_id=CONVERSATION))
        await loop.run_until_idle(crash=SimulatedCrash if crash else None)


def prompt_tokens(request: ModelRequest) -> int:
    return estimate_usage(request, []).prompt_tokens


def assert_well_formed(request: ModelRequest) -> None:
    """What Gemini needs of a history: it starts with the user, and every model turn's calls
    are answered, by name and in order, in the content that follows it."""
    contents = request.contents
    assert contents[0]["role"] == "user"
    for i, content in enumerate(contents):
        calls = [p["function_call"]["name"] for p in content["parts"] if "function_call" in p]
        if content["role"] == "model" and calls:
            answered = [p["function_response"]["name"] for p in contents[i + 1]["parts"]
                        if "function_response" in p]
            assert answered == calls, f"content {i}: {calls} answered by {answered}"


POLICY = Context(max_input_tokens=400, keep_recent_turns=2)


async def test_a_long_conversation_is_compacted_and_its_requests_stay_bounded() -> None:
    model = Recording()
    loop = loop_with(model, POLICY)
    await converse(loop, 40)

    main = model.main()
    assert len(main) == 80 and len(model.summaries()) >= 3
    assert all(loop.answers[i].answer == f"answer to question {i}" for i in range(40))
    for request in main:
        assert_well_formed(request)
    # Bounded: a request past the budget is compacted before it is sent, and what the budget
    # counts is the previous request plus one turn, so none goes far over it.
    sizes = [prompt_tokens(r) for r in main]
    assert max(sizes) <= POLICY.max_input_tokens + 150
    unbounded = Recording()
    await converse(loop_with(unbounded, Context.unbounded()), 40)
    assert prompt_tokens(unbounded.main()[-1]) > 4 * max(sizes[-10:])
    # After a compaction the request is the instructions, the summary and the kept turns.
    after = next(r for r in main if SUMMARY_HEADER in json.dumps(r.contents))
    assert after.contents[0]["parts"][0]["text"].startswith(SUMMARY_HEADER)

    # The history keeps every turn once: the inspector and the API show them all.
    transcript = await loop.deps.store.transcript.load_transcript(CONVERSATION)
    texts = [p["text"] for c in transcript.contents if c["role"] == "user"
             for p in c["parts"] if "text" in p]
    assert texts == [f"question {i}" for i in range(40)]
    assert sum(1 for c in transcript.contents if c["role"] == "model") == 80
    compactions = [c for c in transcript.chunks if c.summary is not None]
    assert len(compactions) == len(model.summaries())


async def test_each_compaction_is_recorded_once_with_its_cost_in_the_ledger() -> None:
    model = Recording()
    loop = loop_with(model, POLICY)
    await converse(loop, 12)
    transcript = await loop.deps.store.transcript.load_transcript(CONVERSATION)
    compactions = [c for c in transcript.chunks if c.summary is not None]
    assert compactions and len(compactions) == len(model.summaries())
    for chunk in compactions:
        record = chunk.compaction or {}
        run_id, _, key = str(record["by"]).partition("/")
        (step,) = await loop.deps.store.steps.get_steps(run_id, [key])
        assert step is not None and step.result is not None
        assert step.result["compaction"]["chunk"] == chunk.index
        summary_usage = step.result["compaction"]["usage"]
        assert summary_usage["model_calls"] == 1 and summary_usage["prompt_tokens"] > 0
        # Its cost is in the step's, and its tokens in the run's.
        assert step.cost is not None and step.cost.prompt_tokens == (
            step.usage.prompt_tokens + summary_usage["prompt_tokens"])
        run = await loop.deps.store.runs.get_run(run_id)
        assert run is not None and run.usage.model_calls == 3  # two turns and the summary


async def test_a_step_after_a_compaction_reads_from_it_on_not_the_whole_history() -> None:
    """The reads of a model step stop growing with the conversation: its pointer starts at
    the last compaction's chunk, and the next step batch-gets from there."""
    model = Recording()
    loop = loop_with(model, Context(max_input_tokens=400, keep_recent_turns=2))
    # Chunks of a few turns each, so that the history spans many documents.
    import ackloop.store.transcript as store_module

    original = store_module.CHUNK_BYTES
    store_module.CHUNK_BYTES = 2048
    try:
        await converse(loop, 30)
        # A follow-up run's first step has no pointer: it lists the newest chunks back to
        # the last compaction, not the whole history.
        await loop.submit(QueryMessage(request_id="more", text="one more",
                                       conversation_id=CONVERSATION))
        db = loop.deps.store.db
        assert isinstance(db, CountingDocumentDB)
        loop._collect()
        (query,) = list(loop._queue)
        loop._queue.clear()
        await loop.deliver(*query)
        loop._collect()
        (first_step,) = list(loop._queue)
        loop._queue.clear()
        read_before = db.counters.as_dict()["docs_read"]
        await loop.deliver(*first_step)
        first_step_reads = db.counters.as_dict()["docs_read"] - read_before
        await loop.run_until_idle()
    finally:
        store_module.CHUNK_BYTES = original
    transcript = await loop.deps.store.transcript.load_transcript(CONVERSATION)
    assert len(transcript.chunks) > 10
    assert loop.answers[-1].answer == "answer to one more"
    assert first_step_reads <= 2 + 2 * VIEW_PAGE < len(transcript.chunks)
    last_run = run_id_for_request("q29")
    (step,) = await loop.deps.store.steps.get_steps(last_run, ["0000-model"])
    assert step is not None and step.result is not None
    pointer = step.result["transcript"]
    assert pointer["start"] >= transcript.chunks[transcript.start].index - 1 > 0
    assert pointer["chunks"] - pointer["start"] <= 3


@pytest.mark.parametrize("when", ["during_summary", "after_summary"])
async def test_a_compaction_killed_is_recorded_once(when: str) -> None:
    """Killed during the summary's call, the redelivery summarizes again (nothing was
    recorded); killed after its commit, the redelivery finds it and calls no summary again.
    Either way there is one compaction, counted once in the run's usage."""
    model = Recording()
    loop = loop_with(model, POLICY)
    await converse(loop, 5)
    summaries_before = len(model.summaries())
    model.die = when
    await converse(loop, 10, first=5, crash=True)
    assert model.die is None  # the kill happened
    transcript = await loop.deps.store.transcript.load_transcript(CONVERSATION)
    compactions = [c for c in transcript.chunks if c.summary is not None]
    made = len(model.summaries()) - summaries_before
    killed_calls = 1 if when == "during_summary" else 0
    assert len(compactions) == len(model.summaries()) - killed_calls
    assert made >= 1
    byes = [c.compaction["by"] for c in compactions if c.compaction]
    assert len(byes) == len(set(byes))  # no step compacted twice
    assert all(a.answer == f"answer to question {i}" for i, a in enumerate(loop.answers))
    assert len(loop.answers) == 15
    runs = [await loop.deps.store.runs.get_run(run_id_for_request(f"q{i}")) for i in range(15)]
    compacting = {str(b).partition("/")[0] for b in byes}
    for run in runs:
        assert run is not None and run.status is RunStatus.COMPLETED
        assert run.usage.model_calls == 2 + (1 if run.run_id in compacting else 0)


async def test_a_redelivered_step_after_a_compaction_sends_the_same_request() -> None:
    model = Recording()
    loop = loop_with(model, POLICY)
    await converse(loop, 8)
    assert model.summaries()
    # The next step runs, and its delivery dies after its call: the redelivery calls again.
    model.die = None
    await loop.submit(QueryMessage(request_id="again", text="question again",
                                   conversation_id=CONVERSATION))
    calls_before = len(model.requests)

    died = False
    generate = model.generate

    async def generate_then_die(request: ModelRequest) -> ModelTurn:
        nonlocal died
        turn = await generate(request)
        if not died and not is_summary_request(request.contents):
            died = True
            raise SimulatedCrash("after the call")
        return turn

    model.generate = generate_then_die  # type: ignore[method-assign]
    await loop.run_until_idle(crash=SimulatedCrash)
    sent = [r for r in model.requests[calls_before:] if not is_summary_request(r.contents)]
    assert died and len(sent) >= 2
    assert sent[0].model_dump_json() == sent[1].model_dump_json()


async def test_a_request_gemini_refuses_as_too_long_is_compacted_and_sent_once_more() -> None:
    """No budget set: Gemini's 400 for an over-long input compacts (keeping the last model
    turn) and retries once; the run answers."""
    model = Recording(refuse_over=500)
    loop = loop_with(model, Context.unbounded())
    await converse(loop, 20)
    assert [a.answer for a in loop.answers] == [f"answer to question {i}" for i in range(20)]
    assert model.summaries()
    refused = [r for r in model.main() if prompt_tokens(r) > 500]
    assert refused  # each refusal was followed by one compaction and a request that fit
    made = [r for r in model.summaries() if prompt_tokens(r) <= 500]
    assert len(refused) == len(made)
    transcript = await loop.deps.store.transcript.load_transcript(CONVERSATION)
    assert len([c for c in transcript.chunks if c.summary is not None]) == len(made)


async def test_a_request_still_too_long_after_compacting_fails_the_run_with_the_cause() -> None:
    model = Recording(refuse_over=60)
    loop = loop_with(model, Context.unbounded())
    await converse(loop, 3)
    failed = [await loop.deps.store.runs.get_run(run_id_for_request(f"q{i}")) for i in range(3)]
    last = failed[-1]
    assert last is not None and last.status is RunStatus.FAILED
    assert last.error is not None and last.error.startswith("model_input_too_long")


async def test_a_long_conversation_on_the_store_under_test(db: DocumentDB) -> None:  # noqa: F811
    """200 runs of one conversation (a question, a lookup, an answer: 400 model turns) on the
    memory store and on the Firestore emulator, under the default policy's shape with a small
    budget: every answer right, requests bounded, every turn in the history."""
    import uuid

    model = Recording()
    loop = loop_with(model, Context(max_input_tokens=1500, keep_recent_turns=4), db,
                     prefix=f"t{uuid.uuid4().hex[:10]}_")
    await converse(loop, 200)
    assert [a.answer for a in loop.answers] == [f"answer to question {i}" for i in range(200)]
    sizes = [prompt_tokens(r) for r in model.main()]
    assert max(sizes) <= 1500 + 150
    transcript = await loop.deps.store.transcript.load_transcript(CONVERSATION)
    assert sum(1 for c in transcript.contents if c["role"] == "model") == 400


def gemini_loop(server_url: str, context: Context) -> InProcessLoop:
    from ackloop.model.gemini import GeminiModel

    return loop_with(GeminiModel(api_key="k", base_url=server_url, timeout_seconds=5.0), context)


async def test_through_the_real_client_geminis_400_compacts_and_the_run_answers() -> None:
    """The real google-genai client against the fake Gemini server with an input limit: no
    budget set, the request past the limit gets Gemini's 400, the step compacts and sends
    once more under the limit, and the conversation goes on."""
    from ackloop_dev.fakes.gemini_rest import request_from_rest
    from ackloop_dev.fakes.gemini_server import FakeGeminiServer

    with FakeGeminiServer(ScriptedModel(one_lookup_per_question).decide,
                          max_input_tokens=600) as server:
        loop = gemini_loop(server.url, Context.unbounded())
        await converse(loop, 16)
        served = server.stats()["faults_served"]
        requests = [request_from_rest(r.model, r.body) for r in server.requests]
    assert [a.answer for a in loop.answers] == [f"answer to question {i}" for i in range(16)]
    summaries = [r for r in requests if is_summary_request(r.contents)]
    refused = served.get("input-limit", 0)
    assert refused >= 1 and summaries
    # Each refusal was answered by a compaction: a request that fit, or a summary of less.
    answered = [r for r in requests if prompt_tokens(r) <= 600]
    assert len(requests) - len(answered) == refused
    runs = [await loop.deps.store.runs.get_run(run_id_for_request(f"q{i}")) for i in range(16)]
    assert all(r is not None and r.status is RunStatus.COMPLETED for r in runs)


async def test_between_compactions_the_request_prefix_is_stable_so_geminis_cache_applies(
) -> None:
    """Each request after a compaction starts with the one before it (instructions, tools,
    summary, kept turns): the fake server, which reports a repeated prefix as cached as Gemini
    does, counts most of every such request cached."""
    from ackloop_dev.fakes.gemini_rest import request_from_rest
    from ackloop_dev.fakes.gemini_server import FakeGeminiServer

    with FakeGeminiServer(ScriptedModel(one_lookup_per_question).decide,
                          cache_min_tokens=32) as server:
        loop = gemini_loop(server.url, POLICY)
        await converse(loop, 14)
        bodies = [(r.model, r.body) for r in server.requests]
    requests = [request_from_rest(m, b) for m, b in bodies]
    main = [(r, b) for r, (_, b) in zip(requests, bodies, strict=True)
            if not is_summary_request(r.contents)]
    summarized = [i for i, (r, _) in enumerate(main)
                  if r.contents[0]["parts"][0].get("text", "").startswith(SUMMARY_HEADER)]
    assert len(summarized) > 6
    stable = 0
    for i in range(1, len(main)):
        before, after = main[i - 1][1]["contents"], main[i][1]["contents"]
        if after[:len(before)] == before:
            stable += 1
    # Every request repeats the previous one but for the requests right after a compaction.
    compactions = sum(1 for r in requests if is_summary_request(r.contents))
    assert stable >= len(main) - 1 - compactions
    steps = [s for i in range(14)
             for s in await loop.deps.store.steps.list_steps(run_id_for_request(f"q{i}"))
             if s.kind == "model"]
    cached = sum(s.usage.cached_tokens for s in steps)
    prompt = sum(s.usage.prompt_tokens for s in steps)
    assert cached > prompt // 2


async def test_the_chunks_before_a_compaction_keep_the_conversations_retention() -> None:
    """No model step reads the chunks before the last compaction again, so no append moves
    their expiry: the compaction gives them the horizon, and a step a day or more later gives
    it again (once), so a conversation in use loses no history to the TTL."""
    from datetime import datetime

    import ackloop.store.transcript as store_module
    from ackloop.store import DAY_SECONDS, EXPIRE_AT, Retention

    model = Recording()
    loop = loop_with(model, POLICY)
    store = loop.deps.store
    loop.deps.store = AgentStore(store.db, retention=Retention(3 * DAY_SECONDS, 3600.0))
    original = store_module.CHUNK_BYTES
    store_module.CHUNK_BYTES = 2048
    try:
        await converse(loop, 12)
        clock = loop.deps.clock
        assert isinstance(clock, ManualClock)

        async def horizons() -> dict[int, float]:
            db = loop.deps.store.db
            snaps = await db.list_all(loop.deps.store.transcript_collection(CONVERSATION))
            found = {}
            for snap in snaps:
                expires = snap.data[EXPIRE_AT]
                assert isinstance(expires, datetime)
                found[int(snap.data["index"])] = expires.timestamp()
            return found

        transcript = await loop.deps.store.transcript.load_transcript(CONVERSATION)
        first = transcript.chunks[transcript.start].index
        assert first > 2
        before = await horizons()
        for _ in range(4):  # four days of use, a question a day
            clock.advance(DAY_SECONDS + 1)
            await converse(loop, 1, first=100 + _)
        after = await horizons()
        now = clock.now()
        # Every chunk, read or not, expires the retention after the last days' use.
        assert all(h >= now - DAY_SECONDS - 2 + 3 * DAY_SECONDS for h in after.values()), (
            before, after, now)
    finally:
        store_module.CHUNK_BYTES = original


async def test_ask_and_runs_show_say_a_step_compacted_first() -> None:
    from ackloop.cli.follow import describe_step

    model = Recording()
    loop = loop_with(model, POLICY)
    await converse(loop, 8)
    transcript = await loop.deps.store.transcript.load_transcript(CONVERSATION)
    chunk = next(c for c in transcript.chunks if c.summary is not None)
    run_id, _, key = str((chunk.compaction or {})["by"]).partition("/")
    (step,) = await loop.deps.store.steps.get_steps(run_id, [key])
    assert step is not None
    record = chunk.compaction or {}
    assert describe_step(step).startswith(
        f"compacted {record['summarized']} earlier content(s) into a summary of "
        f"{record['summary_bytes']} bytes, kept {record['kept']}; model ")


async def test_through_the_real_client_a_retried_call_after_a_compaction_sends_the_same_body(
) -> None:
    """After a compaction, a model call that Gemini fails (a 503) is sent again: the fake
    server receives the same body, byte for byte as the client serialized it."""
    from ackloop_dev.fakes.gemini_rest import request_from_rest
    from ackloop_dev.fakes.gemini_server import FakeGeminiServer

    with FakeGeminiServer(ScriptedModel(one_lookup_per_question).decide) as server:
        loop = gemini_loop(server.url, POLICY)
        await converse(loop, 8)
        assert any(is_summary_request(request_from_rest(r.model, r.body).contents)
                   for r in server.requests)
        before = len(server.requests)
        server.configure_faults({"faults": "503"})
        await converse(loop, 1, first=8)
        sent = [json.dumps(r.body) for r in server.requests[before:]]
        served = server.stats()["faults_served"]
    assert served.get("503") == 1
    assert loop.answers[-1].answer == "answer to question 8"
    assert len(sent) == 3 and sent[0] == sent[1]  # the refused call, sent again, then turn 1
    assert SUMMARY_HEADER in sent[0]


BIG = "x" * 3000


class KeyedToolbox(CountingToolbox):
    """The lookup of ``question 3`` returns a large result, every other a small one."""

    async def execute(self, call: Any, context: Any) -> Any:
        from ackloop.tools.base import ToolOutcome

        self.executed[call.name] += 1
        key = call.args.get("key")
        return ToolOutcome(response={"result": BIG if key == "question 3" else f"small {key}"})


def keyed_loop(model: Recording, database: DocumentDB | None = None,
               prefix: str = "") -> InProcessLoop:
    publisher = MemoryPublisher()
    agent = Agent("default", "Answer.", KeyedToolbox({"lookup": "x"}),
                  context=Context(max_input_tokens=600, keep_recent_turns=2))
    deps = Deps(settings=Settings(lease_seconds=10.0),
                store=AgentStore(CountingDocumentDB(database or MemoryDocumentDB()), prefix),
                publisher=publisher,
                model=model, agents=AgentRegistry([agent]), clock=ManualClock(),
                owner="test-owner")
    return InProcessLoop(deps, publisher)


async def until_crash(loop: InProcessLoop) -> tuple[Any, Any]:
    """Deliver what is queued until a delivery dies; that delivery's kind and message."""
    loop._collect()
    while loop._queue:
        kind, message = loop._queue.popleft()
        try:
            outcome = await loop.deliver(kind, message)
        except SimulatedCrash:
            return kind, message
        if not outcome.acknowledged:
            loop._queue.append((kind, message))
        loop._collect()
    raise AssertionError("no delivery died")


async def compacted_then_killed(model: Recording) -> tuple[InProcessLoop, Any]:
    """Three questions answered; the fourth's lookup (a large result) pushes turn 1 past the
    budget: it compacts, and its delivery dies after the compaction's commit."""
    loop = keyed_loop(model)
    await converse(loop, 3)
    model.die = "after_summary"
    await loop.submit(QueryMessage(request_id="q3", text="question 3",
                                   conversation_id=CONVERSATION))
    kind, message = await until_crash(loop)
    assert kind == "model" and model.summaries_answered == 1
    return loop, (kind, message)


async def test_a_redelivery_that_stops_after_its_compaction_records_after_it_and_counts_it(
) -> None:
    """The step compacted and died; the run is cancelled; the redelivery ends the run without
    a call. What it records (the lookup's result) lands after the compaction, so the next run
    reads it (not "not executed"), and the summary is counted once in the run."""
    from ackloop.engine.ending import cancel_run

    model = Recording()
    loop, pending = await compacted_then_killed(model)
    run_id = run_id_for_request("q3")
    await cancel_run(loop.deps, run_id)
    loop._queue.append(pending)
    await loop.run_until_idle()
    run = await loop.deps.store.runs.get_run(run_id)
    assert run is not None and run.status is RunStatus.CANCELLED
    assert len(model.summaries()) == 1
    assert run.usage.model_calls == 2  # its turn 0 and the summary
    view = await loop.deps.store.transcript.load_transcript_view(CONVERSATION)
    assert BIG in json.dumps(view.view)  # after the compaction, where the next run reads
    asked = len(model.requests)
    await converse(loop, 1, first=4)
    follow_up = json.dumps(model.requests[asked].contents)
    assert BIG in follow_up and "not executed" not in follow_up
    assert loop.answers[-1].answer == "answer to question 4"


async def test_a_run_ended_outside_a_step_after_a_compaction_leaves_its_calls_answered(
) -> None:
    """The step compacted and died, and the run was ended outside a step (a dead letter): the
    compaction's chunk, alone at the end of the transcript, holds the kept call; the next
    run answers it from the ledger (the lookup ran), not as "not executed"."""
    from ackloop.domain.records import StopReason
    from ackloop.domain.wire import Usage
    from ackloop.engine.ending import end_run_now, run_end

    model = Recording()
    loop, _ = await compacted_then_killed(model)
    await end_run_now(loop.deps, run_id_for_request("q3"),
                      run_end(StopReason.FAILED, Usage(), error="dead-lettered"))
    asked = len(model.requests)
    await converse(loop, 1, first=4)
    follow_up = json.dumps(model.requests[asked].contents)
    assert BIG in follow_up and "not executed" not in follow_up


async def test_a_step_that_fails_after_compacting_counts_the_summary() -> None:
    model = Recording()
    loop = keyed_loop(model)
    await converse(loop, 3)
    generate = model.generate

    async def refuse_after_the_summary(request: ModelRequest) -> ModelTurn:
        turn = await generate(request)
        if model.summaries_answered and not is_summary_request(request.contents):
            raise ModelPermanentError("bad request", reason="model_invalid_request")
        return turn

    model.generate = refuse_after_the_summary  # type: ignore[method-assign]
    await converse(loop, 1, first=3)
    run = await loop.deps.store.runs.get_run(run_id_for_request("q3"))
    assert run is not None and run.status is RunStatus.FAILED
    transcript = await loop.deps.store.transcript.load_transcript(CONVERSATION)
    (record,) = [c.compaction for c in transcript.chunks if c.compaction]
    summary_tokens = record["usage"]["prompt_tokens"]
    steps = {s.key: s for s in await loop.deps.store.steps.list_steps(run.run_id)}
    failed = steps["0001-model"]
    assert failed.result is not None and failed.result["compaction"]["chunk"] == record["chunk"]
    assert failed.cost is not None and failed.cost.prompt_tokens == summary_tokens
    assert run.usage.model_calls == 2 and run.usage.prompt_tokens == (
        steps["0000-model"].usage.prompt_tokens + summary_tokens)


async def test_a_redelivery_after_its_compaction_was_committed_goes_on_from_it_without_another(
) -> None:
    """The step compacted at turn 1 (its estimate is the previous request's count plus the
    lookup's result, which a compaction does not change) and died after the compaction's commit:
    the redelivery, still over the budget by that estimate, finds the compaction made by its own
    step and goes on from it. One summary, one compaction chunk, counted once in the run and in
    the step's cost."""
    model = Recording()
    loop, pending = await compacted_then_killed(model)
    run_id = run_id_for_request("q3")
    loop._queue.append(pending)
    await loop.run_until_idle()

    run = await loop.deps.store.runs.get_run(run_id)
    assert run is not None and run.status is RunStatus.COMPLETED
    assert run.answer == "answer to question 3"
    assert len(model.summaries()) == 1
    transcript = await loop.deps.store.transcript.load_transcript(CONVERSATION)
    (record,) = [c.compaction for c in transcript.chunks if c.compaction]
    assert record["by"] == f"{run_id}/0001-model"
    assert run.usage.model_calls == 3  # its two turns and the one summary
    steps = {s.key: s for s in await loop.deps.store.steps.list_steps(run_id)}
    step = steps["0001-model"]
    assert step.result is not None and step.result["compaction"]["chunk"] == record["chunk"]
    summary_tokens = record["usage"]["prompt_tokens"]
    assert step.cost is not None and step.cost.prompt_tokens == (
        step.usage.prompt_tokens + summary_tokens)
    assert run.usage.prompt_tokens == (steps["0000-model"].usage.prompt_tokens
                                       + step.usage.prompt_tokens + summary_tokens)


async def test_a_step_that_compacts_by_its_policy_then_on_geminis_400_counts_both_summaries(
) -> None:
    """The step compacts by its policy, and Gemini still refuses its request as too long: it
    compacts again (keeping the last model turn) and sends once more. Both summaries are in its
    record, in its cost, and in its run's usage."""
    model = Recording()
    generate = model.generate
    refused = 0

    async def refuse_the_first_after_a_summary(request: ModelRequest) -> ModelTurn:
        nonlocal refused
        if (not refused and model.summaries_answered == 1
                and not is_summary_request(request.contents)):
            refused += 1
            model.requests.append(request)
            raise ModelPermanentError("The input token count exceeds the maximum",
                                      reason="model_input_too_long")
        return await generate(request)

    model.generate = refuse_the_first_after_a_summary  # type: ignore[method-assign]
    loop = loop_with(model, POLICY)
    await converse(loop, 8)
    assert refused == 1 and len(model.summaries()) >= 2
    assert all(a.answer == f"answer to question {i}" for i, a in enumerate(loop.answers))

    transcript = await loop.deps.store.transcript.load_transcript(CONVERSATION)
    first, second = [c.compaction or {} for c in transcript.chunks if c.summary is not None][:2]
    assert first["by"] == second["by"]  # one step made both
    run_id, _, key = str(first["by"]).partition("/")
    steps = {s.key: s for s in await loop.deps.store.steps.list_steps(run_id)}
    step = steps[key]
    summaries = Usage.model_validate(first["usage"]).plus(Usage.model_validate(second["usage"]))
    assert summaries.model_calls == 2
    assert step.result is not None and step.result["compaction"]["compactions"] == 2
    assert step.result["compaction"]["usage"] == summaries.model_dump(mode="json")
    assert step.cost is not None and step.cost.prompt_tokens == (
        step.usage.prompt_tokens + summaries.prompt_tokens)
    assert step.cost.output_tokens == step.usage.output_tokens + summaries.output_tokens
    run = await loop.deps.store.runs.get_run(run_id)
    assert run is not None and run.status is RunStatus.COMPLETED
    own = [s for s in steps.values() if s.kind == "model"]
    assert run.usage.model_calls == len(own) + 2
    assert run.usage.prompt_tokens == (sum(s.usage.prompt_tokens for s in own)
                                       + summaries.prompt_tokens)


async def test_a_delivery_whose_compaction_was_made_by_another_delivery_of_its_step_uses_it(
) -> None:
    """Two deliveries of the step summarize at once, and the other one's chunk is made first:
    this one's commit finds it (None), reads it, and goes on from it as its own step's. One
    compaction chunk, its summary counted once in the run (the dropped summary is not
    recorded), the step's result naming it."""
    model = Recording()
    loop = keyed_loop(model)
    await converse(loop, 3)
    store = loop.deps.store
    commit_compaction = store.transcript.commit_compaction
    raced = 0

    async def made_by_the_other_delivery(*args: Any, **kwargs: Any) -> Any:
        nonlocal raced
        raced += 1
        await commit_compaction(*args, **kwargs)  # the other delivery's, with the same record
        return None

    store.transcript.commit_compaction = made_by_the_other_delivery  # type: ignore[method-assign]
    await converse(loop, 1, first=3)
    assert raced == 1
    run_id = run_id_for_request("q3")
    run = await store.runs.get_run(run_id)
    assert run is not None and run.status is RunStatus.COMPLETED
    assert run.answer == "answer to question 3"
    transcript = await store.transcript.load_transcript(CONVERSATION)
    (record,) = [c.compaction for c in transcript.chunks if c.compaction]
    assert record["by"] == f"{run_id}/0001-model"
    assert run.usage.model_calls == 3
    (step,) = await store.steps.get_steps(run_id, ["0001-model"])
    assert step is not None and step.result is not None
    assert step.result["compaction"]["chunk"] == record["chunk"]
    assert step.cost is not None and step.cost.prompt_tokens == (
        step.usage.prompt_tokens + record["usage"]["prompt_tokens"])


async def test_a_delivery_that_took_over_from_a_zombie_uses_the_zombies_compaction(
        db: DocumentDB) -> None:  # noqa: F811
    """A delivery that took over an expired lease while the first (a zombie) still
    summarized: the zombie's chunk is committed first, so this delivery's commit is refused
    (by the store as it answers: the chunk exists, and the last chunk's fence moved). It reads
    the zombie's chunk and goes on from it, acknowledged at once on either store: one
    compaction chunk, the step recorded by this delivery's first attempt."""
    model = Recording()
    loop = keyed_loop(model, db, f"t{uuid.uuid4().hex[:10]}_")
    await converse(loop, 3)
    store = loop.deps.store
    commit_compaction = store.transcript.commit_compaction

    async def after_the_zombies(*args: Any, **kwargs: Any) -> Any:
        await commit_compaction(*args, **kwargs)  # the zombie's, of the same step
        return await commit_compaction(*args, **kwargs)  # this delivery's, as the store answers

    store.transcript.commit_compaction = after_the_zombies  # type: ignore[method-assign]
    delivered = len(loop.log)
    await converse(loop, 1, first=3)
    assert [e.outcome.status for e in loop.log[delivered:] if not e.outcome.acknowledged] == []
    run_id = run_id_for_request("q3")
    run = await store.runs.get_run(run_id)
    assert run is not None and run.answer == "answer to question 3"
    transcript = await store.transcript.load_transcript(CONVERSATION)
    (record,) = [c.compaction for c in transcript.chunks if c.compaction]
    assert record["by"] == f"{run_id}/0001-model"
    (step,) = await store.steps.get_steps(run_id, ["0001-model"])
    assert step is not None and step.attempts == 1
    assert step.result is not None and step.result["compaction"]["chunk"] == record["chunk"]
