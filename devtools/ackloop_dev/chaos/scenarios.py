"""Two scenarios on the live stack, after the fault phase: a follow-up during a long run, and a
Gemini 429 storm.

**Follow-up.** A long run (every model call of it held back 0.4 x the model timeout) is asked;
while it runs, ``config.followups`` more questions are asked in its conversation, with every
delivery duplicated. Each must be stored ``queued`` on arrival, start only when the run before
it has ended, be answered with the fault-free answer, have its end published, and see the
earlier runs' turns as its history (the model's context); the transcript must hold every turn
once, in that order.

**429 storm.** For ``config.storm_s`` (production seconds, scaled) every model call is answered
429 with a retry-after drawn from ``config.storm_retry_after_s``, while ``config.storm_runs``
runs are asked. What the shipped numbers imply: a step is claimed at most ``max_step_attempts``
times before its run fails, and those claims are spread over at least
:attr:`~ackloop_dev.chaos.timing.Timing.step_attempts_span_s` of retry backoff; a storm shorter
than that fails no run. Runs still caught in the storm after ``default_max_seconds`` end at
their next claim by their budget: ``failed`` with ``retries_outlasted_budget`` and the 429 as
the cause when the step had failed attempts, else ``completed``/``max_seconds``. Both are
budget ends, reported beside the failures the retry bound is judged on.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from ackloop.bus.pubsub import PubSubPublisher
from ackloop.domain.records import RunRecord, RunStatus, StopReason
from ackloop.store import AgentStore
from ackloop_dev.chaos.checks import (
    Reference,
    RefKey,
    check_conversation,
    normalize_answer,
    segments,
    tool_outcomes,
)
from ackloop_dev.chaos.config import ChaosConfig
from ackloop_dev.chaos.evidence import model_evidence
from ackloop_dev.chaos.stackup import ChaosStack
from ackloop_dev.chaos.timing import shipped_default
from ackloop_dev.chaos.workflow import AnswerCollector, Submitted, submit, wait_all
from ackloop_dev.chaos.workload import BY_NAME

LONG_RUN = "alerts_here"
"""Four model turns and three tool calls: the longest question."""
FOLLOW_UPS = ("where", "ip", "alerts_ny", "alerts_ca")
LONG_RUN_HOLD = 0.4
"""Each model call of the long run is held back this share of the model timeout."""


async def _wait_status(store: AgentStore, run_id: str, timeout_s: float,
                       wanted: tuple[RunStatus, ...]) -> RunRecord | None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        run = await store.get_run(run_id)
        if run is not None and run.status in wanted:
            return run
        await asyncio.sleep(0.05)
    return None


@dataclass
class FollowUpResult:
    """What the follow-up scenario saw."""

    runs: list[str] = field(default_factory=list)
    """Refs, in the order asked."""
    queued_on_arrival: dict[str, bool] = field(default_factory=dict)
    statuses: dict[str, str] = field(default_factory=dict)
    answers_ok: dict[str, bool] = field(default_factory=dict)
    ends_published: dict[str, int] = field(default_factory=dict)
    history_seen: dict[str, bool] = field(default_factory=dict)
    """Whether the run's first model call carried every earlier turn of the conversation."""
    history_lengths: dict[str, str] = field(default_factory=dict)
    """Per run: the history lengths its first model calls carried, and the length expected
    (the transcript's contents before the run), as ``seen/expected``."""
    transcript_order: list[str | None] = field(default_factory=list)
    order_problems: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    submitted: list[Submitted] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (bool(self.runs) and not self.problems and not self.order_problems
                and self.transcript_order == self.runs
                and all(self.queued_on_arrival.values())
                and all(s == "completed" for s in self.statuses.values())
                and all(self.answers_ok.values()) and all(self.history_seen.values())
                and all(n >= 1 for n in self.ends_published.values())
                and len(self.statuses) == len(self.runs))

    def as_dict(self) -> dict[str, Any]:
        found = asdict(self)
        found.pop("submitted")
        return {**found, "ok": self.ok}


async def followup_scenario(stack: ChaosStack, config: ChaosConfig,
                            references: dict[RefKey, Reference], tag: str,
                            answers: AnswerCollector) -> FollowUpResult:
    """Run the follow-up scenario of the module docstring."""
    result = FollowUpResult()
    store = stack.store()
    publisher = PubSubPublisher(stack.settings.project_id)
    timing = stack.timing
    settle = timing.s(config.settle_s)
    hold = LONG_RUN_HOLD * float(shipped_default("model_timeout_seconds"))
    stack.poison_refs({"fu0": f"delay:{hold:g}"})
    stack.configure_front(duplicate=True, concurrent_share=config.concurrent_share)
    try:
        first = await submit(publisher, stack.settings.queries_topic, BY_NAME[LONG_RUN], "fu0",
                             tag)
        result.submitted.append(first)
        if await _wait_status(store, first.run_id, settle, (RunStatus.RUNNING,)) is None:
            result.problems.append("the long run did not start")
            return result
        for index, name in enumerate(FOLLOW_UPS[:config.followups], start=1):
            await asyncio.sleep(timing.s(2 * hold / (config.followups + 1)))
            item = await submit(publisher, stack.settings.queries_topic, BY_NAME[name],
                                f"fu{index}", tag, conversation_id=first.conversation_id)
            result.submitted.append(item)
            found = await _wait_status(store, item.run_id, settle, tuple(RunStatus))
            long_run = await store.get_run(first.run_id)
            result.queued_on_arrival[item.ref] = (
                found is not None and found.status is RunStatus.QUEUED
                and long_run is not None and long_run.status is RunStatus.RUNNING)
        unfinished = await wait_all(store, result.submitted, settle)
        result.problems += [f"{u.ref} not finished after {settle:.0f} s" for u in unfinished]
    finally:
        stack.cure_refs("fu0")
        publisher.close()
    await answers.drain()
    await _check_followups(stack, store, result, references, answers)
    return result


async def _check_followups(stack: ChaosStack, store: AgentStore, result: FollowUpResult,
                           references: dict[RefKey, Reference],
                           answers: AnswerCollector) -> None:
    result.runs = [s.ref for s in result.submitted]
    runs = {s.ref: await store.get_run(s.run_id) for s in result.submitted}
    transcript = await store.load_transcript(result.submitted[0].conversation_id)
    parts = segments(transcript)
    result.transcript_order = [p.ref for p in parts]
    verdict = check_conversation(transcript.conversation_id, list(runs.items()), transcript)
    result.order_problems = verdict.order_problems + verdict.overwritten
    started = [ref for ref, run in sorted(runs.items(), key=lambda i: (
        i[1].started_at if i[1] and i[1].started_at else float("inf")))]
    if started != result.runs:
        result.order_problems.append(f"started in the order {started}, asked {result.runs}")
    evidence = model_evidence(stack.ledger_path, set(result.runs),
                              timeout_s=stack.timing.model_timeout_s)
    before = 0
    for item in result.submitted:
        run = runs[item.ref]
        result.statuses[item.ref] = run.status.value if run else "lost"
        result.ends_published[item.ref] = len(answers.by_run.get(item.run_id, []))
        mine = [p for p in parts if p.ref == item.ref]
        seen = evidence.history.get((item.ref, 0))
        result.history_seen[item.ref] = seen == {before}
        result.history_lengths[item.ref] = f"{sorted(seen or ())}/{before}"
        before += sum(len(p.contents) for p in mine)
        if run is None or run.status is not RunStatus.COMPLETED:
            result.answers_ok[item.ref] = False
            continue
        steps = await store.list_steps(item.run_id)
        expected = references.get((item.template.name, tool_outcomes(steps)))
        result.answers_ok[item.ref] = (expected is not None
                                       and normalize_answer(run.answer) == expected.answer)


BUDGET_ENDS = frozenset({"retries_outlasted_budget"})
"""Failure reasons that are the run's budget running out while a step was retried."""


@dataclass
class StormResult:
    """What the storm did to the runs asked during it."""

    storm_s: float = 0.0
    retry_after_s: list[float] = field(default_factory=list)
    runs: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    """By ``status/stop_reason`` (``running`` for a run still unfinished)."""
    failed_reasons: dict[str, int] = field(default_factory=dict)
    answers_ok: int = 0
    answered: int = 0
    stuck: int = 0
    model_429s: int = 0
    max_step_claims: int = 0
    """Most claims any step of a storm run took (the engine fails a run above
    ``max_step_attempts``)."""
    finished_after_storm_s: float = 0.0
    """From the storm's end to the last storm run's end."""
    failures_implied: int = 0
    """Runs the shipped retry bound lets the storm fail: 0 while it is shorter than
    ``step_attempts_span_s`` and the dead-letter time."""
    bound_s: float = 0.0
    submitted: list[Submitted] = field(default_factory=list)

    @property
    def failed(self) -> int:
        """Runs failed by the retries themselves (attempts, dead letter), not by their budget."""
        return sum(n for reason, n in self.failed_reasons.items() if reason not in BUDGET_ENDS)

    @property
    def ended_by_budget(self) -> int:
        return sum(n for reason, n in self.failed_reasons.items() if reason in BUDGET_ENDS)

    @property
    def ok(self) -> bool:
        return self.failed <= self.failures_implied and self.stuck == 0

    def as_dict(self) -> dict[str, Any]:
        found = asdict(self)
        found.pop("submitted")
        return {**found, "failed": self.failed, "ended_by_budget": self.ended_by_budget,
                "ok": self.ok}


async def storm_phase(stack: ChaosStack, config: ChaosConfig,
                      references: dict[RefKey, Reference], tag: str) -> StormResult:
    """Run the storm of the module docstring."""
    timing = stack.timing
    result = StormResult(storm_s=round(timing.s(config.storm_s), 2),
                         retry_after_s=[round(timing.s(r), 3) for r in config.storm_retry_after_s],
                         runs=config.storm_runs)
    result.bound_s = round(min(timing.step_attempts_span_s, timing.dead_letter_after_s), 2)
    result.failures_implied = 0 if result.storm_s < result.bound_s else config.storm_runs
    store = stack.store()
    publisher = PubSubPublisher(stack.settings.project_id)
    stack.configure_front(duplicate=False)
    began = time.monotonic()
    storm_over = began + result.storm_s
    stack.model_storm(",".join(f"429:{r:g}" for r in config.storm_retry_after_s))
    try:
        spacing = 0.8 * result.storm_s / max(1, config.storm_runs)
        for index in range(config.storm_runs):
            await asyncio.sleep(max(0.0, began + index * spacing - time.monotonic()))
            result.submitted.append(await submit(
                publisher, stack.settings.queries_topic, BY_NAME[("ip", "where")[index % 2]],
                f"st{index:03d}", tag))
        await asyncio.sleep(max(0.0, storm_over - time.monotonic()))
    finally:
        stack.model_storm(None)
        publisher.close()
    ended = time.time()
    # After the storm a step waits at most one maximum backoff for its next delivery.
    tail = (timing.policy.maximum_backoff_s + timing.request_timeout_s("model_step")
            + timing.sweep_every_s + timing.s(config.settle_s))
    unfinished = await wait_all(store, result.submitted, tail)
    result.stuck = len(unfinished)
    await _storm_outcomes(stack, store, result, references, ended)
    return result


async def _storm_outcomes(stack: ChaosStack, store: AgentStore, result: StormResult,
                          references: dict[RefKey, Reference], ended: float) -> None:
    outcomes: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    last = ended
    for item in result.submitted:
        run = await store.get_run(item.run_id)
        if run is None:
            outcomes["lost"] += 1
            continue
        outcomes[f"{run.status.value}/{run.stop_reason.value if run.stop_reason else '-'}"] += 1
        last = max(last, run.finished_at or last)
        steps = await store.list_steps(item.run_id)
        result.max_step_claims = max([result.max_step_claims, *(s.attempts for s in steps)])
        if run.status is RunStatus.FAILED:
            reasons[(run.error or "none").split(":", 1)[0]] += 1
        if run.status is RunStatus.COMPLETED and run.stop_reason is StopReason.ANSWERED:
            result.answered += 1
            expected = references.get((item.template.name, tool_outcomes(steps)))
            result.answers_ok += int(expected is not None
                                     and normalize_answer(run.answer) == expected.answer)
    result.outcomes = dict(outcomes)
    result.failed_reasons = dict(reasons)
    result.finished_after_storm_s = round(last - ended, 1)
    evidence = model_evidence(stack.ledger_path, {s.ref for s in result.submitted})
    result.model_429s = evidence.faults.get("429", 0)
