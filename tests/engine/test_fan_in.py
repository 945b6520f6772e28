"""A turn's fan-in sends its next model step once: of the tool steps that end a turn together,
only the one whose commit came last publishes it, so the model step (which runs unclaimed on a
short prompt) calls the model once, whatever the timing of the calls that end the turn."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Any

import pytest

from ackloop.config.settings import Settings
from ackloop.domain.clock import SystemClock
from ackloop.domain.keys import run_id_for_request
from ackloop.domain.records import RunStatus
from ackloop.domain.wire import FunctionCall, QueryMessage
from ackloop.model.base import ModelRequest, ModelTurn
from ackloop.model.turns import calls_turn, text_turn
from ackloop.tools.base import ToolOutcome
from tests.engine.fakes import CountingToolbox, first_model_step, make_loop


class FanOutModel:
    """Asks for every tool at once on the first turn, then answers; counts its calls."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.calls = 0

    async def generate(self, request: ModelRequest) -> ModelTurn:
        self.calls += 1
        if not any(p.get("function_response") for c in request.contents
                   for p in c.get("parts") or []):
            return calls_turn([(f"tool{i}", {"key": str(i)}) for i in range(self.width)],
                              request=request)
        return text_turn("done", request=request)


class TogetherToolbox(CountingToolbox):
    """Tools that all return at the same moment, once every one of them has started."""

    def __init__(self, width: int) -> None:
        super().__init__({f"tool{i}": i for i in range(width)})
        self.started = 0
        self.all_started = asyncio.Event()

    async def execute(self, call: FunctionCall, context: Any) -> ToolOutcome:
        self.started += 1
        if self.started == len(self.results):
            self.all_started.set()
        await self.all_started.wait()
        return await super().execute(call, context)


class YieldingDB:
    """The in-memory document database, with every call yielding to the event loop first, as a
    network round trip does: concurrent deliveries interleave between their commit and their
    next read, as they do on Firestore."""

    def __init__(self, db: Any) -> None:
        self._db = db

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "_db":
            raise AttributeError(name)
        attr = getattr(self._db, name)
        if not asyncio.iscoroutinefunction(attr):
            return attr

        async def call(*args: Any, **kwargs: Any) -> Any:
            await asyncio.sleep(0)
            result = await attr(*args, **kwargs)
            await asyncio.sleep(0)
            return result
        return call


def _loop(model: FanOutModel, width: int) -> Any:
    loop = make_loop(model, TogetherToolbox(width), clock=SystemClock(),
                     settings=Settings(lease_seconds=10.0))
    return with_db(loop, YieldingDB(loop.deps.store.db))


def with_db(loop: Any, db: Any) -> Any:
    """``loop`` with its store, and each of the store's rooms, on ``db``."""
    store = loop.deps.store
    for room in (store, store.runs, store.steps, store.transcript, store.waits, store.letters,
                 store.evals, store.schedules):
        room.db = db
    return loop


def _model_steps(loop: Any, turn: int) -> list[dict[str, Any]]:
    return [m for kind, m in loop.queued() if kind == "model" and m.get("turn") == turn]


@pytest.mark.parametrize("width", [2, 3, 5])
async def test_siblings_ending_together_publish_the_next_model_step_once(width: int) -> None:
    model = FanOutModel(width)
    loop = _loop(model, width)
    kind, step = await first_model_step(loop, QueryMessage(request_id="fan", text="go"))
    await loop.deliver(kind, step)
    loop._collect()
    tools = list(loop._queue)
    loop._queue.clear()
    assert [k for k, _ in tools] == ["tool"] * width

    outcomes = await asyncio.gather(*(loop.deliver(k, m) for k, m in tools))
    assert all(o.acknowledged for o in outcomes)
    loop._collect()
    assert len(_model_steps(loop, 1)) == 1, loop.queued()

    await loop.run_until_idle(duplicate_every=False)
    run = await loop.deps.store.runs.get_run(run_id_for_request("fan"))
    assert run is not None and run.status is RunStatus.COMPLETED
    assert model.calls == run.usage.model_calls == 2


class TiedVersionsDB(YieldingDB):
    """:class:`YieldingDB` whose listed documents all carry one version, as siblings whose
    commits Firestore stamped with the same time do (the in-memory counter never ties). Once
    :meth:`together` is called, the next ``width`` listings wait for one another: each
    sibling lists its turn after its commit, so every sibling then reads every commit."""

    waiting: list[asyncio.Future[None]]

    def together(self, width: int) -> None:
        self.width, self.waiting = width, []

    async def list_range(self, *args: Any, **kwargs: Any) -> Any:
        if getattr(self, "width", 0) > len(self.waiting):
            self.waiting.append(asyncio.get_running_loop().create_future())
            if len(self.waiting) == self.width:
                for each in self.waiting:
                    each.set_result(None)
            await self.waiting[-1] if len(self.waiting) < self.width else None
        return [replace(snap, version=0) for snap in await self._db.list_range(*args, **kwargs)]


@pytest.mark.parametrize("width", [2, 3])
async def test_siblings_whose_commits_tie_publish_the_next_model_step_once(width: int) -> None:
    # The call index breaks the tie: one sibling, the last by index, publishes.
    model = FanOutModel(width)
    loop = _loop(model, width)
    db = TiedVersionsDB(loop.deps.store.db._db)
    with_db(loop, db)
    kind, step = await first_model_step(loop, QueryMessage(request_id="tie", text="go"))
    await loop.deliver(kind, step)
    loop._collect()
    tools = list(loop._queue)
    loop._queue.clear()
    db.together(width)  # every sibling reads the turn once all have committed

    await asyncio.gather(*(loop.deliver(k, m) for k, m in tools))
    loop._collect()
    assert len(_model_steps(loop, 1)) == 1, loop.queued()
    await loop.run_until_idle(duplicate_every=False)
    run = await loop.deps.store.runs.get_run(run_id_for_request("tie"))
    assert run is not None and run.status is RunStatus.COMPLETED
    assert model.calls == run.usage.model_calls == 2


async def test_a_redelivery_of_the_joining_sibling_sends_the_trigger_again() -> None:
    """The sibling whose commit came last is the one whose redelivery re-sends the next model
    step (its first delivery may have died before the send); the others' send nothing."""
    model = FanOutModel(2)
    loop = _loop(model, 2)
    kind, step = await first_model_step(loop, QueryMessage(request_id="again", text="go"))
    await loop.deliver(kind, step)
    loop._collect()
    tools = list(loop._queue)
    loop._queue.clear()
    await asyncio.gather(*(loop.deliver(k, m) for k, m in tools))
    loop._collect()
    loop._queue.clear()  # the trigger was lost with the delivery that sent it

    sent = []
    for k, m in tools:
        await loop.deliver(k, m)
        loop._collect()
        sent.append(len(_model_steps(loop, 1)))
        loop._queue.clear()
    assert sorted(sent) == [0, 1], sent
    index = json.loads(tools[sent.index(1)][1].data)["index"]
    steps = await loop.deps.store.steps.list_steps(run_id_for_request("again"))
    last = max((s for s in steps if s.kind == "tool"), key=lambda s: s.completed_at or 0)
    assert last.index == index
