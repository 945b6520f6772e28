"""``ackloop chaos`` from start to figures.

One stack, shipped numbers, one time factor. Beside it from the start: the sweep job on its
production schedule (part of the stack), a collector of every end message published, and the
dead-letter path (its clock is the retry policy's). In order: calibration (fault-free
references), the fault phase, the follow-up scenario, the child-runs scenario
(:mod:`ackloop_dev.chaos.children`), the 429 storm. Then every run is checked, every
conversation's transcript too, and Temporal's worker-kill test runs if asked.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ackloop_dev.bench.temporal_side import percentile
from ackloop_dev.chaos.checks import (
    ConversationVerdict,
    Reference,
    RefKey,
    Verdict,
    check_conversation,
    judge,
)
from ackloop_dev.chaos.children import ChildRunsResult, child_runs_scenario
from ackloop_dev.chaos.config import ChaosConfig
from ackloop_dev.chaos.deadletter import dead_letter_phase
from ackloop_dev.chaos.evidence import (
    ModelEvidence,
    model_evidence,
    sandbox_requests,
    secrets_in_logs,
    tool_executions,
)
from ackloop_dev.chaos.phases import FaultPhase, calibrate, fault_phase
from ackloop_dev.chaos.poison import poison_outcome
from ackloop_dev.chaos.proxy import published_again
from ackloop_dev.chaos.scenarios import BUDGET_ENDS, followup_scenario, storm_phase
from ackloop_dev.chaos.sleeps import SleepsResult, sleeps_scenario
from ackloop_dev.chaos.stackup import ChaosStack, start_chaos_stack
from ackloop_dev.chaos.targets import evaluate_targets
from ackloop_dev.chaos.temporal import temporal_worker_kill
from ackloop_dev.chaos.workflow import AnswerCollector, Submitted

_JUDGE_CONCURRENCY = 16
INJECTED_PERMANENT = {"model_malformed_response": "malformed"}
"""Failure reasons an injected model fault explains (reason -> the fault the run was served)."""


def _dist(values: list[float]) -> dict[str, float]:
    return {"n": len(values), "p50": round(percentile(values, 50), 2),
            "p95": round(percentile(values, 95), 2), "max": round(max(values, default=0.0), 2)}


async def _judge_all(stack: ChaosStack, items: list[Submitted], references: dict[RefKey, Reference],
                     model: ModelEvidence, killed: dict[str, set[str]]) -> list[Verdict]:
    store = stack.store()
    tools = tool_executions(stack.logs_dir() / "tool_step.log")
    duplicated = set(stack.front_stats().get("duplicated_runs", ()))
    gate = asyncio.Semaphore(_JUDGE_CONCURRENCY)

    async def one(item: Submitted) -> Verdict:
        async with gate:
            run = await store.runs.get_run(item.run_id)
            steps = await store.steps.list_steps(item.run_id)
            transcript = await store.transcript.load_transcript(run.conversation_id if run
                                                                else item.conversation_id)
        return judge(run, steps, transcript, ref=item.ref, template=item.template.name,
                     references=references, model=model, tools=tools,
                     killed=killed.get(item.run_id, set()), duplicated_runs=duplicated)

    return list(await asyncio.gather(*(one(item) for item in items)))


async def _check_conversations(stack: ChaosStack, items: list[Submitted]
                               ) -> list[ConversationVerdict]:
    store = stack.store()
    by_conversation: dict[str, list[Submitted]] = defaultdict(list)
    for item in items:
        by_conversation[item.conversation_id].append(item)
    gate = asyncio.Semaphore(_JUDGE_CONCURRENCY)

    async def one(conversation_id: str, members: list[Submitted]) -> ConversationVerdict:
        async with gate:
            runs = [(m.ref, await store.runs.get_run(m.run_id)) for m in members]
            transcript = await store.transcript.load_transcript(conversation_id)
        return check_conversation(conversation_id, runs, transcript)

    return list(await asyncio.gather(*(one(c, m) for c, m in by_conversation.items())))


def _recovery(phase: FaultPhase, verdicts: list[Verdict]) -> list[float]:
    finished = {v.run_id: v.finished_at for v in verdicts if v.finished_at is not None}
    return [finished[run] - event.killed_at for event in phase.kills for run in event.runs
            if run in finished]


def _front_faults(before: dict[str, Any], after: dict[str, Any]) -> dict[str, int]:
    delta = Counter(after["counters"])
    delta.subtract(Counter(before["counters"]))
    total: Counter[str] = Counter()
    for key, value in delta.items():
        what = key.partition(":")[2]
        failed = what.startswith("status:") and int(what.split(":")[1]) >= 300
        if failed or what == "unreachable":
            total["non_2xx_answers"] += value
        elif what in ("duplicated_concurrently", "duplicated_sequentially", "pushes"):
            total[what] += value
    return dict(total)


def _sweeps(stats: dict[str, Any]) -> dict[str, Any]:
    return {"passes": stats.get("calls", 0), "failed_passes": stats.get("failures", 0),
            "actions": stats.get("swept", {})}


def _push_totals(stats: dict[str, Any]) -> dict[str, int]:
    totals: Counter[str] = Counter()
    for sub in stats.get("subscriptions", {}).values():
        totals["redeliveries"] += int(sub.get("redeliveries", 0))
        totals["dead_lettered"] += int(sub.get("dead_lettered", 0))
        totals["acked"] += int(sub.get("acked", 0))
        for outcome, count in sub.get("answers", {}).items():
            if not str(outcome).startswith("2"):
                totals["failed_pushes"] += int(count)
    return dict(totals)


def _delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after.get(k, 0) - before.get(k, 0) for k in sorted(set(before) | set(after))}


class _Background:
    """What runs beside the phases: the answers collector and the dead-letter path."""

    def __init__(self, stack: ChaosStack, config: ChaosConfig, tag: str) -> None:
        self.answers = AnswerCollector(stack.answers_subscription)
        self.references: asyncio.Future[dict[RefKey, Reference]] = (
            asyncio.get_running_loop().create_future())
        self.storm_over = asyncio.Event()
        self.answers.start()
        self.dead_letter = (asyncio.create_task(dead_letter_phase(
            stack, tag, self.answers, self.references, self.storm_over))
            if config.dead_letter_phase else None)

    async def close(self) -> None:
        if self.dead_letter is not None and not self.dead_letter.done():
            self.dead_letter.cancel()
            with contextlib.suppress(BaseException):
                await self.dead_letter
        if not self.references.done():
            self.references.cancel()
        with contextlib.suppress(Exception):
            await self.answers.stop()


async def run_chaos(config: ChaosConfig, directory: Path, *, quick: bool = False,
                    command: str = "ackloop chaos", log: Any = print,
                    on_idle: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Run everything; return the figures (JSON-able).

    ``on_idle`` is called once the active phases are over and only the dead-letter path's
    backoff is left to wait for, with the follow-up's and the storm's outcomes: a caller can
    use that wait (most of a quick run's wall time) for other work."""
    began = time.monotonic()
    tag = uuid.uuid4().hex[:6]
    timing = config.timing()
    log(f"[chaos] {timing.describe()}; starting the stack in {directory}")
    stack = await asyncio.to_thread(start_chaos_stack, config, directory, log=log)
    background = _Background(stack, config, tag)
    found: dict[str, Any] = {}
    try:
        log("[chaos] calibration: fault-free reference runs")
        references = await calibrate(stack, tag)
        background.references.set_result(references)
        before = (stack.sandbox_stats(), stack.front_stats())
        log(f"[chaos] fault phase: {config.runs} runs, concurrency {config.concurrency}, "
            f"{config.kills} kills, lease {timing.lease_s:.3g} s")
        phase = await fault_phase(stack, config, tag)
        after = (stack.sandbox_stats(), stack.front_stats())
        log(f"[chaos] fault phase done in {phase.ended - phase.started:.0f} s; follow-up "
            "scenario")
        followup = await followup_scenario(stack, config, references, tag, background.answers)
        children = ChildRunsResult()
        if config.child_runs:
            log(f"[chaos] child runs: {config.child_runs} research-team runs, a kill at each of "
                f"{', '.join(config.child_kill_points)}")
            ahead = stack.front_stats()
            children = await child_runs_scenario(stack, config, tag, background.answers)
            children.model_steps_published_again = published_again(ahead, stack.front_stats())
        sleeps = SleepsResult()
        if config.sleep_runs:
            log(f"[chaos] time: {config.sleep_runs} follow-up runs and a schedule; the task "
                "queue, the tool and model steps killed while they sleep")
            sleeps = await sleeps_scenario(stack, config, tag, background.answers)
        log(f"[chaos] 429 storm: {timing.s(config.storm_s):.0f} s, {config.storm_runs} runs")
        storm = await storm_phase(stack, config, references, tag)
        background.storm_over.set()
        if on_idle is not None:
            on_idle({"followup": followup.as_dict(), "storm": storm.as_dict(),
                     "children": children.as_dict(), "sleeps": sleeps.as_dict(),
                     "elapsed_s": round(time.monotonic() - began, 1)})
        dead_letter: dict[str, Any] = {"skipped": "disabled"}
        poisoned: list[Submitted] = []
        if background.dead_letter is not None:
            log(f"[chaos] waiting for the dead-letter path (dead letter expected after "
                f"{timing.dead_letter_after_s:.0f} s of backoff)")
            letters = await background.dead_letter
            dead_letter, poisoned = letters.as_dict(), letters.submitted
        await background.answers.stop()
        log("[chaos] checking every run and conversation")
        found = await _gather(stack, phase, followup.submitted, storm.submitted, poisoned,
                              references, background.answers)
        found.update(poison=await poison_outcome(stack, phase.poison), dead_letter=dead_letter,
                     followup=followup.as_dict(), storm=storm.as_dict(),
                     children=(children.as_dict() if config.child_runs
                               else {"skipped": "disabled"}),
                     sleeps=(sleeps.as_dict() if config.sleep_runs
                             else {"skipped": "disabled"}),
                     sweeper=_sweeps(stack.sweep_stats()),
                     sandbox=(before[0], after[0]), front=(before[1], after[1]),
                     push=_push_totals(stack.push_stats()),
                     secrets=secrets_in_logs(stack.logs_dir(), stack.canary))
    finally:
        await background.close()
        stack.stop()
    stack_wall = time.monotonic() - began
    temporal: dict[str, Any] = {"skipped": "disabled"}
    if config.temporal:
        log(f"[chaos] Temporal worker-kill test ({config.temporal_kill_runs} runs per mode)")
        temporal = await temporal_worker_kill(config.temporal_kill_runs, directory / "temporal")
    figures = _figures(config, phase, found, temporal)
    figures["wall_s"] = round(time.monotonic() - began, 1)
    figures["stack_wall_s"] = round(stack_wall, 1)
    figures["command"] = command
    figures["targets"] = evaluate_targets(figures, quick=quick)
    return figures


async def _gather(stack: ChaosStack, phase: FaultPhase, followups: list[Submitted],
                  storm: list[Submitted], poisoned: list[Submitted],
                  references: dict[RefKey, Reference], answers: AnswerCollector
                  ) -> dict[str, Any]:
    refs = {s.ref for s in [*phase.runs, *followups, *storm]}
    model = model_evidence(stack.ledger_path, refs, timeout_s=stack.timing.model_timeout_s)
    killed: dict[str, set[str]] = {}
    for event in phase.kills:
        for run_id, key in event.in_flight:
            killed.setdefault(run_id, set()).add(key)
    verdicts = await _judge_all(stack, phase.runs, references, model, killed)
    others = await _judge_all(stack, [*followups, *storm], references, model, {})
    conversations = await _check_conversations(stack, [*phase.runs, *followups, *storm,
                                                       *poisoned])
    return {"verdicts": verdicts, "others": others, "conversations": conversations,
            "model": model, "answered": set(answers.by_run),
            "tools": tool_executions(stack.logs_dir() / "tool_step.log"),
            "run_ids": {v.run_id for v in verdicts}}


def _outcome(verdicts: list[Verdict], answered: set[str], stuck: set[str],
             model: ModelEvidence) -> dict[str, Any]:
    statuses = Counter(v.status for v in verdicts)
    terminal = [v for v in verdicts if v.status in ("completed", "failed", "cancelled")]
    explained = [v for v in terminal if v.status == "failed" and v.reason in INJECTED_PERMANENT
                 and model.faults_by_ref.get(v.ref, Counter())[INJECTED_PERMANENT[v.reason]]]
    # A run stopped by its time budget: at a small time factor the machine's own time (process
    # restarts, emulator latency, the unscaled in-request backoff) counts against a scaled
    # budget, so a run slowed by a kill, a retried step or an injected fault may run out of it.
    # Reported apart, with where its time went; one with none of these causes is unexplained.
    budget_ends = [v for v in terminal if v.stop_reason == "max_seconds"
                   or (v.status == "failed" and v.reason in BUDGET_ENDS)]
    slowed = [v for v in budget_ends if v.in_flight_at_kill or v.retried_steps
              or sum(model.faults_by_ref.get(v.ref, Counter()).values())]
    # Every other run that ended without its answer: under the fault phase's transient faults
    # nothing else explains it but the kills and the duplicates.
    unexplained = [v for v in terminal if v not in explained and v not in slowed
                   and not (v.status == "completed" and v.stop_reason == "answered")]
    return {
        "completed": statuses["completed"],
        "failed": statuses["failed"],
        "failed_reasons": dict(Counter(v.reason or "none" for v in verdicts
                                       if v.status == "failed")),
        "completed_without_answer": dict(Counter(v.stop_reason for v in verdicts
                                                 if v.status == "completed"
                                                 and v.stop_reason != "answered")),
        "failed_by_injected_model_fault": len(explained),
        "ended_by_budget": len(budget_ends),
        "ended_by_budget_slowed": len(slowed),
        "ended_by_crash_or_duplicate": len(unexplained),
        "timelines": [f"{v.ref} {v.run_id}: {v.timeline}" for v in terminal
                      if v.timeline and v not in explained][:20],
        "stuck": sum(1 for v in verdicts if v.run_id in stuck
                     or v.status in ("running", "queued")),
        "lost": sum(1 for v in verdicts if v.status == "lost")
        + sum(1 for v in terminal if v.run_id not in answered),
        "no_answer_message": sum(1 for v in terminal if v.run_id not in answered),
    }


def _figures(config: ChaosConfig, phase: FaultPhase, found: dict[str, Any],
             temporal: dict[str, Any]) -> dict[str, Any]:
    timing = config.timing()
    verdicts: list[Verdict] = found["verdicts"]
    others: list[Verdict] = found["others"]
    everyone = [*verdicts, *others]
    model: ModelEvidence = found["model"]
    tools = found["tools"]
    conversations: list[ConversationVerdict] = found["conversations"]
    sandbox_before, sandbox_after = (sandbox_requests(s) for s in found["sandbox"])
    completed = [v for v in verdicts if v.status == "completed" and v.answer_ok is not None]
    recovery = _recovery(phase, verdicts)
    storm, followup, dead_letter = found["storm"], found["followup"], found["dead_letter"]
    dl_runs = dead_letter.get("runs", {})
    return {
        "config": asdict(config),
        "timing": timing.as_dict(),
        "cpus": os.cpu_count(),
        "lease_seconds": round(timing.lease_s, 4),
        "runs": len(verdicts),
        "fault_phase_s": round(phase.ended - phase.started, 1),
        "faults": {
            "deliveries": _front_faults(*found["front"]),
            "push_delivery": found["push"],
            "kills": dict(Counter(e.point for e in phase.kills)),
            "kills_not_fired": phase.kills_not_fired,
            "unexpected_exits": phase.unexpected_exits,
            "model": dict(model.faults),
            "model_bursts": len(phase.bursts),
            "tool": {k: sandbox_after[k] - sandbox_before[k]
                     for k in ("nws_500", "ipapi_timeouts")},
            "poison": {"published": len(phase.poison.published),
                       "posted_to_endpoints": len(phase.poison.direct)
                       + len(phase.poison.direct_status)},
        },
        "outcome": _outcome(verdicts, found["answered"], {s.run_id for s in phase.stuck}, model),
        "all_runs": {
            "runs": len(everyone) + len(dl_runs),
            "lost": sum(1 for v in everyone if v.status == "lost"
                        or (v.status in ("completed", "failed", "cancelled")
                            and v.run_id not in found["answered"]))
            + sum(1 for r in dl_runs.values() if r.get("status") and not r.get("ends_published")),
            "stuck": sum(1 for v in everyone if v.status in ("running", "queued"))
            + sum(1 for r in dl_runs.values() if r.get("status") is None),
            "conversations": len(conversations),
            "conversations_with_follow_ups": sum(1 for c in conversations if len(c.runs) > 1),
            "transcript_overwrites": sum(len(c.overwritten) for c in conversations),
            "conversation_order_problems": sum(len(c.order_problems) for c in conversations),
            "duplicate_recorded_steps": sum(v.recorded_duplicates for v in others),
            "duplicate_executions": sum(v.model_duplicates + v.tool_duplicates for v in others),
        },
        "checks": {
            "answers_equal_fault_free": sum(1 for v in completed if v.answer_ok),
            "answers_compared": len(completed),
            "history_ok": sum(1 for v in verdicts if v.history_ok),
            "duplicate_recorded_steps": sum(v.recorded_duplicates for v in verdicts),
            "history_gaps": sum(v.gaps for v in verdicts),
            "duplicate_executions": {
                "model": sum(v.model_duplicates for v in verdicts),
                "tool": sum(v.tool_duplicates for v in verdicts),
                "outside_kills": sum(v.duplicates_outside_kills for v in verdicts),
                "overlapping_unclaimed_calls": sum(v.overlapping_calls for v in verdicts),
                "model_steps_published_again": published_again(*found["front"]),
            },
            "steps_in_flight_at_kill": sum(v.in_flight_at_kill for v in verdicts),
            "in_flight_ran_twice": sum(v.in_flight_ran_twice for v in verdicts),
            "missing_executions": sum(v.missing_executions for v in verdicts),
            "model_context_anomalies": len(model.bad_context),
            "secrets_in_logs": found["secrets"],
            "secrets_in_model_context": model.secrets_in_context,
            "tool_requests": {
                "sandbox": sandbox_after["requests"] - sandbox_before["requests"],
                "logged_executions": sum(n for (run, _), n in tools.items()
                                         if run in found["run_ids"]),
            },
            "poison": found["poison"],
        },
        "recovery": {
            "ackloop": _dist(recovery),
            "ackloop_production_equivalent": _dist([r / timing.factor for r in recovery]),
            "restart_s": _dist([e.restart_s for e in phase.kills]),
            "temporal": {mode: temporal[mode]["kill_to_complete_s"] | {
                "completed": temporal[mode]["completed"], "runs": temporal[mode]["runs"],
                "in_flight_executions": temporal[mode]["in_flight_executions"],
                "settings": temporal[mode]["settings"]}
                for mode in ("seed", "tuned") if mode in temporal},
            "temporal_skipped": temporal.get("skipped"),
        },
        "followup": followup,
        "children": found.get("children", {"skipped": "not run"}),
        "sleeps": found.get("sleeps", {"skipped": "not run"}),
        "storm": storm,
        "dead_letter": dead_letter,
        "sweeper": found["sweeper"],
        "problems": ([f"{v.ref} {v.run_id}: {p}" for v in everyone for p in v.problems]
                     + [f"conversation {c.conversation_id}: {p}" for c in conversations
                        for p in [*c.overwritten, *c.order_problems]])[:30],
    }
