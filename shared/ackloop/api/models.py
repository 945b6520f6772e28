"""The HTTP API's request and response bodies: what the OpenAPI document shows.

Requests are strict (unknown fields are an error) and bounded: every string that reaches
Firestore is valid UTF-8 and every id matches :data:`ackloop.domain.wire.ID_PATTERN`, so nothing a
client sends can name a document path or make a write fail.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, JsonValue

from ackloop.domain.cost import Cost
from ackloop.domain.records import RunRecord, StepDecision, StepRecord, StepStatus
from ackloop.domain.wire import (
    ID_PATTERN,
    MAX_QUERY_CHARS,
    FilePart,
    RunOptions,
    RunOutcome,
    Usage,
    storable_text,
)
from ackloop.engine.quota import Waiting as QuotaWaiting
from ackloop.engine.spend import rolled_up, steps_usage
from ackloop.engine.waits.kinds import KINDS, kind_of

CURSOR_PATTERN = r"^(\d{4}-(model|tool-\d{3})|end)$"
"""A stream cursor: the key of the last step delivered, or ``end`` after the final event."""

RUN_COST = (
    "What the run spent (its ingest and every step: Gemini tokens, Firestore reads and writes, "
    "Pub/Sub bytes, Cloud Run request time) at the dated list prices of price_table. In "
    "flight: GET /runs/{run_id} sums what its steps have recorded so far; a list shows the "
    "run's ingest until the run ends."
)
STEP_COST = ("What the delivery that completed the step spent, up to its commit (null while "
             "the step runs).")

RUN_USAGE = (
    "What the run used: model calls, tool calls and tokens, its child runs' (its sub-agents' "
    "calls, each child's whole tree) included once each call has its result, and their part "
    "apart in `usage.children` (left out without any). Its budgets count them too. In flight: "
    "GET /runs/{run_id} sums what its steps have recorded so far."
)

CHILD_COST = ("What the child run spent (its own children's included): its total once it has "
              "ended; while it runs, what its record holds so far (its start).")

BUDGET_STOP = (
    "The budget that stopped the run (max_steps, max_seconds, max_tool_calls or max_tokens), "
    "or null. A run stopped by a budget has status `completed` but no answer."
)


QueryText = Annotated[
    str,
    Field(min_length=1, max_length=MAX_QUERY_CHARS, description="The user's question."),
    AfterValidator(storable_text),
]
Id = Annotated[str, Field(pattern=ID_PATTERN, max_length=128)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


Options = RunOptions
"""Per-run limits; anything left out takes the agent's or the deployment's default."""

FILES = (
    "Files the question is about, beside its text (which stays required): each either "
    "`inline_data` (`mime_type`, `data` in base64) or `file_data` (`file_uri` gs:// or "
    "https://, `mime_type`), with an optional `display_name`. Types: PNG, JPEG, WebP and GIF "
    "images, PDF, audio (WAV, MP3, AAC, OGG, FLAC, AIFF). Limits (settings files_max_*): 10 "
    "files, 7 MiB per inline file, 14 MiB of inline files per query. A file too large answers "
    "413, a type not accepted 415, bad base64 or a URI of another scheme 422. Inline bytes are "
    "stored in the deployment's bucket; the run keeps only a file_data part naming them."
)
QueryFiles = Annotated[list[FilePart], Field(description=FILES)]


class CreateRun(Strict):
    """Body of ``POST /runs``."""

    text: QueryText
    request_id: Id | None = Field(
        default=None,
        description="Idempotency key; the Idempotency-Key header may carry it instead.",
    )
    conversation_id: Id | None = Field(
        default=None, description="Continue this conversation (a new one when left out)."
    )
    agent: Id = Field(default="default", description="Name of a configured agent.")
    options: Options = Options()
    files: QueryFiles = Field(default_factory=list)


class RunCreated(BaseModel):
    run_id: str
    request_id: str
    conversation_id: str
    status: str
    created: bool = Field(description="False when the idempotency key had already started it.")


class StepView(BaseModel):
    """One step of a run: its timing, its attempts and what it used."""

    key: str = Field(description="Position in the run; keys sort in execution order.")
    kind: Literal["model", "tool"]
    name: str
    turn: int
    index: int
    status: str
    attempts: int = Field(description="Deliveries that claimed the step, plus the streamed "
                          "model calls retried in a request after their text was shown (1 "
                          "unless retried).")
    created_at: float
    started_at: float = Field(description="Start of the last attempt (Unix seconds).")
    completed_at: float | None
    duration_seconds: float | None = Field(description="From the first claim to completion.")
    call_seconds: float | None = Field(description="The model or tool call alone.")
    usage: Usage
    cost: Cost | None = Field(default=None, description=STEP_COST)
    last_error: str | None
    result: dict[str, Any] | None
    decision: StepDecision | None = Field(
        default=None, description="How the step's wait ended: a person's approval or "
        "rejection, an event's arrival, the deadline or a cancel (None: it never waited).")

    @classmethod
    def of(cls, step: StepRecord) -> StepView:
        done = step.completed_at
        return cls(
            key=step.key, kind=step.kind, name=step.name, turn=step.turn, index=step.index,
            status=step.status.value, attempts=step.attempts, created_at=step.created_at,
            started_at=step.started_at, completed_at=done,
            duration_seconds=None if done is None else round(done - step.created_at, 6),
            call_seconds=step.call_seconds, usage=step.usage, cost=step.cost,
            last_error=step.last_error, result=step.result, decision=step.decision,
        )


class RunOutcomeView(RunOutcome):
    """A run's :class:`~ackloop.domain.wire.RunOutcome` as the HTTP API says it: with the budget
    that
    stopped it and its cost. The views of a run (a summary, a stream's last event, a child,
    ``query``'s answer) derive from it."""

    budget_stop: str | None = Field(default=None, description=BUDGET_STOP)
    cost: Cost | None = Field(default=None, description=RUN_COST)

    @staticmethod
    def outcome_of(run: RunRecord) -> dict[str, Any]:
        """The view's fields from ``run``'s record."""
        return {**run.outcome(), "budget_stop": run.budget_stop, "cost": run.cost}


class _SummaryHead(BaseModel):
    """A run's identity and question, first in its summary (a base of their own so the
    outcome's fields follow them)."""

    run_id: str
    request_id: str
    conversation_id: str
    agent: str
    text: str
    files: list[dict[str, Any]] = Field(
        default_factory=list, description="The question's files as the run keeps them: "
        "Gemini file_data parts (file_uri, mime_type, display_name?), never their bytes.")


class RunSummary(RunOutcomeView, _SummaryHead):
    created_at: float
    finished_at: float | None
    cancel_requested: bool
    trace_id: str | None = Field(default=None, description="The run's trace (32 hex digits).")
    handed_to: str | None = Field(
        default=None, description="The agent a hand-off (`Agent.as_handoff`) gave the "
        "conversation to, whose turn ended the run (null when the run's own agent ended it); "
        "a later run of the conversation naming no agent is that agent's.")
    parent_run_id: str | None = Field(
        default=None, description="A child run: the run whose sub-agent call started it "
        "(null for a run a caller started).")
    parent_step: str | None = Field(
        default=None, description="A child run: the parent's tool step that waits for it.")

    @classmethod
    def of(cls, run: RunRecord) -> RunSummary:
        return cls(
            run_id=run.run_id, request_id=run.request_id, conversation_id=run.conversation_id,
            agent=run.agent, text=run.text, files=run.files, **cls.outcome_of(run),
            created_at=run.created_at, finished_at=run.finished_at,
            cancel_requested=run.cancel_requested, trace_id=run.trace_id,
            handed_to=run.handed_to, parent_run_id=run.parent_run_id,
            parent_step=run.parent_step,
        )


SHOWN_AS: list[JsonValue] = [*sorted({kind.shown_as for kind in KINDS.values()})]


class WaitingView(BaseModel):
    """A tool call that waits: for a person's decision (``approval``: ``POST
    /runs/{id}/approvals/{step}``), for a named event (``event``: ``POST
    /runs/{id}/events/{name}``; a child run's end shows as the event ``child.<step>``), or
    asleep until its time (``time``: it goes on by itself at ``wake_at``). What it says is its
    kind's (``ackloop.engine.waits.kinds``)."""

    step: str
    waiting_for: str = Field(description="What it waits for: approval, event or time.",
                             json_schema_extra={"enum": SHOWN_AS})
    label: tuple[str, str] = Field(description=(
        "What the run is doing, in two parts a page joins: how it waits (\"waiting for\", "
        "\"asleep until\") and for what (\"a decision\", a time)."))
    event_name: str | None = Field(default=None, description="The awaited event's name.")
    tool: str
    args: dict[str, Any]
    since: float
    deadline: float = Field(description="Past it, no decision is a rejection (Unix seconds).")
    wake_at: float | None = Field(default=None, description="When a call that sleeps runs "
                                  "(Unix seconds; ``waiting_for`` is ``time``).")

    @classmethod
    def of(cls, step: StepRecord) -> WaitingView | None:
        w = step.waiting
        if w is None or step.status is not StepStatus.WAITING or step.decision is not None:
            return None
        kind = kind_of(w)
        return cls(step=step.key, waiting_for=kind.shown_as, label=kind.label(w),
                   event_name=w.event, tool=w.tool, args=w.args, since=w.since,
                   deadline=w.deadline, wake_at=w.wake_at)


class _ChildHead(BaseModel):
    run_id: str
    agent: str
    step: str = Field(description="The key of the tool step whose call started it.")


class ChildView(RunOutcomeView, _ChildHead):
    """A child run: a run of a sub-agent that one of this run's tool calls started
    (``Agent.as_tool``), and that call waits for. ``GET /runs/{run_id}`` of it has the rest
    (its answer, output and error, which this view leaves out)."""

    answer: str | None = Field(default=None, exclude=True)
    output: Any = Field(default=None, exclude=True)
    error: str | None = Field(default=None, exclude=True)
    cost: Cost | None = Field(default=None, description=CHILD_COST)

    @classmethod
    def of(cls, step: str, child: RunRecord) -> ChildView:
        return cls(run_id=child.run_id, agent=child.agent, step=step, **cls.outcome_of(child))


class QuotaWaitView(BaseModel):
    """A model step waiting for its place under its model's quota (it goes on by itself)."""

    quota: str = Field(description="The quota: its model and location.")
    step: str
    place_at: float = Field(description="When its place comes (Unix seconds).")
    ahead: int = Field(description="Calls ahead of it in line.")
    label: tuple[str, str] = Field(description="What the run is doing, as `waiting[].label`.")

    @classmethod
    def of(cls, waiting: QuotaWaiting, now: float) -> QuotaWaitView:
        return cls(quota=waiting.quota_id, step=waiting.step, place_at=waiting.at,
                   ahead=waiting.ahead, label=waiting.label(now))


class RunView(RunSummary):
    """A run with its steps, in execution order, and its child runs."""

    model: str
    steps: list[StepView]
    waiting: list[WaitingView] = Field(
        default_factory=list, description="Tool calls waiting for a decision or an event.")
    waiting_for_quota: list[QuotaWaitView] = Field(
        default_factory=list, description="Model steps waiting for their places under their "
        "model's quota, with the calls ahead of each and when its place comes.")
    children: list[ChildView] = Field(
        default_factory=list, description="The child runs its sub-agent calls started, in "
        "the order of their steps (each one's own children are in its GET /runs/{run_id}).")
    children_cost: Cost | None = Field(
        default=None, description="What the child runs spent (each one's whole tree), apart: "
        "the run's `cost` counts each child's once its call has completed. Null without "
        "children.")
    children_usage: Usage | None = Field(
        default=None, description="What the child runs used (each one's whole tree), summed "
        "as their records stand, as `children_cost` is: the run's `usage` counts each child's "
        "once its call has completed (`usage.children`). Null without children.")

    @classmethod
    def of_run(cls, run: RunRecord, steps: list[StepRecord],
               children: Sequence[tuple[str, RunRecord]] = (),
               quota_waits: Sequence[QuotaWaitView] = ()) -> RunView:
        """``children``: ``(step key, child run)`` of each of its child runs
        (:func:`ackloop.api.tree.children_of`); ``quota_waits``: its model steps waiting for
        their places (:func:`ackloop.engine.quota.waiting_of`)."""
        summary = RunSummary.of(run)
        if not run.status.terminal:  # in flight: what the steps have recorded so far
            summary = summary.model_copy(update={"usage": steps_usage(steps),
                                                 "cost": rolled_up(run, steps)})
        waiting = [w for s in steps if (w := WaitingView.of(s)) is not None]
        kids = [ChildView.of(key, child) for key, child in children]
        return cls(**dict(summary), model=run.model, steps=[StepView.of(s) for s in steps],
                   waiting=waiting, waiting_for_quota=list(quota_waits), children=kids,
                   children_cost=Cost.total([k.cost for k in kids]) if kids else None,
                   children_usage=_summed([k.usage for k in kids]) if kids else None)


def _summed(usages: Sequence[Usage]) -> Usage:
    """The figures of ``usages`` added up (without a breakdown of their own children's)."""
    total = Usage()
    for usage in usages:
        total = total.plus(usage.counts())
    return total


class ConversationRuns(BaseModel):
    conversation_id: str
    runs: list[RunSummary] = Field(description="Oldest first.")


class CancelAccepted(BaseModel):
    run_id: str
    status: str
    cancel_requested: bool = Field(
        description="True once requested; false when the run had already finished."
    )


class SweptRun(BaseModel):
    run_id: str
    action: str = Field(description="resumed, failed, progressing or started")
    detail: str


class SweepReport(BaseModel):
    swept: list[SweptRun] = Field(description="Runs found idle, and what was done to each.")


class FieldError(BaseModel):
    field: str = Field(description="Where: body.text, path.run_id, header.idempotency-key...")
    message: str


class ErrorBody(BaseModel):
    """Every error answer: a message, a stable code, and field errors for invalid input."""

    error: str
    code: str
    fields: list[FieldError] | None = None
    valid_class_methods: list[str] | None = None


# -- events ------------------------------------------------------------------------------


class StepEvent(BaseModel):
    """A step that completed (each step once, in key order, however often it was retried), of
    the run or of a child run under it (``run_id`` says which): a child's steps completed before
    the call that waited for it completed come before that call's step."""

    type: Literal["step"] = "step"
    cursor: str = Field(description="Resume after this event with ?after=CURSOR. A child "
                        "run's step carries the stream's cursor when it was sent: resumed "
                        "after it, the stream sends the steps of the children still going "
                        "again.")
    run_id: str = Field(description="The run the step is of: the streamed run, or a child "
                        "run under it (a sub-agent's call, at any depth).")
    step: StepView


class _FinishedHead(BaseModel):
    type: Literal["finished"] = "finished"
    cursor: Literal["end"] = "end"
    run_id: str


class FinishedEvent(RunOutcomeView, _FinishedHead):
    """The run ended: always the last event of a stream."""

    @classmethod
    def of(cls, run: RunRecord) -> FinishedEvent:
        return cls(run_id=run.run_id, **cls.outcome_of(run))


class DeltaEvent(BaseModel):
    """A piece of a model step's answer text while its model call runs (the deployment streams:
    ACKLOOP_MODEL_STREAM). Not a cursor: a stream resumed after a step sends that step's
    deltas again from the start. Keep, per step, the text of its highest ``attempt``: a step
    retried or taken over streams again under a higher attempt, and the lower one's text is
    superseded; the step's own event, which follows its deltas, carries the committed text."""

    type: Literal["delta"] = "delta"
    run_id: str
    step: str = Field(description="The model step's key.")
    attempt: int = Field(description="The step's attempt (its claims) that wrote this text.")
    seq: int = Field(description="Order within the attempt, from 0.")
    text: str


class WaitingEvent(BaseModel):
    """A tool call waits for a person's decision (``POST /runs/{id}/approvals/{step}``), sent
    once per stream when the stream first sees it. Not a cursor: a resumed stream sends it
    again while the call still waits."""

    type: Literal["waiting"] = "waiting"
    run_id: str
    waiting: WaitingView


Event = StepEvent | FinishedEvent | DeltaEvent | WaitingEvent
