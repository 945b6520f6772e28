"""The pure rules of a model step, as tables: :func:`budget_stop` (why a step stops before it
calls the model) and :func:`decide` (what a model turn produces)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

import pytest
from pydantic import BaseModel

from ackloop.agents.agent import Agent
from ackloop.domain.clock import ManualClock
from ackloop.domain.records import RunLimits, RunRecord, RunStatus, StopReason
from ackloop.domain.wire import ModelStepMessage, Usage
from ackloop.engine.deps import Deps
from ackloop.engine.model_step import TurnContext, budget_stop, decide
from ackloop.engine.structured import FINAL_ANSWER_TOOL, contract_for
from ackloop.model.base import ModelTurn
from ackloop.model.turns import calls_turn, text_turn

NOW = 1_700_000_000.0


def run_record(*, max_steps: int = 10, max_seconds: float = 60.0, max_tool_calls: int = 5,
               max_tokens: int | None = None, cancel: bool = False,
               started_ago: float = 0.0, waited: float = 0.0) -> RunRecord:
    return RunRecord(
        run_id="run-1", request_id="req-1", request_hash="h", conversation_id="c",
        agent="default", text="hi", model="m", created_at=NOW - 1000.0,
        started_at=NOW - started_ago, waited_seconds=waited, cancel_requested=cancel,
        status=RunStatus.RUNNING,
        limits=RunLimits(max_steps=max_steps, max_seconds=max_seconds,
                         max_tool_calls=max_tool_calls, max_tokens=max_tokens))


def deps_at(now: float = NOW) -> Deps:
    """What budget_stop reads of the deps: the clock alone."""
    return cast(Deps, SimpleNamespace(clock=ManualClock(now)))


def message(turn: int = 0, *, total_tokens: int = 0, children_calls: int | None = None
            ) -> ModelStepMessage:
    children = (Usage(model_calls=children_calls) if children_calls is not None else None)
    usage = Usage(model_calls=turn + (children_calls or 0), total_tokens=total_tokens,
                  children=children)
    return ModelStepMessage(run_id="run-1", turn=turn, usage=usage)


@pytest.mark.parametrize(("case", "run", "msg", "expected"), [
    ("nothing spent", run_record(), message(0), None),
    ("a cancel wins over every budget",
     run_record(cancel=True, max_steps=1, started_ago=600), message(5), StopReason.CANCELLED),
    ("turns below max_steps", run_record(max_steps=3), message(2), None),
    ("turns at max_steps", run_record(max_steps=3), message(3), StopReason.MAX_STEPS),
    ("children's model calls count toward max_steps",
     run_record(max_steps=5), message(2, children_calls=3), StopReason.MAX_STEPS),
    ("children's model calls below what is left",
     run_record(max_steps=5), message(2, children_calls=2), None),
    ("one child call past what is left",
     run_record(max_steps=5), message(0, children_calls=5), StopReason.MAX_STEPS),
    ("seconds at max_seconds", run_record(max_seconds=60, started_ago=60), message(1), None),
    ("seconds past max_seconds",
     run_record(max_seconds=60, started_ago=61), message(1), StopReason.MAX_SECONDS),
    ("time waited is not the run's",
     run_record(max_seconds=60, started_ago=100, waited=50), message(1), None),
    ("time waited is taken off once",
     run_record(max_seconds=60, started_ago=100, waited=30), message(1),
     StopReason.MAX_SECONDS),
    ("no token budget", run_record(), message(1, total_tokens=10**9), None),
    ("tokens below max_tokens", run_record(max_tokens=100), message(1, total_tokens=99), None),
    ("tokens at max_tokens",
     run_record(max_tokens=100), message(1, total_tokens=100), StopReason.MAX_TOKENS),
    ("steps are checked before seconds",
     run_record(max_steps=1, started_ago=600), message(1), StopReason.MAX_STEPS),
    ("seconds are checked before tokens",
     run_record(max_tokens=1, started_ago=600), message(1, total_tokens=5),
     StopReason.MAX_SECONDS),
])
def test_budget_stop(case: str, run: RunRecord, msg: ModelStepMessage,
                     expected: StopReason | None) -> None:
    assert budget_stop(deps_at(), run, msg) == expected, case


def test_budget_stop_counts_from_created_at_when_a_run_has_not_started() -> None:
    run = run_record(max_seconds=60).model_copy(update={"started_at": None})
    assert budget_stop(deps_at(NOW - 1000.0 + 60), run, message(0)) is None
    assert budget_stop(deps_at(NOW - 1000.0 + 61), run, message(0)) is StopReason.MAX_SECONDS


AGENT = Agent("default", "Answer.")
NEW = [{"role": "user", "parts": [{"text": "question"}]}]
TURN_USAGE = Usage(model_calls=1, prompt_tokens=10, output_tokens=2, total_tokens=12)


def ctx(*, turn: int = 1, tool_calls: int = 0, max_tool_calls: int = 5) -> TurnContext:
    spent = Usage(model_calls=turn, tool_calls=tool_calls, prompt_tokens=100,
                  total_tokens=100)
    return TurnContext(run_record(max_tool_calls=max_tool_calls),
                       ModelStepMessage(run_id="run-1", turn=turn, usage=spent), AGENT, NEW)


def with_usage(turn: ModelTurn) -> ModelTurn:
    return turn.model_copy(update={"usage": TURN_USAGE})


def test_decide_a_text_answer_ends_the_run_with_the_turn_counted() -> None:
    c = ctx()
    decision = decide(c, with_usage(text_turn("the answer")), None, 1.5)
    assert decision.end is not None
    assert (decision.end.status, decision.end.stop_reason, decision.end.answer) == (
        RunStatus.COMPLETED, StopReason.ANSWERED, "the answer")
    assert decision.end.usage == c.message.usage.plus(TURN_USAGE)
    assert decision.outbox == [] and decision.step_usage == TURN_USAGE
    assert decision.call_seconds == 1.5
    assert decision.contents[:-1] == NEW and decision.contents[-1]["role"] == "model"


@pytest.mark.parametrize(("calls", "spent", "limit", "ends"), [
    (2, 0, 5, False),
    (2, 3, 5, False),   # exactly at the limit: allowed
    (2, 4, 5, True),    # one past it
    (1, 5, 5, True),
    (6, 0, 5, True),
])
def test_decide_calls_fan_out_one_tool_step_each_within_max_tool_calls(
        calls: int, spent: int, limit: int, ends: bool) -> None:
    c = ctx(tool_calls=spent, max_tool_calls=limit)
    turn = with_usage(calls_turn([("lookup", {"key": str(i)}) for i in range(calls)]))
    decision = decide(c, turn, None, 0.0)
    usage = c.message.usage.plus(TURN_USAGE)
    if ends:
        assert decision.end is not None and decision.outbox == []
        assert decision.end.stop_reason is StopReason.MAX_TOOL_CALLS
        assert decision.end.usage == usage
        assert decision.contents == NEW  # the unanswered calls stay out of the transcript
        assert decision.result is not None and len(decision.result["calls"]) == calls
    else:
        assert decision.end is None
        assert [o.topic for o in decision.outbox] == ["tool_steps"] * calls
        assert [o.target_step for o in decision.outbox] == [
            f"0001-tool-{i:03d}" for i in range(calls)]
        assert all(o.data["usage"] == usage.model_dump(mode="json") for o in decision.outbox)
        assert [o.data["index"] for o in decision.outbox] == list(range(calls))
        assert decision.contents[-1]["role"] == "model"


class Answer(BaseModel):
    city: str


def test_decide_with_an_output_contract() -> None:
    contract = contract_for(None, Answer)
    assert contract is not None
    c = ctx()
    good = decide(c, with_usage(calls_turn([(FINAL_ANSWER_TOOL, {"city": "Lisbon"})])),
                  contract, 0.0)
    assert good.end is not None and good.end.stop_reason is StopReason.ANSWERED
    assert good.end.output == {"city": "Lisbon"}
    bad = decide(c, with_usage(calls_turn([(FINAL_ANSWER_TOOL, {"town": 1})])), contract, 0.0)
    assert bad.end is None and bad.result is not None and bad.result["feedback"] is True
    (following,) = bad.outbox
    assert following.topic == "model_steps" and following.target_step == "0002-model"
    assert following.data["usage"] == c.message.usage.plus(TURN_USAGE).model_dump(mode="json")
    assert len(bad.contents) == len(NEW) + 2  # the model's turn, then the feedback
