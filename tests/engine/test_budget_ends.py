"""How a run ends when its budget and a failing step meet, and what a redrive gives back.

Both on the shipped settings (``Settings()``): the model step's retry waits, the attempt bound
and the default time budget are the ones a deployment runs with.
"""

from __future__ import annotations

from ackloop.domain.errors import ModelRetryableError
from ackloop.domain.records import RunStatus, StopReason
from ackloop.engine.redrive import redrive
from ackloop.model.base import ModelRequest, ModelTurn
from ackloop.model.scripted import ScriptedModel
from ackloop.model.turns import text_turn
from tests.engine.fakes import CountingToolbox, make_loop
from tests.engine.test_guarantees import deliver, run_of, start, take
from tests.engine.test_holes import advance, answers, dead_letter


class FailingUntilHealed:
    """A model whose every call fails with a retryable 500 until ``healed`` is set."""

    def __init__(self) -> None:
        self.healed = False
        self.calls = 0

    def __call__(self, request: ModelRequest) -> ModelTurn:
        self.calls += 1
        if not self.healed:
            raise ModelRetryableError("500 internal: the backend is down")
        return text_turn("better now")


async def test_a_step_failing_on_every_delivery_fails_its_run_with_its_error_at_the_budget(
) -> None:
    """Each delivery waits out what it can in the request and is released; when the run's time
    budget is spent before the attempts are, the run ends ``failed`` with the step's last
    error, not ``completed`` with no answer (which reads as if the budget were the cause)."""
    script = FailingUntilHealed()
    loop = make_loop(ScriptedModel(script), CountingToolbox())
    run_id, first = await start(loop, "budget-vs-500")
    budget = (await run_of(loop, run_id)).limits.max_seconds

    assert (await deliver(loop, first)).status == 503  # released for redelivery
    advance(loop, budget + 1)  # Pub/Sub's backoff outlasts the budget
    outcome = await deliver(loop, first)

    run = await run_of(loop, run_id)
    assert outcome.status == 204
    assert run.status is RunStatus.FAILED and run.stop_reason is StopReason.FAILED
    assert run.error is not None
    assert "max_seconds" in run.error and "500 internal: the backend is down" in run.error
    assert {(a.status, a.error) for a in answers(loop, take(loop))} == {("failed", run.error)}


async def test_a_budget_stop_without_a_failing_step_still_completes_with_its_reason() -> None:
    """The other side of the rule: a run whose step never failed stops on its budget as
    before (completed, stop reason max_seconds)."""
    loop = make_loop(ScriptedModel(lambda request: text_turn("late")), CountingToolbox())
    run_id, first = await start(loop, "budget-only")
    advance(loop, (await run_of(loop, run_id)).limits.max_seconds + 1)

    assert (await deliver(loop, first)).status == 204

    run = await run_of(loop, run_id)
    assert (run.status, run.stop_reason, run.error) == (
        RunStatus.COMPLETED, StopReason.MAX_SECONDS, None)


async def test_a_redriven_run_gets_its_time_budget_back() -> None:
    """A run failed by a dead letter and re-driven after longer than its time budget runs its
    step (the operator asked for another try) instead of stopping at the first claim."""
    script = FailingUntilHealed()
    loop = make_loop(ScriptedModel(script), CountingToolbox())
    run_id, first = await start(loop, "redrive-budget")
    assert (await deliver(loop, first)).status == 503
    await dead_letter(loop, first)
    assert (await run_of(loop, run_id)).status is RunStatus.FAILED
    take(loop)

    advance(loop, (await run_of(loop, run_id)).limits.max_seconds + 3600)  # fixed an hour later
    script.healed = True
    done = await redrive(loop.deps.store, loop.publisher, loop.deps.settings, loop.deps.clock)
    assert [r.outcome for r in done] == ["redriven"]
    (resent,) = [m for m in take(loop) if m.topic != loop.deps.settings.answers_topic]
    assert (await deliver(loop, resent)).status == 204

    run = await run_of(loop, run_id)
    assert (run.status, run.answer) == (RunStatus.COMPLETED, "better now")
    assert script.healed and script.calls >= 2
