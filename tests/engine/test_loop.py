"""The durable loop end to end in one process, on the in-memory adapters."""

from __future__ import annotations

import asyncio
import json

import pytest
from pydantic import BaseModel, Field

from ackloop.config.settings import Settings
from ackloop.domain.clock import SystemClock
from ackloop.domain.errors import ModelPermanentError, ModelRetryableError
from ackloop.domain.keys import run_id_for_request
from ackloop.domain.records import RunStatus, StopReason
from ackloop.domain.wire import QueryMessage, RunOptions
from ackloop.model.base import ModelRequest, ModelTurn
from ackloop.model.scripted import ScriptedModel, reference_workload_script
from ackloop.model.turns import calls_turn, text_turn
from ackloop.tools.definition import tool
from ackloop.tools.toolset import ToolSet
from tests.engine.fakes import (
    CountingToolbox,
    CrashingFaults,
    SimulatedCrash,
    first_model_step,
    make_loop,
)


def reference() -> tuple[ScriptedModel, CountingToolbox]:
    return ScriptedModel(reference_workload_script("lookup", {"key": "k"})), CountingToolbox(
        {"lookup": "42"}
    )


async def run_query(loop, text: str = "go", request_id: str = "req-1", **kw) -> str:
    await loop.submit(QueryMessage(request_id=request_id, text=text, **kw))
    await loop.run_until_idle()
    return run_id_for_request(request_id)


async def test_reference_run_completes_with_three_model_calls_and_two_tool_calls():
    model, tools = reference()
    loop = make_loop(model, tools)
    run_id = await run_query(loop)

    run = await loop.deps.store.runs.get_run(run_id)
    assert run is not None and run.status is RunStatus.COMPLETED
    assert run.stop_reason is StopReason.ANSWERED
    assert run.answer == "Reference workload done."
    assert len(model.requests) == 3 and tools.executed["lookup"] == 2
    assert run.usage.model_calls == 3 and run.usage.tool_calls == 2
    assert [a.run_id for a in loop.answers] == [run_id]
    steps = await loop.deps.store.steps.list_steps(run_id)
    assert [s.key for s in steps] == [
        "0000-model", "0000-tool-000", "0001-model", "0001-tool-000", "0002-model"
    ]
    transcript = await loop.deps.store.transcript.load_transcript(run.conversation_id)
    assert [c["role"] for c in transcript.contents] == ["user", "model"] * 3
    assert transcript.tail == f"{run_id}/0002-model"


async def test_every_message_delivered_twice_executes_and_records_each_step_once():
    model, tools = reference()
    loop = make_loop(model, tools)
    await loop.submit(QueryMessage(request_id="dup", text="go"))
    await loop.run_until_idle(duplicate_every=True)

    run = await loop.deps.store.runs.get_run(run_id_for_request("dup"))
    assert run is not None and run.status is RunStatus.COMPLETED
    assert len(model.requests) == 3 and tools.executed["lookup"] == 2
    transcript = await loop.deps.store.transcript.load_transcript(run.conversation_id)
    assert len(transcript.contents) == 6
    assert {a.run_id for a in loop.answers} == {run.run_id}


async def test_concurrent_duplicate_deliveries_run_the_model_once():
    """Claimed steps: a duplicate that arrives while the step is held waits inside its request
    (on the real clock, while the holder's heartbeat keeps the lease), then finds the step
    completed and is acknowledged: the model runs once and neither delivery is nacked."""
    release = asyncio.Event()
    calls = 0

    async def slow_generate(request: ModelRequest) -> ModelTurn:
        nonlocal calls
        calls += 1
        await release.wait()
        return text_turn("done", request=request)

    model = ScriptedModel()
    model.generate = slow_generate  # type: ignore[method-assign]
    loop = make_loop(model, CountingToolbox(), clock=SystemClock(),
                     settings=Settings(lease_seconds=10.0, step_claims="always"))
    kind, step = await first_model_step(loop, QueryMessage(request_id="conc", text="hi"))

    first = asyncio.create_task(loop.deliver(kind, step))
    await asyncio.sleep(0.05)
    second = asyncio.create_task(loop.deliver(kind, step))
    await asyncio.sleep(0.5)
    assert not second.done(), "the duplicate waits for the holder instead of answering 503"
    release.set()
    assert (await first).status == 204
    assert (await second).status in (200, 204)
    assert calls == 1


@pytest.mark.parametrize("point", ["model:after_call", "tool:after_call"])
async def test_crash_after_call_before_commit_reruns_only_the_inflight_step(point):
    model, tools = reference()
    loop = make_loop(model, tools, faults=CrashingFaults({point}))
    await loop.submit(QueryMessage(request_id="crash", text="go"))
    await loop.run_until_idle(crash=SimulatedCrash)

    run = await loop.deps.store.runs.get_run(run_id_for_request("crash"))
    assert run is not None and run.status is RunStatus.COMPLETED
    # The in-flight call ran twice; every other call once; history has no duplicate.
    if point.startswith("model"):
        assert len(model.requests) == 4 and tools.executed["lookup"] == 2
    else:
        assert len(model.requests) == 3 and tools.executed["lookup"] == 3
    transcript = await loop.deps.store.transcript.load_transcript(run.conversation_id)
    assert [c["role"] for c in transcript.contents] == ["user", "model"] * 3
    steps = await loop.deps.store.steps.list_steps(run.run_id)
    assert len(steps) == 5 and max(s.attempts for s in steps) == 2


@pytest.mark.parametrize("point", ["model:after_commit", "tool:after_commit"])
async def test_crash_after_commit_before_publish_loses_nothing_and_reruns_nothing(point):
    model, tools = reference()
    loop = make_loop(model, tools, faults=CrashingFaults({point}))
    await loop.submit(QueryMessage(request_id="crash2", text="go"))
    await loop.run_until_idle(crash=SimulatedCrash)

    run = await loop.deps.store.runs.get_run(run_id_for_request("crash2"))
    assert run is not None and run.status is RunStatus.COMPLETED
    assert len(model.requests) == 3 and tools.executed["lookup"] == 2
    transcript = await loop.deps.store.transcript.load_transcript(run.conversation_id)
    assert len(transcript.contents) == 6


async def test_parallel_calls_are_answered_in_call_order_with_ids():
    turns = [
        calls_turn([("lookup", {"key": "a"}), ("other", {"key": "b"}), ("lookup", {"key": "c"})],
                   thought_signature=b"sig-1"),
        text_turn("all three done"),
    ]
    model = ScriptedModel.from_turns(turns)
    tools = CountingToolbox({"lookup": "L", "other": "O"})
    loop = make_loop(model, tools)
    await loop.submit(QueryMessage(request_id="par", text="go"))
    await loop.run_until_idle(shuffle_seed=7)

    assert tools.executed == {"lookup": 2, "other": 1}
    assert len(model.requests) == 2
    second = model.requests[1].contents
    assert second[1]["parts"][0]["thought_signature"]  # replayed raw
    responses = [p["function_response"] for p in second[2]["parts"]]
    assert [r["name"] for r in responses] == ["lookup", "other", "lookup"]
    assert [r["response"] for r in responses] == [{"result": "L"}, {"result": "O"}, {"result": "L"}]


async def test_tool_context_carries_a_stable_idempotency_key():
    model, tools = reference()
    loop = make_loop(model, tools, faults=CrashingFaults({"tool:after_call"}))
    await loop.submit(QueryMessage(request_id="idem", text="go"))
    await loop.run_until_idle(crash=SimulatedCrash)
    keys = [c.idempotency_key for c in tools.contexts]
    run_id = run_id_for_request("idem")
    assert keys == [f"{run_id}/0000-tool-000", f"{run_id}/0000-tool-000", f"{run_id}/0001-tool-000"]
    assert [c.attempt for c in tools.contexts] == [1, 2, 1]


async def test_not_retry_safe_tool_is_not_run_again_after_a_crash():
    model = ScriptedModel(reference_workload_script("lookup", calls=1))
    tools = CountingToolbox({"lookup": "42"}, retry_safe=False)
    loop = make_loop(model, tools, faults=CrashingFaults({"tool:after_call"}))
    await loop.submit(QueryMessage(request_id="unsafe", text="go"))
    await loop.run_until_idle(crash=SimulatedCrash)
    assert tools.executed["lookup"] == 1
    response = model.requests[1].contents[-1]["parts"][0]["function_response"]["response"]
    assert "may or may not have taken effect" in response["error"]


async def test_max_steps_budget_ends_the_run_with_that_reason():
    model = ScriptedModel(reference_workload_script("lookup", calls=100))
    loop = make_loop(model, CountingToolbox({"lookup": "x"}))
    run_id = await run_query(loop, options=RunOptions(max_steps=3))
    run = await loop.deps.store.runs.get_run(run_id)
    assert run is not None and run.stop_reason is StopReason.MAX_STEPS
    assert run.status is RunStatus.COMPLETED and len(model.requests) == 3


async def test_max_tool_calls_budget():
    model = ScriptedModel(reference_workload_script("lookup", calls=100))
    loop = make_loop(model, CountingToolbox({"lookup": "x"}))
    run_id = await run_query(loop, options=RunOptions(max_tool_calls=2))
    run = await loop.deps.store.runs.get_run(run_id)
    assert run is not None and run.stop_reason is StopReason.MAX_TOOL_CALLS
    assert run.usage.tool_calls == 2


async def test_wall_clock_budget_is_checked_before_each_model_call():
    model, tools = reference()
    loop = make_loop(model, tools)
    await loop.submit(QueryMessage(request_id="slow", text="go", options=RunOptions(max_seconds=5)))
    loop._collect()
    # Deliver the query and the first model step, then let time pass.
    for _ in range(2):
        kind, message = loop._queue.popleft()
        await loop.deliver(kind, message)
        loop._collect()
    loop.deps.clock.advance(10)  # type: ignore[attr-defined]
    await loop.run_until_idle()
    run = await loop.deps.store.runs.get_run(run_id_for_request("slow"))
    assert run is not None and run.stop_reason is StopReason.MAX_SECONDS
    assert len(model.requests) == 1


async def test_a_short_retry_after_is_waited_out_inside_the_request():
    attempts = []

    def script(request: ModelRequest) -> ModelTurn:
        attempts.append(1)
        if len(attempts) == 1:
            raise ModelRetryableError("429 quota", retry_after=7.0)
        return text_turn("ok")

    loop = make_loop(ScriptedModel(script), CountingToolbox())
    started = loop.deps.clock.now()
    run_id = await run_query(loop)
    run = await loop.deps.store.runs.get_run(run_id)
    assert run is not None and run.answer == "ok" and len(attempts) == 2
    assert [e.outcome.status for e in loop.deliveries("model")] == [204]  # no nack
    assert loop.deps.clock.now() - started >= 7.0  # the retry-after was honoured
    (step,) = await loop.deps.store.steps.get_steps(run_id, ["0000-model"])
    assert step is not None and step.attempts == 1


async def test_a_retry_after_beyond_the_bound_is_left_to_redelivery_and_honoured():
    attempts = []

    def script(request: ModelRequest) -> ModelTurn:
        attempts.append(1)
        if len(attempts) == 1:
            raise ModelRetryableError("429 quota", retry_after=45.0)
        return text_turn("ok")

    loop = make_loop(ScriptedModel(script), CountingToolbox())
    run_id = await run_query(loop)
    run = await loop.deps.store.runs.get_run(run_id)
    assert run is not None and run.answer == "ok" and len(attempts) == 2
    retried = [e for e in loop.deliveries("model") if e.outcome.status == 503]
    assert len(retried) == 1 and retried[0].outcome.retry_after == pytest.approx(45.0)
    (step,) = await loop.deps.store.steps.get_steps(run_id, ["0000-model"])
    assert step is not None and step.attempts == 2


async def test_permanent_model_error_fails_the_run_with_the_reason():
    def script(request: ModelRequest) -> ModelTurn:
        raise ModelPermanentError("blocked", reason="model_safety_block")

    loop = make_loop(ScriptedModel(script), CountingToolbox())
    run_id = await run_query(loop)
    run = await loop.deps.store.runs.get_run(run_id)
    assert run is not None and run.status is RunStatus.FAILED
    assert run.error is not None and run.error.startswith("model_safety_block")
    assert loop.answers[0].status == "failed"


async def test_a_step_that_keeps_failing_ends_the_run_after_max_attempts():
    def script(request: ModelRequest) -> ModelTurn:
        raise ModelRetryableError("503 unavailable")

    loop = make_loop(ScriptedModel(script), CountingToolbox(),
                     settings=Settings(max_step_attempts=3, lease_seconds=5))
    run_id = await run_query(loop)
    run = await loop.deps.store.runs.get_run(run_id)
    assert run is not None and run.status is RunStatus.FAILED
    assert "attempted 3 times" in (run.error or "") and "503 unavailable" in (run.error or "")


async def test_cancel_after_the_fan_out_runs_no_pending_tool_and_ends_cancelled():
    model, tools = reference()
    loop = make_loop(model, tools)
    await loop.submit(QueryMessage(request_id="cancel", text="go"))
    loop._collect()
    for _ in range(2):  # query, then model step 0
        kind, message = loop._queue.popleft()
        await loop.deliver(kind, message)
        loop._collect()
    await loop.deps.store.runs.request_cancel(run_id_for_request("cancel"))
    await loop.run_until_idle()
    run = await loop.deps.store.runs.get_run(run_id_for_request("cancel"))
    assert run is not None and run.status is RunStatus.CANCELLED
    assert len(model.requests) == 1 and tools.executed["lookup"] == 0
    steps = {s.key: s for s in await loop.deps.store.steps.list_steps(run.run_id)}
    assert "cancelled" in (steps["0000-tool-000"].last_error or "")
    assert [a.status for a in loop.answers] == ["cancelled"]


async def test_same_request_id_twice_starts_one_run():
    model, tools = reference()
    loop = make_loop(model, tools)
    for _ in range(2):
        await loop.submit(QueryMessage(request_id="same", text="go"))
    await loop.run_until_idle()
    assert len(model.requests) == 3
    assert [e.outcome.body.get("created") for e in loop.deliveries("query")] == [True, False]


async def test_follow_up_turn_sees_the_whole_conversation():
    model = ScriptedModel(lambda r: text_turn(f"seen {len(r.contents)} contents"))
    loop = make_loop(model, CountingToolbox())
    await run_query(loop, text="first", request_id="t1", conversation_id="conv-1")
    run_id = await run_query(loop, text="second", request_id="t2", conversation_id="conv-1")
    run = await loop.deps.store.runs.get_run(run_id)
    assert run is not None and run.answer == "seen 3 contents"
    assert [c["parts"][0].get("text") for c in model.requests[1].contents] == [
        "first", "seen 1 contents", "second"
    ]
    runs = await loop.deps.store.runs.list_runs("conv-1")
    assert [r.request_id for r in runs] == ["t1", "t2"]


async def test_poison_messages_are_acknowledged_and_recorded():
    model, tools = reference()
    loop = make_loop(model, tools)
    s = loop.deps.settings
    await loop.deps.publisher.publish(s.queries_topic, b"not json")
    await loop.deps.publisher.publish(s.model_steps_topic, b'{"v": 1, "kind": "model"}')
    await loop.deps.publisher.publish(
        s.tool_steps_topic,
        json.dumps({"run_id": "run-nope", "turn": 0, "index": 0, "call_count": 1,
                    "call": {"name": "lookup"}}).encode(),
    )
    await loop.run_until_idle()
    assert [e.outcome.status for e in loop.log] == [200, 200, 200]
    poison = await loop.deps.store.letters.list_poison()
    assert sorted(p["reason"] for p in poison) == ["poison_message", "poison_message",
                                                   "unknown_run"]


async def test_a_tool_message_naming_another_call_than_the_ledger_is_refused():
    """A tool step message whose call is not the one its model step committed at that index
    is acknowledged as unscheduled: the other tool does not run and the run is not failed."""
    model = ScriptedModel(reference_workload_script("lookup", calls=1))
    tools = CountingToolbox({"lookup": "1", "other": "2"})
    loop = make_loop(model, tools)
    run_id = await run_query(loop)
    forged = {"run_id": run_id, "turn": 0, "index": 0, "call_count": 1, "call": {"name": "other"}}
    await loop.deps.publisher.publish(
        loop.deps.settings.tool_steps_topic, json.dumps(forged).encode(), {"run_id": run_id}
    )
    await loop.run_until_idle()
    assert loop.log[-1].outcome.body["reason"] == "unscheduled_step"
    assert tools.executed["other"] == 0
    run = await loop.deps.store.runs.get_run(run_id)
    assert run is not None and run.status is RunStatus.COMPLETED


ANSWER_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "alerts": {"type": "integer", "minimum": 0}},
    "required": ["city", "alerts"],
}


async def test_structured_answer_is_validated_and_corrected_within_the_budget():
    turns = [
        calls_turn([("final_answer", {"city": "Norman"})]),               # missing a field
        calls_turn([("final_answer", {"city": "Norman", "alerts": 2})]),  # corrected
    ]
    model = ScriptedModel.from_turns(turns)
    loop = make_loop(model, CountingToolbox())
    run_id = await run_query(loop, options=RunOptions(output_schema=ANSWER_SCHEMA))
    run = await loop.deps.store.runs.get_run(run_id)
    assert run is not None and run.status is RunStatus.COMPLETED
    assert run.output == {"city": "Norman", "alerts": 2}
    assert any(d["name"] == "final_answer" for d in model.requests[0].tools)
    feedback = model.requests[1].contents[-1]["parts"][0]["function_response"]
    assert feedback["name"] == "final_answer" and "alerts" in feedback["response"]["error"]


async def test_structured_answer_given_as_json_text_is_accepted():
    model = ScriptedModel.from_turns([text_turn('```json\n{"city": "Paris", "alerts": 0}\n```')])
    loop = make_loop(model, CountingToolbox())
    run_id = await run_query(loop, options=RunOptions(output_schema=ANSWER_SCHEMA))
    run = await loop.deps.store.runs.get_run(run_id)
    assert run is not None and run.output == {"city": "Paris", "alerts": 0}


async def test_structured_answer_that_never_validates_stops_at_max_steps():
    model = ScriptedModel(lambda r: text_turn("no JSON here"))
    loop = make_loop(model, CountingToolbox())
    run_id = await run_query(
        loop, options=RunOptions(output_schema=ANSWER_SCHEMA, max_steps=3))
    run = await loop.deps.store.runs.get_run(run_id)
    assert run is not None and run.stop_reason is StopReason.MAX_STEPS
    assert len(model.requests) == 3
    assert "not JSON" in model.requests[1].contents[-1]["parts"][0]["text"]


def test_an_invalid_output_schema_is_rejected_at_the_edge():
    with pytest.raises(ValueError, match="object"):
        RunOptions(output_schema={"type": "string"})
    with pytest.raises(ValueError, match="not a valid JSON Schema"):
        RunOptions(output_schema={"type": "object", "properties": 3})


async def test_agent_output_model_is_offered_and_enforced():
    from pydantic import BaseModel

    from ackloop.agents.agent import Agent, AgentRegistry

    class Forecast(BaseModel):
        city: str
        alerts: int

    model = ScriptedModel.from_turns([calls_turn([("final_answer", {"city": "X", "alerts": "3"})])])
    loop = make_loop(model, CountingToolbox())
    loop.deps.agents = AgentRegistry([Agent("default", "Be brief.", CountingToolbox(),
                                            output=Forecast)])
    run_id = await run_query(loop)
    run = await loop.deps.store.runs.get_run(run_id)
    assert run is not None and run.output == {"city": "X", "alerts": 3}


async def test_follow_up_after_a_crash_between_turns_keeps_the_history():
    model = ScriptedModel(lambda r: text_turn(f"seen {len(r.contents)} contents"))
    loop = make_loop(model, CountingToolbox(), faults=CrashingFaults({"model:after_commit"}))
    await loop.submit(QueryMessage(request_id="c1", text="first", conversation_id="conv-c"))
    await loop.run_until_idle(crash=SimulatedCrash)
    await loop.submit(QueryMessage(request_id="c2", text="second", conversation_id="conv-c"))
    await loop.run_until_idle(crash=SimulatedCrash)
    run = await loop.deps.store.runs.get_run(run_id_for_request("c2"))
    assert run is not None and run.answer == "seen 3 contents"
    transcript = await loop.deps.store.transcript.load_transcript("conv-c")
    assert [c["parts"][0].get("text") for c in transcript.contents] == [
        "first", "seen 1 contents", "second", "seen 3 contents"]


class StateArgs(BaseModel):
    state: str = Field(pattern=r"^[A-Z]{2}$")


@tool
async def alerts(args: StateArgs) -> str:
    """Alerts for a state."""
    return f"none in {args.state}"


async def test_unknown_tool_and_bad_arguments_become_observations():
    turns = [
        calls_turn([("nope", {}), ("alerts", {"state": "California"}),
                    ("alerts", {"request": {"state": "CA"}})]),
        text_turn("done"),
    ]
    model = ScriptedModel.from_turns(turns)
    loop = make_loop(model, ToolSet([alerts]))  # type: ignore[list-item]
    run_id = await run_query(loop)
    run = await loop.deps.store.runs.get_run(run_id)
    assert run is not None and run.status is RunStatus.COMPLETED
    responses = [p["function_response"]["response"]
                 for p in model.requests[1].contents[-1]["parts"]]
    assert "alerts" in responses[0]["error"]  # names the tools that exist
    assert "state" in responses[1]["error"]
    assert responses[2] == {"result": "none in CA"}
