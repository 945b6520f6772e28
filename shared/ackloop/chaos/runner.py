"""``ackloop chaos`` from start to figures: stack, calibration, faults, checks, Temporal side."""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ackloop.bench.temporal_side import percentile
from ackloop.chaos.checks import Reference, RefKey, Verdict, judge
from ackloop.chaos.config import ChaosConfig
from ackloop.chaos.deadletter import dead_letter_phase
from ackloop.chaos.evidence import (
    model_evidence,
    sandbox_requests,
    secrets_in_logs,
    tool_executions,
)
from ackloop.chaos.phases import FaultPhase, calibrate, fault_phase
from ackloop.chaos.poison import poison_outcome
from ackloop.chaos.stackup import ChaosStack, start_chaos_stack
from ackloop.chaos.targets import evaluate_targets
from ackloop.chaos.temporal import temporal_worker_kill
from ackloop.chaos.workflow import Submitted

_JUDGE_CONCURRENCY = 16


def _dist(values: list[float]) -> dict[str, float]:
    return {"n": len(values), "p50": round(percentile(values, 50), 2),
            "p95": round(percentile(values, 95), 2), "max": round(max(values, default=0.0), 2)}


async def _judge_all(stack: ChaosStack, phase: FaultPhase,
                     references: dict[RefKey, Reference]) -> list[Verdict]:
    store = stack.store()
    refs = {s.ref for s in phase.runs}
    model = model_evidence(stack.ledger_path, refs)
    tools = tool_executions(stack.logs_dir() / "tool_step.log")
    killed: dict[str, set[str]] = {}
    for event in phase.kills:
        for run_id, key in event.in_flight:
            killed.setdefault(run_id, set()).add(key)
    gate = asyncio.Semaphore(_JUDGE_CONCURRENCY)

    async def one(item: Submitted) -> Verdict:
        async with gate:
            run = await store.get_run(item.run_id)
            steps = await store.list_steps(item.run_id)
            transcript = await store.load_transcript(run.conversation_id if run else item.run_id)
        return judge(run, steps, transcript, ref=item.ref, template=item.template.name,
                     references=references, model=model, tools=tools,
                     killed=killed.get(item.run_id, set()))

    return list(await asyncio.gather(*(one(item) for item in phase.runs)))


def _recovery(phase: FaultPhase, verdicts: list[Verdict]) -> list[float]:
    finished = {v.run_id: v.finished_at for v in verdicts if v.finished_at is not None}
    return [finished[run] - event.killed_at for event in phase.kills for run in event.runs
            if run in finished]


def _proxy_faults(before: dict[str, Any], after: dict[str, Any]) -> dict[str, int]:
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


async def run_chaos(config: ChaosConfig, directory: Path, *, quick: bool = False,
                    command: str = "ackloop chaos", log: Any = print) -> dict[str, Any]:
    """Run everything; return the figures (JSON-able)."""
    began = time.monotonic()
    tag = uuid.uuid4().hex[:6]
    log(f"[chaos] starting the stack in {directory}")
    stack = await asyncio.to_thread(start_chaos_stack, config, directory, log=log)
    try:
        log("[chaos] calibration: fault-free reference runs")
        references = await calibrate(stack, tag)
        sandbox_before, proxy_before = stack.sandbox_stats(), stack.proxy_stats()
        log(f"[chaos] fault phase: {config.runs} runs, concurrency {config.concurrency}, "
            f"{config.kills} kills, lease {config.lease_seconds:g} s")
        phase = await fault_phase(stack, config, tag)
        sandbox_after, proxy_after = stack.sandbox_stats(), stack.proxy_stats()
        log(f"[chaos] fault phase done in {phase.ended - phase.started:.0f} s; checking runs")
        verdicts = await _judge_all(stack, phase, references)
        answers = [json.loads(raw) for raw in stack.pull_answers() if raw.startswith(b"{")]
        poison = await poison_outcome(stack, phase.poison)
        dead_letter: dict[str, Any] = {"skipped": "disabled"}
        if config.dead_letter_phase:
            log("[chaos] dead-letter phase")
            dead_letter = (await dead_letter_phase(stack, references, tag)).as_dict()
        secrets = secrets_in_logs(stack.logs_dir(), stack.canary)
        context_secrets = model_evidence(stack.ledger_path, {s.ref for s in phase.runs}
                                         ).secrets_in_context
    finally:
        stack.stop()
    stack_wall = time.monotonic() - began
    temporal: dict[str, Any] = {"skipped": "disabled"}
    if config.temporal:
        log(f"[chaos] Temporal worker-kill test ({config.temporal_kill_runs} runs per mode)")
        temporal = await temporal_worker_kill(config.temporal_kill_runs, directory / "temporal")
    figures = _figures(config, phase, verdicts, answers, poison, dead_letter, temporal,
                       secrets, context_secrets, sandbox_before, sandbox_after,
                       proxy_before, proxy_after, stack)
    figures["wall_s"] = round(time.monotonic() - began, 1)
    figures["stack_wall_s"] = round(stack_wall, 1)
    figures["command"] = command
    figures["targets"] = evaluate_targets(figures, quick=quick)
    return figures


def _figures(config: ChaosConfig, phase: FaultPhase, verdicts: list[Verdict],
             answers: list[dict[str, Any]], poison: dict[str, int], dead_letter: dict[str, Any],
             temporal: dict[str, Any], secrets: dict[str, int], context_secrets: int,
             sandbox_before: dict[str, dict[str, int]], sandbox_after: dict[str, dict[str, int]],
             proxy_before: dict[str, Any], proxy_after: dict[str, Any],
             stack: ChaosStack) -> dict[str, Any]:
    model = model_evidence(stack.ledger_path, {s.ref for s in phase.runs})
    tools = tool_executions(stack.logs_dir() / "tool_step.log")
    run_ids = {v.run_id for v in verdicts}
    sb_after, sb_before = sandbox_requests(sandbox_after), sandbox_requests(sandbox_before)
    answered = {a.get("run_id") for a in answers}
    statuses = Counter(v.status for v in verdicts)
    terminal = [v for v in verdicts if v.status in ("completed", "failed", "cancelled")]
    stuck = {s.run_id for s in phase.stuck}
    completed = [v for v in verdicts if v.status == "completed"]
    return {
        "config": asdict(config),
        "cpus": os.cpu_count(),
        "lease_seconds": config.lease_seconds,
        "runs": len(verdicts),
        "fault_phase_s": round(phase.ended - phase.started, 1),
        "faults": {
            "deliveries": _proxy_faults(proxy_before, proxy_after),
            "kills": dict(Counter(e.point for e in phase.kills)),
            "kills_not_fired": phase.kills_not_fired,
            "unexpected_exits": phase.unexpected_exits,
            "model": dict(model.faults),
            "model_bursts": len(phase.bursts),
            "tool": {k: sb_after[k] - sb_before[k] for k in ("nws_500", "ipapi_timeouts")},
            "poison": {"published": len(phase.poison.published),
                       "posted_to_endpoints": len(phase.poison.direct)
                       + len(phase.poison.direct_status)},
        },
        "outcome": {
            "completed": statuses["completed"],
            "failed": statuses["failed"],
            "failed_reasons": dict(Counter(v.reason or "none" for v in verdicts
                                           if v.status == "failed")),
            "stuck": sum(1 for v in verdicts if v.run_id in stuck or v.status == "running"),
            "lost": sum(1 for v in verdicts if v.status == "lost")
            + sum(1 for v in terminal if v.run_id not in answered),
            "no_answer_message": sum(1 for v in terminal if v.run_id not in answered),
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
            },
            "steps_in_flight_at_kill": sum(v.in_flight_at_kill for v in verdicts),
            "in_flight_ran_twice": sum(v.in_flight_ran_twice for v in verdicts),
            "missing_executions": sum(v.missing_executions for v in verdicts),
            "model_context_anomalies": len(model.bad_context),
            "secrets_in_logs": secrets,
            "secrets_in_model_context": context_secrets,
            "tool_requests": {
                "sandbox": sb_after["requests"] - sb_before["requests"],
                "logged_executions": sum(n for (run, _), n in tools.items() if run in run_ids),
            },
            "poison": poison,
        },
        "recovery": {
            "ackloop": _dist(_recovery(phase, verdicts)),
            "restart_s": _dist([e.restart_s for e in phase.kills]),
            "temporal": {mode: temporal[mode]["kill_to_complete_s"] | {
                "completed": temporal[mode]["completed"], "runs": temporal[mode]["runs"],
                "in_flight_executions": temporal[mode]["in_flight_executions"],
                "settings": temporal[mode]["settings"]}
                for mode in ("seed", "tuned") if mode in temporal},
            "temporal_skipped": temporal.get("skipped"),
        },
        "dead_letter": dead_letter,
        "problems": [f"{v.ref} {v.run_id}: {p}" for v in verdicts for p in v.problems][:30],
    }
