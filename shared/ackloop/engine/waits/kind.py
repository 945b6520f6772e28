"""What one kind of wait is: the contract every kind fulfils for the mechanism
(:mod:`ackloop.engine.waits.core`), its own vocabulary, and the no-ops most kinds take.

A call waits for a person's decision (``approval``), a named event (``event``), its child
run's end (``child``) or a time (``time``: a call that sleeps); each kind is one module of
:mod:`ackloop.engine.waits.kinds`, which also lists them. Everything else about a wait (its
record on the step, its deadline, its resolution, cancel, the sweeper, dead letters, redrive,
what the call counts) is the one mechanism, so a case it handles for one kind it handles for
every kind. A kind supplies:

- ``of``: the wait a call makes of this kind, if it makes one (a call that sleeps no time
  makes a wait of no length, which is no wait);
- ``arrived``: whether what it waits for is already at its source, and the resolution if so
  (an event the run keeps; a child run that has ended; a person's decision never is);
- ``outcome``: what the model reads of a resolution other than a rejection (None: the tool
  runs, with the approved arguments or the event's payload); a rejection reads the same for
  every kind (:func:`rejection`);
- ``clock_runs``: whether the run's clock runs while it waits (a child's work is its parent's
  time), and so whether the wait keeps anything on the run's document at all;
- ``announced``: whether a notice goes out on the answers topic: someone outside (a person,
  a sender) is to act on it; a wait not announced goes on by itself;
- ``timeout``: the tool's own wait length, if it sets one;
- ``name_for``: the name a call waits under, when the kind names it itself (a child's is its
  step's), not the tool;
- ``abandon``: what ending the wait without its resolution does (a child is cancelled),
  ``spent``: what the call counts when it ends (a child's cost and usage, however it
  ended), and ``ending``: what it waits for that is still to end on its own, whose figures
  come later (a child's run id while it works);
- ``arm``: what it does once the wait is recorded, and again on each delivery that finds the
  call still waiting (a time's wake is armed: :mod:`ackloop.bus.wakes`);

and its words, which the API, the answers topic, the CLI, the inspector and the store's
refusals take from it rather than spell out:

- ``shown_as``: its ``waiting_for`` in the API's views and the answers topic's notices;
- ``label``: what a run waiting so is doing, as a person reads it, in two parts that the
  pages and the CLI join ("waiting for", "a decision"; "asleep until", a time);
- ``awaits``: what a decision for another kind is told the step waits for instead;
- ``missed``: what the model reads when the deadline came first;
- ``told``: what the CLI tells of a call waiting so, and the commands that resolve it (none:
  it is not the CLI's to act on).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ackloop.domain.jsondict import JsonDict
from ackloop.domain.records import DEADLINE, RunRecord, StepDecision, Waiting
from ackloop.engine.deps import Deps
from ackloop.tools.base import ToolOutcome
from ackloop.tools.definition import Tool

CancelRun = Callable[[Deps, str], Awaitable[object]]
"""Cancels a run (and what it waits for in turn): handed to a kind's ``abandon`` by the
mechanism, so that no kind imports the run's ending."""


@dataclass(frozen=True)
class WaitKind:
    """One kind of wait: what it supplies to the mechanism and its words (module docstring)."""

    name: str
    clock_runs: bool
    announced: bool
    shown_as: str
    of: Callable[[Tool, JsonDict, float], Wait | None]
    label: Callable[[Waiting], tuple[str, str]]
    awaits: Callable[[str, Waiting], str]
    missed: Callable[[Waiting], str]
    told: Callable[[str, str, Waiting], list[str]] = lambda run_id, key, waiting: []
    timeout: Callable[[Tool], float | None] = lambda tool: None
    arrived: Callable[[Deps, RunRecord, str, Waiting], Awaitable[StepDecision | None]] = (
        lambda deps, run, key, waiting: _none())
    outcome: Callable[[StepDecision, Waiting], ToolOutcome | None] = (
        lambda decision, waiting: None)
    name_for: Callable[[str], str] | None = None
    abandon: Callable[[Deps, RunRecord, str, CancelRun], Awaitable[bool]] = (
        lambda deps, run, key, cancel: _false())
    spent: Callable[[Deps, RunRecord, str, StepDecision | None], Awaitable[JsonDict | None]] = (
        lambda deps, run, key, decision: _none())
    ending: Callable[[Deps, RunRecord, str], Awaitable[str | None]] = (
        lambda deps, run, key: _none())
    arm: Callable[[Deps, RunRecord, str, Waiting], Awaitable[None]] = (
        lambda deps, run, key, waiting: _none())


@dataclass(frozen=True)
class Wait:
    """What a call waits for before it runs: its kind, its tool and, for an event or a
    child, the name it waits under; for a call that sleeps, how long."""

    tool: Tool
    kind: WaitKind
    event: str | None = None
    seconds: float | None = None

    def named(self, key: str) -> str | None:
        """The name the call at ``key`` waits under (a child's is its own step's)."""
        return self.kind.name_for(key) if self.kind.name_for is not None else self.event


def rejection(decision: StepDecision, missed: str | None = None) -> ToolOutcome:
    """What the model reads of a rejected call: rejected by whom (and why, with a comment),
    or, past the deadline, what its kind missed (``missed``)."""
    if decision.by == DEADLINE:
        text = f"not run: {missed or 'no decision before the deadline'}"
    else:
        text = f"not run: rejected by {decision.by}"
    if decision.comment:
        text += f" ({decision.comment})"
    return ToolOutcome(response={"error": text}, is_error=True)


def call_of(waiting: Waiting) -> str:
    """The waiting call as the CLI shows it: ``tool({"arg": …})``."""
    return f"{waiting.tool}({json.dumps(waiting.args, ensure_ascii=False, sort_keys=True)})"


def utc(at: float) -> str:
    """A time as the pages and the CLI show it: UTC, to the second."""
    return f"{dt.datetime.fromtimestamp(at, dt.UTC):%Y-%m-%d %H:%M:%S} UTC"


async def _none() -> None:
    return None


async def _false() -> bool:
    return False
