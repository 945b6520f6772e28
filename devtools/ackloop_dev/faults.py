"""Named crash points around a function process's dependencies, for tests that must kill a
process at an exact commit boundary. Nothing of it ships in the runtime: it wraps what it
needs (the store's commit, the model client, the agents' tools) from the outside.

A process started as ``python -m ackloop_dev.faults run`` (the local stack does so when
``ACKLOOP_FAULT_CRASH_AT`` is set) is ``ackloop run`` with its dependencies wrapped: it SIGKILLs
its process group the first time it reaches a point named in ``ACKLOOP_FAULT_CRASH_AT``
(comma-separated names from :data:`FAULT_POINTS`), after leaving a marker file in
``ACKLOOP_FAULT_MARKER_DIR`` so that the restarted process goes on.

- ``model:after_call``: the model answered, nothing is committed yet;
- ``tool:after_call``: the tool returned, nothing is committed yet;
- ``model:after_commit`` / ``tool:after_commit``: the step is committed, its outbox not sent;
- ``tool:after_child``: a sub-agent's call created its child run, and neither sent the child's
  first step nor recorded its wait (not among :data:`FAULT_POINTS`, the fault phase's: its
  workload calls no sub-agent; the chaos run's child-runs scenario kills there);
- ``schedule:after_claim``: a schedule's firing recorded itself (its run as the schedule's
  last, the schedule advanced) and has not started its run yet.
"""

from __future__ import annotations

import copy
import logging
import os
import signal
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

from ackloop.agents.agent import AgentRegistry
from ackloop.docdb.base import Version
from ackloop.domain.records import RunRecord
from ackloop.domain.schedules import ScheduleRecord
from ackloop.domain.wire import FunctionCall
from ackloop.engine.deps import Deps
from ackloop.model.base import (
    ModelClient,
    ModelRequest,
    ModelTurn,
    StreamingModelClient,
    TextSink,
)
from ackloop.store import (
    AgentStore,
    Basis,
    Claim,
    Committed,
    Composer,
    Decision,
    Runs,
    Schedules,
    Steps,
)
from ackloop.tools.base import ToolContext, ToolOutcome

log = logging.getLogger(__name__)

FAULT_POINTS = (
    "model:after_call",
    "model:after_commit",
    "tool:after_call",
    "tool:after_commit",
)
"""The points the chaos run's fault phase kills at."""
KNOWN_POINTS = (*FAULT_POINTS, "tool:after_child", "schedule:after_claim")


@dataclass
class FaultPoints:
    """Which points crash, and where the markers of points already crashed at are kept."""

    crash_at: frozenset[str] = frozenset()
    marker_dir: Path | None = None

    @classmethod
    def from_environment(cls) -> FaultPoints:
        names = os.environ.get("ACKLOOP_FAULT_CRASH_AT", "")
        points = frozenset(n.strip() for n in names.split(",") if n.strip())
        unknown = points - set(KNOWN_POINTS)
        if unknown:
            raise ValueError(f"unknown fault points {sorted(unknown)}; known: {KNOWN_POINTS}")
        marker = os.environ.get("ACKLOOP_FAULT_MARKER_DIR")
        return cls(points, Path(marker) if marker else None)

    def hit(self, name: str) -> None:
        if name not in self.crash_at:
            return
        if self.marker_dir is not None:
            marker = self.marker_dir / name.replace(":", "_")
            try:
                marker.open("x").close()
            except FileExistsError:
                return  # crashed here once already
        log.warning("fault point %s: killing this process group", name)
        # The whole group: a server's supervisor would otherwise respawn the worker in place,
        # and the test wants the instance gone, as a crash would leave it.
        os.killpg(os.getpgrp(), signal.SIGKILL)


class _CrashingRuns:
    """The runs room of a store, with ``tool:after_child`` reached once a child run is
    created; everything else is the room's own."""

    def __init__(self, runs: Runs, faults: FaultPoints) -> None:
        self._runs, self._faults = runs, faults

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runs, name)

    async def create_run(self, run: RunRecord, costed: Any = None, *,
                         continue_agent: bool = False) -> tuple[RunRecord, bool]:
        created = await self._runs.create_run(run, costed, continue_agent=continue_agent)
        if run.parent_run_id is not None and created[1]:
            self._faults.hit("tool:after_child")
        return created


class _CrashingSteps:
    """The steps room of a store, with ``<kind>:after_commit`` reached once a step's commit
    has landed."""

    def __init__(self, steps: Steps, faults: FaultPoints) -> None:
        self._steps, self._faults = steps, faults

    def __getattr__(self, name: str) -> Any:
        return getattr(self._steps, name)

    async def commit_step(self, claim: Claim, basis: Basis, decision: Decision, *,
                          now: float, compose: Composer) -> Committed:
        committed = await self._steps.commit_step(claim, basis, decision, now=now,
                                                  compose=compose)
        self._faults.hit(f"{claim.step.kind}:after_commit")
        return committed


class _CrashingSchedules:
    """The schedules room of a store, with ``schedule:after_claim`` reached once a firing is
    recorded (a write of an existing schedule whose last firing names the run it starts),
    before that run starts."""

    def __init__(self, schedules: Schedules, faults: FaultPoints) -> None:
        self._schedules, self._faults = schedules, faults

    def __getattr__(self, name: str) -> Any:
        return getattr(self._schedules, name)

    async def write(self, record: ScheduleRecord, version: Version | None, now: float
                    ) -> Version:
        written = await self._schedules.write(record, version, now)
        if version is not None and record.firings and (
                record.firings[-1].run_id is not None
                and record.firings[-1].run_id == record.last_run_id):
            self._faults.hit("schedule:after_claim")
        return written


def crashing_store(store: AgentStore, faults: FaultPoints) -> AgentStore:
    """A port onto ``store``'s rooms (its database, its paths), whose runs and steps rooms
    reach ``faults``' points: the rooms are wrapped, the store is not changed."""
    port = copy.copy(store)
    port.runs = cast(Runs, _CrashingRuns(store.runs, faults))
    port.steps = cast(Steps, _CrashingSteps(store.steps, faults))
    port.schedules = cast(Schedules, _CrashingSchedules(store.schedules, faults))
    return port


class _CrashingModel:
    """The model client, with ``model:after_call`` reached once it has answered."""

    def __init__(self, model: ModelClient, faults: FaultPoints) -> None:
        self._model, self._faults = model, faults

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    async def generate(self, request: ModelRequest) -> ModelTurn:
        turn = await self._model.generate(request)
        self._faults.hit("model:after_call")
        return turn


class _CrashingStreamingModel(_CrashingModel):
    """The same, for a model client that streams (the engine asks which kind it has)."""

    async def generate_streaming(self, request: ModelRequest, on_text: TextSink) -> ModelTurn:
        assert isinstance(self._model, StreamingModelClient)
        turn = await self._model.generate_streaming(request, on_text)
        self._faults.hit("model:after_call")
        return turn


class _CrashingTools:
    """An agent's tools, with ``tool:after_call`` reached once a call has returned."""

    def __init__(self, tools: Any, faults: FaultPoints) -> None:
        self._tools, self._faults = tools, faults

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tools, name)

    async def execute(self, call: FunctionCall, context: ToolContext) -> ToolOutcome:
        outcome: ToolOutcome = await self._tools.execute(call, context)
        self._faults.hit("tool:after_call")
        return outcome


class _CrashingAgents(AgentRegistry):
    def __init__(self, agents: AgentRegistry, faults: FaultPoints) -> None:
        super().__init__()
        for agent in agents:
            wrapped = copy.copy(agent)
            wrapped.tools = _CrashingTools(agent.tools, faults)
            self.add(wrapped)


def with_faults(deps: Deps, faults: FaultPoints) -> Deps:
    """``deps`` whose store, model and tools reach ``faults``' points (the same deps when none
    is named)."""
    if not faults.crash_at:
        return deps
    store = crashing_store(deps.store, faults)
    wrapper = (_CrashingStreamingModel if isinstance(deps.model, StreamingModelClient)
               else _CrashingModel)
    model: Any = wrapper(deps.model, faults)
    return replace(deps, store=store, model=model, agents=_CrashingAgents(deps.agents, faults))


def _install() -> None:
    """Make this process's dependencies reach the points the environment names."""
    from ackloop.hosting import runtime

    build = runtime.build_deps
    faults = FaultPoints.from_environment()

    async def build_with_faults(settings: Any) -> Deps:
        return with_faults(await build(settings), faults)

    runtime.build_deps = build_with_faults


def main() -> None:
    """``python -m ackloop_dev.faults run``: ``ackloop run`` with the crash points installed."""
    _install()
    from ackloop.cli.main import app

    app(args=sys.argv[1:], prog_name="ackloop")


if __name__ == "__main__":
    main()

