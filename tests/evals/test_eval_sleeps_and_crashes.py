"""Evals in process of an agent whose tool sleeps, live and replayed; a check that crashes.

A sleep costs an eval case no time: the in-process engine's clock moves on to the call's time,
as :class:`ackloop.AgentTester`'s does, and a replay lets the recorded wake come as a time
(the call's own, in the replay), not as an event. A check that raises fails its case with
the exception's message; it never counts as passed."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from pydantic_evals import Case, Dataset
from pydantic_evals.evaluators import Contains, Evaluator, EvaluatorContext

from ackloop import Agent, AgentTester, FunctionModel, call, text, tool
from ackloop.evals import Budget, EvalInputs, EvalRunner, Trajectory, capture
from ackloop.evals.cases import EvalDataset
from ackloop.evals.targets import store_view

DAY = 24 * 3600.0
FOLLOWED: list[dict[str, Any]] = []


@tool(sleeps=lambda args: args["days"] * DAY)
async def follow_up(days: int) -> str:
    """Follow up with the customer after some days.

    Args:
        days: How many days to wait first.
    """
    FOLLOWED.append({"days": days})
    return f"followed up after {days} days"


def follow_up_script(conversation: Any) -> Any:
    if not conversation.results:
        return call("follow_up", days=3)
    return text(f"Done: {conversation.results[-1].result}.")


def agent(instructions: str = "Follow up with customers.") -> Agent:
    return Agent("default", instructions, [follow_up], script=FunctionModel(follow_up_script))


def dataset(*cases: Case[EvalInputs, Any, Any]) -> EvalDataset:
    return Dataset[EvalInputs, Any, Any](name="sleeps", cases=list(cases))


CHECKS = (Contains("Done: followed up after 3 days."),
          Trajectory(calls=[{"name": "follow_up", "args": {"days": 3}}], mode="exact"))


async def test_a_case_whose_tool_sleeps_three_days_ends_at_once_in_process() -> None:
    ran = len(FOLLOWED)
    started = time.monotonic()
    report = await EvalRunner(agents=[agent()], timeout=5.0).run(dataset(Case(
        name="sleeps", inputs=EvalInputs(question="follow up in 3 days"), evaluators=CHECKS)))
    wall = time.monotonic() - started
    (case,) = report.cases
    assert case.error is None and case.passed, (case.error, case.failures())
    assert case.status == "completed" and len(FOLLOWED) == ran + 1
    assert wall < 5.0, wall  # the three days cost no wall time


async def test_a_captured_sleeping_run_replays_its_wake_as_a_time() -> None:
    tester = AgentTester(agent())
    result = await tester.ask("follow up in 3 days")
    assert result.status == "completed"
    view = await store_view(tester.deps, result.run_id)
    assert view is not None
    recorded = capture(view, {"default": agent().instructions}.get)
    (slept,) = recorded.runs[""].calls
    assert slept.decision is not None and slept.decision["by"] == "clock"  # a wake, no event
    ran = len(FOLLOWED)
    report = await EvalRunner(agents=[agent()], timeout=5.0).run(dataset(Case(
        name="replayed", inputs=EvalInputs(question="follow up in 3 days", cassette=recorded),
        evaluators=(*CHECKS, Budget(model_calls=2, tool_calls=1)))))
    (case,) = report.cases
    assert case.error is None and case.passed, (case.error, case.failures())
    assert case.replay and len(FOLLOWED) == ran  # the recorded result, no tool ran


@dataclass
class Crashes(Evaluator[Any, Any, Any]):
    """A check with a bug: it raises whatever the run did."""

    def evaluate(self, ctx: EvaluatorContext[Any, Any, Any]) -> bool:
        raise KeyError("no such field: 'verdict'")


async def test_a_check_that_raises_fails_its_case_with_the_exception() -> None:
    plain = Agent("default", "Answer.", script=FunctionModel(lambda c: text("Answered.")))
    report = await EvalRunner(agents=[plain], timeout=5.0).run(dataset(Case(
        name="crashed-check", inputs=EvalInputs(question="anything?"),
        evaluators=(Contains("Answered."), Crashes()))))
    (case,) = report.cases
    assert not case.passed and not report.passed
    assert report.summary.passed == 0 and case.score < 1
    (crashed,) = [c for c in case.checks if c.name == "Crashes"]
    assert crashed.failed and crashed.value is False
    assert [c.name for c in case.checks if not c.failed] == ["status", "Contains"]
    assert crashed.reason is not None
    assert "the check failed to run" in crashed.reason
    assert "KeyError" in crashed.reason and "no such field: 'verdict'" in crashed.reason
