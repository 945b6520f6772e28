"""A compaction is made once and paid once: concurrent deliveries of a compacting step make one
summary and record the step once, with no delivery answered for redelivery (on the memory store
and on the Firestore emulator); the summary's request starts as the agent's own, so Gemini's
cache serves that prefix; and a summary counts against the run's ``max_steps``."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from ackloop.agents.agent import Agent, AgentRegistry
from ackloop.bus.memory import MemoryPublisher
from ackloop.config.settings import Settings
from ackloop.docdb.base import DocumentDB
from ackloop.docdb.counting import CountingDocumentDB
from ackloop.domain.clock import SystemClock
from ackloop.domain.context_window import Context, is_summary_request
from ackloop.domain.keys import run_id_for_request
from ackloop.domain.records import StepStatus, StopReason
from ackloop.domain.wire import QueryMessage
from ackloop.engine.deps import Deps
from ackloop.model.base import ModelRequest, ModelTurn
from ackloop.store import AgentStore
from ackloop.testing.inprocess import InProcessLoop
from tests.engine.fakes import CountingToolbox
from tests.engine.test_compaction import CONVERSATION, RESULT, Recording, loop_with
from tests.store.conftest import db  # noqa: F401  (the fixture: memory, then the emulator)

POLICY = Context(max_input_tokens=400, keep_recent_turns=2)


class Overlapping(Recording):
    """:class:`Recording`, each call taking a moment, so two deliveries of a step overlap."""

    async def generate(self, request: ModelRequest) -> ModelTurn:
        await asyncio.sleep(0.05)
        return await super().generate(request)


def _loop(model: Recording, database: DocumentDB, prefix: str,
          max_steps: int | None = None, context: Context = POLICY) -> InProcessLoop:
    publisher = MemoryPublisher()
    agent = Agent("default", "Answer from the lookup.", CountingToolbox({"lookup": RESULT}),
                  context=context, **({"max_steps": max_steps} if max_steps else {}))
    deps = Deps(settings=Settings(lease_seconds=10.0),
                store=AgentStore(CountingDocumentDB(database), prefix),
                publisher=publisher, model=model, agents=AgentRegistry([agent]),
                clock=SystemClock(), owner="test-owner")
    return InProcessLoop(deps, publisher)


async def _every_model_step_twice_at_once(loop: InProcessLoop) -> list[Any]:
    """Deliver the queue until it is empty, each model step's message twice concurrently (a
    duplicate delivery overlapping the first); the outcomes of those deliveries."""
    outcomes = []
    loop._collect()
    while loop._queue:
        kind, message = loop._queue.popleft()
        if kind == "model":
            pair = await asyncio.gather(loop.deliver(kind, message), loop.deliver(kind, message))
            outcomes += pair
        else:
            outcome = await loop.deliver(kind, message)
            if not outcome.acknowledged:
                loop._queue.append((kind, message))
        loop._collect()
    return outcomes


async def test_concurrent_deliveries_of_a_compacting_step_make_one_summary(
        db: DocumentDB) -> None:  # noqa: F811
    model = Overlapping()
    loop = _loop(model, db, f"t{uuid.uuid4().hex[:10]}_")
    outcomes = []
    for i in range(10):
        await loop.submit(QueryMessage(request_id=f"q{i}", text=f"question {i}",
                                       conversation_id=CONVERSATION))
        outcomes += await _every_model_step_twice_at_once(loop)

    # A duplicate that found the step recorded re-sends its outbox: answers are at least once.
    answers = {a.run_id: a.answer for a in loop.answers}
    assert answers == {run_id_for_request(f"q{i}"): f"answer to question {i}" for i in range(10)}
    assert all(o.acknowledged for o in outcomes), [o for o in outcomes if not o.acknowledged]
    transcript = await loop.deps.store.transcript.load_transcript(CONVERSATION)
    chunks = [c for c in transcript.chunks if c.summary is not None]
    assert len(chunks) >= 2
    assert len(model.summaries()) == len(chunks)
    # Every model turn once in the history, each step recorded once and completed.
    assert sum(1 for c in transcript.contents if c["role"] == "model") == 20
    for i in range(10):
        steps = await loop.deps.store.steps.list_steps(run_id_for_request(f"q{i}"))
        assert [s.status for s in steps] == [StepStatus.COMPLETED] * 3
        compacting = [s for s in steps if (s.result or {}).get("compaction")]
        assert all(s.attempts == 1 for s in compacting)


async def test_concurrent_deliveries_compacting_on_geminis_400_make_one_summary(
        db: DocumentDB) -> None:  # noqa: F811
    # The steps run unclaimed (a scripted model costs nothing), so both deliveries call the
    # model and both are refused as too long: the claim before the summary lets one pay for
    # it; the other finds the step claimed and is redelivered.
    model = Overlapping(refuse_over=500)
    loop = _loop(model, db, f"t{uuid.uuid4().hex[:10]}_", context=Context.unbounded())
    for i in range(10):
        await loop.submit(QueryMessage(request_id=f"q{i}", text=f"question {i}",
                                       conversation_id=CONVERSATION))
        await _every_model_step_twice_at_once(loop)

    transcript = await loop.deps.store.transcript.load_transcript(CONVERSATION)
    chunks = [c for c in transcript.chunks if c.summary is not None]
    assert chunks
    assert model.summaries_answered == len(chunks)  # one paid summary per compaction
    answers = {a.run_id: a.answer for a in loop.answers}
    assert answers == {run_id_for_request(f"q{i}"): f"answer to question {i}" for i in range(10)}


async def test_a_summary_request_starts_as_the_agents_request_does() -> None:
    model = Recording()
    loop = loop_with(model, POLICY)
    for i in range(8):
        await loop.submit(QueryMessage(request_id=f"q{i}", text=f"question {i}",
                                       conversation_id=CONVERSATION))
        await loop.run_until_idle()
    first = next(i for i, r in enumerate(model.requests) if is_summary_request(r.contents))
    summary, before = model.requests[first], model.requests[first - 1]
    assert summary.system_instruction == before.system_instruction == "Answer from the lookup."
    assert summary.tools == before.tools and summary.tools
    assert not summary.calls_allowed and before.calls_allowed
    shared = len(summary.contents) - 1
    assert shared > 0 and summary.contents[:shared] == before.contents[:shared]


async def test_a_summary_counts_against_max_steps() -> None:
    """A run whose budget has room for its turns but not for a summary too stops at the
    budget: the summary was a model call."""
    from ackloop.docdb.memory import MemoryDocumentDB

    model = Recording()
    loop = _loop(model, MemoryDocumentDB(), "", max_steps=2)
    for i in range(8):
        await loop.submit(QueryMessage(request_id=f"q{i}", text=f"question {i}",
                                       conversation_id=CONVERSATION))
        await loop.run_until_idle()
    runs = [await loop.deps.store.runs.get_run(run_id_for_request(f"q{i}")) for i in range(8)]
    compacted = [r for r in runs if r is not None and r.usage.model_calls > 2]
    assert not compacted, [(r.run_id, r.usage.model_calls) for r in compacted]
    stopped = [r for r in runs if r is not None and r.stop_reason is StopReason.MAX_STEPS]
    assert model.summaries() and len(stopped) == len(model.summaries())
