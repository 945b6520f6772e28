"""The dead-letter path end to end, on the live stack, under the shipped delivery policy.

It starts with the stack and runs beside the other phases (its clock is the retry policy's
backoff: ``max_delivery_attempts`` deliveries take :attr:`Timing.dead_letter_after_s`).

Which poison reaches the dead-letter topic under the shipped numbers? Not a step that fails on
every delivery: each delivery claims it, so its run ends at a claim (``max_step_attempts`` = 8,
or its wall-clock budget ``default_max_seconds`` checked at each claim) long before the 10th
delivery. A message is dead-lettered only when its deliveries keep failing *without* claiming
the step. The poison here is the plainest such cause: Gemini answers 429 with a retry-after of
an hour (a quota that is spent). The first delivery claims the step, calls, releases it with
``not_before`` an hour away and answers 503; every later delivery finds the step not due and
answers 503 without a claim; the 10th is forwarded to the dead-letter topic; the dead-letter
function fails the run with the step's last error as the cause and publishes its end.

Three poisoned runs (references ``dla``, ``dlb``, ``dlc``):

* ``dla``: the path above; then the cause is fixed (the 429s stop) and
  :func:`ackloop.engine.redrive.redrive` re-drives it: it must complete with the fault-free answer,
  its model step answered exactly once, its transcript whole, and a second redrive must find
  nothing to do. It is asked with ``max_seconds`` above the dead-letter time.
* ``dlb``: the same with the shipped budget (300 s, long spent when it is re-driven): a redrive
  starts the run's time budget over, so it must complete too.
* ``dlc``: a model that answers 500 to everything (a step that fails on every delivery), to show
  what ends it under the shipped numbers (reported, not a target): its budget or its attempts,
  with the run failed and the 500 as the cause.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from ackloop.bus.pubsub import PubSubPublisher
from ackloop.domain.clock import SystemClock
from ackloop.domain.records import RunRecord, RunStatus
from ackloop.domain.wire import RunOptions
from ackloop.engine.redrive import redrive
from ackloop.store import AgentStore
from ackloop_dev.chaos.checks import (
    Reference,
    RefKey,
    normalize_answer,
    roles,
    segments_of,
    tool_outcomes,
)
from ackloop_dev.chaos.evidence import model_evidence
from ackloop_dev.chaos.stackup import ChaosStack
from ackloop_dev.chaos.workflow import AnswerCollector, Submitted, submit
from ackloop_dev.chaos.workload import BY_NAME

TEMPLATE = "ip"
QUOTA_SPENT = "429:3600"
"""Gemini's answer to the poisoned runs: 429, retry in an hour (production seconds)."""
ALWAYS_500 = "500"


@dataclass
class PoisonedRun:
    """One poisoned run, from submission to its end (and its redrive)."""

    ref: str
    run_id: str = ""
    status: str | None = None
    stop_reason: str | None = None
    error: str | None = None
    seconds_to_end: float | None = None
    step_claims: int = 0
    dead_letter: dict[str, Any] = field(default_factory=dict)
    """The dead-letter record: verdict, cause, delivery attempts."""
    ends_published: list[str] = field(default_factory=list)
    """``status/stop_reason`` of every end message of the run on the answers topic."""
    redriven: list[str] = field(default_factory=list)
    after_redrive: str | None = None
    """``status/stop_reason`` after the redrive."""


@dataclass
class DeadLetterResult:
    """What the dead-letter phase saw."""

    expected_after_s: float = 0.0
    max_delivery_attempts: int = 0
    max_step_attempts: int = 0
    runs: dict[str, PoisonedRun] = field(default_factory=dict)
    answer_ok: bool = False
    model_answers_per_turn: dict[int, int] = field(default_factory=dict)
    transcript_ok: bool = False
    second_redrive: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    submitted: list[Submitted] = field(default_factory=list)

    def dead_lettered(self, ref: str) -> bool:
        """Dead-lettered after the shipped attempts, failed with the cause, end published."""
        run = self.runs.get(ref)
        if run is None:
            return False
        letter = run.dead_letter
        return (run.status == "failed" and (run.error or "").startswith("dead_lettered")
                and "429" in (run.error or "") and letter.get("verdict") == "fail"
                and str(letter.get("delivery_attempts")) == str(self.max_delivery_attempts)
                and "failed/failed" in run.ends_published)

    @property
    def ok(self) -> bool:
        # A second redrive may still find a copy of the dead letter (Pub/Sub forwards at least
        # once); it must not publish anything.
        return (self.dead_lettered("dla") and self.dead_lettered("dlb")
                and self.runs["dla"].redriven == ["redriven"]
                and self.runs["dla"].after_redrive == "completed/answered"
                and self.runs["dlb"].redriven == ["redriven"]
                and self.runs["dlb"].after_redrive == "completed/answered"
                and self.answer_ok and self.transcript_ok
                and "redriven" not in self.second_redrive and not self.problems
                and bool(self.model_answers_per_turn)
                and all(n == 1 for n in self.model_answers_per_turn.values()))

    @property
    def seconds_to_dead_letter(self) -> float | None:
        run = self.runs.get("dla")
        return run.seconds_to_end if run else None

    def as_dict(self) -> dict[str, Any]:
        found = asdict(self)
        found.pop("submitted")
        return {**found, "ok": self.ok, "seconds_to_dead_letter": self.seconds_to_dead_letter}


async def _wait_end(store: AgentStore, run_id: str, timeout_s: float) -> RunRecord | None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        run = await store.get_run(run_id)
        if run is not None and run.status.terminal:
            return run
        await asyncio.sleep(0.5)
    return None


async def _settle(stack: ChaosStack, store: AgentStore, item: Submitted, record: PoisonedRun,
                  timeout_s: float) -> None:
    record.run_id = item.run_id
    run = await _wait_end(store, item.run_id, timeout_s)
    if run is None:
        return
    record.status, record.error = run.status.value, run.error
    record.stop_reason = run.stop_reason.value if run.stop_reason else None
    record.seconds_to_end = round((run.finished_at or time.time()) - item.submitted_at, 1)
    record.step_claims = max((s.attempts for s in await store.list_steps(item.run_id)),
                             default=0)
    letters = [s.data for s in await store.letters.list_dead_letters()
               if s.data.get("run_id") == item.run_id]
    if letters:
        record.dead_letter = {k: letters[0].get(k) for k in
                              ("verdict", "cause", "delivery_attempts", "step")}


def _ends(answers: AnswerCollector, run_id: str) -> list[str]:
    return [f"{m.get('status')}/{m.get('stop_reason')}" for m in answers.by_run.get(run_id, [])]


async def dead_letter_phase(stack: ChaosStack, tag: str, answers: AnswerCollector,
                            references: asyncio.Future[dict[RefKey, Reference]],
                            storm_over: asyncio.Event) -> DeadLetterResult:
    """Run the scenario of the module docstring (waits for the references before the redrive,
    and for the storm to be over, so the redriven call meets a healthy model)."""
    timing = stack.timing
    result = DeadLetterResult(expected_after_s=round(timing.dead_letter_after_s, 1),
                              max_delivery_attempts=timing.max_delivery_attempts,
                              max_step_attempts=timing.max_step_attempts)
    store = stack.store()
    publisher = PubSubPublisher(stack.settings.project_id)
    # Enough for the dead letter and the redrive after it without counting on the redrive
    # restarting the budget (``dlb`` checks that).
    budget = RunOptions(max_seconds=2 * timing.dead_letter_after_s + timing.s(600))
    bound = 1.5 * timing.dead_letter_after_s + timing.s(600)
    stack.poison_refs({"dla": QUOTA_SPENT, "dlb": QUOTA_SPENT, "dlc": ALWAYS_500})
    try:
        topic = stack.settings.queries_topic
        items = {"dla": await submit(publisher, topic, BY_NAME[TEMPLATE], "dla", tag,
                                     options=budget),
                 "dlb": await submit(publisher, topic, BY_NAME[TEMPLATE], "dlb", tag),
                 "dlc": await submit(publisher, topic, BY_NAME[TEMPLATE], "dlc", tag)}
        result.runs = {ref: PoisonedRun(ref) for ref in items}
        result.submitted = list(items.values())
        await asyncio.gather(*(_settle(stack, store, items[ref], result.runs[ref], bound)
                               for ref in items))
        stack.cure_refs("dla", "dlb", "dlc")  # the cause is fixed
        await answers.drain()
        for ref, item in items.items():
            result.runs[ref].ends_published = _ends(answers, item.run_id)
        known = await references
        await storm_over.wait()
        for ref in ("dla", "dlb"):
            done = await redrive(store, publisher, stack.settings, SystemClock(),
                                 run_id=items[ref].run_id)
            result.runs[ref].redriven = [r.outcome for r in done]
        for ref in ("dla", "dlb"):
            run = await _wait_end(store, items[ref].run_id, timing.s(stack.config.settle_s))
            if run is not None:
                stop = run.stop_reason.value if run.stop_reason else "-"
                result.runs[ref].after_redrive = f"{run.status.value}/{stop}"
        await _check_redriven(stack, store, items["dla"], known, result)
        await asyncio.sleep(timing.s(12))  # let any stray redelivery land first
        again = await redrive(store, publisher, stack.settings, SystemClock(),
                              run_id=items["dla"].run_id)
        result.second_redrive = [r.outcome for r in again]
        await answers.drain()
        for ref, item in items.items():
            result.runs[ref].ends_published = _ends(answers, item.run_id)
    finally:
        stack.cure_refs("dla", "dlb", "dlc")
        publisher.close()
    for ref in ("dla", "dlb"):
        if not result.dead_lettered(ref):
            result.problems.append(f"{ref} was not dead-lettered as expected: "
                                   f"{result.runs[ref]}")
    return result


async def _check_redriven(stack: ChaosStack, store: AgentStore, item: Submitted,
                          references: dict[RefKey, Reference], result: DeadLetterResult) -> None:
    run = await store.get_run(item.run_id)
    if run is None or run.status is not RunStatus.COMPLETED:
        return
    steps = await store.list_steps(item.run_id)
    transcript = await store.load_transcript(run.conversation_id)
    expected = references.get((TEMPLATE, tool_outcomes(steps)))
    result.answer_ok = expected is not None and normalize_answer(run.answer) == expected.answer
    mine = segments_of(transcript, item.ref)
    result.transcript_ok = (expected is not None and len(mine) == 1
                            and roles(mine[0].contents) == expected.roles)
    evidence = model_evidence(stack.ledger_path, {item.ref})
    result.model_answers_per_turn = {s.turn: evidence.answered[(item.ref, s.turn)]
                                     for s in steps if s.kind == "model"}
