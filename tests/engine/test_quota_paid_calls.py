"""Every paid call of a model step meets its limits, not only the step's own: a compaction's
summary takes its place under the model's quota (a 429 on it is a wait, not a redelivery)
and is made in the step's concurrency slot; and a later turn reserves the input tokens Gemini
counted for the run's previous request, not a whole-request guess.

On the in-memory engine with the real dispatch, a manual clock and a memory waker."""

from __future__ import annotations

from typing import Any

from ackloop.agents.agent import Agent, AgentRegistry
from ackloop.bus.memory import MemoryPublisher
from ackloop.bus.wakes import MemoryWaker
from ackloop.config.concurrency import ConcurrencyLimit
from ackloop.config.quotas import ModelQuota
from ackloop.config.settings import Settings
from ackloop.config.spend import SpendLimit
from ackloop.docdb.counting import CountingDocumentDB
from ackloop.docdb.memory import MemoryDocumentDB
from ackloop.domain.clock import ManualClock
from ackloop.domain.context_window import Context, is_summary_request
from ackloop.domain.errors import ModelRetryableError
from ackloop.domain.keys import StepKey, run_id_for_request
from ackloop.domain.records import RunStatus
from ackloop.domain.wire import QueryMessage
from ackloop.engine import quota, quota_log
from ackloop.engine.deps import Deps
from ackloop.model.base import ModelRequest, ModelTurn
from ackloop.model.scripted import ScriptedModel
from ackloop.model.turns import calls_turn, estimate_usage, text_turn
from ackloop.store import AgentStore
from ackloop.testing.inprocess import InProcessLoop
from tests.engine.fakes import CountingToolbox
from tests.engine.test_compaction import CONVERSATION, RESULT, Recording
from tests.engine.test_quota import most_in_a_window

POLICY = Context(max_input_tokens=400, keep_recent_turns=2)


class Timed(Recording):
    """:class:`Recording` (a lookup per question, then its answer; summaries answered), noting
    when each call was made and what the store held for it then; ``refuse_summary`` answers
    the first summary's request 429."""

    def __init__(self, loop: list[InProcessLoop], refuse_summary: bool = False) -> None:
        super().__init__()
        self.loop, self.refuse_summary = loop, refuse_summary
        self.at: list[float] = []
        self.summary_at: list[float] = []
        self.refused_at: list[float] = []
        self.seen: list[tuple[ModelRequest, Any]] = []

    @property
    def deps(self) -> Deps:
        return self.loop[0].deps

    async def generate(self, request: ModelRequest) -> ModelTurn:
        now = self.deps.clock.now()
        if is_summary_request(request.contents):
            if self.refuse_summary:
                self.refuse_summary = False
                self.refused_at.append(now)
                raise ModelRetryableError("Gemini answered 429 RESOURCE_EXHAUSTED", status=429,
                                          retry_after=0.0)
            self.summary_at.append(now)
        self.at.append(now)
        self.seen.append((request, await self.observed()))
        return await super().generate(request)

    async def observed(self) -> Any:
        return None


def _loop(timed: Timed, **settings: Any) -> InProcessLoop:
    publisher = MemoryPublisher()
    agent = Agent("default", "Answer from the lookup.", CountingToolbox({"lookup": RESULT}),
                  context=POLICY)
    deps = Deps(settings=Settings(lease_seconds=10.0, **settings),
                store=AgentStore(CountingDocumentDB(MemoryDocumentDB())),
                publisher=publisher, model=timed, agents=AgentRegistry([agent]),
                clock=ManualClock(), owner="test-owner")
    deps.waker = MemoryWaker()
    loop = InProcessLoop(deps, publisher)
    timed.loop.append(loop)
    return loop


async def _converse(loop: InProcessLoop, questions: int) -> None:
    for i in range(questions):
        await loop.submit(QueryMessage(request_id=f"q{i}", text=f"question {i}",
                                       conversation_id=CONVERSATION))
        await loop.run_until_idle(wake=True)
        assert all(o.outcome.acknowledged for o in loop.log), [
            o for o in loop.log if not o.outcome.acknowledged]


async def test_a_compactions_summary_takes_its_place_under_the_quota() -> None:
    model = Timed([])
    loop = _loop(model, model_quotas=[ModelQuota(model="*", rpm=5, headroom=0.0)])
    await _converse(loop, 8)
    assert model.summary_at, "the conversation compacted"
    # Every call, the summaries included, fits the quota's sliding minute.
    assert most_in_a_window(model.at) <= 5
    for i in range(8):
        run = await loop.deps.store.runs.get_run(run_id_for_request(f"q{i}"))
        assert run is not None and run.status is RunStatus.COMPLETED, run
        assert run.answer == f"answer to question {i}"


async def test_a_429_on_a_summary_pauses_the_quota_and_the_step_waits() -> None:
    model = Timed([], refuse_summary=True)
    loop = _loop(model, model_quotas=[ModelQuota(model="*", rpm=600, mode="adaptive")])
    await _converse(loop, 8)  # every delivery acknowledged: no 503, no redelivery
    assert len(model.refused_at) == 1 and model.summary_at
    assert model.summary_at[0] - model.refused_at[0] >= 1.0  # "0s" is a second, never "now"
    transcript = await loop.deps.store.transcript.load_transcript(CONVERSATION)
    assert len([c for c in transcript.chunks if c.summary is not None]) == len(model.summary_at)
    assert sum(1 for c in transcript.contents if c["role"] == "model") == 16


class SlotWatching(Timed):
    """Notes who held the model steps' slots when each call was made."""

    async def observed(self) -> Any:
        return [h["name"] for _, doc in await self.deps.store.quotas.listed("slots")
                for h in doc.get("holders", [])]


async def test_a_summary_is_made_in_the_steps_concurrency_slot() -> None:
    model = SlotWatching([])
    loop = _loop(model, concurrency_limits=[
        ConcurrencyLimit(steps="model", key="owner", limit=1)])
    await _converse(loop, 8)
    summaries = [held for request, held in model.seen if is_summary_request(request.contents)]
    assert summaries, "the conversation compacted"
    # Every call, the summaries included, made by a step holding the owner's one slot.
    assert all(len(held) == 1 and "-model" in held[0] for _, held in model.seen), model.seen


class Reserved(Timed):
    """Notes the input tokens the quota reserved for each call when it was made."""

    async def observed(self) -> Any:
        shards = [quota.shard_id(self.deps.settings.model_quotas[0],
                                 run_id_for_request(f"q{i}")) for i in range(8)]
        entries = []
        for shard in set(shards):
            entries += (await quota_log.read(self.deps.store, shard,
                                             self.deps.clock.now())).entries
        return entries


async def test_a_later_turn_reserves_what_gemini_counted_for_the_runs_previous_request(
        ) -> None:
    model = Reserved([])
    loop = _loop(model, model_quotas=[ModelQuota(model="*", tpm=100_000)])
    await loop.submit(QueryMessage(request_id="q0", text="question 0",
                                   conversation_id=CONVERSATION))
    await loop.run_until_idle(wake=True)
    (first, _), (second, second_entries) = model.seen
    run_id = run_id_for_request("q0")
    reserved = {e.holder: e.tokens for e in second_entries}[f"{run_id}/{StepKey.model(1)}"]
    counted = estimate_usage(second, []).prompt_tokens
    assert reserved >= counted  # never reserved short of what Gemini counts
    assert reserved < quota.request_tokens(second)  # and closer than the whole-request guess
    previous = estimate_usage(first, []).prompt_tokens
    assert reserved >= previous  # the previous request, counted, is in it


async def test_a_summarys_cost_counts_against_the_spend_limits() -> None:
    model = Timed([])
    loop = _loop(model, model="gemini-3-flash-preview",
                 spend_limits=[SpendLimit(key="owner", period="day", usd=100.0)])
    await _converse(loop, 8)
    assert model.summary_at, "the conversation compacted"
    ((_, spent),) = await loop.deps.store.quotas.listed("spend")
    assert spent["calls"] == len(model.at)  # every paid call, the summaries included
    runs = [await loop.deps.store.runs.get_run(run_id_for_request(f"q{i}")) for i in range(8)]
    # The ledger's cost of the runs (their summaries counted in the step that made them).
    assert abs(spent["usd"] - sum(r.cost.gemini_usd for r in runs if r)) < 1e-9


LONG_RESULT = " ".join(["lorem ipsum dolor sit amet"] * 600)
"""A tool's answer of 3,000 words: at about six bytes a word, twice as long in bytes as the
default estimate's three bytes a token supposes when the model counts a word as a token."""


class Long(Reserved):
    """Calls the lookup three times, each answering :data:`LONG_RESULT`, then answers."""

    def __init__(self, loop: list[InProcessLoop]) -> None:
        super().__init__(loop)
        self.model = ScriptedModel(self.turn)

    @staticmethod
    def turn(request: ModelRequest) -> ModelTurn:
        turns = sum(1 for c in request.contents if c["role"] == "model")
        if turns < 3:
            return calls_turn([("lookup", {"key": str(turns)})], request=request)
        return text_turn("done", request=request)


async def test_a_long_turn_reserves_at_the_bytes_per_token_the_model_counted() -> None:
    model = Long([])
    publisher = MemoryPublisher()
    agent = Agent("default", "Look it up.", CountingToolbox({"lookup": LONG_RESULT}))
    loop = InProcessLoop(Deps(
        settings=Settings(lease_seconds=10.0, model_quotas=[ModelQuota(model="*", tpm=10**6)]),
        store=AgentStore(MemoryDocumentDB()), publisher=publisher, model=model,
        agents=AgentRegistry([agent]), clock=ManualClock(), owner="test-owner"), publisher)
    model.loop.append(loop)
    await loop.submit(QueryMessage(request_id="q0", text="question 0"))
    await loop.run_until_idle(wake=True)
    run_id = run_id_for_request("q0")
    for turn in (2, 3):  # after a turn that counted a long tool result
        request, entries = model.seen[turn]
        reserved = {e.holder: e.tokens for e in entries}[f"{run_id}/{StepKey.model(turn)}"]
        counted = estimate_usage(request, []).prompt_tokens
        # Never short of what the model counts, and within a seventh of it (the default
        # estimate of the new result alone would reserve about 3,000 tokens too many).
        assert counted <= reserved <= counted * 8 / 7, (turn, reserved, counted)
