"""Regression tests for the engine holes closed in faceb34 and 94f4d1c (H1, H2, H4, H5, H6, H9),
the sweeper's recoveries, and the end of every run on the answers topic.

Each test drives the real handlers on the in-memory adapters one delivery at a time (the
helpers of ``test_guarantees``), with a manual clock, and checks what a user or an operator
would see: the run's status and error, the transcript, the messages published, the records.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import httpx
import pytest

from ackloop.api.app import create_app
from ackloop.bus.memory import MemoryPublisher, Published
from ackloop.config.settings import Settings
from ackloop.docdb.base import DocumentDB, Snapshot, StorageUnavailable, Write
from ackloop.domain.errors import ModelPermanentError, ModelRetryableError
from ackloop.domain.keys import StepKey, run_id_for_request
from ackloop.domain.records import RunLimits, RunRecord, RunStatus, StepStatus, StopReason
from ackloop.domain.wire import AnswerMessage, FunctionCall, QueryMessage, RunOptions
from ackloop.engine.deps import Deps
from ackloop.engine.dispatch import Outcome
from ackloop.engine.redrive import redrive
from ackloop.engine.sweep import sweep
from ackloop.model.base import ModelRequest, ModelTurn
from ackloop.model.scripted import ScriptedModel
from ackloop.model.turns import calls_turn, text_turn
from ackloop.store import AgentStore
from ackloop.testing.inprocess import InProcessLoop
from ackloop.tools.base import ToolContext, ToolOutcome
from ackloop.transcript.conversation import NOT_EXECUTED
from tests.engine.fakes import CountingToolbox, make_loop
from tests.engine.test_guarantees import (
    LEASE,
    deliver,
    deliver_all,
    one_call_then_answer,
    run_of,
    start,
    take,
    targets,
    two_calls_then_answer,
)

STALE = Settings().sweep_stale_seconds
CLAIMED = Settings(lease_seconds=10.0, step_claims="always")
"""Every step claimed before its call: what the lease-holder scenarios are about."""


# -- helpers -------------------------------------------------------------------------------------


async def dead_letter(loop: InProcessLoop, original: Published, message_id: str = "dl-1"
                      ) -> Outcome:
    """Deliver ``original`` to the dead-letter handler, as Pub/Sub forwards it after its last
    delivery attempt."""
    forwarded = Published(
        loop.deps.settings.dead_letter_topic, original.data,
        {**original.attributes, "CloudPubSubDeadLetterSourceDeliveryCount": "10",
         "CloudPubSubDeadLetterSourceSubscription": "projects/p/subscriptions/steps"},
        message_id,
    )
    return await loop.deliver("dead_letter", forwarded)


def answers(loop: InProcessLoop, messages: list[Published]) -> list[AnswerMessage]:
    topic = loop.deps.settings.answers_topic
    return [AnswerMessage.model_validate_json(m.data) for m in messages if m.topic == topic]


def advance(loop: InProcessLoop, seconds: float) -> None:
    loop.deps.clock.advance(seconds)  # type: ignore[attr-defined]


async def sweep_when_stale(loop: InProcessLoop) -> list[tuple[str, str, str]]:
    """Let the sweeper's staleness pass, sweep, and return (run, action, detail) per run."""
    advance(loop, STALE + 1)
    return [(s.run_id, s.action, s.detail) for s in await sweep(loop.deps)]


class ModelWithSideEffect:
    """A model whose first call runs ``during`` (another delivery, a cancel) before it answers
    with ``turn``: what happens elsewhere while the step holds its lease."""

    provider = "scripted"

    def __init__(self, turn: Callable[[ModelRequest], ModelTurn]) -> None:
        self.turn = turn
        self.during: Callable[[], Awaitable[Any]] | None = None
        self.calls = 0

    async def generate(self, request: ModelRequest) -> ModelTurn:
        self.calls += 1
        during, self.during = self.during, None
        if during is not None:
            await during()
        return self.turn(request)


class ToolWithSideEffect(CountingToolbox):
    """Like :class:`CountingToolbox`; its first execution runs ``during`` first."""

    during: Callable[[], Awaitable[Any]] | None = None

    async def execute(self, call: FunctionCall, context: ToolContext) -> ToolOutcome:
        during, self.during = self.during, None
        if during is not None:
            await during()
        return await super().execute(call, context)


# -- H1: a dead letter of a step that is live or done is a duplicate -----------------------------


async def holder_sees_a_dead_letter(
    request_id: str,
) -> tuple[InProcessLoop, ModelWithSideEffect, str, list[Outcome]]:
    """A one-turn run whose model step, while its call is in flight (its lease live), sees a
    duplicate of its own message dead-lettered. Returns the loop, the model, the run id and the
    dead letter's outcome."""
    model = ModelWithSideEffect(lambda request: text_turn("from the holder", request=request))
    loop = make_loop(ScriptedModel(), CountingToolbox(), settings=CLAIMED)
    loop.deps.model = model
    run_id, first = await start(loop, request_id)
    seen: list[Outcome] = []

    async def dead_lettered() -> None:
        seen.append(await dead_letter(loop, first))

    model.during = dead_lettered
    holder = await deliver(loop, first)
    assert holder.acknowledged, f"the holder's own delivery failed: {holder}"
    return loop, model, run_id, seen


async def test_h1_a_dead_letter_of_a_step_held_live_leaves_the_run_to_its_holder() -> None:
    loop, model, run_id, (outcome,) = await holder_sees_a_dead_letter("h1-live")

    run = await run_of(loop, run_id)
    assert run.status is RunStatus.COMPLETED, run.error
    assert run.answer == "from the holder" and model.calls == 1
    assert [(a.run_id, a.status) for a in answers(loop, take(loop))] == [(run_id, "completed")]
    assert outcome.body.get("verdict") == "duplicate" and outcome.body["run_failed"] is False
    (record,) = await loop.deps.store.letters.list_dead_letters()
    assert record.data["verdict"] == "duplicate"
    assert "held by a live delivery" in record.data["cause"]


async def test_h1_a_dead_letter_of_a_completed_step_leaves_the_run_going() -> None:
    model, tools = one_call_then_answer(), CountingToolbox({"lookup": "42"})
    loop = make_loop(model, tools)
    run_id, first = await start(loop, "h1-done")
    (tool,) = await deliver_all(loop, [first])

    outcome = await dead_letter(loop, first)

    # No answer (the run did not end); the step's committed tool message is sent again, as one
    # more redelivery of a completed step would, and its claim absorbs the copy.
    again = take(loop)
    assert answers(loop, again) == [] and targets(again) == targets([tool])
    assert (await run_of(loop, run_id)).status is RunStatus.RUNNING
    (next_model,) = await deliver_all(loop, [tool])
    published = await deliver_all(loop, [next_model])
    assert await deliver_all(loop, again) == []  # the copy finds its step completed
    run = await run_of(loop, run_id)
    assert run.status is RunStatus.COMPLETED and run.error is None
    assert [a.status for a in answers(loop, published)] == ["completed"]
    assert (model.calls, tools.executed["lookup"]) == (2, 1)
    assert outcome.body.get("verdict") == "duplicate"


# -- H2: a re-driven dead letter never leaves its run running with nothing in flight -------------


async def test_h2_redriving_the_dead_letter_of_a_live_step_leaves_the_completed_run_alone(
) -> None:
    loop, model, run_id, _ = await holder_sees_a_dead_letter("h2-live")
    take(loop)

    done = await redrive(loop.deps.store, loop.publisher, loop.deps.settings, loop.deps.clock)

    run = await run_of(loop, run_id)
    assert run.status is RunStatus.COMPLETED and run.answer == "from the holder"
    assert [r.outcome for r in done] == ["run_finished"]
    assert take(loop) == [] and model.calls == 1


async def test_h2_a_run_redriven_after_its_step_completed_anyway_resumes_from_its_join(
) -> None:
    """The tool's lease runs out during its call, its dead letter fails the run, then the
    (slow, not dead) holder commits the tool step and the next model step finds the run failed:
    it claims nothing. Re-driving reopens the run and re-sends the tool step, which is
    completed; its join finds the next model step unclaimed and sends it: the run completes."""
    model = one_call_then_answer()
    tools = ToolWithSideEffect({"lookup": "42"})
    loop = make_loop(model, tools, settings=CLAIMED)
    run_id, first = await start(loop, "h2-zombie")
    (tool,) = await deliver_all(loop, [first])
    seen: list[Outcome] = []

    async def lease_runs_out_and_dead_letter_arrives() -> None:
        advance(loop, LEASE + 1)
        seen.append(await dead_letter(loop, tool))

    tools.during = lease_runs_out_and_dead_letter_arrives
    published = await deliver_all(loop, [tool])
    assert seen[0].body["verdict"] == "fail" and seen[0].body["run_failed"] is True
    assert [a.status for a in answers(loop, published)] == ["failed"]
    (next_model,) = [m for m in published if m.topic != loop.deps.settings.answers_topic]
    assert await deliver_all(loop, [next_model]) == []  # the run has failed: not run
    assert await loop.deps.store.steps.get_steps(run_id, ["0001-model"]) == [None]  # nor claimed

    assert [r.outcome for r in await redrive(loop.deps.store, loop.publisher,
                                             loop.deps.settings, loop.deps.clock)] == ["redriven"]
    assert (await run_of(loop, run_id)).status is RunStatus.RUNNING
    resent = await deliver_all(loop, take(loop))  # the completed tool step: its join
    assert targets(resent) == ["0001-model"]
    published = await deliver_all(loop, resent)
    run = await run_of(loop, run_id)
    assert run.status is RunStatus.COMPLETED and run.answer == "Reference workload done."
    assert [a.status for a in answers(loop, published)] == ["completed"]
    assert (model.calls, tools.executed["lookup"]) == (2, 1)


# -- H4: a run that fails after its tools ran keeps their results in the transcript --------------


def failing_after_the_tools(failure: Callable[[], Exception]) -> ScriptedModel:
    """Run 1 ("first") calls lookup, then its next turn fails with ``failure()``; run 2
    ("second") answers."""

    def script(request: ModelRequest) -> ModelTurn:
        text = request.contents[-1]["parts"][0].get("text")
        if text == "first":
            return calls_turn([("lookup", {"key": "k"})], request=request)
        if text == "second":
            return text_turn("seen", request=request)
        raise failure()

    return ScriptedModel(script)


async def fail_by_delivering(loop: InProcessLoop, message: Published) -> None:
    await deliver(loop, message)


async def fail_by_redelivering(loop: InProcessLoop, message: Published) -> None:
    loop.publisher.messages[:0] = [message]
    await loop.run_until_idle()


async def fail_by_dead_letter(loop: InProcessLoop, message: Published) -> None:
    assert not (await deliver(loop, message)).acknowledged  # 429 beyond the wait: released
    await dead_letter(loop, message)


FAILURES = {
    "safety_block": (lambda: ModelPermanentError("blocked", reason="model_safety_block"),
                     fail_by_delivering),
    "bad_request": (lambda: ModelPermanentError("400 invalid", reason="model_invalid_request"),
                    fail_by_delivering),
    "attempts_exhausted": (lambda: ModelRetryableError("503 unavailable"),
                           fail_by_redelivering),
    "dead_letter": (lambda: ModelRetryableError("429 quota", retry_after=45.0),
                    fail_by_dead_letter),
}


@pytest.mark.parametrize("failure", [
    "safety_block", "bad_request", "attempts_exhausted",
    "dead_letter",
])
async def test_h4_a_run_failing_after_its_tools_ran_keeps_their_results_for_the_next_run(
    failure: str,
) -> None:
    make_error, fail = FAILURES[failure]
    model, tools = failing_after_the_tools(make_error), CountingToolbox({"lookup": "42"})
    loop = make_loop(model, tools, settings=Settings(lease_seconds=LEASE, max_step_attempts=2))
    await loop.submit(QueryMessage(request_id=f"h4-{failure}", text="first",
                                   conversation_id=f"conv-{failure}"))
    (first,) = await deliver_all(loop, take(loop))
    (next_model,) = await deliver_all(loop, await deliver_all(loop, [first]))
    await fail(loop, next_model)
    run = await run_of(loop, run_id_for_request(f"h4-{failure}"))
    assert run.status is RunStatus.FAILED, run

    await loop.submit(QueryMessage(request_id=f"h4-{failure}-2", text="second",
                                   conversation_id=f"conv-{failure}"))
    await loop.run_until_idle()

    assert (await run_of(loop, run_id_for_request(f"h4-{failure}-2"))).answer == "seen"
    responses = [p["function_response"]["response"] for c in model.requests[-1].contents
                 for p in c["parts"] if "function_response" in p]
    assert responses == [{"result": "42"}], "the next run must see what the tool did"
    assert NOT_EXECUTED not in responses and tools.executed["lookup"] == 1


# -- H5: a query dead-lettered before its run existed is re-driven ------------------------------


async def test_h5_a_query_dead_lettered_before_its_run_existed_is_redriven_and_runs() -> None:
    model, tools = one_call_then_answer(), CountingToolbox({"lookup": "42"})
    loop = make_loop(model, tools)
    query = QueryMessage(request_id="h5", text="go")
    run_id = run_id_for_request("h5")
    outcome = await dead_letter(loop, Published(loop.deps.settings.queries_topic,
                                                query.model_dump_json().encode(), {}, "q-1"))
    assert await loop.deps.store.runs.get_run(run_id) is None and take(loop) == []

    done = await redrive(loop.deps.store, loop.publisher, loop.deps.settings, loop.deps.clock)

    assert [(r.run_id, r.outcome) for r in done] == [(run_id, "redriven")]
    await loop.run_until_idle()
    run = await run_of(loop, run_id)
    assert run.status is RunStatus.COMPLETED and run.answer == "Reference workload done."
    assert [a.run_id for a in loop.answers] == [run_id]
    assert outcome.body.get("verdict") == "not_started" and outcome.body["run_failed"] is False
    # Re-driven once: the next redrive has nothing to do.
    assert await redrive(loop.deps.store, loop.publisher, loop.deps.settings,
                         loop.deps.clock) == []


# -- H6: a run committed by the API whose first publish failed -----------------------------------


class FailingPublisher:
    """The in-memory publisher, except that the next ``failures`` publishes raise."""

    def __init__(self, inner: MemoryPublisher, failures: int) -> None:
        self.inner, self.failures = inner, failures

    async def publish(self, topic: str, data: bytes,
                      attributes: dict[str, str] | None = None) -> str:
        if self.failures > 0:
            self.failures -= 1
            raise ConnectionError("Pub/Sub: 503 unavailable")
        return await self.inner.publish(topic, data, attributes)

    async def publish_many(self, topic: str,
                           messages: Sequence[tuple[bytes, Mapping[str, str] | None]],
                           ) -> list[str]:
        return [await self.publish(topic, data, dict(attributes or {}))
                for data, attributes in messages]


async def test_the_api_tries_a_failed_first_publish_again_within_its_request() -> None:
    """The publish after the API's commit fails twice: the request tries again (its answer is
    not redelivered, so nothing else would before the sweeper, minutes later), the run starts
    at once and completes, and the client is answered 202."""
    model, tools = one_call_then_answer(), CountingToolbox({"lookup": "42"})
    loop = make_loop(model, tools)
    loop.deps.publisher = FailingPublisher(loop.publisher, failures=2)

    async def deps() -> Deps:
        return loop.deps

    app = create_app(loop.deps.settings, deps=deps)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as api:
        created = await api.post("/runs", json={"text": "go"}, headers={"Idempotency-Key": "r"})
    assert created.status_code == 202, created.text
    assert len(loop.publisher.messages) == 1  # the first step, on the third try
    await loop.run_until_idle()
    run = await run_of(loop, created.json()["run_id"])
    assert run.status is RunStatus.COMPLETED and (model.calls, tools.executed["lookup"]) == (2, 1)


async def test_h6_the_api_accepts_a_committed_run_whose_first_publish_failed_and_it_completes(
) -> None:
    """Every try of the first publish fails: the run is committed and answered 202, and the
    sweeper sends its first step, starting the run's clock then (the minutes it sat unsent are
    not taken from its max_seconds)."""
    model, tools = one_call_then_answer(), CountingToolbox({"lookup": "42"})
    loop = make_loop(model, tools)
    loop.deps.publisher = FailingPublisher(loop.publisher, failures=5)

    async def deps() -> Deps:
        return loop.deps

    app = create_app(loop.deps.settings, deps=deps)
    # An error escaping the app answers 500, as a server would (not raised into the test).
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as api:
        created = await api.post("/runs", json={"text": "go"}, headers={"Idempotency-Key": "h6"})
        assert created.status_code == 202, created.text
        run_id = created.json()["run_id"]
        assert created.json()["status"] == "running" and loop.publisher.messages == []
        early = await api.post("/sweep")  # not stale yet: a healthy run is left alone
        assert early.status_code == 200 and early.json()["swept"] == []

        advance(loop, STALE + 1)
        swept_at = loop.deps.clock.now()
        swept = await api.post("/sweep")

    assert swept.status_code == 200, swept.text
    assert swept.json()["swept"] == [{"run_id": run_id, "action": "resumed",
                                      "detail": "re-sent 0000-model"}]
    assert (await run_of(loop, run_id)).started_at == swept_at
    await loop.run_until_idle()
    run = await run_of(loop, run_id)
    assert run.status is RunStatus.COMPLETED and run.answer == "Reference workload done."
    assert [a.run_id for a in loop.answers] == [run_id]
    assert (model.calls, tools.executed["lookup"]) == (2, 1)


# -- H9: a claim whose run could not be read is given back ---------------------------------------


class FailsOneReadOf:
    """Delegates to ``inner``; the next read that includes ``path`` raises (Firestore
    unavailable), once."""

    def __init__(self, inner: DocumentDB) -> None:
        self.inner = inner
        self.path: str | None = None

    async def get_all(self, paths: list[str]) -> list[Snapshot | None]:
        if self.path is not None and self.path in paths:
            self.path = None
            raise StorageUnavailable("Firestore: 503 unavailable")
        return await self.inner.get_all(paths)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.mark.parametrize("step", ["0000-model", "0000-tool-000", "0001-model"])
async def test_h9_a_step_whose_run_could_not_be_read_is_not_claimed(step: str) -> None:
    """The run is read before the claim: when that read fails nothing is written, and the
    redelivery claims and runs the step at once (no lease to wait out)."""
    model, tools = one_call_then_answer(), CountingToolbox({"lookup": "42"})
    loop = make_loop(model, tools)
    flaky = FailsOneReadOf(loop.deps.store.db)
    loop.deps.store = AgentStore(flaky)
    run_id, message = await start(loop, f"h9-{step}")
    while message.attributes["step"] != step:
        (message,) = await deliver_all(loop, [message])
    flaky.path = loop.deps.store.run_path(run_id)
    before = loop.deps.clock.now()

    failed = await deliver(loop, message)

    assert failed.status == 503, failed
    assert await loop.deps.store.steps.get_steps(run_id, [step]) == [None]
    again = await deliver(loop, message)
    assert again.status == 204, again
    assert loop.deps.clock.now() == before
    (record,) = await loop.deps.store.steps.get_steps(run_id, [step])
    assert record is not None and record.status is StepStatus.COMPLETED
    # Run unclaimed, the step takes its attempt from Pub/Sub's count of the message's
    # deliveries: the failed read left no document to count it.
    assert record.attempts == 2


def quota_exceeded(request: ModelRequest) -> ModelTurn:
    """A model answering 429 with a retry-after beyond the engine's wait: every delivery of
    its step is released and answered 503."""
    raise ModelRetryableError("429 quota", retry_after=45.0)


# -- every end is published on the answers topic ------------------------------------------------


async def test_a_dead_letter_of_a_step_that_ended_its_run_publishes_its_end() -> None:
    """The last model step committed the run's end, then every delivery of it died before
    its publish went out: the dead letter sends the committed end, which nothing else would
    (the run has ended, so the sweeper never looks at it again)."""
    model, tools = one_call_then_answer(), CountingToolbox({"lookup": "42"})
    loop = make_loop(model, tools)
    run_id, first = await start(loop, "dl-after-commit")
    (tool,) = await deliver_all(loop, [first])
    (last,) = await deliver_all(loop, [tool])
    publish_many = loop.deps.publisher.publish_many

    async def lost(*args: Any, **kwargs: Any) -> list[str]:
        raise StorageUnavailable("the publish after the commit died")

    loop.deps.publisher.publish_many = lost  # type: ignore[method-assign]
    assert (await deliver(loop, last)).status >= 500
    loop.deps.publisher.publish_many = publish_many  # type: ignore[method-assign]
    assert (await run_of(loop, run_id)).status is RunStatus.COMPLETED
    assert answers(loop, take(loop)) == []

    outcome = await dead_letter(loop, last)

    assert outcome.body.get("verdict") == "duplicate"
    assert [(a.run_id, a.status) for a in answers(loop, take(loop))] == [(run_id, "completed")]
    assert model.calls == 2


async def test_a_run_failed_by_a_dead_letter_publishes_its_end_at_least_once() -> None:
    model = ScriptedModel(quota_exceeded)
    loop = make_loop(model, CountingToolbox())
    run_id, first = await start(loop, "dl-answer")
    assert (await deliver(loop, first)).status == 503

    await dead_letter(loop, first, "dl-a")
    first_end = answers(loop, take(loop))
    # The dead letter's own redelivery (its first delivery may have died before its publish
    # went out): the run has ended, and its end is published again.
    await dead_letter(loop, first, "dl-a")
    again = answers(loop, take(loop))

    run = await run_of(loop, run_id)
    assert run.status is RunStatus.FAILED
    assert (run.error or "").startswith("dead_lettered: step 0000-model")
    assert "429 quota" in (run.error or "")
    for ended in (first_end, again):
        assert [(a.run_id, a.status, a.error) for a in ended] == [(run_id, "failed", run.error)]


async def test_a_cancel_during_the_model_call_wins_over_its_fan_out_and_is_published() -> None:
    """The cancel lands while the model is asked; its answer asks for tools. The run ends
    cancelled with its answer published, no tool message is sent, and the transcript does not
    keep calls that were never answered."""
    model = ModelWithSideEffect(
        lambda request: calls_turn([("lookup", {"key": "a"}), ("lookup", {"key": "b"})]))
    tools = CountingToolbox({"lookup": "42"})
    loop = make_loop(ScriptedModel(), tools)
    loop.deps.model = model
    run_id, first = await start(loop, "cancel-mid-call")

    async def cancel() -> None:
        assert await loop.deps.store.runs.request_cancel(run_id) is not None

    model.during = cancel
    published = await deliver_all(loop, [first])

    assert targets(published) == ["answer"]
    assert [(a.run_id, a.status) for a in answers(loop, published)] == [(run_id, "cancelled")]
    run = await run_of(loop, run_id)
    assert run.status is RunStatus.CANCELLED and tools.executed["lookup"] == 0
    transcript = await loop.deps.store.transcript.load_transcript(run.conversation_id)
    assert [c["role"] for c in transcript.contents] == ["user"]


@pytest.mark.parametrize("turn", [0, 1])
async def test_a_run_ended_outside_a_step_during_a_model_call_gets_no_late_turn(
    turn: int,
) -> None:
    """A model step does not write its run, so a run ended outside a step (a dead letter, the
    sweeper) while its model call runs must still keep that call's turn out of the
    conversation: the end writes the transcript the step's append is fenced on (at turn 0 of a
    new conversation, an empty first chunk). The late step records nothing and sends no tool
    step, and the conversation's next run starts on the history as the end left it."""
    tools = CountingToolbox({"lookup": "42"})
    loop = make_loop(ScriptedModel(), tools)
    model = ModelWithSideEffect(lambda request: calls_turn([("lookup", {"key": "a"})]))
    loop.deps.model = model
    run_id, message = await start(loop, f"ended-mid-call-{turn}")
    if turn == 1:  # turn 0 asks for a tool, which runs; the next model call is the late one
        (tool_message,) = await deliver_all(loop, [message])
        (message,) = await deliver_all(loop, [tool_message])
    run = await run_of(loop, run_id)
    before = await loop.deps.store.transcript.load_transcript(run.conversation_id)

    async def end_outside() -> None:
        assert await loop.deps.store.runs.fail_run(run_id, "dead-lettered", loop.deps.clock.now())

    model.during = end_outside
    published = await deliver_all(loop, [message])

    assert [m for m in published if m.topic != loop.deps.settings.answers_topic] == []
    assert tools.executed["lookup"] == turn
    after = await loop.deps.store.transcript.load_transcript(run.conversation_id)
    assert after.contents == before.contents and after.tail == before.tail
    (step,) = await loop.deps.store.steps.get_steps(run_id, [message.attributes["step"]])
    assert step is None or step.status is not StepStatus.COMPLETED
    assert (await run_of(loop, run_id)).status is RunStatus.FAILED


# -- the sweeper ---------------------------------------------------------------------------------


async def test_a_run_whose_steps_move_is_left_alone_until_they_stop() -> None:
    """Steps do not write their run, so a run going for longer than the staleness looks stale
    by its own document: the sweeper finds a step of it live, leaves it, and moves its
    ``progress_at`` so that the next sweeps skip it until its steps stop."""
    loop = make_loop(two_calls_then_answer(), CountingToolbox({"lookup": "42"}))
    run_id, first = await start(loop, "sweep-progressing")
    fan_out = await deliver_all(loop, [first])
    advance(loop, STALE - 5)
    await deliver_all(loop, fan_out)  # the tools complete; the next model step's message is lost
    advance(loop, 10)  # the run started over STALE ago, its newest step 10 s ago
    assert [(s.run_id, s.action) for s in await sweep(loop.deps)] == [(run_id, "progressing")]
    assert await sweep(loop.deps) == []
    assert await sweep_when_stale(loop) == [(run_id, "resumed", "re-sent 0001-model")]


@pytest.mark.parametrize("delivered", [[], ["0000-tool-000"]])
async def test_sweeper_sends_the_tool_steps_of_a_fan_out_that_were_never_published(
    delivered: list[str],
) -> None:
    model, tools = two_calls_then_answer(), CountingToolbox({"lookup": "42"})
    loop = make_loop(model, tools)
    run_id, first = await start(loop, f"sweep-fan-out-{len(delivered)}")
    fan_out = await deliver_all(loop, [first])  # then lost, but for those delivered
    await deliver_all(loop, [m for m in fan_out if m.attributes["step"] in delivered])
    assert [s.action for s in await sweep(loop.deps)] == []  # not stale yet

    lost = [m.attributes["step"] for m in fan_out if m.attributes["step"] not in delivered]
    assert await sweep_when_stale(loop) == [(run_id, "resumed", f"re-sent {', '.join(lost)}")]
    resent = take(loop)
    assert targets(resent) == lost

    await deliver_all(loop, await deliver_all(loop, resent))
    run = await run_of(loop, run_id)
    assert run.status is RunStatus.COMPLETED and run.answer == "done"
    assert (model.calls, tools.executed["lookup"]) == (2, 2)


async def test_sweeper_sends_the_next_model_step_a_lost_join_never_published() -> None:
    model, tools = two_calls_then_answer(), CountingToolbox({"lookup": "42"})
    loop = make_loop(model, tools)
    run_id, first = await start(loop, "sweep-join")
    (joined,) = await deliver_all(loop, await deliver_all(loop, [first]))  # then lost

    assert await sweep_when_stale(loop) == [(run_id, "resumed", "re-sent 0001-model")]
    (resent,) = take(loop)
    assert (resent.topic, resent.data, resent.attributes) == (
        joined.topic, joined.data, joined.attributes)  # the same message, usage included

    published = await deliver_all(loop, [resent])
    run = await run_of(loop, run_id)
    assert run.status is RunStatus.COMPLETED and run.usage.tool_calls == 2
    assert [a.status for a in answers(loop, published)] == ["completed"]


async def test_sweeper_resends_an_exhausted_step_whose_run_then_fails_with_the_cause() -> None:
    model = ScriptedModel(quota_exceeded)
    loop = make_loop(model, CountingToolbox(),
                     settings=Settings(lease_seconds=LEASE, max_step_attempts=2))
    run_id, first = await start(loop, "sweep-exhausted")
    for _ in range(2):  # every attempt used, then the message is gone
        assert (await deliver(loop, first)).status == 503
        advance(loop, 46)

    assert await sweep_when_stale(loop) == [(run_id, "resumed", "re-sent 0000-model")]
    published = await deliver_all(loop, take(loop))

    run = await run_of(loop, run_id)
    assert run.status is RunStatus.FAILED and model.calls == 2
    assert (run.error or "").startswith("step_attempts_exhausted")
    assert "429 quota" in (run.error or "")  # the cause
    assert [(a.status, a.error) for a in answers(loop, published)] == [("failed", run.error)]


async def test_sweeper_fails_a_running_run_with_nothing_left_to_send_and_publishes_it() -> None:
    """A run left running after its last step completed (as 61e1094's redrive left it) is
    failed with the cause, and its end is published."""
    loop = make_loop(ScriptedModel.from_turns([text_turn("done")]), CountingToolbox())
    run_id, first = await start(loop, "sweep-nothing")
    await deliver_all(loop, [first])
    store = loop.deps.store
    await store.db.commit([Write("update", store.run_path(run_id), {
        "status": "running", "stop_reason": None, "answer": None, "finished_at": None})])
    assert await sweep(loop.deps) == []  # not stale yet

    assert await sweep_when_stale(loop) == [
        (run_id, "failed", "stalled at 0000-model with nothing left to send")]

    run = await run_of(loop, run_id)
    assert run.status is RunStatus.FAILED
    assert run.error == "swept: stalled at 0000-model with nothing left to send"
    assert [(a.run_id, a.status) for a in answers(loop, take(loop))] == [(run_id, "failed")]


async def test_sweeper_starts_a_queued_run_whose_conversation_is_free() -> None:
    model = ScriptedModel(lambda request: text_turn("ok", request=request))
    loop = make_loop(model, CountingToolbox())
    for request_id in ("sweep-q-1", "sweep-q-2"):
        await loop.submit(QueryMessage(request_id=request_id, text=request_id,
                                       conversation_id="conv-sweep-q",
                                       options=RunOptions(max_seconds=3600)))
    await deliver_all(loop, take(loop))  # the active run's first step: lost
    active, queued = run_id_for_request("sweep-q-1"), run_id_for_request("sweep-q-2")
    assert (await run_of(loop, queued)).status is RunStatus.QUEUED
    # While the active run is running (stalled), the queued run waits its turn.
    assert await sweep_when_stale(loop) == [(active, "resumed", "re-sent 0000-model")]
    take(loop)
    # The active run ends without handing the conversation on (written outside any step).
    store = loop.deps.store
    await store.db.commit([Write("update", store.run_path(active), {"status": "failed"})])

    assert await sweep_when_stale(loop) == [(queued, "started", "its conversation was free")]
    await loop.run_until_idle()

    run = await run_of(loop, queued)
    assert run.status is RunStatus.COMPLETED and run.answer == "ok" and model.calls == 1
    assert [a.run_id for a in loop.answers] == [queued]
    conversation = await store.runs.get_conversation_snapshot("conv-sweep-q")
    assert conversation is not None and conversation.data["active_run_id"] is None


async def test_queued_runs_waiting_their_turn_do_not_hide_a_free_one_from_the_sweeper() -> None:
    """The sweeper reads queued runs a page at a time. Three conversations each have a run
    going and one queued behind it (rightly waiting); a fourth conversation's queued run has
    become free, its start lost. With a page of three, the three waiting runs came first on
    every pass and the free one was never started; a run seen waiting its turn now goes to the
    back, so the next pass starts the free one."""
    model = ScriptedModel(lambda request: text_turn("ok", request=request))
    loop = make_loop(model, CountingToolbox())
    store, clock = loop.deps.store, loop.deps.clock
    for conversation in ("a", "b", "c", "d"):
        for n in (1, 2):
            await loop.submit(QueryMessage(request_id=f"{conversation}{n}", text="x",
                                           conversation_id=f"conv-{conversation}",
                                           options=RunOptions(max_seconds=3600)))
            clock.advance(1)  # type: ignore[attr-defined]
    await deliver_all(loop, take(loop))  # the queries; the first steps are then lost
    take(loop)
    free = run_id_for_request("d2")
    await store.db.commit([Write("update", store.run_path(run_id_for_request("d1")),
                                 {"status": "failed"})])  # ended without handing on
    advance(loop, STALE + 1)

    first = await sweep(loop.deps, limit=3)
    assert {s.action for s in first} == {"resumed"} and len(first) == 3  # the running a1..c1
    take(loop)
    second = [(s.run_id, s.action) for s in await sweep(loop.deps, limit=3)]
    assert (free, "started") in second, second
    await loop.run_until_idle()
    assert (await run_of(loop, free)).status is RunStatus.COMPLETED


async def test_a_follow_up_queued_behind_a_long_run_keeps_its_own_wall_clock_budget() -> None:
    loop = make_loop(ScriptedModel(), CountingToolbox())
    model = ModelWithSideEffect(lambda request: text_turn("ok", request=request))
    loop.deps.model = model
    for request_id, seconds in (("long-1", 3600.0), ("long-2", 60.0)):
        await loop.submit(QueryMessage(request_id=request_id, text=request_id,
                                       conversation_id="conv-long",
                                       options=RunOptions(max_seconds=seconds)))

    async def slow_call() -> None:
        advance(loop, 120)  # the first run's model call takes two minutes

    model.during = slow_call
    await loop.run_until_idle()

    first = await run_of(loop, run_id_for_request("long-1"))
    follow_up = await run_of(loop, run_id_for_request("long-2"))
    assert first.status is RunStatus.COMPLETED and first.answer == "ok"
    assert follow_up.stop_reason is StopReason.ANSWERED and follow_up.answer == "ok"



async def test_runs_with_long_calls_in_flight_do_not_hide_a_stalled_run_from_the_sweeper(
) -> None:
    """R6: the sweeper reads the oldest runs first, a page at a time, and left a run whose call
    was still in flight where it was (its call's start was long past, so nothing moved its
    clock): a page of such runs hid every stalled run behind them, pass after pass. A run seen
    busy now goes to the back, so the next pass reaches the stalled one."""
    loop = make_loop(ScriptedModel.from_turns([text_turn("hi")]), CountingToolbox(),
                     settings=Settings(lease_seconds=10.0))
    store, clock = loop.deps.store, loop.deps.clock
    start = clock.now()

    def run(name: str, progress_at: float) -> RunRecord:
        return RunRecord(run_id=name, request_id=name, request_hash="h", conversation_id=name,
                         agent="default", text="hi", model="m", created_at=start,
                         started_at=start, progress_at=progress_at,
                         limits=RunLimits(max_steps=5, max_seconds=86_400, max_tool_calls=5))

    for n in range(3):  # calls of an hour, started long ago, their leases kept alive; the
        # run moved last after the call started (an event, a decision of another call)
        await store.db.commit([Write("create", store.run_path(f"busy-{n}"),
                                     run(f"busy-{n}", start + 20 + n).to_doc())])
        await store.steps.claim_step(f"busy-{n}", StepKey.model(0), "model", owner="o",
                                     now=start + 10, lease_seconds=3600)
    await store.db.commit([Write("create", store.run_path("stalled"),
                                 run("stalled", start + 30).to_doc())])
    advance(loop, STALE + 100)

    first = [(s.run_id, s.action) for s in await sweep(loop.deps, limit=3)]
    assert first == [(f"busy-{n}", "progressing") for n in range(3)]
    second = [(s.run_id, s.action) for s in await sweep(loop.deps, limit=3)]
    assert ("stalled", "resumed") in second, second


# -- a step run unclaimed, killed after its call, then dead-lettered -----------------------------


async def test_a_dead_letter_of_a_step_with_no_record_records_it_released_and_a_redrive_claims_it(
) -> None:
    """A retry-safe call runs unclaimed (nothing written before its commit); its process dies
    after the call; the message is then dead-lettered. The run fails, and the call, which may
    have run, is on record: its step exists, released, with the cause. A redrive claims it as
    its next attempt, runs it and the run answers."""
    from tests.engine.fakes import CrashingFaults, SimulatedCrash

    model = one_call_then_answer()
    tools = CountingToolbox({"lookup": "42"})
    loop = make_loop(model, tools, faults=CrashingFaults({"tool:after_call"}))
    run_id, first = await start(loop, "unrecorded")
    (tool,) = await deliver_all(loop, [first])
    with pytest.raises(SimulatedCrash):
        await deliver(loop, tool)
    assert tools.executed["lookup"] == 1
    assert await loop.deps.store.steps.get_steps(run_id, ["0000-tool-000"]) == [None]

    outcome = await dead_letter(loop, tool)
    assert outcome.body["verdict"] == "fail" and outcome.body["run_failed"] is True
    run = await run_of(loop, run_id)
    assert run.status is RunStatus.FAILED and "has no record" in (run.error or "")
    (step,) = await loop.deps.store.steps.get_steps(run_id, ["0000-tool-000"])
    assert step is not None and step.status is StepStatus.RUNNING and step.lease_expires_at == 0
    assert "dead_lettered" in (step.last_error or "") and step.attempts == 10
    take(loop)

    assert [r.outcome for r in await redrive(loop.deps.store, loop.publisher,
                                             loop.deps.settings, loop.deps.clock)] == ["redriven"]
    pending = take(loop)
    while pending := [m for m in pending if m.topic != loop.deps.settings.answers_topic]:
        pending = await deliver_all(loop, pending)
    run = await run_of(loop, run_id)
    assert run.status is RunStatus.COMPLETED, run
    (step,) = await loop.deps.store.steps.get_steps(run_id, ["0000-tool-000"])
    assert step is not None and step.status is StepStatus.COMPLETED and step.attempts == 1
    assert tools.executed["lookup"] == 2  # retry-safe: run again after the redrive, recorded once
