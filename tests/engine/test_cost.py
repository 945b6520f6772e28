"""The cost ledger: what each step spent, recorded in its commit, and the run's and the
conversation's roll-ups, on the in-memory store and on the Firestore emulator."""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import replace

import httpx
import pytest

from ackloop.agents.agent import Agent, AgentRegistry
from ackloop.api.app import create_app
from ackloop.bus.memory import MemoryPublisher, Published
from ackloop.config.settings import Settings
from ackloop.docdb.base import DocumentDB
from ackloop.docdb.counting import CountingDocumentDB, delivery_counters
from ackloop.docdb.memory import MemoryDocumentDB
from ackloop.domain.clock import ManualClock
from ackloop.domain.cost import PRICES, Cost, Counts, Spend, price, pubsub_billed_bytes
from ackloop.domain.keys import run_id_for_request
from ackloop.domain.records import RunLimits, RunRecord, RunStatus, StepRecord
from ackloop.domain.wire import QueryMessage, Usage
from ackloop.engine.deps import Deps
from ackloop.engine.spend import rolled_up
from ackloop.model.base import ModelRequest, ModelTurn
from ackloop.model.scripted import ScriptedModel
from ackloop.model.turns import calls_turn, text_turn
from ackloop.store import AgentStore
from ackloop.testing.inprocess import InProcessLoop
from tests.engine.fakes import CountingToolbox, make_loop
from tests.engine.test_guarantees import deliver, deliver_all, take
from tests.engine.test_holes import dead_letter
from tests.store.conftest import db  # noqa: F401  (the fixture: memory, then the emulator)

TOKENS = Usage(model_calls=1, prompt_tokens=1000, output_tokens=200, total_tokens=1200)


def with_tokens(turn: ModelTurn) -> ModelTurn:
    return turn.model_copy(update={"usage": TOKENS})


def tool_then_answer(calls: int = 1) -> ScriptedModel:
    """Turn 0 asks for ``calls`` lookups; turn 1 answers. Each turn uses :data:`TOKENS`."""
    return ScriptedModel.from_turns([
        with_tokens(calls_turn([("lookup", {"key": str(i)}) for i in range(calls)])),
        with_tokens(text_turn("done")),
    ])


def loop_on(database: DocumentDB, model: ScriptedModel) -> InProcessLoop:
    publisher = MemoryPublisher()
    deps = Deps(
        settings=Settings(lease_seconds=10.0),
        store=AgentStore(CountingDocumentDB(database), f"t{uuid.uuid4().hex[:10]}_"),
        publisher=publisher, model=model,
        agents=AgentRegistry([Agent("default", "Be brief.", CountingToolbox({"lookup": "42"}))]),
        clock=ManualClock(), owner="test-owner",
    )
    return InProcessLoop(deps, publisher)


def counted(loop: InProcessLoop) -> CountingDocumentDB:
    counting = loop.deps.store.db
    assert isinstance(counting, CountingDocumentDB)
    return counting


def assert_sum(total: Cost, parts: list[Cost | None]) -> None:
    """``total`` is the roll-up of ``parts``: counts exactly, dollars to float rounding."""
    expected = Cost.total(parts)
    for name in ("prompt_tokens", "output_tokens", "firestore_reads", "firestore_writes",
                 "pubsub_bytes", "requests"):
        assert getattr(total, name) == getattr(expected, name), name
    for name in ("usd", "gemini_usd", "firestore_usd", "pubsub_usd", "cloud_run_usd",
                 "request_seconds"):
        assert getattr(total, name) == pytest.approx(getattr(expected, name)), name


async def test_a_runs_cost_is_its_ingest_and_its_steps_and_counts_every_document_op(
    db: DocumentDB,  # noqa: F811
) -> None:
    loop = loop_on(db, tool_then_answer())
    await loop.submit(QueryMessage(request_id="cost-1", text="go"))
    await loop.run_until_idle()
    seen = counted(loop).counters.as_dict()  # before the test's own reads

    run = await loop.deps.store.runs.get_run(run_id_for_request("cost-1"))
    assert run is not None and run.status is RunStatus.COMPLETED and run.cost is not None
    steps = await loop.deps.store.steps.list_steps(run.run_id)
    assert [s.key for s in steps] == ["0000-model", "0000-tool-000", "0001-model"]
    assert all(s.cost is not None for s in steps) and run.ingest_cost is not None
    assert_sum(run.cost, [run.ingest_cost, *(s.cost for s in steps)])
    # Every read and write the run's deliveries made is in some step (or the ingest).
    assert run.cost.firestore_reads == seen["docs_read"]
    assert run.cost.firestore_writes == seen["docs_written"]
    assert run.cost.requests == 4  # the query and three steps
    assert (run.cost.prompt_tokens, run.cost.output_tokens) == (2000, 400)
    per = PRICES.gemini_price(run.model)
    assert per is not None and run.model == "gemini-3-flash-preview"
    assert run.cost.gemini_usd == pytest.approx(
        (2000 * per.input_per_million + 400 * per.output_per_million) / 1e6)
    assert run.cost.usd == pytest.approx(run.cost.gemini_usd + run.cost.firestore_usd
                                         + run.cost.pubsub_usd + run.cost.cloud_run_usd)
    assert run.cost.price_table == PRICES.date
    tool = steps[1].cost
    assert tool is not None and tool.gemini_usd == 0 and tool.prompt_tokens == 0

    # Its own conversation has no document: the run stands for it, with the same figures.
    assert await loop.deps.store.runs.get_conversation_snapshot(run.conversation_id) is None
    conversation = await loop.deps.store.runs.get_conversation(run.conversation_id)
    assert conversation is not None and conversation.cost is not None
    assert conversation.cost.usd == pytest.approx(run.cost.usd)
    assert conversation.usage.model_calls == 2


async def test_a_conversation_adds_up_the_cost_of_each_of_its_runs() -> None:
    loop = loop_on(MemoryDocumentDB(), ScriptedModel.from_turns(
        [with_tokens(text_turn("one")), with_tokens(text_turn("two"))]))
    for n in (1, 2):
        await loop.submit(QueryMessage(request_id=f"conv-{n}", text="go", conversation_id="c1"))
        await loop.run_until_idle()
    runs = [await loop.deps.store.runs.get_run(run_id_for_request(f"conv-{n}")) for n in (1, 2)]
    costs = [r.cost for r in runs if r is not None]
    conversation = await loop.deps.store.runs.get_conversation_snapshot("c1")
    assert conversation is not None and len(costs) == 2
    assert_sum(Cost.model_validate(conversation.data["cost"]), list(costs))
    assert conversation.data["usage"]["model_calls"] == 2


async def test_a_model_steps_pubsub_bytes_are_the_message_it_received_and_its_outbox() -> None:
    loop = loop_on(MemoryDocumentDB(), tool_then_answer(calls=3))
    await loop.submit(QueryMessage(request_id="bytes", text="go"))
    (first,) = await deliver_all(loop, take(loop))
    tools = await deliver_all(loop, [first])
    assert len(tools) == 3

    (step,) = await loop.deps.store.steps.get_steps(run_id_for_request("bytes"), ["0000-model"])
    assert step is not None and step.cost is not None
    assert step.cost.pubsub_bytes == pubsub_billed_bytes(len(first.data)) + sum(
        pubsub_billed_bytes(len(m.data)) for m in tools)
    assert step.cost.pubsub_bytes >= 4 * 1000  # each message billed at least 1,000 bytes


async def test_get_run_shows_usage_and_cost_while_the_run_is_in_flight() -> None:
    loop = loop_on(MemoryDocumentDB(), tool_then_answer())

    async def deps() -> Deps:
        return loop.deps

    transport = httpx.ASGITransport(app=create_app(loop.deps.settings, deps=deps))
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as api:
        created = await api.post("/runs", json={"text": "go"}, headers={"Idempotency-Key": "fly"})
        run_id = created.json()["run_id"]
        (first,) = take(loop)
        await deliver(loop, first)  # the first model step only: the run is still running
        body = (await api.get(f"/runs/{run_id}")).json()
        assert body["status"] == "running"
        assert body["usage"]["model_calls"] == 1 and body["usage"]["prompt_tokens"] == 1000
        assert body["cost"]["prompt_tokens"] == 1000 and body["cost"]["gemini_usd"] > 0
        assert body["cost"]["requests"] == 2  # the API's ingest and the model step
        (model_step,) = body["steps"]
        assert model_step["cost"]["output_tokens"] == 200
        assert "trace_id" in body

        await loop.run_until_idle()
        done = (await api.get(f"/runs/{run_id}")).json()
        assert done["status"] == "completed" and done["usage"]["model_calls"] == 2
        assert done["cost"]["prompt_tokens"] == 2000
        assert done["cost"]["usd"] == pytest.approx(sum(
            s["cost"]["usd"] for s in done["steps"]) + (await _ingest_usd(loop, run_id)))


async def _ingest_usd(loop: InProcessLoop, run_id: str) -> float:
    run = await loop.deps.store.runs.get_run(run_id)
    assert run is not None and run.ingest_cost is not None
    return run.ingest_cost.usd


async def test_a_dead_lettered_run_counts_the_model_step_that_completed() -> None:
    """The run's usage comes from its steps, not from the dead letter: its model step's call
    and tokens are in it, in the answer message and in its cost."""
    loop = loop_on(MemoryDocumentDB(), tool_then_answer())
    await loop.submit(QueryMessage(request_id="dl-usage", text="go"))
    (first,) = await deliver_all(loop, take(loop))
    (tool,) = await deliver_all(loop, [first])
    outcome = await dead_letter(loop, tool)  # the tool step never got a delivery through
    assert outcome.body["run_failed"] is True

    run = await loop.deps.store.runs.get_run(run_id_for_request("dl-usage"))
    assert run is not None and run.status is RunStatus.FAILED
    assert run.usage.model_calls == 1 and run.usage.prompt_tokens == 1000
    assert run.steps_total == 1
    assert run.cost is not None and run.cost.prompt_tokens == 1000
    steps = await loop.deps.store.steps.list_steps(run.run_id)
    assert_sum(run.cost, [run.ingest_cost, *(s.cost for s in steps)])
    (answer,) = [m for m in take(loop) if m.topic == loop.deps.settings.answers_topic]
    assert '"model_calls":1' in answer.data.decode()


async def test_run_finished_is_logged_once_even_when_the_last_step_is_redelivered(
    caplog: pytest.LogCaptureFixture,
) -> None:
    loop = loop_on(MemoryDocumentDB(), tool_then_answer())
    caplog.set_level(logging.INFO, logger="ackloop.engine.ending")
    await loop.submit(QueryMessage(request_id="once", text="go"))
    await loop.run_until_idle(duplicate_every=True)  # every message delivered twice
    last: Published = loop.log[-1].message
    await deliver(loop, last)  # and the last step once more

    finished = [r for r in caplog.records if r.getMessage() == "run finished"]
    assert len(finished) == 1
    fields = finished[0].__dict__["fields"]
    run = await loop.deps.store.runs.get_run(run_id_for_request("once"))
    assert run is not None and run.cost is not None
    assert fields["run_id"] == run.run_id and fields["status"] == "completed"
    assert fields["stop_reason"] == "answered" and fields["steps"] == 3
    assert fields["agent"] == "default" and fields["conversation_id"] == run.conversation_id
    assert fields["usage"]["prompt_tokens"] == 2000
    assert fields["cost"]["usd"] == pytest.approx(run.cost.usd)
    assert fields["elapsed_seconds"] >= 0


async def test_concurrent_deliveries_count_their_own_document_operations() -> None:
    counting = CountingDocumentDB(MemoryDocumentDB())
    gate = asyncio.Event()

    async def delivery(reads: int) -> int:
        with delivery_counters() as mine:
            for i in range(reads):
                await counting.get_all([f"c/{reads}-{i}"])
                if i == 0:
                    await gate.wait()  # the other delivery reads in between
            return mine.docs_read

    first = asyncio.create_task(delivery(3))
    second = asyncio.create_task(delivery(5))
    await asyncio.sleep(0)
    gate.set()
    assert await asyncio.gather(first, second) == [3, 5]
    assert counting.counters.docs_read == 8


def test_prices_are_the_tables_and_an_unlisted_model_is_named_not_priced() -> None:
    cost = price(Spend(model="gemini-2.5-flash-001", prompt_tokens=1_000_000,
                       output_tokens=1_000_000, firestore_reads=100_000,
                       firestore_writes=100_000, pubsub_bytes=2**40, request_seconds=10.0,
                       vcpu=1.0, memory_gib=0.5))
    assert cost.gemini_usd == pytest.approx(0.30 + 2.50)
    assert cost.firestore_usd == pytest.approx(0.03 + 0.09)
    assert cost.pubsub_usd == pytest.approx(40.0)
    assert cost.cloud_run_usd == pytest.approx(0.40 / 1e6 + 10 * (0.000024 + 0.5 * 0.0000025))
    unknown = price(Spend(model="my-tuned-model", prompt_tokens=10))
    assert unknown.gemini_usd == 0 and unknown.unpriced_models == ["my-tuned-model"]


@pytest.mark.parametrize(("cost", "wait_cost", "usd"), [
    (None, None, 1.5),  # a step in flight: nothing recorded yet
    (None, 0.25, 1.75),  # a call that waits: the delivery that recorded its wait
    (0.75, 0.25, 2.25),  # completed: its cost has added its wait already
    (0.75, None, 2.25),
])
def test_a_runs_roll_up_counts_each_step_once_and_a_waiting_calls_recorded_wait(
    cost: float | None, wait_cost: float | None, usd: float,
) -> None:
    """A run ended outside a step (dead letter, sweeper) while a call waits rolls its cost up
    from its steps: the wait's delivery is spent, recorded on the step, and counted once."""
    steps = [StepRecord(key="0000-model", kind="model", name="m", turn=0,
                        cost=Cost(usd=1.0, requests=1)),
             StepRecord(key="0000-tool-000", kind="tool", name="t", turn=0,
                        cost=Cost(usd=cost, requests=1) if cost is not None else None,
                        wait_cost=Cost(usd=wait_cost) if wait_cost is not None else None)]
    run = RunRecord(run_id="r", request_id="r", request_hash="h", conversation_id="r",
                    agent="a", text="t", model="m", created_at=0.0,
                    limits=RunLimits(max_steps=1, max_seconds=1, max_tool_calls=1),
                    ingest_cost=Cost(usd=0.5, requests=1))
    assert rolled_up(run, steps).usd == pytest.approx(usd)


@pytest.mark.parametrize("conversation_id", [None, "c-redrive"])
async def test_a_redriven_run_counts_each_step_once_in_its_cost_and_its_conversation(
    conversation_id: str | None,
) -> None:
    """R3: the dead letter ends the run, writing its cost and adding it to the conversation;
    after the redrive, the run's end wrote its total and added it to the conversation again.
    Now the run's cost is its ingest and its steps, each once, and the conversation's is the
    run's (for a conversation of its own, which has no document, and a named one, which has)."""
    from ackloop.engine.redrive import redrive
    from tests.engine.test_guarantees import deliver_all, take
    from tests.engine.test_holes import dead_letter

    loop = loop_on(MemoryDocumentDB(), tool_then_answer())
    await loop.submit(QueryMessage(request_id="redriven", text="go",
                                   conversation_id=conversation_id))
    pending = take(loop)
    while [m.attributes.get("step") for m in pending] != ["0001-model"]:
        pending = await deliver_all(loop, pending)  # the query (if queued), model, tool
    assert (await dead_letter(loop, pending[0], "dl-redrive")).acknowledged
    store = loop.deps.store
    run_id = run_id_for_request("redriven")
    failed = await store.runs.get_run(run_id)
    assert failed is not None and failed.status is RunStatus.FAILED

    done = await redrive(store, loop.publisher, loop.deps.settings, loop.deps.clock)
    assert [d.outcome for d in done] == ["redriven"]
    await loop.run_until_idle()

    run = await store.runs.get_run(run_id)
    assert run is not None and run.status is RunStatus.COMPLETED and run.cost is not None
    steps = await store.steps.list_steps(run_id)
    assert [s.key for s in steps] == ["0000-model", "0000-tool-000", "0001-model"]
    assert_sum(run.cost, [run.ingest_cost, *(s.cost for s in steps)])
    assert run.cost.requests == 4 and run.usage.model_calls == 2
    conversation = await store.runs.get_conversation(run.conversation_id)
    assert conversation is not None and conversation.cost is not None
    assert conversation.usage == run.usage
    assert_sum(conversation.cost, [run.cost])


def test_tokens_from_geminis_cache_are_priced_at_the_cached_rate() -> None:
    """Of 1M prompt tokens, 800k served from the cache: those at the context-caching price
    (a tenth of the input price for gemini-2.5-flash), the other 200k at the input price."""
    full = price(Spend(model="gemini-2.5-flash", prompt_tokens=1_000_000, output_tokens=0))
    cached = price(Spend(model="gemini-2.5-flash", prompt_tokens=1_000_000, output_tokens=0,
                         cached_tokens=800_000))
    assert full.gemini_usd == pytest.approx(0.30)
    assert cached.gemini_usd == pytest.approx(0.2 * 0.30 + 0.8 * 0.03)
    assert cached.cached_tokens == 800_000 and cached.prompt_tokens == 1_000_000
    # A count larger than the prompt's (a malformed answer) is capped at the prompt.
    assert price(Spend(model="gemini-2.5-flash", prompt_tokens=10, cached_tokens=50)
                 ).gemini_usd == pytest.approx(10 * 0.03 / 1e6)
    for name, per in PRICES.gemini.items():
        assert 0 < per.cached_input_per_million < per.input_per_million, name
    # Rolled up, the cached count is summed like the others.
    assert Cost.total([cached, cached]).cached_tokens == 1_600_000


def test_a_usage_or_a_cost_without_cache_or_thinking_is_stored_as_before() -> None:
    """The new parts are left out when empty: a step message or a step's cost grows only by
    what a model reported."""
    plain = Usage(model_calls=1, prompt_tokens=5, output_tokens=2, total_tokens=7)
    assert set(plain.model_dump(mode="json")) == {"model_calls", "tool_calls", "prompt_tokens",
                                                   "output_tokens", "total_tokens"}
    reported = plain.model_copy(update={"cached_tokens": 3, "thinking_tokens": 1})
    assert reported.model_dump(mode="json")["cached_tokens"] == 3
    assert Usage.model_validate(reported.model_dump(mode="json")) == reported
    assert reported.plus(reported).cached_tokens == 6
    assert "cached_tokens" not in Cost(usd=1.0).model_dump(mode="json")
    assert "children_usd" not in Cost(usd=1.0).model_dump(mode="json")
    assert Cost.model_validate(Cost(cached_tokens=4).model_dump(mode="json")).cached_tokens == 4


async def test_a_model_step_records_the_tokens_gemini_served_from_its_cache() -> None:
    """Through the real google-genai client against the fake Gemini server, which reports a
    repeated request prefix as cached (``cachedContentTokenCount``): the second model step
    repeats the first one's instructions, tools and question, so its usage counts them
    cached, and its cost prices them at the cached rate."""
    from ackloop.model.gemini import GeminiModel
    from ackloop_dev.fakes.gemini_rest import prompt_tokens, request_from_rest
    from ackloop_dev.fakes.gemini_server import FakeGeminiServer

    def script(request: ModelRequest) -> ModelTurn:
        if len(request.contents) == 1:
            return calls_turn([("lookup", {"key": "k"})], request=request)
        return text_turn("found it", request=request)

    with FakeGeminiServer(script, cache_min_tokens=1) as server:
        model = GeminiModel(api_key="k", base_url=server.url, timeout_seconds=5.0)
        loop = make_loop(model, CountingToolbox({"lookup": "v"}))
        loop.deps = replace(loop.deps, settings=loop.deps.settings.model_copy(
            update={"model": "gemini-2.5-flash"}))
        await loop.submit(QueryMessage(request_id="cached", text="look it up"))
        await loop.run_until_idle()
        requests = server.requests
    assert loop.answers[0].answer == "found it"
    steps = {s.key: s for s in await loop.deps.store.steps.list_steps(run_id_for_request("cached"))}
    first, second = steps["0000-model"], steps["0001-model"]
    assert first.usage.cached_tokens == 0 and second.usage.prompt_tokens > 0
    # What the second request repeats of the first: its instructions, tools and question.
    asked = request_from_rest(requests[1].model, requests[1].body)
    repeated = prompt_tokens(asked.model_copy(update={"contents": asked.contents[:1]}))
    assert second.usage.cached_tokens == repeated > 0
    assert second.cost is not None and second.cost.cached_tokens == repeated
    per = PRICES.gemini["gemini-2.5-flash"]
    uncached = second.usage.prompt_tokens - second.usage.cached_tokens
    assert second.cost.gemini_usd == pytest.approx(
        (uncached * per.input_per_million + second.usage.cached_tokens
         * per.cached_input_per_million + second.usage.output_tokens
         * per.output_per_million) / 1e6)


async def test_a_request_past_the_models_input_limit_fails_the_run_with_that_cause() -> None:
    """Gemini's 400 for an over-long input, through the real client: the run fails at once
    (asking again cannot help) with a reason of its own and Gemini's words as the cause."""
    from ackloop.model.gemini import GeminiModel
    from ackloop_dev.fakes.gemini_server import FakeGeminiServer

    with FakeGeminiServer(lambda r: text_turn("never", request=r), max_input_tokens=5) as server:
        model = GeminiModel(api_key="k", base_url=server.url, timeout_seconds=5.0)
        loop = make_loop(model, CountingToolbox({}))
        await loop.submit(QueryMessage(request_id="long", text="a question far too long for "
                                       "a model that takes five tokens"))
        await loop.run_until_idle()
        served = server.stats()["faults_served"]
    run = await loop.deps.store.runs.get_run(run_id_for_request("long"))
    assert run is not None and run.status is RunStatus.FAILED
    assert run.error is not None and run.error.startswith("model_input_too_long")
    assert "exceeds the maximum number of tokens allowed (5)" in run.error
    assert served == {"input-limit": 1}  # failed once, not retried


def test_a_spend_carries_its_costs_counts_under_their_names_and_types() -> None:
    # A Spend and its Cost share one declaration of the counts: price copies each by name.
    pricing_only = {"model", "vcpu", "memory_gib"}
    assert Spend.model_fields.keys() - pricing_only == Counts.model_fields.keys()
    assert Counts.model_fields.keys() <= Cost.model_fields.keys()
    counts = {name: 7 for name in Counts.model_fields}
    cost = price(Spend(model="gemini-2.5-flash", **counts))
    assert {name: getattr(cost, name) for name in counts} == counts


def test_a_spend_is_one_request_and_a_cost_keeps_its_document_order() -> None:
    # The stored cost's keys keep the order they had before the counts were shared.
    assert price(Spend()).requests == 1
    assert list(Cost.model_fields)[:6] == [
        "usd", "gemini_usd", "firestore_usd", "pubsub_usd", "cloud_run_usd", "prompt_tokens"]
    assert "cached_tokens" not in Cost().model_dump()
