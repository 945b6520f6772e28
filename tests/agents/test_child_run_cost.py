"""What a child run costs beyond the run it is, counted on the in-memory engine's
:class:`~ackloop.docdb.counting.CountingDocumentDB` and publisher (the same counters a
deployment's steps and the benchmark read), with the real dispatch, a manual clock, no sleeps.

Three runs, each alone in a fresh in-memory deployment, every message delivered in the order
it was published:

- (i) ``planner`` asks once and answers, its one call an ordinary tool (``@tool``, retry-safe
  as tools are by default: its step runs unclaimed);
- (ii) the same, its call a sub-agent's (``Agent.as_tool``) whose child answers in one model
  step: the parent's call creates the child, sends its first step and records its wait; the
  child's end reaches the parent (``ChildEndedMessage`` on the queries topic), which resolves
  the call on its step alone and carries it on in the same request: the call's step runs
  again there and completes;
- (iii) that child's agent asked the same question as a top-level run (ingest, one model step).

What a child adds is (ii) - (i) - (iii): the cost of a call that waits for a run instead of
running a function, less what starting a run from a query (ingest) costs. Measured (the
counters' own convention: a transaction's reads are round trips, its begin and commit are not,
and are counted in ``transactions``; ``requests`` adds two per transaction, as the benchmark
does; an attempted create is a written document even when it finds the document there):

==================  ====  =====  ======  ==========  =================
figure              (i)   (ii)   (iii)   child adds  adds vs. claimed
==================  ====  =====  ======  ==========  =================
round trips         7     22     3       12          11
transactions        0     0      0       0           0
requests            7     22     3       12          11
documents read      7     18     1       10          10
documents written   7     16     4       5           4
publish requests    4     7      2       1           1
messages published  4     7      2       1           1
deliveries          4     6      2       0           0
==================  ====  =====  ======  ==========  =================

("adds vs. claimed": against an ordinary tool that is not retry-safe, whose step claims its
document first as a sub-agent's call always does; that (i) is 8 round trips, 7 reads, 8
writes.) Where (ii) spends it, delivery by delivery (round trips / reads / writes):

- the parent's call (5 / 3 / 3, against 2 / 2 / 1 unclaimed): the step's claim is created, the
  child run is created (in place of ingest's commit of (iii); what it finds there tells a
  redelivery whether the child has ended already), its first step is sent, the waiting commit
  writes the step alone (never the parent's run document), and the child is read once more (an
  end that came between the two was sent back for redelivery: taken now rather than after
  Pub/Sub's backoff);
- the child's end, a ``ChildEndedMessage`` on the queries topic (10 / 9 / 4, no
  transaction): the child read; the call's step read (the one step that waits for this child:
  the read does not grow with the parent's length); the call resolved (the step and the run
  read in one batch, the step alone written, conditional on its version: the ends of parallel
  children share no document); the turn's model step read for the call's message, which is
  not sent but carried on in the same request (5 / 4 / 3, what its own delivery cost before):
  the claim's create finds the waiting step, reads it and takes it back (a commit), then the
  step completes (a commit) with the child's answer, which its decision carries. Carrying it
  on here saves a publish and a delivery per child (a Pub/Sub hop on the tree's path). Before
  the one wait, this delivery kept the end on the parent's run document as an event and
  decided the call there too (7 / 6 / 4): 3 writes per child on one document.

The child's own model step costs what (iii)'s does (2 / 1 / 3), its answer included: it is
published on the answers topic as any run's end.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

import pytest

from ackloop.agents.agent import Agent, AgentRegistry
from ackloop.bus.base import Message
from ackloop.bus.memory import MemoryPublisher, Published
from ackloop.config.settings import Settings
from ackloop.docdb.counting import CountingDocumentDB
from ackloop.docdb.memory import MemoryDocumentDB
from ackloop.domain.clock import ManualClock
from ackloop.domain.keys import run_id_for_request
from ackloop.domain.records import RunRecord, RunStatus
from ackloop.domain.wire import QueryMessage
from ackloop.engine.deps import Deps
from ackloop.engine.dispatch import Kind, Outcome
from ackloop.model.base import ModelRequest, ModelTurn
from ackloop.model.scripted import ScriptedModel
from ackloop.model.transcript import read_exchange
from ackloop.model.turns import calls_turn, text_turn
from ackloop.store import AgentStore
from ackloop.testing.inprocess import InProcessLoop
from ackloop.tools import tool

SETTINGS = Settings(lease_seconds=10.0)
QUESTION = "what is known about it?"
ANSWER = "researcher: it is well known"


class CountingPublisher(MemoryPublisher):
    """The in-memory publisher, also counting the messages the engine sent."""

    def __init__(self) -> None:
        super().__init__()
        self.sent = 0

    async def publish_many(self, topic: str, messages: Any) -> list[str]:
        batch: list[Message] = list(messages)
        self.sent += len(batch)
        return await super().publish_many(topic, batch)


@dataclass(frozen=True)
class Figures:
    round_trips: int
    transactions: int
    requests: int
    """Firestore requests: round trips, and a begin and a commit per transaction."""
    docs_read: int
    docs_written: int
    publish_requests: int
    messages_sent: int
    deliveries: int

    def __sub__(self, other: Figures) -> Figures:
        mine, theirs = asdict(self), asdict(other)
        return Figures(**{name: mine[name] - theirs[name] for name in mine})


def play(request: ModelRequest) -> ModelTurn:
    """``planner`` asks ``ask_researcher`` once, then answers with what it said; ``researcher``
    answers at once."""
    exchange = read_exchange(request.contents)
    if request.agent == "researcher":
        return text_turn(ANSWER, request=request)
    said = exchange.last_result("ask_researcher")
    if said is None:
        return calls_turn([("ask_researcher", {"question": QUESTION})], request=request)
    return text_turn(f"planner: {said.result}", request=request)


def researcher() -> Agent:
    return Agent("researcher", "Find facts.")


def ordinary_tool(retry_safe: bool = True) -> Agent:
    """The planner whose ``ask_researcher`` is an ordinary tool answering what the child would."""

    @tool("ask_researcher", retry_safe=retry_safe)
    def ask_researcher(question: str) -> str:
        """Ask the researcher."""
        return ANSWER

    return Agent("planner", "Plan.", [ask_researcher])


def sub_agent() -> Agent:
    return Agent("planner", "Plan.", [researcher().as_tool()])


class CountedLoop(InProcessLoop):
    """The in-process loop, keeping what each delivery cost: (kind, round trips, documents
    read, documents written)."""

    def __init__(self, deps: Deps, publisher: MemoryPublisher, db: CountingDocumentDB) -> None:
        super().__init__(deps, publisher)
        self.db = db
        self.costs: list[tuple[str, int, int, int]] = []

    async def deliver(self, kind: Kind, message: Published) -> Outcome:
        before = replace(self.db.counters)
        outcome = await super().deliver(kind, message)
        after = self.db.counters
        self.costs.append((kind, after.round_trips - before.round_trips,
                           after.docs_read - before.docs_read,
                           after.docs_written - before.docs_written))
        return outcome


@dataclass
class Measured:
    figures: Figures
    costs: list[tuple[str, int, int, int]]
    run: RunRecord
    store: AgentStore
    """The deployment's store, uncounted (the test's own reads)."""


async def measure(agents: list[Agent], agent: str) -> Measured:
    """Ask ``agent`` in a fresh in-memory deployment of ``agents``; what the whole run took
    (the query's publish, made by the caller, not counted)."""
    publisher = CountingPublisher()
    db = CountingDocumentDB(MemoryDocumentDB())
    deps = Deps(settings=SETTINGS, store=AgentStore(db), publisher=publisher,
                model=ScriptedModel(play), agents=AgentRegistry(agents), clock=ManualClock(),
                owner="test-owner")
    loop = CountedLoop(deps, publisher, db)
    await loop.submit(QueryMessage(request_id="q", text=QUESTION, agent=agent))
    await loop.run_until_idle()
    counters = db.counters
    figures = Figures(counters.round_trips, counters.transactions,
                      counters.round_trips + 2 * counters.transactions, counters.docs_read,
                      counters.docs_written, publisher.requests, publisher.sent, len(loop.log))
    store = AgentStore(db.inner)
    run = await store.runs.get_run(run_id_for_request("q"))
    assert run is not None and run.status is RunStatus.COMPLETED, run
    return Measured(figures, loop.costs, run, store)


@pytest.mark.parametrize(("retry_safe", "baseline", "adds"), [
    (True, Figures(7, 0, 7, 7, 7, 4, 4, 4), Figures(12, 0, 12, 10, 5, 1, 1, 0)),
    (False, Figures(8, 0, 8, 7, 8, 4, 4, 4), Figures(11, 0, 11, 10, 4, 1, 1, 0)),
])
async def test_what_a_child_run_adds_beyond_the_run_it_is(
        retry_safe: bool, baseline: Figures, adds: Figures) -> None:
    plain = await measure([ordinary_tool(retry_safe)], "planner")
    parent = await measure([sub_agent(), researcher()], "planner")
    alone = await measure([researcher()], "researcher")

    # The same answers every way: the difference is only how the call was run.
    assert plain.run.answer == parent.run.answer == f"planner: {ANSWER}"
    (child,) = [r for r in await parent.store.runs.recent_runs(limit=10)
                if r.parent_run_id == parent.run.run_id]
    assert (child.answer, child.usage) == (alone.run.answer, alone.run.usage)
    assert alone.run.usage.model_calls == 1

    print(f"\nretry_safe={retry_safe}\n  (i)   {plain.figures}\n  (ii)  {parent.figures}\n"
          f"  (iii) {alone.figures}\n  adds  {parent.figures - plain.figures - alone.figures}")
    assert plain.figures == baseline
    assert parent.figures == Figures(22, 0, 22, 18, 16, 7, 7, 6)
    assert alone.figures == Figures(3, 0, 3, 1, 4, 2, 2, 2)
    assert parent.figures - plain.figures - alone.figures == adds
    # Delivery by delivery, as the docstring tells it.
    assert parent.costs == [
        ("query", 1, 0, 1),   # the parent's ingest
        ("model", 2, 1, 2),   # the parent's turn: one call
        ("tool", 5, 3, 3),    # the call: its claim, the child, the wait (its step alone)
        ("model", 2, 1, 3),   # the child's one step: its answer and its end
        ("query", 10, 9, 4),  # the child's end: its call's step decided, taken, completed
        ("model", 2, 4, 3),   # the parent's answer
    ]
    assert alone.costs == [("query", 1, 0, 1), ("model", 2, 1, 3)]
    assert plain.costs[2] == (("tool", 2, 2, 1) if retry_safe else ("tool", 3, 2, 2))
