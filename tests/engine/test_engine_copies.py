"""A completed step delivered again sends what it committed only when the delivery is of the
message that completed it (its first delivery may have died before the send). A copy of the
step published by another message (the sweeper's re-send while Pub/Sub still held the first in
its backoff) sends nothing: the next step, which runs unclaimed, would be delivered twice and
call twice (ackloop.engine.outbox_sending.sends_again)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ackloop.domain.keys import run_id_for_request
from ackloop.domain.records import RunStatus, StepRecord
from ackloop.domain.wire import QueryMessage
from ackloop.engine.outbox_sending import sends_again
from ackloop.model.scripted import ScriptedModel
from ackloop.model.turns import calls_turn, text_turn
from ackloop.testing.inprocess import InProcessLoop
from tests.engine.fakes import CountingToolbox, first_model_step, make_loop


def _model() -> ScriptedModel:
    return ScriptedModel.from_turns([calls_turn([("lookup", {"key": "a"})]), text_turn("done")])


def _copy(message: object, message_id: str) -> object:
    return replace(message, message_id=message_id)  # type: ignore[type-var]


async def _completed(loop: InProcessLoop, kind: str, message: object) -> list[tuple[str, object]]:
    """Deliver ``message`` once; return what its commit sent, taken off the queue."""
    outcome = await loop.deliver(kind, message)  # type: ignore[arg-type]
    assert outcome.acknowledged
    loop._collect()
    sent = list(loop._queue)
    loop._queue.clear()
    return sent


async def _sent_by(loop: InProcessLoop, kind: str, message: object) -> list[str]:
    outcome = await loop.deliver(kind, message)  # type: ignore[arg-type]
    assert outcome.acknowledged
    loop._collect()
    sent = [k for k, _ in loop._queue]
    loop._queue.clear()
    return sent


@pytest.mark.parametrize("stage", ["model", "tool"])
async def test_a_copy_of_a_completed_step_sends_nothing_its_redelivery_sends_again(
        stage: str) -> None:
    tools = CountingToolbox({"lookup": 1})
    model = _model()
    loop = make_loop(model, tools)
    kind, step = await first_model_step(loop, QueryMessage(request_id=stage, text="go"))
    if stage == "tool":
        ((kind, step),) = await _completed(loop, kind, step)
        assert kind == "tool"
    sent = await _completed(loop, kind, step)
    assert [k for k, _ in sent] == ["tool" if stage == "model" else "model"]

    # The engine's own copy (another message id): its delivery finds the step completed and
    # leaves the next step to the message that completed it.
    assert await _sent_by(loop, kind, _copy(step, "engine-copy")) == []
    # The same message delivered again: its first delivery may have died before the send.
    assert await _sent_by(loop, kind, step) == [k for k, _ in sent]

    loop._queue.extend(sent)
    await loop.run_until_idle()
    run = await loop.deps.store.runs.get_run(run_id_for_request(stage))
    assert run is not None and run.status is RunStatus.COMPLETED
    assert tools.executed["lookup"] == 1
    assert model.calls == run.usage.model_calls == 2  # type: ignore[attr-defined]


@pytest.mark.parametrize(("recorded", "delivered", "redriven", "sends"), [
    ("m1", "m1", False, True),    # the completing message, redelivered
    ("m1", "m2", False, False),   # another message's copy of the step
    ("m1", "m2", True, True),     # a redrive's: what the step sent met a failed run
    ("", "m2", False, True),      # a step that does not say which message completed it
    ("m1", "", False, True),      # a delivery without an id (a direct call)
])
def test_sends_again(recorded: str, delivered: str, redriven: bool, sends: bool) -> None:
    step = StepRecord(key="0000-model", kind="model", name="m", turn=0, message_id=recorded)
    assert sends_again(step, delivered, redriven) is sends
