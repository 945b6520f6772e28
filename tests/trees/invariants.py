"""The checks made on a settled tree, from what the engine recorded (runs, steps, their usage
and cost) and what the tools and the model counted; each failure names the seed and the run
(by its question) and the step.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field

from ackloop.domain.cost import Spend, price
from ackloop.domain.records import RunRecord, RunStatus, StepRecord, StepStatus
from tests.trees.plan import CHILD, RETRY_SAFE, Plan
from tests.trees.scheduler import Scheduler

USD_TOLERANCE = 1e-9


@dataclass
class Tree:
    """The settled tree as recorded: every run, by question, with its steps."""

    runs: dict[str, RunRecord]
    steps: dict[str, list[StepRecord]]
    root: RunRecord

    def under(self, run: RunRecord) -> list[RunRecord]:
        """The runs below ``run``, at any depth."""
        kids = [r for r in self.runs.values() if r.parent_run_id == run.run_id]
        return kids + [d for k in kids for d in self.under(k)]


@dataclass
class Report:
    seed: int
    failures: list[str] = field(default_factory=list)
    notes: Counter[str] = field(default_factory=Counter)
    """What happened, counted (for the many-seed summary)."""

    def fail(self, text: str) -> None:
        self.failures.append(f"seed {self.seed}: {text}")


async def read_tree(scheduler: Scheduler, root_id: str) -> Tree:
    store = scheduler.world.deps.store
    runs = {r.text: r for r in await scheduler.runs()}
    steps = {q: await store.steps.list_steps(r.run_id) for q, r in runs.items()}
    root = next(r for r in runs.values() if r.run_id == root_id)
    return Tree(runs, steps, root)


def check_ended(tree: Tree, scheduler: Scheduler, report: Report) -> None:
    """Every run ended; no wait outlived its deadline; no child outlived its parent."""
    for question, run in tree.runs.items():
        if not run.status.terminal:
            waiting = [s.key for s in tree.steps[question] if s.status is StepStatus.WAITING]
            report.fail(f"[ended] run {question} never ended: {run.status.value}, "
                        f"waiting {waiting}")
        report.notes[f"run {run.status.value}"] += 1
    for text in (*scheduler.observed.late, *scheduler.observed.orphans,
                 *scheduler.observed.changed):
        report.fail(text)
    for step_run, steps in tree.steps.items():
        for step in steps:
            d, w = step.decision, step.waiting
            if d is not None and w is not None and d.by not in ("deadline", "cancel") and (
                    d.at > w.deadline):
                report.fail(f"[deadline] run {step_run} step {step.key}: {d.decision} by "
                            f"{d.by} accepted {d.at - w.deadline:.0f} s after its deadline")


def check_ends_published(tree: Tree, scheduler: Scheduler, report: Report) -> None:
    """Every run's end went to the answers topic (at least once)."""
    published = {json.loads(a).get("run_id") for a in scheduler.answers
                 if json.loads(a).get("event") != "waiting"}
    for question, run in tree.runs.items():
        if run.status.terminal and run.run_id not in published:
            report.fail(f"[published] run {question} ended {run.status.value}; its end was "
                        "never published")


def check_calls(tree: Tree, scheduler: Scheduler, report: Report) -> None:
    """Every call resolved once; every side effect at most once (exactly once when the call
    completed with the tool's result); nothing run that was rejected."""
    ran = scheduler.world.effects.ran
    killed_after_call = Counter((r, s) for r, s, p in scheduler.observed.kills
                                if p == "tool:after_call")
    for bad in scheduler.world.model.bad_histories:
        report.fail(f"[resolved] a model request's history does not answer each call once: {bad}")
    for question, run in tree.runs.items():
        node = scheduler.world.plan.nodes[question]
        by_turn = {(s.turn, s.index): s for s in tree.steps[question] if s.kind == "tool"}
        for turn, calls in enumerate(node.turns):
            for index, call in enumerate(calls):
                step = by_turn.get((turn, index))
                _check_call(run, call.key, call.kind, step, ran[call.key],
                            killed_after_call[(run.run_id, step.key if step else "")], report)
        if run.status is RunStatus.COMPLETED and run.answer == f"answer of {question}":
            missing = [f"{t}.{i}" for t, calls in enumerate(node.turns)
                       for i in range(len(calls)) if (t, i) not in by_turn
                       or by_turn[(t, i)].status is not StepStatus.COMPLETED]
            if missing:
                report.fail(f"[resolved] run {question} answered with calls {missing} unresolved")


def _check_call(run: RunRecord, key: str, kind: str, step: StepRecord | None, ran: int,
                kills: int, report: Report) -> None:
    if kind == CHILD:
        return
    allowed = 1 + (kills if kind == RETRY_SAFE else 0)
    if ran > allowed:
        report.fail(f"[effect] call {key} ({kind}): its side effect ran {ran} times ({kills} kills "
                    "after the call)")
    if step is None:
        if ran:
            report.fail(f"[effect] call {key} ({kind}) ran with no step recorded")
        return
    report.notes[f"call {kind} {step.status.value}"] += 1
    decision = step.decision.decision if step.decision else None
    if decision == "reject" and ran:
        report.fail(f"[effect] call {key} ({kind}) ran though rejected by {step.decision.by}")  # type: ignore[union-attr]
    response = (step.result or {}).get("response") or {}
    if step.status is StepStatus.COMPLETED and "result" in response and ran == 0:
        report.fail(f"[effect] call {key} ({kind}) completed with a result its tool never made")


def own_model_calls(steps: list[StepRecord]) -> int:
    return sum(s.usage.model_calls for s in steps if s.kind == "model")


def own_usd(run: RunRecord, steps: list[StepRecord]) -> float:
    """What the run's own deliveries recorded: its ingest, each step's cost without its
    children's part, and the recorded waits of steps that never completed."""
    usd = run.ingest_cost.usd if run.ingest_cost else 0.0
    for step in steps:
        if step.cost is not None:
            usd += step.cost.usd - step.cost.children_usd
        elif step.wait_cost is not None:
            usd += step.wait_cost.usd
    return usd


def check_ledger(tree: Tree, scheduler: Scheduler, report: Report) -> None:
    """The root's usage and cost count every model call and every dollar the tree's steps
    recorded; no model call was made twice for a step unless a kill or a failure made it."""
    runs = [tree.root, *tree.under(tree.root)]
    recorded = sum(own_model_calls(tree.steps[r.text]) for r in runs)
    if tree.root.usage.model_calls != recorded:
        detail = {r.text: (own_model_calls(tree.steps[r.text]), r.usage.model_calls,
                           r.status.value) for r in runs}
        report.fail(f"[ledger] root counts {tree.root.usage.model_calls} model calls, the "
                    f"tree's steps recorded {recorded}: (own, run's, status) {detail}")
    usd = sum(own_usd(r, tree.steps[r.text]) for r in runs)
    counted = tree.root.cost.usd if tree.root.cost else 0.0
    if abs(counted - usd) > USD_TOLERANCE:
        report.fail(f"[ledger-usd] root counts ${counted:.9f}, the tree's steps recorded "
                    f"${usd:.9f} (uncounted ${usd - counted:.9f})")
    check_served(tree, scheduler, report)
    model = scheduler.world.model
    killed = Counter((r, s) for r, s, p in scheduler.observed.kills if p == "model:after_call")
    for question, run in tree.runs.items():
        recorded_turns = {s.turn for s in tree.steps[question] if s.kind == "model"
                          and s.status is StepStatus.COMPLETED}
        for (asked, turn), times in model.answered.items():
            if asked != question:
                continue
            allowed = 1 + killed[(run.run_id, f"{turn:04d}-model")]
            if times > allowed:
                report.fail(f"[model-twice] run {question} turn {turn}: the model answered "
                            f"{times} times ({allowed - 1} kills after the call)")
            if turn not in recorded_turns:
                report.notes["model answer never recorded"] += times
            report.notes["model answers"] += times


def answered_steps(steps: list[StepRecord]) -> list[int]:
    """The turns whose model step recorded the model's answer (not a stop before the call,
    nor a failure)."""
    return [s.turn for s in steps if s.kind == "model" and s.status is StepStatus.COMPLETED
            and not {"stop_reason", "error"} & set(s.result or {})]


def check_served(tree: Tree, scheduler: Scheduler, report: Report) -> None:
    """The root's model calls and Gemini dollars against what the fake model served, priced
    here (not what the steps recorded, so money a step never records is seen): one paid
    answer for each model step that recorded one, at the figures the model reported."""
    served = scheduler.world.model.served
    calls, usd = 0, 0.0
    for question, run in tree.runs.items():
        for turn in answered_steps(tree.steps[question]):
            usage = served.get((question, turn))
            if usage is None:
                report.fail(f"[ledger-served] run {question} turn {turn} recorded an answer "
                            "the model never served")
                continue
            calls += 1
            usd += price(Spend(model=run.model, prompt_tokens=usage.prompt_tokens,
                               output_tokens=usage.output_tokens,
                               cached_tokens=usage.cached_tokens)).gemini_usd
    if tree.root.usage.model_calls != calls:
        report.fail(f"[ledger-served] root counts {tree.root.usage.model_calls} model calls, "
                    f"the model served {calls} answers the steps kept")
    counted = tree.root.cost.gemini_usd if tree.root.cost else 0.0
    if abs(counted - usd) > USD_TOLERANCE:
        report.fail(f"[ledger-served] root counts ${counted:.9f} of Gemini, the answers the "
                    f"model served cost ${usd:.9f}")


async def check(scheduler: Scheduler, root_id: str) -> Report:
    report = Report(scheduler.world.plan.seed)
    tree = await read_tree(scheduler, root_id)
    check_ended(tree, scheduler, report)
    check_calls(tree, scheduler, report)
    check_ledger(tree, scheduler, report)
    check_ends_published(tree, scheduler, report)
    report.notes.update(scheduler.observed.counts)
    report.notes["runs"] += len(tree.runs)
    return report


def describe(plan: Plan) -> str:
    return "; ".join(f"{q} ({n.agent}): " + " | ".join(
        ",".join(c.kind for c in turn) for turn in n.turns) for q, n in plan.nodes.items())
