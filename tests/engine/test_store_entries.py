"""How many times a model step's delivery enters the store (calls the engine makes on the rooms
of :class:`~ackloop.store.AgentStore`, whichever room), from the push to the commit: at most 4,
whether the step claims or runs unclaimed, with its message's ``reads`` hint or without, on a
run's first turn or a follow-up's."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
from collections.abc import Callable
from typing import Any, Literal

import pytest

import ackloop.engine.dispatch as dispatch_module
from ackloop.agents.agent import AgentRegistry
from ackloop.agents.scripts import CatalogScript
from ackloop.bus.memory import MemoryPublisher
from ackloop.config.settings import Settings
from ackloop.docdb.counting import CountingDocumentDB
from ackloop.docdb.memory import MemoryDocumentDB
from ackloop.domain.clock import ManualClock
from ackloop.domain.wire import QueryMessage, RunOptions
from ackloop.engine.deps import Deps
from ackloop.model.scripted import ScriptedModel
from ackloop.store import AgentStore, StoreBase
from ackloop.testing.inprocess import InProcessLoop
from ackloop_dev.bench.step_agents import AGENT, agents

Entries = list[tuple[int, list[str]]]


def _count_entries(monkeypatch: pytest.MonkeyPatch, hinted: bool) -> Entries:
    """Record, for each model step delivery, the store methods the engine called, as
    ``room.method`` (a call the store makes on itself is not an entry)."""
    found: Entries = []
    current: list[list[str]] = []
    inside = [0]

    def wrapped(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        async def entry(*args: Any, **kwargs: Any) -> Any:
            if current and not inside[0]:
                current[-1].append(name)
            inside[0] += 1
            try:
                return await fn(*args, **kwargs)
            finally:
                inside[0] -= 1
        return entry

    # The port's own methods and every room's, by the attribute the port holds it as.
    port = AgentStore(MemoryDocumentDB())
    rooms = {"": AgentStore} | {name: type(room) for name, room in vars(port).items()
                                if isinstance(room, StoreBase)}
    assert set(rooms) == {"", "runs", "steps", "transcript", "waits", "letters", "evals",
                          "schedules", "quotas"}
    for room, cls in rooms.items():
        for name, fn in inspect.getmembers(cls, inspect.iscoroutinefunction):
            if not name.startswith("_"):
                monkeypatch.setattr(cls, name, wrapped(f"{room}.{name}".lstrip("."), fn))
    handle = dispatch_module._handle

    async def counted(deps: Deps, kind: Any, delivery: Any) -> Any:
        if kind != "model":
            return await handle(deps, kind, delivery)
        if not hinted:
            delivery = dataclasses.replace(delivery, attributes={
                k: v for k, v in delivery.attributes.items() if k != "reads"})
        current.append([])
        try:
            return await handle(deps, kind, delivery)
        finally:
            found.append((json.loads(delivery.data)["turn"], current.pop()))

    monkeypatch.setattr(dispatch_module, "_handle", counted)
    return found


async def _two_runs(claims: Literal["auto", "always"]) -> InProcessLoop:
    publisher = MemoryPublisher()
    deps = Deps(settings=Settings(step_claims=claims),
                store=AgentStore(CountingDocumentDB(MemoryDocumentDB())), publisher=publisher,
                model=ScriptedModel(CatalogScript(agents())), agents=AgentRegistry(agents()),
                clock=ManualClock(), owner="test-owner")
    loop = InProcessLoop(deps, publisher)
    await loop.submit(QueryMessage(request_id="first", text="profile, calls=3", agent=AGENT,
                                   options=RunOptions(max_steps=4, max_tool_calls=3)))
    await loop.run_until_idle()
    run = await deps.store.runs.get_run(loop.answers[-1].run_id)
    assert run is not None
    await loop.submit(QueryMessage(request_id="follow-up", text="again, calls=1", agent=AGENT,
                                   conversation_id=run.conversation_id,
                                   options=RunOptions(max_steps=2, max_tool_calls=1)))
    await loop.run_until_idle()
    assert len(loop.answers) == 2
    return loop


@pytest.mark.parametrize("hinted", [True, False])
@pytest.mark.parametrize("claims", ["auto", "always"])
async def test_a_model_step_enters_the_store_at_most_four_times(
        monkeypatch: pytest.MonkeyPatch, claims: Literal["auto", "always"], hinted: bool) -> None:
    entries = _count_entries(monkeypatch, hinted)
    await _two_runs(claims)
    assert len(entries) == 6  # 4 model turns, then 2
    assert max(len(names) for _, names in entries) <= 4
    claim = ["steps.claim_step"] if claims == "always" else []
    first, later = entries[0][1], entries[1][1]
    assert first == ["steps.run_and_steps", *claim, "steps.commit_step"]
    read = (["transcript.model_step_inputs"] if hinted
            else ["steps.steps_in_range", "transcript.run_and_transcript"])
    assert later == [*read, *claim, "steps.commit_step"]
    # The follow-up's first step lists the conversation's chunks (no pointer names them).
    assert entries[4][1] == ["steps.run_and_steps", "transcript.load_transcript_view", *claim,
                             "steps.commit_step"]
