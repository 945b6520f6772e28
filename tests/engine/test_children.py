"""Agents that call agents (ackloop.engine.children): a sub-agent's call is a durable child run,
on the in-memory engine with the real dispatch, a manual clock and no sleeps.

The scripted model plays each agent from what its request shows: a planner asks each of its
sub-agents once (all in one turn), then answers with what they said; a sub-agent answers its
question, or asks its own sub-agents first.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest

from ackloop.agents.agent import Agent, AgentRegistry
from ackloop.bus.memory import MemoryPublisher, Published
from ackloop.config.settings import Settings
from ackloop.docdb.counting import CountingDocumentDB
from ackloop.docdb.memory import MemoryDocumentDB
from ackloop.domain.clock import ManualClock
from ackloop.domain.keys import run_id_for_request
from ackloop.domain.records import ReceivedEvent, RunRecord, RunStatus, StepStatus
from ackloop.domain.wire import QueryMessage, RunOptions, Usage
from ackloop.engine import children
from ackloop.engine.deps import Deps
from ackloop.engine.ending import cancel_run
from ackloop.engine.spend import steps_usage
from ackloop.engine.waits import arrivals
from ackloop.model.base import ModelRequest, ModelTurn
from ackloop.model.scripted import ScriptedModel
from ackloop.model.turns import calls_turn, text_turn
from ackloop.store import AgentStore, DecisionRefused
from ackloop.testing.inprocess import InProcessLoop
from ackloop.tools import ToolSet, tool
from tests.engine.fakes import SimulatedCrash
from tests.engine.test_guarantees import deliver_all, take

SETTINGS = Settings(lease_seconds=10.0)


def _responses(request: ModelRequest) -> dict[str, Any]:
    """The function responses the request carries, by function name."""
    found: dict[str, Any] = {}
    for content in request.contents:
        for part in content.get("parts", []):
            if "function_response" in part:
                body = part["function_response"]
                found[body["name"]] = body["response"]
    return found


def _question(request: ModelRequest) -> str:
    return next(p["text"] for c in request.contents if c["role"] == "user"
                for p in c.get("parts", []) if "text" in p)


class Team:
    """A scripted model for agents that call agents: ``asks`` says which sub-agent tools each
    agent calls (all at once, in its first turn); ``fails`` names agents that never answer
    (they call a tool that does not exist, forever)."""

    def __init__(self, asks: dict[str, Sequence[str]], fails: Sequence[str] = ()) -> None:
        self.asks = asks
        self.fails = set(fails)
        self.calls: list[tuple[str, str]] = []

    def __call__(self, request: ModelRequest) -> ModelTurn:
        agent = request.agent or "default"
        self.calls.append((agent, _question(request)))
        if agent in self.fails:
            return calls_turn([("missing_tool", {})], request=request)
        answers = _responses(request)
        wanted = [t for t in self.asks.get(agent, ()) if t not in answers]
        if wanted:
            return calls_turn([(t, {"question": f"{agent} asks {t}"}) for t in wanted],
                              request=request)
        said = "; ".join(f"{t}={answers[t].get('result', answers[t].get('error'))}"
                         for t in self.asks.get(agent, ()))
        return text_turn(f"{agent} answers ({said})" if said else f"{agent} answers",
                         request=request)


def team_loop(agents: Sequence[Agent], model: Team, settings: Settings = SETTINGS
              ) -> InProcessLoop:
    publisher = MemoryPublisher()
    deps = Deps(settings=settings, store=AgentStore(CountingDocumentDB(MemoryDocumentDB())),
                publisher=publisher, model=ScriptedModel(model), agents=AgentRegistry(agents),
                clock=ManualClock(), owner="test-owner")
    return InProcessLoop(deps, publisher)


def planner_team(**caps: Any) -> list[Agent]:
    """planner -> (researcher, critic) in parallel."""
    researcher = Agent("researcher", "Find facts.")
    critic = Agent("critic", "Find faults.")
    return [Agent("planner", "Plan.", [researcher.as_tool(**caps), critic.as_tool()]),
            researcher, critic]


async def ask(loop: InProcessLoop, agent: str, request_id: str = "q",
              **options: Any) -> RunRecord:
    await loop.submit(QueryMessage(request_id=request_id, text="plan a trip", agent=agent,
                                   options=RunOptions(**options)))
    await loop.run_until_idle()
    run = await loop.deps.store.runs.get_run(run_id_for_request(request_id))
    assert run is not None
    return run


class DiesOnce:
    """Stands in for ``call``: the first call that ``when`` accepts (by its arguments) raises
    :class:`SimulatedCrash` (the process dies there, ``why``); every other one goes through."""

    def __init__(self, call: Callable[..., Awaitable[Any]], why: str,
                 when: Callable[..., bool] = lambda *_: True) -> None:
        self.call, self.why, self.when = call, why, when
        self.died = False

    async def __call__(self, *args: Any, **options: Any) -> Any:
        if not self.died and self.when(*args):
            self.died = True
            raise SimulatedCrash(self.why)
        return await self.call(*args, **options)


def steps_of(loop: InProcessLoop, messages: list[Published]) -> list[Published]:
    """The step messages among ``messages`` (not the answers)."""
    return [m for m in messages if m.topic != loop.deps.settings.answers_topic]


async def drain(loop: InProcessLoop, pending: list[Published]) -> None:
    """Deliver ``pending`` and every step message that follows, until none is left."""
    while pending := steps_of(loop, pending):
        pending = await deliver_all(loop, pending)


async def child_of(loop: InProcessLoop, parent: RunRecord, step: str) -> RunRecord:
    child = await loop.deps.store.runs.get_run(children.child_run_id(parent, step))
    assert child is not None, f"no child run for {step}"
    return child


async def test_a_sub_agent_call_is_a_child_run_whose_answer_the_parent_reads() -> None:
    """Two sub-agents called in one turn run as two child runs, in parallel: each is a run of
    its own (its ledger, answer, cost, the parent's trace and owner), the parent's call waits
    holding nothing, and the next model step reads both answers."""
    model = Team({"planner": ["ask_researcher", "ask_critic"]})
    loop = team_loop(planner_team(), model)

    run = await ask(loop, "planner")

    assert run.status is RunStatus.COMPLETED, run
    assert run.answer == ("planner answers (ask_researcher=researcher answers; "
                          "ask_critic=critic answers)")
    kids = [await child_of(loop, run, "0000-tool-000"), await child_of(loop, run, "0000-tool-001")]
    for kid, agent in zip(kids, ("researcher", "critic"), strict=True):
        assert (kid.agent, kid.status, kid.parent_run_id, kid.depth) == (
            agent, RunStatus.COMPLETED, run.run_id, 1)
        assert kid.text == f"planner asks ask_{agent}" and kid.lineage == ["planner"]
        assert kid.trace_id == run.trace_id and kid.owner == run.owner
        assert kid.cost is not None and kid.cost.usd >= 0
    steps = await loop.deps.store.steps.list_steps(run.run_id)
    tools = [s for s in steps if s.kind == "tool"]
    assert [s.status for s in tools] == [StepStatus.COMPLETED] * 2
    assert all(s.decision is not None and s.decision.decision == "received" for s in tools)
    # The parent's cost counts its children's (each call's step carries its child's cost).
    assert run.cost is not None and kids[0].cost is not None and kids[1].cost is not None
    assert run.cost.requests >= kids[0].cost.requests + kids[1].cost.requests
    # A call waiting for its child is not announced as waiting for a person or an event.
    assert loop.notices == []
    # Every run's end was published once, the children's included.
    assert sorted(a.run_id for a in loop.answers) == sorted([run.run_id, *(k.run_id for k in kids)])


async def test_nested_sub_agents_two_deep_complete_bottom_up() -> None:
    """planner -> researcher -> librarian: a child that calls its own sub-agent waits in turn;
    the grandchild answers first and its answer travels up."""
    librarian = Agent("librarian", "Find books.")
    researcher = Agent("researcher", "Find facts.", [librarian.as_tool()])
    planner = Agent("planner", "Plan.", [researcher.as_tool()])
    loop = team_loop([planner, researcher, librarian],
                     Team({"planner": ["ask_researcher"], "researcher": ["ask_librarian"]}))

    run = await ask(loop, "planner")

    assert run.answer == ("planner answers (ask_researcher=researcher answers "
                          "(ask_librarian=librarian answers))")
    child = await child_of(loop, run, "0000-tool-000")
    grandchild = await child_of(loop, child, "0000-tool-000")
    assert (grandchild.depth, grandchild.lineage) == (2, ["planner", "researcher"])
    assert grandchild.trace_id == run.trace_id


async def test_a_failed_child_is_an_error_the_parent_reads_and_the_parent_goes_on() -> None:
    model = Team({"planner": ["ask_researcher", "ask_critic"]}, fails=["critic"])
    loop = team_loop(planner_team(), model, Settings(lease_seconds=10.0, default_max_steps=3))

    run = await ask(loop, "planner", max_steps=10)

    critic = await child_of(loop, run, "0000-tool-001")
    assert critic.status is RunStatus.COMPLETED and critic.stop_reason is not None
    assert critic.stop_reason.value == "max_steps"  # 3 steps of unknown tools
    assert run.status is RunStatus.COMPLETED
    assert run.answer is not None and "ask_researcher=researcher answers" in run.answer
    assert "ask_critic=agent 'critic' stopped by its max_steps budget" in run.answer


async def test_a_childs_budgets_are_at_most_what_its_parent_has_left() -> None:
    loop = team_loop(planner_team(max_steps=50), Team({"planner": ["ask_researcher"]}))
    run = await ask(loop, "planner", max_steps=4, max_seconds=100, max_tool_calls=9)
    child = await child_of(loop, run, "0000-tool-000")
    # The parent had used 1 step and 1 tool call when the call started, and keeps one step
    # for the turn that reads the answer.
    assert (child.limits.max_steps, child.limits.max_tool_calls) == (2, 8)
    assert child.limits.max_seconds <= 100
    assert run.answer is not None  # it had that turn


async def test_parallel_children_share_what_their_parent_has_left_and_leave_it_a_turn() -> None:
    """Two sub-agents asked at once each get half of what the parent has left (less the step
    it keeps): however much they use, the tree stays within the parent's budgets, and the
    parent reads what they said and answers."""
    loop = team_loop(planner_team(), Team({"planner": ["ask_researcher", "ask_critic"]},
                                          fails=["researcher", "critic"]))
    run = await ask(loop, "planner", max_steps=6, max_seconds=100, max_tool_calls=10)
    kids = [await child_of(loop, run, "0000-tool-000"), await child_of(loop, run, "0000-tool-001")]
    # 1 model call and 2 tool calls used: (6 - 1 - 1) // 2 steps, (10 - 2) // 2 tool calls.
    assert [(k.limits.max_steps, k.limits.max_tool_calls) for k in kids] == [(2, 4), (2, 4)]
    assert all(k.stop_reason is not None and k.stop_reason.value == "max_steps" for k in kids)
    assert run.stop_reason is not None and run.stop_reason.value == "answered", run
    assert run.usage.model_calls == 6 and run.usage.own().model_calls == 2
    assert run.usage.tool_calls <= 10


async def test_a_parents_usage_counts_its_childrens_with_their_part_apart() -> None:
    """Each sub-agent call's step records its child's usage and the next model step carries it
    on: the parent's usage at its end counts its children's model calls, tool calls and tokens,
    with their part apart (``usage.children``); what it used itself, and its own step count,
    are what its own steps recorded."""
    loop = team_loop(planner_team(), Team({"planner": ["ask_researcher", "ask_critic"]}))

    run = await ask(loop, "planner")

    kids = [await child_of(loop, run, "0000-tool-000"), await child_of(loop, run, "0000-tool-001")]
    assert all(k.usage.model_calls == 1 and k.usage.total_tokens > 0 for k in kids)
    theirs = kids[0].usage.plus(kids[1].usage)
    assert run.usage.children == theirs
    steps = await loop.deps.store.steps.list_steps(run.run_id)
    own = Usage(tool_calls=2)  # its two calls, and its two model steps
    for step in steps:
        if step.kind == "model":
            own = own.plus(step.usage)
    assert own.model_calls == 2 and own.total_tokens > 0
    assert run.usage.own() == own
    assert (run.usage.model_calls, run.usage.tool_calls, run.usage.total_tokens) == (
        4, 2, own.total_tokens + theirs.total_tokens)
    assert run.usage.prompt_tokens == own.prompt_tokens + theirs.prompt_tokens
    assert run.steps_total == 4  # its own: 2 model steps, 2 tool steps
    # A run ended outside a step adds its usage up from its steps: the same figures.
    assert steps_usage(steps) == run.usage
    (answer,) = [a for a in loop.answers if a.run_id == run.run_id]
    assert answer.usage == run.usage


@pytest.mark.parametrize(("budget", "limit"), [("max_steps", 4), ("max_tokens", 300)])
async def test_what_a_child_spent_of_its_parents_budget_the_parent_cannot_spend_again(
    budget: str, limit: int
) -> None:
    """The child may spend what its parent has left (its budget is capped so), and spends it.
    Steps: the parent keeps one, reads the child's end with it and has then spent its budget.
    Tokens: the parent's next model step finds them spent and stops by that budget."""
    loop = team_loop(planner_team(), Team({"planner": ["ask_researcher"]}, fails=["researcher"]))

    run = await ask(loop, "planner", **{budget: limit})

    child = await child_of(loop, run, "0000-tool-000")
    assert child.stop_reason is not None and child.stop_reason.value == budget
    own = run.usage.own()
    assert run.usage.children == child.usage
    if budget == "max_steps":
        # The parent had made 1 model call and keeps 1 for reading the answer.
        assert child.limits.max_steps == child.usage.model_calls == limit - 2
        assert run.usage.model_calls == limit and own.model_calls == 2
        assert run.stop_reason is not None and run.stop_reason.value == "answered", run
        return
    assert child.limits.max_tokens == limit - own.prompt_tokens - own.output_tokens
    assert own.total_tokens < limit <= run.usage.total_tokens
    assert run.stop_reason is not None and run.stop_reason.value == budget, run
    assert run.answer is None and own.model_calls == 1  # its one turn, which made the call


async def test_the_run_finished_line_has_the_childrens_usage_and_cost_apart(
    caplog: pytest.LogCaptureFixture,
) -> None:
    loop = team_loop(planner_team(), Team({"planner": ["ask_researcher"]}))
    caplog.set_level(logging.INFO, logger="ackloop.engine.ending")

    run = await ask(loop, "planner")

    child = await child_of(loop, run, "0000-tool-000")
    lines = {r.__dict__["fields"]["run_id"]: r.__dict__["fields"] for r in caplog.records
             if r.getMessage() == "run finished"}
    parent, kid = lines[run.run_id], lines[child.run_id]
    theirs = child.usage.model_dump(mode="json")
    assert parent["children_usage"] == parent["usage"]["children"] == theirs
    assert parent["usage"] == run.usage.model_dump(mode="json")
    assert parent["usage"]["total_tokens"] > theirs["total_tokens"] > 0
    assert parent["steps"] == 3  # its own: 2 model steps and the call
    assert "parent_run_id" not in parent
    # The child's line names its parent (its cost, in the parent's, is on it), and has no
    # children's part of its own.
    assert kid["parent_run_id"] == run.run_id and "children_usage" not in kid
    assert "children" not in kid["usage"]
    assert kid["cost"]["usd"] == pytest.approx(child.cost.usd if child.cost else 0.0)
    # Its cost too: all of the child's is in the parent's, and apart.
    assert child.cost is not None and child.cost.usd > 0
    assert parent["children_usd"] == parent["cost"]["children_usd"] == pytest.approx(
        child.cost.usd)
    assert parent["cost"]["usd"] > parent["children_usd"]
    assert "children_usd" not in kid and "children_usd" not in kid["cost"]


async def test_the_depth_limit_and_a_cycle_are_refused_with_an_error_the_model_reads() -> None:
    """An agent that calls itself is a cycle; a chain deeper than ``max_agent_depth`` is
    refused. Nothing is started for either, and the calling run goes on."""
    alice_tool = Agent("alice", "Delegate.").as_tool()  # a tool for the agent made below
    bob = Agent("bob", "Delegate back.", [alice_tool])
    alice = Agent("alice", "Delegate.", [bob.as_tool()])
    loop = team_loop([alice, bob], Team({"alice": ["ask_bob"], "bob": ["ask_alice"]}))
    run = await ask(loop, "alice")
    assert run.status is RunStatus.COMPLETED
    bob_run = await child_of(loop, run, "0000-tool-000")
    assert bob_run.status is RunStatus.COMPLETED
    assert "already working on this request (alice -> bob -> alice)" in (bob_run.answer or "")
    child_id = children.child_run_id(bob_run, "0000-tool-000")
    assert await loop.deps.store.runs.get_run(child_id) is None

    chain = [Agent("a3", "Leaf.")]
    for name in ("a2", "a1", "a0"):
        chain.insert(0, Agent(name, "Pass it on.", [chain[0].as_tool(name="ask_next")]))
    loop = team_loop(chain, Team({n: ["ask_next"] for n in ("a0", "a1", "a2")}),
                     Settings(lease_seconds=10.0, max_agent_depth=2))
    run = await ask(loop, "a0")
    depth_1 = await child_of(loop, run, "0000-tool-000")
    depth_2 = await child_of(loop, depth_1, "0000-tool-000")
    assert depth_2.answer is not None and "would nest sub-agents 3 deep" in depth_2.answer
    assert run.status is RunStatus.COMPLETED and "a1 answers" in (run.answer or "")


async def test_cancelling_the_parent_cancels_its_children_and_a_child_cancelled_alone_is_an_error(
) -> None:
    slow = Team({"planner": ["ask_researcher", "ask_critic"]})
    loop = team_loop(planner_team(), slow)
    await loop.submit(QueryMessage(request_id="q", text="plan", agent="planner"))
    pending = take(loop)
    for _ in range(3):  # the query; the planner's turn; its two calls (each starts a child)
        pending = await deliver_all(loop, steps_of(loop, pending))
    run_id = run_id_for_request("q")
    parent = await loop.deps.store.runs.get_run(run_id)
    assert parent is not None
    researcher = await child_of(loop, parent, "0000-tool-000")
    critic = await child_of(loop, parent, "0000-tool-001")
    assert researcher.status is critic.status is RunStatus.RUNNING

    # A child cancelled on its own: the parent's call ends with an error its model reads.
    await cancel_run(loop.deps, critic.run_id)
    await drain(loop, pending)  # the children's first steps, and all that follows
    parent = await loop.deps.store.runs.get_run(run_id)
    assert parent is not None and parent.status is RunStatus.COMPLETED
    assert "ask_critic=agent 'critic' was cancelled before it answered" in (parent.answer or "")

    # Cancelling a parent whose child is still working cancels the child too.
    loop2 = team_loop(planner_team(), Team({"planner": ["ask_researcher"]}))
    await loop2.submit(QueryMessage(request_id="q2", text="plan", agent="planner"))
    pending = take(loop2)
    for _ in range(3):
        pending = await deliver_all(loop2, steps_of(loop2, pending))
    parent2 = await loop2.deps.store.runs.get_run(run_id_for_request("q2"))
    assert parent2 is not None
    child2 = await child_of(loop2, parent2, "0000-tool-000")
    assert child2.status is RunStatus.RUNNING
    await cancel_run(loop2.deps, parent2.run_id)
    await drain(loop2, pending)
    assert (await child_of(loop2, parent2, "0000-tool-000")).status is RunStatus.CANCELLED
    ended = await loop2.deps.store.runs.get_run(parent2.run_id)
    assert ended is not None and ended.status is RunStatus.CANCELLED


async def _planner_call_crashed(loop: Any) -> Any:
    """Ask the planner, deliver until its one call's message, and deliver that call into the
    crash the test armed; the call's message, for its redelivery."""
    await loop.submit(QueryMessage(request_id="q", text="plan", agent="planner"))
    pending = take(loop)
    for _ in range(2):
        pending = await deliver_all(loop, pending)
    (call,) = pending
    with pytest.raises(SimulatedCrash):
        await loop.deliver("tool", call)
    return call


async def test_a_crash_between_starting_the_child_and_recording_the_wait_starts_one_child(
) -> None:
    """The parent's tool step dies after it created the child (and sent its first step), before
    it recorded its wait; the redelivery, taking the step over, finds the child it started: one
    child, one first step, and the run completes."""
    team = Team({"planner": ["ask_researcher"]})
    loop = team_loop(planner_team(), team)
    created = 0
    create_run = loop.deps.store.runs.create_run

    async def create_then_die(run: RunRecord, costed: Any, **options: Any) -> Any:
        nonlocal created
        found = await create_run(run, costed, **options)
        if run.parent_run_id is not None:
            created += 1
            if created == 1:
                raise SimulatedCrash("after the child was created")
        return found

    loop.deps.store.runs.create_run = create_then_die  # type: ignore[method-assign]
    call = await _planner_call_crashed(loop)
    sent = steps_of(loop, take(loop))  # the child's first step went out before the crash
    loop.deps.clock.advance(SETTINGS.lease_seconds + 1)  # type: ignore[attr-defined]
    await drain(loop, [call, *sent])  # the redelivery takes the step over

    parent = await loop.deps.store.runs.get_run(run_id_for_request("q"))
    assert parent is not None and parent.status is RunStatus.COMPLETED
    assert parent.answer == "planner answers (ask_researcher=researcher answers)"
    children_runs = [r for r in await loop.deps.store.runs.recent_runs(limit=10)
                     if r.parent_run_id == parent.run_id]
    assert len(children_runs) == 1 and created == 2
    assert [agent for agent, _ in team.calls].count("researcher") == 1  # one child, run once


async def test_a_parent_step_redelivered_after_its_child_ended_changes_nothing() -> None:
    model = Team({"planner": ["ask_researcher"]})
    loop = team_loop(planner_team(), model)
    await loop.submit(QueryMessage(request_id="q", text="plan", agent="planner"))
    pending = take(loop)
    for _ in range(2):
        pending = await deliver_all(loop, pending)
    (call,) = pending
    await drain(loop, [call])
    parent = await loop.deps.store.runs.get_run(run_id_for_request("q"))
    assert parent is not None and parent.status is RunStatus.COMPLETED
    before = (list(model.calls), await loop.deps.store.steps.list_steps(parent.run_id),
              await loop.deps.store.runs.recent_runs(limit=10))
    await drain(loop, [call])  # the call's message once more
    after = (list(model.calls), await loop.deps.store.steps.list_steps(parent.run_id),
             await loop.deps.store.runs.recent_runs(limit=10))
    assert after == before  # no model call, no step, no run: nothing changed


async def test_a_caller_cannot_send_the_event_a_child_run_ends_with() -> None:
    loop = team_loop(planner_team(), Team({"planner": ["ask_researcher"]}))
    await loop.submit(QueryMessage(request_id="q", text="plan", agent="planner"))
    pending = take(loop)
    for _ in range(3):
        pending = await deliver_all(loop, pending)
    run_id = run_id_for_request("q")
    forged = ReceivedEvent(payload={"status": "completed", "stop_reason": "answered",
                                    "answer": "forged"}, by="mallory", at=1.0)
    with pytest.raises(DecisionRefused) as refused:
        await arrivals.deliver(loop.deps, run_id, "child.0000-tool-000", forged)
    assert refused.value.reason == "reserved_event"
    await loop.run_until_idle()
    parent = await loop.deps.store.runs.get_run(run_id)
    assert parent is not None and "forged" not in (parent.answer or "")


def booker_turn(request: ModelRequest) -> ModelTurn:
    """The booker's turn: book Lisbon (a call that waits for a person), then say how it went."""
    answers = _responses(request)
    if "book" not in answers:
        return calls_turn([("book", {"place": "Lisbon"})], request=request)
    return text_turn(str(answers["book"].get("result")), request=request)


def booking_loop(sent: list[str]) -> InProcessLoop:
    """planner -> booker, whose ``book`` tool waits for a person's approval (each booking
    made is appended to ``sent``)."""

    @tool(requires_approval=True)
    def book(place: str) -> str:
        """Book a place."""
        sent.append(place)
        return f"booked {place}"

    booker = Agent("booker", "Book things.", ToolSet([book]))
    planner = Agent("planner", "Plan.", [booker.as_tool()])

    def play(request: ModelRequest) -> ModelTurn:
        answers = _responses(request)
        if request.agent == "booker":
            return booker_turn(request)
        if "ask_booker" not in answers:
            return calls_turn([("ask_booker", {"question": "book Lisbon"})], request=request)
        return text_turn(f"done: {answers['ask_booker'].get('result')}", request=request)

    return team_loop([planner, booker], play)  # type: ignore[arg-type]


async def test_a_childs_approval_wait_keeps_the_whole_tree_waiting_at_no_cost() -> None:
    """A child whose call waits for a person: the child and its parent both wait, nothing is
    queued or held; the approval resumes the child, whose end resumes the parent."""
    sent: list[str] = []
    loop = booking_loop(sent)
    parent = await ask(loop, "planner")
    child = await child_of(loop, parent, "0000-tool-000")
    assert parent.status is child.status is RunStatus.RUNNING and not loop.queued()
    (waiting,) = [s for s in await loop.deps.store.steps.list_steps(child.run_id)
                  if s.status is StepStatus.WAITING]
    from ackloop.domain.records import StepDecision
    from ackloop.engine.waits import core as waits

    await waits.resolve(loop.deps, child.run_id, waiting.key, StepDecision(
        decision="approve", by="alice", at=loop.deps.clock.now()), "approval")
    await loop.run_until_idle()
    parent = await loop.deps.store.runs.get_run(parent.run_id)  # type: ignore[assignment]
    assert parent is not None and parent.answer == "done: booked Lisbon" and sent == ["Lisbon"]


async def test_a_child_ended_by_its_dead_letter_tells_its_parent_which_goes_on() -> None:
    """The child's first step exhausted its deliveries: the dead letter fails the child (with
    the cause), and that end reaches the parent's waiting call like any other end: the
    parent's model reads that the sub-agent failed, and the parent completes."""
    from tests.engine.test_holes import dead_letter

    loop = team_loop(planner_team(), Team({"planner": ["ask_researcher"]}))
    await loop.submit(QueryMessage(request_id="q", text="plan", agent="planner"))
    pending = take(loop)
    for _ in range(3):  # the query; the planner's turn; its call (which starts the child)
        pending = await deliver_all(loop, steps_of(loop, pending))
    (child_step,) = steps_of(loop, pending)  # the child's first step, never run
    assert (await dead_letter(loop, child_step, "dl-child")).acknowledged
    await drain(loop, take(loop))

    parent = await loop.deps.store.runs.get_run(run_id_for_request("q"))
    assert parent is not None and parent.status is RunStatus.COMPLETED
    child = await child_of(loop, parent, "0000-tool-000")
    assert child.status is RunStatus.FAILED and "dead_lettered" in (child.error or "")
    assert "ask_researcher=agent 'researcher' failed: dead_lettered" in (parent.answer or "")


async def test_a_parent_cancelled_after_its_childs_end_arrived_still_counts_what_it_spent(
) -> None:
    """The child's end is recorded on the call (``received``), then the parent is cancelled
    before the call carries on (the request that recorded it died): the call is not completed
    with the answer, but what the child used and cost is in the parent's figures."""
    from ackloop.engine.waits.kinds import child_end

    loop = team_loop(planner_team(), Team({"planner": ["ask_researcher"]}))
    store = loop.deps.store
    parent_id = run_id_for_request("q")
    await loop.submit(QueryMessage(request_id="q", text="plan", agent="planner"))
    pending, held = take(loop), []
    for _ in range(50):
        if not pending:
            break
        later = []
        for message in pending:
            if json.loads(message.data).get("type") == "child_ended":
                held.append(message)  # the child's end: held back
                continue
            later += await deliver_all(loop, [message])
        pending = [m for m in later if m.topic != loop.deps.settings.answers_topic]
    assert held
    parent = await store.runs.get_run(parent_id)
    assert parent is not None
    child = await child_of(loop, parent, "0000-tool-000")
    assert child.status is RunStatus.COMPLETED and child.cost is not None
    # Its end recorded on the call, by a request that died before it carried the call on.
    await store.waits.decide_step(parent_id, "0000-tool-000", child_end(loop.deps, child),
                                  "child")
    await cancel_run(loop.deps, parent_id)
    pending = held + take(loop)
    while pending := [m for m in pending if m.topic != loop.deps.settings.answers_topic]:
        pending = await deliver_all(loop, pending)
    parent = await store.runs.get_run(parent_id)
    assert parent is not None and parent.status is RunStatus.CANCELLED
    assert parent.usage.children == child.usage and child.usage.model_calls == 1
    assert parent.cost is not None and parent.cost.children_usd == pytest.approx(child.cost.usd)


async def test_a_call_rejected_at_its_deadline_counts_what_its_child_spent_until_then() -> None:
    """The child waits for a person's approval; the parent's call reaches its deadline first
    and is rejected: the child is cancelled, and what it had used (its first model call) is in
    the parent's usage and cost."""
    from ackloop.domain.records import DEADLINE, StepDecision
    from ackloop.engine.waits import core as waits

    loop = booking_loop([])
    parent = await ask(loop, "planner")
    child = await child_of(loop, parent, "0000-tool-000")
    assert child.status is RunStatus.RUNNING  # waiting for the approval
    await waits.resolve(loop.deps, parent.run_id, "0000-tool-000", StepDecision(
        decision="reject", by=DEADLINE, at=loop.deps.clock.now()))
    await loop.run_until_idle()
    ended = await loop.deps.store.runs.get_run(parent.run_id)
    child = await child_of(loop, parent, "0000-tool-000")
    assert child.status is RunStatus.CANCELLED and child.usage.model_calls >= 1
    assert ended is not None and ended.usage.children is not None
    assert ended.usage.children.model_calls == child.usage.model_calls
    assert ended.cost is not None and ended.cost.children_usd > 0


async def test_the_cost_metric_counts_each_step_of_the_tree_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``ackloop.domain.cost.usd`` adds each step's cost as it commits: a sub-agent call's step
    carries its child's whole cost in its own (the parent's roll-up needs it), which the
    child's steps already added, so the metric takes only the call's own part."""
    from ackloop.engine import step_commit as commit_module

    seen: list[float] = []
    monkeypatch.setattr(commit_module.metrics, "step_cost",
                        lambda kind, usd: seen.append(usd))
    loop = team_loop(planner_team(), Team({"planner": ["ask_researcher"]}))
    run = await ask(loop, "planner")
    kid = await child_of(loop, run, "0000-tool-000")
    steps = [*await loop.deps.store.steps.list_steps(run.run_id),
             *await loop.deps.store.steps.list_steps(kid.run_id)]
    assert all(s.cost is not None for s in steps)
    own = [s.cost.usd - s.cost.children_usd for s in steps if s.cost is not None]
    assert sum(seen) == pytest.approx(sum(own))
    assert any(s.cost is not None and s.cost.children_usd > 0 for s in steps)


async def test_the_end_of_a_child_still_running_is_not_taken_and_its_real_end_is_once() -> None:
    """A child's end message that arrives while the child still runs (early, redelivered out of
    order, or forged: the message only names the child) is ignored: the parent's call keeps
    waiting, and the child's real end resolves it once, with the child's answer."""
    team = Team({"planner": ["ask_researcher"]})
    loop = team_loop(planner_team(), team)
    await loop.submit(QueryMessage(request_id="q", text="plan", agent="planner"))
    pending = take(loop)
    for _ in range(2):
        pending = await deliver_all(loop, pending)
    (call,) = pending
    sent = await deliver_all(loop, [call])  # the call starts its child and waits
    parent_id = run_id_for_request("q")
    parent = await loop.deps.store.runs.get_run(parent_id)
    assert parent is not None
    child = await child_of(loop, parent, "0000-tool-000")
    assert not child.status.terminal

    early = await arrivals.deliver_end(loop.deps, child.run_id)

    (step,) = await loop.deps.store.steps.get_steps(parent_id, ["0000-tool-000"])
    assert step is not None and step.status is StepStatus.WAITING and step.decision is None
    parent = await loop.deps.store.runs.get_run(parent_id)
    assert parent is not None and parent.status is RunStatus.RUNNING and not parent.received
    assert "ignored" in early and "event" not in early, early
    assert not steps_of(loop, take(loop))  # nothing resumed

    await drain(loop, sent)  # the child runs to its end, which its parent takes
    parent = await loop.deps.store.runs.get_run(parent_id)
    assert parent is not None and parent.status is RunStatus.COMPLETED
    assert parent.answer == "planner answers (ask_researcher=researcher answers)"
    assert [agent for agent, _ in team.calls] == ["planner", "researcher", "planner"]
    (step,) = await loop.deps.store.steps.get_steps(parent_id, ["0000-tool-000"])
    assert step is not None and step.status is StepStatus.COMPLETED
    assert step.result is not None
    assert step.result["response"] == {"result": "researcher answers"}


class Interleaving(CountingDocumentDB):
    """A store whose reads give way to the other tasks once ``on`` is set: deliveries running
    at once then read the same versions and race to commit, as on Firestore."""

    on = False

    async def get_all(self, paths: Sequence[str]) -> list[Any]:
        found = await super().get_all(paths)
        if self.on:
            await asyncio.sleep(0)
        return found


async def test_the_ends_of_parallel_children_delivered_at_once_are_all_taken() -> None:
    """Eight children end and their ends reach the parent at the same moment: each resolves its
    own call and carries it on in the same request, writing that call's step alone and no
    other document of the parent's run (no hot document): its decision, its claim and its
    commit; the parent's turn goes on once and reads all eight."""
    tools = [f"ask_{name}" for name in "abcdefgh"]
    team = Team({"planner": tools})
    subs = [Agent(t.removeprefix("ask_"), "Answer.") for t in tools]
    agents = [Agent("planner", "Plan.", [s.as_tool() for s in subs]), *subs]
    memory = MemoryDocumentDB()
    db = Interleaving(memory)
    publisher = MemoryPublisher()
    loop = InProcessLoop(Deps(settings=SETTINGS, store=AgentStore(db), publisher=publisher,
                              model=ScriptedModel(team), agents=AgentRegistry(agents),
                              clock=ManualClock(), owner="test-owner"), publisher)
    await loop.submit(QueryMessage(request_id="q", text="plan", agent="planner"))
    pending = take(loop)
    ends: list[Published] = []
    while pending:  # everything but the children's ends
        ends += [m for m in pending if b"child_ended" in m.data]
        pending = await deliver_all(loop, [m for m in steps_of(loop, pending)
                                           if b"child_ended" not in m.data])
    assert len(ends) == 8
    parent_id = run_id_for_request("q")
    parent_docs = f"runs/{parent_id}"
    keys = [f"0000-tool-00{i}" for i in range(8)]
    before = dict(memory.written)

    db.on = True
    outcomes = await asyncio.gather(*(loop.deliver("query", m) for m in ends))
    db.on = False

    assert [o.acknowledged for o in outcomes] == [True] * 8, outcomes
    written = {p: n - before.get(p, 0) for p, n in memory.written.items()
               if n != before.get(p, 0)}
    assert written == {f"{parent_docs}/steps/{k}": 3 for k in keys}, written
    parent = await loop.deps.store.runs.get_run(parent_id)
    assert parent is not None and parent.received == {}
    calls = await loop.deps.store.steps.get_steps(parent_id, keys)
    assert all(s is not None and s.status is StepStatus.COMPLETED and s.decision is not None
               and s.decision.decision == "received" for s in calls)
    sent = take(loop)
    assert [json.loads(m.data).get("turn") for m in sent] == [1]  # the next model step, once
    await drain(loop, sent)
    parent = await loop.deps.store.runs.get_run(parent_id)
    assert parent is not None and parent.status is RunStatus.COMPLETED
    assert parent.answer == "planner answers (" + "; ".join(
        f"{t}={t.removeprefix('ask_')} answers" for t in tools) + ")"
    assert [agent for agent, _ in team.calls].count("planner") == 2  # the turn went on once


async def test_a_call_whose_child_ended_before_its_wait_was_recorded_records_the_wait() -> None:
    """The parent's tool step dies after creating the child; the child runs and ends before the
    call's redelivery, which finds the child's end already arrived. The call's step still
    records what it waited for and what resolved it, as a wait resolved later does, so the
    run's tree (the inspector, GET /runs/{id}) names its child."""
    from ackloop.api.tree import child_ids, starts_child

    team = Team({"planner": ["ask_researcher"]})
    loop = team_loop(planner_team(), team)
    waits = 0
    wait_step = loop.deps.store.waits.wait_step

    async def die_before_the_wait(*args: Any, **options: Any) -> Any:
        nonlocal waits
        waits += 1
        if waits == 1:
            raise SimulatedCrash("after the child was started, before its wait was recorded")
        return await wait_step(*args, **options)

    loop.deps.store.waits.wait_step = die_before_the_wait  # type: ignore[method-assign]
    call = await _planner_call_crashed(loop)
    started = steps_of(loop, take(loop))
    assert started  # the child's first step went out before the crash
    await drain(loop, started)  # the child runs and ends first
    loop.deps.clock.advance(SETTINGS.lease_seconds + 1)  # type: ignore[attr-defined]
    await drain(loop, [call])  # the redelivery finds the child's end already arrived

    parent = await loop.deps.store.runs.get_run(run_id_for_request("q"))
    assert parent is not None and parent.status is RunStatus.COMPLETED
    assert parent.answer == "planner answers (ask_researcher=researcher answers)"
    steps = await loop.deps.store.steps.list_steps(parent.run_id)
    (asked,) = [s for s in steps if s.kind == "tool"]
    assert starts_child(asked), asked
    assert asked.decision is not None and asked.decision.decision == "received"
    (child,) = [r for r in await loop.deps.store.runs.recent_runs(limit=10)
                if r.parent_run_id == parent.run_id]
    assert child_ids(parent, steps) == [(asked.key, child.run_id)]
    assert waits == 1  # the redelivery never waited: the end had arrived


async def test_a_childs_end_before_its_call_waits_is_delivered_again_and_writes_nothing() -> None:
    """The child ends while its call has not recorded its wait (the call's tool step died
    before it, holding the step): the end's handler writes nothing of the parent (a tool step's
    commits are conditional on its step's version) and asks for redelivery; the call's
    redelivery takes the end at once, and the end's redelivery then finds the call ended."""
    team = Team({"planner": ["ask_researcher"]})
    loop = team_loop(planner_team(), team)
    loop.deps.store.waits.wait_step = DiesOnce(  # type: ignore[method-assign]
        loop.deps.store.waits.wait_step,
        "after the child was started, before its wait was recorded")
    call = await _planner_call_crashed(loop)
    pending, ends = steps_of(loop, take(loop)), []
    while pending:  # the child runs and ends; its end's message held back
        ends += [m for m in pending if b"child_ended" in m.data]
        pending = steps_of(loop, await deliver_all(
            loop, [m for m in pending if b"child_ended" not in m.data]))
    (end,) = ends
    parent_id = run_id_for_request("q")
    memory = loop.deps.store.db.inner  # type: ignore[attr-defined]
    before = dict(memory.written)

    early = await loop.deliver("query", end)

    assert not early.acknowledged and early.retry_after, early  # delivered again
    assert dict(memory.written) == before  # nothing of the parent (nor anything) written
    loop.deps.clock.advance(SETTINGS.lease_seconds + 1)  # type: ignore[attr-defined]
    await drain(loop, [call])  # the call's redelivery takes the end at once
    late = await loop.deliver("query", end)
    assert late.acknowledged and late.body.get("ignored") == "its call has ended", late
    parent = await loop.deps.store.runs.get_run(parent_id)
    assert parent is not None and parent.status is RunStatus.COMPLETED
    assert parent.answer == "planner answers (ask_researcher=researcher answers)"


async def all_but_the_ends(loop: InProcessLoop) -> list[Published]:
    """Ask the planner; deliver everything but its children's ends, and return those."""
    await loop.submit(QueryMessage(request_id="q", text="plan", agent="planner"))
    pending, ends = take(loop), []
    while pending:
        ends += [m for m in pending if b"child_ended" in m.data]
        pending = await deliver_all(loop, [m for m in steps_of(loop, pending)
                                           if b"child_ended" not in m.data])
    return ends


@pytest.mark.parametrize("dies_at", ["before_commit", "before_send"])
async def test_a_call_carried_on_by_its_childs_end_survives_that_request_dying(
        dies_at: str) -> None:
    """The child's end resolves its call and carries it on in the same request, which dies
    before the call's commit, or after it and before the next model step is sent. The end's
    redelivery carries the call on again (the step holds its message id): the call completes
    once, the parent's next model step is sent, the run answers, and nothing runs twice."""
    team = Team({"planner": ["ask_researcher"]})
    loop = team_loop(planner_team(), team)
    store = loop.deps.store
    parent_id = run_id_for_request("q")
    (end,) = await all_but_the_ends(loop)

    if dies_at == "before_commit":
        dies = DiesOnce(store.steps.commit_step, "before the call's commit")
        store.steps.commit_step = dies  # type: ignore[method-assign]
    else:
        model_steps = loop.deps.settings.model_steps_topic
        dies = DiesOnce(loop.deps.publisher.publish_many, "before the next model step is sent",
                        when=lambda topic, *_: topic == model_steps)
        loop.deps.publisher.publish_many = dies  # type: ignore[method-assign]
    with pytest.raises(SimulatedCrash):
        await loop.deliver("query", end)
    assert dies.died
    assert take(loop) == []  # nothing was sent: the end is not acknowledged

    outcome = await loop.deliver("query", end)  # Pub/Sub's redelivery of the same message
    assert outcome.acknowledged, outcome
    sent = take(loop)
    assert [json.loads(m.data).get("turn") for m in steps_of(loop, sent)] == [1]
    await drain(loop, sent)
    parent = await store.runs.get_run(parent_id)
    assert parent is not None and parent.status is RunStatus.COMPLETED, parent
    assert "ask_researcher=researcher answers" in (parent.answer or "")
    assert [agent for agent, _ in team.calls].count("planner") == 2
    assert [agent for agent, _ in team.calls].count("researcher") == 1
    (call,) = await store.steps.get_steps(parent_id, ["0000-tool-000"])
    assert call is not None and call.status is StepStatus.COMPLETED
    assert call.message_id == end.message_id


async def test_a_call_its_childs_end_carries_on_that_cannot_be_recorded_fails_its_run() -> None:
    """The call carried on by its child's end cannot be committed (a record Firestore refuses):
    as when its own delivery meets that, its message is kept as a tool step's poison and the
    parent ends failed with the reason; the child's end is acknowledged, not redelivered."""
    from ackloop.domain.errors import PermanentError

    team = Team({"planner": ["ask_researcher"]})
    loop = team_loop(planner_team(), team)
    store = loop.deps.store
    parent_id = run_id_for_request("q")
    (end,) = await all_but_the_ends(loop)

    async def refused(*args: Any, **options: Any) -> Any:
        raise PermanentError("a value nested too deep", reason="invalid_write")

    store.steps.commit_step = refused  # type: ignore[method-assign]
    outcome = await loop.deliver("query", end)
    assert outcome.acknowledged, outcome
    parent = await store.runs.get_run(parent_id)
    assert parent is not None and parent.status is RunStatus.FAILED, parent
    assert "invalid_write" in (parent.error or "")
    (poison,) = await store.letters.list_poison()
    assert poison["kind"] == "tool" and poison["reason"] == "invalid_write"
    assert poison["attributes"]["step"] == "0000-tool-000"
