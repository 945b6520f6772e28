"""A run's child runs (its sub-agents' calls) through the HTTP API, in process: ``GET /runs/{id}``
lists them with their costs apart and a child names its parent; the event stream carries the
steps of the whole tree, each tagged with its run, live and resumed.

The engine is the in-memory one with the real dispatch, a manual clock, and the scripted ``Team``
of tests/engine/test_children.py.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from ackloop.agents.agent import Agent
from ackloop.api.events import run_events
from ackloop.api.models import Event, FinishedEvent, StepEvent
from ackloop.docdb.memory import MemoryDocumentDB
from ackloop.domain.keys import StepKey, run_id_for_request
from ackloop.domain.records import (
    Outgoing,
    RunLimits,
    RunRecord,
    RunStatus,
    StepRecord,
    StepStatus,
    Waiting,
)
from ackloop.domain.wire import QueryMessage
from ackloop.engine.children import child_run_id, event_name
from ackloop.store import AgentStore
from ackloop.testing.inprocess import InProcessLoop
from tests.engine.fakes import api_of
from tests.engine.test_children import Team, team_loop
from tests.engine.test_guarantees import deliver_all, take

FIRST_CALL, SECOND_CALL = "0000-tool-000", "0000-tool-001"


def nested_team() -> tuple[list[Agent], Team]:
    """planner -> (researcher -> librarian, critic): two children, one grandchild."""
    librarian = Agent("librarian", "Find books.")
    researcher = Agent("researcher", "Find facts.", [librarian.as_tool()])
    critic = Agent("critic", "Find faults.")
    planner = Agent("planner", "Plan.", [researcher.as_tool(), critic.as_tool()])
    team = Team({"planner": ["ask_researcher", "ask_critic"], "researcher": ["ask_librarian"]})
    return [planner, researcher, critic, librarian], team


async def finished_tree() -> tuple[InProcessLoop, dict[str, RunRecord]]:
    """The nested team's run, ended, and its runs by agent."""
    agents, team = nested_team()
    loop = team_loop(agents, team)
    await loop.submit(QueryMessage(request_id="q", text="plan a trip", agent="planner"))
    await loop.run_until_idle()
    store = loop.deps.store
    planner = await store.runs.get_run(run_id_for_request("q"))
    assert planner is not None and planner.status is RunStatus.COMPLETED
    researcher = await store.runs.get_run(child_run_id(planner, FIRST_CALL))
    critic = await store.runs.get_run(child_run_id(planner, SECOND_CALL))
    assert researcher is not None and critic is not None
    librarian = await store.runs.get_run(child_run_id(researcher, FIRST_CALL))
    assert librarian is not None
    return loop, {"planner": planner, "researcher": researcher, "critic": critic,
                  "librarian": librarian}


def cost_of(run: RunRecord) -> dict[str, Any] | None:
    return run.cost.model_dump(mode="json") if run.cost is not None else None


async def test_a_run_lists_its_children_with_their_costs_apart_and_a_child_names_its_parent(
) -> None:
    loop, runs = await finished_tree()
    planner, researcher, critic = runs["planner"], runs["researcher"], runs["critic"]
    reads: list[list[str]] = []
    get_all = loop.deps.store.db.get_all

    async def counted(paths: Any) -> Any:
        reads.append(list(paths))
        return await get_all(paths)

    loop.deps.store.db.get_all = counted  # type: ignore[method-assign]
    async with api_of(loop) as api:
        view = (await api.get(f"/runs/{planner.run_id}")).json()
        child_view = (await api.get(f"/runs/{researcher.run_id}")).json()
        leaf_view = (await api.get(f"/runs/{critic.run_id}")).json()

    assert view["parent_run_id"] is None and view["parent_step"] is None
    assert view["children"] == [
        {"run_id": kid.run_id, "agent": kid.agent, "step": step, "status": "completed",
         "stop_reason": "answered", "budget_stop": None,
         "usage": kid.usage.model_dump(mode="json"), "cost": cost_of(kid)}
        for step, kid in ((FIRST_CALL, researcher), (SECOND_CALL, critic))]
    # The children's costs, summed apart; the run's own cost already counts them.
    assert researcher.cost is not None and critic.cost is not None
    assert view["children_cost"]["usd"] == pytest.approx(researcher.cost.usd + critic.cost.usd)
    assert view["children_cost"]["requests"] == researcher.cost.requests + critic.cost.requests
    assert view["cost"]["usd"] > view["children_cost"]["usd"] > 0
    # Both children were read in one batch.
    store = loop.deps.store
    assert [store.run_path(researcher.run_id), store.run_path(critic.run_id)] in reads

    assert (child_view["parent_run_id"], child_view["parent_step"]) == (planner.run_id,
                                                                       FIRST_CALL)
    assert [(c["agent"], c["run_id"], c["step"]) for c in child_view["children"]] == [
        ("librarian", runs["librarian"].run_id, FIRST_CALL)]
    assert leaf_view["parent_run_id"] == planner.run_id
    assert (leaf_view["children"], leaf_view["children_cost"]) == ([], None)


async def test_the_list_of_runs_names_each_childs_parent() -> None:
    """``GET /runs`` (the run inspector nests a child under its parent by it) and a
    conversation's runs name each child's parent and the parent's step that started it."""
    loop, runs = await finished_tree()
    async with api_of(loop) as api:
        listed = (await api.get("/runs")).json()["runs"]
        conversation = (await api.get(
            f"/conversations/{runs['planner'].conversation_id}/runs")).json()["runs"]
    parents = {r["agent"]: (r["parent_run_id"], r["parent_step"]) for r in listed}
    assert parents == {
        "planner": (None, None),
        "researcher": (runs["planner"].run_id, FIRST_CALL),
        "critic": (runs["planner"].run_id, SECOND_CALL),
        "librarian": (runs["researcher"].run_id, FIRST_CALL)}
    assert [(r["agent"], r["parent_run_id"]) for r in conversation] == [("planner", None)]


async def test_a_run_shows_its_childrens_usage_apart() -> None:
    """``GET /runs/{id}``: the run's usage counts its children's (each one's whole tree: the
    researcher's counts the librarian's), with their part apart in ``usage.children``; the
    children's usage summed as their records stand is ``children_usage``, beside
    ``children_cost``. A run without children has neither."""
    loop, runs = await finished_tree()
    planner, researcher, critic = runs["planner"], runs["researcher"], runs["critic"]
    librarian = runs["librarian"]
    async with api_of(loop) as api:
        view = (await api.get(f"/runs/{planner.run_id}")).json()
        child_view = (await api.get(f"/runs/{researcher.run_id}")).json()
        leaf_view = (await api.get(f"/runs/{critic.run_id}")).json()

    assert researcher.usage.children == librarian.usage  # a child's own children, apart
    theirs = researcher.usage.counts().plus(critic.usage)
    assert theirs.model_calls == 4 and theirs.total_tokens > 0  # researcher 2, librarian, critic
    assert view["usage"]["children"] == view["children_usage"] == theirs.model_dump(mode="json")
    own = {name: view["usage"][name] - view["usage"]["children"][name]
           for name in ("model_calls", "tool_calls", "total_tokens")}
    assert (own["model_calls"], own["tool_calls"]) == (2, 2)  # the planner's turns and calls
    assert own["total_tokens"] > 0
    assert child_view["usage"]["children"] == child_view["children_usage"] == (
        librarian.usage.model_dump(mode="json"))
    assert "children" not in leaf_view["usage"] and leaf_view["children_usage"] is None


async def test_children_still_working_are_listed_running() -> None:
    agents, team = nested_team()
    loop = team_loop(agents, team)
    await loop.submit(QueryMessage(request_id="q", text="plan", agent="planner"))
    pending = take(loop)
    for _ in range(3):  # the query; the planner's turn; its two calls (each starts a child)
        pending = await deliver_all(loop, pending)
    run_id = run_id_for_request("q")
    async with api_of(loop) as api:
        view = (await api.get(f"/runs/{run_id}")).json()
    assert view["status"] == "running"
    assert [(c["agent"], c["step"], c["status"], c["stop_reason"])
            for c in view["children"]] == [("researcher", FIRST_CALL, "running", None),
                                           ("critic", SECOND_CALL, "running", None)]
    assert all(c["cost"] is not None for c in view["children"])  # what starting each spent
    assert {w["event_name"] for w in view["waiting"]} == {event_name(FIRST_CALL),
                                                          event_name(SECOND_CALL)}


def step_events(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["run_id"], e["step"]["key"]) for e in events if e["type"] == "step"]


async def test_the_event_stream_carries_every_step_of_the_tree_tagged_with_its_run() -> None:
    loop, runs = await finished_tree()
    store = loop.deps.store
    keys = {agent: [s.key for s in await store.steps.list_steps(run.run_id)]
            for agent, run in runs.items()}
    planner = runs["planner"]
    async with api_of(loop) as api:
        lines = (await api.get(f"/runs/{planner.run_id}/events")).text.splitlines()
        resumed = (await api.get(f"/runs/{planner.run_id}/events",
                                 params={"after": "0000-model"})).text.splitlines()
        late = (await api.get(f"/runs/{planner.run_id}/events",
                              params={"after": SECOND_CALL})).text.splitlines()
    events = [json.loads(line) for line in lines]
    sent = step_events(events)
    # Every step of every run of the tree, once each, in its run's order.
    for agent, run in runs.items():
        assert [key for run_id, key in sent if run_id == run.run_id] == keys[agent], agent
    assert len(sent) == sum(map(len, keys.values()))
    assert events[-1]["type"] == "finished" and events[-1]["run_id"] == planner.run_id
    # A child's steps come before the step of the call that waited for it.
    for child, parent, step in (("researcher", "planner", FIRST_CALL),
                                ("critic", "planner", SECOND_CALL),
                                ("librarian", "researcher", FIRST_CALL)):
        waited = sent.index((runs[parent].run_id, step))
        assert max(sent.index((runs[child].run_id, k)) for k in keys[child]) < waited, child
    # A child's step carries the stream's cursor: the planner's last step sent before it.
    cursor = None
    for event in events[:-1]:
        if event["run_id"] == planner.run_id:
            cursor = event["cursor"]
        else:
            assert event["cursor"] == cursor is not None, event

    # Resumed after the planner's first step: its calls had not completed, so every child's
    # steps come again; resumed after its last call, none does.
    again = step_events([json.loads(line) for line in resumed])
    assert [k for r, k in again if r == planner.run_id] == keys["planner"][1:]
    assert sorted(again) == sorted(s for s in sent if s != (planner.run_id, "0000-model"))
    assert step_events([json.loads(line) for line in late]) == [(planner.run_id, "0001-model")]


async def test_a_live_stream_sends_a_childs_steps_while_its_parent_waits_for_it() -> None:
    """One turn for every stream of the process (the child's pages take it apart from the
    parent's, never inside it)."""
    agents, _ = nested_team()
    loop = team_loop(agents, Team({"planner": ["ask_critic"]}))
    await loop.submit(QueryMessage(request_id="q", text="plan", agent="planner"))
    pending = take(loop)
    for _ in range(3):  # the query; the planner's turn; its call, which starts the child
        pending = await deliver_all(loop, pending)
    store = loop.deps.store
    planner = await store.runs.get_run(run_id_for_request("q"))
    assert planner is not None
    critic_id = child_run_id(planner, FIRST_CALL)

    received: list[Event] = []
    arrived = asyncio.Event()

    async def listen() -> None:
        async for event in run_events(store, planner.run_id, None, poll_seconds=0.01,
                                      max_seconds=60, turns=asyncio.Semaphore(1)):
            if event is not None:
                received.append(event)
                arrived.set()

    async def until(seen: Any) -> None:
        while not seen():
            arrived.clear()
            await asyncio.wait_for(arrived.wait(), timeout=10)

    def steps_of(run_id: str) -> list[str]:
        return [e.step.key for e in received if isinstance(e, StepEvent) and e.run_id == run_id]

    listener = asyncio.create_task(listen())
    try:
        await until(lambda: steps_of(planner.run_id) == ["0000-model"])
        (child_step,) = pending  # the child's first model step: it answers, and so ends
        follow_ups = await deliver_all(loop, [child_step])
        await until(lambda: steps_of(critic_id) == ["0000-model"])
        # Sent while the parent still waits for the child's end (not delivered yet).
        parent = await store.runs.get_run(planner.run_id)
        assert parent is not None and parent.status is RunStatus.RUNNING
        assert steps_of(planner.run_id) == ["0000-model"]

        while follow_ups := [m for m in follow_ups
                             if m.topic != loop.deps.settings.answers_topic]:
            follow_ups = await deliver_all(loop, follow_ups)
        await asyncio.wait_for(listener, timeout=10)
    finally:
        listener.cancel()
    assert isinstance(received[-1], FinishedEvent)
    assert steps_of(planner.run_id) == ["0000-model", FIRST_CALL, "0001-model"]
    assert steps_of(critic_id) == ["0000-model"]  # once, though the stream polled it again


async def test_a_long_child_run_is_read_a_page_at_a_time() -> None:
    """A child of 41 steps under a parent waiting for it: the stream reads both a page at a
    time, each step once, and sends the child's steps before the parent's step that waited."""
    db = PageCounting()
    store = AgentStore(db)
    parent = stored_run(store, "run-parent")
    child_id = child_run_id(parent, FIRST_CALL)
    waiting = Waiting(kind="event", event=event_name(FIRST_CALL), tool="ask_helper", since=1.0,
                      deadline=9e9)
    await put(db, store, parent, [
        stored_step(StepKey.model(0), announces=[StepKey.tool(0, 0)]),
        stored_step(StepKey.tool(0, 0), waiting=waiting),
        stored_step(StepKey.model(1))])
    child = stored_run(store, child_id, parent=parent)
    child_keys = [StepKey.model(t) if i == 0 else StepKey.tool(t, 0)
                  for t in range(21) for i in range(2)][:41]
    await put(db, store, child, [
        stored_step(k, announces=[StepKey.tool(k.turn, 0)]
                    if k.kind == "model" and k.turn < 20 else ()) for k in child_keys])

    events = [e async for e in run_events(store, parent.run_id, None, poll_seconds=0.01,
                                          max_seconds=10, page_size=10)]
    sent = [(e.run_id, e.step.key) for e in events if isinstance(e, StepEvent)]
    assert sent == [(parent.run_id, "0000-model"), *((child_id, str(k)) for k in child_keys),
                    (parent.run_id, FIRST_CALL), (parent.run_id, "0001-model")]
    assert max(db.pages) <= 10
    assert sum(db.pages[i] for i, c in enumerate(db.collections) if child_id in c) == 41


class PageCounting(MemoryDocumentDB):
    def __init__(self) -> None:
        super().__init__()
        self.pages: list[int] = []
        self.collections: list[str] = []

    async def list_range(self, collection: str, start_id: str, end_id: str,
                         limit: int | None = None) -> Any:
        found = await super().list_range(collection, start_id, end_id, limit)
        self.pages.append(len(found))
        self.collections.append(collection)
        return found


def stored_run(store: AgentStore, run_id: str, parent: RunRecord | None = None) -> RunRecord:
    return RunRecord(
        run_id=run_id, request_id=run_id, request_hash="h", conversation_id=run_id,
        agent="helper" if parent else "lead", text="t", model="m", created_at=0.0,
        status=RunStatus.COMPLETED, limits=RunLimits(max_steps=100, max_seconds=60,
                                                     max_tool_calls=100),
        parent_run_id=parent.run_id if parent else None,
        parent_step=FIRST_CALL if parent else None, depth=1 if parent else 0)


def stored_step(key: StepKey, *, announces: Any = (), waiting: Waiting | None = None
                ) -> StepRecord:
    return StepRecord(key=str(key), kind=key.kind, name="model" if key.kind == "model"
                      else "tool", turn=key.turn, index=key.index, status=StepStatus.COMPLETED,
                      outbox=[Outgoing(topic="tool_steps", data={}, target_step=str(t))
                              for t in announces], waiting=waiting)


async def put(db: MemoryDocumentDB, store: AgentStore, run: RunRecord,
              steps: list[StepRecord]) -> None:
    await db.create(store.run_path(run.run_id), run.to_doc())
    for step in steps:
        await db.create(store.step_path(run.run_id, step.key), step.to_doc())

