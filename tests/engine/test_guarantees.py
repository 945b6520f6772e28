"""The engine's exactly-once guarantees, each under the one interleaving that threatens it.

The real handlers run on the in-memory adapters; the test delivers messages one at a time (or
two at once) and writes to the store between deliveries, as a crash, a duplicate or a
concurrent writer would, then checks what was executed, written and published.
"""

from __future__ import annotations

import asyncio

import pytest

from ackloop.bus.memory import Published
from ackloop.domain.keys import StepKey, run_id_for_request
from ackloop.domain.records import RunRecord, RunStatus, StopReason
from ackloop.domain.wire import AnswerMessage, QueryMessage, RunOptions, Usage
from ackloop.engine.dispatch import Kind, Outcome
from ackloop.engine.ingest import new_run
from ackloop.model.base import ModelRequest, ModelTurn
from ackloop.model.scripted import ScriptedModel, reference_workload_script
from ackloop.model.turns import calls_turn, text_turn
from ackloop.store import AgentStore
from ackloop.store.transcript import append_writes
from ackloop.testing.inprocess import InProcessLoop
from tests.engine.fakes import CountingToolbox, make_loop
from tests.support.rendezvous import RendezvousDB

LEASE = 10.0


# -- driving one delivery at a time ------------------------------------------------------------


def take(loop: InProcessLoop) -> list[Published]:
    """Everything published since the last look, in order."""
    return loop.publisher.take()


def targets(messages: list[Published]) -> list[str]:
    """The step each message triggers (``answer`` for an answer)."""
    return [m.attributes.get("step", "answer") for m in messages]


def kind_of(loop: InProcessLoop, message: Published) -> Kind:
    s = loop.deps.settings
    kinds: dict[str, Kind] = {s.queries_topic: "query", s.model_steps_topic: "model",
                              s.tool_steps_topic: "tool"}
    return kinds[message.topic]


async def deliver(loop: InProcessLoop, message: Published) -> Outcome:
    return await loop.deliver(kind_of(loop, message), message)


async def deliver_all(loop: InProcessLoop, messages: list[Published]) -> list[Published]:
    """Deliver ``messages`` in order; return what they published."""
    for message in messages:
        await deliver(loop, message)
    return take(loop)


async def start(loop: InProcessLoop, request_id: str) -> tuple[str, Published]:
    """Deliver a query; return the run id and the first model step's message."""
    await loop.submit(QueryMessage(request_id=request_id, text="go"))
    (first,) = await deliver_all(loop, take(loop))
    return run_id_for_request(request_id), first


async def run_of(loop: InProcessLoop, run_id: str) -> RunRecord:
    run = await loop.deps.store.runs.get_run(run_id)
    assert run is not None
    return run


def two_calls_then_answer() -> ScriptedModel:
    return ScriptedModel.from_turns([
        calls_turn([("lookup", {"key": "a"}), ("lookup", {"key": "b"})]),
        text_turn("done"),
    ])


def one_call_then_answer() -> ScriptedModel:
    return ScriptedModel(reference_workload_script("lookup", calls=1))


# -- claims ------------------------------------------------------------------------------------


async def test_two_deliveries_racing_for_an_expired_tool_lease_run_the_tool_once() -> None:
    """A takeover is fenced on the step's version: of two redeliveries that both saw the dead
    holder's expired lease, one takes the step over and runs the tool; the other does not run
    it (it waits for the winner and is acknowledged once the step is recorded)."""
    model, tools = one_call_then_answer(), CountingToolbox({"lookup": "42"})
    loop = make_loop(model, tools)
    racing = RendezvousDB(loop.deps.store.db)
    loop.deps.store = AgentStore(racing)
    run_id, first = await start(loop, "race")
    (tool,) = await deliver_all(loop, [first])
    # A delivery claimed the tool step and died; its lease runs out.
    key = StepKey.tool(0, 0)
    await loop.deps.store.steps.claim_step(run_id, key, "lookup", owner="dead",
                                           now=loop.deps.clock.now(), lease_seconds=LEASE)
    loop.deps.clock.advance(LEASE + 1)  # type: ignore[attr-defined]

    racing.arm(loop.deps.store.step_path(run_id, str(key)))
    outcomes = await asyncio.gather(deliver(loop, tool), deliver(loop, tool))

    assert tools.executed["lookup"] == 1
    assert all(o.acknowledged for o in outcomes), outcomes
    assert set(targets(take(loop))) == {"0001-model"}
    (step,) = await loop.deps.store.steps.get_steps(run_id, [str(key)])
    assert step is not None and step.status == "completed"
    assert (step.fence, step.attempts) == (2, 2)  # one takeover, not two


# -- outbox and join -----------------------------------------------------------------------------


async def test_a_redelivered_model_step_resends_only_the_tool_steps_never_claimed() -> None:
    """A completed step's redelivery re-sends an outbox entry only while its target is
    unclaimed, so one duplicate does not replay the rest of the run."""
    model, tools = two_calls_then_answer(), CountingToolbox({"lookup": "42"})
    loop = make_loop(model, tools)
    run_id, first = await start(loop, "resend")
    tool_a, tool_b = await deliver_all(loop, [first])
    assert await deliver_all(loop, [tool_a]) == []  # tool 1 of 2: no join yet

    assert targets(await deliver_all(loop, [first])) == ["0000-tool-001"]
    (next_model,) = await deliver_all(loop, [tool_b])
    assert targets(await deliver_all(loop, [first])) == []

    await deliver_all(loop, [next_model])
    assert targets(await deliver_all(loop, [first])) == []
    assert (model.calls, tools.executed["lookup"]) == (2, 2)
    assert (await run_of(loop, run_id)).status is RunStatus.COMPLETED


async def test_the_join_waits_for_every_sibling_to_complete_and_fires_once() -> None:
    """The next model step is triggered by the last tool of the turn to complete: not while
    a sibling is undelivered, nor while it is claimed but still running."""
    model, tools = two_calls_then_answer(), CountingToolbox({"lookup": "42"})
    loop = make_loop(model, tools)
    run_id, first = await start(loop, "join")
    tool_a, tool_b = await deliver_all(loop, [first])

    assert targets(await deliver_all(loop, [tool_a])) == []  # sibling not delivered yet
    assert targets(await deliver_all(loop, [tool_a])) == []  # nor on a redelivery
    # The sibling is claimed by a delivery still running its call.
    clock = loop.deps.clock
    await loop.deps.store.steps.claim_step(run_id, StepKey.tool(0, 1), "lookup", owner="slow",
                                           now=clock.now(), lease_seconds=LEASE)
    assert targets(await deliver_all(loop, [tool_a])) == []

    # The slow holder dies; the sibling's own delivery takes it over and is the last to complete.
    assert (await deliver(loop, tool_b)).acknowledged
    assert targets(take(loop)) == ["0001-model"]
    assert tools.executed["lookup"] == 2


async def test_tool_steps_redelivered_after_the_next_model_step_was_claimed_send_nothing() -> None:
    """The join does not trigger a model step that is already claimed (running or done)."""
    model, tools = two_calls_then_answer(), CountingToolbox({"lookup": "42"})
    loop = make_loop(model, tools)
    run_id, first = await start(loop, "joined")
    tool_a, tool_b = await deliver_all(loop, [first])
    (next_model,) = await deliver_all(loop, [tool_a, tool_b])

    clock = loop.deps.clock
    claim = await loop.deps.store.steps.claim_step(run_id, StepKey.model(1), "model", owner="busy",
                                                   now=clock.now(), lease_seconds=LEASE)
    assert targets(await deliver_all(loop, [tool_a, tool_b])) == []  # claimed, running

    await loop.deps.store.steps.release_step(claim, error="test: let it go")
    assert targets(await deliver_all(loop, [next_model])) == ["answer"]
    assert targets(await deliver_all(loop, [tool_a, tool_b])) == []  # claimed, completed
    assert (model.calls, tools.executed["lookup"]) == (2, 2)


# -- budgets and history -------------------------------------------------------------------------


def turns_of(tokens: int) -> ScriptedModel:
    """Two turns (a call, then an answer), each reporting exactly ``tokens`` tokens."""
    usage = Usage(model_calls=1, prompt_tokens=tokens, total_tokens=tokens)
    return ScriptedModel.from_turns([
        calls_turn([("lookup", {"key": "k"})]).model_copy(update={"usage": usage}),
        text_turn("answered").model_copy(update={"usage": usage}),
    ])


@pytest.mark.parametrize(("max_tokens", "stop", "model_calls"), [
    (100, StopReason.MAX_TOKENS, 1),  # the budget used exactly: no further model call
    (101, StopReason.ANSWERED, 2),  # one token left: the loop goes on
])
async def test_the_token_budget_is_used_up_at_equality(
    max_tokens: int, stop: StopReason, model_calls: int
) -> None:
    """max_tokens is a ceiling reached at equality: a run whose turns used exactly its budget
    makes no further model call; one token under, it does."""
    model = turns_of(100)
    loop = make_loop(model, CountingToolbox({"lookup": "42"}))
    request_id = f"tokens-{max_tokens}"
    await loop.submit(QueryMessage(request_id=request_id, text="go",
                                   options=RunOptions(max_tokens=max_tokens)))
    await loop.run_until_idle()

    run = await run_of(loop, run_id_for_request(request_id))
    assert (run.stop_reason, model.calls) == (stop, model_calls)
    assert run.usage.total_tokens == 100 * model_calls


async def foreign_entry_before_turn_1(loop: InProcessLoop, request_id: str
                                      ) -> tuple[str, Published]:
    """Run a turn (model step 0, its tool), then let something else write to the conversation.

    Returns the run id and the (undelivered) message of model step 1.
    """
    run_id, first = await start(loop, request_id)
    (next_model,) = await deliver_all(loop, await deliver_all(loop, [first]))
    store = loop.deps.store
    run = await run_of(loop, run_id)
    transcript = await store.transcript.load_transcript(run.conversation_id)
    interloper = {"role": "user", "parts": [{"text": "not from this run"}]}
    await store.db.commit(append_writes(store, transcript, [interloper], FOREIGN_TAIL))
    return run_id, next_model


FOREIGN_TAIL = "run-other/0000-model"


async def test_a_model_step_never_builds_on_a_transcript_with_a_foreign_tail() -> None:
    """The transcript must end at this run's previous model step: otherwise the model is not
    called, nothing is appended and the run does not complete."""
    model = one_call_then_answer()
    loop = make_loop(model, CountingToolbox({"lookup": "42"}))
    run_id, next_model = await foreign_entry_before_turn_1(loop, "tail")

    published = await deliver_all(loop, [next_model])

    assert model.calls == 1
    run = await run_of(loop, run_id)
    transcript = await loop.deps.store.transcript.load_transcript(run.conversation_id)
    assert transcript.tail == FOREIGN_TAIL and len(transcript.contents) == 3
    assert run.status is not RunStatus.COMPLETED
    statuses = [AnswerMessage.model_validate_json(m.data).status for m in published
                if m.topic == loop.deps.settings.answers_topic]
    assert "completed" not in statuses


async def test_a_transcript_with_a_foreign_tail_fails_the_run_with_that_reason() -> None:
    """An inconsistent history ends the run as failed (``transcript_inconsistent``), with its
    answer sent, and the delivery is acknowledged: it does not wait for dead-lettering."""
    model = one_call_then_answer()
    loop = make_loop(model, CountingToolbox({"lookup": "42"}))
    run_id, next_model = await foreign_entry_before_turn_1(loop, "tail-fails")

    outcome = await deliver(loop, next_model)

    assert outcome.acknowledged, outcome
    run = await run_of(loop, run_id)
    assert run.status is RunStatus.FAILED
    assert (run.error or "").startswith("transcript_inconsistent")
    (answer,) = take(loop)
    assert AnswerMessage.model_validate_json(answer.data).status == "failed"
    assert model.calls == 1


# -- run ends ------------------------------------------------------------------------------------


class FailsTheRunDuringTheCall:
    """A model whose first call outlives its run: the run is failed (as the dead-letter handler
    does) while the call is in flight, and the call then answers."""

    provider = "scripted"

    def __init__(self, store: AgentStore, now: float) -> None:
        self.store, self.now, self.calls = store, now, 0

    async def generate(self, request: ModelRequest) -> ModelTurn:
        self.calls += 1
        run_id = run_id_for_request("fenced")
        if self.calls == 1:
            assert await self.store.runs.fail_run(run_id, "dead_lettered: gave up", self.now)
        return text_turn("too late", request=request)


async def test_a_run_failed_while_its_model_step_ran_is_not_completed_by_that_step() -> None:
    """The commit that ends a run is fenced on the run version the step read: a failure
    recorded meanwhile stands, and no completed answer is sent."""
    loop = make_loop(ScriptedModel(), CountingToolbox())
    model = FailsTheRunDuringTheCall(loop.deps.store, loop.deps.clock.now())
    loop.deps.model = model
    await loop.submit(QueryMessage(request_id="fenced", text="go"))
    await loop.run_until_idle()

    run = await run_of(loop, run_id_for_request("fenced"))
    assert run.status is RunStatus.FAILED and run.error == "dead_lettered: gave up"
    assert run.answer is None and run.stop_reason is StopReason.FAILED
    assert "completed" not in [a.status for a in loop.answers]
    assert model.calls == 1


async def test_tool_steps_of_a_run_that_ended_do_not_run() -> None:
    """A tool step delivered after its run failed does not act: the call is not made, nothing
    is recorded for it and nothing follows it."""
    model, tools = one_call_then_answer(), CountingToolbox({"lookup": "42"})
    loop = make_loop(model, tools)
    run_id, first = await start(loop, "ended")
    (tool,) = await deliver_all(loop, [first])
    assert await loop.deps.store.runs.fail_run(run_id, "failed by operator", loop.deps.clock.now())

    outcome = await deliver(loop, tool)

    assert outcome.acknowledged and targets(take(loop)) == []
    assert tools.executed["lookup"] == 0 and model.calls == 1
    (step,) = await loop.deps.store.steps.get_steps(run_id, [str(StepKey.tool(0, 0))])
    assert step is None  # not even claimed: the run was read first
    run = await run_of(loop, run_id)
    assert run.status is RunStatus.FAILED and run.error == "failed by operator"


# -- ingest --------------------------------------------------------------------------------------


async def test_a_query_redelivered_after_a_crash_before_its_first_publish_starts_the_run() -> None:
    """The run was created but its first step never sent: the duplicate query sends it."""
    model, tools = one_call_then_answer(), CountingToolbox({"lookup": "42"})
    loop = make_loop(model, tools)
    query = QueryMessage(request_id="lost", text="go")
    await loop.deps.store.runs.create_run(new_run(loop.deps, query))  # then the process died

    await loop.submit(query)
    published = await deliver_all(loop, take(loop))

    assert targets(published) == ["0000-model"]
    assert loop.deliveries("query")[0].outcome.body["created"] is False
    loop.publisher.messages[:0] = published
    await loop.run_until_idle()
    run = await run_of(loop, run_id_for_request("lost"))
    assert run.status is RunStatus.COMPLETED and model.calls == 2


async def test_a_duplicate_query_after_the_first_step_was_claimed_sends_nothing() -> None:
    """Once the first model step is claimed its own delivery owns it: no second trigger."""
    model, tools = one_call_then_answer(), CountingToolbox({"lookup": "42"})
    loop = make_loop(model, tools)
    _, first = await start(loop, "dup-query")
    await deliver_all(loop, [first])

    await loop.submit(QueryMessage(request_id="dup-query", text="go"))
    assert targets(await deliver_all(loop, take(loop))) == []
