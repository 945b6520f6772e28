"""Per-run verdicts: outcome, answer against the fault-free reference, history, executions.

A run's reference is the fault-free run of the same question that met the same tool outcomes
(tool API faults reach the model by design: a failed weather.gov call becomes a tool error the
model reads, so its answer differs; see :mod:`ackloop.chaos.runner`, calibration). Times in
the sandbox's alert headlines are rounded to the hour and masked before comparing.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from ackloop.chaos.evidence import ModelEvidence
from ackloop.records import RunRecord, RunStatus, StepRecord, StepStatus
from ackloop.store import Transcript

_WHEN = re.compile(r"[A-Z][a-z]{2} \d{1,2} at \d{1,2}:\d{2}[AP]M")


def normalize_answer(text: str | None) -> str:
    """The answer with the sandbox's hour-rounded timestamps masked."""
    return _WHEN.sub("<time>", text or "")


def tool_outcomes(steps: list[StepRecord]) -> tuple[str, ...]:
    """'ok' or 'error' for each tool step, in execution order."""
    return tuple("error" if (s.result or {}).get("is_error") else "ok"
                 for s in sorted(steps, key=lambda s: s.key) if s.kind == "tool")


def roles(transcript: Transcript) -> tuple[str, ...]:
    return tuple(str(c.get("role", "user")) for c in transcript.contents)


@dataclass(frozen=True)
class Reference:
    """What a fault-free run of a question with given tool outcomes looks like."""

    answer: str
    steps: tuple[tuple[str, str], ...]
    roles: tuple[str, ...]


RefKey = tuple[str, tuple[str, ...]]


def reference(run: RunRecord, steps: list[StepRecord], transcript: Transcript) -> Reference:
    return Reference(normalize_answer(run.answer), tuple((s.key, s.name) for s in steps),
                     roles(transcript))


@dataclass
class Verdict:
    """Everything checked about one run."""

    run_id: str
    ref: str
    template: str
    status: str
    reason: str | None = None
    answer_ok: bool | None = None
    history_ok: bool = True
    recorded_duplicates: int = 0
    gaps: int = 0
    model_duplicates: int = 0
    tool_duplicates: int = 0
    duplicates_outside_kills: int = 0
    in_flight_at_kill: int = 0
    in_flight_ran_twice: int = 0
    missing_executions: int = 0
    problems: list[str] = field(default_factory=list)
    finished_at: float | None = None


def _alternates(found: tuple[str, ...]) -> int:
    """Entries that break the user/model alternation (a duplicate or a gap)."""
    expected = ("user", "model")
    return sum(1 for i, role in enumerate(found) if role != expected[i % 2])


def judge(
    run: RunRecord | None,
    steps: list[StepRecord],
    transcript: Transcript,
    *,
    ref: str,
    template: str,
    references: dict[RefKey, Reference],
    model: ModelEvidence,
    tools: Counter[tuple[str, str]],
    killed: set[str],
) -> Verdict:
    """The verdict on one run (``killed``: keys of its steps in flight at a kill)."""
    if run is None:
        return Verdict("?", ref, template, "lost", problems=["no run record"])
    verdict = Verdict(run.run_id, ref, template, run.status.value, finished_at=run.finished_at)
    if run.status is RunStatus.RUNNING and steps:
        last = max(steps, key=lambda s: s.key)
        verdict.problems.append(
            f"not finished: last step {last.key} {last.status.value}, attempts {last.attempts}, "
            f"owner {last.owner}, lease until {last.lease_expires_at:.1f}, "
            f"error {last.last_error!r}")
    elif run.status is RunStatus.RUNNING:
        verdict.problems.append("not finished: no step was ever claimed")
    if run.status is RunStatus.FAILED:
        verdict.reason = (run.error or "").split(":", 1)[0] or None
        if not verdict.reason:
            verdict.problems.append("failed without a recorded reason")
    _check_history(verdict, run, steps, transcript, references, template)
    _check_executions(verdict, run, steps, model, tools, killed)
    return verdict


def _check_history(verdict: Verdict, run: RunRecord, steps: list[StepRecord],
                   transcript: Transcript, references: dict[RefKey, Reference],
                   template: str) -> None:
    found = roles(transcript)
    broken = _alternates(found)
    models = [s for s in steps if s.kind == "model"]
    turns = [s.turn for s in models]
    if turns != list(range(len(turns))):
        verdict.gaps += 1
        verdict.problems.append(f"model turns {turns} are not contiguous")
    if run.status is not RunStatus.COMPLETED:
        verdict.recorded_duplicates += broken
        verdict.history_ok = broken == 0 and not verdict.problems
        return
    expected = references.get((template, tool_outcomes(steps)))
    if expected is None:
        verdict.answer_ok = False
        verdict.problems.append(f"no fault-free reference for tool outcomes "
                                f"{tool_outcomes(steps)}")
        verdict.history_ok = False
        return
    verdict.answer_ok = normalize_answer(run.answer) == expected.answer
    if not verdict.answer_ok:
        verdict.problems.append(f"answer {run.answer!r} differs from the fault-free run's")
    extra = max(0, len(found) - len(expected.roles))
    verdict.recorded_duplicates += max(extra, broken)
    verdict.gaps += max(0, len(expected.roles) - len(found))
    if tuple((s.key, s.name) for s in steps) != expected.steps:
        verdict.problems.append("steps differ from the fault-free run's")
    if any(s.status is not StepStatus.COMPLETED for s in steps):
        verdict.problems.append("a step of a completed run is not completed")
    if transcript.tail != f"{run.run_id}/{models[-1].key if models else ''}":
        verdict.problems.append(f"transcript tail {transcript.tail!r}")
    verdict.history_ok = (verdict.recorded_duplicates == 0 and verdict.gaps == 0
                          and not [p for p in verdict.problems if "answer" not in p])


def _check_executions(verdict: Verdict, run: RunRecord, steps: list[StepRecord],
                      model: ModelEvidence, tools: Counter[tuple[str, str]],
                      killed: set[str]) -> None:
    verdict.in_flight_at_kill = len(killed)
    last = max((s.key for s in steps), default="")
    for step in steps:
        if step.kind == "model":
            count = model.answered[(verdict.ref, step.turn)]
            failed_here = run.status is RunStatus.FAILED and step.key == last
            if count == 0 and not failed_here and run.status is RunStatus.COMPLETED:
                verdict.missing_executions += 1
        else:
            count = tools[(run.run_id, step.key)]
            if count == 0 and run.status is RunStatus.COMPLETED:
                verdict.missing_executions += 1
        extra = max(0, count - 1)
        if step.kind == "model":
            verdict.model_duplicates += extra
        else:
            verdict.tool_duplicates += extra
        if step.key in killed:
            verdict.in_flight_ran_twice += 1 if extra else 0
        else:
            verdict.duplicates_outside_kills += extra
    if verdict.duplicates_outside_kills:
        verdict.problems.append(f"{verdict.duplicates_outside_kills} duplicate execution(s) "
                                "of steps not in flight at a kill")
