"""The checks a case can name that are ackloop's own, as Pydantic Evals evaluators.

Pydantic Evals brings the answer checks that compare values (``Equals``, ``EqualsExpected``,
``Contains``, ``IsInstance``); these read what the run did (:class:`~ackloop.evals.facts.RunFacts`,
which the eval's task leaves in the case's attributes under ``run``). Each returns assertions
(pass or fail, with the reason that a report shows) and, where partial credit means something,
a score in [0, 1]. In a dataset file a check is named by its class name::

    evaluators:
      - Contains: Norman
      - Trajectory: {calls: [get_ip_address, get_location_info], mode: in_order}
      - Budget: {model_calls: 4, cost_usd: 0.01}
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pydantic_evals.evaluators import EvaluationReason, Evaluator, EvaluatorContext

from ackloop.domain import patterns
from ackloop.evals.facts import Call, RunFacts
from ackloop.evals.matchers import (
    MODES,
    ExpectedCall,
    Mode,
    check_matcher,
    match_trajectory,
    matches,
)

Outputs = dict[str, EvaluationReason | float | bool]


def facts_of(ctx: EvaluatorContext[Any, Any, Any]) -> RunFacts:
    """The run's facts the task recorded for this case."""
    value = ctx.attributes.get("run")
    if isinstance(value, RunFacts):
        return value
    if isinstance(value, dict):
        data = dict(value)
        data["calls"] = [Call(**c) for c in data.get("calls") or []]
        return RunFacts(**data)
    raise LookupError("the case has no run recorded (its task did not run it)")


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False,
                                                           sort_keys=True, default=str)


@dataclass(repr=False)
class Status(Evaluator[Any, Any, Any]):
    """The run ended as expected: ``completed`` (its default: answered, or stopped by a
    budget when ``stop_reason`` says so), ``failed``, ``cancelled``. Every case has one: the
    eval adds ``Status()`` to a case that names none."""

    status: str = "completed"
    stop_reason: str | None = None

    def evaluate(self, ctx: EvaluatorContext[Any, Any, Any]) -> Outputs:
        run = facts_of(ctx)
        ok = run.status == self.status and (
            run.stop_reason == self.stop_reason if self.stop_reason is not None
            else self.status != "completed" or run.answered)
        said = f"the run {run.status}" + (f" ({run.stop_reason})" if run.stop_reason else "")
        if run.error:
            said += f": {run.error}"
        wanted = self.status + (f" ({self.stop_reason})" if self.stop_reason else "")
        return {"status": EvaluationReason(ok, None if ok else f"{said}; expected {wanted}")}


@dataclass(repr=False)
class Regex(Evaluator[Any, Any, Any]):
    """The answer (or the structured output, as JSON) has a match of ``pattern`` (RE2)."""

    pattern: str
    evaluation_name: str | None = field(default=None)

    def __post_init__(self) -> None:
        patterns.compiled(self.pattern)

    def evaluate(self, ctx: EvaluatorContext[Any, Any, Any]) -> EvaluationReason:
        text = _text(ctx.output)
        ok = patterns.search(self.pattern, text)
        return EvaluationReason(ok, None if ok else
                                f"no match of /{self.pattern}/ in {text[:200]!r}")


@dataclass(repr=False)
class MatchesSchema(Evaluator[Any, Any, Any]):
    """The answer, read as JSON when it is text, is valid under the JSON schema ``schema``."""

    schema: dict[str, Any]
    evaluation_name: str | None = field(default=None)

    def __post_init__(self) -> None:
        import jsonschema

        jsonschema.Draft202012Validator.check_schema(self.schema)

    def evaluate(self, ctx: EvaluatorContext[Any, Any, Any]) -> EvaluationReason:
        import jsonschema

        value = ctx.output
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError as exc:
                return EvaluationReason(False, f"the answer is not JSON: {exc}")
        errors = sorted(jsonschema.Draft202012Validator(self.schema).iter_errors(value),
                        key=lambda e: list(e.path))
        if not errors:
            return EvaluationReason(True)
        return EvaluationReason(False, "; ".join(
            f"{'/'.join(map(str, e.path)) or '(root)'}: {e.message}" for e in errors[:5]))


@dataclass(repr=False)
class Output(Evaluator[Any, Any, Any]):
    """The agent's structured output (``Agent(output=...)``) has these fields, each matching
    its matcher (a value, or ``{"$regex": ...}``, ``{"$gte": ...}``...:
    :mod:`ackloop.evals.matchers`); fields not named are not checked."""

    fields: dict[str, Any]

    def __post_init__(self) -> None:
        check_matcher(self.fields)

    def evaluate(self, ctx: EvaluatorContext[Any, Any, Any]) -> Outputs:
        output = facts_of(ctx).output
        if not isinstance(output, dict):
            return {"output": EvaluationReason(False, "the run has no structured output")}
        wrong = [f"{name}: {output.get(name)!r} does not match {matcher!r}"
                 for name, matcher in self.fields.items() if not matches({name: matcher}, output)]
        score = 1 - len(wrong) / len(self.fields) if self.fields else 1.0
        return {"output": EvaluationReason(not wrong, "; ".join(wrong) or None),
                "output_score": score}


@dataclass(repr=False)
class Trajectory(Evaluator[Any, Any, Any]):
    """The tool calls made (the child runs' included, each after the call that started it)
    against ``calls``: ``exact``, ``in_order`` (others between allowed) or ``any_order``.
    ``forbidden`` tools must not be called at all. Gives an assertion with the diff as its
    reason and a score (the share of expected calls matched)."""

    calls: list[Any] = field(default_factory=list)
    mode: Mode = "in_order"
    forbidden: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"trajectory mode {self.mode!r}; known: {', '.join(MODES)}")
        self.expected = [ExpectedCall.of(c) for c in self.calls]

    def evaluate(self, ctx: EvaluatorContext[Any, Any, Any]) -> Outputs:
        made = facts_of(ctx).calls
        found = match_trajectory(self.expected, made, self.mode)
        lines = list(found.lines)
        banned = [c for c in made if c.name in self.forbidden]
        lines += [f"  ! {c.label()}  (forbidden)" for c in banned]
        return {"trajectory": EvaluationReason(found.passed and not banned,
                                               None if found.passed and not banned
                                               else "\n".join(lines)),
                "trajectory_score": found.score}


@dataclass(repr=False)
class ForbiddenTools(Evaluator[Any, Any, Any]):
    """None of these tools was called, by the run or any run below it."""

    tools: list[str]

    def evaluate(self, ctx: EvaluatorContext[Any, Any, Any]) -> Outputs:
        banned = [c.label() for c in facts_of(ctx).calls if c.name in self.tools]
        return {"forbidden_tools": EvaluationReason(not banned, "called: " + "; ".join(banned)
                                                    if banned else None)}


@dataclass(repr=False)
class Children(Evaluator[Any, Any, Any]):
    """The child runs started (the sub-agents called: ``Agent.as_tool``), by agent, compared
    as a trajectory is (``any_order`` by default; ``exact`` also fixes how many)."""

    agents: list[str]
    mode: Mode = "any_order"

    def evaluate(self, ctx: EvaluatorContext[Any, Any, Any]) -> Outputs:
        started = [Call(name=a, args={}, step="") for a in facts_of(ctx).children]
        found = match_trajectory([ExpectedCall(a) for a in self.agents], started, self.mode)
        return {"children": EvaluationReason(found.passed, None if found.passed
                                             else "child runs: " + found.reason())}


@dataclass(repr=False)
class Handoffs(Evaluator[Any, Any, Any]):
    """The conversation was handed to these agents, in this order (and to no other)."""

    agents: list[str]

    def evaluate(self, ctx: EvaluatorContext[Any, Any, Any]) -> Outputs:
        made = facts_of(ctx).handoffs
        ok = made == list(self.agents)
        return {"handoffs": EvaluationReason(ok, None if ok else
                                             f"handed to {made or 'nobody'}; expected "
                                             f"{list(self.agents) or 'nobody'}")}


@dataclass(repr=False)
class Budget(Evaluator[Any, Any, Any]):
    """What the run spent, its child runs' included, within bounds: ``cost_usd``,
    ``model_calls``, ``tool_calls``, ``tokens``, ``seconds`` (from its creation to its end,
    waits included); ``approval``: whether a call of it waited for a person's decision
    (True: one must have; False: none may)."""

    cost_usd: float | None = None
    model_calls: int | None = None
    tool_calls: int | None = None
    tokens: int | None = None
    seconds: float | None = None
    approval: bool | None = None

    def evaluate(self, ctx: EvaluatorContext[Any, Any, Any]) -> Outputs:
        run = facts_of(ctx)
        out: Outputs = {}
        spent = {"cost_usd": run.cost_usd, "model_calls": run.model_calls,
                 "tool_calls": run.tool_calls, "tokens": run.tokens,
                 "seconds": run.wall_seconds}
        for name, used in spent.items():
            bound = getattr(self, name)
            if bound is not None:
                ok = used <= bound
                out[f"budget_{name}"] = EvaluationReason(
                    ok, None if ok else f"{name}: {used:g} spent, at most {bound:g} allowed")
        if self.approval is not None:
            waited = bool(run.approvals)
            ok = waited == self.approval
            out["budget_approval"] = EvaluationReason(ok, None if ok else (
                f"waited for approval ({', '.join(run.approvals)})" if waited
                else "no call waited for an approval"))
        return out


CHECKS: tuple[type[Evaluator[Any, Any, Any]], ...] = (
    Status, Regex, MatchesSchema, Output, Trajectory, ForbiddenTools, Children, Handoffs,
    Budget)
"""ackloop's checks, which a dataset file names (besides Pydantic Evals' own and the judge)."""
