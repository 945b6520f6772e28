"""Per-run verdicts: outcome, answer against the fault-free reference, history, executions;
and per conversation: runs in order, no turn overwritten.

A run's reference is the fault-free run of the same question that met the same tool outcomes
(tool API faults reach the model by design: a failed weather.gov call becomes a tool error the
model reads, so its answer differs; see :mod:`ackloop_dev.chaos.phases`, calibration). Times in
the sandbox's alert headlines are rounded to the hour and masked before comparing.

A run's part of its conversation's transcript (its *segment*) starts at its question, which
names the run (``(ref ...)``), and runs to the next question. The transcript check is what an
overwrite would break: afterwards, every completed run's segment is in its conversation's
transcript exactly once, whole, ending in the run's answer, and the segments stand in the order
the runs started, which is the order they were asked in.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field

from ackloop.domain.jsondict import JsonDict
from ackloop.domain.records import RunRecord, RunStatus, StepRecord, StepStatus, StopReason
from ackloop.store import Transcript
from ackloop_dev.chaos.evidence import ModelEvidence
from ackloop_dev.chaos.workload import question_text, reference_of

_WHEN = re.compile(r"[A-Z][a-z]{2} \d{1,2} at \d{1,2}:\d{2}[AP]M")


def normalize_answer(text: str | None) -> str:
    """The answer with the sandbox's hour-rounded timestamps masked."""
    return _WHEN.sub("<time>", text or "")


def tool_outcomes(steps: list[StepRecord]) -> tuple[str, ...]:
    """'ok' or 'error' for each tool step, in execution order."""
    return tuple("error" if (s.result or {}).get("is_error") else "ok"
                 for s in sorted(steps, key=lambda s: s.key) if s.kind == "tool")


def roles(contents: list[JsonDict]) -> tuple[str, ...]:
    return tuple(str(c.get("role", "user")) for c in contents)


@dataclass(frozen=True)
class Segment:
    """One run's part of a transcript: its question and what followed, up to the next one."""

    ref: str | None
    contents: list[JsonDict]


def segments(transcript: Transcript) -> list[Segment]:
    """The transcript cut at every question."""
    found: list[Segment] = []
    for content in transcript.contents:
        text = question_text(content)
        if text is not None or not found:
            found.append(Segment(reference_of(text or ""), []))
        found[-1].contents.append(content)
    return found


def segments_of(transcript: Transcript, ref: str) -> list[Segment]:
    return [s for s in segments(transcript) if s.ref == ref]


def final_text(contents: list[JsonDict]) -> str | None:
    """The text of the last model content (the answer of a run that ended answering)."""
    for content in reversed(contents):
        if content.get("role") == "model":
            texts = [str(p["text"]) for p in content.get("parts") or []
                     if p.get("text") and not p.get("thought")]
            return "".join(texts)
    return None


@dataclass(frozen=True)
class Reference:
    """What a fault-free run of a question with given tool outcomes looks like."""

    answer: str
    steps: tuple[tuple[str, str], ...]
    roles: tuple[str, ...]


RefKey = tuple[str, tuple[str, ...]]


def reference(run: RunRecord, steps: list[StepRecord], transcript: Transcript, ref: str
              ) -> Reference:
    found = segments_of(transcript, ref)
    return Reference(normalize_answer(run.answer), tuple((s.key, s.name) for s in steps),
                     roles(found[0].contents) if found else ())


@dataclass
class Verdict:
    """Everything checked about one run."""

    run_id: str
    ref: str
    template: str
    status: str
    reason: str | None = None
    stop_reason: str | None = None
    answer_ok: bool | None = None
    history_ok: bool = True
    recorded_duplicates: int = 0
    gaps: int = 0
    model_duplicates: int = 0
    tool_duplicates: int = 0
    duplicates_outside_kills: int = 0
    overlapping_calls: int = 0
    """Extra executions of steps run unclaimed (a streamed model step that claimed at its first
    text included: ``StepRecord.unclaimed``) in a run whose pushes the front duplicated: the
    accepted cost of running a step unclaimed under duplicate deliveries
    (docs/concepts/life-of-a-step.md, "Unclaimed steps"); the step is still recorded once, and a
    delivery that reads it recorded calls nothing."""
    in_flight_at_kill: int = 0
    in_flight_ran_twice: int = 0
    missing_executions: int = 0
    problems: list[str] = field(default_factory=list)
    finished_at: float | None = None
    retried_steps: int = 0
    """Steps claimed more than once (a kill, a timeout, a retried error)."""
    timeline: str | None = None
    """Where a run that ended without its answer spent its time (see :func:`timeline`)."""


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
    duplicated_runs: Collection[str] = frozenset(),
) -> Verdict:
    """The verdict on one run (``killed``: keys of its steps in flight at a kill;
    ``duplicated_runs``: the runs whose step pushes the front sent twice)."""
    if run is None:
        return Verdict("?", ref, template, "lost", problems=["no run record"])
    verdict = Verdict(run.run_id, ref, template, run.status.value, finished_at=run.finished_at,
                      stop_reason=run.stop_reason.value if run.stop_reason else None)
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
    _check_executions(verdict, run, steps, model, tools, killed, duplicated_runs)
    verdict.retried_steps = sum(1 for s in steps if s.attempts > 1)
    if run.status.terminal and run.stop_reason is not StopReason.ANSWERED:
        verdict.timeline = timeline(run, steps, model.faults_by_ref.get(ref, Counter()), killed)
    return verdict


def timeline(run: RunRecord, steps: list[StepRecord], faults: Counter[str],
             killed: set[str]) -> str:
    """One line on where a run's time went, seconds from its start: each step's creation,
    last claim and end, its attempts, and the faults injected into the run."""
    began = run.started_at or run.created_at

    def at(t: float | None) -> str:
        return "-" if not t else f"{t - began:.1f}"

    parts = [f"{s.key} {s.kind}:{s.name} x{s.attempts} {at(s.created_at)}/{at(s.started_at)}/"
             f"{at(s.completed_at)}{' killed' if s.key in killed else ''}" for s in steps]
    return (f"ended {at(run.finished_at)} s ({run.stop_reason.value if run.stop_reason else '-'}"
            f"{', ' + run.error[:80] if run.error else ''}); faults {dict(faults) or '-'}; steps "
            "created/claimed/done: " + ("; ".join(parts) or "none"))


def _check_history(verdict: Verdict, run: RunRecord, steps: list[StepRecord],
                   transcript: Transcript, references: dict[RefKey, Reference],
                   template: str) -> None:
    mine = segments_of(transcript, verdict.ref)
    found = roles(mine[0].contents) if mine else ()
    broken = _alternates(found) + sum(len(s.contents) for s in mine[1:])
    if len(mine) > 1:
        verdict.problems.append(f"its turn is in the transcript {len(mine)} times")
    models = [s for s in steps if s.kind == "model"]
    turns = [s.turn for s in models]
    if turns != list(range(len(turns))):
        verdict.gaps += 1
        verdict.problems.append(f"model turns {turns} are not contiguous")
    if run.status is not RunStatus.COMPLETED or run.stop_reason is not StopReason.ANSWERED:
        # Failed, or stopped by a budget: no fault-free run to compare with.
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
    last = segments(transcript)[-1] if transcript.contents else None
    if last is not None and last.ref == verdict.ref and transcript.tail != (
            f"{run.run_id}/{models[-1].key if models else ''}"):
        verdict.problems.append(f"transcript tail {transcript.tail!r}")
    verdict.history_ok = (verdict.recorded_duplicates == 0 and verdict.gaps == 0
                          and not [p for p in verdict.problems if "answer" not in p])


def _check_executions(verdict: Verdict, run: RunRecord, steps: list[StepRecord],
                      model: ModelEvidence, tools: Counter[tuple[str, str]],
                      killed: set[str], duplicated_runs: Collection[str] = frozenset()) -> None:
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
        if step.unclaimed and count > 1 and run.run_id in duplicated_runs:
            verdict.overlapping_calls += count - 1
            count = 1
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


@dataclass
class ConversationVerdict:
    """One conversation: its runs in the order asked, and what its transcript shows."""

    conversation_id: str
    runs: list[str]
    overwritten: list[str] = field(default_factory=list)
    """Refs of completed runs whose turn is not in the transcript once, whole, with its answer."""
    order_problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.overwritten and not self.order_problems


def check_conversation(conversation_id: str, runs: list[tuple[str, RunRecord | None]],
                       transcript: Transcript) -> ConversationVerdict:
    """``runs``: (ref, run record) of every run asked in the conversation."""
    known = sorted(((ref, run) for ref, run in runs if run is not None),
                   key=lambda item: item[1].created_at)
    verdict = ConversationVerdict(conversation_id, [ref for ref, _ in known])
    parts = segments(transcript)
    for ref, run in known:
        if run.status is not RunStatus.COMPLETED:
            continue
        mine = [s for s in parts if s.ref == ref]
        if len(mine) != 1:
            verdict.overwritten.append(f"{ref}: its turn is in the transcript {len(mine)} times")
        elif run.answer is not None and normalize_answer(final_text(mine[0].contents)) != (
                normalize_answer(run.answer)):
            verdict.overwritten.append(f"{ref}: its turn in the transcript does not end in its "
                                       "answer")
    # Started order is the queue's order (the commit that created each run decides it, not
    # its created_at, which two racing ingests may invert).
    started = sorted(((ref, run) for ref, run in known if run.started_at is not None),
                     key=lambda item: item[1].started_at or 0.0)
    for (before, prior), (ref, run) in itertools.pairwise(started):
        if prior.finished_at is None or (run.started_at or 0.0) < prior.finished_at - 1e-3:
            verdict.order_problems.append(f"{ref} started before {before} ended")
    written = [s.ref for s in parts]
    expected = [ref for ref, _ in started if ref in written]
    if [ref for ref in written if ref in expected] != expected or None in written:
        verdict.order_problems.append(f"transcript holds the turns in the order {written}, "
                                      f"the runs started in the order {expected}")
    return verdict
