"""What a step's commit is made of: the decision it records and the reads it is fenced on.

The engine decides; the store writes. A handler reads the run (:class:`RunRead`) and, for a
model step, the transcript, then decides (:class:`Decision`). The steps room's
:meth:`~ackloop.store.steps.Steps.commit_step` asks the engine's :data:`Composer` for the
messages, the cost and the masked error once it knows what the commit writes (a
:class:`StepPlan`), and writes all of it with its preconditions, in one atomic commit:

- the step, on the holder's version (a holder whose lease was taken over writes nothing), or
  created when it ran unclaimed (a duplicate that recorded it first makes the commit fail);
- this turn, added to the last transcript chunk as one entry (fenced on the chunk's version)
  or as the next chunk (created): a writer that read an older transcript writes nothing, and
  what a step writes does not grow with the conversation;
- the run, on its version: a model step records its progress and the run's cost so far there,
  and a run's end is written there, so a run that ended meanwhile refuses the commit;
- the conversation, on its version, when the run ends: the same commit starts its next queued
  run (a run that started its own conversation creates its document instead, unread, which
  fails if a follow-up created it to queue behind the run: the end is then committed from it).

No type of the document layer leaves the store: a :class:`RunRead` carries the version it was
read at for the store's own use.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ackloop.docdb.base import Snapshot, Write
from ackloop.domain.cost import Cost
from ackloop.domain.jsondict import JsonDict
from ackloop.domain.records import Outgoing, RunRecord, StepDecision, StepRecord, Waiting
from ackloop.domain.wire import Usage

if TYPE_CHECKING:
    from ackloop.store.base import RunEnd, Transcript


@dataclass(frozen=True)
class RunRead:
    """A run as one read found it: its record, validated once, and (for the store) the version
    a commit fenced on this read is made against."""

    record: RunRecord
    snapshot: Snapshot = field(repr=False)

    @classmethod
    def of(cls, snapshot: Snapshot | None) -> RunRead | None:
        return None if snapshot is None else cls(RunRecord.model_validate(snapshot.data), snapshot)

    @property
    def run_id(self) -> str:
        return self.record.run_id


@dataclass(frozen=True)
class Basis:
    """What a decision was made from: the run and, for a model step, the transcript."""

    run: RunRead
    transcript: Transcript | None = None
    """Model steps: the transcript as read (None: the step writes no transcript, nor the
    run's progress)."""


@dataclass(frozen=True)
class Decision:
    """What one step produced, decided from what it read."""

    result: JsonDict | None
    outbox: list[Outgoing] = field(default_factory=list)
    contents: list[JsonDict] = field(default_factory=list)
    """Appended to the conversation's transcript (model steps only)."""
    end: RunEnd | None = None
    step_usage: Usage | None = None
    call_seconds: float | None = None
    error: str | None = None
    writes: tuple[Write, ...] = ()
    """Documents written with the step: a streamed call's last text, not written yet (model
    steps; :func:`ackloop.store.deltas.delta_write`)."""
    child_cost: Cost | None = None
    """A sub-agent's call: what its child run cost, counted in this step's cost (so in its
    run's)."""
    compaction_cost: Cost | None = None
    """A model step that compacted its transcript first (:mod:`ackloop.engine.compaction`): what
    the summary's call cost, counted in this step's cost."""
    waited: tuple[Waiting, StepDecision] | None = None
    """A call whose awaited event had arrived before it came to wait: its wait and what
    resolved it, recorded on the step as a wait resolved later is
    (:func:`ackloop.engine.waits.core.met_at_once`)."""
    child_usage: Usage | None = None
    """A sub-agent's call: what its child run used (its whole tree), recorded in this step's
    usage and its children's part (:meth:`Usage.with_child`), from which the next model step
    carries it on (so in its run's); never priced or counted again as this step's own."""
    run_fields: JsonDict = field(default_factory=dict)
    """Fields of the run's document written with the step (with its end, if it ends the run):
    a model step's credit of the time its run's clock did not count while the previous turn
    waited for children (:func:`ackloop.engine.children.idle_seconds`)."""


@dataclass(frozen=True)
class StepPlan:
    """What a step's commit writes, as far as the store knows it before the engine composes
    the rest (:data:`Composer`)."""

    run: RunRecord
    """The run as the commit is fenced on it."""
    step: StepRecord
    """The step as its claim holds it."""
    result: JsonDict | None
    """The step's result as recorded: with its transcript pointer (``transcript``) where the
    step appended a turn and the run goes on."""
    documents: int
    """How many documents the commit writes (what its delivery is priced by)."""
    next_run_id: str | None = None
    """The queued run a run's end starts, which the engine sends its first step."""
    next_trace: str | None = None
    """That run's trace id, for its first step's trace context."""


@dataclass(frozen=True)
class Composed:
    """What the engine decided a commit records beside what the decision says: the messages
    to send (stamped, the run's end's included), the delivery's cost, the run's cost so far (a
    model step's ``run_cost``; None for a tool step), the run's end with its total cost, and
    the step's error, masked."""

    outbox: list[Outgoing]
    cost: Cost
    run_cost: Cost | None = None
    end: RunEnd | None = None
    error: str | None = None


Composer = Callable[[StepPlan], Composed]
"""The engine's part of a step's commit (:func:`ackloop.engine.commit_contents.composer`), asked
once the store knows how many documents the commit writes: it builds, prices and masks; the store
builds, prices and masks nothing."""


@dataclass(frozen=True)
class Committed:
    """What a commit recorded: the messages to send now, the run's end (with its total cost)
    and what the step's delivery spent."""

    outbox: list[Outgoing]
    end: RunEnd | None
    cost: Cost
