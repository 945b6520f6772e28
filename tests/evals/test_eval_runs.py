"""Evals in process: every case a real run of the engine, checked; recorded runs replayed.

The engine is the deployed handlers' on the in-memory store (``ackloop.AgentTester``); the
agents' tools count their calls, and the models count theirs, so a replay's "no model called,
no tool run" is counted where it would happen."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_evals import Case, Dataset
from pydantic_evals.evaluators import Contains, EqualsExpected

from ackloop import Agent, AgentTester, FunctionModel, call, text, tool
from ackloop.evals import (
    Budget,
    Children,
    EvalInputs,
    EvalRunner,
    ForbiddenTools,
    Handoffs,
    MatchesSchema,
    Output,
    Regex,
    Status,
    Trajectory,
    capture,
)
from ackloop.evals.cases import EvalDataset
from ackloop.evals.targets import InProcessTarget, store_view
from ackloop.model.base import ModelRequest, ModelTurn
from ackloop.model.turns import text_turn

TOOL_CALLS: list[str] = []
SCRIPT_CALLS: list[str] = []


@tool
async def lookup_order(order_id: str) -> dict[str, str]:
    """Look up an order.

    Args:
        order_id: The order's id.
    """
    TOOL_CALLS.append(f"lookup_order {order_id}")
    return {"order_id": order_id, "status": "shipped"}


@tool(requires_approval=True)
async def refund(order_id: str) -> dict[str, str]:
    """Refund an order (a person approves it first).

    Args:
        order_id: The order's id.
    """
    TOOL_CALLS.append(f"refund {order_id}")
    return {"order_id": order_id, "refunded": "yes"}


def support_script(conversation: Any) -> Any:
    SCRIPT_CALLS.append(conversation.question)
    done = [r.name for r in conversation.results]
    if "lookup_order" not in done:
        return call("lookup_order", order_id="A-1")
    if "refund" in conversation.question and "refund" not in done:
        return call("refund", order_id="A-1")
    if "refund" in done:
        result = conversation.results[-1]
        return text("Refunded." if result.error is None else f"Not refunded: {result.error}")
    return text("Order A-1 has shipped.")


INSTRUCTIONS = "Help with orders."


def support(instructions: str = INSTRUCTIONS, *, renamed: bool = False) -> Agent:
    tools = [lookup_order, refund]
    if renamed:
        @tool("find_order")
        async def find_order(order_id: str) -> dict[str, str]:
            """Find an order.

            Args:
                order_id: The order's id.
            """
            return {}

        tools = [find_order, refund]
    return Agent("default", instructions, tools, script=FunctionModel(support_script))


class Verdict(BaseModel):
    order_id: str
    shipped: bool


def verdict_script(conversation: Any) -> Any:
    if not conversation.results:
        return call("lookup_order", order_id="B-7")
    if len(conversation.results) == 1:
        return call("final_answer", order_id="B-7", shipped=True)
    return text("done")


def dataset(*cases: Case[EvalInputs, Any, Any]) -> EvalDataset:
    return Dataset[EvalInputs, Any, Any](name="support", cases=list(cases))


def failed(report: Any, name: str) -> dict[str, str]:
    (case,) = [c for c in report.cases if c.name == name]
    return {c.name: c.reason or "" for c in case.failures()}


async def test_each_check_passes_on_the_run_that_meets_it_and_fails_with_its_reason() -> None:
    structured = Agent("structured", "Report on orders.", [lookup_order], output=Verdict,
                       script=FunctionModel(verdict_script))
    order = EvalInputs(question="where is A-1?")
    report = await EvalRunner(agents=[support(), structured]).run(dataset(
        Case(name="meets", inputs=order, evaluators=(
            Contains("shipped"), Regex(r"A-\d has shipped"),
            Trajectory(calls=[{"name": "lookup_order", "args": {"order_id": {"$regex": "^A-"}}}],
                       mode="exact"),
            ForbiddenTools(tools=["refund"]),
            Budget(model_calls=2, tool_calls=1, cost_usd=0.01, approval=False))),
        Case(name="misses", inputs=order, evaluators=(
            Contains("lost"), Regex(r"^Refunded"),
            Trajectory(calls=["refund"], mode="in_order", forbidden=["lookup_order"]),
            ForbiddenTools(tools=["lookup_order"]),
            Budget(model_calls=1, tool_calls=0, approval=True))),
        Case(name="structured", inputs=EvalInputs(question="B-7?", agent="structured"),
             evaluators=(
                 MatchesSchema({"type": "object", "required": ["order_id", "shipped"]}),
                 Output({"order_id": {"$regex": "^B-"}, "shipped": True}))),
        Case(name="structured-wrong", inputs=EvalInputs(question="B-7?", agent="structured"),
             evaluators=(MatchesSchema({"type": "object", "required": ["refund"]}),
                         Output({"shipped": False}))),
    ))
    by_name = {c.name: c for c in report.cases}
    assert failed(report, "meets") == {}
    assert by_name["meets"].passed and by_name["meets"].score == 1.0
    assert by_name["structured"].passed
    assert failed(report, "misses") == {
        "Contains": "Output string 'Order A-1 has shipped.' does not contain expected string "
                    "'lost'",
        "Regex": "no match of /^Refunded/ in 'Order A-1 has shipped.'",
        "trajectory": "0 of 1 expected call(s) made (in_order)\n  - refund(…)  (expected, not "
                      "made)\n  calls made: lookup_order\n  ! lookup_order({\"order_id\": "
                      "\"A-1\"})  (forbidden)",
        "forbidden_tools": 'called: lookup_order({"order_id": "A-1"})',
        "budget_model_calls": "model_calls: 2 spent, at most 1 allowed",
        "budget_tool_calls": "tool_calls: 1 spent, at most 0 allowed",
        "budget_approval": "no call waited for an approval",
    }
    wrong = failed(report, "structured-wrong")
    assert wrong["MatchesSchema"] == "(root): 'refund' is a required property"
    assert wrong["output"] == "shipped: True does not match False"
    assert report.summary.runs == 4 and report.summary.passed == 2
    assert 0 < by_name["misses"].score < 1


async def test_approvals_are_decided_as_the_case_says() -> None:
    ask = EvalInputs(question="refund A-1 please", approvals="approve")
    reject = EvalInputs(question="refund A-1 please", approvals="reject")
    report = await EvalRunner(agents=[support()]).run(dataset(
        Case(name="approved", inputs=ask, evaluators=(
            Contains("Refunded."), Budget(approval=True),
            Trajectory(calls=["lookup_order", "refund"], mode="exact"))),
        Case(name="rejected", inputs=reject, evaluators=(Contains("Not refunded"),)),
    ))
    assert [c.passed for c in report.cases] == [True, True], [c.failures() for c in report.cases]


class Alternating:
    """A model that answers yes, then no, then yes...: a flaky agent for pass@k."""

    provider = "test"

    def __init__(self) -> None:
        self.calls = 0

    async def generate(self, request: ModelRequest) -> ModelTurn:
        self.calls += 1
        return text_turn("yes" if self.calls % 2 else "no", request=request)


async def test_repetitions_give_pass_at_k_and_pass_all_k() -> None:
    steady = Agent("steady", "Say yes.", script=FunctionModel(lambda c: text("yes")))
    runner = EvalRunner(agents=[steady], model=Alternating(), repeat=4, concurrency=1)
    report = await runner.run(dataset(Case(name="flaky", inputs=EvalInputs(question="?",
                                                                         agent="steady"),
                                           evaluators=(Contains("yes"),))))
    assert [(c.name, c.repetition, c.passed) for c in report.cases] == [
        ("flaky", 1, True), ("flaky", 2, False), ("flaky", 3, True), ("flaky", 4, False)]
    s = report.summary
    assert (s.cases, s.runs, s.pass_rate, s.pass_at_k, s.pass_all_k) == (1, 4, 0.5, 1.0, 0.0)
    assert s.eval_cost_usd == 0  # no judge, nothing read to follow the runs: nothing of its own


async def test_the_same_eval_asked_again_finds_its_runs_and_runs_nothing_twice() -> None:
    tester = AgentTester(support())
    target = InProcessTarget(deps=tester.deps, loop=tester.loop)
    cases = dataset(*(Case(name=f"c{i}", inputs=EvalInputs(question=f"where is A-{i}?"))
                      for i in range(3)))
    first = await EvalRunner(target=target, concurrency=3).run(cases, eval_id="ev-again")
    made = len(TOOL_CALLS), len(SCRIPT_CALLS)
    again = await EvalRunner(target=target, concurrency=3).run(cases, eval_id="ev-again")
    assert (len(TOOL_CALLS), len(SCRIPT_CALLS)) == made
    assert [c.run_id for c in again.cases] == [c.run_id for c in first.cases]
    assert len({c.run_id for c in first.cases}) == 3 and again.passed


async def _recorded(agents: Agent | list[Agent], question: str, **ask: Any) -> Any:
    tester = AgentTester(agents)
    result = await tester.ask(question, **ask)
    view = await store_view(tester.deps, result.run_id)
    assert view is not None
    return view


async def test_a_replay_calls_no_model_runs_no_tool_and_makes_the_same_calls() -> None:
    view = await _recorded(support(), "where is A-1?")
    recorded = capture(view, {"default": INSTRUCTIONS}.get)
    calls, scripted = len(TOOL_CALLS), len(SCRIPT_CALLS)
    report = await EvalRunner(agents=[support()]).run(dataset(Case(
        name="replayed", inputs=EvalInputs(question="where is A-1?", cassette=recorded),
        expected_output="Order A-1 has shipped.",
        evaluators=(EqualsExpected(), Trajectory(calls=[{"name": "lookup_order",
                                                          "args": {"order_id": "A-1"}}],
                                                   mode="exact")))))
    (case,) = report.cases
    assert case.passed and case.replay, case.failures()
    assert (len(TOOL_CALLS), len(SCRIPT_CALLS)) == (calls, scripted)
    assert case.trajectory == ['lookup_order({"order_id": "A-1"})']
    assert report.summary.replayed == 1 and report.summary.cost_usd == 0


@pytest.mark.parametrize(("changed", "why"), [
    (dict(instructions="Help with orders, politely."),
     "replay left the recording at step 0000-model: agent 'default''s instructions changed"),
    (dict(renamed=True),
     "replay left the recording at step 0001-model: the agent has no tool 'lookup_order' now"),
])
async def test_a_changed_agent_stops_the_replay_where_it_leaves_the_recording(
        changed: dict[str, Any], why: str) -> None:
    view = await _recorded(support(), "where is A-1?")
    recorded = capture(view, {"default": INSTRUCTIONS}.get)
    agent = support(**changed)
    report = await EvalRunner(agents=[agent]).run(dataset(Case(
        name="replayed", inputs=EvalInputs(question="where is A-1?", cassette=recorded))))
    (case,) = report.cases
    assert not case.passed and case.status == "failed"
    assert why in failed(report, "replayed")["status"]


async def test_a_replay_decides_approvals_as_they_were_decided() -> None:
    view = await _recorded(support(), "refund A-1 please")
    assert view["status"] == "running"  # waits for the approval: decide it, then record
    tester = AgentTester(support())
    runner_target = InProcessTarget(deps=tester.deps, loop=tester.loop)
    report = await EvalRunner(target=runner_target).run(dataset(Case(
        name="live", inputs=EvalInputs(question="refund A-1 please", approvals="reject"))),
        eval_id="ev-approval")
    (live,) = report.cases
    view = await store_view(tester.deps, str(live.run_id))
    recorded = capture(view, {"default": INSTRUCTIONS}.get)
    assert recorded.runs[""].call("0001-tool-000").decision["decision"] == "reject"
    calls = len(TOOL_CALLS)
    replay = await EvalRunner(agents=[support()]).run(dataset(Case(
        name="replayed", inputs=EvalInputs(question="refund A-1 please", cassette=recorded),
        evaluators=(Contains("Not refunded"), Budget(approval=True)))))
    assert replay.passed, replay.cases[0].failures()
    assert len(TOOL_CALLS) == calls


async def test_child_runs_and_hand_offs_are_checked_and_replayed() -> None:
    from ackloop_dev.agents.research_team import research_team_agents

    team = research_team_agents()
    question = "What limits how fast a durable agent can run?"
    checks = (Children(agents=["critic", "researcher"]), Handoffs(agents=["writer"]),
              Trajectory(calls=["ask_critic", "ask_researcher", "transfer_to_writer"],
                         mode="any_order"))
    live = await EvalRunner(agents=team).run(dataset(Case(
        name="team", inputs=EvalInputs(question=question, agent="research-team"),
        evaluators=checks)))
    assert live.passed, live.cases[0].failures()
    view = await _recorded(team, question, agent="research-team")
    recorded = capture(view, {a.name: a.instructions for a in team}.get)
    assert sorted(recorded.runs) == ["", "0000-tool-000", "0000-tool-001"]
    replay = await EvalRunner(agents=research_team_agents()).run(dataset(Case(
        name="team", inputs=EvalInputs(question=question, agent="research-team",
                                       cassette=recorded), evaluators=checks)))
    assert replay.passed, replay.cases[0].failures()
    assert replay.cases[0].trajectory == live.cases[0].trajectory


def test_facts_are_plain_data() -> None:
    """The facts travel as a case's attribute in JSON; the checks read back the same facts."""
    import json

    from pydantic_evals.evaluators import EvaluatorContext
    from pydantic_evals.otel.span_tree import SpanTree

    from ackloop.evals.checks import facts_of
    from ackloop.evals.facts import run_facts

    facts = run_facts({
        "run_id": "r", "agent": "a", "status": "completed", "stop_reason": "max_steps",
        "answer": None, "usage": {"model_calls": 2, "tool_calls": 1},
        "steps": [{"key": "0000-model", "kind": "model", "turn": 0, "result": {
                       "calls": [{"name": "lookup_order", "args": {"order_id": "A-1"}}]}},
                  {"key": "0000-tool-000", "kind": "tool", "turn": 0, "index": 0,
                   "name": "lookup_order", "result": {"response": {"result": "shipped"}}}]})
    plain = json.loads(json.dumps(dataclasses.asdict(facts)))
    assert plain["calls"] == [{"name": "lookup_order", "args": {"order_id": "A-1"},
                               "step": "0000-tool-000", "run": "", "agent": "a",
                               "response": {"result": "shipped"}}]

    def context(run: Any) -> EvaluatorContext[Any, Any, Any]:
        return EvaluatorContext(name="c", inputs=None, metadata=None, expected_output=None,
                                output=None, duration=0.0, _span_tree=SpanTree(),
                                attributes={"run": run}, metrics={})

    assert facts_of(context(plain)) == facts
    # The check every case gets reads them: stopped by a budget is not an answer.
    verdict = Status().evaluate(context(plain))["status"]
    assert not verdict.value and verdict.reason == ("the run completed (max_steps); "
                                                    "expected completed")
