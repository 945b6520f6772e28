"""Following a run from the command line: each step as it completes, then how the run ended.

Shared by ``ackloop ask`` and ``ackloop runs follow``. It reads the store directly (the run and
its steps, every :data:`POLL_SECONDS`), so it works against the emulators and a deployment
alike, with no API in between. A query that never became a run (an unknown agent, budgets over
the deployment's ceilings) is rejected at once into ``poison`` under its message id, which the
follower reads too: the rejection is reported within a poll, not after the timeout.

Given ``on_delta``, each poll also reads the run's deltas (:mod:`ackloop.store.deltas`) past the
last
one read, as the API's event stream does: the text of the model step being written, printed as
it arrives by :class:`LiveText`. The steps are read before the deltas, so a step seen completed
has all its deltas in that read: the rest of a step whose text was being shown comes before its
step line, and a step that had completed before any of its text was read shows none.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ackloop.config.quotas import ModelQuota
from ackloop.config.settings import Settings
from ackloop.domain.cost import Cost
from ackloop.domain.keys import StepKey
from ackloop.domain.records import RunRecord, RunStatus, StepRecord, StepStatus
from ackloop.domain.wire import Usage
from ackloop.engine.children import is_reserved
from ackloop.engine.quota import waiting_of
from ackloop.engine.spend import rolled_up, steps_usage
from ackloop.engine.waits.kinds import kind_of
from ackloop.store.deltas import DeltaRecord, after_step, next_id, read_deltas

if TYPE_CHECKING:
    from ackloop.store import AgentStore

POLL_SECONDS = 0.2
SCRIPTED_PREFIX = "scripted"
"""Model versions the scripted offline model reports start with this."""


SHORT_SLEEP_S = 60.0
"""A call that sleeps no longer than this is followed to its end; a longer sleep is reported
(when it wakes, how to follow it) and left to go on by itself."""


@dataclass
class Followed:
    run_id: str
    run: RunRecord | None = None
    steps: list[StepRecord] = field(default_factory=list)
    rejection: dict[str, Any] | None = None
    """The poison record of the query, when it was rejected before it became a run."""
    elapsed: float = 0.0

    def _undecided(self, announced: bool) -> list[StepRecord]:
        if self.run is None or self.run.status.terminal:
            return []
        return [s for s in self.steps if s.status is StepStatus.WAITING and s.decision is None
                and s.waiting is not None and kind_of(s.waiting).announced is announced
                and not (s.waiting.event is not None and is_reserved(s.waiting.event))]

    @property
    def waiting(self) -> list[StepRecord]:
        """The tool calls that wait for someone to act: a person's decision or a named event
        (none once the run has ended); not those waiting for their child run, whose end
        resumes them, nor those that sleep (:attr:`sleeping`)."""
        return self._undecided(announced=True)

    @property
    def sleeping(self) -> list[StepRecord]:
        """The tool calls that sleep until their time (they go on by themselves)."""
        return [s for s in self._undecided(announced=False)
                if s.waiting is not None and s.waiting.wake_at is not None]

    @property
    def settled(self) -> bool:
        """Some call waits (for someone, or asleep for longer than :data:`SHORT_SLEEP_S`), and
        every other call of its turn has started and waits or is done: what the run waits
        for cannot change soon unless someone acts."""
        now = time.time()
        waiting = self.waiting + [s for s in self.sleeping if s.waiting is not None and (
            s.waiting.wake_at or 0.0) - now > SHORT_SLEEP_S]
        if not waiting:
            return False
        turn = max(s.turn for s in waiting)
        by_key = {s.key: s for s in self.steps}
        model = by_key.get(str(StepKey.model(turn)))
        calls = [o.target_step for o in model.outbox if o.topic == "tool_steps"] if model else []
        return all(key in by_key and by_key[key].status is not StepStatus.RUNNING
                   for key in calls)

    @property
    def ended(self) -> bool:
        return self.rejection is not None or (self.run is not None and self.run.status.terminal)

    @property
    def answered(self) -> bool:
        """Ended with an answer (or a structured output): the only outcome that exits 0."""
        run = self.run
        return (run is not None and run.status is RunStatus.COMPLETED
                and run.budget_stop is None
                and (run.answer is not None or run.output is not None))

    def answered_by(self) -> str | None:
        """The model version that gave the answer (its model step records it), else the
        run's configured model; None unless the run answered."""
        if not self.answered or self.run is None:
            return None
        versions = [str(s.result["model_version"]) for s in self.steps
                    if s.kind == "model" and s.result and s.result.get("model_version")]
        return versions[-1] if versions else self.run.model

    def usage(self) -> Usage:
        """The run's usage: as its end recorded it, else what its steps have so far."""
        if self.run is not None and self.run.status.terminal:
            return self.run.usage
        return steps_usage(self.steps)

    def cost(self) -> Cost | None:
        """The run's cost: its total once ended, else its ingest's and its steps' so far."""
        if self.run is None:
            return None
        return self.run.cost if self.run.status.terminal else rolled_up(self.run, self.steps)


class LiveText:
    """Prints the text of the model step being written, delta by delta, between the lines of
    the follower: per step only its highest attempt (a step retried or taken over streams again
    from the start under a new one: ``[retrying …]``, then its text), and every line printed
    through :meth:`line` starts on a line of its own."""

    def __init__(self, write: Callable[[str], None]) -> None:
        self._write = write
        self._shown: tuple[str, int] | None = None  # (step, attempt) of the text printed last
        self._mid_line = False

    def delta(self, delta: DeltaRecord) -> None:
        at = (delta.step, delta.attempt)
        if self._shown is not None and at < self._shown:
            return  # a superseded attempt's, or an earlier step's
        if self._shown is not None and at != self._shown:
            self.end_line()
            if delta.step == self._shown[0]:
                self._write(f"[retrying {delta.step}: attempt {delta.attempt}, from the "
                            "start]\n")
        self._shown = at
        if delta.text:
            self._write(delta.text)
            self._mid_line = not delta.text.endswith("\n")

    def end_line(self) -> None:
        """End the text's last line, if it is unfinished."""
        if self._mid_line:
            self._write("\n")
            self._mid_line = False

    def line(self, text: str) -> None:
        self.end_line()
        self._write(text + "\n")


async def follow(
    store: AgentStore, run_id: str, *, timeout: float | None,
    on_step: Callable[[StepRecord], None] = lambda step: None,
    on_delta: Callable[[DeltaRecord], None] | None = None,
    message_id: str | None = None,
    until_waiting: bool = False,
    quotas: Settings | None = None,
    on_quota: Callable[[str], None] = lambda line: None,
) -> Followed:
    """Poll until the run ends (or ``timeout`` seconds pass, None: no limit), calling
    ``on_step`` once for each completed step, in key order, and ``on_delta`` (when given) for
    each delta of a step being written, before that step's ``on_step``. ``message_id``: the
    query's Pub/Sub message, whose rejection ends the wait while no run exists.
    ``until_waiting``: return once the run waits and nothing else of the waiting turn is left
    to run (:attr:`Followed.settled`), which no poll would change. ``quotas``: the
    deployment's settings, to tell ``on_quota``, once per place, of a model step waiting
    for its place under the quotas in force (the calls ahead, how long)."""
    seen: set[str] = set()
    deltas_from = "0"  # the next delta id to read
    live: str | None = None  # the step whose text is being shown
    give = on_delta or (lambda delta: None)
    started = time.monotonic()
    followed = Followed(run_id)
    told_places: set[tuple[str, float]] = set()
    in_force = await _quotas_in_force(quotas, store) if quotas is not None else []
    while True:
        run, steps = await asyncio.gather(store.runs.get_run(run_id),
                                          store.steps.list_steps(run_id))
        followed.run, followed.steps = run, steps
        shown: deque[DeltaRecord] = deque()
        if on_delta is not None and run is not None:
            deltas_from, live, found = await _read_deltas(store, run_id, steps, deltas_from,
                                                          live)
            shown.extend(found)
        for step in steps:  # in key order, each after the text of the steps up to it
            if step.status is StepStatus.COMPLETED and step.key not in seen:
                while shown and shown[0].step <= step.key:
                    give(shown.popleft())
                seen.add(step.key)
                on_step(step)
        while shown:
            give(shown.popleft())
        if in_force and run is not None:
            told_places = await _tell_places(in_force, store, run, told_places, on_quota)
        if run is None and message_id is not None:
            followed.rejection = await store.letters.get_poison(message_id)
        followed.elapsed = time.monotonic() - started
        if followed.ended or (until_waiting and followed.settled) or (
                timeout is not None and followed.elapsed >= timeout):
            return followed
        await asyncio.sleep(POLL_SECONDS)


async def _quotas_in_force(settings: Settings, store: AgentStore) -> list[ModelQuota]:
    """The model quotas in force when the following starts (as set while the deployment runs,
    else as declared: :mod:`ackloop.engine.live_limits`)."""
    from ackloop.engine.live_limits import in_force

    return in_force(settings, await store.quotas.read_set()
                    if settings.limits_refresh_seconds > 0 else None).model_quotas


async def _tell_places(quotas: list[ModelQuota], store: AgentStore, run: RunRecord,
                       told: set[tuple[str, float]], tell: Callable[[str], None]
                       ) -> set[tuple[str, float]]:
    """Tell each place a model step of ``run`` waits for, once; the places told."""
    if run.status.terminal:
        return told
    now = time.time()
    for place in await waiting_of(quotas, store, run.run_id, now):
        if (place.step, place.at) not in told:
            told = told | {(place.step, place.at)}
            tell(f"  … {place.step:<14} {' '.join(place.label(now))}")
    return told


async def _read_deltas(store: AgentStore, run_id: str, steps: list[StepRecord],
                       deltas_from: str, live: str | None
                       ) -> tuple[str, str | None, list[DeltaRecord]]:
    """Where to read next, the step whose text is shown, and the deltas past ``deltas_from``
    to show: all but those of a step that had completed before any of its text was shown."""
    done = {s.key for s in steps if s.status is StepStatus.COMPLETED}
    models_done = [s.key for s in steps if s.kind == "model" and s.key in done]
    if models_done and models_done[-1] != live:  # model steps are sequential: skip the past
        deltas_from = max(deltas_from, after_step(models_done[-1]))
    found = []
    for delta_id, delta in await read_deltas(store, run_id, deltas_from, None):
        deltas_from = next_id(delta_id)
        if delta.step not in done or delta.step == live:
            live = delta.step
            found.append(delta)
    return deltas_from, live, found


def describe_step(step: StepRecord) -> str:
    """One line for a completed step: what the model asked for, or what a tool returned."""
    result = step.result or {}
    if step.kind == "model":
        compacted = _compacted(result.get("compaction"))
        calls = result.get("calls") or []
        if calls:
            return compacted + "model asks for " + ", ".join(
                f"{c['name']}({json.dumps(c.get('args') or {}, ensure_ascii=False)})" for c in calls
            )
        if "text" in result:
            return compacted + "model answers"
        if "stop_reason" in result:  # a budget or a cancel ended the run before the call
            return f"run stopped before the model call: {result['stop_reason']}"
        return f"model step: {json.dumps(result, ensure_ascii=False)}"
    response = result.get("response", {})
    text = json.dumps(response, ensure_ascii=False)
    return f"{step.name} -> {text[:160]}{'…' if len(text) > 160 else ''}"


def _compacted(record: object) -> str:
    """What a model step says of the compaction it made first (none: nothing)."""
    if not isinstance(record, dict):
        return ""
    return (f"compacted {record.get('summarized')} earlier content(s) into a summary of "
            f"{record.get('summary_bytes')} bytes, kept {record.get('kept')}; ")


def step_line(step: StepRecord) -> str:
    took = f"  {step.call_seconds * 1000:.0f} ms" if step.call_seconds else ""
    return f"  ✓ {step.key:<14} {describe_step(step)}{took}"


def budget_limit(run: RunRecord) -> str:
    """The limit of the budget that stopped ``run``, as the run recorded it."""
    limits = run.limits
    value = {"max_steps": f"{limits.max_steps} model steps",
             "max_seconds": f"{limits.max_seconds:g} s",
             "max_tool_calls": f"{limits.max_tool_calls} tool calls",
             "max_tokens": f"{limits.max_tokens} tokens"}
    return value.get(run.budget_stop or "", "")


def waiting_lines(followed: Followed) -> list[str]:
    """What a run waits for, and the commands that decide it (or send its event), in each
    kind's words."""
    return [line for step in followed.waiting + followed.sleeping if step.waiting is not None
            for line in kind_of(step.waiting).told(followed.run_id, step.key, step.waiting)]


def outcome_line(followed: Followed, timeout: float | None) -> str:
    """How the run ended, in one line: what a user reads first."""
    run, rid = followed.run, followed.run_id
    waited = f"{followed.elapsed:.0f} s" if timeout is None else f"{timeout:g} s"
    if followed.rejection is not None:
        poison = followed.rejection
        return (f"query rejected ({poison.get('reason', 'rejected')}): "
                f"{poison.get('error', '')}; no run was started")
    if run is None:
        return (f"no run {rid} after {waited}: is the stack's ingest running? "
                "(`ackloop dev status`)")
    used = followed.usage()
    usage = (f"{used.model_calls} model call(s), {used.tool_calls} tool call(s), "
             f"{run.seconds(time.time()):.2f} s")
    if not run.status.terminal:
        return f"run {rid} still {run.status.value} after {waited} ({usage})"
    if run.budget_stop is not None:
        return (f"run {rid} stopped by its {run.budget_stop} budget "
                f"({budget_limit(run)}): no answer ({usage})")
    if run.status is RunStatus.FAILED:
        return f"run {rid} failed: {run.error or 'no cause recorded'} ({usage})"
    if run.status is RunStatus.CANCELLED:
        return f"run {rid} cancelled ({usage})"
    model = followed.answered_by()
    if model is None:
        return f"run {rid} {run.status.value} ({run.stop_reason}) without an answer ({usage})"
    scripted = " (the scripted offline model)" if model.startswith(SCRIPTED_PREFIX) else ""
    return f"run {rid} completed ({usage}); answered by {model}{scripted}"


def cache_share(cached: int, prompt: int) -> str:
    """The share of the prompt tokens Gemini served from its cache (billed at the cached
    rate), as a percentage."""
    return f"{100 * cached / prompt:.0f}%" if prompt else "0%"


def cost_line(cost: Cost | None) -> str:
    """What a run or a step spent, in one line: dollars first, then what was counted."""
    if cost is None:
        return "cost not recorded"
    unpriced = (f"; no price for {', '.join(cost.unpriced_models)}" if cost.unpriced_models
                else "")
    cached = (f" ({cost.cached_tokens:,} cached, "
              f"{cache_share(cost.cached_tokens, cost.prompt_tokens)})" if cost.cached_tokens
              else "")
    return (f"${cost.usd:.6f}: {cost.prompt_tokens:,} prompt{cached} + {cost.output_tokens:,} "
            f"output tokens, {cost.firestore_reads:,} Firestore reads + {cost.firestore_writes:,} "
            f"writes, {cost.pubsub_bytes:,} Pub/Sub bytes, {cost.requests} request(s) "
            f"{cost.request_seconds:.2f} s (list prices of {cost.price_table}{unpriced})")


def answer_text(run: RunRecord) -> str:
    """What goes to stdout: the answer, or the structured output as JSON."""
    return run.answer if run.answer is not None else json.dumps(run.output, ensure_ascii=False)
