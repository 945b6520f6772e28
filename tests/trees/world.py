"""The engine a tree runs on: the in-memory store and publisher, a manual clock, one agent per
depth whose tools count their side effects, a scripted model that plays the plan and counts
its requests per step, and the crash points of ``ackloop_dev.faults`` armed by the scheduler.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field

from ackloop.agents.agent import Agent, AgentRegistry
from ackloop.bus.memory import MemoryPublisher
from ackloop.config.settings import Settings
from ackloop.docdb.counting import CountingDocumentDB
from ackloop.docdb.memory import MemoryDocumentDB
from ackloop.domain.clock import ManualClock
from ackloop.domain.errors import ModelRetryableError
from ackloop.domain.wire import Usage
from ackloop.engine.deps import Deps
from ackloop.model.base import ModelRequest, ModelTurn
from ackloop.model.turns import calls_turn, text_turn
from ackloop.store import AgentStore
from ackloop.testing.inprocess import InProcessLoop
from ackloop.tools import ToolSet, tool
from ackloop_dev.faults import FaultPoints, with_faults
from tests.trees.plan import GATED, MAX_DEPTH, PLAIN, RETRY_SAFE, WAITS, Plan, agent_name

APPROVAL_TIMEOUT = 600.0
EVENT_TIMEOUT = 900.0
SETTINGS = Settings(
    lease_seconds=10.0,
    approval_timeout_seconds=3_600.0,  # a child's call waits at most an hour
    max_agent_depth=MAX_DEPTH,
    default_max_steps=200,
    default_max_tool_calls=500,
    default_max_seconds=30 * 86_400.0,  # the clock jumps over deadlines: no budget stops a run
)


class SimulatedCrash(BaseException):
    """A process killed at a commit boundary: nothing in the engine catches a BaseException."""


class ArmedFaults(FaultPoints):
    """The crash points, armed one delivery at a time by the scheduler."""

    def __init__(self) -> None:
        super().__init__(frozenset({"model:after_call", "model:after_commit", "tool:after_call",
                                    "tool:after_commit", "tool:after_child"}))
        self.armed: str | None = None
        self.hits: list[str] = []

    def hit(self, name: str) -> None:
        if self.armed == name:
            self.armed = None
            self.hits.append(name)
            raise SimulatedCrash(name)


def _question(request: ModelRequest) -> str:
    return next(p["text"] for c in request.contents if c["role"] == "user"
                for p in c.get("parts", []) if "text" in p)


def _answered_once(request: ModelRequest) -> str | None:
    """Why the request's history does not answer each call of each turn exactly once."""
    contents = request.contents
    for i, content in enumerate(contents):
        asked = [p["function_call"]["name"] for p in content.get("parts", [])
                 if content["role"] == "model" and "function_call" in p]
        if not asked:
            continue
        following = contents[i + 1] if i + 1 < len(contents) else {"parts": []}
        answered = [p["function_response"]["name"] for p in following.get("parts", [])
                    if "function_response" in p]
        if sorted(answered) != sorted(asked):
            return f"turn at content {i} asked {asked}, answered {answered}"
    return None


@dataclass
class PlanModel:
    """Plays the plan: a run's turn *t* makes the plan's calls of turn *t*, then answers."""

    plan: Plan
    rng: random.Random
    failure_rate: float = 0.0
    provider: str = "scripted"
    answered: Counter[tuple[str, int]] = field(default_factory=Counter)
    """Model calls that answered, per step (question, turn): each is spend."""
    served: dict[tuple[str, int], Usage] = field(default_factory=dict)
    """What the model reported it used for each step's answer (the same request, the same
    figures): what the ledger is priced against, apart from what the steps recorded."""
    failed: Counter[tuple[str, int]] = field(default_factory=Counter)
    """Requests that failed as retryable (a 503 the delivery is released on)."""
    bad_histories: list[str] = field(default_factory=list)

    async def generate(self, request: ModelRequest) -> ModelTurn:
        question = _question(request)
        turn = sum(1 for c in request.contents if c["role"] == "model")
        if (why := _answered_once(request)) is not None:
            self.bad_histories.append(f"{question} turn {turn}: {why}")
        if self.rng.random() < self.failure_rate:
            self.failed[(question, turn)] += 1
            raise ModelRetryableError("the fake model is unavailable")
        self.answered[(question, turn)] += 1
        node = self.plan.nodes[question]
        if turn < len(node.turns):
            answer = calls_turn([(c.tool_name(node.depth), c.args()) for c in node.turns[turn]],
                                request=request)
        else:
            answer = text_turn(f"answer of {question}", request=request)
        self.served[(question, turn)] = answer.usage
        return answer


@dataclass
class Effects:
    """What each call's tool did, by the call's key: a side effect counted."""

    ran: Counter[str] = field(default_factory=Counter)

    def toolset(self) -> ToolSet:
        @tool(retry_safe=False)
        def effect(key: str) -> str:
            """A side effect that must not happen twice."""
            self.ran[key] += 1
            return f"did {key}"

        @tool
        def lookup(key: str) -> str:
            """A read, safe to repeat (after a kill past the call, it runs again)."""
            self.ran[key] += 1
            return f"found {key}"

        @tool(retry_safe=False, requires_approval=True,
              approval_timeout_seconds=APPROVAL_TIMEOUT)
        def gated(key: str) -> str:
            """A side effect a person approves first."""
            self.ran[key] += 1
            return f"paid {key}"

        @tool(retry_safe=False, waits_for=lambda args: str(args["name"]),
              event_timeout_seconds=EVENT_TIMEOUT)
        def waiter(key: str, name: str) -> str:
            """A side effect run when the event ``name`` comes."""
            self.ran[key] += 1
            return f"heard {name} for {key}"

        assert {t.name for t in (effect, lookup, gated, waiter)} == {
            PLAIN, RETRY_SAFE, GATED, WAITS}
        return ToolSet([effect, lookup, gated, waiter])


def agents(effects: Effects) -> list[Agent]:
    """One agent per depth; each but the deepest can ask the next one."""
    tools = effects.toolset()
    made: list[Agent] = []
    for depth in range(MAX_DEPTH, -1, -1):
        sub = [made[0].as_tool()] if made else []
        made.insert(0, Agent(agent_name(depth), f"Work at depth {depth}.", [tools, *sub]))
    return made


@dataclass
class World:
    plan: Plan
    loop: InProcessLoop
    model: PlanModel
    effects: Effects
    faults: ArmedFaults

    @property
    def deps(self) -> Deps:
        return self.loop.deps

    @property
    def clock(self) -> ManualClock:
        clock = self.loop.deps.clock
        assert isinstance(clock, ManualClock)
        return clock


def build(plan: Plan, rng: random.Random, failure_rate: float) -> World:
    effects = Effects()
    model = PlanModel(plan, random.Random(rng.random()), failure_rate)
    publisher = MemoryPublisher()
    faults = ArmedFaults()
    deps = Deps(settings=SETTINGS, store=AgentStore(CountingDocumentDB(MemoryDocumentDB())),
                publisher=publisher, model=model, agents=AgentRegistry(agents(effects)),
                clock=ManualClock(), owner="tree-owner")
    loop = InProcessLoop(with_faults(deps, faults), publisher)
    return World(plan, loop, model, effects, faults)


