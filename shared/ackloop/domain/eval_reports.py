"""An eval's report: each case's run, checks and spend, the scores, and what the eval cost.

:class:`EvalReport` is what ``ackloop eval`` writes as JSON (``--json``), what the inspector's
eval page shows and what a later eval compares itself with (``--baseline``):
:func:`compare` says what got worse.
"""

from __future__ import annotations

import statistics
from typing import Any, Literal

from pydantic import BaseModel, Field


class CheckResult(BaseModel):
    """One check of a case: an assertion (passed or not), a score in [0, 1] or a label."""

    name: str
    kind: Literal["assertion", "score", "label"]
    value: bool | float | str
    reason: str | None = None

    @property
    def failed(self) -> bool:
        return self.kind == "assertion" and self.value is False


class CaseResult(BaseModel):
    """One repetition of one case: its run and how it was checked."""

    name: str
    repetition: int = 1
    run_id: str | None = None
    link: str | None = None
    """The run in the inspector, when the target has one."""
    agent: str = ""
    question: str = ""
    status: str | None = None
    answer: Any = None
    error: str | None = None
    """Why the case could not be checked (its run did not end in time, a target's error)."""
    passed: bool = False
    score: float = 0.0
    checks: list[CheckResult] = Field(default_factory=list)
    trajectory: list[str] = Field(default_factory=list)
    """The tool calls made, each ``name(args)``, a child run's with where it ran."""
    cost_usd: float = 0.0
    model_calls: int = 0
    tool_calls: int = 0
    wall_seconds: float = 0.0
    replay: bool = False
    """Replayed from a recording: no model called, no tool run."""

    def failures(self) -> list[CheckResult]:
        return [c for c in self.checks if c.failed]


class Summary(BaseModel):
    cases: int = 0
    runs: int = 0
    passed: int = 0
    """Runs whose every assertion held."""
    failed: int = 0
    errors: int = 0
    """Runs that could not be checked (see each case's ``error``)."""
    pass_rate: float = 0.0
    score: float = 0.0
    """The mean of the runs' scores."""
    pass_at_k: float = 0.0
    """The share of cases that passed at least once in their ``repeat`` runs."""
    pass_all_k: float = 0.0
    """The share of cases that passed in every one of their runs (pass^k)."""
    cost_usd: float = 0.0
    """What the cases' runs cost (a replayed case's nothing: it calls no model)."""
    replayed: int = 0
    """Runs replayed from a recording (no model called, no tool run)."""
    eval_cost_usd: float = 0.0
    """What the eval itself cost beyond its runs: its judges' model calls, and the documents
    it read to follow its runs and the queries it published, where the target counts them."""
    judge_calls: int = 0
    eval_firestore_reads: int = 0
    eval_firestore_writes: int = 0
    eval_pubsub_bytes: int = 0
    model_calls: int = 0
    tool_calls: int = 0
    wall_seconds: float = 0.0
    """From the eval's start to its end."""
    slowest_case_seconds: float = 0.0


class EvalReport(BaseModel):
    eval_id: str
    name: str
    dataset: str = ""
    target: str = ""
    repeat: int = 1
    concurrency: int = 1
    started_at: float = 0.0
    finished_at: float = 0.0
    summary: Summary = Summary()
    cases: list[CaseResult] = Field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.summary.runs > 0 and self.summary.passed == self.summary.runs


def summarize(cases: list[CaseResult], *, eval_cost_usd: float = 0.0, judge_calls: int = 0,
              wall_seconds: float = 0.0) -> Summary:
    """The summary of ``cases`` (each repetition a case result)."""
    groups: dict[str, list[bool]] = {}
    for case in cases:
        groups.setdefault(case.name, []).append(case.passed)
    runs = len(cases)
    return Summary(
        cases=len(groups), runs=runs,
        passed=sum(c.passed for c in cases),
        failed=sum(not c.passed and c.error is None for c in cases),
        errors=sum(c.error is not None for c in cases),
        pass_rate=sum(c.passed for c in cases) / runs if runs else 0.0,
        score=statistics.fmean(c.score for c in cases) if cases else 0.0,
        pass_at_k=sum(any(g) for g in groups.values()) / len(groups) if groups else 0.0,
        pass_all_k=sum(all(g) for g in groups.values()) / len(groups) if groups else 0.0,
        cost_usd=sum(c.cost_usd for c in cases if not c.replay),
        replayed=sum(c.replay for c in cases), eval_cost_usd=eval_cost_usd,
        judge_calls=judge_calls,
        model_calls=sum(c.model_calls for c in cases),
        tool_calls=sum(c.tool_calls for c in cases),
        wall_seconds=wall_seconds,
        slowest_case_seconds=max((c.wall_seconds for c in cases), default=0.0),
    )


def case_score(checks: list[CheckResult], error: str | None) -> float:
    """The mean of a case's assertions (1 or 0) and scores; 0 when it could not be checked."""
    if error is not None:
        return 0.0
    values = [float(c.value) for c in checks if c.kind in ("assertion", "score")
              and isinstance(c.value, bool | int | float)]
    return statistics.fmean(values) if values else 1.0


def compare(report: EvalReport, baseline: EvalReport, *, score_drop: float = 0.0,
            cost_increase: float | None = None) -> list[str]:
    """What got worse than ``baseline``, one line each (empty: nothing did).

    The score may drop by at most ``score_drop`` (absolute, 0 to 1); the runs' cost may grow
    by at most ``cost_increase`` (a share: 0.1 is 10%; None: not compared). A case that passed
    in the baseline and fails now is a regression, named."""
    now, then = report.summary, baseline.summary
    problems = []
    if now.score < then.score - score_drop - 1e-9:
        problems.append(f"score {now.score:.3f} is below the baseline's {then.score:.3f}"
                        + (f" by more than {score_drop:g}" if score_drop else ""))
    if now.pass_rate < then.pass_rate - 1e-9:
        problems.append(f"pass rate {now.pass_rate:.1%} is below the baseline's "
                        f"{then.pass_rate:.1%}")
    if cost_increase is not None and now.cost_usd > then.cost_usd * (1 + cost_increase) + 1e-12:
        problems.append(f"cost ${now.cost_usd:.6f} is above the baseline's "
                        f"${then.cost_usd:.6f} by more than {cost_increase:.0%}")
    before = {(c.name, c.repetition): c.passed for c in baseline.cases}
    for case in report.cases:
        if before.get((case.name, case.repetition)) and not case.passed:
            reasons = "; ".join(f.name for f in case.failures()) or case.error or "failed"
            problems.append(f"case {case.name} [{case.repetition}] passed in the baseline, "
                            f"fails now ({reasons})")
    return problems
