"""What the ledger records when a step's commit finds the world changed since its read: a run
ended meanwhile, or a compaction already made by another delivery of the same step. In-memory
engine, manual clock, real dispatch."""

from __future__ import annotations

import pytest

from ackloop.agents.agent import Agent, AgentRegistry
from ackloop.bus.memory import MemoryPublisher
from ackloop.config.settings import Settings
from ackloop.docdb.counting import CountingDocumentDB
from ackloop.docdb.memory import MemoryDocumentDB
from ackloop.domain.clock import ManualClock
from ackloop.domain.keys import run_id_for_request
from ackloop.domain.records import RunStatus, StepStatus, StopReason
from ackloop.domain.wire import QueryMessage, Usage
from ackloop.engine.deps import Deps
from ackloop.engine.ending import end_run_now, run_end
from ackloop.model.base import ModelRequest, ModelTurn
from ackloop.model.turns import text_turn
from ackloop.store import AgentStore
from ackloop.testing.inprocess import InProcessLoop
from tests.engine.test_guarantees import deliver, take

SETTINGS = Settings(lease_seconds=60.0, step_claims="always")


class EndsTheRunDuringItsCall:
    """A model whose first call sees its run ended outside any step (a dead letter, the
    sweeper) before it answers."""

    provider = "scripted"

    def __init__(self) -> None:
        self.deps: Deps | None = None
        self.calls = 0

    async def generate(self, request: ModelRequest) -> ModelTurn:
        self.calls += 1
        assert self.deps is not None
        if self.calls == 1:
            await end_run_now(self.deps, run_id_for_request("q"),
                              run_end(StopReason.FAILED, Usage(), error="dead-lettered"))
        return text_turn("too late", request=request)


@pytest.mark.parametrize("claims", ["always", "auto"])
async def test_a_step_whose_run_ended_before_its_commit_is_released_unrecorded(
        claims: str) -> None:
    """The step claimed (or ran unclaimed: its release then creates its document, so that its
    attempt is counted) and called; its run was ended outside a step before its commit. The
    commit, refused, reads the run again and finds it ended: the step is not recorded, its lease
    is given back (no delivery of it waits one out), and the run stays as it was ended."""
    model = EndsTheRunDuringItsCall()
    publisher = MemoryPublisher()
    clock = ManualClock()
    settings = SETTINGS.model_copy(update={"step_claims": claims})
    deps = Deps(settings=settings, store=AgentStore(CountingDocumentDB(MemoryDocumentDB())),
                publisher=publisher, model=model,
                agents=AgentRegistry([Agent("default", "Answer.")]), clock=clock,
                owner="test-owner")
    model.deps = deps
    loop = InProcessLoop(deps, publisher)
    await loop.submit(QueryMessage(request_id="q", text="hi"))
    (query,) = take(loop)
    await deliver(loop, query)
    step_messages = [m for m in take(loop) if m.topic == SETTINGS.model_steps_topic]
    (first,) = step_messages
    take(loop)

    outcome = await deliver(loop, first)

    assert outcome.acknowledged, outcome
    run_id = run_id_for_request("q")
    run = await deps.store.runs.get_run(run_id)
    assert run is not None and run.status is RunStatus.FAILED and run.answer is None
    assert run.error == "dead-lettered"
    (step,) = await deps.store.steps.get_steps(run_id, ["0000-model"])
    assert step is not None and step.status is StepStatus.RUNNING and step.result is None
    assert step.lease_expires_at <= clock.now(), (step.lease_expires_at, clock.now())
    assert step.last_error is not None and "not recorded" in step.last_error
    assert model.calls == 1

    again = await deliver(loop, first)  # a redelivery: nothing left to do, nothing to wait
    assert again.acknowledged and again.retry_after is None, again
    assert model.calls == 1
