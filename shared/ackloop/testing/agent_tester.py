"""Run agents through the real engine in one process, for a user's own tests.

The handlers are the deployed functions' (ingest, model step, tool step), fed by an in-memory
publisher, on the in-memory twin of the Firestore store: every check, claim, commit and budget
is the one a deployment runs. Only the model is scripted, unless a test passes a real one::

    result = await run_agent(support, "Where is order A-1234?")
    assert result.answer == "Order A-1234 has shipped."
    assert [c.name for c in result.tool_calls] == ["lookup_order"]
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from ackloop.agents.agent import Agent, AgentRegistry, with_reached
from ackloop.agents.scripts import CatalogScript
from ackloop.bus.memory import MemoryPublisher
from ackloop.bus.wakes import MemoryWaker
from ackloop.config.settings import Settings
from ackloop.docdb.counting import CountingDocumentDB
from ackloop.docdb.memory import MemoryDocumentDB
from ackloop.domain.clock import ShiftedClock
from ackloop.domain.jsondict import JsonDict
from ackloop.domain.keys import run_id_for_request
from ackloop.domain.records import RunRecord, StepRecord
from ackloop.domain.wire import FilePart, QueryMessage, RunOptions, RunOutcome
from ackloop.engine.deps import Deps
from ackloop.files.local import file_part
from ackloop.model.base import ModelClient
from ackloop.model.final_answer_script import with_final_answer
from ackloop.model.scripted import Script, ScriptedModel
from ackloop.store import AgentStore
from ackloop.testing.inprocess import InProcessLoop

STOPPED = "stopped"
""":attr:`AgentResult.status` of a run a budget stopped before it answered."""


@dataclass(frozen=True)
class ToolCall:
    """One tool call the run made: what the model asked for and what the tool answered."""

    name: str
    args: JsonDict
    response: JsonDict
    """``{"result": ...}``, or ``{"error": "..."}`` when the tool failed."""

    @property
    def result(self) -> Any:
        return self.response.get("result")

    @property
    def error(self) -> str | None:
        value = self.response.get("error")
        return None if value is None else str(value)


@dataclass(frozen=True)
class Step:
    """One recorded step: ``key`` (``0001-tool-000``), ``kind``, ``name``, ``attempts``."""

    key: str
    kind: str
    name: str
    status: str
    attempts: int
    result: JsonDict | None


class _ResultHead(BaseModel):
    run_id: str
    conversation_id: str
    agent: str


class AgentResult(RunOutcome, _ResultHead):
    """How a run ended, as its record says (its :class:`~ackloop.domain.wire.RunOutcome`: ``status``
    is ``completed``, ``failed``, ``cancelled``...; ``stop_reason`` is ``answered``,
    ``final_tool``, ``max_steps``, ``max_tool_calls``, ``failed``...), with the calls and steps
    that led there. A run a budget stopped before it answered is ``stopped``, not
    ``completed``, as the CLI says it ("stopped by its max_steps budget: no answer"), and
    ``budget_stop`` names the budget, as the API's field does."""

    model_config = ConfigDict(frozen=True)

    budget_stop: str | None = None
    """The budget that stopped the run (``max_steps``, ``max_seconds``, ``max_tool_calls``,
    ``max_tokens``), or None if none did."""

    tool_calls: list[ToolCall]
    steps: list[Step]


class AgentTester:
    """The engine in-process for some agents; ask them questions with :meth:`ask`.

    ``model`` is a script (``FunctionModel``, ``ScriptedTurns``, ``TestModel``) playing every
    agent, or any model client; None plays each agent with its own ``script`` (``TestModel()``
    when it has none), as the offline local stack does. ``settings`` defaults to the shipped
    ones (budgets, timeouts). A call that sleeps does not hold a test up: the tester's clock
    (``deps.clock``) moves on to its time. One tester keeps its runs and conversations in memory, so
    questions can continue a conversation (``conversation_id=result.conversation_id``).
    """

    __test__ = False  # not a pytest test class, whatever module imports it

    def __init__(
        self,
        agents: Agent | Sequence[Agent],
        *,
        model: Script | ModelClient | None = None,
        settings: Settings | None = None,
    ) -> None:
        catalog = [agents] if isinstance(agents, Agent) else list(agents)
        if not catalog:
            raise ValueError("AgentTester needs at least one agent")
        # The sub-agents and hand-off targets the agents' tools name are registered with them.
        self.agents = AgentRegistry(with_reached(catalog))
        self.model: ModelClient = _model(model, self.agents)
        publisher = MemoryPublisher()
        self.deps = Deps(
            settings=settings or Settings(),
            store=AgentStore(CountingDocumentDB(MemoryDocumentDB())),  # what steps cost
            publisher=publisher,
            model=self.model,
            agents=self.agents,
            clock=ShiftedClock(),
            owner="ackloop-testing",
            waker=MemoryWaker(),
        )
        self.loop = InProcessLoop(self.deps, publisher)

    async def ask(
        self,
        question: str,
        *,
        agent: str = "default",
        conversation_id: str | None = None,
        options: RunOptions | None = None,
        files: Sequence[str | Path | FilePart] = (),
        max_deliveries: int = 2000,
    ) -> AgentResult:
        """Ask ``agent`` (default: the first agent) and run the loop until nothing is left.
        ``files`` go with the question, as ``ackloop ask --file`` sends them: a local path
        (its bytes inline, its type from its extension), a ``gs://`` or ``https://`` URI, or a
        :class:`~ackloop.domain.wire.FilePart`; they are checked and stored as a deployment
        does (a refused one raises ``ValueError`` with the reason)."""
        # An unknown or internal name fails here, with the names a query may give.
        self.agents.for_query(agent)
        request_id = f"test-{uuid.uuid4().hex}"
        parts = [f if isinstance(f, FilePart) else file_part(f) for f in files]
        await self.loop.submit(QueryMessage(
            request_id=request_id, text=question, agent=agent, conversation_id=conversation_id,
            options=options or RunOptions(), files=parts))
        # A call that sleeps is woken at once: the tester's clock moves to its time.
        await self.loop.run_until_idle(max_deliveries=max_deliveries, wake=True)
        run = await self.deps.store.runs.get_run(run_id_for_request(request_id))
        if run is None:
            refused = self.loop.deliveries("query")[-1].outcome.body
            raise ValueError(f"the question started no run: {refused}")
        return _result(run, await self.deps.store.steps.list_steps(run.run_id))


async def run_agent(
    agent: Agent,
    question: str,
    *,
    model: Script | ModelClient | None = None,
    settings: Settings | None = None,
    options: RunOptions | None = None,
) -> AgentResult:
    """Ask ``agent`` one question through the engine in-process (see :class:`AgentTester`). An
    internal agent is asked as if a query could name it: this tries it on its own, as its
    callers' child runs would."""
    if agent.internal:
        agent = copy.copy(agent)
        agent.internal = False
    tester = AgentTester(agent, model=model, settings=settings)
    return await tester.ask(question, agent=agent.name, options=options)


def _model(model: Script | ModelClient | None, agents: AgentRegistry) -> ModelClient:
    if model is None:
        return ScriptedModel(CatalogScript(agents))
    if callable(getattr(model, "generate", None)):
        return model  # type: ignore[return-value]
    if callable(model):
        return ScriptedModel(with_final_answer(model))
    raise TypeError("model must be a script (FunctionModel, ScriptedTurns, TestModel) or a "
                    f"model client, got {type(model).__name__}")


def _result(run: RunRecord, records: list[StepRecord]) -> AgentResult:
    ordered = sorted(records, key=lambda s: s.key)
    asked = {s.turn: (s.result or {}).get("calls") or [] for s in ordered if s.kind == "model"}
    calls: list[ToolCall] = []
    for step in ordered:
        if step.kind != "tool":
            continue
        wanted = asked.get(step.turn, [])
        call = wanted[step.index] if step.index < len(wanted) else {}
        calls.append(ToolCall(name=step.name, args=dict(call.get("args") or {}),
                              response=dict((step.result or {}).get("response") or {})))
    outcome = run.outcome()
    if run.budget_stop is not None:  # no answer: not to be taken for a completed run
        outcome["status"] = STOPPED
    return AgentResult(
        run_id=run.run_id,
        conversation_id=run.conversation_id,
        agent=run.agent,
        budget_stop=run.budget_stop,
        **outcome,
        tool_calls=calls,
        steps=[Step(key=s.key, kind=s.kind, name=s.name, status=s.status.value,
                    attempts=s.attempts, result=s.result) for s in ordered],
    )
