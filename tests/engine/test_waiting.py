"""The engine owns its waiting: a delivery that finds its step held waits inside its request,
and a follow-up for a busy conversation is queued and acknowledged. Pub/Sub's redelivery is
never used as a timer for something the engine can time itself.

Driven through the real dispatch on the in-memory store, with a manual clock: the waits below
are the engine's own (``claim_wait_seconds``, ``lease_seconds``), read off the clock.
"""

from __future__ import annotations

import pytest

from ackloop.bus.memory import Published
from ackloop.config.settings import Settings
from ackloop.domain.keys import StepKey, run_id_for_request
from ackloop.domain.records import RunStatus, StepStatus
from ackloop.domain.wire import QueryMessage
from ackloop.engine.ending import cancel_run
from ackloop.engine.lease import COMMIT_MARGIN_S
from ackloop.model.scripted import ScriptedModel
from ackloop.model.turns import text_turn
from tests.engine.fakes import CountingToolbox, make_loop

SETTINGS = Settings()  # the shipped defaults: lease 10 s, claim wait 25 s


class CountingModel(ScriptedModel):
    """Answers every turn at once (one model call per run); ``calls`` counts them."""

    def __init__(self) -> None:
        super().__init__(lambda request: text_turn("ok", request=request))


async def first_model_step(loop, request_id: str) -> tuple[str, Published]:  # type: ignore[no-untyped-def]
    """Start a run and return its id and its first model step message, not yet delivered."""
    await loop.submit(QueryMessage(request_id=request_id, text="tell me a joke"))
    loop._collect()
    (kind, query), = list(loop._queue)
    loop._queue.clear()
    assert (await loop.deliver(kind, query)).acknowledged
    loop._collect()
    (kind, step), = list(loop._queue)
    loop._queue.clear()
    assert kind == "model"
    return run_id_for_request(request_id), step


async def hold(loop, run_id: str, *, message_id: str, lease_seconds: float) -> None:  # type: ignore[no-untyped-def]
    """Another delivery (another process) claims the first model step and keeps it."""
    deps = loop.deps
    await deps.store.claim_step(run_id, StepKey.model(0), "model", owner="other-process",
                                now=deps.clock.now(), lease_seconds=lease_seconds,
                                message_id=message_id)


async def test_a_dead_holder_is_taken_over_in_the_same_request_when_its_lease_expires() -> None:
    model = CountingModel()
    loop = make_loop(model, CountingToolbox(), settings=SETTINGS)
    run_id, step = await first_model_step(loop, "dead-holder")
    await hold(loop, run_id, message_id="crashed-delivery", lease_seconds=SETTINGS.lease_seconds)
    started = loop.deps.clock.now()

    outcome = await loop.deliver("model", step)

    waited = loop.deps.clock.now() - started
    assert outcome.status == 204, outcome  # done in this delivery: no nack, no redelivery
    assert SETTINGS.lease_seconds <= waited <= SETTINGS.lease_seconds + 2.5
    assert model.calls == 1
    (record,) = await loop.deps.store.get_steps(run_id, [str(StepKey.model(0))])
    assert record is not None and record.status is StepStatus.COMPLETED
    assert record.attempts == 2 and record.owner == loop.deps.owner


async def test_a_duplicate_of_a_live_step_is_acknowledged_after_the_bounded_wait() -> None:
    """The live holder will finish (or its own message comes back if it dies): the duplicate
    is acknowledged, not nacked into a dead letter."""
    model = CountingModel()
    loop = make_loop(model, CountingToolbox(), settings=SETTINGS)
    run_id, step = await first_model_step(loop, "live-holder")
    await hold(loop, run_id, message_id="the-other-delivery", lease_seconds=3600)
    started = loop.deps.clock.now()

    outcome = await loop.deliver("model", step)

    assert outcome.status == 200 and outcome.acknowledged, outcome
    assert "held by message the-other-delivery" in str(outcome.body)
    waited = loop.deps.clock.now() - started
    assert SETTINGS.claim_wait_seconds - 0.01 <= waited <= SETTINGS.claim_wait_seconds + 0.01
    assert model.calls == 0
    run = await loop.deps.store.get_run(run_id)
    assert run is not None and run.status is RunStatus.RUNNING


async def test_the_wait_for_a_held_step_leaves_its_call_room_before_the_request_deadline(
) -> None:
    """A request of 80 s keeps 5 s for its commit and 60 s for the model call: a delivery that
    finds its step held waits 15 s, not the 25 s ``claim_wait_seconds`` allows, so a takeover
    at the end of the wait still has the whole call's time before the request is cut off."""
    settings = Settings(request_timeout_seconds=80.0)
    room = (settings.request_timeout_seconds - COMMIT_MARGIN_S
            - settings.model_timeout_seconds)
    assert room < settings.claim_wait_seconds
    model = CountingModel()
    loop = make_loop(model, CountingToolbox(), settings=settings)
    run_id, step = await first_model_step(loop, "little-room")
    await hold(loop, run_id, message_id="the-other-delivery", lease_seconds=3600)
    started = loop.deps.clock.now()

    outcome = await loop.deliver("model", step)

    assert outcome.acknowledged and "held by message the-other-delivery" in str(outcome.body)
    assert loop.deps.clock.now() - started == pytest.approx(room, abs=0.01)
    assert model.calls == 0


async def test_the_same_message_still_held_live_is_nacked_so_it_survives_its_holder() -> None:
    """A redelivery of the message the live holder is working on must not be acknowledged: if
    that holder dies, this message is the only one left to finish the step."""
    model = CountingModel()
    loop = make_loop(model, CountingToolbox(), settings=SETTINGS)
    run_id, step = await first_model_step(loop, "same-message")
    await hold(loop, run_id, message_id=step.message_id, lease_seconds=3600)

    outcome = await loop.deliver("model", step)

    assert outcome.status == 503 and not outcome.acknowledged, outcome
    assert model.calls == 0


async def test_a_retry_after_inside_the_wait_bound_is_waited_out_by_the_redelivery() -> None:
    """A step released with a short not-before is claimed by the next delivery after waiting
    inside the request, instead of bouncing until Pub/Sub's backoff passes it."""
    model = CountingModel()
    loop = make_loop(model, CountingToolbox(), settings=SETTINGS)
    run_id, step = await first_model_step(loop, "not-before")
    deps = loop.deps
    claim = await deps.store.claim_step(run_id, StepKey.model(0), "model", owner="earlier",
                                        now=deps.clock.now(), lease_seconds=10,
                                        message_id=step.message_id)
    await deps.store.release_step(claim, error="429", not_before=deps.clock.now() + 15)
    started = deps.clock.now()

    outcome = await loop.deliver("model", step)

    assert outcome.status == 204, outcome
    assert 15 <= deps.clock.now() - started <= 17.5
    assert model.calls == 1


async def test_follow_ups_for_a_busy_conversation_are_queued_acknowledged_and_run_in_order(
) -> None:
    model = CountingModel()
    loop = make_loop(model, CountingToolbox(), settings=SETTINGS)
    ids = ["follow-1", "follow-2", "follow-3"]
    await loop.submit(QueryMessage(request_id=ids[0], text="first", conversation_id="conv"))
    loop._collect()
    (kind, query), = list(loop._queue)
    loop._queue.clear()
    assert (await loop.deliver(kind, query)).acknowledged
    loop._collect()
    (_, first_step), = list(loop._queue)  # held back while the follow-ups arrive
    loop._queue.clear()

    for request_id, text in zip(ids[1:], ["second", "third"], strict=True):
        await loop.submit(QueryMessage(request_id=request_id, text=text,
                                       conversation_id="conv"))
        loop._collect()
        (kind, follow_up), = list(loop._queue)
        loop._queue.clear()
        outcome = await loop.deliver(kind, follow_up)
        assert outcome.acknowledged, outcome  # recorded durably: no 503, no redelivery
        loop._collect()
        assert not loop._queue, "a queued run publishes no step while the conversation is busy"
        queued = await loop.deps.store.get_run(run_id_for_request(request_id))
        assert queued is not None and queued.status is RunStatus.QUEUED

    loop._queue.append(("model", first_step))
    await loop.run_until_idle()

    runs = [await loop.deps.store.get_run(run_id_for_request(i)) for i in ids]
    assert [r.status for r in runs if r] == [RunStatus.COMPLETED] * 3
    finished = [r.finished_at or 0 for r in runs if r]
    started = [r.started_at for r in runs if r]
    assert started[1] >= finished[0] and started[2] >= finished[1]  # one at a time, in order
    transcript = await loop.deps.store.load_transcript("conv")
    users = [c["parts"][0]["text"] for c in transcript.contents if c["role"] == "user"]
    assert users == ["first", "second", "third"]
    assert sorted(a.run_id for a in loop.answers) == sorted(run_id_for_request(i) for i in ids)


async def test_a_cancelled_queued_run_never_starts_and_the_next_one_does() -> None:
    model = CountingModel()
    loop = make_loop(model, CountingToolbox(), settings=SETTINGS)
    for request_id in ("q-1", "q-2", "q-3"):
        await loop.submit(QueryMessage(request_id=request_id, text=request_id,
                                       conversation_id="conv-cancel"))
    loop._collect()
    for kind, query in list(loop._queue):
        assert (await loop.deliver(kind, query)).acknowledged
    loop._queue.clear()
    loop._collect()
    cancelled = await cancel_run(loop.deps, run_id_for_request("q-2"))
    assert cancelled is not None and cancelled.status is RunStatus.CANCELLED

    await loop.run_until_idle()

    statuses = [(await loop.deps.store.get_run(run_id_for_request(i))) for i in
                ("q-1", "q-2", "q-3")]
    assert [r.status for r in statuses if r] == [
        RunStatus.COMPLETED, RunStatus.CANCELLED, RunStatus.COMPLETED]
    assert model.calls == 2  # the cancelled run never reached the model
    steps = await loop.deps.store.get_steps(run_id_for_request("q-2"),
                                            [str(StepKey.model(0))])
    assert steps == [None]
    ended = {a.run_id: a.status for a in loop.answers}
    assert ended[run_id_for_request("q-2")] == RunStatus.CANCELLED


@pytest.mark.parametrize("extra", [0, 1])
async def test_a_conversation_queue_is_bounded_with_a_clear_refusal(extra: int) -> None:
    from ackloop.store import MAX_QUEUED_RUNS

    loop = make_loop(CountingModel(), CountingToolbox(), settings=SETTINGS)
    for n in range(MAX_QUEUED_RUNS + 1 + extra):
        await loop.submit(QueryMessage(request_id=f"bound-{n}", text="x",
                                       conversation_id="conv-full"))
    loop._collect()
    outcomes = [await loop.deliver(kind, q) for kind, q in list(loop._queue)]
    loop._queue.clear()
    assert all(o.acknowledged for o in outcomes)  # a refusal is acknowledged and recorded
    last = await loop.deps.store.get_run(run_id_for_request(f"bound-{MAX_QUEUED_RUNS + extra}"))
    if extra:
        assert last is None or last.status is RunStatus.FAILED
        assert "conversation_queue_full" in str(outcomes[-1].body)
    else:
        assert last is not None and last.status is RunStatus.QUEUED
