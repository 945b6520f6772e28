"""A new deployment does not break the runs in flight when it lands.

Every step looks its agent up by the name on the run in the deployment that serves it
(docs/concepts/components.md, "Where agents come from"), and a step message carries ids and the
call, never the agent's configuration. So a run started on one deployment and finished on another
takes each step from the deployment that runs it: the new instructions and tools from the first
model step the new one serves, a clear error for a call to a tool it no longer has; and two
revisions serving one subscription at once still record each step once.

A deployment here is a :class:`Deps` (its agent registry, its model client, its tools) over the
store and publisher every deployment shares; a redeploy delivers the rest of a run's messages
with another one. Each deployment has its own scripted model, running the same stateless
script, so the requests each one sent say which deployment ran which turn. Manual clock.

One gap is pinned as an expected failure: a call of a tool the new deployment removed, whose
holder on the old deployment died mid-call, is reported to the model as an unknown tool rather
than as interrupted (it may have taken effect).
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from ackloop.agents.agent import Agent, AgentRegistry
from ackloop.bus.memory import Published
from ackloop.config.settings import Settings
from ackloop.domain.clock import ManualClock
from ackloop.domain.jsondict import JsonDict
from ackloop.domain.keys import StepKey, run_id_for_request
from ackloop.domain.records import RunStatus, StepDecision, StepStatus
from ackloop.domain.wire import AnswerMessage, QueryMessage, WaitingNotice
from ackloop.engine.sweep import sweep
from ackloop.engine.waits import core as waits
from ackloop.model.base import ModelRequest, ModelTurn
from ackloop.model.scripted import Script, ScriptedModel
from ackloop.model.transcript import read_exchange
from ackloop.model.turns import calls_turn, text_turn
from ackloop.testing.inprocess import InProcessLoop
from ackloop.tools import ToolSet, tool
from ackloop.tools.definition import Tool
from tests.engine.fakes import make_loop
from tests.engine.test_guarantees import deliver, run_of, start, take

LEASE = 10.0
SETTINGS = Settings(lease_seconds=LEASE)


# -- the agent: a stateless script and tools that say who ran them -------------------------------


def each_declared_tool(per_turn: int = 1) -> Script:
    """Call the declared tools this run has not called yet, ``per_turn`` at a time, in the order
    they are declared; once every one has a result, answer with all the results read.

    Stateless (it reads only the request), so every deployment plays it the same way from
    whatever the request holds: the tools offered on this turn decide what is called."""

    def script(request: ModelRequest) -> ModelTurn:
        exchange = read_exchange(request.contents)
        called = {r.name for r in exchange.results}
        called |= {str(part["function_call"]["name"]) for content in exchange.model_contents
                   for part in content.get("parts", []) if "function_call" in part}
        todo = [str(d["name"]) for d in request.tools if d["name"] not in called]
        if todo:
            return calls_turn([(name, {"key": "k"}) for name in todo[:per_turn]],
                              request=request)
        return text_turn("; ".join(f"{r.name}: {r.error or r.result}"
                                   for r in exchange.results), request=request)

    return script


def make_tool(name: str, where: str, ran: list[str], *, retry_safe: bool = True,
              requires_approval: bool = False) -> Tool:
    """A tool ``name`` of deployment ``where``: each call is logged in ``ran`` and answers
    with the deployment's name."""

    def call(key: str) -> str:
        ran.append(f"{where}:{name}")
        return f"{name}({key}) by {where}"

    return tool(name, f"The {name} tool ({where}).", retry_safe=retry_safe,
                requires_approval=requires_approval)(call)


def agent(instructions: str, *tools: Tool) -> Agent:
    return Agent("default", instructions, ToolSet(list(tools)))


# -- deployments ---------------------------------------------------------------------------------


def first_deployment(deployed: Agent, script: Script) -> InProcessLoop:
    """Deployment A: its own model and agent, on a new in-memory store and publisher."""
    loop = make_loop(ScriptedModel(script), ToolSet([]), settings=SETTINGS, clock=ManualClock())
    loop.deps.agents = AgentRegistry([deployed])
    return loop


def redeploy(old: InProcessLoop, deployed: Agent, script: Script) -> InProcessLoop:
    """Deployment B beside ``old``: the same settings, store, publisher and clock, another
    agent registry and model client. One subscription counts a message's deliveries, whichever
    revision gets them, so both share the count."""
    deps = replace(old.deps, agents=AgentRegistry([deployed]), model=ScriptedModel(script))
    return InProcessLoop(deps, old.publisher, _attempts=old._attempts)


def model_of(loop: InProcessLoop) -> ScriptedModel:
    model = loop.deps.model
    assert isinstance(model, ScriptedModel)
    return model


def clock_of(loop: InProcessLoop) -> ManualClock:
    clock = loop.deps.clock
    assert isinstance(clock, ManualClock)
    return clock


def is_answer(loop: InProcessLoop, message: Published) -> bool:
    return message.topic == loop.deps.settings.answers_topic


async def step(loop: InProcessLoop, message: Published) -> list[Published]:
    """Deliver ``message`` with ``loop`` (it must be acknowledged); the step messages it
    published, answers and waiting notices set aside in ``loop.answers`` and ``loop.notices``."""
    outcome = await deliver(loop, message)
    assert outcome.acknowledged, outcome
    sent = take(loop)
    for m in sent:
        if is_answer(loop, m) and json.loads(m.data).get("event") == "waiting":
            loop.notices.append(WaitingNotice.model_validate_json(m.data))
        elif is_answer(loop, m):
            loop.answers.append(AnswerMessage.model_validate_json(m.data))
    return [m for m in sent if not is_answer(loop, m)]


async def drain(loop: InProcessLoop, pending: list[Published]) -> None:
    """Deliver ``pending`` and everything it triggers with ``loop``, in order, to the run's end."""
    queue = list(pending)
    while queue:
        queue.extend(await step(loop, queue.pop(0)))


async def alternate(loops: list[InProcessLoop], pending: list[Published]
                    ) -> list[tuple[Published, int]]:
    """Deliver ``pending`` and everything it triggers, each message to the next deployment in
    turn (the next of ``loops``); returns each message delivered and the deployment (its
    index) that got it."""
    queue: list[Published] = list(pending)
    served: list[tuple[Published, int]] = []
    for n in range(200):
        if not queue:
            return served
        message = queue.pop(0)
        served.append((message, n % len(loops)))
        queue.extend(await step(loops[n % len(loops)], message))
    raise AssertionError("the run did not settle")


def target(message: Published) -> str:
    """The step a message triggers (``query`` for a query)."""
    return message.attributes.get("step", "query")


# -- what the run left ---------------------------------------------------------------------------


async def recorded_steps(loop: InProcessLoop, run_id: str) -> list[str]:
    """The run's step keys, each completed at its first attempt: recorded once, run once."""
    steps = await loop.deps.store.steps.list_steps(run_id)
    assert all(s.status is StepStatus.COMPLETED for s in steps), steps
    assert all(s.attempts <= 1 for s in steps), [(s.key, s.attempts) for s in steps]
    return [s.key for s in steps]


def keys(*names: str) -> list[str]:
    return sorted(names)


async def transcript(loop: InProcessLoop, run_id: str) -> list[JsonDict]:
    run = await run_of(loop, run_id)
    return (await loop.deps.store.transcript.load_transcript(run.conversation_id)).contents


def function_calls(contents: list[JsonDict]) -> list[str]:
    return [str(part["function_call"]["name"]) for content in contents
            for part in content.get("parts", []) if "function_call" in part]


def function_responses(contents: list[JsonDict]) -> list[tuple[str, Any]]:
    return [(str(part["function_response"]["name"]), part["function_response"]["response"])
            for content in contents for part in content.get("parts", [])
            if "function_response" in part]


def declared(request: ModelRequest) -> list[str]:
    return [str(d["name"]) for d in request.tools]


def last_results(request: ModelRequest) -> list[tuple[str, Any]]:
    """The function responses of the turn the model was answering: what it read last."""
    return function_responses(request.contents[-1:])


# -- (1) new instructions ------------------------------------------------------------------------


async def test_new_instructions_reach_the_model_from_the_first_turn_the_new_deployment_runs(
) -> None:
    """A run started before a redeploy takes each turn's instructions from the deployment
    that runs the turn: the old ones on the turns before it, the new ones from the first model
    step the new deployment serves; the run answers, each step recorded once."""
    ran: list[str] = []
    script = each_declared_tool()
    a = first_deployment(agent("Answer in English.", make_tool("lookup", "A", ran),
                               make_tool("fetch", "A", ran)), script)
    run_id, first = await start(a, "instructions")
    (tool_message,) = await step(a, first)  # turn 0 on A: calls lookup
    (model_1,) = await step(a, tool_message)

    b = redeploy(a, agent("Answer in French.", make_tool("lookup", "B", ran),
                          make_tool("fetch", "B", ran)), script)
    await drain(b, [model_1])  # turn 1 on B: fetch; turn 2 on B: the answer

    assert [r.system_instruction for r in model_of(a).requests] == ["Answer in English."]
    assert [r.system_instruction for r in model_of(b).requests] == ["Answer in French."] * 2
    run = await run_of(a, run_id)
    assert run.status is RunStatus.COMPLETED
    assert run.answer == "lookup: lookup(k) by A; fetch: fetch(k) by B"
    assert ran == ["A:lookup", "B:fetch"]
    (answer,) = b.answers
    assert (answer.run_id, answer.status, answer.answer) == (run_id, "completed", run.answer)
    assert await recorded_steps(a, run_id) == keys("0000-model", "0000-tool-000", "0001-model",
                                                   "0001-tool-000", "0002-model")
    assert function_calls(await transcript(a, run_id)) == ["lookup", "fetch"]


# -- (2) a tool added ----------------------------------------------------------------------------


async def test_a_tool_added_by_a_redeploy_is_offered_to_and_run_for_a_run_already_in_flight(
) -> None:
    """A tool the new deployment adds is declared to the model on the first turn that
    deployment runs, even for a run started before it, and a call to it runs there once."""
    ran: list[str] = []
    script = each_declared_tool()
    a = first_deployment(agent("Be brief.", make_tool("lookup", "A", ran)), script)
    run_id, first = await start(a, "added")
    (tool_message,) = await step(a, first)
    (model_1,) = await step(a, tool_message)

    b = redeploy(a, agent("Be brief.", make_tool("lookup", "B", ran),
                          make_tool("search", "B", ran)), script)
    await drain(b, [model_1])

    (before,) = model_of(a).requests
    assert declared(before) == ["lookup"]
    turn_1, turn_2 = model_of(b).requests
    assert declared(turn_1) == declared(turn_2) == ["lookup", "search"]
    assert next(d for d in turn_1.tools if d["name"] == "search")["description"] == (
        "The search tool (B).")
    run = await run_of(a, run_id)
    assert run.status is RunStatus.COMPLETED
    assert run.answer == "lookup: lookup(k) by A; search: search(k) by B"
    assert ran == ["A:lookup", "B:search"]
    assert await recorded_steps(a, run_id) == keys("0000-model", "0000-tool-000", "0001-model",
                                                   "0001-tool-000", "0002-model")
    assert len(b.answers) == 1


# -- (3) a tool removed --------------------------------------------------------------------------


async def test_a_call_to_a_tool_a_redeploy_removed_reads_as_unknown_and_the_run_still_answers(
) -> None:
    """A call the old deployment's model asked for, of a tool the new deployment no longer
    has, runs nowhere: the new deployment records an error naming the tool (and the tools
    there are) as the call's result, the model reads it on its next turn, without the removed
    tool's declaration, and the run goes on to its answer; nothing hangs, nothing is retried."""
    ran: list[str] = []
    script = each_declared_tool()
    a = first_deployment(agent("Be brief.", make_tool("legacy", "A", ran),
                               make_tool("lookup", "A", ran)), script)
    run_id, first = await start(a, "removed")
    (legacy_call,) = await step(a, first)  # turn 0 on A: calls legacy
    assert legacy_call.attributes["step"] == "0000-tool-000"

    b = redeploy(a, agent("Be brief.", make_tool("lookup", "B", ran)), script)
    await drain(b, [legacy_call])

    unknown = "unknown tool 'legacy'; available tools: lookup"
    turn_1, turn_2 = model_of(b).requests
    assert declared(turn_1) == ["lookup"]
    assert last_results(turn_1) == [("legacy", {"error": unknown})]
    assert last_results(turn_2) == [("lookup", {"result": "lookup(k) by B"})]
    run = await run_of(a, run_id)
    assert run.status is RunStatus.COMPLETED
    assert run.answer == f"legacy: {unknown}; lookup: lookup(k) by B"
    assert ran == ["B:lookup"]  # legacy never ran
    assert await recorded_steps(a, run_id) == keys("0000-model", "0000-tool-000", "0001-model",
                                                   "0001-tool-000", "0002-model")
    (legacy,) = await a.deps.store.steps.get_steps(run_id, ["0000-tool-000"])
    assert legacy is not None and legacy.name == "legacy" and legacy.result is not None
    assert legacy.result["response"] == {"error": unknown}
    assert function_responses(await transcript(a, run_id))[0] == ("legacy", {"error": unknown})
    (answer,) = b.answers
    assert answer.status == "completed"


async def test_a_tool_step_of_a_removed_tool_redelivered_to_the_new_deployment_runs_nothing(
) -> None:
    """A tool step message redelivered after a redeploy removed its tool changes nothing once
    its step is recorded: a call the old deployment ran keeps its real result (the new one
    neither runs it nor rewrites it as unknown), and the unknown-tool result the new one
    recorded is not recorded again. Each step is recorded once, each call made once, and the run
    answers."""
    ran: list[str] = []
    script = each_declared_tool()
    a = first_deployment(agent("Be brief.", make_tool("legacy", "A", ran),
                               make_tool("lookup", "A", ran)), script)
    run_id, first = await start(a, "redelivered")
    (legacy_call,) = await step(a, first)
    (model_1,) = await step(a, legacy_call)  # legacy ran on A
    b = redeploy(a, agent("Be brief.", make_tool("lookup", "B", ran)), script)

    # Its redelivery, to B, runs nothing; it re-sends the next model step, not claimed yet
    # (the join's rule), and that duplicate is absorbed.
    (duplicate,) = await step(b, legacy_call)
    assert (duplicate.attributes["step"], duplicate.data) == ("0001-model", model_1.data)
    await drain(b, [model_1, duplicate])
    assert await step(b, legacy_call) == []  # and again, once the run has ended: nothing

    (legacy,) = await a.deps.store.steps.get_steps(run_id, ["0000-tool-000"])
    assert legacy is not None and legacy.result is not None
    assert legacy.result["response"] == {"result": "legacy(k) by A"}
    assert last_results(model_of(b).requests[0]) == [("legacy", {"result": "legacy(k) by A"})]
    assert ran == ["A:legacy", "B:lookup"]
    assert (await run_of(a, run_id)).answer == "legacy: legacy(k) by A; lookup: lookup(k) by B"
    assert await recorded_steps(a, run_id) == keys("0000-model", "0000-tool-000", "0001-model",
                                                   "0001-tool-000", "0002-model")
    # The duplicate model step re-sent its tool step (run unclaimed, so not claimed before its
    # commit), and so on to the last model step: the answer may go out twice, the same.
    assert {(x.run_id, x.status, x.answer) for x in b.answers} == {
        (run_id, "completed", "legacy: legacy(k) by A; lookup: lookup(k) by B")}

    # The same with the step B recorded as an unknown tool: a duplicate records nothing.
    c = redeploy(a, agent("Be brief.", make_tool("lookup", "C", ran)), script)
    run_2, first_2 = await start(a, "redelivered-unknown")
    (legacy_2,) = await step(a, first_2)
    (model_2,) = await step(c, legacy_2)
    (duplicate_2,) = await step(c, legacy_2)
    assert duplicate_2.data == model_2.data
    (recorded,) = await a.deps.store.steps.get_steps(run_2, ["0000-tool-000"])
    assert recorded is not None and recorded.attempts <= 1 and recorded.result is not None
    assert recorded.result["response"] == {
        "error": "unknown tool 'legacy'; available tools: lookup"}
    await drain(c, [model_2, duplicate_2])
    assert (await run_of(a, run_2)).status is RunStatus.COMPLETED
    assert ran == ["A:legacy", "B:lookup", "C:lookup"]


async def test_a_removed_tools_call_interrupted_on_the_old_deployment_is_not_reported_unknown(
) -> None:
    """A call whose holder on the old deployment died mid-call may have taken effect there:
    taken over on a deployment that no longer has the tool, the model must read that the call
    was interrupted and may have taken effect, not that the tool is unknown (which reads as
    "never ran")."""
    ran: list[str] = []
    script = each_declared_tool()
    a = first_deployment(agent("Be brief.", make_tool("transfer", "A", ran, retry_safe=False),
                               make_tool("lookup", "A", ran)), script)
    run_id, first = await start(a, "interrupted")
    (transfer_call,) = await step(a, first)
    # A's delivery claimed the call and died in it (the transfer may have gone out).
    await a.deps.store.steps.claim_step(run_id, StepKey.tool(0, 0), "transfer", owner="dead",
                                        now=a.deps.clock.now(), lease_seconds=LEASE)
    b = redeploy(a, agent("Be brief.", make_tool("lookup", "B", ran)), script)
    clock_of(a).advance(LEASE + 1)

    await drain(b, [transfer_call])

    (read,) = last_results(model_of(b).requests[0])
    assert read[0] == "transfer"
    assert "may or may not have taken effect" in str(read[1].get("error")), read
    assert (await run_of(a, run_id)).status is RunStatus.COMPLETED


# -- waiting for a person on a tool a redeploy removed -------------------------------------------


@pytest.mark.parametrize(("decision", "read"), [
    ("approve", "unknown tool 'transfer'; available tools: balance"),
    ("reject", "not run: rejected by alice (no)"),
    ("deadline", "not run: no decision before the deadline"),
])
async def test_a_call_waiting_for_approval_on_a_tool_a_redeploy_removed_ends_its_wait(
        decision: str, read: str) -> None:
    """A call that waits for a person when a redeploy removes its tool still waits (a re-sent
    message only announces the wait again), and the decision taken on the new deployment
    resumes it: approved, it runs nowhere and the model reads that the tool is unknown;
    rejected (by a person, or by the new deployment's sweeper at the deadline), it reads the
    rejection. The run then answers; nothing is recorded twice."""
    ran: list[str] = []
    script = each_declared_tool()
    a = first_deployment(agent("Be brief.", make_tool("transfer", "A", ran, retry_safe=False,
                                                      requires_approval=True),
                               make_tool("balance", "A", ran)), script)
    run_id, first = await start(a, f"approval-{decision}")
    (transfer_call,) = await step(a, first)
    assert await step(a, transfer_call) == []  # it waits: nothing runs, nothing is sent
    (notice,) = a.notices
    assert (notice.tool, notice.step) == ("transfer", "0000-tool-000")

    b = redeploy(a, agent("Be brief.", make_tool("balance", "B", ran)), script)
    assert await step(b, transfer_call) == []  # a re-send, on B: it still waits, announced
    (again,) = b.notices
    assert (again.tool, again.step) == ("transfer", "0000-tool-000")
    (waiting,) = await a.deps.store.steps.get_steps(run_id, ["0000-tool-000"])
    assert waiting is not None and waiting.status is StepStatus.WAITING

    if decision == "deadline":
        clock_of(b).advance(b.deps.settings.approval_timeout_seconds + 1)
        (swept,) = await sweep(b.deps)
        assert swept.action == "resumed"
    else:
        await waits.resolve(b.deps, run_id, "0000-tool-000", StepDecision(
            decision="approve" if decision == "approve" else "reject",
            comment=None if decision == "approve" else "no", by="alice",
            at=b.deps.clock.now()))
    (resent,) = take(b)
    assert resent.attributes["step"] == "0000-tool-000"
    await drain(b, [resent])

    assert last_results(model_of(b).requests[0]) == [("transfer", {"error": read})]
    run = await run_of(a, run_id)
    assert run.status is RunStatus.COMPLETED
    assert run.answer == f"transfer: {read}; balance: balance(k) by B"
    assert ran == ["B:balance"]
    assert await recorded_steps(a, run_id) == keys("0000-model", "0000-tool-000", "0001-model",
                                                   "0001-tool-000", "0002-model")
    assert len(b.answers) == 1


# -- (4) two revisions on one subscription ------------------------------------------------------


async def test_two_revisions_serving_one_subscription_in_turn_record_every_step_once() -> None:
    """While a rollout has the old and the new revision serving the same subscriptions, the
    messages of one run go to either: delivered to each in turn (the ingest, model steps and
    parallel tool steps on both), the run completes with every step recorded once and every
    call run once; each model turn is told the instructions of the revision that ran it."""
    ran: list[str] = []
    script = each_declared_tool(per_turn=2)
    names = ["w", "x", "y", "z"]
    a = first_deployment(agent("Version one.", *(make_tool(n, "A", ran) for n in names)),
                         script)
    b = redeploy(a, agent("Version two.", *(make_tool(n, "B", ran) for n in names)), script)
    await a.submit(QueryMessage(request_id="rollout", text="go"))
    (query,) = take(a)

    served = await alternate([a, b], [query])

    assert [(target(m), by) for m, by in served] == [
        ("query", 0), ("0000-model", 1), ("0000-tool-000", 0), ("0000-tool-001", 1),
        ("0001-model", 0), ("0001-tool-000", 1), ("0001-tool-001", 0), ("0002-model", 1)]
    run_id = run_id_for_request("rollout")
    run = await run_of(a, run_id)
    assert run.status is RunStatus.COMPLETED
    assert run.answer == ("w: w(k) by A; x: x(k) by B; y: y(k) by B; z: z(k) by A")
    assert sorted(ran) == ["A:w", "A:z", "B:x", "B:y"]
    assert [r.system_instruction for r in model_of(a).requests] == ["Version one."]
    assert [r.system_instruction for r in model_of(b).requests] == ["Version two."] * 2
    assert await recorded_steps(a, run_id) == keys(
        "0000-model", "0000-tool-000", "0000-tool-001", "0001-model", "0001-tool-000",
        "0001-tool-001", "0002-model")
    contents = await transcript(a, run_id)
    assert function_calls(contents) == names
    assert [name for name, _ in function_responses(contents)] == names
    (answer,) = [*a.answers, *b.answers]
    assert (answer.run_id, answer.status) == (run_id, "completed")


async def test_every_message_of_a_run_redelivered_to_the_other_revision_changes_nothing(
) -> None:
    """A duplicate delivered to the other revision (Pub/Sub redelivers to whichever instance
    is there) finds its step recorded: no call runs again, no step is recorded again, no step
    message is sent again; only the answer goes out again (answers are at least once), the
    same."""
    ran: list[str] = []
    script = each_declared_tool(per_turn=2)
    names = ["w", "x", "y", "z"]
    a = first_deployment(agent("Version one.", *(make_tool(n, "A", ran) for n in names)),
                         script)
    b = redeploy(a, agent("Version two.", *(make_tool(n, "B", ran) for n in names[:3]),
                          make_tool("extra", "B", ran)), script)
    await a.submit(QueryMessage(request_id="duplicates", text="go"))
    (query,) = take(a)
    loops = [a, b]
    served = await alternate(loops, [query])
    run_id = run_id_for_request("duplicates")
    before = await a.deps.store.steps.list_steps(run_id)
    executed = list(ran)
    model_calls = model_of(a).calls + model_of(b).calls
    answers = len(a.answers) + len(b.answers)

    # B's model asked for the tool only B has ("extra") at turn 2; A ran that step (see
    # test_a_call_to_a_tool_only_the_new_revision_has_reads_as_unknown_on_the_old_one).
    assert [target(m) for m, _ in served][-3:] == ["0002-model", "0002-tool-000", "0003-model"]
    assert (await run_of(a, run_id)).answer == (
        "w: w(k) by A; x: x(k) by B; y: y(k) by B; z: z(k) by A; "
        "extra: unknown tool 'extra'; available tools: w, x, y, z")

    for message, by in served:
        assert await step(loops[1 - by], message) == []

    assert await a.deps.store.steps.list_steps(run_id) == before
    assert ran == executed
    assert model_of(a).calls + model_of(b).calls == model_calls
    final = [*a.answers, *b.answers]
    assert answers == 1 and len(final) == 2  # the last model step's duplicate re-sent it
    assert len({x.model_dump_json() for x in final}) == 1
    assert (await run_of(a, run_id)).status is RunStatus.COMPLETED


async def test_a_call_to_a_tool_only_the_new_revision_has_reads_as_unknown_on_the_old_one(
) -> None:
    """During a rollout the model of the new revision may call the tool it adds, and the call's
    message may reach the old revision: the old one records the tool as unknown (the model
    reads it and may call it again), it does not fail the run, hang or retry forever."""
    ran: list[str] = []
    script = each_declared_tool()
    a = first_deployment(agent("Be brief.", make_tool("lookup", "A", ran)), script)
    b = redeploy(a, agent("Be brief.", make_tool("lookup", "B", ran),
                          make_tool("search", "B", ran)), script)
    run_id, first = await start(a, "mixed")
    (lookup_call,) = await step(b, first)  # turn 0 on B
    (model_1,) = await step(a, lookup_call)
    (search_call,) = await step(b, model_1)  # turn 1 on B: search, which only B has
    assert search_call.attributes["step"] == "0001-tool-000"
    (model_2,) = await step(a, search_call)  # ... delivered to A
    await drain(b, [model_2])

    unknown = "unknown tool 'search'; available tools: lookup"
    assert last_results(model_of(b).requests[2]) == [("search", {"error": unknown})]
    run = await run_of(a, run_id)
    assert run.status is RunStatus.COMPLETED
    assert run.answer == f"lookup: lookup(k) by A; search: {unknown}"
    assert ran == ["A:lookup"]
    assert await recorded_steps(a, run_id) == keys("0000-model", "0000-tool-000", "0001-model",
                                                   "0001-tool-000", "0002-model")
