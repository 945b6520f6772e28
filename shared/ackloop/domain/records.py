"""What ackloop stores in Firestore, one Pydantic model per document kind.

Layout (see docs/concepts/firestore-layout.md):

- ``runs/{run_id}``: :class:`RunRecord`, written when the run starts and when it ends.
- ``runs/{run_id}/steps/{step_key}``: :class:`StepRecord`, one per step; its lease fences
  concurrent deliveries and its outbox holds the messages the step must send.
- ``runs/{run_id}/deltas/{step}-{attempt}-{seq}``: :class:`ackloop.store.deltas.DeltaRecord`, a
piece
  of a streamed model call's text, written while the call runs (not a record of the step).
- ``conversations/{conversation_id}``: :class:`ConversationRecord`, which run is active (none
  while the conversation's first run, whose id it bears, is its only run).
- ``conversations/{conversation_id}/transcript/{chunk}``: :class:`TranscriptChunk`, the
  conversation as Gemini contents, split in chunks so it can outgrow a 1 MiB document.
- ``poison/{message_id}`` and ``dead_letters/{message_id}``: messages that could not be used.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ackloop.domain.context_window import summary_content
from ackloop.domain.cost import Cost
from ackloop.domain.jsondict import JsonDict, SharedJsonDict
from ackloop.domain.wire import RunOutcome, Usage

ANONYMOUS = "anonymous"
"""The caller of a query published to the topic, or of the HTTP API when it checks no one."""


class RunStatus(StrEnum):
    QUEUED = "queued"
    """Waiting for the conversation's active run to end; the commit that ends it starts this."""
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self not in (RunStatus.RUNNING, RunStatus.QUEUED)


class StopReason(StrEnum):
    ANSWERED = "answered"
    FINAL_TOOL = "final_tool"
    MAX_STEPS = "max_steps"
    MAX_SECONDS = "max_seconds"
    MAX_TOOL_CALLS = "max_tool_calls"
    MAX_TOKENS = "max_tokens"
    CANCELLED = "cancelled"
    FAILED = "failed"

    @property
    def budget(self) -> bool:
        """A budget ran out: the run is ``completed`` but was stopped, with no answer."""
        return self in _BUDGET_STOPS


_BUDGET_STOPS = frozenset({StopReason.MAX_STEPS, StopReason.MAX_SECONDS,
                           StopReason.MAX_TOOL_CALLS, StopReason.MAX_TOKENS})


class Record(BaseModel):
    model_config = ConfigDict(extra="ignore")

    def to_doc(self) -> JsonDict:
        return self.model_dump(mode="json")


class RunLimits(Record):
    max_steps: int
    max_seconds: float
    max_tool_calls: int
    max_tokens: int | None = None
    approval_timeout_seconds: float | None = None
    priority: int = Field(default=0, exclude_if=lambda v: v == 0)
    """The run's priority (the query's ``options.priority``): where its model calls waiting
    for their places under a quota stand in line (a higher one first)."""
    tenant: str | None = Field(default=None, exclude_if=lambda v: v is None)
    """Who the run is asked for (the query's ``options.tenant``): what concurrency limits keyed
    by tenant count; a child run's is its parent's."""


DEADLINE = "deadline"
"""Who decided a step whose deadline passed with no decision."""
CLOCK = "clock"
"""Who resolves a call that slept, when its time comes (its deadline is its wake time: a
wake is never too late)."""


class ReceivedEvent(Record):
    """A named event delivered to a run: what it carried, who sent it and when.

    The run document keeps one per name without its payload (``digest`` set): the payload is
    in ``runs/{run_id}/events/{name}``, so no number or size of events can grow the run past
    what Firestore stores in one document, and the run can always be ended."""

    payload: JsonDict = Field(default_factory=dict)
    by: str
    """The caller who sent it, or ``pubsub`` for one published to the queries topic."""
    at: float
    id: str | None = None
    """The sender's id for it: the same event sent again is recognised by it (and its
    payload), a different one under the same name is refused."""
    digest: str | None = None
    """On the run document: the SHA-256 of the payload (its canonical JSON), which is kept
    apart; None where the payload is here."""


class RunRecord(Record, RunOutcome):
    """A run's document. How it ended is its :class:`RunOutcome` (declared there), here with
    the status and the stop reason as their enums."""

    run_id: str
    request_id: str
    request_hash: str
    conversation_id: str
    agent: str
    text: str
    model: str
    files: list[JsonDict] = Field(default_factory=list, exclude_if=lambda v: not v)
    """The query's files as the transcript names them: Gemini ``file_data`` parts (a stored
    file's ``gs://`` URI, or the caller's URI), never their bytes (:mod:`ackloop.files`); left
    out of the document when the query had none."""
    new_conversation: bool = False
    """The run started its own conversation (its id is the conversation's): nothing is in the
    transcript before its first step, and the conversation has no document while this run is
    its only run, so the run's end neither reads nor writes one
    (:meth:`ackloop.store.Runs.create_run`; a follow-up naming a run that does not exist
    yet waits for it, so none is in the conversation before the run)."""
    conversation_document: bool = False
    """Set on a run that started its own conversation when that conversation got a document
    while the run was active (a follow-up joined, or a redrive reopened the run): the run's
    end then reads the document and updates it. The follow-up sets it in the commit that
    creates the document, fenced on the version of this run it read, so a run's end fenced on
    an older version is refused and reads again."""
    status: RunStatus = RunStatus.RUNNING
    stop_reason: StopReason | None = None
    created_at: float
    started_at: float | None = None
    progress_at: float | None = None
    """When the run last moved: written with every model step's commit (the sweeper's clock)."""
    finished_at: float | None = None
    limits: RunLimits
    cancel_requested: bool = False
    steps_total: int = 0
    ingest_cost: Cost | None = None
    """What creating the run spent (the query's delivery), written with the run."""
    cost: Cost | None = None
    """The run's cost so far: its ingest's, then rolled up by each model step's commit (with
    the previous turn's tool steps), and its total once ended."""
    output_schema: JsonDict | None = None
    owner: str = ANONYMOUS
    """The caller who asked for the run: only they read it, stream it or cancel it."""
    waited_seconds: float = 0.0
    """Time the run spent waiting (for people, events, its time to wake, and the part of its
    waits for children that their clocks did not count), which its ``max_seconds`` does not
    count."""
    wait_ended_at: float = 0.0
    """When the last decision was recorded (overlapping waits are counted once)."""
    wait_turn: int | None = None
    """The turn whose waiting call last set ``progress_at``: another call of that turn that
    starts waiting keeps the earlier of the two times the sweeper should look."""
    received: dict[str, ReceivedEvent] = Field(default_factory=dict)
    """The named events delivered to the run (``POST /runs/{id}/events/{name}`` or the queries
    topic), by name: each name once per run. A call that waits for one finds it here when it
    arrived first (:mod:`ackloop.engine.waits`)."""
    trace_id: str | None = None
    """The run's trace (32 lowercase hex): the caller's when the query carried a trace context,
    else derived from the run id (:mod:`ackloop.telemetry.tracing`); a child run's is its
    parent's, so a tree of runs is one trace."""
    handed_to: str | None = None
    """The agent a hand-off gave the conversation to, when the run ended in its turn: the
    conversation's next runs are that agent's."""
    parent_run_id: str | None = None
    """A child run (:mod:`ackloop.engine.children`): the run whose call started it."""
    parent_step: str | None = None
    """A child run: the key of the parent's tool step that waits for it."""
    children_ending: list[str] = Field(default_factory=list, exclude_if=lambda v: not v)
    """A run ended outside a step while children of its calls still worked (then cancelled):
    their run ids. Each one's end adds its figures to this run's usage and cost
    (:meth:`Runs.count_late_child`); until the last has, the run's end is not final
    and its caller does not take it."""
    depth: int = 0
    """How many runs up the tree this one is started from (0: a caller's run)."""
    lineage: list[str] = Field(default_factory=list)
    """The agents of the runs above this one, the top one first: a call of one of them, or of
    this run's own agent, is a cycle and is refused."""

    @property
    def budget_stop(self) -> str | None:
        """The budget that stopped the run (``max_steps``...), or None if none did."""
        return self.stop_reason.value if self.stop_reason and self.stop_reason.budget else None

    def seconds(self, now: float) -> float:
        """How long the run took: from its creation to its end (to ``now`` while it has not
        ended). The one duration every report of a run gives (the chat's and ``ask``'s last
        line, ``runs show``, the line its end logs)."""
        end = self.finished_at if self.finished_at is not None else now
        return max(end - self.created_at, 0.0)


class ConversationRecord(Record):
    """``conversations/{conversation_id}``. A conversation started by a run (its id is that
    run's) has no document while that run is its only run, before and after that run ends:
    the first follow-up creates it (:meth:`ackloop.store.Runs.get_conversation` reads
    the run in its place until then)."""

    conversation_id: str
    active_run_id: str | None = None
    queue: list[str] = Field(default_factory=list)
    """Runs waiting for this conversation, oldest first (the end of the active run starts the
    first of them)."""
    run_count: int = 0
    updated_at: float = 0.0
    usage: Usage = Usage()
    cost: Cost | None = None
    """The ended runs' usage and cost, added by the commit that ends each run."""
    owner: str = ANONYMOUS
    """The caller whose run created the conversation: only their runs may continue it."""
    agent: str | None = None
    """The agent a hand-off gave the conversation to (its last run's ``handed_to``): a run
    that continues it without naming an agent is that agent's. None: no hand-off yet."""


class StepStatus(StrEnum):
    RUNNING = "running"
    COMPLETED = "completed"
    WAITING = "waiting"
    """A tool step waiting for a person's decision or a named event: no lease, nothing runs or
    is redelivered until the decision (or the event) re-sends its message, or the sweeper does
    at the deadline."""


Topic = Literal["model_steps", "tool_steps", "answers", "queries"]


class Outgoing(Record):
    """A message a step must send once it has committed (its outbox entry)."""

    topic: Topic
    data: JsonDict
    target_step: str | None = None
    """Key of the step this message triggers, if any: a redelivery re-sends only messages
    whose target step was never claimed."""
    target_run: str | None = None
    """The run of ``target_step`` when it is not the sending step's run (the next queued run
    of the conversation)."""
    traceparent: str | None = None
    """The trace context the message is sent with (the sending step's span), kept so that a
    re-send after a crash has the same parent."""
    reads: str | None = None
    """What the target model step will read, so that it reads it in one round trip:
    ``{calls},{chunks},{conversation_id}`` (the previous turn's calls, the transcript's chunks).
    Sent as the ``reads`` attribute; a hint the step checks against what it reads, never
    trusted (:meth:`ackloop.store.Transcripts.model_step_inputs`)."""


CHILD_EVENT_PREFIX = "child."
"""A child run's end is named ``child.<its parent's step key>``: the engine's own names, which
no caller may send as an event."""

WaitKindName = str
"""The name of a kind of wait: each kind is a module of ``ackloop.engine.waits.kinds``, which
lists them (``approval``, ``event``, ``child``, ``time``)."""


class Waiting(Record):
    """What a waiting step waits for, before its deadline: an approval of its call, the named
    event ``event``, the end of its child run, or a time (:mod:`ackloop.engine.waits`): one of
    the kinds ``ackloop.engine.waits.kinds`` lists."""

    kind: WaitKindName = Field(default="approval", min_length=1, max_length=40,
                               pattern=r"^[a-z_]+$")
    event: str | None = None
    """The awaited event's name (``kind == "event"``); for a child, ``child.<step key>``."""
    tool: str
    args: JsonDict = Field(default_factory=dict)
    since: float
    deadline: float
    """Past it, the step is decided as rejected ("no decision before the deadline"), by the
    sweeper or by the first decision that comes too late; no later decision is accepted."""
    wake_at: float | None = None
    """When a call that sleeps (``kind == "time"``) runs: its wake is armed for then, and it
    is also its deadline (the sweeper finds it then if the wake is lost)."""
    clock_runs: bool = False
    """The run's clock runs while the call waits: a child run's work is its parent's time
    (``max_seconds``), while a person's decision or a named event is not counted
    (``RunRecord.waited_seconds``)."""

    @model_validator(mode="before")
    @classmethod
    def _child_waits_of_before(cls, data: Any) -> Any:
        """A child's wait was stored as kind ``event`` named ``child.<key>`` before it had a
        kind of its own: such a record, in flight across an upgrade, loads as a child wait
        (whose clock runs)."""
        if (isinstance(data, dict) and data.get("kind") == "event"
                and str(data.get("event") or "").startswith(CHILD_EVENT_PREFIX)):
            return {**data, "kind": "child", "clock_runs": True}
        return data


class StepDecision(Record):
    """What ended a step's wait, recorded once: the first one wins. A person approves or
    rejects an approval; an event's arrival is ``received``; the deadline or a cancel rejects
    either kind."""

    decision: Literal["approve", "reject", "received"]
    args: JsonDict | None = None
    """Edited arguments the tool runs with instead of the model's (approve only)."""
    payload: JsonDict | None = None
    """The awaited event's payload (``received`` only), which the tool reads."""
    comment: str | None = None
    by: str
    """The caller who decided (or sent the event), ``deadline`` when the sweeper decided at
    the deadline, ``cancel`` when the run's cancel did."""
    at: float


class StepRecord(Record):
    key: str
    kind: Literal["model", "tool"]
    name: str
    turn: int
    index: int = 0
    status: StepStatus = StepStatus.RUNNING
    fence: int = 1
    attempts: int = 1
    owner: str = ""
    lease_expires_at: float = 0.0
    not_before: float = 0.0
    message_id: str = ""
    """Pub/Sub message id of the delivery that holds (or last held) the lease."""
    created_at: float = 0.0
    started_at: float = 0.0
    completed_at: float | None = None
    call_seconds: float | None = None
    result: JsonDict | None = None
    outbox: list[Outgoing] = Field(default_factory=list)
    last_error: str | None = None
    usage: Usage = Usage()
    cost: Cost | None = None
    """What the delivery that completed the step spent (see :mod:`ackloop.engine.spend`)."""
    run_cost: Cost | None = None
    """A model step: the run's cost up to and including it (the previous model step's
    ``run_cost``, the previous turn's tool steps and this step). The run document is not
    written by a model step that does not end the run: its cost is carried here instead."""
    waiting: Waiting | None = None
    """Set when the step waited for a decision (kept once it has completed)."""
    wait_cost: Cost | None = None
    """What the delivery that recorded the wait spent: the step's ``cost`` adds it when the
    step completes, so the run's cost counts that delivery too."""
    decision: StepDecision | None = None
    unclaimed: bool = False
    """Its call started without a claim (:mod:`ackloop.engine.claims`): its document was
    created by the commit that recorded it, or, a streamed model call, by its claim at its
    first text. A duplicate delivery that overlapped it before then may have called too."""


class TranscriptChunk(Record):
    index: int
    contents: list[SharedJsonDict] = Field(default_factory=list)
    """What a chunk written whole holds (chunks are now appended to by ``turns``)."""
    turns: dict[str, list[SharedJsonDict]] = Field(default_factory=dict)
    """One entry a model step, keyed ``t{n:06d}`` in the order they were appended: an append
    sends only its own turn."""
    tail: str | None = None
    """``{run_id}/{step_key}`` of the step that appended last: checked by the next step."""
    size: int = 0
    summary: str | None = Field(default=None, exclude_if=lambda v: v is None)
    """A compaction's chunk (:mod:`ackloop.domain.context_window`): the summary of every turn before
    it. A
    model step reads the transcript from the last such chunk on."""
    kept: list[SharedJsonDict] = Field(default_factory=list, exclude_if=lambda v: not v)
    """A compaction's chunk: a copy of the turns it kept as they were (they are also where they
    were first appended; :attr:`entries`, the history, does not repeat them)."""
    compaction: JsonDict | None = Field(default=None, exclude_if=lambda v: v is None)
    """A compaction's chunk: the model step that made it (``by``: ``{run_id}/{step_key}``),
    what it summarized and kept (``summarized``, ``kept``: contents) and what its model call
    used and cost (``usage``, ``cost``)."""
    compacted_into: int | None = Field(default=None, exclude_if=lambda v: v is None)
    """Set on the last chunk when a compaction's chunk was created after it (its index): a
    model step that read the transcript up to this chunk reads that one too, so whatever it
    records lands after the compaction, and it counts a compaction its own earlier delivery
    made."""
    history_refreshed_at: float | None = Field(default=None, exclude_if=lambda v: v is None)
    """A compaction's chunk: when the chunks before it (which no model step reads again) were
    last given the conversation's retention horizon; a step appending a day or more later
    gives it to them again."""
    fence: str | None = None
    """``{run_id}@{time}`` of a run that ended outside a step while this was the last chunk
    (or a chunk it started): written so that a model step of that run still in flight, whose
    append is fenced on this chunk, cannot append after the run ended."""

    @property
    def entries(self) -> list[JsonDict]:
        """The chunk's contents, in order."""
        return [*self.contents, *(c for key in sorted(self.turns) for c in self.turns[key])]

    @property
    def view(self) -> list[JsonDict]:
        """What a model is sent of this chunk when the transcript is read from it: a
        compaction's summary and kept turns first, then the turns appended since."""
        if self.summary is None:
            return self.entries
        return [summary_content(self.summary), *self.kept, *self.entries]
